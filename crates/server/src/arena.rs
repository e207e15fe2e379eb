//! Block memory that the kernel can send without copying.
//!
//! Cached blocks live in fixed slots of one memfd, mapped read-only into the
//! process. A block is an ordinary [`Bytes`] (shared by every send, freed
//! when the last one drops), but because its bytes are pages of a file, the
//! connection layer ([`crate::sendfile`]) can hand them to the socket with
//! `sendfile(2)` instead of `write(2)`: the pages are referenced by the
//! outgoing packets rather than copied into them, as nginx does with the page
//! cache. On a loopback benchmark that copy was 38% of the server's CPU.
//!
//! Reuse safety: packets may still reference a slot's pages after the bytes
//! were handed to the kernel and the block was evicted. Freeing a slot
//! therefore punches a hole in the memfd, which detaches those pages (the
//! kernel frees them once the packets are gone) so the slot's next block is
//! written into fresh pages and never shows through an old packet.
//!
//! A hole detaches only whole folios: a hole through part of a large folio
//! (a tmpfs mounted `huge=always`, shmem huge pages enabled, a filesystem's
//! large folios) zeroes that part in place, in the pages the packets still
//! reference, and the slot's next block is then written into those same
//! pages. So slots never straddle a *granule*, the largest folio the
//! backing may hold ([`granule`]), and a freed slot smaller than a granule
//! is reused only once every slot of its granule is free and the whole
//! granule has been punched.

use bytes::Bytes;
use memmap2::Mmap;
use rustix::fs::{FallocateFlags, MemfdFlags, Mode, OFlags};
use std::{
    fs::File,
    io,
    os::{
        fd::{AsFd, BorrowedFd},
        unix::fs::FileExt,
    },
    path::Path,
    sync::{Arc, Mutex},
};

const PAGE: usize = 4096;

#[derive(Debug)]
pub struct Arena {
    memfd: File,
    map: Mmap,
    slot_len: usize,
    /// Slots per granule; 1 when a slot covers whole granules.
    per_granule: u32,
    /// Bytes from one granule's first slot to the next's.
    granule_len: usize,
    /// The largest folio the backing file may hold ([`granule`]).
    granule: usize,
    /// What the backing file is: `memfd`, `file in DIR`, or a private
    /// huge tmpfs (see `huge_tmpfs`).
    backing: String,
    free: Mutex<Free>,
}

/// Which slots may be taken.
#[derive(Debug)]
struct Free {
    /// Free slots, the next to take last.
    slots: Vec<u32>,
    /// Per granule: slots taken and not yet freed.
    taken: Vec<u32>,
    /// Per granule: slots freed while others of the granule were still
    /// taken, waiting for the granule's hole.
    waiting: Vec<Vec<u32>>,
}

/// The largest folio the file behind the arena may hold: 4 KiB for a
/// memfd while shmem huge pages are off (every size of them, or the
/// kernel has none), else the PMD size (2 MiB on x86-64), which no
/// page-cache folio exceeds. A `--cache-dir` may be a tmpfs mounted
/// `huge=always` or a filesystem with large folios: always the PMD size.
pub(crate) fn granule(dir: Option<&Path>) -> usize {
    let pmd = pmd_size();
    if dir.is_some() {
        return pmd;
    }
    if !Path::new(THP).exists() {
        // A kernel without transparent huge pages: shmem has none.
        return PAGE;
    }
    let top = std::fs::read_to_string(format!("{THP}/shmem_enabled")).ok();
    let sizes: Vec<Option<String>> = std::fs::read_dir(THP)
        .map(|dir| {
            dir.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with("hugepages-"))
                .map(|e| std::fs::read_to_string(e.path().join("shmem_enabled")).ok())
                .collect()
        })
        .unwrap_or_default();
    if shmem_folios_small(top.as_deref(), &sizes) { PAGE } else { pmd }
}

const THP: &str = "/sys/kernel/mm/transparent_hugepage";

/// The kernel's PMD (huge page) size: 2 MiB on x86-64.
pub(crate) fn pmd_size() -> usize {
    std::fs::read_to_string(format!("{THP}/hpage_pmd_size"))
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .filter(|&n| n >= PAGE && n.is_power_of_two())
        .unwrap_or(2 << 20)
}

