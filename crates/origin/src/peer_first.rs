//! Members first: while this node sends blocks another member asked for,
//! its own clients' bodies wait.
//!
//! A member's request stands for all of that member's clients, which read
//! in order and wait at the block it lacks. On a node whose link its own
//! clients fill, that request is one TCP flow among dozens and gets a few
//! per cent of the link (measured: 1-25 Mbit/s of 100 for the first half of
//! a crowd, `docs/results/2026-11-27-cluster-bench.md`), so the other nodes
//! idle while this one serves its own clients. So while a member's body
//! is sending, each client body of this node waits before its next chunk,
//! until no member's body is sending or [`MAX_WAIT`] has passed: the
//! clients' queued bytes drain and the members' flows get the link.
//!
//! A member's body counts only while it makes progress: not while it waits
//! on the origin (it holds no guard then), and not once its reader has not
//! taken a chunk for [`STALLED`] (a member, or a client posing as one,
//! that stops reading holds nobody up). The wait's cap bounds what a
//! stream of members' requests can take from the clients.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};
use tokio::{sync::Notify, time::Instant};

/// Longest a client's body waits for members' bodies before its next
/// chunk: it then sends one chunk and waits again if they still send.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(2);

/// A member's body whose reader has not taken a chunk for this long is not
/// sending: it no longer holds clients up. Long enough for a block to go
/// out at a small share of a link that clients fill (1 MiB at 2 Mbit/s),
/// before the clients' wait has freed it.
pub(crate) const STALLED: Duration = Duration::from_secs(5);

/// The most a client's body hands hyper at once in a cluster: what is
/// handed over goes out whether or not a member waits, so a member's body
/// waits behind at most this much (and the kernel's and hyper's queued
/// bytes) of each client's. (Members' bodies in slices too did no better
/// in three runs of `circus bench cluster`: 3.25, 2.44 and 3.51 times one
/// node's, against 3.40-3.56 in four runs without.)
pub(crate) const CLIENT_SLICE: usize = 128 << 10;

/// What a member's body hands hyper at a time: hyper pulls the next slice
/// as the connection takes the last, so a member's body that is still
/// sending keeps showing progress (a block handed whole sat in hyper's
/// buffer, and the body looked stalled while it trickled out).
pub(crate) const MEMBER_SLICE: usize = 64 << 10;

/// Members' bodies sending now, and the clients waiting for them to stop.
#[derive(Debug, Default)]
pub(crate) struct PeerFirst {
    /// When each member's body last handed its reader a chunk.
    sending: Mutex<HashMap<u64, Instant>>,
    next_id: AtomicU64,
    idle: Notify,
}

/// Held while a member's body has bytes to send.
#[derive(Debug)]
pub(crate) struct Sending {
    first: Arc<PeerFirst>,
    id: u64,
}

impl Sending {
    /// The body handed its reader another chunk: it makes progress.
    pub(crate) fn progressed(&self) {
        let mut sending = self.first.sending.lock().unwrap_or_else(PoisonError::into_inner);
        sending.insert(self.id, Instant::now());
    }
}

impl Drop for Sending {
    fn drop(&mut self) {
        let mut sending = self.first.sending.lock().unwrap_or_else(PoisonError::into_inner);
        sending.remove(&self.id);
        drop(sending);
        // Every end wakes the waiting clients, which look again: the bodies
        // left may all be stalled ones that count for nothing.
        self.first.idle.notify_waiters();
    }
}

impl PeerFirst {
    /// A member's body has bytes to send until the guard is dropped.
    pub(crate) fn sending(self: &Arc<Self>) -> Sending {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let guard = Sending { first: self.clone(), id };
        guard.progressed();
        guard
    }

    /// Whether a member's body is sending now (and making progress).
    pub(crate) fn busy(&self) -> bool {
        let sending = self.sending.lock().unwrap_or_else(PoisonError::into_inner);
        sending.values().any(|t| t.elapsed() < STALLED)
    }

    /// Returns once no member's body is sending, or after `max`.
    pub(crate) async fn wait_turn(&self, max: Duration) {
        let deadline = Instant::now() + max;
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            // Registered before the look: a guard dropped in between
            // still wakes this wait.
            idle.as_mut().enable();
            if !self.busy() {
                return;
            }
            if tokio::time::timeout_at(deadline, idle).await.is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn first() -> Arc<PeerFirst> {
        Arc::new(PeerFirst::default())
    }

    #[tokio::test(start_paused = true)]
    async fn clients_go_at_once_when_no_member_is_served() {
        let first = first();
        let t = Instant::now();
        first.wait_turn(Duration::from_secs(5)).await;
        assert_eq!(t.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn clients_wait_until_the_members_bodies_are_done() {
        let first = first();
        let a = first.sending();
        let b = first.sending();
        let t = Instant::now();
        let waiting = tokio::spawn({
            let first = first.clone();
            async move { first.wait_turn(Duration::from_secs(5)).await }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(a);
        b.progressed();
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiting.is_finished(), "one member's body still sends");
        drop(b);
        waiting.await.unwrap();
        assert_eq!(t.elapsed(), Duration::from_millis(600));
        assert!(!first.busy());
    }

    #[tokio::test(start_paused = true)]
    async fn a_member_that_keeps_sending_holds_clients_up_only_for_the_cap() {
        let first = first();
        let endless = first.sending();
        let feeding = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                endless.progressed();
            }
        });
        let t = Instant::now();
        first.wait_turn(Duration::from_millis(2500)).await;
        assert_eq!(t.elapsed(), Duration::from_millis(2500));
        feeding.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_member_that_stops_reading_holds_clients_up_no_longer_than_the_cap() {
        let first = first();
        let _stuck = first.sending();
        let t = Instant::now();
        first.wait_turn(MAX_WAIT).await;
        assert_eq!(t.elapsed(), MAX_WAIT);
        tokio::time::sleep(STALLED).await;
        assert!(!first.busy(), "stalled: it counts for nothing");
        let t = Instant::now();
        first.wait_turn(MAX_WAIT).await;
        assert_eq!(t.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_body_does_not_keep_clients_waiting_once_the_others_end() {
        let first = first();
        let _stuck = first.sending();
        tokio::time::sleep(STALLED).await;
        let sending = first.sending();
        let waiting = tokio::spawn({
            let first = first.clone();
            async move { first.wait_turn(MAX_WAIT).await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiting.is_finished());
        let t = Instant::now();
        drop(sending);
        waiting.await.unwrap();
        assert_eq!(t.elapsed(), Duration::ZERO, "woken when the last sending body ended");
    }
}
