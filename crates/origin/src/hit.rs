//! The tier's answers for the server's hit lane: whole stored
//! objects of one block, fresh and not varied: the object's prerendered
//! head and its resident block.
//! Anything else is left to the tier's full path behind hyper.

use super::{CACHE_STATUS, HIT, OriginTier};
use crate::rfc9111;
use bytes::Bytes;
use circus_http::{HitSource, put_date};
use http::HeaderMap;
use std::{io::Write, time::SystemTime};

impl HitSource for OriginTier {
    fn render(
        &self,
        target: &str,
        method_head: bool,
        headers: &[httparse::Header<'_>],
        out: &mut Vec<u8>,
    ) -> Option<Bytes> {
        let selected = |obj: &super::Object| {
            rfc9111::vary_matches_by(&obj.vary, &obj.vary_values, |f| {
                headers.iter().filter(move |h| h.name.eq_ignore_ascii_case(f.as_str())).map(|h| h.value)
            })
        };
        let obj = self.store.object(target, selected)?;
        let now = SystemTime::now();
        // The lane lets through no request header that bears on freshness
        // (Cache-Control, Pragma), so the request's own limits are empty.
        let whole_block = obj.status == http::StatusCode::OK && obj.size > 0 && obj.size <= u64::from(self.block_size);
        if !whole_block || !obj.trusted() || !obj.freshness.usable(&HeaderMap::new(), now) {
            return None;
        }
        let body = if method_head { Bytes::new() } else { self.store.block(obj.version, 0)? };
        self.metrics.hits.inc();
        out.extend_from_slice(&obj.wire_head);
        let _ = write!(out, "age: {}\r\n{CACHE_STATUS}: {HIT}\r\n", obj.freshness.age(now).as_secs());
        if !obj.headers.contains_key(http::header::DATE) {
            put_date(out, now);
        }
        if !method_head {
            self.metrics.served(crate::metrics::class(obj.size, self.block_size), body.len() as u64);
        }
        Some(body)
    }
}
