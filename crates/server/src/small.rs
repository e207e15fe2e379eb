//! Whole small files (up to [`largest_kept`]) kept as complete responses,
//! so that the hit lane ([`crate::hitlane`]) answers them without the
//! scheduler: a file this small is read whole at once and kept resident,
//! so there is nothing to share out of order, and the full path's fixed
//! cost per request (a driver round trip cost 8x nginx's rate for one
//! block; the scheduler, hyper and a `stat` up to 1 MiB) is not paid.
//! Bodies of 32 KiB or more are kept in pages the kernel sends without
//! copying them (`kept_memory`), as the block cache's are; shorter ones
//! on the heap, copied beside their heads.
//!
//! A file is admitted after hyper's full path has answered a plain GET for
//! it: one storage read, the hash index (for `Repr-Digest`), and the head
//! rendered with the same fields the full path writes. Entries are
//! re-resolved through the [`FileTable`] at most once a second (as nginx's
//! `open_file_cache_valid`): a changed or removed file drops its entry
//! within a second, and until then the old bytes go out with the old
//! validators, never a mix. The full path (h2, ranges) resolves a kept
//! path to its kept version under the same once-a-second check, without a
//! `stat` per request. The store has its own share of the cache budget
//! (quick_cache, weighed in bytes).

use crate::{
    files::FileTable,
    kept_memory::{KeptMemory, SENDABLE_FROM},
};
use base64::Engine;
use bytes::Bytes;
use circus_core::FileId;
use circus_store::{FileEntry, ReadError};
use prometheus_client::metrics::counter::Counter;
use quick_cache::{Weighter, sync::Cache};
use rustc_hash::FxHashSet;
use std::{
    io::Write,
    sync::{
        Arc, Mutex, Weak,
        atomic::{AtomicU64, Ordering},
    },
    time::{SystemTime, UNIX_EPOCH},
};

/// Files read for admission at once, at most, and their bytes (a file
/// alone may be larger): each holds its read and its copy outside the
/// budget until it is kept.
const ADMITTING_AT_MOST: (usize, u64) = (8, 2 << 20);

/// The largest files a shard of the store takes, at least: enough that the
/// luck of the hashing evens out (see [`SmallFiles::new`]).
const LARGEST_PER_SHARD: u64 = 128;

/// Charged per entry on top of its bytes: the struct, key and table slot.
const ENTRY_OVERHEAD: u64 = 192;

/// Room left in a shard beside the largest file for its head, weighed
/// twice (see [`ByBytes`]; a head is about 300 bytes).
const HEAD_ROOM: u64 = 4 << 10;

/// Room left beside the largest file for its path, the cache's key.
/// A longer path is not kept (see [`SmallFiles::admit`]).
const PATH_ROOM: u64 = 4 << 10;

#[derive(Debug)]
struct Small {
    id: FileId,
    /// The version kept, held weakly: the file table decides which
    /// versions stay open (an entry holds its file's descriptors).
    entry: Weak<FileEntry>,
    /// Status line and fixed fields, without `date` and the blank line.
    head: Bytes,
    /// The same fields for hyper's path (h2 streams, handed-over connections).
    fields: http::HeaderMap,
    body: Bytes,
    /// Unix second of the last check that the path still names this version.
    checked: AtomicU64,
}

/// The versions being read for admission and their bytes.
#[derive(Default)]
struct Admitting {
    files: FxHashSet<FileId>,
    bytes: u64,
}

/// One version being read for admission, counted in [`Admitting`] until
/// dropped.
struct Admission {
    store: Arc<SmallFiles>,
    id: FileId,
    size: u64,
}

impl Drop for Admission {
    fn drop(&mut self) {
        let mut admitting = self.store.admitting();
        admitting.files.remove(&self.id);
        admitting.bytes = admitting.bytes.saturating_sub(self.size);
    }
}

#[derive(Debug, Clone)]
struct ByBytes;

