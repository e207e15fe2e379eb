//! The BLAKE3 hash tree over a file's blocks.
//!
//! Each leaf hashes one block, so a block can be checked alone the moment it
//! arrives, in any order. The root commits to the whole leaf list in 32 bytes,
//! which is what a resuming client compares to know the file did not change.
//! The one-byte prefixes (0x00 leaf, 0x01 node, 0x02 empty file) keep the
//! three kinds of hash from ever colliding with one another, so no block can
//! be passed off as an interior node or vice versa.

/// Prefix of a leaf hash input: `BLAKE3(0x00 || block)`.
const LEAF: u8 = 0x00;
/// Prefix of an interior node input: `BLAKE3(0x01 || left || right)`.
const NODE: u8 = 0x01;
/// The whole input whose hash is the root of an empty file: `BLAKE3(0x02)`.
const EMPTY: u8 = 0x02;

/// A file's leaf hashes and the root over them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HashTree {
    leaves: Vec<[u8; 32]>,
    root: [u8; 32],
}

impl HashTree {
    /// Builds the tree over leaves computed with [`HashTree::leaf_hash`].
    pub fn from_leaves(leaves: Vec<[u8; 32]>) -> Self {
        let root = compute_root(&leaves);
        Self { leaves, root }
    }

    /// The leaf hash of one block: `BLAKE3(0x00 || block)`.
    pub fn leaf_hash(block: &[u8]) -> [u8; 32] {
        let mut h = blake3::Hasher::new();
        h.update(&[LEAF]);
        h.update(block);
        *h.finalize().as_bytes()
    }

    pub fn root(&self) -> [u8; 32] {
        self.root
    }

    pub fn leaves(&self) -> &[[u8; 32]] {
        &self.leaves
    }

    pub fn into_leaves(self) -> Vec<[u8; 32]> {
        self.leaves
    }

    /// Whether `bytes` are block `index` of this file (false for an index
    /// past the end).
    pub fn verify_block(&self, index: u32, bytes: &[u8]) -> bool {
        verify_leaf(&self.leaves, index, bytes)
    }
}

pub(crate) fn verify_leaf(leaves: &[[u8; 32]], index: u32, bytes: &[u8]) -> bool {
    leaves.get(index as usize).is_some_and(|leaf| *leaf == HashTree::leaf_hash(bytes))
}

fn node_hash(left: &[u8; 32], right: &[u8; 32]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(&[NODE]);
    h.update(left);
    h.update(right);
    *h.finalize().as_bytes()
}

/// The root over `leaves`: pair nodes left to right, level by level, hashing
/// each pair as `BLAKE3(0x01 || left || right)`; an odd node at the end of a
/// level moves up unchanged. One leaf is its own root; no leaves hash to
/// `BLAKE3(0x02)`.
pub fn compute_root(leaves: &[[u8; 32]]) -> [u8; 32] {
    match leaves {
        [] => *blake3::hash(&[EMPTY]).as_bytes(),
        [only] => *only,
        _ => {
            // The first level is built from the borrowed leaves so the caller's
            // list is never copied; later levels reuse one buffer in place.
            let mut level: Vec<[u8; 32]> = leaves.chunks(2).map(pair).collect();
            while level.len() > 1 {
                let n = level.len();
                for i in 0..n.div_ceil(2) {
                    level[i] = pair(&level[2 * i..(2 * i + 2).min(n)]);
                }
                level.truncate(n.div_ceil(2));
            }
            level[0]
        }
    }
}

/// The root over leaves given one at a time, in index order, in memory
/// logarithmic in their number: for rehashing a file from disk without
/// holding its leaf list. Equals [`compute_root`] over the same leaves.
///
/// ```
/// use circus_proto::{HashTree, RootBuilder, compute_root};
/// let leaves: Vec<[u8; 32]> = [&b"hell"[..], b"owor", b"ld"].map(HashTree::leaf_hash).to_vec();
/// let mut b = RootBuilder::new();
/// leaves.iter().for_each(|l| b.push(*l));
/// assert_eq!(b.finish(), compute_root(&leaves));
/// ```
#[derive(Debug, Clone, Default)]
pub struct RootBuilder {
    /// The roots of complete subtrees over consecutive leaves, each with
    /// its height, heights strictly decreasing: the binary digits of the
    /// leaf count so far.
    stack: Vec<(u32, [u8; 32])>,
}

