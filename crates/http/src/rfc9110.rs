//! HTTP semantics that decide a plain response: preconditions (RFC 9110
//! §13) and byte ranges (§14). Pure functions of headers and the file's
//! validators, so every rule is a table test.

use std::time::SystemTime;

/// What the preconditions decide before ranges are considered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precondition {
    Proceed,
    NotModified,
    Failed,
}

/// The validators of the selected representation.
#[derive(Debug, Clone)]
pub struct Validators<'a> {
    /// Strong ETag with quotes, e.g. `"5f3a-1000"`.
    pub etag: &'a str,
    pub last_modified: SystemTime,
}

/// Request headers that matter here, as raw strings.
#[derive(Debug, Clone, Copy, Default)]
pub struct Conditionals<'a> {
    pub if_match: Option<&'a str>,
    pub if_none_match: Option<&'a str>,
    pub if_modified_since: Option<&'a str>,
    pub if_unmodified_since: Option<&'a str>,
}

fn opaque(tag: &str) -> &str {
    tag.trim().trim_start_matches("W/")
}

/// Whether a list header (`*` or comma-separated entity tags) matches.
fn list_matches(list: &str, etag: &str, weak: bool) -> bool {
    list.split(',')
        .map(str::trim)
        .any(|t| t == "*" || (weak && opaque(t) == opaque(etag)) || (!weak && !t.starts_with("W/") && t == etag))
}

/// Seconds resolution, as HTTP dates carry.
fn secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// RFC 9110 §13.2.2 steps 1–4 for GET and HEAD.
pub fn evaluate(c: &Conditionals<'_>, v: &Validators<'_>) -> Precondition {
    if let Some(im) = c.if_match {
        if !list_matches(im, v.etag, false) {
            return Precondition::Failed;
        }
    } else if let Some(t) = c.if_unmodified_since.and_then(|s| httpdate::parse_http_date(s).ok())
        && secs(v.last_modified) > secs(t)
    {
        return Precondition::Failed;
    }
    if let Some(inm) = c.if_none_match {
        if list_matches(inm, v.etag, true) {
            return Precondition::NotModified;
        }
    } else if let Some(t) = c.if_modified_since.and_then(|s| httpdate::parse_http_date(s).ok())
        && secs(v.last_modified) <= secs(t)
    {
        return Precondition::NotModified;
    }
    Precondition::Proceed
}

/// §13.1.5: a Range applies only if If-Range is absent or matches exactly
/// (strong ETag comparison, or the exact Last-Modified date).
pub fn if_range_allows(if_range: Option<&str>, v: &Validators<'_>) -> bool {
    match if_range.map(str::trim) {
        None => true,
        Some(t) if t.starts_with('"') => t == v.etag,
        Some(t) if t.starts_with("W/") => false,
        Some(date) => httpdate::parse_http_date(date).is_ok_and(|d| secs(d) == secs(v.last_modified)),
    }
}

/// The outcome of a Range header against a representation of `size` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ranges {
    /// No usable Range header: send the whole representation (200).
    Whole,
    /// Send these inclusive byte ranges (206): disjoint and not adjacent,
    /// in the order asked (ascending once any had to be merged).
    Parts(Vec<(u64, u64)>),
    /// None of the ranges overlaps the representation (416).
    Unsatisfiable,
}

/// Most parts one response may have, counted once overlapping and
/// adjacent ranges are merged; more is treated as abuse (§14.2 lets a
/// server refuse "many small ranges") and answered 416. Ranges that merge
/// into fewer parts are served however many were asked: the request-head
/// size limit already bounds what parsing them costs.
pub const MAX_RANGES: usize = 64;

/// Resolves a `Range` header. Syntax we do not understand is ignored, as
/// §14.2 requires; a suffix longer than the file selects the whole file.
/// Overlapping and adjacent ranges are merged (§14.6 allows it), and ranges
/// that add up to more than the file get the whole file instead (as nginx
/// does): no request can make a response larger than the file plus
/// multipart overhead, nor read a byte of storage twice. More than
/// [`MAX_RANGES`] parts after merging are unsatisfiable.
pub fn resolve_ranges(header: Option<&str>, size: u64) -> Ranges {
    match parse_ranges(header, size) {
        Ranges::Parts(parts) => coalesce(parts, size),
        other => other,
    }
}

fn coalesce(mut parts: Vec<(u64, u64)>, size: u64) -> Ranges {
    let total = parts.iter().map(|&(s, e)| e - s + 1).fold(0u64, u64::saturating_add);
    if total > size {
        return Ranges::Whole;
    }
    let mut sorted = parts.clone();
    sorted.sort_unstable();
    if sorted.windows(2).any(|w| w[1].0 <= w[0].1.saturating_add(1)) {
        parts.clear();
        for (s, e) in sorted {
            match parts.last_mut() {
                Some(last) if s <= last.1.saturating_add(1) => last.1 = last.1.max(e),
                _ => parts.push((s, e)),
            }
        }
    }
    if parts.len() > MAX_RANGES {
        return Ranges::Unsatisfiable;
    }
    Ranges::Parts(parts)
}