impl Weighter<String, Arc<Small>> for ByBytes {
    fn weight(&self, key: &String, val: &Arc<Small>) -> u64 {
        // The fields weigh about what their wire form does.
        ENTRY_OVERHEAD + (key.len() + 2 * val.head.len() + val.body.len()) as u64
    }
}

/// A small file's kept response, as found for one request.
pub(crate) struct Kept(Arc<Small>);

impl Kept {
    /// The version kept, while the file table or a download still holds it.
    pub fn entry(&self) -> Option<Arc<FileEntry>> {
        self.0.entry.upgrade()
    }

    /// The fields and bytes of a whole 200.
    pub fn whole(&self) -> (http::HeaderMap, Bytes) {
        (self.0.fields.clone(), self.0.body.clone())
    }
}

/// The largest file kept whole: 1 MiB, or a block where blocks are
/// larger. At 1 MiB the lane, even writing from the heap, cost less than
/// the full path's scheduler, hyper and `sendfile` from the block cache
/// (docs/results/2026-11-28-lane-mebibyte-and-accept.md).
pub(crate) fn largest_kept(block_size: u32) -> u64 {
    u64::from(block_size).max(1 << 20)
}

pub(crate) struct SmallFiles {
    /// By request path, still percent-encoded (as the lane sees it).
    cache: Cache<String, Arc<Small>, ByBytes>,
    /// Versions being read for admission, so a crowd reads a file once.
    admitting: Mutex<Admitting>,
    /// Largest file kept ([`largest_kept`]).
    max_size: u64,
    budget: u64,
    /// Where bodies of [`crate::kept_memory::SENDABLE_FROM`] bytes or
    /// more are kept, to be sent without a copy; the heap without it.
    memory: Option<Arc<KeptMemory>>,
}

/// What the store of whole small files holds, for `/status`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SmallFilesUsage {
    pub budget_bytes: u64,
    /// Their bodies, headers and paths, as the budget counts them.
    pub used_bytes: u64,
    pub files: u64,
    pub largest_kept_bytes: u64,
    /// The memory the bodies of `SENDABLE_FROM` bytes or more are kept in
    /// and sent from without a copy (`kept_memory`); `null` where there is
    /// none (no memfd, `--zero-copy false`) and every body is written from
    /// the heap.
    pub sendable: Option<crate::kept_memory::KeptUsage>,
}

impl std::fmt::Debug for SmallFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmallFiles").field("budget", &self.budget).field("used", &self.cache.weight()).finish()
    }
}