/// Whether a private tmpfs of huge pages (`huge_tmpfs`) would have them:
/// a memfd would not (shmem keeps to 4 KiB pages), and the kernel has not
/// denied them to every tmpfs (`deny`).
pub(crate) fn huge_tmpfs_worth_it() -> bool {
    let top = std::fs::read_to_string(format!("{THP}/shmem_enabled")).unwrap_or_default();
    granule(None) == PAGE && Path::new(THP).exists() && !top.contains("[deny]")
}

/// Whether shmem keeps to 4 KiB pages, from the text of
/// `transparent_hugepage/shmem_enabled` and of each size's own setting
/// (`hugepages-*/shmem_enabled`); a setting that cannot be read counts as
/// on, except a size's where there is none.
fn shmem_folios_small(top: Option<&str>, sizes: &[Option<String>]) -> bool {
    // The chosen setting is the bracketed word.
    let chosen = |text: &str| Some(text.split_once('[')?.1.split_once(']')?.0.to_owned());
    let off = |setting: Option<&str>| matches!(setting, Some("never" | "deny"));
    let top = top.and_then(chosen);
    let top_off = off(top.as_deref());
    top_off
        && sizes.iter().all(|size| {
            let setting = size.as_deref().and_then(chosen);
            off(setting.as_deref()) || setting.as_deref() == Some("inherit")
        })
}

impl Arena {
    /// An arena of `slots` slots of `slot_len` bytes (rounded up to pages).
    /// Memory is only used by slots that hold a block. The backing file is a
    /// memfd, or with `dir` an unlinked file there: on a tmpfs mounted with
    /// `huge=always` its pages are large folios, which `sendfile` hands to
    /// the socket a folio at a time instead of 4 KiB at a time.
    pub fn new(slot_len: usize, slots: usize, dir: Option<&Path>) -> io::Result<Arc<Arena>> {
        let backing = match dir {
            None => "memfd".to_owned(),
            Some(dir) => format!("file in {}", dir.display()),
        };
        let open = |_: u64| -> io::Result<File> {
            Ok(File::from(match dir {
                None => rustix::fs::memfd_create("circus-cache", MemfdFlags::CLOEXEC)?,
                Some(dir) => {
                    rustix::fs::open(dir, OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC, Mode::RUSR | Mode::WUSR)
                        .map_err(|e| {
                            io::Error::new(e.kind(), format!("unlinked cache file in {}: {e}", dir.display()))
                        })?
                }
            }))
        };
        Self::with_granule(slot_len, slots, granule(dir), backing, open)
    }

    /// [`Arena::new`] in a file of a tmpfs of huge pages mounted where
    /// only a child of this process saw it (see `huge_tmpfs`); an error
    /// where user namespaces are not allowed.
    pub fn in_private_huge_tmpfs(slot_len: usize, slots: usize) -> io::Result<Arc<Arena>> {
        Self::with_granule(slot_len, slots, pmd_size(), crate::huge_tmpfs::BACKING.to_owned(), crate::huge_tmpfs::file)
    }

    /// An arena laid out and freed by granules of `granule` bytes (a power
    /// of two, at least a page), in the file `open` makes for its length;
    /// `backing` says what that file is.
    pub(crate) fn with_granule(
        slot_len: usize,
        slots: usize,
        granule: usize,
        backing: String,
        open: impl FnOnce(u64) -> io::Result<File>,
    ) -> io::Result<Arc<Arena>> {
        let mut slot_len = slot_len.max(1).div_ceil(PAGE) * PAGE;
        // A slot larger than a granule covers whole granules; smaller ones
        // share one, none across its end (the rest of it stays unused).
        if slot_len > granule {
            slot_len = slot_len.div_ceil(granule) * granule;
        }
        let per_granule = (granule / slot_len).max(1);
        let granule_len = if per_granule == 1 { slot_len } else { granule };
        let slots = u32::try_from(slots).map_err(|_| io::Error::other("too many cache slots"))?;
        let granules = (slots as usize).div_ceil(per_granule);
        let memfd = open((granule_len * granules) as u64)?;
        memfd.set_len((granule_len * granules) as u64)?;
        // SAFETY: the memfd is private to this arena, and a slot's bytes are
        // written only while the slot is on the free list, so no slice
        // handed out through the map ever sees them change.
        #[allow(unsafe_code)]
        let map = unsafe { Mmap::map(&memfd)? };
        let free =
            Free { slots: (0..slots).rev().collect(), taken: vec![0; granules], waiting: vec![Vec::new(); granules] };
        Ok(Arc::new(Arena {
            memfd,
            map,
            slot_len,
            per_granule: per_granule as u32,
            granule_len,
            granule,
            backing,
            free: Mutex::new(free),
        }))
    }

