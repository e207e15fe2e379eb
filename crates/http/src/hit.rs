//! What the hit lane asks of whatever holds resident responses: a whole
//! response for a target, its head written into the lane's buffer and its
//! body handed over as shared bytes (the lane writes it from there, without
//! copying it first).

use bytes::Bytes;
use std::{
    cell::RefCell,
    time::{SystemTime, UNIX_EPOCH},
};

/// Whole resident objects, rendered as complete HTTP/1.1 responses.
pub trait HitSource: Send + Sync {
    /// For a fresh, whole, resident object at `target`: appends the status
    /// line and header fields (each ending in CRLF, without the empty line
    /// that ends the head) to `head` and returns the body (empty when
    /// `method_head`). Otherwise returns `None` and leaves `head` alone.
    /// `headers` (all of them neutral: they never bear on freshness) may
    /// select among representations (Vary).
    fn render(
        &self,
        target: &str,
        method_head: bool,
        headers: &[httparse::Header<'_>],
        head: &mut Vec<u8>,
    ) -> Option<Bytes>;
}

/// Appends `date: <now>\r\n`, formatted once a second per thread.
pub fn put_date(out: &mut Vec<u8>, now: SystemTime) {
    thread_local! {
        static DATE: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
    }
    let secs = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    DATE.with_borrow_mut(|(at, text)| {
        if *at != secs {
            *text = format!("date: {}\r\n", httpdate::fmt_http_date(now));
            *at = secs;
        }
        out.extend_from_slice(text.as_bytes());
    });
}
