//! HTTP caching rules (RFC 9111) for a shared cache: may a response be
//! stored, how long is it fresh, which request headers select it (Vary),
//! and how a 304 refreshes it. Pure functions of headers and times passed
//! in, so every rule is a table test; the origin tier does the I/O.

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use std::time::{Duration, SystemTime};

/// Heuristic freshness never exceeds this (RFC 9111 §4.2.2 suggests a
/// fraction of the time since modification; a day bounds a wrong guess).
const HEURISTIC_CAP: Duration = Duration::from_secs(24 * 3600);

/// The Cache-Control directives a shared cache acts on (§5.2). Unknown
/// directives are ignored; the field-name forms of `private` and `no-cache`
/// are treated as the unqualified ones, which is the conservative reading.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheControl {
    pub no_store: bool,
    pub no_cache: bool,
    pub private: bool,
    pub public: bool,
    pub must_revalidate: bool,
    pub max_age: Option<u64>,
    pub s_maxage: Option<u64>,
    /// Request: the response must stay fresh this much longer (§5.2.1.3).
    pub min_fresh: Option<u64>,
    /// Request: a stale response will do, stale by at most this much
    /// (`Some(None)`: by any amount) (§5.2.1.2).
    pub max_stale: Option<Option<u64>>,
    /// Request: answer from storage or with 504 (§5.2.1.7).
    pub only_if_cached: bool,
    /// Response: may be served this long after going stale while it is
    /// revalidated in the background (RFC 5861 §3).
    pub stale_while_revalidate: Option<u64>,
    /// Either: may be served this long after going stale when the origin
    /// fails (RFC 5861 §4).
    pub stale_if_error: Option<u64>,
}

impl CacheControl {
    /// The origin said a shared cache may hand the response to anyone
    /// (`public` or `s-maxage`): what lets a response to credentials or
    /// with a cookie be stored.
    pub fn shared_explicitly(&self) -> bool {
        self.public || self.s_maxage.is_some()
    }

    /// A request's Cache-Control.
    pub fn parse(h: &HeaderMap) -> Self {
        Self::parse_field(h, &header::CACHE_CONTROL)
    }

    /// A response's caching policy for this cache: its `CDN-Cache-Control`
    /// when it has one (RFC 9213 §2.1: Cache-Control and Expires are then
    /// ignored), else its Cache-Control. The second value says which.
    pub fn of_response(res: &HeaderMap) -> (Self, bool) {
        let targeted = HeaderName::from_static("cdn-cache-control");
        let values: Vec<&str> = res.get_all(&targeted).iter().filter_map(|v| v.to_str().ok()).collect();
        let joined = values.join(",");
        // §2.1: an empty field, or one that does not parse as a Structured
        // Field Dictionary, is as if absent.
        match !joined.trim().is_empty()
            && values.len() == res.get_all(&targeted).iter().count()
            && sf_dictionary(&joined)
        {
            true => (Self::parse_field(res, &targeted), true),
            false => (Self::parse_field(res, &header::CACHE_CONTROL), false),
        }
    }

    fn parse_field(h: &HeaderMap, field: &HeaderName) -> Self {
        let mut cc = CacheControl::default();
        let items = h.get_all(field).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(','));
        for item in items {
            let (name, value) = match item.split_once('=') {
                Some((n, v)) => (n.trim(), Some(v.trim().trim_matches('"'))),
                None => (item.trim(), None),
            };
            // A malformed number makes the response stale (§4.2.1), not fresh.
            let secs = || value.map(|v| v.parse::<u64>().unwrap_or(0));
            // Compared in place, not lowercased into a new String: this runs
            // on the hit path for every request that carries Cache-Control.
            let is = |d: &str| name.eq_ignore_ascii_case(d);
            if is("no-store") {
                cc.no_store = true;
            } else if is("no-cache") {
                cc.no_cache = true;
            } else if is("private") {
                cc.private = true;
            } else if is("public") {
                cc.public = true;
            } else if is("must-revalidate") || is("proxy-revalidate") {
                cc.must_revalidate = true;
            } else if is("max-age") {
                cc.max_age = secs();
            } else if is("s-maxage") {
                cc.s_maxage = secs();
            } else if is("min-fresh") {
                cc.min_fresh = secs();
            } else if is("max-stale") {
                // A malformed value allows no staleness rather than any.
                cc.max_stale = Some(value.map(|v| v.parse::<u64>().unwrap_or(0)));
            } else if is("only-if-cached") {
                cc.only_if_cached = true;
            } else if is("stale-while-revalidate") {
                cc.stale_while_revalidate = secs();
            } else if is("stale-if-error") {
                cc.stale_if_error = secs();
            }
        }
        cc
    }
}

