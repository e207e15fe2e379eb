//! A file version's hash index, kept beside the data under
//! `ROOT/.circus/index/` (a directory the server never serves).
//!
//! Layout (little endian): magic `CIDX0001`, size u64, mtime seconds i64,
//! mtime nanoseconds u32, block size u32, block count u32, SHA-256 [32],
//! tree root [32], then one 32-byte leaf hash per block. An index whose size,
//! mtime or block size does not match the file, or whose leaves do not hash
//! to its root, is ignored and rebuilt: a stale or damaged index can cost a
//! rebuild, never a wrong answer.

use crate::StoreError;
use circus_core::BlockLayout;
use sha2::{Digest, Sha256};
use std::{
    fs::{self, File},
    io::{self, Read, Write},
    path::{Path, PathBuf},
    time::UNIX_EPOCH,
};

/// The hidden directory under the served root; requests for it are refused.
pub const INDEX_DIR: &str = ".circus";
const MAGIC: &[u8; 8] = b"CIDX0001";
const HEADER: usize = 8 + 8 + 8 + 4 + 4 + 4 + 32 + 32;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileIndex {
    pub size: u64,
    pub mtime_secs: i64,
    pub mtime_nanos: u32,
    pub block_size: u32,
    /// SHA-256 of the whole file (the `Repr-Digest` value).
    pub sha256: [u8; 32],
    pub root: [u8; 32],
    pub leaves: Vec<[u8; 32]>,
}

/// Size and modification time: what identifies a file version.
fn version_of(path: &Path) -> Result<(u64, i64, u32), StoreError> {
    let read_err = |source| StoreError::Read { path: path.to_owned(), source };
    let meta = fs::metadata(path).map_err(read_err)?;
    if !meta.is_file() {
        return Err(StoreError::NotAFile { path: path.to_owned() });
    }
    let mtime = meta.modified().map_err(read_err)?;
    let (secs, nanos) = match mtime.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs() as i64, d.subsec_nanos()),
        Err(e) => (-(e.duration().as_secs() as i64), 0),
    };
    Ok((meta.len(), secs, nanos))
}

impl FileIndex {
    pub fn layout(&self) -> BlockLayout {
        BlockLayout::new(self.size, self.block_size)
    }

    /// Whether `data` is block `index` of this file version.
    pub fn verify(&self, index: u32, data: &[u8]) -> bool {
        self.leaves.get(index as usize).is_some_and(|leaf| *leaf == circus_proto::HashTree::leaf_hash(data))
    }

    /// Where the index of `rel` (a path relative to `root`) lives.
    pub fn path_for(root: &Path, rel: &str) -> PathBuf {
        let name = blake3::hash(rel.as_bytes()).to_hex();
        root.join(INDEX_DIR).join("index").join(format!("{}.idx", &name[..32]))
    }

    /// The stored index of `root/rel` if it matches the file as it is now,
    /// else a fresh one (built by reading the whole file, then stored).
    /// Blocking.
    pub fn load_or_build(root: &Path, rel: &str, block_size: u32) -> Result<FileIndex, StoreError> {
        let file = root.join(rel);
        let version = version_of(&file)?;
        let stored = Self::path_for(root, rel);
        if let Some(index) = Self::load(&stored).filter(|i| i.matches(version, block_size)) {
            return Ok(index);
        }
        let index = Self::build(&file, block_size)?;
        if let Err(e) = index.store(&stored) {
            // Serving still works without a stored index; it is rebuilt next time.
            tracing::warn!(error = %e, "could not store hash index");
        }
        Ok(index)
    }

    fn matches(&self, (size, secs, nanos): (u64, i64, u32), block_size: u32) -> bool {
        (self.size, self.mtime_secs, self.mtime_nanos, self.block_size) == (size, secs, nanos, block_size)
    }

    /// Reads the whole file once: leaf hashes and the SHA-256 together.
    pub fn build(path: &Path, block_size: u32) -> Result<FileIndex, StoreError> {
        let read_err = |source| StoreError::Read { path: path.to_owned(), source };
        let before = version_of(path)?;
        let layout = BlockLayout::new(before.0, block_size);
        let mut f = File::open(path).map_err(read_err)?;
        let mut sha = Sha256::new();
        let mut leaves = Vec::with_capacity(layout.blocks() as usize);
        let mut buf = vec![0u8; block_size as usize];
        for b in 0..layout.blocks() {
            let block = &mut buf[..layout.block_len(b) as usize];
            f.read_exact(block).map_err(|e| match e.kind() {
                io::ErrorKind::UnexpectedEof => StoreError::Changed { path: path.to_owned() },
                _ => read_err(e),
            })?;
            sha.update(&*block);
            leaves.push(circus_proto::HashTree::leaf_hash(block));
        }
        if version_of(path)? != before {
            return Err(StoreError::Changed { path: path.to_owned() });
        }
        Ok(FileIndex {
            size: before.0,
            mtime_secs: before.1,
            mtime_nanos: before.2,
            block_size,
            sha256: sha.finalize().into(),
            root: circus_proto::compute_root(&leaves),
            leaves,
        })
    }

