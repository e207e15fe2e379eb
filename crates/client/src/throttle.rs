//! Client-side rate limiting: a token bucket over received bytes.
//!
//! Sleeping after a read, before the next one, is enough: while the client
//! does not read, the socket's receive buffer fills and TCP flow control
//! slows the sender, so the limit holds end to end like a slow link would.

use std::time::Duration;
use tokio::time::Instant;

/// The most a throttled client may run ahead of its rate after an idle
/// pause: 50 ms worth of bytes. Small, so a short download is paced too.
const BURST: Duration = Duration::from_millis(50);

#[derive(Debug)]
pub(crate) struct Throttle {
    bytes_per_sec: Option<u64>,
    /// When the bytes received so far will have been "paid for".
    paid_until: Instant,
}

impl Throttle {
    /// `None` or zero: no limit.
    pub fn new(bytes_per_sec: Option<u64>) -> Self {
        Self { bytes_per_sec: bytes_per_sec.filter(|&r| r > 0), paid_until: Instant::now() }
    }

    /// Accounts for `n` received bytes and sleeps until the rate allows more.
    pub async fn consume(&mut self, n: usize) {
        if let Some(wait) = self.charge(n, Instant::now()) {
            tokio::time::sleep(wait).await;
        }
    }

    /// The bookkeeping of [`consume`](Self::consume): how long to wait.
    fn charge(&mut self, n: usize, now: Instant) -> Option<Duration> {
        let rate = self.bytes_per_sec?;
        // Credit for idle time is capped at BURST, so a pause does not buy
        // an arbitrarily long burst afterwards.
        let start = self.paid_until.max(now.checked_sub(BURST).unwrap_or(now));
        self.paid_until = start + Duration::from_secs_f64(n as f64 / rate as f64);
        (self.paid_until > now).then(|| self.paid_until - now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unlimited_never_waits() {
        let mut t = Throttle::new(None);
        assert_eq!(t.charge(1 << 30, Instant::now()), None);
        assert_eq!(Throttle::new(Some(0)).charge(1, Instant::now()), None);
    }

    #[test]
    fn paces_to_the_rate_with_a_bounded_burst() {
        let now = Instant::now();
        let mut t = Throttle { bytes_per_sec: Some(1000), paid_until: now };
        // 500 bytes at 1000 B/s: half a second of debt.
        assert_eq!(t.charge(500, now), Some(Duration::from_millis(500)));
        // Debt accumulates across reads.
        assert_eq!(t.charge(500, now), Some(Duration::from_secs(1)));
        // After a long idle spell only BURST of credit is left.
        let later = now + Duration::from_secs(60);
        assert_eq!(t.charge(50, later), None);
        assert_eq!(t.charge(100, later), Some(Duration::from_millis(100)));
    }
}
