//! What a connection is doing, for the watchdog that closes the ones that
//! hold the server back: a response whose client takes no byte for the send
//! timeout (nginx's `send_timeout`), and an idle connection (an HTTP/2
//! connection with no stream open) after the same timeout. (A stalled
//! response does not hold cache memory meanwhile: the driver parks its
//! download and takes its queued blocks back.)
//!
//! The socket wrapper stamps every read and write; each response body
//! counts itself in flight while it lives. The driver can also ask for a
//! connection to be cut (`Activity::cut`): one that stopped reading while
//! holding blocks the cache cannot spare (see `mailbox`).

use std::{
    sync::{
        Arc,
        atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

/// Shared by a connection's socket wrapper, its responses and its watchdog.
#[derive(Debug)]
pub(crate) struct Activity {
    /// The client's address (for /status).
    peer: Option<std::net::SocketAddr>,
    start: Instant,
    /// Milliseconds since `start` of the last byte the client took.
    last_write: AtomicU64,
    /// ... and of the last byte received.
    last_read: AtomicU64,
    /// Responses whose bodies are still being sent.
    in_flight: AtomicUsize,
    /// Why the server wants the connection closed now (a `Verdict`, or
    /// `KEEP`).
    cut: AtomicU8,
    /// Wakes the watchdog when `cut` is set.
    wake: tokio::sync::Notify,
    /// The send mark the socket should follow now (a packed
    /// `send_mark::Mark`); the socket wrapper follows it.
    send_mark: AtomicU64,
}

const KEEP: u8 = 0;
const CUT: u8 = 1;
const EVICTED: u8 = 2;

tokio::task_local! {
    /// The connection a request arrived on, while its response is made.
    static CONNECTION: Arc<Activity>;
}

/// Makes `activity` the connection of the requests `f` handles.
pub(crate) async fn on_connection<F: Future>(activity: Arc<Activity>, f: F) -> F::Output {
    CONNECTION.scope(activity, f).await
}

/// The connection of the request being handled, if known.
pub(crate) fn current() -> Option<Arc<Activity>> {
    CONNECTION.try_with(Arc::clone).ok()
}

/// Why the watchdog closes a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Keep,
    /// A response made no progress for the send timeout.
    SendTimeout,
    /// No response and no traffic for the timeout.
    Idle,
    /// It stopped reading while holding memory the cache needs back.
    Cut,
    /// Idle while the server is near its connection cap: it makes room.
    Evicted,
}

impl Activity {
    pub fn new(peer: Option<std::net::SocketAddr>) -> Arc<Self> {
        Arc::new(Activity {
            peer,
            start: Instant::now(),
            last_write: AtomicU64::new(0),
            last_read: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            cut: AtomicU8::new(KEEP),
            wake: tokio::sync::Notify::new(),
            send_mark: AtomicU64::new(0),
        })
    }

    /// Asks for `mark` as the socket's TCP_NOTSENT_LOWAT from its next write.
    pub(crate) fn want_send_mark(&self, mark: crate::send_mark::Mark) {
        self.send_mark.store(mark.pack(), Ordering::Relaxed);
    }

    pub(crate) fn send_mark(&self) -> crate::send_mark::Mark {
        crate::send_mark::Mark::unpack(self.send_mark.load(Ordering::Relaxed))
    }

    pub fn peer(&self) -> Option<std::net::SocketAddr> {
        self.peer
    }

    /// Asks the watchdog to close the connection now: it stopped reading
    /// while holding memory the cache needs back.
    pub fn cut(&self) {
        self.close_now(CUT);
    }

    /// Asks the watchdog to close the connection now to make room for a
    /// new one.
    pub fn evict(&self) {
        self.close_now(EVICTED);
    }

    fn close_now(&self, why: u8) {
        if self.cut.compare_exchange(KEEP, why, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
            self.wake.notify_one();
        }
    }

    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    pub fn wrote(&self) {
        self.last_write.store(self.now_ms(), Ordering::Relaxed);
    }

    pub fn read(&self) {
        self.last_read.store(self.now_ms(), Ordering::Relaxed);
    }

    /// Counts a response in flight until the guard drops.
    pub fn response(self: &Arc<Self>) -> InFlight {
        if self.in_flight.fetch_add(1, Ordering::Relaxed) == 0 {
            // Progress is measured from the response's start.
            self.wrote();
        }
        InFlight(self.clone())
    }

    /// Whether the connection has no response in flight.
    pub fn is_idle(&self) -> bool {
        self.in_flight.load(Ordering::Relaxed) == 0
    }

    /// Milliseconds since the last byte either way.
    pub fn quiet_ms(&self) -> u64 {
        let last = self.last_write.load(Ordering::Relaxed).max(self.last_read.load(Ordering::Relaxed));
        self.now_ms().saturating_sub(last)
    }

    /// What the watchdog should do now.
    pub fn verdict(&self, timeout: Duration) -> Verdict {
        let now = self.now_ms();
        let timeout = timeout.as_millis() as u64;
        match self.cut.load(Ordering::Relaxed) {
            CUT => return Verdict::Cut,
            EVICTED => return Verdict::Evicted,
            _ => {}
        }
        if self.is_idle() {
            return if self.quiet_ms() >= timeout { Verdict::Idle } else { Verdict::Keep };
        }
        let stalled = now.saturating_sub(self.last_write.load(Ordering::Relaxed));
        if stalled >= timeout { Verdict::SendTimeout } else { Verdict::Keep }
    }
}

/// A response in flight; dropping it ends the count.
#[derive(Debug)]
pub(crate) struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Resolves when the watchdog would close the connection; checks a few
/// times per timeout.
pub(crate) async fn watch(activity: Arc<Activity>, timeout: Duration) -> Verdict {
    let period = (timeout / 4).clamp(Duration::from_millis(100), Duration::from_secs(1));
    loop {
        tokio::select! {
            () = tokio::time::sleep(period) => {}
            () = activity.wake.notified() => {}
        }
        match activity.verdict(timeout) {
            Verdict::Keep => {}
            v => return v,
        }
    }
}

/// A response body counted in flight while it lives.
pub(crate) struct Counted<B> {
    inner: B,
    _in_flight: InFlight,
}

impl<B> Counted<B> {
    pub fn new(inner: B, in_flight: InFlight) -> Self {
        Counted { inner, _in_flight: in_flight }
    }
}

impl<B: http_body::Body + Unpin> http_body::Body for Counted<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts() {
        let a = Activity::new(None);
        let t = Duration::from_secs(60);
        assert_eq!(a.verdict(t), Verdict::Keep);
        assert_eq!(a.verdict(Duration::ZERO), Verdict::Idle);
        let r = a.response();
        assert!(!a.is_idle());
        assert_eq!(a.verdict(Duration::ZERO), Verdict::SendTimeout);
        assert_eq!(a.verdict(t), Verdict::Keep, "a response just started is not stalled");
        a.last_write.store(0, Ordering::Relaxed);
        let a2 = Activity { start: Instant::now() - Duration::from_secs(5), ..Activity::clone_counts(&a) };
        a2.in_flight.store(1, Ordering::Relaxed);
        assert_eq!(a2.verdict(t), Verdict::Keep);
        assert_eq!(a2.verdict(Duration::from_secs(4)), Verdict::SendTimeout);
        a2.cut();
        a2.evict();
        assert_eq!(a2.verdict(t), Verdict::Cut, "the first reason stands");
        drop(r);
        assert!(a.is_idle());
    }

    impl Activity {
        fn clone_counts(a: &Activity) -> Activity {
            Activity {
                peer: a.peer,
                start: a.start,
                last_write: AtomicU64::new(a.last_write.load(Ordering::Relaxed)),
                last_read: AtomicU64::new(a.last_read.load(Ordering::Relaxed)),
                in_flight: AtomicUsize::new(0),
                cut: AtomicU8::new(KEEP),
                wake: tokio::sync::Notify::new(),
                send_mark: AtomicU64::new(0),
            }
        }
    }
}