/// Whether `v` is a Structured Field Dictionary (RFC 8941 §3.2) whose
/// cache directives have the types RFC 9213 gives them: lowercase keys,
/// integers for the ones that count seconds. Parameters are allowed and
/// not checked; string values may not contain commas.
fn sf_dictionary(v: &str) -> bool {
    v.split(',').all(|member| {
        let member = member.trim().split(';').next().unwrap_or("");
        let (key, value) = match member.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (member, None),
        };
        let mut chars = key.chars();
        let key_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase() || c == '*')
            && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_-.*".contains(c));
        let counts_seconds = ["max-age", "s-maxage", "stale-while-revalidate", "stale-if-error"].contains(&key);
        let integer = |v: &str| {
            let digits = v.strip_prefix('-').unwrap_or(v);
            (1..=15).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit())
        };
        key_ok
            && match value {
                None => true,
                Some(v) if counts_seconds => integer(v),
                Some(v) => !v.is_empty(),
            }
    })
}

/// Why a response is not stored (and so is relayed to its one client only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotStored {
    RequestNoStore,
    NoStore,
    Private,
    Authorization,
    /// A response that sets a cookie, or answers a request that carried
    /// one, is personal unless the origin marks it shared.
    Cookie,
    VaryStar,
    Status,
}

/// §3 for a shared cache, for a GET whose response is `status`.
pub fn storable(req: &HeaderMap, status: StatusCode, res: &HeaderMap) -> Result<(), NotStored> {
    let (qc, (rc, targeted)) = (CacheControl::parse(req), CacheControl::of_response(res));
    if qc.no_store {
        return Err(NotStored::RequestNoStore);
    }
    if rc.no_store {
        return Err(NotStored::NoStore);
    }
    if rc.private {
        return Err(NotStored::Private);
    }
    // §3.5: a response to an authenticated request is someone's own unless
    // the origin says it may be shared.
    if req.contains_key(header::AUTHORIZATION) && !(rc.public || rc.s_maxage.is_some() || rc.must_revalidate) {
        return Err(NotStored::Authorization);
    }
    if (req.contains_key(header::COOKIE) || res.contains_key(header::SET_COOKIE)) && !rc.shared_explicitly() {
        return Err(NotStored::Cookie);
    }
    if vary_fields(res).is_none() {
        return Err(NotStored::VaryStar);
    }
    // §3 and §4.2.2: a status is stored when the response says how long it
    // stays fresh, or when its status is one heuristic freshness may apply
    // to (RFC 9110 §15.1).
    let expires = !targeted && res.contains_key(header::EXPIRES);
    let explicit = rc.max_age.is_some() || rc.s_maxage.is_some() || rc.public || expires;
    let heuristic = matches!(status.as_u16(), 200 | 203 | 204 | 206 | 300 | 301 | 308 | 404 | 405 | 410 | 414 | 501);
    if !(heuristic || explicit) {
        return Err(NotStored::Status);
    }
    Ok(())
}

fn date(h: &HeaderMap, name: HeaderName) -> Option<SystemTime> {
    h.get(name).and_then(|v| v.to_str().ok()).and_then(|s| httpdate::parse_http_date(s).ok())
}

