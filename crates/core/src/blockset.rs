//! A fixed-capacity set of block indices, stored as a bitmap.
//!
//! The scheduler's hot path is "find the first block in this circular range
//! that is in set A and not in set B". Doing that a word (64 blocks) at a time
//! keeps a pick to a handful of instructions even for a 16 MiB active region
//! of 4 KiB blocks, so the searches here take a closure that combines whole
//! words of several sets.

use crate::BlockIdx;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BlockSet {
    words: Vec<u64>,
    capacity: u32,
    count: u32,
}

impl BlockSet {
    /// An empty set that can hold blocks `0..capacity`.
    pub fn new(capacity: u32) -> Self {
        Self { words: vec![0; (capacity as usize).div_ceil(64)], capacity, count: 0 }
    }

    /// The set `0..capacity`.
    pub fn full(capacity: u32) -> Self {
        let mut s = Self::new(capacity);
        for w in 0..s.words.len() {
            s.words[w] = s.valid_mask(w);
        }
        s.count = capacity;
        s
    }

    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Number of members.
    pub fn len(&self) -> u32 {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn is_full(&self) -> bool {
        self.count == self.capacity
    }

    pub fn contains(&self, b: BlockIdx) -> bool {
        b < self.capacity && self.words[(b / 64) as usize] & (1 << (b % 64)) != 0
    }

    /// Adds `b`; returns whether it was newly added.
    ///
    /// # Panics
    /// If `b` is outside the capacity.
    pub fn insert(&mut self, b: BlockIdx) -> bool {
        assert!(b < self.capacity, "block {b} outside set of {}", self.capacity);
        let (w, bit) = ((b / 64) as usize, 1u64 << (b % 64));
        let fresh = self.words[w] & bit == 0;
        self.words[w] |= bit;
        self.count += u32::from(fresh);
        fresh
    }

    /// Removes `b`; returns whether it was present.
    pub fn remove(&mut self, b: BlockIdx) -> bool {
        if b >= self.capacity {
            return false;
        }
        let (w, bit) = ((b / 64) as usize, 1u64 << (b % 64));
        let present = self.words[w] & bit != 0;
        self.words[w] &= !bit;
        self.count -= u32::from(present);
        present
    }

    /// Word `w` of the bitmap (bits past the capacity are zero).
    #[inline]
    pub fn word(&self, w: usize) -> u64 {
        self.words[w]
    }

    /// Word `w` of the complement, restricted to valid blocks.
    #[inline]
    pub fn missing_word(&self, w: usize) -> u64 {
        !self.words[w] & self.valid_mask(w)
    }

    fn valid_mask(&self, w: usize) -> u64 {
        let rest = self.capacity as usize - w * 64;
        if rest >= 64 { u64::MAX } else { (1u64 << rest) - 1 }
    }

    /// Members in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = BlockIdx> + '_ {
        self.words.iter().enumerate().flat_map(|(w, &word)| {
            let mut bits = word;
            std::iter::from_fn(move || {
                (bits != 0).then(|| {
                    let b = bits.trailing_zeros();
                    bits &= bits - 1;
                    w as u32 * 64 + b
                })
            })
        })
    }
}

/// First block in `[from, to)` whose bit is set in `word(w)`, where `word`
/// yields a combined 64-block word (for example `a.word(w) & !b.word(w)`).
/// The caller's words must not set bits at or past the capacity.
#[inline]
pub fn first_in(from: u32, to: u32, word: impl Fn(usize) -> u64) -> Option<BlockIdx> {
    if from >= to {
        return None;
    }
    let (first_w, last_w) = ((from / 64) as usize, ((to - 1) / 64) as usize);
    for w in first_w..=last_w {
        let mut bits = word(w);
        if w == first_w {
            bits &= u64::MAX << (from % 64);
        }
        if bits != 0 {
            let b = w as u32 * 64 + bits.trailing_zeros();
            return (b < to).then_some(b);
        }
    }
    None
}

/// Like [`first_in`] over the circular range of `count` blocks starting at
/// `start` in a file of `n` blocks (wrapping from `n - 1` to `0`).
#[inline]
pub fn first_in_circular(n: u32, start: u32, count: u32, word: impl Fn(usize) -> u64) -> Option<BlockIdx> {
    circular_segments(n, start, count).find_map(|(from, to)| first_in(from, to, &word))
}

/// The circular range of `count` blocks from `start` in a file of `n`
/// blocks, as at most two plain ranges in order.
fn circular_segments(n: u32, start: u32, count: u32) -> impl Iterator<Item = (u32, u32)> {
    let count = if n == 0 { 0 } else { count.min(n) };
    let end = u64::from(start) + u64::from(count);
    let wraps = end > u64::from(n);
    let first = if wraps { (start, n) } else { (start, end as u32) };
    let second = wraps.then(|| (0, (end - u64::from(n)) as u32));
    (count > 0).then_some(first).into_iter().chain(second)
}

