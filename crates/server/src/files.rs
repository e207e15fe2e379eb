//! From a request path to a file version: safe resolution under the root,
//! one `FileId` per (path, [`FileVersion`]), each a [`FileEntry`] read
//! through a [`LocalFile`] (which builds its hash index lazily).

use crate::recent_files::RecentFiles;
use circus_core::FileId;
use circus_http::HttpError;
use circus_store::{
    Description, FileEntry, FileIndex, FileVersion, INDEX_DIR, LocalFile, LocalPlace, default_index_dir,
};
use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, SystemTime},
};

#[derive(Debug)]
pub struct FileTable {
    root: PathBuf,
    /// Serve names that start with a dot (off: 404).
    dotfiles: bool,
    /// List directories without an `index.html` (off: 403).
    listing: bool,
    block_size: u32,
    /// Where hash indexes are stored (by default `ROOT/.circus/index`);
    /// never served.
    index_dir: PathBuf,
    /// How long a native request waits for an index build.
    index_wait: Duration,
    next_id: AtomicU64,
    versions: Mutex<HashMap<String, Known>>,
    recent: RecentFiles,
}

/// What a request path names (see [`FileTable::resolve`]).
#[derive(Debug)]
pub enum Resolved {
    File(Arc<FileEntry>),
    AddSlash,
    /// A directory without `index.html`, by its real path.
    Directory(PathBuf),
}

/// The page a directory's path with a trailing slash serves when present.
const INDEX_FILE: &str = "index.html";

/// Entries a listing shows at most: a directory of a million files is
/// not read whole for one request.
pub const LISTED_ENTRIES: usize = 10_000;

/// A directory's entries as a listing shows them.
#[derive(Debug)]
pub struct Listing {
    pub entries: Vec<Listed>,
    /// The directory holds more than [`LISTED_ENTRIES`].
    pub truncated: bool,
}

#[derive(Debug)]
pub struct Listed {
    pub name: String,
    pub dir: bool,
    pub size: u64,
    pub modified: SystemTime,
}