impl SmallFiles {
    /// A store of `budget` bytes keeping files of up to `max_size` bytes,
    /// and none over an eighth of the budget, so that it holds many.
    ///
    /// quick_cache splits its budget into shards (four per core unless
    /// told), hashes each path into one with a seed of its own, evicts
    /// from a shard once that shard is full, and refuses an entry heavier
    /// than 97% of one. A shard that holds only a few of the largest files
    /// overflows whenever the hashing gives it a few more than its share,
    /// while the store as a whole has room: a working set of 70% of the
    /// budget, a sixth of it in files of a 26th each, lost files in more
    /// than half the starts with shards of six such files, and each of them
    /// was read again at every request. So a shard takes at least
    /// [`LARGEST_PER_SHARD`] of the largest file (one shard for a store up
    /// to 128 MiB; the default's is 64), and the largest file is held under
    /// what one shard takes.
    pub fn new(budget: u64, max_size: u64) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
        Self::on_cores(budget, max_size, cores)
    }

    /// [`SmallFiles::new`] for a machine of `cores` cores.
    fn on_cores(budget: u64, max_size: u64, cores: u64) -> Self {
        // An estimate of the entries it will hold, for sizing its table.
        let items = (budget / (16 << 10)).clamp(16, 1 << 20) as usize;
        let wanted = max_size.min(budget / 8);
        let fitting = (budget / (LARGEST_PER_SHARD * wanted.max(1))).clamp(1, 4 * cores);
        let options = quick_cache::OptionsBuilder::new()
            .estimated_items_capacity(items)
            .weight_capacity(budget.max(1))
            // A power of two, as the cache rounds up to one.
            .shards(1 << fitting.ilog2())
            .build()
            .expect("every option is set");
        let cache = Cache::with_options(options, ByBytes, Default::default(), Default::default());
        let room = cache.shard_capacity() / 100 * 97;
        SmallFiles {
            cache,
            admitting: Mutex::default(),
            max_size: wanted.min(room.saturating_sub(ENTRY_OVERHEAD + HEAD_ROOM + PATH_ROOM)),
            budget,
            memory: None,
        }
    }

    /// Keeps bodies long enough to gain from it in `memory` (see
    /// `kept_memory`), where it can take them.
    pub fn with_memory(self, memory: Option<Arc<KeptMemory>>) -> Self {
        SmallFiles { memory, ..self }
    }

    /// Whether a whole plain response for `file` should be kept.
    pub fn wants(&self, file: &FileEntry) -> bool {
        self.budget > 0 && file.size > 0 && file.size <= self.max_size
    }

    /// Reads `file` (served from `root`) once and keeps its whole response
    /// under `url_path`, in the background, counting the read in
    /// `read_bytes`; a second call for a version being admitted is a no-op.
    pub fn admit(self: &Arc<Self>, read_bytes: Counter, file: Arc<FileEntry>, url_path: &str) {
        if url_path.len() as u64 > PATH_ROOM {
            // It might not fit beside the largest files, and be read again
            // at every request.
            return;
        }
        {
            let mut admitting = self.admitting();
            // A crawl of many files admits a few at a time; the others are
            // served by the full path and admitted at a later request.
            let (files, bytes) = ADMITTING_AT_MOST;
            let busy =
                admitting.files.len() >= files || (!admitting.files.is_empty() && admitting.bytes + file.size > bytes);
            if busy || !admitting.files.insert(file.id) {
                return;
            }
            admitting.bytes += file.size;
        }
        // Let go of however the task ends (a panic, a runtime shutting down).
        let admission = Admission { store: self.clone(), id: file.id, size: file.size };
        let url_path = url_path.to_owned();
        tokio::spawn(async move {
            let memory = admission.store.memory.as_ref();
            let built = Self::build(&read_bytes, &file, memory).await;
            match built {
                Ok(small) => admission.store.cache.insert(url_path, Arc::new(small)),
                Err(e) => tracing::debug!(path = %file.rel, error = %e, "small file not kept"),
            }
        });
    }

    fn admitting(&self) -> std::sync::MutexGuard<'_, Admitting> {
        // Its counts stay whole even if a holder panicked.
        self.admitting.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    async fn build(
        read_bytes: &Counter,
        file: &Arc<FileEntry>,
        memory: Option<&Arc<KeptMemory>>,
    ) -> Result<Small, ReadError> {
        let index = file.index().await?;
        let bytes = file.source.read_block(0, file.size as u32).await?;
        read_bytes.inc_by(bytes.len() as u64);
        let changed = || ReadError::changed(format!("{} changed while it was read", file.rel));
        let exact = bytes.get(..file.size as usize).ok_or_else(changed)?;
        let block = file.layout.block_size() as usize;
        if !exact.chunks(block).enumerate().all(|(i, b)| index.verify(i as u32, b)) {
            return Err(changed());
        }
        let digest = base64::engine::general_purpose::STANDARD.encode(index.sha256);
        let sendable = memory.filter(|_| exact.len() >= SENDABLE_FROM).and_then(|m| m.store(exact));
        Ok(Small {
            id: file.id,
            entry: Arc::downgrade(file),
            head: Bytes::from(head(file, &digest)),
            fields: fields(file, &digest),
            body: sendable.unwrap_or_else(|| Bytes::copy_from_slice(exact)),
            checked: AtomicU64::new(unix_secs(SystemTime::now())),
        })
    }

    /// The response for `url_path`, if kept and still current.
    fn current(&self, files: &FileTable, url_path: &str, now: SystemTime) -> Option<Arc<Small>> {
        let small = self.cache.get(url_path)?;
        let secs = unix_secs(now);
        if small.checked.load(Ordering::Relaxed) < secs {
            // Blocking, at most once a second per file: a path resolution
            // and a stat, as nginx makes on every request.
            if files.lookup(url_path).ok().is_none_or(|f| f.id != small.id) {
                self.cache.remove(url_path);
                return None;
            }
            small.checked.store(secs, Ordering::Relaxed);
        }
        Some(small)
    }

    /// The kept bytes of `url_path` when they are exactly the version
    /// `file` (resolved for this request), if any.
    pub fn body(&self, url_path: &str, file: &FileEntry) -> Option<Bytes> {
        let small = self.cache.get(url_path)?;
        (small.id == file.id && small.body.len() as u64 == file.size).then(|| small.body.clone())
    }

    /// The kept response for `url_path` while it is current (checked at
    /// most once a second, as the lane's answers are): the full path, h2
    /// and ranges included, then resolves the path to its version without
    /// a `stat`, and answers a plain whole GET with it.
    pub fn kept(&self, files: &FileTable, url_path: &str) -> Option<Kept> {
        self.current(files, url_path, SystemTime::now()).map(Kept)
    }

    /// Bytes held now.
    pub fn used(&self) -> u64 {
        self.cache.weight()
    }

    /// What the store holds, for `/status`.
    pub fn usage(&self) -> SmallFilesUsage {
        SmallFilesUsage {
            budget_bytes: self.budget,
            used_bytes: self.used(),
            files: self.cache.len() as u64,
            largest_kept_bytes: self.max_size,
            sendable: self.memory.as_ref().map(|m| m.usage()),
        }
    }

    /// [`HitSource::render`] for the files of `files`.
    pub fn render(
        &self,
        files: &FileTable,
        target: &str,
        method_head: bool,
        headers: &[httparse::Header<'_>],
        head: &mut Vec<u8>,
    ) -> Option<Bytes> {
        let path = target.split_once('?').map_or(target, |(p, _)| p);
        // A native client gets the block stream from the full path.
        let accepts = headers.iter().filter(|h| h.name.eq_ignore_ascii_case("accept"));
        if circus_http::accept::lists_native(accepts.filter_map(|h| std::str::from_utf8(h.value).ok())) {
            return None;
        }
        let now = SystemTime::now();
        let small = self.current(files, path, now)?;
        head.extend_from_slice(&small.head);
        circus_http::put_date(head, now);
        Some(if method_head { Bytes::new() } else { small.body.clone() })
    }
}

