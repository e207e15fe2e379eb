//! From a request path to a file version: safe resolution under the root,
//! one `FileId` per (path, [`FileVersion`]), and the lazily built hash index.
//! A [`FileEntry`] is what the scheduler's driver reads blocks of: a local
//! file, or an origin object version whose tree the tier has learnt.

use crate::{
    error::HttpError,
    origin::{Object, OriginBlocks},
};
use bytes::{Bytes, BytesMut};
use circus_core::{BlockLayout, FileId};
use circus_proto::{Manifest, encode_preamble};
use circus_store::{BlockReader, FileIndex, FileVersion, INDEX_DIR, StoreError, default_index_dir};
use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex, OnceLock,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant, SystemTime},
};
use tokio::sync::OnceCell;

/// How often a long index build logs its progress.
const BUILD_LOG_EVERY: Duration = Duration::from_secs(10);

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
    /// While the index is being built: bytes hashed so far.
    build: Mutex<Option<Arc<AtomicU64>>>,
    /// The encoded preamble and manifest, shared by every native response
    /// of this version (32 bytes per block: 128 KiB for a 256 MiB file, which
    /// a slow client would otherwise pin once per connection).
    preface: OnceLock<Bytes>,
}

/// Where a version's blocks are read from.
#[derive(Debug)]
pub enum Backing {
    /// A file under the served root; every read is checked to still be
    /// `version`.
    Disk {
        path: PathBuf,
        version: FileVersion,
        reader: OnceLock<Arc<BlockReader>>,
        /// A block failed its hash while the version looked unchanged: the
        /// next lookup makes a new entry and rebuilds the index.
        stale: AtomicBool,
    },
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
            build: Mutex::new(None),
            preface: OnceLock::new(),
        }
    }

    /// The block reader of a local file, opened on first use. Blocking.
    pub fn reader(&self) -> Result<Arc<BlockReader>, StoreError> {
        let Backing::Disk { path, reader, version, .. } = &self.backing else {
            let not_local = std::io::Error::other("an origin object, not a local file");
            return Err(StoreError::Read { path: self.rel.clone().into(), source: not_local });
        };
        if let Some(r) = reader.get() {
            return Ok(r.clone());
        }
        let r = Arc::new(BlockReader::open(path, *version)?);
        Ok(reader.get_or_init(|| r).clone())
    }

    /// Marks a local file version as not to be trusted again: a block
    /// failed its hash though the file's version looked the same.
    pub fn mark_stale(&self) {
        if let Backing::Disk { stale, .. } = &self.backing {
            stale.store(true, Ordering::Relaxed);
        }
    }

    fn is_stale(&self) -> bool {
        matches!(&self.backing, Backing::Disk { stale, .. } if stale.load(Ordering::Relaxed))
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

    /// Bytes hashed so far, while the index is being built.
    pub fn build_progress(&self) -> Option<u64> {
        self.build.lock().expect("build lock").as_ref().map(|done| done.load(Ordering::Relaxed))
    }

    /// The hash index, loaded from `index_dir` or built on first use on a
    /// blocking thread (logging its progress); concurrent callers wait for
    /// the one build. A file that is no longer this version is
    /// [`HttpError::Changed`].
    pub async fn index(&self, root: &Path, index_dir: &Path) -> Result<Arc<FileIndex>, HttpError> {
        self.index
            .get_or_try_init(|| async {
                let Backing::Disk { version, .. } = &self.backing else {
                    return Err(HttpError::Internal(format!("{}: an origin object comes with its index", self.rel)));
                };
                let done = Arc::new(AtomicU64::new(0));
                *self.build.lock().expect("build lock") = Some(done.clone());
                let (root, dir, rel, block, version) =
                    (root.to_owned(), index_dir.to_owned(), self.rel.clone(), self.layout.block_size(), *version);
                let built = tokio::task::spawn_blocking(move || {
                    if let Some(index) = FileIndex::load_stored(&dir, &rel, version, block) {
                        return Ok(index);
                    }
                    let started = Instant::now();
                    let mut logged = started;
                    tracing::info!(file = %rel, bytes = version.size, "building the hash index");
                    let index = FileIndex::load_or_build(&dir, &root, &rel, version, block, &mut |hashed| {
                        done.store(hashed, Ordering::Relaxed);
                        if logged.elapsed() >= BUILD_LOG_EVERY {
                            logged = Instant::now();
                            let pct = hashed as f64 * 100.0 / version.size.max(1) as f64;
                            tracing::info!(file = %rel, hashed, "hash index {pct:.0}% built");
                        }
                    })?;
                    let secs = started.elapsed().as_secs_f64();
                    let rate = version.size as f64 / secs.max(1e-9) / 1e6;
                    tracing::info!(file = %rel, "hash index built in {secs:.1} s ({rate:.0} MB/s)");
                    Ok(index)
                })
                .await
                .map_err(|e| HttpError::Internal(format!("index task: {e}")))?;
                *self.build.lock().expect("build lock") = None;
                match built {
                    Ok(index) => Ok(Arc::new(index)),
                    Err(StoreError::Changed { .. }) => Err(HttpError::Changed),
                    Err(e) => Err(HttpError::Storage(e.to_string())),
                }
            })
            .await
            .cloned()
    }

    /// The hash index if it is ready within `wait`. The build goes on in
    /// the background either way (one per version), so a request that
    /// cannot wait for a large file still starts it.
    pub async fn index_within(
        self: &Arc<Self>,
        files: &FileTable,
        wait: Duration,
    ) -> Result<Option<Arc<FileIndex>>, HttpError> {
        if let Some(index) = self.index_now() {
            return Ok(Some(index));
        }
        let (entry, root, dir) = (self.clone(), files.root.clone(), files.index_dir.clone());
        // A task of its own: a waiter that gives up must not cancel the build.
        let build = tokio::spawn(async move { entry.index(&root, &dir).await });
        match tokio::time::timeout(wait, build).await {
            Ok(joined) => joined.map_err(|e| HttpError::Internal(format!("index task: {e}")))?.map(Some),
            Err(_) => Ok(None),
        }
    }
}