    /// The largest page (folio) the cache's memory may be made of, as
    /// chosen at start: what `sendfile` hands the socket at a time.
    pub fn page_bytes(&self) -> usize {
        self.granule
    }

    /// What the memory is (see [`Arena::new`] and
    /// [`Arena::in_private_huge_tmpfs`]).
    pub fn backing(&self) -> &str {
        &self.backing
    }

    /// Where slot `idx` starts in the memfd.
    fn offset(&self, idx: u32) -> u64 {
        let (granule, within) = (idx / self.per_granule, idx % self.per_granule);
        granule as u64 * self.granule_len as u64 + u64::from(within) * self.slot_len as u64
    }

    /// Takes a free slot, to be filled later; `None` when every slot is
    /// taken (the caller keeps blocks in ordinary memory then). Taking slots
    /// in the order reads are issued puts a file's consecutive blocks in
    /// consecutive slots, whatever order the reads finish in.
    pub fn slot(self: &Arc<Self>) -> Option<EmptySlot> {
        let mut free = self.free.lock().expect("arena lock");
        let idx = free.slots.pop()?;
        free.taken[(idx / self.per_granule) as usize] += 1;
        Some(EmptySlot(Slot { arena: self.clone(), idx, len: 0 }))
    }

    /// Copies `data` into a free slot (see [`EmptySlot::fill`]).
    #[cfg(test)]
    pub fn store(self: &Arc<Self>, data: &[u8]) -> Option<Bytes> {
        self.slot()?.fill(data)
    }

    /// One `Bytes` over blocks that sit in consecutive slots, so a run of
    /// blocks goes out in one frame and one `sendfile`. `None` unless every
    /// part is arena memory and each starts where the one before ends. The
    /// parts are moved in, not cloned: on the hot path a clone is an atomic
    /// increment, and its drop a decrement, per block and client.
    pub fn join(self: &Arc<Self>, parts: Vec<Bytes>) -> Option<Bytes> {
        let start = self.locate(parts.first()?)?;
        let mut end = start;
        for p in &parts {
            if self.locate(p)? != end {
                return None;
            }
            end += p.len() as u64;
        }
        let run = Run { arena: self.clone(), _parts: parts, start: start as usize, end: end as usize };
        Some(Bytes::from_owner(run))
    }

    /// Where `bytes` lie in the memfd, when they are arena memory.
    pub fn locate(&self, bytes: &[u8]) -> Option<u64> {
        let base = self.map.as_ptr() as usize;
        let start = bytes.as_ptr() as usize;
        (start >= base && start + bytes.len() <= base + self.map.len()).then(|| (start - base) as u64)
    }

    pub fn memfd(&self) -> BorrowedFd<'_> {
        self.memfd.as_fd()
    }

    /// Frees slot `idx`: at once when it covers whole granules, else
    /// with the last taken slot of its granule (see the module's doc).
    fn release(&self, idx: u32) {
        let granule = (idx / self.per_granule) as usize;
        let mut free = self.free.lock().expect("arena lock");
        free.taken[granule] -= 1;
        if self.per_granule == 1 {
            // The slot is its own granule and on no list while it is
            // punched: the lock is not held across the system call.
            drop(free);
            if self.punch(granule) {
                self.free.lock().expect("arena lock").slots.push(idx);
            }
            return;
        }
        free.waiting[granule].push(idx);
        if free.taken[granule] > 0 {
            return;
        }
        // The granule's free slots could be taken and filled by another
        // thread while it is punched, and the hole would take their bytes:
        // punched under the lock.
        let mut freed = std::mem::take(&mut free.waiting[granule]);
        if self.punch(granule) {
            // The lowest taken next, so consecutive reads fill consecutive slots.
            freed.sort_unstable_by(|a, b| b.cmp(a));
            free.slots.extend(freed);
        }
    }

    /// Punches granule `granule` out of the file; whether it took. Without
    /// the hole its slots could show new bytes through packets still in
    /// flight: they are retired rather than reused.
    fn punch(&self, granule: usize) -> bool {
        let offset = granule as u64 * self.granule_len as u64;
        let punch = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
        match rustix::fs::fallocate(&self.memfd, punch, offset, self.granule_len as u64) {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(error = %e, "cache arena cannot free a slot; retiring it");
                false
            }
        }
    }
}

