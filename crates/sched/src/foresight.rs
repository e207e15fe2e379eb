//! Rule C14: the blocks in-order clients will read next are kept by when
//! they will next be read.
//!
//! An in-order client (a plain HTTP download) reads its file front to back
//! at the pace of its connection, so its future reads are known: block `b`
//! is reached `(b - cursor) x block / rate` from now. A file's in-order
//! readers are snapshotted (cursor, measured rate, time); an idle block is
//! then keyed by the earliest time any reader that still lacks it is
//! expected to reach it, and among such blocks the one needed furthest in
//! the future is evicted first (Belady's rule, with the future estimated).
//!
//! The deadline a snapshot gives is a point in time, so it stays right as
//! long as the reader keeps its rate: keys need refreshing only when
//! readers join, leave, or drift. The scheduler refreshes on joins and
//! leaves, and after as many in-order sends of the file as it has blocks in
//! memory (at least [`REFRESH_SENDS`]): re-keying every idle block then
//! costs about one block per send, however much of the file is resident
//! (a resident 1 GiB file has 16,384 blocks; re-keyed every 64 sends, 50
//! curl downloads of it cost circus 2.7 times nginx's CPU per byte).

use crate::event::Nanos;
use circus_core::{BlockIdx, ClientId};

/// In-order sends of a file between two snapshots of its readers, at least.
pub(crate) const REFRESH_SENDS: u32 = 64;

/// Rate assumed for a reader not measured yet when no reader of its file
/// is: one 64 KiB block a millisecond (64 MB/s).
const DEFAULT_BYTES_PER_SEC: f64 = 64e6;

#[derive(Debug, Clone, Copy)]
struct Reader {
    client: ClientId,
    /// The first block it lacked at the snapshot.
    cursor: BlockIdx,
    /// Nanoseconds it takes per byte.
    ns_per_byte: f64,
}

/// One file's in-order readers as of a snapshot.
#[derive(Debug, Clone, Default)]
pub(crate) struct Foresight {
    /// Sorted by cursor.
    readers: Vec<Reader>,
    /// `fastest_upto[i]`: the fewest nanoseconds per byte of any reader in
    /// `readers[..=i]`, which bounds how soon any of them can arrive.
    fastest_upto: Vec<f64>,
    at: Nanos,
    /// In-order sends since the snapshot.
    pub sends_since: u32,
}

impl Foresight {
    /// Takes a new snapshot of `readers`: (client, cursor, measured bytes
    /// per second, 0 when not measured yet). A reader without a rate is
    /// taken to go as fast as the fastest measured one: a newcomer at the
    /// start of the file needs its first blocks soon.
    pub fn refresh(&mut self, now: Nanos, readers: impl Iterator<Item = (ClientId, BlockIdx, f64)>) {
        let measured: Vec<(ClientId, BlockIdx, f64)> = readers.collect();
        let fastest = measured.iter().map(|r| r.2).fold(0.0, f64::max);
        let fallback = if fastest > 0.0 { fastest } else { DEFAULT_BYTES_PER_SEC };
        self.readers.clear();
        self.readers.extend(measured.into_iter().map(|(client, cursor, rate)| {
            let rate = if rate > 0.0 { rate } else { fallback };
            Reader { client, cursor, ns_per_byte: 1e9 / rate }
        }));
        self.readers.sort_unstable_by_key(|r| (r.cursor, r.client));
        self.fastest_upto.clear();
        let mut fastest = f64::INFINITY;
        self.fastest_upto.extend(self.readers.iter().map(|r| {
            fastest = fastest.min(r.ns_per_byte);
            fastest
        }));
        self.at = now;
        self.sends_since = 0;
    }

    pub fn is_empty(&self) -> bool {
        self.readers.is_empty()
    }

    /// When block `b` will next be read by a reader that lacks it
    /// (`lacks`), if any will; every block before it is `block_bytes` long.
    ///
    /// Readers behind the block are looked at nearest first, until none
    /// further back could arrive sooner even at the fastest rate among
    /// them: the nearest usually decide, but a fast reader far behind can
    /// beat a crowd of slow ones near, which looking at a fixed number of
    /// the nearest misses.
    /// Readers that have passed the block since the snapshot are skipped,
    /// at one lookup each (counting them would leave a block the whole
    /// group still needs looking unneeded).
    pub fn next_use(&self, b: BlockIdx, block_bytes: u64, lacks: impl Fn(ClientId) -> bool) -> Option<Nanos> {
        let behind = self.readers.partition_point(|r| r.cursor <= b);
        let arrival = |distance_blocks: BlockIdx, ns_per_byte: f64| {
            let bytes = u64::from(distance_blocks) * block_bytes;
            self.at.saturating_add((bytes as f64 * ns_per_byte) as Nanos)
        };
        let mut soonest: Option<Nanos> = None;
        for i in (0..behind).rev() {
            let r = &self.readers[i];
            if soonest.is_some_and(|t| arrival(b - r.cursor, self.fastest_upto[i]) >= t) {
                break;
            }
            if lacks(r.client) {
                let t = arrival(b - r.cursor, r.ns_per_byte);
                soonest = Some(soonest.map_or(t, |s| s.min(t)));
            }
        }
        soonest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_reader_to_arrive_decides_and_readers_past_a_block_do_not_count() {
        let mut f = Foresight::default();
        // Client 1 at block 10 going 1 MB/s, client 2 at block 0 going
        // 10 MB/s, client 3 not measured yet at block 5 (taken as fast as
        // the fastest); 1,000-byte blocks.
        f.refresh(1_000, [(ClientId(1), 10, 1e6), (ClientId(2), 0, 10e6), (ClientId(3), 5, 0.0)].into_iter());
        let all = |_| true;
        // Block 20: client 1 needs 10 ms, client 2 2 ms, client 3 1.5 ms.
        assert_eq!(f.next_use(20, 1000, all), Some(1_000 + 1_500_000));
        assert_eq!(f.next_use(20, 1000, |c| c != ClientId(3)), Some(1_000 + 2_000_000));
        // Only client 2 is at or before block 0; a reader past a block
        // never needs it.
        assert_eq!(f.next_use(0, 1000, |c| c == ClientId(1)), None);
        assert_eq!(f.next_use(0, 1000, all), Some(1_000));
    }

    #[test]
    fn readers_that_passed_a_block_since_the_snapshot_do_not_hide_one_that_still_needs_it() {
        let mut f = Foresight::default();
        // Twenty readers at blocks 0..20, 1 MB/s; all but the furthest
        // behind have since passed block 30.
        f.refresh(0, (0..20).map(|i| (ClientId(i), i as BlockIdx, 1e6)));
        assert_eq!(f.next_use(30, 1000, |c| c == ClientId(0)), Some(30_000_000));
    }

    #[test]
    fn a_fast_reader_far_behind_arrives_before_slow_ones_near() {
        let mut f = Foresight::default();
        // Twelve readers at blocks 88..100 going 1 MB/s, and one at block 0
        // going 50 MB/s; 1,000-byte blocks.
        f.refresh(0, (0..12).map(|i| (ClientId(i), 88 + i as BlockIdx, 1e6)).chain([(ClientId(99), 0, 50e6)]));
        // Block 101: 2 ms for the nearest slow one (at 99), 2.02 ms for the fast one.
        assert_eq!(f.next_use(101, 1000, |_| true), Some(2_000_000));
        // Block 110: 11 ms for the nearest slow one, 2.2 ms for the fast one.
        assert_eq!(f.next_use(110, 1000, |_| true), Some(2_200_000));
    }
}
