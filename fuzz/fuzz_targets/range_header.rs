//! `Range` and the preconditions (`circus_http::rfc9110`) on untrusted
//! header values.
//!
//! Input: `[size: u64 LE, text…]`; the text's lines are, in order, Range,
//! If-Range, If-Match, If-None-Match, If-Modified-Since and
//! If-Unmodified-Since (a missing line is an absent header).
//!
//! Properties of `resolve_ranges`: no header is the whole file; parts are
//! never empty, at most `MAX_RANGES`, each inside the file, pairwise
//! disjoint and not adjacent, and add up to no more than the file. Of the preconditions:
//! `If-Range` allows only the exact strong ETag or Last-Modified date, and
//! `If-Match: *` never fails a request.

#![no_main]

use circus_http::rfc9110::{
    Conditionals, MAX_RANGES, Precondition, Ranges, Validators, evaluate, if_range_allows, resolve_ranges,
};
use libfuzzer_sys::fuzz_target;
use std::time::{Duration, SystemTime};

fn check_ranges(header: Option<&str>, size: u64) {
    match resolve_ranges(header, size) {
        Ranges::Whole | Ranges::Unsatisfiable => {}
        Ranges::Parts(parts) => {
            assert!(header.is_some(), "ranges without a Range header");
            assert!(!parts.is_empty() && parts.len() <= MAX_RANGES, "{} parts", parts.len());
            for &(start, end) in &parts {
                assert!(start <= end && end < size, "{start}-{end} of a {size}-byte file");
            }
            let mut sorted = parts.clone();
            sorted.sort_unstable();
            for w in sorted.windows(2) {
                assert!(w[0].1 + 1 < w[1].0, "{:?} and {:?} overlap or touch", w[0], w[1]);
            }
            let total: u64 = parts.iter().map(|&(s, e)| e - s + 1).sum();
            assert!(total <= size, "{total} bytes of a {size}-byte file");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((size, text)) = data.split_first_chunk::<8>() else { return };
    let size = u64::from_le_bytes(*size);
    let text = String::from_utf8_lossy(text);
    let mut lines = text.split('\n');
    let mut next = || lines.next();
    let (range, if_range) = (next(), next());
    let c = Conditionals {
        if_match: next(),
        if_none_match: next(),
        if_modified_since: next(),
        if_unmodified_since: next(),
    };

    check_ranges(range, size);
    assert_eq!(resolve_ranges(None, size), Ranges::Whole);

    let v = Validators { etag: "\"v1\"", last_modified: SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000) };
    if if_range_allows(if_range, &v) {
        let t = if_range.map(str::trim);
        let date_matches = t
            .and_then(|t| httpdate::parse_http_date(t).ok())
            .is_some_and(|d| d.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs()).ok() == Some(1_000_000));
        assert!(t.is_none() || t == Some(v.etag) || date_matches, "If-Range {t:?} allowed a range");
    }
    assert!(if_range_allows(Some(v.etag), &v) && !if_range_allows(Some("W/\"v1\""), &v));

    let _ = evaluate(&c, &v);
    let star = Conditionals { if_match: Some("*"), ..c };
    assert_ne!(evaluate(&star, &v), Precondition::Failed, "If-Match: * failed with {c:?}");
});