/// Rank of a block in the spread order: its index with the bits reversed,
/// so that 1, 3, 5, ... (odd blocks) come before even ones, then 3 mod 4
/// before 1 mod 4, and so on. Clients that each take the highest-ranked
/// blocks they can get end up holding nested sets (a client that got a
/// quarter of a run holds part of what a client that got half of it holds),
/// whatever moment each of them picked at.
#[inline]
pub fn spread_rank(b: BlockIdx) -> u32 {
    b.reverse_bits()
}

/// The block in `[from, to)` with the highest [`spread_rank`] among those
/// set in `word(w)` (same contract as [`first_in`]).
pub fn best_spread_in(from: u32, to: u32, word: impl Fn(usize) -> u64) -> Option<BlockIdx> {
    // Masks of the positions in a word whose bit k is set, k = 0..5: the
    // low six bits of an index decide its rank before the word number does.
    const BIT_SET: [u64; 6] = [
        0xAAAA_AAAA_AAAA_AAAA,
        0xCCCC_CCCC_CCCC_CCCC,
        0xF0F0_F0F0_F0F0_F0F0,
        0xFF00_FF00_FF00_FF00,
        0xFFFF_0000_FFFF_0000,
        0xFFFF_FFFF_0000_0000,
    ];
    if from >= to {
        return None;
    }
    let (first_w, last_w) = ((from / 64) as usize, ((to - 1) / 64) as usize);
    let mut best: Option<BlockIdx> = None;
    for w in first_w..=last_w {
        let mut bits = word(w);
        if w == first_w {
            bits &= u64::MAX << (from % 64);
        }
        if w == last_w && !to.is_multiple_of(64) {
            bits &= u64::MAX >> (64 - to % 64);
        }
        if bits == 0 {
            continue;
        }
        for mask in BIT_SET {
            if bits & mask != 0 {
                bits &= mask;
            }
        }
        let b = w as u32 * 64 + bits.trailing_zeros();
        if best.is_none_or(|x| spread_rank(b) > spread_rank(x)) {
            best = Some(b);
        }
    }
    best
}

/// Like `best_spread_in` over a circular range, as [`first_in_circular`].
pub fn best_spread_in_circular(n: u32, start: u32, count: u32, word: impl Fn(usize) -> u64) -> Option<BlockIdx> {
    circular_segments(n, start, count)
        .filter_map(|(from, to)| best_spread_in(from, to, &word))
        .max_by_key(|&b| spread_rank(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn insert_remove_count() {
        let mut s = BlockSet::new(130);
        assert!(s.insert(0) && s.insert(129) && !s.insert(129));
        assert_eq!(s.len(), 2);
        assert!(s.remove(0) && !s.remove(0) && !s.remove(500));
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![129]);
        assert!(BlockSet::full(130).is_full());
        assert_eq!(BlockSet::full(130).missing_word(2), 0);
        assert_eq!(BlockSet::new(130).missing_word(2), 0b11);
    }

    #[test]
    fn spread_order_puts_odd_blocks_first_and_nests() {
        let mut order: Vec<u32> = (0..8).collect();
        order.sort_by_key(|&b| std::cmp::Reverse(spread_rank(b)));
        assert_eq!(order, vec![7, 3, 5, 1, 6, 2, 4, 0]);
        let all = BlockSet::full(8);
        assert_eq!(best_spread_in_circular(8, 0, 8, |w| all.word(w)), Some(7));
        assert_eq!(best_spread_in_circular(8, 4, 2, |w| all.word(w)), Some(5));
    }

    #[test]
    fn circular_search_wraps() {
        let mut s = BlockSet::new(10);
        s.insert(2);
        assert_eq!(first_in_circular(10, 5, 10, |w| s.word(w)), Some(2));
        assert_eq!(first_in_circular(10, 5, 5, |w| s.word(w)), None);
        assert_eq!(first_in_circular(10, 2, 1, |w| s.word(w)), Some(2));
    }

    proptest! {
        #[test]
        fn circular_search_matches_naive(
            n in 1u32..300,
            members in proptest::collection::vec(0u32..300, 0..40),
            start in 0u32..300,
            count in 0u32..320,
        ) {
            let start = start % n;
            let mut s = BlockSet::new(n);
            for m in members.into_iter().filter(|&m| m < n) {
                s.insert(m);
            }
            let naive = (0..count.min(n)).map(|i| (start + i) % n).find(|&b| s.contains(b));
            prop_assert_eq!(first_in_circular(n, start, count, |w| s.word(w)), naive);
            let naive_missing = (0..n).map(|i| (start + i) % n).find(|&b| !s.contains(b));
            prop_assert_eq!(first_in_circular(n, start, n, |w| s.missing_word(w)), naive_missing);
            let naive_best = (0..count.min(n)).map(|i| (start + i) % n).filter(|&b| s.contains(b)).max_by_key(|&b| spread_rank(b));
            prop_assert_eq!(best_spread_in_circular(n, start, count, |w| s.word(w)), naive_best);
        }
    }
}