fn parse_ranges(header: Option<&str>, size: u64) -> Ranges {
    let Some(spec) = header.and_then(|h| h.trim().strip_prefix("bytes=")) else { return Ranges::Whole };
    let mut parts = Vec::new();
    let mut any = false;
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        any = true;
        let Some((a, b)) = item.split_once('-') else { return Ranges::Whole };
        let range = match (a.trim(), b.trim()) {
            ("", n) => match n.parse::<u64>() {
                Ok(0) => None,
                Ok(n) if size > 0 => Some((size.saturating_sub(n), size - 1)),
                Ok(_) => None,
                Err(_) => return Ranges::Whole,
            },
            (a, b) => {
                let Ok(start) = a.parse::<u64>() else { return Ranges::Whole };
                let end = if b.is_empty() {
                    u64::MAX
                } else {
                    match b.parse::<u64>() {
                        Ok(e) if e >= start => e,
                        _ => return Ranges::Whole,
                    }
                };
                (start < size).then(|| (start, end.min(size - 1)))
            }
        };
        parts.extend(range);
    }
    if !any {
        return Ranges::Whole;
    }
    if parts.is_empty() { Ranges::Unsatisfiable } else { Ranges::Parts(parts) }
}

/// RFC 9112 §3.2: an HTTP/1.1 request carries exactly one `Host` field, and
/// its value is `uri-host [ ":" port ]` (empty when the target has no
/// authority). `values` are the request's `Host` field values.
pub fn host_ok<'a>(mut values: impl Iterator<Item = &'a [u8]>) -> bool {
    match (values.next(), values.next()) {
        (Some(v), None) => host_value_ok(v),
        _ => false,
    }
}

