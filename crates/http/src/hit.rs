//! What the hit lane asks of whatever holds resident responses: a whole
//! response for a target, written into the lane's output buffer.

use std::{
    cell::RefCell,
    time::{SystemTime, UNIX_EPOCH},
};

/// Whole resident objects, rendered as complete HTTP/1.1 responses.
pub trait HitSource: Send + Sync {
    /// Appends the whole response (status line, headers, body unless
    /// `head`) for `target` to `out` and returns true, or returns false
    /// and leaves `out` alone when the object is not a fresh, whole,
    /// resident one. `headers` (all of them neutral: they never bear on freshness) may select among
    /// representations (Vary).
    fn render(&self, target: &str, head: bool, headers: &[httparse::Header<'_>], out: &mut Vec<u8>) -> bool;
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