fn since(later: SystemTime, earlier: SystemTime) -> Duration {
    later.duration_since(earlier).unwrap_or_default()
}

/// How long a stored response stays fresh and how old it was on arrival.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Freshness {
    pub lifetime: Duration,
    /// `corrected_initial_age` of §4.2.3.
    pub initial_age: Duration,
    pub response_time: SystemTime,
    /// `no-cache`: stored, but every use must be validated first.
    pub always_revalidate: bool,
    /// `must-revalidate` (or `proxy-revalidate`, `s-maxage`): never served
    /// stale, whatever the request allows (§5.2.2.2).
    pub never_stale: bool,
    /// RFC 5861's windows past the lifetime, from the response.
    pub stale_while_revalidate: Duration,
    pub stale_if_error: Duration,
}

impl Freshness {
    /// `request_time` is when the request went to the origin,
    /// `response_time` when its response head arrived.
    pub fn of(res: &HeaderMap, request_time: SystemTime, response_time: SystemTime) -> Self {
        let (cc, targeted) = CacheControl::of_response(res);
        let date_value = date(res, header::DATE).unwrap_or(response_time);
        let lifetime = if let Some(s) = cc.s_maxage.or(cc.max_age) {
            Duration::from_secs(s)
        } else if !targeted && res.contains_key(header::EXPIRES) {
            // An invalid Expires (e.g. "0") means already expired (§5.3).
            date(res, header::EXPIRES).map(|e| since(e, date_value)).unwrap_or_default()
        } else if let Some(lm) = date(res, header::LAST_MODIFIED) {
            (since(date_value, lm) / 10).min(HEURISTIC_CAP)
        } else {
            Duration::ZERO
        };
        let age_value = res
            .get(header::AGE)
            .and_then(|v| v.to_str().ok())
            // §5.1: of a list (a singleton field sent as one), the first member.
            .and_then(|s| s.split(',').next()?.trim().parse::<u64>().ok())
            .map_or(Duration::ZERO, Duration::from_secs);
        let apparent_age = since(response_time, date_value);
        let corrected_age_value = age_value + since(response_time, request_time);
        Freshness {
            lifetime,
            initial_age: apparent_age.max(corrected_age_value),
            response_time,
            always_revalidate: cc.no_cache,
            never_stale: cc.must_revalidate || cc.s_maxage.is_some(),
            stale_while_revalidate: Duration::from_secs(cc.stale_while_revalidate.unwrap_or(0)),
            stale_if_error: Duration::from_secs(cc.stale_if_error.unwrap_or(0)),
        }
    }

    /// `current_age` of §4.2.3.
    pub fn age(&self, now: SystemTime) -> Duration {
        self.initial_age + since(now, self.response_time)
    }

    /// Whether the stored response may answer this request without asking
    /// the origin: fresh, and within the request's own `max-age` (§5.2.1).
    /// A request's `min-fresh` and `max-stale` move the line (§5.2.1).
    pub fn usable(&self, req: &HeaderMap, now: SystemTime) -> bool {
        let qc = CacheControl::parse(req);
        let age = self.age(now);
        let fresh = age + Duration::from_secs(qc.min_fresh.unwrap_or(0)) < self.lifetime;
        let stale_ok = !self.never_stale
            && match qc.max_stale {
                Some(None) => true,
                Some(Some(s)) => age <= self.lifetime + Duration::from_secs(s),
                None => false,
            };
        !self.always_revalidate
            && !qc.no_cache
            && (fresh || stale_ok)
            && qc.max_age.is_none_or(|m| age <= Duration::from_secs(m))
    }

    /// Stale, but within the response's `stale-while-revalidate`: may be
    /// served while the tier revalidates it in the background.
    pub fn serve_while_revalidating(&self, req: &HeaderMap, now: SystemTime) -> bool {
        let qc = CacheControl::parse(req);
        let age = self.age(now);
        !self.always_revalidate
            && !self.never_stale
            && !qc.no_cache
            && age < self.lifetime + self.stale_while_revalidate
    }