/// The fields the full path writes for a whole 200 (`http::plain` and
/// `http::route`), in the wire form.
fn head(file: &FileEntry, digest: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    let modified = httpdate::fmt_http_date(file.modified);
    let _ = write!(
        out,
        "HTTP/1.1 200 OK\r\ncontent-type: {}\r\ncontent-length: {}\r\naccept-ranges: bytes\r\netag: {}\r\nlast-modified: {modified}\r\nvary: Accept\r\nrepr-digest: sha-256=:{digest}:\r\n",
        file.content_type, file.size, file.etag
    );
    out
}

/// The fields of [`head`], as a header map.
fn fields(file: &FileEntry, digest: &str) -> http::HeaderMap {
    use http::{HeaderValue, header};
    let text = |s: &str| HeaderValue::from_str(s).unwrap_or(HeaderValue::from_static(""));
    let mut h = http::HeaderMap::with_capacity(8);
    h.insert(header::CONTENT_TYPE, text(&file.content_type));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(file.size));
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    h.insert(header::ETAG, text(&file.etag));
    h.insert(header::LAST_MODIFIED, text(&httpdate::fmt_http_date(file.modified)));
    h.insert(header::VARY, HeaderValue::from_static("Accept"));
    h.insert("repr-digest", text(&format!("sha-256=:{digest}:")));
    h
}

fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_kept_file_is_answered_whole_and_dropped_once_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("s.txt"), b"small file").unwrap();
        let files = FileTable::new(dir.path(), 4096).unwrap();
        let small = Arc::new(SmallFiles::new(1 << 20, 4096));
        let file = files.lookup("/s.txt").unwrap();
        assert!(small.wants(&file));
        let read = Counter::default();
        small.admit(read.clone(), file, "/s.txt");
        let kept = |s: &SmallFiles| s.cache.get("/s.txt").is_some();
        for _ in 0..200 {
            if kept(&small) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(read.get(), 10, "one read of the file");
        let lane = |target: &str, headers: &[httparse::Header<'_>], out: &mut Vec<u8>| {
            small.render(&files, target, false, headers, out)
        };
        let mut out = Vec::new();
        let body = lane("/s.txt?x=1", &[], &mut out).expect("answered");
        assert_eq!(body, &b"small file"[..]);
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 10\r\n"), "{text}");
        assert!(text.contains("\r\ndate: ") && text.ends_with("GMT\r\n"), "{text}");
        let native = [httparse::Header { name: "Accept", value: b"application/vnd.circus.blocks" }];
        assert!(lane("/s.txt", &native, &mut Vec::new()).is_none(), "native clients go to the full path");
        let found = small.kept(&files, "/s.txt").expect("kept whole");
        let (fields, body) = found.whole();
        assert_eq!(body, &b"small file"[..]);
        let wire: String = fields.iter().map(|(n, v)| format!("{n}: {}\r\n", v.to_str().unwrap())).collect();
        let head = String::from_utf8(small.cache.get("/s.txt").unwrap().head.to_vec()).unwrap();
        assert_eq!(format!("HTTP/1.1 200 OK\r\n{wire}"), head, "the same fields both ways");
        let kept_version = found.entry().expect("the full path resolves the kept version");
        assert_eq!(kept_version.id, files.lookup("/s.txt").unwrap().id);

        // Rewritten: within a second the entry is checked again and dropped.
        std::fs::write(dir.path().join("s.txt"), b"changed!!!!").unwrap();
        small.cache.get("/s.txt").unwrap().checked.store(0, Ordering::Relaxed);
        assert!(lane("/s.txt", &[], &mut Vec::new()).is_none());
        assert!(!kept(&small));
        assert!(small.kept(&files, "/s.txt").is_none(), "the full path resolves the file anew");
    }

    #[test]
    fn files_over_the_limit_or_empty_are_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("big"), vec![1u8; 5000]).unwrap();
        std::fs::write(dir.path().join("empty"), b"").unwrap();
        let files = FileTable::new(dir.path(), 4096).unwrap();
        let small = SmallFiles::new(1 << 20, 4096);
        assert!(!small.wants(&files.lookup("/big").unwrap()));
        assert!(!small.wants(&files.lookup("/empty").unwrap()));
        assert!(!SmallFiles::new(0, 4096).wants(&files.lookup("/big").unwrap()));
        // No file heavier than an eighth of the store, which the cache
        // would refuse after every read.
        assert!(SmallFiles::new(1 << 20, 256 << 10).wants(&files.lookup("/big").unwrap()));
        assert!(!SmallFiles::new(32 << 10, 256 << 10).wants(&files.lookup("/big").unwrap()));
    }

    #[tokio::test]
    async fn a_path_too_long_to_fit_beside_the_largest_files_is_never_read_for_admission() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("s.txt"), b"small file").unwrap();
        let files = FileTable::new(dir.path(), 4096).unwrap();
        let small = Arc::new(SmallFiles::new(16 << 20, largest_kept(64 << 10)));
        let file = files.lookup("/s.txt").unwrap();
        // The same file under a path padded with empty segments.
        let long = format!("{}/s.txt", "/".repeat(PATH_ROOM as usize));
        let read = Counter::default();
        small.admit(read.clone(), file.clone(), &long);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert_eq!((read.get(), small.used()), (0, 0), "a path of {} bytes was admitted", long.len());
        small.admit(read.clone(), file, "/s.txt");
        for _ in 0..200 {
            if small.used() > 0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(read.get(), 10, "the short path is admitted");
    }

    /// What the store keeps for a file of `size` bytes under a typical path.
    fn entry_of(size: u64) -> Arc<Small> {
        let head = "HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ncontent-length: 1048576\r\n\
                    accept-ranges: bytes\r\netag: \"6746c8f2-100000\"\r\nlast-modified: Fri, 27 Nov 2026 10:00:00 GMT\r\n\
                    vary: Accept\r\nrepr-digest: sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:\r\n";
        Arc::new(Small {
            id: FileId(1),
            entry: Weak::new(),
            head: Bytes::from(head),
            fields: http::HeaderMap::new(),
            body: Bytes::from(vec![0u8; size as usize]),
            checked: AtomicU64::new(0),
        })
    }

    /// The same file's entry under another size, its body shared.
    fn entry_sharing(body: &Bytes, size: u64) -> Arc<Small> {
        let mut entry = Arc::into_inner(entry_of(0)).expect("not shared yet");
        entry.body = body.slice(..size as usize);
        Arc::new(entry)
    }

    #[test]
    fn a_working_set_well_under_the_budget_is_kept_whole_however_its_paths_hash() {
        // A content server's mix scaled to the store: 64 files of 1-16 KiB
        // and the rest in files of a 26th of the budget each (at most the
        // largest kept), 60% of it in all (the signature bench's mix in its
        // store of 6.75 MB: 256 KiB files). The cache hashes paths into
        // shards with a seed of its own, so a shard holding a few large
        // files each can overflow and evict while the store as a whole has
        // room; every later request for what it evicted is read again from
        // storage. The shards depend on the cores: each count is tried.
        for (budget, cores) in
            [(6_747_000, 2), (64 << 20, 2), (64 << 20, 64), (1 << 30, 1), (1 << 30, 2), (1 << 30, 64)]
        {
            let largest = largest_kept(64 << 10);
            let body = Bytes::from(vec![0u8; largest as usize]);
            let medium = (budget / 26).min(SmallFiles::on_cores(budget, largest, cores).max_size);
            let mut files: Vec<(String, u64)> =
                (0..64).map(|i| (format!("/small-{i:02}.bin"), (1 + i % 16) << 10)).collect();
            let mediums = (budget * 6 / 10 - files.iter().map(|f| f.1).sum::<u64>()) / medium;
            files.extend((0..mediums).map(|i| (format!("/medium-{i:03}.bin"), medium)));
            for start in 0..20 {
                let small = SmallFiles::on_cores(budget, largest, cores);
                for (path, size) in &files {
                    small.cache.insert(path.clone(), entry_sharing(&body, *size));
                }
                let lost: Vec<&str> =
                    files.iter().filter(|(p, _)| small.cache.get(p.as_str()).is_none()).map(|f| f.0.as_str()).collect();
                assert!(
                    lost.is_empty(),
                    "store of {budget} on {cores} cores (start {start}, {} shards of {}): {} of {} files evicted while {} of {budget} bytes were held: {lost:?}",
                    small.cache.num_shards(),
                    small.cache.shard_capacity(),
                    lost.len(),
                    files.len(),
                    small.used()
                );
            }
        }
    }

    #[test]
    fn the_largest_file_wanted_fits_the_store_whatever_its_budget() {
        // The cache refuses an entry heavier than most of one of its
        // shards; a file it refused would be read again at every request.
        for budget in [0, 8 << 10, 32 << 10, (3 << 20) + 7, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 1 << 30] {
            let small = SmallFiles::new(budget, largest_kept(64 << 10));
            let largest = small.max_size;
            if largest == 0 {
                assert!(budget < 16 << 10, "a store of {budget} keeps nothing");
                continue;
            }
            let wanted = (budget / 8).min(largest_kept(64 << 10));
            assert!(largest + (16 << 10) >= wanted, "store of {budget}: files up to {largest} only");
            let path = "/pool/main/l/linux/linux-image-6.18.44-amd64_6.18.44-1_amd64.deb";
            small.cache.insert(path.to_owned(), entry_of(largest));
            assert!(small.cache.get(path).is_some(), "store of {budget}: a file of {largest} bytes was refused");
        }
    }
}
