//! From a request path to a file version: safe resolution under the root,
//! one `FileId` per (path, size, mtime), and the lazily built hash index.
//! A [`FileEntry`] is what the scheduler's driver reads blocks of: a local
//! file, or an origin object version whose tree the tier has learnt.

use crate::{
    error::HttpError,
    origin::{Object, OriginBlocks},
};
use bytes::{Bytes, BytesMut};
use circus_core::{BlockLayout, FileId};
use circus_proto::{Manifest, encode_preamble};
use circus_store::{BlockReader, FileIndex, INDEX_DIR};
use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, OnceLock, atomic::AtomicU64, atomic::Ordering},
    time::SystemTime,
};
use tokio::sync::OnceCell;

/// One version of one file.
#[derive(Debug)]
pub struct FileEntry {
    pub id: FileId,
    /// Path relative to the root, with `/` separators.
    pub rel: String,
    pub backing: Backing,
    pub size: u64,
    pub modified: SystemTime,
    pub etag: String,
    pub content_type: String,
    pub layout: BlockLayout,
    index: OnceCell<Arc<FileIndex>>,
    /// The encoded preamble and manifest, shared by every native response
    /// of this version (32 bytes per block: 128 KiB for a 256 MiB file, which
    /// a slow client would otherwise pin once per connection).
    preface: OnceLock<Bytes>,
}

/// Where a version's blocks are read from.
#[derive(Debug)]
pub enum Backing {
    /// A file under the served root.
    Disk { path: PathBuf, reader: OnceLock<Arc<BlockReader>> },
    /// An origin object version, through the tier's store and fetches.
    Origin(OriginBlocks),
}

impl FileEntry {
    /// An origin object version whose tree is complete, as the scheduler
    /// sees it.
    pub fn from_origin(id: FileId, obj: &Object, blocks: OriginBlocks, index: Arc<FileIndex>) -> Self {
        let content_type = obj.headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
        FileEntry {
            id,
            rel: obj.target.clone(),
            backing: Backing::Origin(blocks),
            size: obj.size,
            modified: obj.last_modified.unwrap_or(SystemTime::UNIX_EPOCH),
            // Resumes name the version by ETag (If-Range): an origin that
            // gave none gets one that names this fetched version.
            etag: obj.etag.clone().unwrap_or_else(|| format!("\"circus-origin-{:x}\"", obj.version)),
            content_type: content_type.unwrap_or("application/octet-stream").to_owned(),
            layout: BlockLayout::new(obj.size, index.block_size),
            index: OnceCell::new_with(Some(index)),
            preface: OnceLock::new(),
        }
    }

    /// The block reader of a local file, opened on first use. Blocking.
    pub fn reader(&self) -> std::io::Result<Arc<BlockReader>> {
        let Backing::Disk { path, reader } = &self.backing else {
            return Err(std::io::Error::other(format!("{} is an origin object, not a local file", self.rel)));
        };
        if let Some(r) = reader.get() {
            return Ok(r.clone());
        }
        let r = Arc::new(BlockReader::open(path)?);
        Ok(reader.get_or_init(|| r).clone())
    }

    /// The native stream's preamble and manifest, encoded once.
    pub fn preface(&self, index: &FileIndex) -> Result<Bytes, HttpError> {
        if let Some(p) = self.preface.get() {
            return Ok(p.clone());
        }
        let manifest = Manifest::new(self.layout, index.leaves.clone(), index.sha256, self.etag.clone());
        let mut buf = BytesMut::new();
        encode_preamble(&mut buf);
        manifest.encode(&mut buf).map_err(|e| HttpError::Internal(e.to_string()))?;
        Ok(self.preface.get_or_init(|| buf.freeze()).clone())
    }

    /// The hash index if it has been built already (never waits).
    pub fn index_now(&self) -> Option<Arc<FileIndex>> {
        self.index.get().cloned()
    }

    /// The hash index, built on first use on a blocking thread; concurrent
    /// callers wait for the one build.
    pub async fn index(&self, root: &Path) -> Result<Arc<FileIndex>, HttpError> {
        self.index
            .get_or_try_init(|| async {
                let (root, rel, block) = (root.to_owned(), self.rel.clone(), self.layout.block_size());
                let built = tokio::task::spawn_blocking(move || FileIndex::load_or_build(&root, &rel, block))
                    .await
                    .map_err(|e| HttpError::Internal(format!("index task: {e}")))?;
                let index = built.map_err(|e| HttpError::Storage(e.to_string()))?;
                if (index.size, index.block_size) != (self.size, self.layout.block_size()) {
                    return Err(HttpError::Changed);
                }
                Ok(Arc::new(index))
            })
            .await
            .cloned()
    }
}

#[derive(Debug)]
pub struct FileTable {
    root: PathBuf,
    block_size: u32,
    next_id: AtomicU64,
    versions: Mutex<HashMap<String, Arc<FileEntry>>>,
}

