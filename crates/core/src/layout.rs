//! How a file of `len` bytes is cut into fixed-size blocks.

use crate::BlockIdx;
use serde::{Deserialize, Serialize};

/// The block geometry of one file: every block is `block_size` bytes except
/// possibly the last, which holds the remainder. An empty file has no blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockLayout {
    len: u64,
    block_size: u32,
}

impl BlockLayout {
    /// # Panics
    /// If `block_size` is zero, or the file would need more than `u32::MAX` blocks.
    pub fn new(len: u64, block_size: u32) -> Self {
        assert!(block_size > 0, "block size must be positive");
        let layout = Self { len, block_size };
        assert!(
            len.div_ceil(u64::from(block_size)) <= u64::from(u32::MAX),
            "file of {len} bytes has too many {block_size}-byte blocks"
        );
        layout
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    /// Number of blocks, counting a short last block.
    pub fn blocks(&self) -> u32 {
        self.len.div_ceil(u64::from(self.block_size)) as u32
    }

    /// Byte offset of block `b`.
    pub fn offset(&self, b: BlockIdx) -> u64 {
        u64::from(b) * u64::from(self.block_size)
    }

    /// Length of block `b` in bytes; only the last block may be short.
    ///
    /// # Panics
    /// If `b` is not a block of this file.
    pub fn block_len(&self, b: BlockIdx) -> u32 {
        assert!(b < self.blocks(), "block {b} out of range ({} blocks)", self.blocks());
        let rest = self.len - self.offset(b);
        rest.min(u64::from(self.block_size)) as u32
    }

    /// The block holding byte `offset`, or `None` past the end.
    pub fn block_of(&self, offset: u64) -> Option<BlockIdx> {
        (offset < self.len).then(|| (offset / u64::from(self.block_size)) as BlockIdx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn table() {
        struct Case {
            len: u64,
            bs: u32,
            blocks: u32,
            last: Option<u32>,
        }
        let cases = [
            Case { len: 0, bs: 4, blocks: 0, last: None },
            Case { len: 1, bs: 4, blocks: 1, last: Some(1) },
            Case { len: 4, bs: 4, blocks: 1, last: Some(4) },
            Case { len: 5, bs: 4, blocks: 2, last: Some(1) },
            Case { len: 8, bs: 4, blocks: 2, last: Some(4) },
        ];
        for c in cases {
            let l = BlockLayout::new(c.len, c.bs);
            assert_eq!(l.blocks(), c.blocks, "len {}", c.len);
            assert_eq!(c.last, c.blocks.checked_sub(1).map(|b| l.block_len(b)), "len {}", c.len);
        }
    }

    proptest! {
        #[test]
        fn blocks_tile_the_file(len in 0u64..10_000_000, bs in 1u32..200_000) {
            let l = BlockLayout::new(len, bs);
            let total: u64 = (0..l.blocks()).map(|b| u64::from(l.block_len(b))).sum();
            prop_assert_eq!(total, len);
            for b in 0..l.blocks() {
                prop_assert_eq!(l.block_of(l.offset(b)), Some(b));
            }
            prop_assert_eq!(l.block_of(len), None);
        }
    }
}