fn host_value_ok(v: &[u8]) -> bool {
    let (host, port) = match v.strip_prefix(b"[") {
        // IP-literal: hex digits, colons, dots (and IPvFuture's few extras).
        Some(rest) => match rest.iter().position(|&b| b == b']') {
            Some(end) if rest[..end].iter().all(|b| b.is_ascii_hexdigit() || b":.vV".contains(b)) => {
                (&rest[..0], &rest[end + 1..])
            }
            _ => return false,
        },
        None => match v.iter().rposition(|&b| b == b':') {
            Some(i) => (&v[..i], &v[i..]),
            None => (v, &v[..0]),
        },
    };
    let reg_name = |b: &u8| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=%".contains(b);
    let port_ok = match port {
        [] => true,
        [b':', digits @ ..] => digits.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    host.iter().all(reg_name) && port_ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn v() -> Validators<'static> {
        Validators { etag: "\"abc\"", last_modified: SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000) }
    }
    const BEFORE: &str = "Sun, 11 Jan 1970 13:46:39 GMT"; // 999_999
    const AT: &str = "Mon, 12 Jan 1970 13:46:40 GMT"; // 1_000_000

    #[test]
    fn preconditions_table() {
        struct Case {
            name: &'static str,
            c: Conditionals<'static>,
            want: Precondition,
        }
        let c = Conditionals::default;
        let cases = [
            Case { name: "none", c: c(), want: Precondition::Proceed },
            Case {
                name: "if-match hit",
                c: Conditionals { if_match: Some("\"x\", \"abc\""), ..c() },
                want: Precondition::Proceed,
            },
            Case { name: "if-match star", c: Conditionals { if_match: Some("*"), ..c() }, want: Precondition::Proceed },
            Case {
                name: "if-match miss",
                c: Conditionals { if_match: Some("\"x\""), ..c() },
                want: Precondition::Failed,
            },
            Case {
                name: "if-match weak never",
                c: Conditionals { if_match: Some("W/\"abc\""), ..c() },
                want: Precondition::Failed,
            },
            Case {
                name: "ius older",
                c: Conditionals { if_unmodified_since: Some(BEFORE), ..c() },
                want: Precondition::Failed,
            },
            Case {
                name: "ius same",
                c: Conditionals { if_unmodified_since: Some(AT), ..c() },
                want: Precondition::Proceed,
            },
            Case {
                name: "inm weak hit",
                c: Conditionals { if_none_match: Some("W/\"abc\""), ..c() },
                want: Precondition::NotModified,
            },
            Case {
                name: "inm miss",
                c: Conditionals { if_none_match: Some("\"zz\""), ..c() },
                want: Precondition::Proceed,
            },
            Case {
                name: "ims same",
                c: Conditionals { if_modified_since: Some(AT), ..c() },
                want: Precondition::NotModified,
            },
            Case {
                name: "ims older",
                c: Conditionals { if_modified_since: Some(BEFORE), ..c() },
                want: Precondition::Proceed,
            },
            Case {
                name: "ims bad date",
                c: Conditionals { if_modified_since: Some("yesterday"), ..c() },
                want: Precondition::Proceed,
            },
            Case {
                name: "inm wins over ims",
                c: Conditionals { if_none_match: Some("\"zz\""), if_modified_since: Some(AT), ..c() },
                want: Precondition::Proceed,
            },
        ];
        for case in cases {
            assert_eq!(evaluate(&case.c, &v()), case.want, "{}", case.name);
        }
    }

    #[test]
    fn if_range() {
        assert!(if_range_allows(None, &v()));
        assert!(if_range_allows(Some("\"abc\""), &v()));
        assert!(!if_range_allows(Some("\"old\""), &v()));
        assert!(!if_range_allows(Some("W/\"abc\""), &v()));
        assert!(if_range_allows(Some(AT), &v()));
        assert!(!if_range_allows(Some(BEFORE), &v()));
    }

    #[test]
    fn host_fields() {
        let one = |v: &'static str| host_ok(std::iter::once(v.as_bytes()));
        for good in ["example.com", "example.com:8080", "127.0.0.1:80", "[::1]:8080", "[::1]", "", "a-b.c_d~"] {
            assert!(one(good), "{good:?}");
        }
        for bad in ["exa mple.com", "a/b", "host:80x", "[::1", "[::1]x", "a\\b", "h@st", "h:1:2"] {
            assert!(!one(bad), "{bad:?}");
        }
        assert!(!host_ok(std::iter::empty()), "missing");
        assert!(!host_ok([&b"a"[..], &b"a"[..]].into_iter()), "twice");
    }

    #[test]
    fn ranges_table() {
        use Ranges::*;
        let cases: [(Option<&str>, u64, Ranges); 19] = [
            (None, 100, Whole),
            (Some("bytes=0-9"), 100, Parts(vec![(0, 9)])),
            (Some("bytes=90-"), 100, Parts(vec![(90, 99)])),
            (Some("bytes=95-200"), 100, Parts(vec![(95, 99)])),
            (Some("bytes=-10"), 100, Parts(vec![(90, 99)])),
            (Some("bytes=-1000"), 100, Parts(vec![(0, 99)])),
            (Some("bytes=0-0,-1"), 100, Parts(vec![(0, 0), (99, 99)])),
            (Some("bytes=100-"), 100, Unsatisfiable),
            (Some("bytes=-0"), 100, Unsatisfiable),
            (Some("bytes=0-"), 0, Unsatisfiable),
            (Some("bytes=5-1"), 100, Whole),
            (Some("items=0-1"), 100, Whole),
            (Some("bytes=a-b"), 100, Whole),
            (Some("bytes=200-300, 0-1"), 100, Parts(vec![(0, 1)])),
            // Merged when they overlap or touch; ascending once merged.
            (Some("bytes=50-59,0-9,5-19"), 100, Parts(vec![(0, 19), (50, 59)])),
            (Some("bytes=10-19,20-29"), 100, Parts(vec![(10, 29)])),
            (Some("bytes=50-59,0-9"), 100, Parts(vec![(50, 59), (0, 9)])),
            // More than the file in all: the whole file, once.
            (Some("bytes=0-,0-"), 100, Whole),
            (Some("bytes=0-60,40-99"), 100, Whole),
        ];
        for (h, size, want) in cases {
            assert_eq!(resolve_ranges(h, size), want, "{h:?} of {size}");
        }
        let many = format!("bytes={}", (0..65).map(|i| format!("{}-{}", 2 * i, 2 * i)).collect::<Vec<_>>().join(","));
        assert_eq!(resolve_ranges(Some(&many), 200), Unsatisfiable);
        let whole_64_times = format!("bytes={}", vec!["0-"; 64].join(","));
        assert_eq!(resolve_ranges(Some(&whole_64_times), 256 << 20), Whole);
    }

    #[test]
    fn many_ranges_that_merge_into_few_are_served() {
        use Ranges::*;
        let list = |items: Vec<String>| format!("bytes={}", items.join(","));
        // The limit is on the parts sent, counted after merging.
        let same_byte = list(vec!["0-0".to_owned(); 100]);
        assert_eq!(resolve_ranges(Some(&same_byte), 200), Parts(vec![(0, 0)]));
        let touching = list((0..130).map(|i| format!("{i}-{i}")).collect());
        assert_eq!(resolve_ranges(Some(&touching), 200), Parts(vec![(0, 129)]));
        let twice_each = list((0..128).map(|i| format!("{0}-{0}", 3 * (i / 2))).collect());
        assert_eq!(resolve_ranges(Some(&twice_each), 200), Parts((0..64).map(|i| (3 * i, 3 * i)).collect()));
        let whole_65_times = list(vec!["0-".to_owned(); 65]);
        assert_eq!(resolve_ranges(Some(&whole_65_times), 256 << 20), Whole);
        // Still more than 64 once merged: refused.
        let apart = list((0..65).map(|i| format!("{}-{}", 3 * i, 3 * i)).collect());
        assert_eq!(resolve_ranges(Some(&apart), 200), Unsatisfiable);
    }
}
