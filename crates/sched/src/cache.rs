//! The memory budget and the order in which idle blocks are evicted.
//!
//! Every resident or loading block counts against one byte budget, including
//! blocks pinned by queued sends. Idle blocks (resident, unpinned) sit in a
//! min-heap keyed by eviction priority; keys are re-issued rather than updated,
//! and a popped entry is valid only if it still matches the block's current
//! key (lazy deletion keeps every operation O(log n)).

use crate::event::Nanos;
use circus_core::{BlockIdx, FileId};
use std::{cmp::Reverse, collections::BinaryHeap};

/// Key space: idle blocks nobody is known to need evict first, then blocks
/// an in-order client will read (rule C14), then region blocks, then blocks
/// a holder still lacks (rule C13).
const NEEDED_CLASS: u64 = 1 << 61;
const REGION_CLASS: u64 = 1 << 62;
const HELD_CLASS: u64 = 1 << 63;

#[derive(Debug, Default)]
pub(crate) struct Cache {
    pub limit: u64,
    pub used: u64,
    heap: BinaryHeap<Reverse<(u64, FileId, BlockIdx)>>,
    /// Monotonic counter standing in for recency; never a clock.
    stamp: u64,
    /// Live entries in `heap` (the rest are stale).
    live: usize,
}

/// How an idle block outside every active region is ranked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IdleOrder {
    /// Least recently used first: a conventional buffer cache.
    Lru,
    /// Most recently used first: optimal for a cyclic scan larger than memory,
    /// since the block that just left the region is the one needed last.
    Mru,
}

impl Cache {
    pub fn new(limit: u64) -> Self {
        Self { limit, ..Default::default() }
    }

    pub fn next_stamp(&mut self) -> u64 {
        self.stamp += 1;
        self.stamp
    }

    /// Idle blocks (resident, unpinned: evictable).
    pub fn idle_blocks(&self) -> u64 {
        self.live as u64
    }

    pub fn fits(&self, bytes: u64) -> bool {
        self.used + bytes <= self.limit
    }

    /// Key for an idle block outside every region.
    pub fn idle_key(&mut self, order: IdleOrder) -> u64 {
        let s = self.next_stamp();
        match order {
            IdleOrder::Lru => s,
            IdleOrder::Mru => NEEDED_CLASS - 1 - s,
        }
    }

    /// Key for an idle block an in-order client will read at `at` (C14):
    /// the later, the sooner it is evicted.
    pub fn needed_key(at: Nanos) -> u64 {
        let span = REGION_CLASS - NEEDED_CLASS;
        NEEDED_CLASS + (span - 1 - at.min(span - 1))
    }

    /// Whether an idle block's key says only when it will be needed (C14) or
    /// nothing at all: such keys are refreshed as readers move.
    pub fn is_refreshable(key: u64) -> bool {
        key != 0 && key < REGION_CLASS
    }

    /// Whether the key says when an in-order client will read the block.
    pub fn is_needed(key: u64) -> bool {
        (NEEDED_CLASS..REGION_CLASS).contains(&key)
    }

    /// Key for an idle block inside a region that it entered at `entered`.
    pub fn region_key(entered: u64) -> u64 {
        REGION_CLASS + entered
    }

    /// Key for an idle block that a holder still lacks (C13): evicted only
    /// when nothing else can make room, newest first, so the region's
    /// oldest block (the one its slowest holder takes next) stays longest.
    pub fn held_key(&mut self) -> u64 {
        HELD_CLASS + (REGION_CLASS - 1 - self.next_stamp())
    }

    pub fn push(&mut self, key: u64, file: FileId, block: BlockIdx) {
        self.heap.push(Reverse((key, file, block)));
        self.live += 1;
    }

    /// An entry was invalidated (block pinned, re-keyed or evicted elsewhere).
    pub fn forget_one(&mut self) {
        self.live = self.live.saturating_sub(1);
    }

    /// Pops the lowest-keyed entry; `still_valid` decides whether it is live.
    pub fn pop(&mut self, mut still_valid: impl FnMut(u64, FileId, BlockIdx) -> bool) -> Option<(FileId, BlockIdx)> {
        while let Some(Reverse((key, file, block))) = self.heap.pop() {
            if still_valid(key, file, block) {
                self.live -= 1;
                return Some((file, block));
            }
        }
        None
    }

    /// Drops stale entries once they outnumber live ones, bounding the heap.
    pub fn compact(&mut self, mut still_valid: impl FnMut(u64, FileId, BlockIdx) -> bool) {
        if self.heap.len() > 64 && self.heap.len() > 4 * self.live {
            let mut entries = std::mem::take(&mut self.heap).into_vec();
            entries.retain(|Reverse((k, f, b))| still_valid(*k, *f, *b));
            // A block re-keyed to the key it had (C14's deadlines repeat
            // within a snapshot) has two valid entries; one is its.
            entries.sort_unstable();
            entries.dedup();
            self.heap = entries.into();
            self.live = self.heap.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_and_mru_orders_and_region_blocks_last() {
        let mut c = Cache::new(100);
        let f = FileId(1);
        let region = Cache::region_key(c.next_stamp());
        c.push(region, f, 0);
        let (k1, k2) = (c.idle_key(IdleOrder::Mru), c.idle_key(IdleOrder::Mru));
        c.push(k1, f, 1);
        c.push(k2, f, 2);
        let order: Vec<_> = std::iter::from_fn(|| c.pop(|_, _, _| true)).map(|(_, b)| b).collect();
        assert_eq!(order, vec![2, 1, 0]);
        let (k1, k2) = (c.idle_key(IdleOrder::Lru), c.idle_key(IdleOrder::Lru));
        c.push(k2, f, 2);
        c.push(k1, f, 1);
        assert_eq!(c.pop(|_, _, _| true), Some((f, 1)));
    }

    #[test]
    fn blocks_needed_later_go_first_after_unneeded_ones_and_before_region_blocks() {
        let mut c = Cache::new(100);
        let f = FileId(1);
        let region = Cache::region_key(c.next_stamp());
        c.push(region, f, 0);
        c.push(Cache::needed_key(5_000), f, 1);
        c.push(Cache::needed_key(9_000), f, 2);
        let idle = c.idle_key(IdleOrder::Mru);
        c.push(idle, f, 3);
        let order: Vec<_> = std::iter::from_fn(|| c.pop(|_, _, _| true)).map(|(_, b)| b).collect();
        assert_eq!(order, vec![3, 2, 1, 0]);
    }
}
