//! Request paths resolved within the last second, as nginx's
//! `open_file_cache` with `open_file_cache_valid 1s`: a hot path is
//! answered without the blocking pool's hop, `canonicalize` and `stat` on
//! every request. A file changed or removed is seen within a second; until
//! then requests get the version resolved before, whole and with its own
//! validators (its entry reads through its own descriptors), never a mix.

use circus_store::FileEntry;
use quick_cache::sync::Cache;
use std::{
    sync::{Arc, Weak},
    time::{Duration, Instant},
};

/// How long a resolution is reused.
pub const FRESH: Duration = Duration::from_secs(1);

/// Paths remembered at most. Entries are held weakly: the file table
/// decides which versions stay open.
const PATHS: usize = 4096;

pub struct RecentFiles {
    by_path: Cache<String, (Weak<FileEntry>, Instant)>,
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
    /// The file `url_path` named less than [`FRESH`] ago, if still open.
    pub fn get(&self, url_path: &str) -> Option<Arc<FileEntry>> {
        let (entry, at) = self.by_path.get(url_path)?;
        if at.elapsed() >= FRESH {
            return None;
        }
        entry.upgrade()
    }

    /// Remembers that `url_path` names `entry` now.
    pub fn put(&self, url_path: &str, entry: &Arc<FileEntry>) {
        self.by_path.insert(url_path.to_owned(), (Arc::downgrade(entry), Instant::now()));
    }
}
