//! A file version's hash index, kept in an index directory: by default
//! `ROOT/.circus/index/` beside the data (a directory the server never
//! serves), or wherever the operator puts it (`--index-dir`, for a
//! read-only tree).
//!
//! Layout (little endian): magic `CIDX0003`, size u64, mtime seconds i64,
//! mtime nanoseconds u32, ctime seconds i64, ctime nanoseconds u32, device
//! u64, inode u64, block size u32, block count u32, SHA-256 [32], tree root
//! [32], then one 32-byte leaf hash per block, and last the BLAKE3 hash [32]
//! of every byte before it. The checksum covers what the root does not: the
//! SHA-256 (served as `Repr-Digest`), the size and the version. An index
//! whose checksum is wrong, whose version ([`FileVersion`]: device, inode,
//! size, mtime and ctime) or block size does not match the file, or whose
//! leaves do not hash to its root, is ignored and rebuilt, and so is one in
//! an older format (`CIDX0002` had no checksum): a stale or damaged index
//! can cost a rebuild, never a wrong answer.

use crate::{BlockReader, FileVersion, StoreError, version::Stamp};
use circus_core::BlockLayout;
use sha2::{Digest, Sha256};
use std::{
    fs::{self, File},
    io::{self, Write},
    path::{Path, PathBuf},
};

/// The hidden directory under the served root; requests for it are refused.
pub const INDEX_DIR: &str = ".circus";
/// Where a tree's indexes are kept unless told otherwise: `ROOT/.circus/index`.
pub fn default_index_dir(root: &Path) -> PathBuf {
    root.join(INDEX_DIR).join("index")
}

/// How often a build reports progress, in bytes hashed.
const PROGRESS_EVERY: u64 = 64 << 20;
/// Bytes a build reads at a time (whole blocks, at least one).
const BUILD_READ: u64 = 1 << 20;
const MAGIC: &[u8; 8] = b"CIDX0003";
const HEADER: usize = 8 + 8 + 12 + 12 + 8 + 8 + 4 + 4 + 32 + 32;
/// The BLAKE3 checksum after the leaves.
const CHECKSUM: usize = 32;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileIndex {
    pub size: u64,
    /// The local file version the index was built from; `None` for an
    /// origin object's tree, learnt from its blocks.
    pub version: Option<FileVersion>,
    pub block_size: u32,
    /// SHA-256 of the whole file (the `Repr-Digest` value).
    pub sha256: [u8; 32],
    pub root: [u8; 32],
    pub leaves: Vec<[u8; 32]>,
}

impl FileIndex {
    pub fn layout(&self) -> BlockLayout {
        BlockLayout::new(self.size, self.block_size)
    }

    /// Whether `data` is block `index` of this file version.
    pub fn verify(&self, index: u32, data: &[u8]) -> bool {
        self.leaves.get(index as usize).is_some_and(|leaf| *leaf == circus_proto::HashTree::leaf_hash(data))
    }

    /// Where the index of `rel` (a path relative to the served root) lives
    /// in `index_dir`.
    pub fn path_for(index_dir: &Path, rel: &str) -> PathBuf {
        let name = blake3::hash(rel.as_bytes()).to_hex();
        index_dir.join(format!("{}.idx", &name[..32]))
    }

    /// The stored index of `root/rel` (in `index_dir`) if it describes
    /// `version`, else a fresh one, built by reading the whole file
    /// (`progress` is told the bytes hashed so far) and then stored. A file
    /// that is no longer `version` is [`StoreError::Changed`]. Blocking.
    pub fn load_or_build(
        index_dir: &Path,
        root: &Path,
        rel: &str,
        version: FileVersion,
        block_size: u32,
        progress: &mut dyn FnMut(u64),
    ) -> Result<FileIndex, StoreError> {
        if let Some(index) = Self::load_stored(index_dir, rel, version, block_size) {
            return Ok(index);
        }
        let stored = Self::path_for(index_dir, rel);
        let index = Self::build(&root.join(rel), version, block_size, progress)?;
        if let Err(e) = index.store(&stored) {
            // Serving still works without a stored index; it is rebuilt next time.
            tracing::warn!(error = %e, "could not store hash index");
        }
        Ok(index)
    }