    /// Stale, but within the `stale-if-error` of the response or of the
    /// request: may be served when the origin fails or answers 5xx.
    pub fn serve_on_error(&self, req: &HeaderMap, now: SystemTime) -> bool {
        let asked = CacheControl::parse(req).stale_if_error.map(Duration::from_secs).unwrap_or_default();
        !self.never_stale && self.age(now) < self.lifetime + self.stale_if_error.max(asked)
    }
}

/// The request header names a response varies on; `None` for `Vary: *`,
/// which matches no later request (§4.1).
pub fn vary_fields(res: &HeaderMap) -> Option<Vec<HeaderName>> {
    let mut names = Vec::new();
    for item in res.get_all(header::VARY).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(',')) {
        let item = item.trim();
        if item == "*" {
            return None;
        }
        if let Ok(name) = HeaderName::from_bytes(item.as_bytes()) {
            names.push(name);
        }
    }
    Some(names)
}

/// The values a request has for the varied fields, combined and
/// whitespace-normalised as §4.1 allows, so that equal requests compare equal.
pub fn vary_values(fields: &[HeaderName], req: &HeaderMap) -> Vec<Option<String>> {
    fields
        .iter()
        .map(|f| {
            let values: Vec<&str> = req
                .get_all(f)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(|v| v.split(','))
                .map(str::trim)
                .collect();
            (!values.is_empty()).then(|| values.join(","))
        })
        .collect()
}

/// Whether `req` has the `stored` values of the varied `fields` (as
/// [`vary_values`] would compute them), without allocating: this runs on
/// every hit.
pub fn vary_matches(fields: &[HeaderName], stored: &[Option<String>], req: &HeaderMap) -> bool {
    vary_matches_by(fields, stored, |f| req.get_all(f).iter().map(HeaderValue::as_bytes))
}