#[derive(Debug)]
pub struct FileTable {
    root: PathBuf,
    /// Serve names that start with a dot (off: 404).
    dotfiles: bool,
    block_size: u32,
    /// Where hash indexes are stored (by default `ROOT/.circus/index`);
    /// never served.
    index_dir: PathBuf,
    /// How long a native request waits for an index build.
    index_wait: Duration,
    next_id: AtomicU64,
    versions: Mutex<HashMap<String, Arc<FileEntry>>>,
}

/// An index build in progress, for `/status`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct IndexBuild {
    pub path: String,
    pub size: u64,
    pub hashed: u64,
}

impl FileTable {
    /// `root` must exist; it is canonicalised once so that symlink checks
    /// compare like with like.
    pub fn new(root: &Path, block_size: u32) -> std::io::Result<Self> {
        let root = root.canonicalize()?;
        Ok(Self {
            index_dir: default_index_dir(&root),
            index_wait: Duration::from_secs(2),
            root,
            dotfiles: false,
            block_size,
            next_id: AtomicU64::new(1),
            versions: Mutex::new(HashMap::new()),
        })
    }

    /// Serves names that start with a dot too (`.git/`, `.env`).
    pub fn with_dotfiles(mut self, serve: bool) -> Self {
        self.dotfiles = serve;
        self
    }

    /// Keeps hash indexes in `dir` (created if missing) instead of beside
    /// the data.
    pub fn with_index_dir(mut self, dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        self.index_dir = dir.canonicalize()?;
        Ok(self)
    }

    /// Native requests wait this long for an index build (see
    /// [`FileEntry::index_within`]).
    pub fn with_index_wait(mut self, wait: Duration) -> Self {
        self.index_wait = wait;
        self
    }

