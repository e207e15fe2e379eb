//! A cap on storage read bandwidth.
//!
//! Operators put circus in front of storage that others share (a NAS, a
//! busy disk, an origin billed by the byte), and some would rather have
//! downloads wait than have the server read faster than a set rate. The cap
//! also shows the scheduler's trade-off plainly: when storage is the
//! bottleneck, every client waits for the same shared pass over a file and
//! each block is read about once; when storage is faster than the clients,
//! fast clients run ahead and slow ones need blocks again later.
//!
//! Reads are spaced in the order they ask, each taking `len / rate` of the
//! budget: a read starts no earlier than the previous one's slot ended.

use std::{
    sync::Mutex,
    time::{Duration, Instant},
};

#[derive(Debug)]
pub struct ReadPacer {
    bytes_per_s: f64,
    /// When the budget is next free.
    next_free: Mutex<Option<Instant>>,
}

impl ReadPacer {
    pub fn new(bytes_per_s: u64) -> Self {
        ReadPacer { bytes_per_s: bytes_per_s.max(1) as f64, next_free: Mutex::new(None) }
    }

    /// Books `len` bytes of budget at `now`; returns how long to wait before
    /// reading.
    pub fn book(&self, now: Instant, len: u64) -> Duration {
        let mut next = self.next_free.lock().expect("pacer lock");
        let start = next.map_or(now, |t| t.max(now));
        *next = Some(start + Duration::from_secs_f64(len as f64 / self.bytes_per_s));
        start - now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_spaced_by_their_size_and_idle_time_is_not_banked() {
        let pacer = ReadPacer::new(1_000_000);
        let t0 = Instant::now();
        assert_eq!(pacer.book(t0, 500_000), Duration::ZERO);
        assert_eq!(pacer.book(t0, 100_000), Duration::from_millis(500));
        assert_eq!(pacer.book(t0 + Duration::from_millis(100), 1), Duration::from_millis(500));
        // After a quiet spell the next read goes at once, with no burst credit.
        let later = t0 + Duration::from_secs(10);
        assert_eq!(pacer.book(later, 1_000_000), Duration::ZERO);
        assert_eq!(pacer.book(later, 1), Duration::from_secs(1));
    }
}
