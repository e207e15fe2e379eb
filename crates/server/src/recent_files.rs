//! Request paths resolved within the last second: a hot path is answered
//! without the blocking pool's hop and `canonicalize` on every request,
//! as nginx's `open_file_cache` does. Each use still `stat`s the file the
//! path led to (a microsecond when its inode is cached) and is refused
//! unless it is the very version resolved, so a file rewritten, replaced
//! or removed is seen by the next request; only a change of where the
//! path leads (a symlink on the way re-pointed) waits out the second.

use circus_store::{FileEntry, FileVersion};
use quick_cache::sync::Cache;
use std::{
    path::PathBuf,
    sync::{Arc, Weak},
    time::{Duration, Instant},
};

/// How long a resolution is reused.
pub const FRESH: Duration = Duration::from_secs(1);

/// Paths remembered at most. Entries are held weakly: the file table
/// decides which versions stay open.
const PATHS: usize = 4096;

pub struct RecentFiles {
    by_path: Cache<String, Arc<Recent>>,
}

/// A path's resolution: the entry, where its file is, which version.
struct Recent {
    entry: Weak<FileEntry>,
    at: Instant,
    real: PathBuf,
    version: FileVersion,
}

impl std::fmt::Debug for RecentFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecentFiles").field("paths", &self.by_path.len()).finish()
    }
}

impl Default for RecentFiles {
    fn default() -> Self {
        RecentFiles { by_path: Cache::new(PATHS) }
    }
}

impl RecentFiles {
    /// The file `url_path` named less than [`FRESH`] ago, if still open
    /// and still the version on disk. Blocks for one `stat`.
    pub fn get(&self, url_path: &str) -> Option<Arc<FileEntry>> {
        let recent = self.by_path.get(url_path)?;
        if recent.at.elapsed() >= FRESH {
            return None;
        }
        let entry = recent.entry.upgrade()?;
        let meta = std::fs::metadata(&recent.real).ok()?;
        (meta.is_file() && FileVersion::of(&meta) == recent.version).then_some(entry)
    }

    /// Remembers that `url_path` names `entry`, version `version` of the
    /// file at `real`.
    pub fn put(&self, url_path: &str, entry: &Arc<FileEntry>, real: PathBuf, version: FileVersion) {
        let recent = Recent { entry: Arc::downgrade(entry), at: Instant::now(), real, version };
        self.by_path.insert(url_path.to_owned(), Arc::new(recent));
    }
}
