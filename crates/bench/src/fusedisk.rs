//! The emulated disk as a file system: a read-only FUSE mount that exposes
//! the regular files of a backing directory through one [`DiskModel`].
//!
//! FUSE threads take the requests, ask the model in arrival order when
//! each read completes, and sleep until then: one arm, FIFO. Every server in a comparison
//! reads through the same mount, and the model counts their bytes the same
//! way.
//!
//! Memory is the other scarce resource, and it must be the same for every
//! server. `O_DIRECT` readers (circus, nginx with `directio`) bypass the
//! page cache and bring their own budget. Buffered readers (nginx's
//! `sendfile`, which splices from the page cache even on a `direct_io` FUSE
//! file) get a page cache bounded to `page_cache` bytes: files are opened
//! with `keep_cache` so an open does not flush it, and once the buffered
//! bytes read exceed the bound the oldest ranges are invalidated in the
//! kernel (FIFO, like the kernel's LRU on a streaming workload). Without
//! the bound nginx would hold the whole scaled file in this machine's
//! 24 GiB, a memory the paper's servers did not have.
//!
//! Mounting needs root (the direct `mount(2)` path of `fuser`; no
//! `fusermount3` helper is needed) and `/dev/fuse`.

use crate::disk::{DiskModel, DiskParams, DiskStats};
use crate::{BenchError, io_err};
use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, INodeNo, LockOwner, MountOption, OpenFlags,
    ReplyAttr, ReplyData, ReplyDirectory, ReplyEntry, ReplyOpen, Request, SessionACL,
};
use std::{
    ffi::OsStr,
    fs::File,
    os::unix::fs::FileExt,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

/// Attributes never change during a run: let the kernel cache them.
const TTL: Duration = Duration::from_secs(3600);

struct Entry {
    name: String,
    file: File,
    attr: FileAttr,
}

struct DiskFs {
    files: Vec<Entry>,
    root: FileAttr,
    model: Arc<Mutex<DiskModel>>,
    epoch: Instant,
    cache: Mutex<PageCache>,
}

/// The ranges that buffered reads brought into the kernel's page cache,
/// oldest first, and where to send the ones that must leave.
struct PageCache {
    budget: u64,
    held: u64,
    ranges: std::collections::VecDeque<(u64, u64, u64)>,
    evict: std::sync::mpsc::Sender<(u64, u64, u64)>,
}

impl PageCache {
    fn admit(&mut self, ino: u64, offset: u64, len: u64) {
        self.ranges.push_back((ino, offset, len));
        self.held += len;
        while self.held > self.budget {
            let Some(r) = self.ranges.pop_front() else { break };
            self.held -= r.2;
            // Another thread tells the kernel: invalidation waits for locked
            // pages, which may be waiting for this very thread's replies.
            let _ = self.evict.send(r);
        }
    }
}

impl DiskFs {
    fn entry(&self, ino: INodeNo) -> Option<&Entry> {
        let i = u64::from(ino).checked_sub(2)?;
        self.files.get(usize::try_from(i).ok()?)
    }
}

impl Filesystem for DiskFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.files.iter().find(|e| u64::from(parent) == 1 && OsStr::new(&e.name) == name) {
            Some(e) => reply.entry(&TTL, &e.attr, fuser::Generation(0)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        if ino == INodeNo::ROOT {
            return reply.attr(&TTL, &self.root);
        }
        match self.entry(ino) {
            Some(e) => reply.attr(&TTL, &e.attr),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.entry(ino) {
            // keep_cache: an open does not flush the bounded page cache.
            Some(_) => reply.opened(FileHandle(0), FopenFlags::FOPEN_KEEP_CACHE),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let Some(e) = self.entry(ino) else { return reply.error(Errno::ENOENT) };
        let len = u64::from(size).min(e.attr.size.saturating_sub(offset));
        if flags.0 & libc::O_DIRECT == 0 && len > 0 {
            self.cache.lock().expect("page cache lock").admit(u64::from(ino), offset, len);
        }
        if len > 0 {
            let now = self.epoch.elapsed().as_secs_f64();
            let done = self.model.lock().expect("disk model lock").read(now, u64::from(ino), offset, len);
            let wait = done - self.epoch.elapsed().as_secs_f64();
            if wait > 0.0 {
                std::thread::sleep(Duration::from_secs_f64(wait));
            }
        }
        let mut buf = vec![0u8; len as usize];
        match e.file.read_exact_at(&mut buf, offset) {
            Ok(()) => reply.data(&buf),
            Err(_) => reply.error(Errno::EIO),
        }
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _owner: LockOwner, reply: fuser::ReplyEmpty) {
        reply.ok();
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        if ino != INodeNo::ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        let dots = [(INodeNo::ROOT, FileType::Directory, "."), (INodeNo::ROOT, FileType::Directory, "..")];
        let files = self.files.iter().map(|e| (e.attr.ino, FileType::RegularFile, e.name.as_str()));
        for (i, (ino, kind, name)) in dots.into_iter().chain(files).enumerate().skip(offset as usize) {
            if reply.add(ino, i as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }
}

/// A mounted emulated disk; unmounted when dropped.
pub struct DiskMount {
    pub mountpoint: PathBuf,
    model: Arc<Mutex<DiskModel>>,
    session: Option<fuser::BackgroundSession>,
}

impl std::fmt::Debug for DiskMount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskMount").field("mountpoint", &self.mountpoint).finish_non_exhaustive()
    }
}

impl DiskMount {
    /// Mounts the regular files at the top of `backing` on `mountpoint`
    /// (created if missing) behind a disk with `params`; buffered readers
    /// get at most `page_cache` bytes of page cache.
    pub fn mount(
        backing: &Path,
        mountpoint: &Path,
        params: DiskParams,
        page_cache: u64,
    ) -> Result<DiskMount, BenchError> {
        if !Path::new("/dev/fuse").exists() {
            return Err(BenchError::Setup("/dev/fuse is missing: load the fuse module or use --disk real".into()));
        }
        unmount_stale(mountpoint);
        std::fs::create_dir_all(mountpoint).map_err(io_err(format!("creating {}", mountpoint.display())))?;
        let mut files = Vec::new();
        let mut names: Vec<_> = std::fs::read_dir(backing)
            .map_err(io_err(format!("listing {}", backing.display())))?
            .filter_map(Result::ok)
            .filter(|d| d.file_type().is_ok_and(|t| t.is_file()))
            .filter_map(|d| d.file_name().into_string().ok())
            .collect();
        names.sort();
        for name in names {
            let path = backing.join(&name);
            let file = File::open(&path).map_err(io_err(format!("opening {}", path.display())))?;
            let meta = file.metadata().map_err(io_err(format!("reading {}", path.display())))?;
            let ino = INodeNo(files.len() as u64 + 2);
            let attr = attr(ino, FileType::RegularFile, meta.len(), 0o444, meta.modified().unwrap_or(UNIX_EPOCH));
            files.push(Entry { name, file, attr });
        }
        let model = Arc::new(Mutex::new(DiskModel::new(params)));
        let (evict, evicted) = std::sync::mpsc::channel();
        let fs = DiskFs {
            files,
            root: attr(INodeNo::ROOT, FileType::Directory, 0, 0o555, SystemTime::now()),
            model: model.clone(),
            epoch: Instant::now(),
            cache: Mutex::new(PageCache { budget: page_cache, held: 0, ranges: Default::default(), evict }),
        };
        let mut config = Config::default();
        config.mount_options = vec![MountOption::RO, MountOption::FSName("circus-disk".into())];
        // nginx workers run as nobody: let every user read the mount.
        config.acl = SessionACL::All;
        // Several threads take requests so that the arm never idles while
        // one thread waits for the CPU to reply; each read's completion
        // still comes from the one model, in the order the reads reached it.
        config.n_threads = Some(8);
        let session = fuser::spawn_mount(fs, mountpoint, &config).map_err(|e| {
            BenchError::Setup(format!(
                "mounting the emulated disk on {}: {e} (needs root and /dev/fuse; or use --disk real)",
                mountpoint.display()
            ))
        })?;
        let notifier = session.notifier();
        // Ends when the file system (the sender) is dropped at unmount.
        std::thread::spawn(move || {
            for (ino, offset, len) in evicted {
                let _ = notifier.inval_inode(INodeNo(ino), offset as i64, len as i64);
            }
        });
        Ok(DiskMount { mountpoint: mountpoint.to_owned(), model, session: Some(session) })
    }

    pub fn stats(&self) -> DiskStats {
        self.model.lock().expect("disk model lock").stats()
    }
}

impl Drop for DiskMount {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            let _ = s.umount_and_join();
        }
        unmount_stale(&self.mountpoint);
    }
}

/// A mount left behind by a run that was killed: detach it so the path is usable.
fn unmount_stale(mountpoint: &Path) {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else { return };
    let target = mountpoint.to_string_lossy();
    if mounts.lines().any(|l| l.split_whitespace().nth(1) == Some(&*target)) {
        let _ = std::process::Command::new("umount").args(["-l", &*target]).status();
    }
}

fn attr(ino: INodeNo, kind: FileType, size: u64, perm: u16, time: SystemTime) -> FileAttr {
    FileAttr {
        ino,
        size,
        blocks: size.div_ceil(512),
        atime: time,
        mtime: time,
        ctime: time,
        crtime: time,
        kind,
        perm,
        nlink: if kind == FileType::Directory { 2 } else { 1 },
        uid: 0,
        gid: 0,
        rdev: 0,
        flags: 0,
        blksize: 4096,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_cache_evicts_oldest_ranges_beyond_its_budget() {
        let (evict, evicted) = std::sync::mpsc::channel();
        let mut cache = PageCache { budget: 256, held: 0, ranges: Default::default(), evict };
        for (i, offset) in [0u64, 128, 256, 384].into_iter().enumerate() {
            cache.admit(2, offset, 128);
            assert!(cache.held <= 256, "after read {i}: {}", cache.held);
        }
        let gone: Vec<_> = evicted.try_iter().collect();
        assert_eq!(gone, vec![(2, 0, 128), (2, 128, 128)], "oldest first");
        assert_eq!(cache.held, 256);
    }
}