impl FileTable {
    /// `root` must exist; it is canonicalised once so that symlink checks
    /// compare like with like.
    pub fn new(root: &Path, block_size: u32) -> std::io::Result<Self> {
        Ok(Self {
            root: root.canonicalize()?,
            block_size,
            next_id: AtomicU64::new(1),
            versions: Mutex::new(HashMap::new()),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Resolves a URL path (still percent-encoded) to the current version of
    /// a regular file under the root. Blocking (stat and canonicalize).
    pub fn lookup(&self, url_path: &str) -> Result<Arc<FileEntry>, HttpError> {
        let rel = relative_path(url_path)?;
        let path = self.root.join(&rel);
        // Symlinks may point anywhere: only what stays under the root is served.
        let real = path.canonicalize().map_err(|_| HttpError::NotFound)?;
        if !real.starts_with(&self.root) {
            return Err(HttpError::Forbidden("path leaves the served directory"));
        }
        let meta = std::fs::metadata(&real).map_err(|_| HttpError::NotFound)?;
        if !meta.is_file() {
            return Err(HttpError::NotFound);
        }
        let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        let mut versions = self.versions.lock().expect("file table lock");
        if let Some(e) = versions.get(&rel).filter(|e| e.size == meta.len() && e.modified == modified) {
            return Ok(e.clone());
        }
        let entry = Arc::new(FileEntry {
            id: FileId(self.next_id.fetch_add(1, Ordering::Relaxed)),
            etag: etag(meta.len(), modified),
            content_type: mime_guess::from_path(&rel).first_or_octet_stream().essence_str().to_owned(),
            layout: BlockLayout::new(meta.len(), self.block_size),
            rel: rel.clone(),
            backing: Backing::Disk { path: real, reader: OnceLock::new() },
            size: meta.len(),
            modified,
            index: OnceCell::new(),
            preface: OnceLock::new(),
        });
        if versions.len() >= IDLE_ENTRIES {
            // Entries only the table holds serve no download and cache no
            // block: dropping them closes their files. A later request
            // makes a fresh entry and reloads the index from disk.
            versions.retain(|_, e| Arc::strong_count(e) > 1);
        }
        versions.insert(rel, entry.clone());
        Ok(entry)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.versions.lock().expect("file table lock").len()
    }
}

/// File versions the table keeps once nothing uses them. Each holds two
/// open descriptors (direct and buffered reads) and its hash index: an
/// unbounded table ran a server with 10,000 small files out of descriptors.
const IDLE_ENTRIES: usize = 1024;

/// A strong validator from size and modification time (as nginx does): any
/// rewrite of the file changes it.
fn etag(size: u64, modified: SystemTime) -> String {
    let t = modified.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    format!("\"{:x}.{:x}-{:x}\"", t.as_secs(), t.subsec_nanos(), size)
}

/// Decodes and checks a URL path: no `..`, no NUL, no hidden index.
fn relative_path(url_path: &str) -> Result<String, HttpError> {
    let decoded = percent_decode(url_path).ok_or(HttpError::BadRequest("malformed percent-encoding in path"))?;
    let mut parts = Vec::new();
    for seg in decoded.split('/') {
        match seg {
            "" | "." => {}
            ".." => return Err(HttpError::Forbidden("path may not contain ..")),
            s if s.contains('\0') || s.contains('\\') => {
                return Err(HttpError::BadRequest("invalid character in path"));
            }
            s if s == INDEX_DIR => return Err(HttpError::NotFound),
            s => parts.push(s),
        }
    }
    if parts.is_empty() {
        return Err(HttpError::NotFound);
    }
    Ok(parts.join("/"))
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_checked() {
        assert_eq!(relative_path("/a/b%20c.iso").unwrap(), "a/b c.iso");
        assert_eq!(relative_path("//a/./b").unwrap(), "a/b");
        assert!(matches!(relative_path("/a/../etc/passwd"), Err(HttpError::Forbidden(_))));
        assert!(matches!(relative_path("/a/%2e%2e/x"), Err(HttpError::Forbidden(_))));
        assert!(matches!(relative_path("/.circus/index/x.idx"), Err(HttpError::NotFound)));
        assert!(matches!(relative_path("/a%00b"), Err(HttpError::BadRequest(_))));
        assert!(matches!(relative_path("/a%zz"), Err(HttpError::BadRequest(_))));
        assert!(matches!(relative_path("/"), Err(HttpError::NotFound)));
    }

    #[test]
    fn idle_entries_are_dropped_and_their_files_closed_while_used_ones_stay() {
        let dir = tempfile::tempdir().unwrap();
        let t = FileTable::new(dir.path(), 4096).unwrap();
        for i in 0..IDLE_ENTRIES + 10 {
            std::fs::write(dir.path().join(format!("f{i}")), b"x").unwrap();
        }
        let held = t.lookup("/f0").unwrap();
        held.reader().unwrap();
        for i in 1..IDLE_ENTRIES + 10 {
            t.lookup(&format!("/f{i}")).unwrap().reader().unwrap();
        }
        assert!(t.len() <= IDLE_ENTRIES, "{} entries", t.len());
        // The entry in use kept its identity (and its open reader).
        assert_eq!(t.lookup("/f0").unwrap().id, held.id);
    }

    #[test]
    fn symlinks_out_of_root_are_refused_and_versions_get_new_ids() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(dir.path().join("secret"), b"s").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), root.join("link")).unwrap();
        std::fs::write(root.join("f"), b"one").unwrap();
        std::os::unix::fs::symlink(root.join("f"), root.join("inside")).unwrap();
        let t = FileTable::new(&root, 4096).unwrap();
        assert!(matches!(t.lookup("/link"), Err(HttpError::Forbidden(_))));
        assert_eq!(t.lookup("/inside").unwrap().size, 3);
        let a = t.lookup("/f").unwrap();
        assert_eq!(t.lookup("/f").unwrap().id, a.id);
        std::fs::write(root.join("f"), b"longer").unwrap();
        let b = t.lookup("/f").unwrap();
        assert_ne!(a.id, b.id);
        assert_ne!(a.etag, b.etag);
    }
}
