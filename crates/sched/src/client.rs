//! Per-download state.

use crate::event::Nanos;
use circus_core::{BlockIdx, BlockSet, FileId};
use serde::Serialize;

/// The part a client plays in its file's active region (paper, Fig. 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Drawing blocks from the active region.
    Follower,
    /// The client whose reads most recently advanced the region.
    Frontrunner,
    /// Holds at least the threshold fraction of its file and may read
    /// outside the region.
    Independent,
}

#[derive(Debug, Clone)]
pub(crate) struct ClientState {
    pub file: FileId,
    /// Blocks received or queued: never picked again.
    pub have: BlockSet,
    /// Blocks picked but not yet handed to the socket, in pick order.
    pub queue: Vec<BlockIdx>,
    /// Blocks handed to the socket.
    pub delivered: u32,
    /// Where this client's own scan resumes (sequential and private reads).
    pub cursor: BlockIdx,
    /// The first block it lacked when it joined: where its range (or its
    /// resume) began. Plain downloads that began at the same block read
    /// as one group (C15).
    pub start: BlockIdx,
    pub role: Role,
    /// Must receive its blocks in file order (a plain HTTP download).
    pub in_order: bool,
    pub rate: RateMeter,
    /// The file's `leads` when the client joined.
    pub leads_at_join: u64,
    /// Blocks it took from memory or read to lead: with `leads_at_join`,
    /// whether it keeps up with the region (rule C1).
    pub taken: u64,
    /// Under `Favor::Storage`: the blocks it lacks stay in memory until it
    /// takes them, and its file's region waits for it (rule C13).
    pub holds: bool,
    /// When it last handed a block to its socket (or joined): a holder that
    /// stops sending is let go.
    pub last_sent: Nanos,
    /// Its socket stopped taking blocks: picks nothing until it resumes.
    pub parked: bool,
}

impl ClientState {
    pub fn new(file: FileId, have: BlockSet, in_order: bool, now: Nanos, queue_len: u32, leads_at_join: u64) -> Self {
        let delivered = have.len();
        let cursor = circus_core::first_in(0, have.capacity(), |w| have.missing_word(w)).unwrap_or(0);
        Self {
            file,
            have,
            queue: Vec::with_capacity(queue_len as usize),
            delivered,
            cursor,
            start: cursor,
            role: Role::Follower,
            in_order,
            rate: RateMeter::new(now),
            leads_at_join,
            taken: 0,
            holds: false,
            last_sent: now,
            parked: false,
        }
    }

    /// Took less than three quarters of what the region brought since the
    /// client joined: it is slower than the frontrunner (rule C1).
    pub fn behind_region(&self, file_leads: u64) -> bool {
        self.taken * 4 < file_leads.saturating_sub(self.leads_at_join) * 3
    }

    /// A holder whose socket took nothing for `HOLD_STALL_NANOS` while it
    /// had a resident block to send (C13).
    pub fn stalled(&self, now: Nanos, resident_front: bool) -> bool {
        self.holds && resident_front && now.saturating_sub(self.last_sent) > crate::config::HOLD_STALL_NANOS
    }

    /// Every block picked; nothing left to choose.
    pub fn all_picked(&self) -> bool {
        self.have.is_full()
    }
}

/// Exponentially weighted send rate. Reported in the status, and rule C14
/// estimates when an in-order client reaches a block from it. The average
/// starts at zero; `get` corrects for that start, so a client measured for
/// half a second is not taken for one much slower than it is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RateMeter {
    since: Nanos,
    last: Nanos,
    bytes_per_sec: f64,
}

impl RateMeter {
    /// Time constant of the average.
    const TAU_SECS: f64 = 2.0;

    pub fn new(now: Nanos) -> Self {
        Self { since: now, last: now, bytes_per_sec: 0.0 }
    }

    pub fn record(&mut self, now: Nanos, bytes: u32) {
        let dt = now.saturating_sub(self.last) as f64 / 1e9;
        self.last = now;
        let keep = (-dt / Self::TAU_SECS).exp();
        // Bytes spread over the interval since the last sample.
        let inst = if dt > 0.0 { f64::from(bytes) / dt } else { self.bytes_per_sec };
        self.bytes_per_sec = keep * self.bytes_per_sec + (1.0 - keep) * inst;
    }

    /// Bytes per second, 0 before the first interval.
    pub fn get(&self) -> f64 {
        let weight = 1.0 - (-(self.last.saturating_sub(self.since) as f64 / 1e9) / Self::TAU_SECS).exp();
        if weight > 0.0 { self.bytes_per_sec / weight } else { 0.0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_young_meter_reports_the_rate_it_saw_not_a_fraction_of_it() {
        let mut m = RateMeter::new(0);
        assert_eq!(m.get(), 0.0);
        // 1 MB every 100 ms for half a second: 10 MB/s.
        for i in 1..=5 {
            m.record(i * 100_000_000, 1_000_000);
        }
        assert!((m.get() - 10e6).abs() < 1e3, "{}", m.get());
    }
}
