//! The fewest storage reads any cache of a given size could have served a
//! crowd of in-order readers with: Belady's offline rule (evict the block
//! needed furthest in the future, and do not keep a block read now if every
//! block in memory is needed sooner) on the exact sequence of block reads
//! the crowd makes when each reader goes at its own steady rate.
//!
//! In-order readers at steady rates read block `b` at `start + b x block /
//! rate` whatever the server does, so this sequence is known in advance and
//! no scheduler, however clever, can read less than this bound without
//! changing when clients read (pacing them) or what they read.

use circus_core::BlockLayout;
use std::{collections::BTreeSet, ops::Range};

/// One in-order reader: when it starts, seconds, its rate, bytes per
/// second, and the bytes it reads (`None`: the whole file; a range request
/// reads only part, as each connection of a segmented downloader does).
#[derive(Debug, Clone, PartialEq)]
pub struct Reader {
    pub start_s: f64,
    pub bytes_per_s: f64,
    pub bytes: Option<Range<u64>>,
}

impl Reader {
    /// A reader of the whole file.
    pub fn whole(start_s: f64, bytes_per_s: f64) -> Self {
        Reader { start_s, bytes_per_s, bytes: None }
    }

    /// The blocks it reads, each with when it reads it (seconds).
    fn reads(&self, layout: BlockLayout) -> impl Iterator<Item = (f64, u32)> + '_ {
        let (from, to) = self.bytes.as_ref().map_or((0, layout.len()), |r| (r.start, r.end.min(layout.len())));
        let first = (from / u64::from(layout.block_size())) as u32;
        (first..layout.blocks()).take_while(move |&b| layout.offset(b) < to).map(move |b| {
            let at = layout.offset(b).max(from) - from;
            (self.start_s + at as f64 / self.bytes_per_s, b)
        })
    }
}

/// Blocks read from storage by the best possible eviction with room for
/// `cache_blocks` blocks.
pub fn fewest_reads(readers: &[Reader], layout: BlockLayout, cache_blocks: usize) -> u64 {
    let n = layout.blocks() as usize;
    if cache_blocks == 0 {
        return readers.iter().map(|r| r.reads(layout).count() as u64).sum();
    }
    // Every (time, block) access, in time order (ties: block order).
    let mut accesses: Vec<(u64, u32)> = Vec::with_capacity(readers.len() * n);
    for r in readers {
        accesses.extend(r.reads(layout).map(|(t, b)| ((t * 1e9) as u64, b)));
    }
    accesses.sort_unstable();
    // Each block's access times, in order, and how many were served.
    let mut uses: Vec<Vec<u64>> = vec![Vec::new(); n];
    for &(t, b) in &accesses {
        uses[b as usize].push(t);
    }
    let mut done = vec![0usize; n];
    let next_use = |b: usize, done: &[usize]| uses[b].get(done[b]).copied().unwrap_or(u64::MAX);
    // Resident blocks by next use; `key` holds each resident block's entry.
    let mut resident: BTreeSet<(u64, u32)> = BTreeSet::new();
    let mut key: Vec<Option<u64>> = vec![None; n];
    let mut reads = 0;
    for &(_, b) in &accesses {
        let i = b as usize;
        done[i] += 1;
        let next = next_use(i, &done);
        if let Some(k) = key[i].take() {
            resident.remove(&(k, b));
        } else {
            reads += 1;
            if resident.len() >= cache_blocks {
                let &(furthest, victim) = resident.last().expect("a full cache holds blocks");
                if furthest <= next {
                    // Every block in memory is needed sooner: do not keep this one.
                    continue;
                }
                resident.remove(&(furthest, victim));
                key[victim as usize] = None;
            }
        }
        if next == u64::MAX {
            // Nobody reads it again: keeping it serves nobody.
            continue;
        }
        resident.insert((next, b));
        key[i] = Some(next);
    }
    reads
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(blocks: u64) -> BlockLayout {
        BlockLayout::new(blocks * 1000, 1000)
    }

    #[test]
    fn readers_in_step_read_the_file_once_and_no_cache_reads_it_per_reader() {
        let same = [Reader::whole(0.0, 1e6), Reader::whole(0.0, 1e6), Reader::whole(0.0, 1e6)];
        assert_eq!(fewest_reads(&same, layout(100), 1), 100);
        let apart: Vec<Reader> = (0..3).map(|i| Reader::whole(f64::from(i), 1e6)).collect();
        assert_eq!(fewest_reads(&apart, layout(100), 0), 300);
        // One second apart at 1,000 blocks a second: 1,000 blocks in between.
        assert_eq!(fewest_reads(&apart, layout(100), 100), 100);
    }

    #[test]
    fn a_fast_and_a_slow_reader_share_what_fits_between_them() {
        // The slow reader falls behind at 50 blocks per 100 blocks read by
        // the fast one; a cache of 10 blocks keeps the nearest 10 of them.
        let readers = [Reader::whole(0.0, 2e6), Reader::whole(0.0, 1e6)];
        let reads = fewest_reads(&readers, layout(100), 10);
        assert!((110..=200).contains(&reads), "{reads}");
        assert!(fewest_reads(&readers, layout(100), 100) == 100);
        assert!(fewest_reads(&readers, layout(100), 0) == 200);
    }

    #[test]
    fn range_readers_read_only_their_blocks_and_share_the_ones_in_common() {
        // Blocks 10..30 and 20..40 (bytes 10,500..30,000 starts inside
        // block 10), both at once: 30 blocks with room for everything, and
        // the 10 in common read once.
        let a = Reader { start_s: 0.0, bytes_per_s: 1e6, bytes: Some(10_500..30_000) };
        let b = Reader { start_s: 0.0, bytes_per_s: 1e6, bytes: Some(20_000..40_000) };
        assert_eq!(a.reads(layout(100)).count(), 20);
        assert_eq!(a.reads(layout(100)).next(), Some((0.0, 10)));
        assert_eq!(fewest_reads(&[a.clone(), b.clone()], layout(100), 100), 30);
        assert_eq!(fewest_reads(&[a, b], layout(100), 0), 40);
    }
}