    fn load(path: &Path) -> Option<FileIndex> {
        let bytes = fs::read(path).ok()?;
        if bytes.len() < HEADER || &bytes[..8] != MAGIC {
            return None;
        }
        let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
        let arr_at = |i: usize| -> [u8; 32] { bytes[i..i + 32].try_into().expect("32 bytes") };
        let (size, secs, nanos, block_size, count) = (u64_at(8), u64_at(16) as i64, u32_at(24), u32_at(28), u32_at(32));
        if block_size == 0 || u64::from(count) != size.div_ceil(u64::from(block_size)) {
            return None;
        }
        if bytes.len() != HEADER + 32 * count as usize {
            return None;
        }
        let leaves: Vec<[u8; 32]> = (0..count as usize).map(|i| arr_at(HEADER + 32 * i)).collect();
        let root = arr_at(68);
        (circus_proto::compute_root(&leaves) == root).then(|| FileIndex {
            size,
            mtime_secs: secs,
            mtime_nanos: nanos,
            block_size,
            sha256: arr_at(36),
            root,
            leaves,
        })
    }

    /// Writes the index atomically (temporary file, then rename).
    fn store(&self, path: &Path) -> Result<(), StoreError> {
        let err = |source| StoreError::WriteIndex { path: path.to_owned(), source };
        let dir = path.parent().expect("index path has a directory");
        fs::create_dir_all(dir).map_err(err)?;
        let mut out = Vec::with_capacity(HEADER + 32 * self.leaves.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.size.to_le_bytes());
        out.extend_from_slice(&self.mtime_secs.to_le_bytes());
        out.extend_from_slice(&self.mtime_nanos.to_le_bytes());
        out.extend_from_slice(&self.block_size.to_le_bytes());
        out.extend_from_slice(&(self.leaves.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.sha256);
        out.extend_from_slice(&self.root);
        self.leaves.iter().for_each(|l| out.extend_from_slice(l));
        // Unique per writer: two builds of one file in one process (a new
        // version seen while the old one is still being indexed) must not
        // rename each other's temporary file away.
        static WRITERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let writer = WRITERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = dir.join(format!(".tmp-{}-{writer}-{}", std::process::id(), hex::encode(&self.root[..8])));
        let mut f = File::create(&tmp).map_err(err)?;
        f.write_all(&out).and_then(|_| f.sync_all()).map_err(err)?;
        fs::rename(&tmp, path).map_err(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, data: &[u8]) {
        fs::create_dir_all(root.join(rel).parent().unwrap()).unwrap();
        fs::write(root.join(rel), data).unwrap();
    }

    #[test]
    fn builds_stores_reloads_and_rebuilds_on_change() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        write(dir.path(), "a/b.bin", &data);
        let first = FileIndex::load_or_build(dir.path(), "a/b.bin", 4096).unwrap();
        assert_eq!(first.leaves.len(), 3);
        assert_eq!(first.sha256, <[u8; 32]>::from(Sha256::digest(&data)));
        assert!(first.verify(2, &data[8192..]));
        assert!(!first.verify(2, &data[8191..10_000 - 1]));
        let stored = FileIndex::path_for(dir.path(), "a/b.bin");
        assert_eq!(FileIndex::load(&stored), Some(first.clone()));
        // Another block size does not reuse the stored index.
        assert_eq!(FileIndex::load_or_build(dir.path(), "a/b.bin", 8192).unwrap().leaves.len(), 2);
        // A changed file (new size) gets a new index.
        write(dir.path(), "a/b.bin", &data[..5000]);
        let changed = FileIndex::load_or_build(dir.path(), "a/b.bin", 4096).unwrap();
        assert_eq!(changed.size, 5000);
        assert_ne!(changed.root, first.root);
    }

    #[test]
    fn damaged_index_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "f", b"some bytes to hash");
        let good = FileIndex::load_or_build(dir.path(), "f", 4096).unwrap();
        let stored = FileIndex::path_for(dir.path(), "f");
        let mut bytes = fs::read(&stored).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        fs::write(&stored, &bytes).unwrap();
        assert_eq!(FileIndex::load(&stored), None);
        assert_eq!(FileIndex::load_or_build(dir.path(), "f", 4096).unwrap(), good);
    }

    #[test]
    fn empty_file_has_no_leaves() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "empty", b"");
        let i = FileIndex::load_or_build(dir.path(), "empty", 4096).unwrap();
        assert!(i.leaves.is_empty());
        assert_eq!(i.root, circus_proto::compute_root(&[]));
    }
}