/// A slot set aside for a block being read; freed if dropped unfilled.
#[derive(Debug)]
pub struct EmptySlot(Slot);

impl EmptySlot {
    /// Copies `data` in and hands out the block. `None` when it is larger
    /// than a slot or the memfd cannot take it (out of memory): the caller
    /// keeps its ordinary buffer.
    pub fn fill(mut self, data: &[u8]) -> Option<Bytes> {
        let slot = &mut self.0;
        if data.len() > slot.arena.slot_len {
            return None;
        }
        if let Err(e) = slot.arena.memfd.write_all_at(data, slot.offset()) {
            tracing::warn!(error = %e, "cache arena write failed; using heap memory");
            return None;
        }
        slot.len = data.len();
        Some(Bytes::from_owner(self.0))
    }
}

/// One occupied slot; the owner behind a block's [`Bytes`].
#[derive(Debug)]
struct Slot {
    arena: Arc<Arena>,
    idx: u32,
    len: usize,
}

impl Slot {
    fn offset(&self) -> u64 {
        self.arena.offset(self.idx)
    }
}

/// Consecutive slots seen as one slice; holding the parts keeps them alive.
#[derive(Debug)]
struct Run {
    arena: Arc<Arena>,
    _parts: Vec<Bytes>,
    start: usize,
    end: usize,
}

impl AsRef<[u8]> for Run {
    fn as_ref(&self) -> &[u8] {
        &self.arena.map[self.start..self.end]
    }
}

impl AsRef<[u8]> for Slot {
    fn as_ref(&self) -> &[u8] {
        let start = self.offset() as usize;
        &self.arena.map[start..start + self.len]
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.arena.release(self.idx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_blocks_locates_them_and_reuses_freed_slots() {
        let arena = Arena::new(5000, 2, None).unwrap();
        let a = arena.store(&[1; 5000]).unwrap();
        let b = arena.store(&[2; 100]).unwrap();
        assert_eq!((&a[..], &b[..]), (&[1u8; 5000][..], &[2u8; 100][..]));
        // Slots are page-rounded: the second starts at 8192.
        assert_eq!(arena.locate(&b), Some(8192));
        assert_eq!(arena.locate(&a.slice(10..20)), Some(10));
        assert_eq!(arena.locate(&[0u8; 4][..]), None);
        assert!(arena.store(&[3; 10]).is_none(), "full");
        assert!(arena.store(&[3; 9000]).is_none(), "too large for a slot");
        let shared = a.clone();
        drop(a);
        assert!(arena.store(&[3; 10]).is_none(), "a clone keeps the slot");
        drop(shared);
        let c = arena.store(&[4; 10]).unwrap();
        assert_eq!(&c[..], &[4u8; 10]);
        assert_eq!(arena.locate(&c), Some(0));
    }

    #[test]
    fn a_cache_dir_holds_an_unlinked_file_and_a_missing_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let arena = Arena::new(4096, 2, Some(dir.path())).unwrap();
        let a = arena.store(&[9; 4096]).unwrap();
        assert_eq!(&a[..], &[9u8; 4096]);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "the file has no name");
        let missing = dir.path().join("nope");
        let err = Arena::new(4096, 2, Some(&missing)).unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
    }

