//! The hash tree of an origin object version, learnt as its blocks pass
//! through the tier. A local file's tree is built by reading the file once;
//! an origin object is read once anyway by the first clients, so each
//! origin block is hashed when its fetch completes, and once every block
//! has been seen the version has a complete index: native clients can then
//! be sent its blocks in the scheduler's order, each checked on its own.
//!
//! Leaves are per native block (the scheduler's `--block`), which divides
//! the origin block (`--origin-block`), so one origin block gives whole
//! leaves and never part of one.

use circus_core::BlockLayout;
use circus_proto::{HashTree, compute_root};
use circus_store::FileIndex;
use std::sync::{Arc, Mutex, OnceLock};

#[derive(Debug)]
pub struct Leaves {
    /// The native block layout of the object.
    layout: BlockLayout,
    /// Native blocks per origin block.
    per_origin: u32,
    learning: Mutex<Learning>,
    index: OnceLock<Arc<FileIndex>>,
}

#[derive(Debug, Default)]
struct Learning {
    leaves: Vec<[u8; 32]>,
    /// Which origin blocks were hashed already.
    seen: Vec<bool>,
    left: usize,
}

impl Leaves {
    /// For an object of `size` bytes fetched in `origin_block` units and
    /// served natively in `native_block` units (which must divide it).
    pub fn new(size: u64, native_block: u32, origin_block: u32) -> Self {
        debug_assert_eq!(origin_block % native_block, 0, "checked by the config");
        let layout = BlockLayout::new(size, native_block);
        let origin_blocks = BlockLayout::new(size, origin_block).blocks() as usize;
        let learning = Learning {
            leaves: vec![[0; 32]; layout.blocks() as usize],
            seen: vec![false; origin_blocks],
            left: origin_blocks,
        };
        let leaves = Leaves {
            layout,
            per_origin: origin_block / native_block,
            learning: Mutex::new(learning),
            index: OnceLock::new(),
        };
        if origin_blocks == 0 {
            leaves.finish(Vec::new());
        }
        leaves
    }

    /// Hashes origin block `b` (its whole bytes, just fetched). A block
    /// seen before (fetched anew after eviction) must hash as it did:
    /// false when it does not, which means the origin changed the object
    /// under the same validators.
    pub fn record(&self, b: u32, bytes: &[u8]) -> bool {
        let first = b * self.per_origin;
        let hashed: Vec<[u8; 32]> = (first..(first + self.per_origin).min(self.layout.blocks()))
            .map(|n| {
                let from = (self.layout.offset(n) - self.layout.offset(first)) as usize;
                bytes.get(from..from + self.layout.block_len(n) as usize).map_or([0; 32], HashTree::leaf_hash)
            })
            .collect();
        let mut l = self.learning.lock().expect("leaves lock");
        let known = first as usize..first as usize + hashed.len();
        match l.seen.get(b as usize) {
            None => return false,
            Some(true) => return l.leaves.get(known) == Some(&hashed[..]),
            Some(false) => {}
        }
        l.seen[b as usize] = true;
        l.left -= 1;
        l.leaves[known].copy_from_slice(&hashed);
        if l.left == 0 {
            // Kept to check blocks fetched again against.
            let leaves = l.leaves.clone();
            drop(l);
            self.finish(leaves);
        }
        true
    }

    fn finish(&self, leaves: Vec<[u8; 32]>) {
        let index = FileIndex {
            size: self.layout.len(),
            version: None,
            block_size: self.layout.block_size(),
            // Unknown: blocks may arrive out of order. Clients check the
            // origin's Repr-Digest when it sends one.
            sha256: [0; 32],
            root: compute_root(&leaves),
            leaves,
        };
        let _ = self.index.set(Arc::new(index));
    }

    /// The complete index, once every block has been seen.
    pub fn index(&self) -> Option<Arc<FileIndex>> {
        self.index.get().cloned()
    }

    /// Bytes this holds, for the store's budget.
    pub fn bytes(&self) -> u64 {
        64 * u64::from(self.layout.blocks()) + self.learning.lock().expect("leaves lock").seen.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_appears_once_every_origin_block_was_seen_in_any_order_and_matches_a_local_build() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let leaves = Leaves::new(data.len() as u64, 1024, 4096);
        let origin = BlockLayout::new(data.len() as u64, 4096);
        let block =
            |b: u32| &data[origin.offset(b) as usize..(origin.offset(b) + u64::from(origin.block_len(b))) as usize];
        assert!(leaves.record(2, block(2)));
        assert!(leaves.record(0, block(0)));
        assert!(leaves.record(0, block(0)), "the same bytes again");
        assert!(!leaves.record(0, block(1)), "other bytes for a block seen before");
        assert!(leaves.index().is_none(), "block 1 was never seen");
        assert!(leaves.record(1, block(1)));
        assert!(!leaves.record(2, block(0)), "checked after the index is complete too");
        let index = leaves.index().expect("complete");
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), &data).unwrap();
        let local = FileIndex::build(
            &dir.path().join("f"),
            circus_store::FileVersion::of(&std::fs::metadata(dir.path().join("f")).unwrap()),
            1024,
            &mut |_| {},
        )
        .unwrap();
        assert_eq!((index.root, &index.leaves), (local.root, &local.leaves));
        assert!(index.verify(9, &data[9 * 1024..]), "the short last block has its own leaf");
    }

    #[test]
    fn an_empty_object_is_complete_at_once() {
        assert_eq!(Leaves::new(0, 1024, 4096).index().unwrap().leaves.len(), 0);
    }
}