/// [`vary_matches`] over any request representation: `values(f)` yields
/// the raw values of the request's field `f`, in order.
pub fn vary_matches_by<'f, 'a, I>(
    fields: &'f [HeaderName],
    stored: &[Option<String>],
    values: impl Fn(&'f HeaderName) -> I,
) -> bool
where
    I: Iterator<Item = &'a [u8]>,
{
    fields.iter().zip(stored).all(|(f, s)| {
        // As `HeaderValue::to_str`: values with other than visible ASCII are skipped.
        let visible = |v: &'a [u8]| v.iter().all(|&b| b == b'\t' || (0x20..0x7f).contains(&b)).then_some(v);
        let mut parts = values(f)
            .filter_map(visible)
            .filter_map(|v| std::str::from_utf8(v).ok())
            .flat_map(|v| v.split(','))
            .map(str::trim);
        match s {
            None => parts.next().is_none(),
            Some(s) => {
                let mut want = s.split(',');
                loop {
                    match (parts.next(), want.next()) {
                        (None, None) => break true,
                        (Some(a), Some(b)) if a == b => {}
                        _ => break false,
                    }
                }
            }
        }
    })
}

/// Headers of a conditional request that revalidates a stored response
/// (§4.3.1): the strong or weak ETag, else Last-Modified.
pub fn revalidation_headers(stored: &HeaderMap) -> HeaderMap {
    let mut h = HeaderMap::new();
    if let Some(etag) = stored.get(header::ETAG) {
        h.insert(header::IF_NONE_MATCH, etag.clone());
    } else if let Some(lm) = stored.get(header::LAST_MODIFIED) {
        h.insert(header::IF_MODIFIED_SINCE, lm.clone());
    }
    h
}

/// A 304 updates the stored headers with the ones it carries (§4.3.4),
/// except the framing headers, which describe the 304 itself.
pub fn merge_not_modified(stored: &HeaderMap, fresh: &HeaderMap) -> HeaderMap {
    let mut merged = stored.clone();
    for name in fresh.keys() {
        if name == header::CONTENT_LENGTH || name == header::CONTENT_RANGE || name == header::TRANSFER_ENCODING {
            continue;
        }
        merged.remove(name);
        for v in fresh.get_all(name) {
            merged.append(name.clone(), v.clone());
        }
    }
    merged
}

/// The Age header for a response served from storage.
pub fn age_header(f: &Freshness, now: SystemTime) -> HeaderValue {
    HeaderValue::from(f.age(now).as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            h.append(HeaderName::from_bytes(n.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
    }

    fn http_date(secs: u64) -> String {
        httpdate::fmt_http_date(at(secs))
    }

    #[test]
    fn cache_control_parses_directives_case_insensitively() {
        let cc = CacheControl::parse(&headers(&[
            ("cache-control", "Max-Age=60, s-maxage=\"30\""),
            ("cache-control", "PRIVATE"),
        ]));
        assert_eq!((cc.max_age, cc.s_maxage, cc.private), (Some(60), Some(30), true));
        assert_eq!(CacheControl::parse(&headers(&[("cache-control", "max-age=abc")])).max_age, Some(0));
        assert!(CacheControl::parse(&headers(&[("cache-control", "no-cache=\"set-cookie\"")])).no_cache);
    }

    #[test]
    fn storability_for_a_shared_cache() {
        struct Case {
            name: &'static str,
            req: &'static [(&'static str, &'static str)],
            status: u16,
            res: &'static [(&'static str, &'static str)],
            want: Result<(), NotStored>,
        }
        let cases = [
            Case { name: "plain 200", req: &[], status: 200, res: &[], want: Ok(()) },
            Case { name: "partial", req: &[], status: 206, res: &[("cache-control", "max-age=5")], want: Ok(()) },
            Case {
                name: "no-store",
                req: &[],
                status: 200,
                res: &[("cache-control", "no-store")],
                want: Err(NotStored::NoStore),
            },
            Case {
                name: "request no-store",
                req: &[("cache-control", "no-store")],
                status: 200,
                res: &[],
                want: Err(NotStored::RequestNoStore),
            },
            Case {
                name: "private",
                req: &[],
                status: 200,
                res: &[("cache-control", "private, max-age=60")],
                want: Err(NotStored::Private),
            },
            Case {
                name: "authorization",
                req: &[("authorization", "Bearer x")],
                status: 200,
                res: &[("cache-control", "max-age=60")],
                want: Err(NotStored::Authorization),
            },
            Case {
                name: "authorization but public",
                req: &[("authorization", "Bearer x")],
                status: 200,
                res: &[("cache-control", "public, max-age=60")],
                want: Ok(()),
            },
            Case {
                name: "vary star",
                req: &[],
                status: 200,
                res: &[("vary", "Accept, *")],
                want: Err(NotStored::VaryStar),
            },
            Case { name: "error status", req: &[], status: 500, res: &[], want: Err(NotStored::Status) },
        ];
        for c in cases {
            let got = storable(&headers(c.req), StatusCode::from_u16(c.status).unwrap(), &headers(c.res));
            assert_eq!(got, c.want, "{}", c.name);
        }
    }

    #[test]
    fn freshness_lifetime_precedence() {
        struct Case {
            name: &'static str,
            res: Vec<(&'static str, String)>,
            lifetime: u64,
        }
        let d = http_date(1000);
        let cases = [
            Case {
                name: "s-maxage wins",
                res: vec![("cache-control", "max-age=10, s-maxage=20".into())],
                lifetime: 20,
            },
            Case {
                name: "max-age over expires",
                res: vec![("cache-control", "max-age=10".into()), ("expires", http_date(1500)), ("date", d.clone())],
                lifetime: 10,
            },
            Case {
                name: "expires minus date",
                res: vec![("expires", http_date(1300)), ("date", d.clone())],
                lifetime: 300,
            },
            Case { name: "invalid expires is stale", res: vec![("expires", "0".into())], lifetime: 0 },
            Case {
                name: "heuristic tenth",
                res: vec![("last-modified", http_date(0)), ("date", d.clone())],
                lifetime: 100,
            },
            Case {
                name: "heuristic capped",
                res: vec![("last-modified", http_date(0)), ("date", http_date(10_000_000))],
                lifetime: 86_400,
            },
            Case { name: "nothing", res: vec![], lifetime: 0 },
        ];
        for c in cases {
            let mut h = HeaderMap::new();
            for (n, v) in &c.res {
                h.append(HeaderName::from_static(n), HeaderValue::from_str(v).unwrap());
            }
            assert_eq!(Freshness::of(&h, at(1000), at(1000)).lifetime, Duration::from_secs(c.lifetime), "{}", c.name);
        }
    }

    #[test]
    fn age_counts_origin_age_delay_and_residence() {
        // Sent at 1000, answered at 1002 with Age 5 and Date 1001.
        let h = headers(&[("age", "5"), ("cache-control", "max-age=10")]);
        let mut h2 = h.clone();
        h2.insert(header::DATE, HeaderValue::from_str(&http_date(1001)).unwrap());
        let f = Freshness::of(&h2, at(1000), at(1002));
        assert_eq!(f.initial_age, Duration::from_secs(7));
        assert_eq!(f.age(at(1004)), Duration::from_secs(9));
        assert!(f.usable(&HeaderMap::new(), at(1004)));
        assert!(!f.usable(&HeaderMap::new(), at(1005)), "age 10 is not < lifetime 10");
        assert!(!f.usable(&headers(&[("cache-control", "max-age=8")]), at(1004)), "request max-age");
        assert!(!f.usable(&headers(&[("cache-control", "no-cache")]), at(1003)), "request no-cache");
        let nc = Freshness::of(&headers(&[("cache-control", "no-cache, max-age=100")]), at(0), at(0));
        assert!(!nc.usable(&HeaderMap::new(), at(1)), "response no-cache always revalidates");
        assert_eq!(age_header(&f, at(1004)), "9");
        let listed = Freshness::of(&headers(&[("age", "7200, 0"), ("cache-control", "max-age=3600")]), at(0), at(0));
        assert_eq!(listed.initial_age, Duration::from_secs(7200), "the first member of a listed Age counts");
    }

    #[test]
    fn cdn_cache_control_takes_the_place_of_cache_control_and_expires() {
        let res = headers(&[
            ("cache-control", "no-store"),
            ("expires", &http_date(10_000)),
            ("cdn-cache-control", "max-age=60"),
        ]);
        assert_eq!(storable(&HeaderMap::new(), StatusCode::OK, &res), Ok(()));
        assert_eq!(Freshness::of(&res, at(0), at(0)).lifetime, Duration::from_secs(60));
        let private = headers(&[("cache-control", "max-age=600"), ("cdn-cache-control", "private")]);
        assert_eq!(storable(&HeaderMap::new(), StatusCode::OK, &private), Err(NotStored::Private));
        let only_cc = headers(&[("cache-control", "max-age=600"), ("cdn-cache-control", " ")]);
        assert_eq!(Freshness::of(&only_cc, at(0), at(0)).lifetime, Duration::from_secs(600), "an empty one is none");
        for invalid in ["max-age=10000, &&&&&", "max-age=\"10000\"", "Max-Age=5", "max-age=1.5"] {
            let res = headers(&[("cache-control", "no-store"), ("cdn-cache-control", invalid)]);
            assert_eq!(storable(&HeaderMap::new(), StatusCode::OK, &res), Err(NotStored::NoStore), "{invalid}");
        }
        assert!(sf_dictionary("max-age=60, no-cache;x=1, private=\"a\""));
    }

    #[test]
    fn requests_and_responses_move_the_line_between_fresh_and_stale() {
        let stored = |cc: &str| Freshness::of(&headers(&[("cache-control", cc)]), at(0), at(0));
        let ask = |cc: &str| headers(&[("cache-control", cc)]);
        let f = stored("max-age=10, stale-while-revalidate=5, stale-if-error=20");
        assert!(f.usable(&HeaderMap::new(), at(9)));
        assert!(!f.usable(&ask("min-fresh=2"), at(9)), "min-fresh wants 2 s more");
        assert!(!f.usable(&HeaderMap::new(), at(12)));
        assert!(f.usable(&ask("max-stale=3"), at(12)) && !f.usable(&ask("max-stale=1"), at(12)));
        assert!(f.usable(&ask("max-stale"), at(1000)), "max-stale without a value takes any staleness");
        assert!(f.serve_while_revalidating(&HeaderMap::new(), at(14)));
        assert!(!f.serve_while_revalidating(&HeaderMap::new(), at(15)));
        assert!(!f.serve_while_revalidating(&ask("no-cache"), at(12)));
        assert!(f.serve_on_error(&HeaderMap::new(), at(29)) && !f.serve_on_error(&HeaderMap::new(), at(30)));
        assert!(f.serve_on_error(&ask("stale-if-error=100"), at(50)), "the request may allow more");
        let strict = stored("max-age=10, must-revalidate, stale-if-error=20");
        assert!(!strict.usable(&ask("max-stale"), at(12)), "must-revalidate: never stale");
        assert!(!strict.serve_on_error(&HeaderMap::new(), at(12)));
        assert!(!stored("s-maxage=10").usable(&ask("max-stale"), at(12)), "s-maxage implies proxy-revalidate");
        assert!(CacheControl::parse(&ask("only-if-cached")).only_if_cached);
    }

    #[test]
    fn vary_selects_by_normalised_request_values() {
        assert_eq!(vary_fields(&headers(&[("vary", "*")])), None);
        let fields = vary_fields(&headers(&[("vary", "Accept-Encoding, accept-language")])).unwrap();
        assert_eq!(fields, vec![header::ACCEPT_ENCODING, header::ACCEPT_LANGUAGE]);
        let a = vary_values(&fields, &headers(&[("accept-encoding", "gzip,  br")]));
        let b = vary_values(&fields, &headers(&[("accept-encoding", "gzip"), ("accept-encoding", "br")]));
        let c = vary_values(&fields, &headers(&[("accept-encoding", "gzip"), ("accept-language", "fr")]));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a, vec![Some("gzip,br".to_owned()), None]);
        let reqs = [
            headers(&[("accept-encoding", "gzip, br")]),
            headers(&[("accept-encoding", "gzip")]),
            headers(&[("accept-encoding", "gzip,br,zstd")]),
            headers(&[("accept-encoding", "gzip,br"), ("accept-language", "fr")]),
            headers(&[("accept-encoding", "")]),
            HeaderMap::new(),
        ];
        for stored in &reqs {
            let sv = vary_values(&fields, stored);
            for req in &reqs {
                assert_eq!(vary_matches(&fields, &sv, req), vary_values(&fields, req) == sv, "{stored:?} vs {req:?}");
            }
        }
    }

    #[test]
    fn revalidation_prefers_etag_and_304_merges_headers() {
        let stored = headers(&[
            ("etag", "\"v1\""),
            ("last-modified", &http_date(0)),
            ("cache-control", "max-age=1"),
            ("content-length", "10"),
        ]);
        let cond = revalidation_headers(&stored);
        assert_eq!(cond.get(header::IF_NONE_MATCH).unwrap(), "\"v1\"");
        assert!(!cond.contains_key(header::IF_MODIFIED_SINCE));
        let cond = revalidation_headers(&headers(&[("last-modified", &http_date(0))]));
        assert!(cond.contains_key(header::IF_MODIFIED_SINCE));
        let merged = merge_not_modified(&stored, &headers(&[("cache-control", "max-age=60"), ("content-length", "0")]));
        assert_eq!(merged.get(header::CACHE_CONTROL).unwrap(), "max-age=60");
        assert_eq!(merged.get(header::CONTENT_LENGTH).unwrap(), "10");
        assert_eq!(merged.get(header::ETAG).unwrap(), "\"v1\"");
    }
}