    #[test]
    fn joins_only_consecutive_slots() {
        let arena = Arena::new(4096, 3, None).unwrap();
        let blocks: Vec<Bytes> = (1..=3u8).map(|i| arena.store(&[i; 4096]).unwrap()).collect();
        let run = arena.join(blocks.clone()).unwrap();
        assert_eq!(run.len(), 3 * 4096);
        assert_eq!(&run[4095..4097], &[1, 2]);
        assert_eq!(arena.locate(&run), Some(0));
        assert!(arena.join(vec![blocks[0].clone(), blocks[2].clone()]).is_none(), "gap");
        assert!(arena.join(vec![blocks[1].clone(), blocks[0].clone()]).is_none(), "order");
        assert!(arena.join(vec![Bytes::from_static(b"heap")]).is_none());
        // The run keeps its slots: dropping the blocks frees nothing yet.
        drop(blocks);
        assert!(arena.store(&[9; 10]).is_none());
        drop(run);
        assert!(arena.store(&[9; 10]).is_some());
    }

    #[test]
    fn shmem_is_taken_for_4_kib_pages_only_when_every_huge_size_is_off() {
        let size = |s: &str| Some(s.to_owned());
        let never = "always within_size advise [never] deny force\n";
        let sizes_off =
            [size("always inherit within_size advise [never]\n"), size("always [inherit] within_size advise never\n")];
        assert!(shmem_folios_small(Some(never), &sizes_off));
        assert!(shmem_folios_small(Some("always within_size advise never [deny] force"), &sizes_off));
        assert!(shmem_folios_small(Some(never), &[]));
        // Any huge size on, or the top setting on (an inheriting size
        // follows it), or unreadable: large folios may come.
        assert!(!shmem_folios_small(Some(never), &[size("[always] inherit within_size advise never")]));
        assert!(!shmem_folios_small(Some("always [within_size] advise never deny force"), &sizes_off));
        assert!(!shmem_folios_small(Some("always within_size [advise] never deny force"), &[]));
        assert!(!shmem_folios_small(None, &[]));
        assert!(!shmem_folios_small(Some(never), &[None]));
    }

    /// A memfd arena laid out by granules of `granule` bytes.
    fn small_pages(slot_len: usize, slots: usize, granule: usize) -> Arc<Arena> {
        let memfd = |_| Ok(File::from(rustix::fs::memfd_create("test", MemfdFlags::CLOEXEC)?));
        Arena::with_granule(slot_len, slots, granule, "memfd".into(), memfd).unwrap()
    }

    #[test]
    fn slots_smaller_than_a_granule_are_reused_only_once_their_whole_granule_is_free() {
        // Two 4 KiB slots per 8 KiB granule, two granules.
        let arena = small_pages(4096, 4, 8192);
        let a = arena.store(&[1; 4096]).unwrap();
        let b = arena.store(&[2; 4096]).unwrap();
        assert_eq!((arena.locate(&a), arena.locate(&b)), (Some(0), Some(4096)));
        drop(a);
        // Slot 0 shares its granule with b: not reused while b is held.
        let c = arena.store(&[3; 4096]).unwrap();
        assert_eq!(arena.locate(&c), Some(8192));
        let d = arena.store(&[4; 4096]).unwrap();
        assert!(arena.store(&[5; 10]).is_none(), "slot 0 waits for its granule");
        drop(b);
        // The granule is free: both its slots come back, the lowest first.
        let e = arena.store(&[6; 4096]).unwrap();
        let f = arena.store(&[7; 4096]).unwrap();
        assert_eq!((arena.locate(&e), arena.locate(&f)), (Some(0), Some(4096)));
        assert_eq!(
            (&c[..], &d[..], &e[..], &f[..]),
            (&[3u8; 4096][..], &[4u8; 4096][..], &[6u8; 4096][..], &[7u8; 4096][..])
        );
        // A slot that does not divide its granule leaves the rest unused;
        // one larger than a granule covers whole granules.
        let odd = small_pages(3 * 4096, 3, 8 * 4096);
        let blocks: Vec<Bytes> = (0..3u8).map(|i| odd.store(&[i; 3 * 4096]).unwrap()).collect();
        let at: Vec<u64> = blocks.iter().map(|b| odd.locate(b).unwrap()).collect();
        assert_eq!(at, [0, 3 * 4096, 8 * 4096]);
        let large = small_pages(3 * 4096, 2, 2 * 4096);
        let blocks: Vec<Bytes> = (0..2u8).map(|i| large.store(&[i; 3 * 4096]).unwrap()).collect();
        assert_eq!(large.locate(&blocks[1]), Some(4 * 4096));
    }