    /// The stored index of `rel` if there is one for `version` and
    /// `block_size`. Blocking.
    pub fn load_stored(index_dir: &Path, rel: &str, version: FileVersion, block_size: u32) -> Option<FileIndex> {
        Self::load(&Self::path_for(index_dir, rel)).filter(|i| i.matches(version, block_size))
    }

    /// Forgets the stored index of `rel` (a block failed its hash: the file
    /// changed in a way its version did not show, or the index is bad).
    pub fn discard(index_dir: &Path, rel: &str) {
        let _ = fs::remove_file(Self::path_for(index_dir, rel));
    }

    /// Removes the stored indexes in `index_dir` of every file not in
    /// `rels` (files deleted or renamed since). Returns how many it removed.
    pub fn remove_others<'a>(index_dir: &Path, rels: impl IntoIterator<Item = &'a str>) -> io::Result<usize> {
        let keep: std::collections::HashSet<PathBuf> = rels.into_iter().map(|r| Self::path_for(index_dir, r)).collect();
        let entries = match fs::read_dir(index_dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(e),
        };
        let mut removed = 0;
        for entry in entries {
            let path = entry?.path();
            let is_index = path.extension().is_some_and(|e| e == "idx");
            if is_index && !keep.contains(&path) {
                fs::remove_file(&path)?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    fn matches(&self, version: FileVersion, block_size: u32) -> bool {
        self.version == Some(version) && self.block_size == block_size
    }

    /// Reads the whole file once: leaf hashes and the SHA-256 together,
    /// telling `progress` the bytes hashed so far every 64 MiB or so. The
    /// file must be `version` when opened and after every read, else
    /// [`StoreError::Changed`].
    ///
    /// The reads are those blocks are served with ([`BlockReader`]: direct
    /// where the file system allows). A direct read takes the file's inode
    /// lock shared, so it waits for a write in progress rather than seeing
    /// it half done. A buffered read does not: a write whose change time
    /// was set when it began, and which then stalled for longer than
    /// [`crate::SETTLE`] while copying, left the file looking settled while
    /// its bytes were still changing, and an index built from that torn
    /// state let a resumed download finish with blocks of two versions.
    pub fn build(
        path: &Path,
        version: FileVersion,
        block_size: u32,
        progress: &mut dyn FnMut(u64),
    ) -> Result<FileIndex, StoreError> {
        let reader = BlockReader::open(path, version)?;
        let layout = BlockLayout::new(version.size, block_size);
        let per_read = (BUILD_READ / u64::from(block_size)).max(1) as u32;
        let mut sha = Sha256::new();
        let mut leaves = Vec::with_capacity(layout.blocks() as usize);
        let mut first = 0;
        while first < layout.blocks() {
            let count = per_read.min(layout.blocks() - first);
            let start = layout.offset(first);
            let last = first + count - 1;
            let len = layout.offset(last) + u64::from(layout.block_len(last)) - start;
            let bytes = reader.read_block(start, len as u32)?;
            for block in bytes.chunks(block_size as usize) {
                sha.update(block);
                leaves.push(circus_proto::HashTree::leaf_hash(block));
            }
            let done = start + len;
            if done % PROGRESS_EVERY < len {
                progress(done);
            }
            first += count;
        }
        progress(version.size);
        Ok(FileIndex {
            size: version.size,
            version: Some(version),
            block_size,
            sha256: sha.finalize().into(),
            root: circus_proto::compute_root(&leaves),
            leaves,
        })
    }

    fn load(path: &Path) -> Option<FileIndex> {
        Self::decode(&fs::read(path).ok()?)
    }

    /// Parses a stored index (the layout in the module docs). `None` when
    /// the bytes are not a whole, self-consistent index: wrong magic (an
    /// older format too), a checksum that is not the BLAKE3 of the bytes
    /// before it, a block count the size and block size do not give, a
    /// length the count does not describe, or leaves that do not hash to the
    /// root. Whether it describes the file at hand is the caller's question.
    pub fn decode(bytes: &[u8]) -> Option<FileIndex> {
        if bytes.len() < HEADER + CHECKSUM || &bytes[..8] != MAGIC {
            return None;
        }
        let (body, checksum) = bytes.split_at(bytes.len() - CHECKSUM);
        if blake3::hash(body) != *checksum {
            return None;
        }
        let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
        let arr_at = |i: usize| -> [u8; 32] { bytes[i..i + 32].try_into().expect("32 bytes") };
        let stamp_at = |i: usize| Stamp { secs: u64_at(i) as i64, nanos: u32_at(i + 8) };
        let size = u64_at(8);
        let version = FileVersion { size, mtime: stamp_at(16), ctime: stamp_at(28), dev: u64_at(40), ino: u64_at(48) };
        let (block_size, count) = (u32_at(56), u32_at(60));
        if block_size == 0 || u64::from(count) != size.div_ceil(u64::from(block_size)) {
            return None;
        }
        if body.len() != HEADER + 32 * count as usize {
            return None;
        }
        let leaves: Vec<[u8; 32]> = (0..count as usize).map(|i| arr_at(HEADER + 32 * i)).collect();
        let root = arr_at(96);
        (circus_proto::compute_root(&leaves) == root).then(|| FileIndex {
            size,
            version: Some(version),
            block_size,
            sha256: arr_at(64),
            root,
            leaves,
        })
    }

    /// The stored form of this index, which [`FileIndex::decode`] reads
    /// back; `None` for an origin object's tree (no local version to key it).
    pub fn encode(&self) -> Option<Vec<u8>> {
        let v = self.version?;
        let mut out = Vec::with_capacity(HEADER + 32 * self.leaves.len() + CHECKSUM);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.size.to_le_bytes());
        for stamp in [v.mtime, v.ctime] {
            out.extend_from_slice(&stamp.secs.to_le_bytes());
            out.extend_from_slice(&stamp.nanos.to_le_bytes());
        }
        out.extend_from_slice(&v.dev.to_le_bytes());
        out.extend_from_slice(&v.ino.to_le_bytes());
        out.extend_from_slice(&self.block_size.to_le_bytes());
        out.extend_from_slice(&(self.leaves.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.sha256);
        out.extend_from_slice(&self.root);
        self.leaves.iter().for_each(|l| out.extend_from_slice(l));
        let checksum = blake3::hash(&out);
        out.extend_from_slice(checksum.as_bytes());
        Some(out)
    }

    /// Writes the index atomically (temporary file, then rename). Only
    /// indexes of local file versions are stored.
    fn store(&self, path: &Path) -> Result<(), StoreError> {
        let err = |source| StoreError::WriteIndex { path: path.to_owned(), source };
        let Some(out) = self.encode() else { return Ok(()) };
        let dir = path.parent().expect("index path has a directory");
        fs::create_dir_all(dir).map_err(err)?;
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

    fn index(root: &Path, rel: &str, block_size: u32) -> Result<FileIndex, StoreError> {
        let version = FileVersion::of(&fs::metadata(root.join(rel)).unwrap());
        FileIndex::load_or_build(&default_index_dir(root), root, rel, version, block_size, &mut |_| {})
    }

    #[test]
    fn builds_stores_reloads_and_rebuilds_on_change() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        write(dir.path(), "a/b.bin", &data);
        let first = index(dir.path(), "a/b.bin", 4096).unwrap();
        assert_eq!(first.leaves.len(), 3);
        assert_eq!(first.sha256, <[u8; 32]>::from(Sha256::digest(&data)));
        assert!(first.verify(2, &data[8192..]));
        assert!(!first.verify(2, &data[8191..10_000 - 1]));
        let stored = FileIndex::path_for(&default_index_dir(dir.path()), "a/b.bin");
        assert_eq!(FileIndex::load(&stored), Some(first.clone()));
        // Another block size does not reuse the stored index.
        assert_eq!(index(dir.path(), "a/b.bin", 8192).unwrap().leaves.len(), 2);
        // A changed file (new size) gets a new index.
        write(dir.path(), "a/b.bin", &data[..5000]);
        let changed = index(dir.path(), "a/b.bin", 4096).unwrap();
        assert_eq!(changed.size, 5000);
        assert_ne!(changed.root, first.root);
    }

    #[test]
    fn a_file_replaced_with_the_same_size_and_mtime_gets_a_new_index() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "f", &[1u8; 5000]);
        let old = index(dir.path(), "f", 4096).unwrap();
        let mtime = fs::metadata(dir.path().join("f")).unwrap().modified().unwrap();
        // `cp -p` / `rsync --inplace -t`: new bytes, the old size and mtime.
        write(dir.path(), "f", &[2u8; 5000]);
        fs::File::options().write(true).open(dir.path().join("f")).unwrap().set_modified(mtime).unwrap();
        let new = index(dir.path(), "f", 4096).unwrap();
        assert_ne!(new.root, old.root, "the stored index of the old bytes was trusted");
        assert!(new.verify(0, &[2u8; 4096]));
    }

    #[test]
    fn building_for_a_version_the_file_no_longer_is_changed() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "f", b"one");
        let v = FileVersion::of(&fs::metadata(dir.path().join("f")).unwrap());
        write(dir.path(), "f", b"two, longer");
        let got = FileIndex::load_or_build(&default_index_dir(dir.path()), dir.path(), "f", v, 4096, &mut |_| {});
        assert!(matches!(got, Err(StoreError::Changed { .. })), "{got:?}");
    }

    #[test]
    fn builds_report_progress_and_indexes_of_deleted_files_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let indexes = dir.path().join("elsewhere");
        write(dir.path(), "keep", &[1u8; 10_000]);
        write(dir.path(), "gone", &[2u8; 10]);
        for rel in ["keep", "gone"] {
            let v = FileVersion::of(&fs::metadata(dir.path().join(rel)).unwrap());
            let mut seen = Vec::new();
            FileIndex::load_or_build(&indexes, dir.path(), rel, v, 4096, &mut |done| seen.push(done)).unwrap();
            assert_eq!(seen.last(), Some(&v.size), "{rel}: {seen:?}");
            assert!(FileIndex::path_for(&indexes, rel).exists());
        }
        assert!(!default_index_dir(dir.path()).exists(), "stored in the index dir asked for, not beside the data");
        fs::remove_file(dir.path().join("gone")).unwrap();
        assert_eq!(FileIndex::remove_others(&indexes, ["keep"]).unwrap(), 1);
        assert!(FileIndex::path_for(&indexes, "keep").exists());
        assert!(!FileIndex::path_for(&indexes, "gone").exists());
    }

    #[test]
    fn damaged_index_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "f", b"some bytes to hash");
        let good = index(dir.path(), "f", 4096).unwrap();
        let stored = FileIndex::path_for(&default_index_dir(dir.path()), "f");
        let mut bytes = fs::read(&stored).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        fs::write(&stored, &bytes).unwrap();
        assert_eq!(FileIndex::load(&stored), None);
        assert_eq!(index(dir.path(), "f", 4096).unwrap(), good);
    }

    /// `bytes` with `with` written at `at` and the checksum recomputed.
    fn with_checksum(bytes: &[u8], at: usize, with: &[u8]) -> Vec<u8> {
        let mut b = bytes.to_vec();
        b[at..at + with.len()].copy_from_slice(with);
        let n = b.len() - CHECKSUM;
        let sum = blake3::hash(&b[..n]);
        b[n..].copy_from_slice(sum.as_bytes());
        b
    }

    #[test]
    fn an_index_in_the_old_format_is_rebuilt() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "f", &[5u8; 9000]);
        let good = index(dir.path(), "f", 4096).unwrap();
        let stored = FileIndex::path_for(&default_index_dir(dir.path()), "f");
        let bytes = fs::read(&stored).unwrap();
        assert_eq!(&bytes[..8], b"CIDX0003");
        // CIDX0002: the same fields and leaves, no checksum.
        let old = [&b"CIDX0002"[..], &bytes[8..bytes.len() - CHECKSUM]].concat();
        assert_eq!(FileIndex::decode(&old), None);
        assert_eq!(FileIndex::decode(&with_checksum(&bytes, 0, b"CIDX0002")), None);
        fs::write(&stored, &old).unwrap();
        assert_eq!(index(dir.path(), "f", 4096).unwrap(), good);
        assert_eq!(fs::read(&stored).unwrap(), bytes, "stored again in the current format");
    }

    #[test]
    fn a_damaged_sha256_or_version_in_a_stored_index_is_not_served() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "f", b"some bytes to hash");
        let good = index(dir.path(), "f", 4096).unwrap();
        let stored = FileIndex::path_for(&default_index_dir(dir.path()), "f");
        let bytes = fs::read(&stored).unwrap();
        for (at, what) in [(64, "SHA-256"), (16, "mtime"), (48, "inode")] {
            let mut damaged = bytes.clone();
            damaged[at] ^= 1;
            assert_eq!(FileIndex::decode(&damaged), None, "a flipped bit in the {what}");
        }
        let mut damaged = bytes.clone();
        damaged[64] ^= 1;
        fs::write(&stored, &damaged).unwrap();
        assert_eq!(index(dir.path(), "f", 4096).unwrap().sha256, good.sha256, "the damaged digest was served");
    }

    #[test]
    fn decode_reads_what_encode_writes_and_nothing_inconsistent() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "f", &[3u8; 9000]);
        let good = index(dir.path(), "f", 4096).unwrap();
        let bytes = good.encode().unwrap();
        assert_eq!(bytes, fs::read(FileIndex::path_for(&default_index_dir(dir.path()), "f")).unwrap());
        assert_eq!(FileIndex::decode(&bytes), Some(good.clone()));
        // Patched, with the checksum made right again: the checks behind it.
        let patched = |at: usize, with: &[u8]| FileIndex::decode(&with_checksum(&bytes, at, with));
        assert_eq!(patched(0, b"CIDX0001"), None, "magic");
        assert_eq!(patched(8, &20_000u64.to_le_bytes()), None, "a size of another block count");
        assert_eq!(patched(56, &0u32.to_le_bytes()), None, "block size zero");
        assert_eq!(patched(60, &4u32.to_le_bytes()), None, "block count");
        assert_eq!(patched(96, &[0; 32]), None, "root");
        assert_eq!(FileIndex::decode(&bytes[..bytes.len() - 1]), None, "short");
        assert_eq!(FileIndex::decode(&[&bytes[..], &[0; 32]].concat()), None, "long");
        let body = &bytes[..bytes.len() - CHECKSUM];
        let long = [body, &[0; 32], blake3::hash(&[body, &[0; 32]].concat()).as_bytes()].concat();
        assert_eq!(FileIndex::decode(&long), None, "a leaf too many, checksummed");
        assert_eq!(FileIndex { version: None, ..good }.encode(), None, "origin trees are not stored");
    }

    #[test]
    fn empty_file_has_no_leaves() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "empty", b"");
        let i = index(dir.path(), "empty", 4096).unwrap();
        assert!(i.leaves.is_empty());
        assert_eq!(i.root, circus_proto::compute_root(&[]));
    }
}