/// A version the table knows, and its local source (for the version and
/// whether it is still trusted).
type Known = (Arc<FileEntry>, Arc<LocalFile>);

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
            listing: true,
            block_size,
            next_id: AtomicU64::new(1),
            versions: Mutex::new(HashMap::new()),
            recent: RecentFiles::default(),
        })
    }

    /// Serves names that start with a dot too (`.git/`, `.env`).
    pub fn with_dotfiles(mut self, serve: bool) -> Self {
        self.dotfiles = serve;
        self
    }

    /// Lists directories without an `index.html` (on by default).
    pub fn with_listing(mut self, list: bool) -> Self {
        self.listing = list;
        self
    }

    pub fn listing(&self) -> bool {
        self.listing
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
            .map(|(e, _)| e)
            .filter_map(|e| e.build_progress().map(|hashed| IndexBuild { path: e.rel.clone(), size: e.size, hashed }))
            .collect();
        builds.sort_by(|a, b| a.path.cmp(&b.path));
        builds
    }

    /// Resolves a URL path (still percent-encoded) to the current version of
    /// a regular file under the root; a directory's `index.html` when the
    /// path names the directory with its trailing slash. Blocking (stat and
    /// canonicalize).
    pub fn lookup(&self, url_path: &str) -> Result<Arc<FileEntry>, HttpError> {
        match self.resolve(url_path)? {
            Resolved::File(entry) => Ok(entry),
            Resolved::AddSlash | Resolved::Directory(_) => Err(HttpError::NotFound),
        }
    }

    /// Where the version `entry` is on disk, while the table knows it.
    pub fn local(&self, entry: &FileEntry) -> Option<(PathBuf, FileVersion)> {
        let versions = self.versions.lock().expect("file table lock");
        let (known, local) = versions.get(&entry.rel)?;
        (known.id == entry.id).then(|| (local.path().to_owned(), local.version()))
    }

    /// The file `url_path` resolved to less than a second ago, if still
    /// the version on disk; blocks for one `stat` (see `RecentFiles`).
    pub fn recent(&self, url_path: &str) -> Option<Arc<FileEntry>> {
        self.recent.get(url_path)
    }

    /// What a URL path names: a file (a directory's `index.html` included),
    /// a directory without it, or a directory named without its trailing
    /// slash (relative links on its page would point one level up).
    /// Blocking.
    pub fn resolve(&self, url_path: &str) -> Result<Resolved, HttpError> {
        let resolved = self.resolve_now(url_path)?;
        if let Resolved::File(entry) = &resolved
            && let Some((real, version)) = self.local(entry)
        {
            self.recent.put(url_path, entry, real, version);
        }
        Ok(resolved)
    }

    fn resolve_now(&self, url_path: &str) -> Result<Resolved, HttpError> {
        let rel = relative_path(url_path, self.dotfiles)?;
        let real = self.served_path(&rel)?;
        let meta = std::fs::metadata(&real).map_err(|_| HttpError::NotFound)?;
        let slash = url_path.ends_with('/');
        match (meta.is_dir(), slash) {
            (true, false) => Ok(Resolved::AddSlash),
            (true, true) => {
                let index = if rel.is_empty() { INDEX_FILE.to_owned() } else { format!("{rel}/{INDEX_FILE}") };
                match self.served_path(&index) {
                    Ok(page) if page.is_file() => self.entry(index, &page).map(Resolved::File),
                    _ => Ok(Resolved::Directory(real)),
                }
            }
            // `/file/` names nothing: the file is not a directory.
            (false, true) => Err(HttpError::NotFound),
            (false, false) => self.entry(rel, &real).map(Resolved::File),
        }
    }

    /// The real path of `rel` (already checked by [`relative_path`]) when
    /// it may be served: symlinks may point anywhere, and only what stays
    /// under the root, outside the index directory, is served; the rules
    /// on names hold for where a link leads too.
    fn served_path(&self, rel: &str) -> Result<PathBuf, HttpError> {
        let real = self.root.join(rel).canonicalize().map_err(|_| HttpError::NotFound)?;
        let Ok(real_rel) = real.strip_prefix(&self.root) else {
            return Err(HttpError::Forbidden("path leaves the served directory"));
        };
        if real.starts_with(&self.index_dir) {
            return Err(HttpError::NotFound);
        }
        checked_path(&real_rel.to_string_lossy(), self.dotfiles)?;
        Ok(real)
    }

    /// The current version of the regular file at `real`, named `rel`.
    fn entry(&self, rel: String, real: &Path) -> Result<Arc<FileEntry>, HttpError> {
        let version = settled_version(real)?;
        let mut versions = self.versions.lock().expect("file table lock");
        match versions.get(&rel) {
            Some((_, local)) if local.is_distrusted() => FileIndex::discard(&self.index_dir, &rel),
            Some((e, local)) if local.version() == version => return Ok(e.clone()),
            _ => {}
        }
        let place = LocalPlace { root: &self.root, rel: &rel, path: real, index_dir: &self.index_dir };
        let local = Arc::new(LocalFile::new(place, version, self.block_size));
        let described = Description {
            size: version.size,
            modified: version.modified(),
            etag: etag(&version),
            content_type: mime_guess::from_path(&rel).first_or_octet_stream().essence_str().to_owned(),
        };
        let id = FileId(self.next_id.fetch_add(1, Ordering::Relaxed));
        let entry = Arc::new(FileEntry::new(id, rel.clone(), local.clone(), described, self.block_size));
        if versions.len() >= IDLE_ENTRIES {
            // Entries only the table holds serve no download and cache no
            // block: dropping them closes their files. A later request
            // makes a fresh entry and reloads the index from disk.
            versions.retain(|_, (e, _)| Arc::strong_count(e) > 1);
        }
        versions.insert(rel, (entry.clone(), local));
        Ok(entry)
    }

    /// The entries of the directory at `real` (from [`Resolved::Directory`])
    /// that requests may reach: no dotfiles unless served, not the index
    /// directory, no link leading out of the root. At most
    /// [`LISTED_ENTRIES`], sorted: directories first, then by name.
    /// Blocking.
    pub fn list(&self, real: &Path) -> std::io::Result<Listing> {
        let mut entries = Vec::new();
        let mut truncated = false;
        for item in std::fs::read_dir(real)? {
            let Ok(item) = item else { continue };
            let Some(name) = item.file_name().to_str().map(str::to_owned) else { continue };
            if entries.len() == LISTED_ENTRIES {
                truncated = true;
                break;
            }
            let Ok(rel) = real.join(&name).strip_prefix(&self.root).map(|p| p.to_string_lossy().into_owned()) else {
                continue;
            };
            if checked_path(&rel, self.dotfiles).is_err() {
                continue;
            }
            let Ok(target) = self.served_path(&rel) else { continue };
            let Ok(meta) = std::fs::metadata(&target) else { continue };
            if !(meta.is_dir() || meta.is_file()) {
                continue;
            }
            let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            entries.push(Listed { name, dir: meta.is_dir(), size: meta.len(), modified });
        }
        entries.sort_by(|a, b| b.dir.cmp(&a.dir).then_with(|| a.name.cmp(&b.name)));
        Ok(Listing { entries, truncated })
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

/// Decodes and checks a URL path (see [`checked_path`]).
fn relative_path(url_path: &str, dotfiles: bool) -> Result<String, HttpError> {
    let decoded = percent_decode(url_path).ok_or(HttpError::BadRequest("malformed percent-encoding in path"))?;
    checked_path(&decoded, dotfiles)
}

/// Checks a decoded path: no `..`, no NUL, no hidden index, and no
/// dotfile unless `dotfiles`. The root is the empty path.
fn checked_path(decoded: &str, dotfiles: bool) -> Result<String, HttpError> {
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
        assert_eq!(p("/").unwrap(), "");
        // Dotfiles only when asked for; the index never.
        for dotted in ["/.env", "/.git/config", "/a/%2egit/HEAD"] {
            assert!(matches!(p(dotted), Err(HttpError::NotFound)), "{dotted}");
        }
        assert_eq!(relative_path("/.well-known/x", true).unwrap(), ".well-known/x");
        assert!(matches!(relative_path("/.circus/index/x.idx", true), Err(HttpError::NotFound)));
    }

    #[tokio::test]
    async fn idle_entries_are_dropped_and_their_files_closed_while_used_ones_stay() {
        let dir = tempfile::tempdir().unwrap();
        let t = FileTable::new(dir.path(), 4096).unwrap();
        for i in 0..IDLE_ENTRIES + 10 {
            std::fs::write(dir.path().join(format!("f{i}")), b"x").unwrap();
        }
        let held = t.lookup("/f0").unwrap();
        held.source.read_block(0, 1).await.unwrap();
        for i in 1..IDLE_ENTRIES + 10 {
            t.lookup(&format!("/f{i}")).unwrap().source.read_block(0, 1).await.unwrap();
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
