//! The native media type in a request's Accept: whether a client asks for
//! the native block stream, and the request without it (as the origin tier
//! forwards it).

use circus_proto::CONTENT_TYPE as NATIVE_TYPE;
use http::{HeaderMap, HeaderValue, header};

/// Whether the client lists the native media type with a non-zero quality
/// (`;q=0` means "not acceptable", RFC 9110 §12.5.1).
pub fn wants_native(h: &HeaderMap) -> bool {
    lists_native(h.get_all(header::ACCEPT).iter().filter_map(|v| v.to_str().ok()))
}

/// [`wants_native`] over the values of the request's Accept fields.
pub fn lists_native<'a>(accept: impl Iterator<Item = &'a str>) -> bool {
    accept.flat_map(|v| v.split(',')).any(|item| {
        let mut params = item.split(';');
        let is_native = params.next().is_some_and(|t| t.trim().eq_ignore_ascii_case(NATIVE_TYPE));
        let q = params
            .filter_map(|p| p.trim().strip_prefix("q=").or_else(|| p.trim().strip_prefix("Q=")))
            .find_map(|q| q.trim().parse::<f32>().ok())
            .unwrap_or(1.0);
        is_native && q > 0.0
    })
}

/// `h` with the native media type taken out of Accept (the field dropped
/// when nothing else is left). The tier makes the native stream itself and
/// wants the plain object from the origin, also from an origin that is a
/// circus (which varies on Accept); stored versions are selected by the
/// request as it would be forwarded.
pub fn without_native(h: &HeaderMap) -> HeaderMap {
    let mut out = h.clone();
    if !wants_native(h) {
        return out;
    }
    let accept = h.get_all(header::ACCEPT).iter().filter_map(|v| v.to_str().ok());
    let kept: Vec<&str> =
        accept.flat_map(|v| v.split(',')).filter(|item| !lists_native(std::iter::once(*item))).map(str::trim).collect();
    out.remove(header::ACCEPT);
    if let Some(v) = Some(kept.join(", ")).filter(|v| !v.is_empty()).and_then(|v| HeaderValue::from_str(&v).ok()) {
        out.insert(header::ACCEPT, v);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_is_chosen_only_with_nonzero_quality() {
        let cases = [
            ("application/vnd.circus.blocks", true),
            ("text/html, application/vnd.circus.blocks;q=0.5", true),
            ("application/vnd.circus.blocks;q=0", false),
            ("application/vnd.circus.blocks; q=0.0, */*", false),
            ("*/*", false),
        ];
        for (accept, want) in cases {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT, HeaderValue::from_static(accept));
            assert_eq!(wants_native(&h), want, "{accept}");
        }
    }
}
