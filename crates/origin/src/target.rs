//! The request target as the tier passes it to the origin and keys what it
//! stores: its path normalised (RFC 3986 §6.2.2), so that no spelling of it
//! can name anything outside the configured prefix. An origin resolves `..`
//! (and many decode `%2e%2e` and `%2f` first), so `/../.env` appended to
//! `http://origin/sub` would be the origin's `/.env`.
//!
//! Percent-encoded unreserved characters are decoded (`%2e` is `.`), other
//! escapes are kept with upper-case hex, and dot segments are removed. An
//! encoded slash or backslash, a raw backslash, an encoded NUL, a malformed
//! escape, or a `..` above the root is refused: no origin's reading of
//! those can be trusted to stay inside the prefix. The query is kept as
//! sent.

use circus_http::HttpError;

/// `target` (origin-form: path and optional query) normalised.
pub(crate) fn normalize(target: &str) -> Result<String, HttpError> {
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };
    if !path.starts_with('/') {
        return Err(HttpError::BadRequest("request target must be a path"));
    }
    let decoded = decode_unreserved(path)?;
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = decoded[1..].split('/').collect();
    let last = segments.len() - 1;
    for (i, seg) in segments.iter().enumerate() {
        match *seg {
            "." => {}
            ".." => {
                if out.pop().is_none() {
                    return Err(HttpError::BadRequest("request path leaves the root"));
                }
            }
            s => out.push(s),
        }
        // `/a/.` and `/a/b/..` name the directory: keep its trailing slash.
        if i == last && matches!(*seg, "." | "..") {
            out.push("");
        }
    }
    let mut normal = format!("/{}", out.join("/"));
    if let Some(q) = query {
        normal.push('?');
        normal.push_str(q);
    }
    Ok(normal)
}

/// The target a `Location` or `Content-Location` value names when it is
/// on the tier's own `host`: a path, or an absolute URI with that
/// authority; normalised like a request target. Anything else (another
/// host, a relative reference, a bad path) names nothing stored here.
pub(crate) fn on_host(value: &str, host: Option<&str>) -> Option<String> {
    if value.starts_with('/') && !value.starts_with("//") {
        return normalize(value).ok();
    }
    let uri: http::Uri = value.parse().ok()?;
    let same = uri.authority().zip(host).is_some_and(|(a, h)| a.as_str().eq_ignore_ascii_case(h));
    same.then(|| normalize(uri.path_and_query().map_or("/", |p| p.as_str())).ok()).flatten()
}

/// Decodes `%XX` escapes of unreserved characters; keeps the rest, hex in
/// upper case. Refuses escapes that an origin could read as a separator.
/// `value` (an operator's target, percent-decoded once from a query
/// string) with the bytes a request target cannot hold percent-encoded
/// (spaces, controls, non-ASCII and the like), so that `/a b` and
/// `/a%20b` name the same stored target.
pub(crate) fn encode_for_request(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for &b in value.as_bytes() {
        match b {
            0..=0x20 | 0x7f..=0xff | b'"' | b'<' | b'>' | b'`' | b'{' | b'}' | b'|' | b'^' => {
                out.push_str(&format!("%{b:02X}"));
            }
            _ => out.push(b as char),
        }
    }
    out
}

fn decode_unreserved(path: &str) -> Result<String, HttpError> {
    let bytes = path.as_bytes();
    let mut out = String::with_capacity(path.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => return Err(HttpError::BadRequest("backslash in request path")),
            b'%' => {
                let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
                let Some(v) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) else {
                    return Err(HttpError::BadRequest("malformed percent-encoding in path"));
                };
                match v {
                    b'/' | b'\\' | 0 => {
                        return Err(HttpError::BadRequest("encoded slash, backslash or NUL in request path"));
                    }
                    b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => out.push(v as char),
                    _ => out.push_str(&format!("%{v:02X}")),
                }
                i += 3;
            }
            b => {
                out.push(b as char);
                i += 1;
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_operators_target_names_the_target_requests_name() {
        for (given, stored) in
            [("/a b", "/a%20b"), ("/a%20b", "/a%20b"), ("/caf\u{e9}", "/caf%C3%A9"), ("/x?q=1", "/x?q=1")]
        {
            assert_eq!(normalize(&encode_for_request(given)).unwrap(), normalize(stored).unwrap(), "{given}");
        }
    }

    #[test]
    fn location_names_a_stored_target_only_on_this_host() {
        let host = Some("tier.test:8080");
        assert_eq!(on_host("/a/../b", host).as_deref(), Some("/b"));
        assert_eq!(on_host("http://tier.test:8080/c?x", host).as_deref(), Some("/c?x"));
        assert_eq!(on_host("https://TIER.test:8080/c", host).as_deref(), Some("/c"));
        for other in ["http://elsewhere/c", "//elsewhere/c", "c", "/../x", "http://tier.test/c"] {
            assert_eq!(on_host(other, host), None, "{other}");
        }
        assert_eq!(on_host("http://tier.test:8080/c", None), None);
    }

    #[test]
    fn ordinary_targets_are_unchanged() {
        for t in ["/", "/a", "/a/b.iso", "/a/", "/a?x=1&y=%2F", "/a%20b", "/%E2%82%AC", "//a"] {
            assert_eq!(normalize(t).unwrap(), t, "{t}");
        }
    }

    #[test]
    fn dot_segments_are_resolved_in_every_spelling() {
        for (t, want) in [
            ("/a/./b", "/a/b"),
            ("/a/../b", "/b"),
            ("/a/%2e%2E/b", "/b"),
            ("/a/.%2e/b?q", "/b?q"),
            ("/a/b/..", "/a/"),
            ("/a/.", "/a/"),
            ("/%61", "/a"),
        ] {
            assert_eq!(normalize(t).unwrap(), want, "{t}");
        }
    }

    #[test]
    fn nothing_leaves_the_root_or_smuggles_a_separator() {
        for t in [
            "/../.env",
            "/%2e%2e/.env",
            "/a/../../.env",
            "/..%2f.env",
            "/a%2F..%2F..%2F.env",
            "/a%5c..%5c.env",
            "/a\\..\\.env",
            "/a%00",
            "/a%",
            "/a%zz",
            "a",
        ] {
            assert!(normalize(t).is_err(), "{t} accepted as {:?}", normalize(t));
        }
    }
}
