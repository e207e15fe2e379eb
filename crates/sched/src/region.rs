//! A file's active region: a circular window of blocks `[start, start+len)`
//! that the scheduler tries to keep resident and that followers draw from.
//!
//! The window only describes positions. Blocks inside it may be absent (a
//! frontrunner skipped a block it already had, or memory pressure evicted
//! one); residency is tracked separately.

use circus_core::BlockIdx;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Region {
    /// Blocks in the file.
    n: u32,
    /// The file cursor: the oldest block of the window.
    pub start: BlockIdx,
    /// Window length in blocks; 0 before the first frontrunner read.
    pub len: u32,
}

impl Region {
    pub fn new(n: u32) -> Self {
        Self { n, start: 0, len: 0 }
    }

    /// Circular distance from `a` forward to `b`.
    pub fn dist(&self, a: BlockIdx, b: BlockIdx) -> u32 {
        if b >= a { b - a } else { self.n - a + b }
    }

    /// The position right after the window, where a frontrunner reads next.
    pub fn head(&self) -> BlockIdx {
        ((u64::from(self.start) + u64::from(self.len)) % u64::from(self.n.max(1))) as BlockIdx
    }

    pub fn contains(&self, b: BlockIdx) -> bool {
        self.len > 0 && self.dist(self.start, b) < self.len
    }

    /// Extends the window to end at `b` inclusive, then slides its start
    /// forward until it is at most `max_len` long. Calls `departed` for each
    /// block that leaves the window, oldest first, and returns how many
    /// blocks between the old head and `b` were skipped (never read).
    pub fn extend_to(&mut self, b: BlockIdx, max_len: u32, mut departed: impl FnMut(BlockIdx)) -> u32 {
        let max_len = max_len.clamp(1, self.n);
        if self.len == 0 {
            self.start = b;
            self.len = 1;
            return 0;
        }
        if self.len >= self.n {
            // The window already holds the whole file: it only turns.
            self.start = (b + 1) % self.n;
            return 0;
        }
        if self.contains(b) {
            return 0;
        }
        let skipped = self.dist(self.head(), b);
        let mut len = u64::from(self.dist(self.start, b)) + 1;
        while len > u64::from(max_len) {
            departed(self.start);
            self.start = (self.start + 1) % self.n;
            len -= 1;
        }
        self.len = len as u32;
        skipped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slides_and_wraps() {
        let mut r = Region::new(10);
        assert_eq!(r.extend_to(8, 3, |_| panic!("nothing departs")), 0);
        assert_eq!((r.start, r.len, r.head()), (8, 1, 9));
        r.extend_to(9, 3, |_| ());
        r.extend_to(0, 3, |_| ());
        let mut gone = vec![];
        r.extend_to(1, 3, |b| gone.push(b));
        assert_eq!(gone, vec![8]);
        assert_eq!((r.start, r.len, r.head()), (9, 3, 2));
        assert!(r.contains(0) && r.contains(9) && !r.contains(8) && !r.contains(2));
    }

    #[test]
    fn skipped_blocks_are_counted_and_window_covers_small_files() {
        let mut r = Region::new(4);
        r.extend_to(0, 16, |_| ());
        assert_eq!(r.extend_to(2, 16, |_| ()), 1);
        assert_eq!(r.len, 3);
        r.extend_to(3, 16, |_| ());
        // A window as long as the file holds every block; extending past the
        // end slides it without anything ever leaving.
        let mut gone = 0;
        r.extend_to(0, 16, |_| gone += 1);
        assert_eq!(gone, 0);
        assert_eq!(r.len, 4);
        assert!((0..4).all(|b| r.contains(b)));
    }
}
