//! The whole-file check a download must pass before it is installed: the
//! part file is read back once, and hashed into the manifest's tree (native)
//! and into a SHA-256 (when a digest is known to compare it with).
//!
//! Blocks are verified as they arrive, but a resumed download also holds
//! blocks from earlier runs that only the state file vouches for, and the
//! part file may have been damaged since. Reading it back is what lets a
//! run exit 0 on the data itself rather than on its own notes.

use crate::digest::Sha256Digest;
use circus_core::BlockLayout;
use circus_proto::{HashTree, RootBuilder};
use sha2::{Digest, Sha256};
use std::{fs::File, io::Read, path::Path};

/// Plain downloads are read in pieces of this size.
const PIECE: usize = 1 << 20;

/// What reading the part file back found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Scan {
    /// The root over the file's blocks as they are on disk (native).
    pub root: Option<[u8; 32]>,
    /// The file's SHA-256, when asked for.
    pub sha256: Option<Sha256Digest>,
}

/// Reads `path` once: with `layout`, hashing each block into a leaf and the
/// leaves into a root; with `sha256`, the whole file into a digest. The file
/// must be exactly `layout.len()` bytes when a layout is given. Blocking.
pub(crate) fn scan(path: &Path, layout: Option<BlockLayout>, sha256: bool) -> std::io::Result<Scan> {
    let mut file = File::open(path)?;
    let mut digest = sha256.then(Sha256::new);
    let Some(layout) = layout else {
        let mut buf = vec![0u8; PIECE];
        loop {
            let n = file.read(&mut buf)?;
            if n == 0 {
                break;
            }
            if let Some(d) = digest.as_mut() {
                d.update(&buf[..n]);
            }
        }
        return Ok(Scan { root: None, sha256: digest.map(|d| Sha256Digest(d.finalize().into())) });
    };
    if file.metadata()?.len() != layout.len() {
        return Err(std::io::Error::other(format!("the part file is not {} bytes long", layout.len())));
    }
    // One block at a time: the state's block size is bounded (MAX_BLOCK_SIZE).
    let mut buf = vec![0u8; layout.block_size() as usize];
    let mut root = RootBuilder::new();
    for b in 0..layout.blocks() {
        let block = &mut buf[..layout.block_len(b) as usize];
        file.read_exact(block)?;
        root.push(HashTree::leaf_hash(block));
        if let Some(d) = digest.as_mut() {
            d.update(&*block);
        }
    }
    Ok(Scan { root: Some(root.finish()), sha256: digest.map(|d| Sha256Digest(d.finalize().into())) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use circus_proto::compute_root;

    #[test]
    fn finds_one_flipped_byte() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("part");
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        let layout = BlockLayout::new(data.len() as u64, 4096);
        let root = compute_root(&data.chunks(4096).map(HashTree::leaf_hash).collect::<Vec<_>>());
        std::fs::write(&path, &data).unwrap();
        let good = scan(&path, Some(layout), true).unwrap();
        assert_eq!(good.root, Some(root));
        assert_eq!(good.sha256, Some(Sha256Digest::of_file(&path).unwrap()));
        assert_eq!(scan(&path, None, true).unwrap().sha256, good.sha256);
        assert_eq!(scan(&path, None, false).unwrap(), Scan { root: None, sha256: None });

        let mut bad = data.clone();
        bad[9_999] ^= 1;
        std::fs::write(&path, &bad).unwrap();
        let scanned = scan(&path, Some(layout), false).unwrap();
        assert_ne!(scanned.root, Some(root));
        assert_eq!(scanned.sha256, None);
        // A part file of the wrong length is an error, not a root.
        std::fs::write(&path, &data[..9_000]).unwrap();
        assert!(scan(&path, Some(layout), false).is_err());
    }
}