    /// A tmpfs mounted `huge=always` on a fresh directory, unmounted when
    /// dropped; `None` (said loudly) where this process may not mount.
    struct HugeTmpfs(tempfile::TempDir);

    impl HugeTmpfs {
        fn mount() -> Option<HugeTmpfs> {
            let dir = tempfile::tempdir().unwrap();
            let mounted = std::process::Command::new("mount")
                .args(["-t", "tmpfs", "-o", "huge=always,size=64m", "circus-test"])
                .arg(dir.path())
                .status()
                .is_ok_and(|s| s.success());
            let root = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap()) == 0;
            assert!(mounted || !root, "as root, mounting a tmpfs with huge=always must work");
            if !mounted {
                eprintln!("SKIPPED: not root, cannot mount a tmpfs with huge=always");
            }
            mounted.then_some(HugeTmpfs(dir))
        }
    }

    impl Drop for HugeTmpfs {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(self.0.path()).status();
        }
    }

    fn shmem_huge_kib() -> u64 {
        let info = std::fs::read_to_string("/proc/meminfo").unwrap();
        let line = info.lines().find(|l| l.starts_with("ShmemHugePages:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    #[test]
    fn on_huge_pages_a_freed_slot_never_shows_new_or_zeroed_bytes_through_a_packet_in_flight() {
        use std::io::Read;
        let Some(tmpfs) = HugeTmpfs::mount() else { return };
        let huge_before = shmem_huge_kib();
        let arena = Arena::new(256 << 10, 16, Some(tmpfs.0.path())).unwrap();
        // Eight blocks of 256 KiB: one 2 MiB folio, as the reads of a
        // file fill it.
        let blocks: Vec<Bytes> = (1..=8u8).map(|i| arena.store(&vec![i; 256 << 10]).unwrap()).collect();
        assert!(shmem_huge_kib() > huge_before, "the tmpfs gave no huge page: the test proves nothing");
        // A pipe stands in for a socket: sendfile references the first
        // block's pages, as packets in flight do.
        let (mut rx, tx) = std::io::pipe().unwrap();
        let mut off = arena.locate(&blocks[0]).unwrap();
        let sent = rustix::fs::sendfile(&tx, arena.memfd(), Some(&mut off), 64 << 10).unwrap();
        let mut blocks = blocks.into_iter();
        drop(blocks.next());
        // The next blocks are read into free slots while the packet waits.
        let later: Vec<Bytes> = (0..8).map(|_| arena.store(&vec![0xee; 256 << 10]).unwrap()).collect();
        let mut got = vec![0; sent];
        rx.read_exact(&mut got).unwrap();
        assert!(got.iter().all(|&b| b == 1), "the packet's bytes changed: {:?}", &got[..8]);
        // Once the whole folio is free, its slots are taken again.
        drop(blocks);
        assert!(arena.store(&[9; 10]).is_some());
        drop(later);
    }

    #[test]
    fn freed_slot_pages_are_detached_before_reuse() {
        use std::io::Read;
        // A pipe stands in for a socket: sendfile references the slot's
        // pages; after the slot is freed and rewritten, the pipe must still
        // hold the old bytes.
        let arena = Arena::new(4096, 1, None).unwrap();
        let block = arena.store(&[7; 4096]).unwrap();
        let (mut rx, tx) = std::io::pipe().unwrap();
        let mut off = arena.locate(&block).unwrap();
        assert_eq!(rustix::fs::sendfile(&tx, arena.memfd(), Some(&mut off), 4096).unwrap(), 4096);
        drop(block);
        let again = arena.store(&[9; 4096]).unwrap();
        let mut got = vec![0; 4096];
        rx.read_exact(&mut got).unwrap();
        assert_eq!(got, vec![7; 4096]);
        assert_eq!(&again[..], &[9u8; 4096]);
    }
}