    pub fn index_wait(&self) -> Duration {
        self.index_wait
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn index_dir(&self) -> &Path {
        &self.index_dir
    }

    /// The index builds in progress.
    pub fn builds(&self) -> Vec<IndexBuild> {
        let versions = self.versions.lock().expect("file table lock");
        let mut builds: Vec<IndexBuild> = versions
            .values()
            .filter_map(|e| e.build_progress().map(|hashed| IndexBuild { path: e.rel.clone(), size: e.size, hashed }))
            .collect();
        builds.sort_by(|a, b| a.path.cmp(&b.path));
        builds
    }

    /// Resolves a URL path (still percent-encoded) to the current version of
    /// a regular file under the root. Blocking (stat and canonicalize).
    pub fn lookup(&self, url_path: &str) -> Result<Arc<FileEntry>, HttpError> {
        let rel = relative_path(url_path, self.dotfiles)?;
        let path = self.root.join(&rel);
        // Symlinks may point anywhere: only what stays under the root is
        // served, and the rules on names hold for where a link leads too.
        let real = path.canonicalize().map_err(|_| HttpError::NotFound)?;
        let Ok(real_rel) = real.strip_prefix(&self.root) else {
            return Err(HttpError::Forbidden("path leaves the served directory"));
        };
        if real.starts_with(&self.index_dir) {
            return Err(HttpError::NotFound);
        }
        relative_path(&real_rel.to_string_lossy(), self.dotfiles)?;
        let version = settled_version(&real)?;
        let mut versions = self.versions.lock().expect("file table lock");
        match versions.get(&rel) {
            Some(e) if e.is_stale() => FileIndex::discard(&self.index_dir, &rel),
            Some(e) if matches!(&e.backing, Backing::Disk { version: v, .. } if *v == version) => {
                return Ok(e.clone());
            }
            _ => {}
        }
        let entry = Arc::new(FileEntry {
            id: FileId(self.next_id.fetch_add(1, Ordering::Relaxed)),
            etag: etag(&version),
            content_type: mime_guess::from_path(&rel).first_or_octet_stream().essence_str().to_owned(),
            layout: BlockLayout::new(version.size, self.block_size),
            rel: rel.clone(),
            backing: Backing::Disk { path: real, version, reader: OnceLock::new(), stale: AtomicBool::new(false) },
            size: version.size,
            modified: version.modified(),
            index: OnceCell::new(),
            build: Mutex::new(None),
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

/// The file's version once it has settled (see [`FileVersion`]: a version
/// changed within the last timestamp tick cannot be told from the next
/// write). A file still being written after a few waits is
/// [`HttpError::Changed`], which the client retries. Blocking.
fn settled_version(path: &Path) -> Result<FileVersion, HttpError> {
    for _ in 0..SETTLE_TRIES {
        let meta = std::fs::metadata(path).map_err(|_| HttpError::NotFound)?;
        if !meta.is_file() {
            return Err(HttpError::NotFound);
        }
        let version = FileVersion::of(&meta);
        match version.unsettled_for(SystemTime::now()) {
            wait if wait.is_zero() => return Ok(version),
            wait => std::thread::sleep(wait),
        }
    }
    Err(HttpError::Changed)
}

/// Waits of [`circus_store::SETTLE`] before a file that keeps changing is
/// answered "changed, retry".
const SETTLE_TRIES: usize = 5;

/// A strong validator: size and modification time (as nginx does), and a
/// tag of the inode and change time, so that a file replaced under the
/// same size and mtime (`cp -p`, `rsync -t`) gets a new one too.
fn etag(v: &FileVersion) -> String {
    let mut tag = [0u8; 32];
    tag[..8].copy_from_slice(&v.dev.to_le_bytes());
    tag[8..16].copy_from_slice(&v.ino.to_le_bytes());
    tag[16..24].copy_from_slice(&v.ctime.secs.to_le_bytes());
    tag[24..28].copy_from_slice(&v.ctime.nanos.to_le_bytes());
    let tag = blake3::hash(&tag);
    format!("\"{:x}.{:x}-{:x}-{}\"", v.mtime.secs, v.mtime.nanos, v.size, &tag.to_hex()[..8])
}

/// Decodes and checks a URL path: no `..`, no NUL, no hidden index, and
/// no dotfile unless `dotfiles`.
fn relative_path(url_path: &str, dotfiles: bool) -> Result<String, HttpError> {
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
            s if s.starts_with('.') && !dotfiles => return Err(HttpError::NotFound),
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
        let p = |path| relative_path(path, false);
        assert_eq!(p("/a/b%20c.iso").unwrap(), "a/b c.iso");
        assert_eq!(p("//a/./b").unwrap(), "a/b");
        assert!(matches!(p("/a/../etc/passwd"), Err(HttpError::Forbidden(_))));
        assert!(matches!(p("/a/%2e%2e/x"), Err(HttpError::Forbidden(_))));
        assert!(matches!(p("/.circus/index/x.idx"), Err(HttpError::NotFound)));
        assert!(matches!(p("/a%00b"), Err(HttpError::BadRequest(_))));
        assert!(matches!(p("/a%zz"), Err(HttpError::BadRequest(_))));
        assert!(matches!(p("/"), Err(HttpError::NotFound)));
        // Dotfiles only when asked for; the index never.
        for dotted in ["/.env", "/.git/config", "/a/%2egit/HEAD"] {
            assert!(matches!(p(dotted), Err(HttpError::NotFound)), "{dotted}");
        }
        assert_eq!(relative_path("/.well-known/x", true).unwrap(), ".well-known/x");
        assert!(matches!(relative_path("/.circus/index/x.idx", true), Err(HttpError::NotFound)));
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
        // A link inside the root may not lead into the index or to a dotfile.
        std::fs::create_dir_all(root.join(".circus/index")).unwrap();
        std::fs::write(root.join(".circus/index/x.idx"), b"i").unwrap();
        std::fs::write(root.join(".env"), b"SECRET=1").unwrap();
        std::os::unix::fs::symlink(root.join(".circus/index/x.idx"), root.join("idx")).unwrap();
        std::os::unix::fs::symlink(root.join(".env"), root.join("settings")).unwrap();
        assert!(matches!(t.lookup("/idx"), Err(HttpError::NotFound)));
        assert!(matches!(t.lookup("/settings"), Err(HttpError::NotFound)));
        let with_dotfiles = FileTable::new(&root, 4096).unwrap().with_dotfiles(true);
        assert_eq!(with_dotfiles.lookup("/settings").unwrap().size, 8);
        assert!(matches!(with_dotfiles.lookup("/idx"), Err(HttpError::NotFound)));
        assert_eq!(t.lookup("/inside").unwrap().size, 3);
        let a = t.lookup("/f").unwrap();
        assert_eq!(t.lookup("/f").unwrap().id, a.id);
        std::fs::write(root.join("f"), b"longer").unwrap();
        let b = t.lookup("/f").unwrap();
        assert_ne!(a.id, b.id);
        assert_ne!(a.etag, b.etag);
    }
}