impl RootBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the next leaf (see [`HashTree::leaf_hash`]).
    pub fn push(&mut self, leaf: [u8; 32]) {
        let mut node = (0, leaf);
        while let Some(&(height, left)) = self.stack.last()
            && height == node.0
        {
            self.stack.pop();
            node = (height + 1, node_hash(&left, &node.1));
        }
        self.stack.push(node);
    }

    /// The root. Pairing level by level with odd nodes promoted (as
    /// [`compute_root`] does) joins the complete subtrees right to left.
    pub fn finish(mut self) -> [u8; 32] {
        let Some((_, mut root)) = self.stack.pop() else {
            return compute_root(&[]);
        };
        while let Some((_, left)) = self.stack.pop() {
            root = node_hash(&left, &root);
        }
        root
    }
}

/// A pair hashes to a node; a lone trailing node is promoted as it is.
fn pair(nodes: &[[u8; 32]]) -> [u8; 32] {
    match nodes {
        [left, right] => node_hash(left, right),
        [odd] => *odd,
        _ => unreachable!("chunks of two"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The textbook recursive definition, to check the in-place loop against.
    fn naive_root(level: Vec<[u8; 32]>) -> [u8; 32] {
        match level.len() {
            0 => *blake3::hash(&[2]).as_bytes(),
            1 => level[0],
            _ => {
                naive_root(level.chunks(2).map(|c| if c.len() == 2 { node_hash(&c[0], &c[1]) } else { c[0] }).collect())
            }
        }
    }

    #[test]
    fn small_trees_by_hand() {
        let l: Vec<[u8; 32]> = (0u8..5).map(|i| HashTree::leaf_hash(&[i])).collect();
        assert_eq!(compute_root(&l[..1]), l[0]);
        assert_eq!(compute_root(&l[..2]), node_hash(&l[0], &l[1]));
        // Three leaves: the third is promoted past the first level.
        assert_eq!(compute_root(&l[..3]), node_hash(&node_hash(&l[0], &l[1]), &l[2]));
        // Five leaves: the fifth is promoted twice.
        let four = node_hash(&node_hash(&l[0], &l[1]), &node_hash(&l[2], &l[3]));
        assert_eq!(compute_root(&l), node_hash(&four, &l[4]));
        assert_eq!(compute_root(&[]), *blake3::hash(&[EMPTY]).as_bytes());
    }

    #[test]
    fn leaf_and_node_domains_differ() {
        // A block whose bytes are exactly "left || right" must not hash like
        // the node over those two children.
        let (a, b) = (HashTree::leaf_hash(b"a"), HashTree::leaf_hash(b"b"));
        let mut joined = a.to_vec();
        joined.extend_from_slice(&b);
        assert_ne!(HashTree::leaf_hash(&joined), node_hash(&a, &b));
        assert_ne!(HashTree::leaf_hash(&[]), compute_root(&[]));
    }

    #[test]
    fn verify_block_checks_index_and_bytes() {
        let tree = HashTree::from_leaves(vec![HashTree::leaf_hash(b"hell"), HashTree::leaf_hash(b"owor")]);
        assert!(tree.verify_block(1, b"owor"));
        assert!(!tree.verify_block(0, b"owor"));
        assert!(!tree.verify_block(2, b"owor"));
        assert!(!tree.verify_block(1, b"owoR"));
        assert_eq!(tree.root(), compute_root(tree.leaves()));
    }

    proptest! {
        #[test]
        fn in_place_root_matches_recursive_definition(n in 0usize..70) {
            let leaves: Vec<[u8; 32]> = (0..n as u32).map(|i| HashTree::leaf_hash(&i.to_be_bytes())).collect();
            prop_assert_eq!(compute_root(&leaves), naive_root(leaves.clone()));
        }

        #[test]
        fn streamed_root_matches_compute_root(n in 0usize..300) {
            let leaves: Vec<[u8; 32]> = (0..n as u32).map(|i| HashTree::leaf_hash(&i.to_be_bytes())).collect();
            let mut b = RootBuilder::new();
            leaves.iter().for_each(|l| b.push(*l));
            prop_assert_eq!(b.finish(), compute_root(&leaves));
        }
    }
}
