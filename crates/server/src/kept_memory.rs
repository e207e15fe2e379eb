//! Memory for the bodies of whole kept files ([`crate::small`]) that the
//! kernel can send without copying.
//!
//! The hit lane used to write a kept body from the heap: the kernel copied
//! it into the socket buffer, and at 1 MiB that copy was 59% of the
//! server's CPU (perf, `wrk -t2 -c16` on loopback), where nginx's
//! `sendfile` from the page cache copies nothing. A body of
//! [`SENDABLE_FROM`] bytes or more is therefore copied once, when it is
//! kept, into pages of its own in one file, mapped read-only, and handed
//! out as an ordinary [`Bytes`]; the connection layer
//! ([`crate::sendfile`]) finds its slices here and sends them with
//! `sendfile(2)`, as it does the block cache's.
//!
//! The file is made as the block cache's is ([`crate::arena`]): at the
//! defaults an unnamed file on a private tmpfs of huge pages
//! ([`crate::huge_tmpfs`]), else a memfd. `sendfile` looks pages up one
//! folio at a time, so a 1 MiB body within one 2 MiB page costs one lookup
//! where 256 pages of 4 KiB cost 256 (the pipe takes a buffer per 4 KiB
//! either way). A body longer than a huge page (a `--block-size` over
//! 2 MiB keeps files that long) finds no room here and stays on the heap.
//!
//! Each body takes whole pages, first fit among the free extents, never
//! across a *granule*: the largest folio the file may hold (4 KiB for a
//! memfd while shmem huge pages are off). Freeing a body punches its pages
//! out of the file before they are taken again, as the block arena frees
//! a slot: packets still in flight keep the old pages, and the next body
//! is written into fresh ones, never showing through an old packet. A
//! hole detaches only whole folios (through part of a large one it zeroes
//! in place, under the packets), so in a file of huge pages a freed body's
//! pages wait until every body of their granule is gone; then the whole
//! granule is punched and free again. Pages of a granule that no body has
//! taken yet are taken meanwhile. The file is sparse: only granules that
//! hold a body use memory, a whole huge page each (`/status`:
//! `resident_bytes`), and its length (twice the store's budget) bounds
//! them; a body that finds no room stays on the heap. A few long-lived
//! bodies spread over many granules can hold them all while their own
//! bytes are few: up to an eighth of `--cache` (the store has a
//! sixteenth) beside the heap's bodies.

use bytes::Bytes;
use memmap2::Mmap;
use rustix::fs::{FallocateFlags, MemfdFlags};
use std::{
    collections::BTreeMap,
    fs::File,
    io,
    os::{
        fd::{AsFd, BorrowedFd},
        unix::fs::FileExt,
    },
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
};

const PAGE: usize = 4096;

/// Bodies this long or longer are kept here, and slices of them this long
/// or longer are sent with `sendfile`. On loopback a `sendfile` from a
/// memfd cost less of the sender's CPU than writing the same bytes from
/// the heap from 16 KiB on (4.9 against 5.9 us; 20 against 27 at 100 KiB,
/// 220 against 345 at 1 MiB), but a slice sent alone costs a system call
/// of its own: HTTP/2 frames of 16 KiB, each a `sendfile` after its
/// header, halved the rate that gathered writes of them reached.
pub(crate) const SENDABLE_FROM: usize = 32 * 1024;

#[derive(Debug)]
pub struct KeptMemory {
    memfd: File,
    map: Mmap,
    /// Pages per granule (1 where the file's folios are pages).
    granule: u32,
    extents: Mutex<Extents>,
    /// Bodies stored and not yet freed.
    bodies: AtomicU64,
    /// What the file is (see `arena::Arena::backing`).
    backing: String,
}

#[derive(Debug)]
struct Extents {
    /// Free extents: first page to their length in pages; none across a
    /// granule's end.
    free: BTreeMap<u32, u32>,
    /// Bodies in each granule (granules of more than one page only).
    live: Vec<u32>,
}

/// What kept-file memory holds, for `/status`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct KeptUsage {
    /// The file's length: the most its bodies may take.
    pub capacity_bytes: u64,
    /// Pages taken by bodies (whole pages each), by freed bodies whose
    /// granule still holds others, and by any a failed hole retired.
    pub used_bytes: u64,
    /// Memory the file holds: with huge pages, a whole one for every
    /// granule that holds a body; with 4 KiB pages, `used_bytes`.
    pub resident_bytes: u64,
    pub bodies: u64,
    /// `private huge tmpfs` or `memfd`.
    pub backing: String,
    /// The granule: the largest page the file may hold.
    pub largest_page_bytes: u64,
}

impl KeptMemory {
    /// A memfd of `bytes` (rounded up to granules), using memory only for
    /// the granules bodies take; its granule is the largest folio shmem
    /// may give it ([`crate::arena::granule`]).
    pub fn new(bytes: u64) -> io::Result<Arc<KeptMemory>> {
        let memfd = |_| Ok(File::from(rustix::fs::memfd_create("circus-kept", MemfdFlags::CLOEXEC)?));
        Self::with_granule(bytes, crate::arena::granule(None), "memfd".into(), memfd)
    }

    /// The same in an unnamed file on a private tmpfs of huge pages
    /// ([`crate::huge_tmpfs`]), granules of one huge page.
    pub fn in_private_huge_tmpfs(bytes: u64) -> io::Result<Arc<KeptMemory>> {
        let huge = crate::arena::pmd_size();
        Self::with_granule(bytes, huge, crate::huge_tmpfs::BACKING.into(), crate::huge_tmpfs::file)
    }

    /// `bytes` (rounded up to granules of `granule` bytes, a power of two
    /// of at least a page) in the file `open` makes for that length.
    fn with_granule(
        bytes: u64,
        granule: usize,
        backing: String,
        open: impl FnOnce(u64) -> io::Result<File>,
    ) -> io::Result<Arc<KeptMemory>> {
        let too_large = || io::Error::other("kept-file memory too large");
        let per_granule = u32::try_from(granule.max(PAGE) / PAGE).map_err(|_| too_large())?;
        let granules =
            u32::try_from(bytes.div_ceil(u64::from(per_granule) * PAGE as u64).max(1)).map_err(|_| too_large())?;
        let pages = granules.checked_mul(per_granule).ok_or_else(too_large)?;
        let len = u64::from(pages) * PAGE as u64;
        let memfd = open(len)?;
        memfd.set_len(len)?;
        // SAFETY: the file is private to this memory, and an extent's
        // bytes are written only while it is on no free list and no body
        // over it is handed out, so no slice through the map sees them change.
        #[allow(unsafe_code)]
        let map = unsafe { Mmap::map(&memfd)? };
        let (free, live) = match per_granule {
            1 => (BTreeMap::from([(0, pages)]), Vec::new()),
            n => ((0..granules).map(|g| (g * n, n)).collect(), vec![0; granules as usize]),
        };
        Ok(Arc::new(KeptMemory {
            memfd,
            map,
            granule: per_granule,
            extents: Mutex::new(Extents { free, live }),
            bodies: AtomicU64::new(0),
            backing,
        }))
    }

    /// Copies `data` into pages of its own and hands it out; `None` when no
    /// free extent is long enough or the memfd cannot take it (out of
    /// memory): the caller keeps it on the heap then.
    pub fn store(self: &Arc<Self>, data: &[u8]) -> Option<Bytes> {
        let pages = u32::try_from(data.len().div_ceil(PAGE).max(1)).ok()?;
        let first = self.take(pages)?;
        let body = Body { memory: self.clone(), first, pages, len: data.len() };
        self.bodies.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = self.memfd.write_all_at(data, body.offset()) {
            tracing::warn!(error = %e, "kept-file memory write failed; keeping the body on the heap");
            return None;
        }
        Some(Bytes::from_owner(body))
    }

    /// Where `bytes` lie in the memfd, when they are this memory and at
    /// least [`SENDABLE_FROM`] long (shorter ones are written as they are).
    pub fn locate(&self, bytes: &[u8]) -> Option<u64> {
        if bytes.len() < SENDABLE_FROM {
            return None;
        }
        self.place(bytes)
    }

    /// Where `bytes` lie in the memfd, when they are this memory.
    fn place(&self, bytes: &[u8]) -> Option<u64> {
        let base = self.map.as_ptr() as usize;
        let start = bytes.as_ptr() as usize;
        (start >= base && start + bytes.len() <= base + self.map.len()).then(|| (start - base) as u64)
    }

    pub fn memfd(&self) -> BorrowedFd<'_> {
        self.memfd.as_fd()
    }

    pub fn usage(&self) -> KeptUsage {
        let capacity_bytes = self.map.len() as u64;
        let extents = self.extents.lock().expect("kept memory lock");
        let free_pages: u64 = extents.free.values().map(|&p| u64::from(p)).sum();
        let used_bytes = capacity_bytes - free_pages * PAGE as u64;
        let held_granules = extents.live.iter().filter(|&&n| n > 0).count() as u64;
        KeptUsage {
            capacity_bytes,
            used_bytes,
            resident_bytes: match self.granule {
                1 => used_bytes,
                n => held_granules * u64::from(n) * PAGE as u64,
            },
            bodies: self.bodies.load(Ordering::Relaxed),
            backing: self.backing.clone(),
            largest_page_bytes: u64::from(self.granule) * PAGE as u64,
        }
    }

    /// The first free extent of `pages` pages or more, taken.
    fn take(&self, pages: u32) -> Option<u32> {
        let mut extents = self.extents.lock().expect("kept memory lock");
        let (&first, &len) = extents.free.iter().find(|&(_, &len)| len >= pages)?;
        extents.free.remove(&first);
        if len > pages {
            extents.free.insert(first + pages, len - pages);
        }
        if let Some(live) = extents.live.get_mut((first / self.granule) as usize) {
            *live += 1;
        }
        Some(first)
    }

    /// Frees a body's extent. With pages for granules, it is punched out
    /// of the file and made free again, joined with its free neighbours;
    /// with larger granules, once its granule holds no body, the whole
    /// granule is. What cannot be punched is retired: without the hole,
    /// packets in flight could show the next body's bytes.
    fn release(&self, first: u32, pages: u32) {
        self.bodies.fetch_sub(1, Ordering::Relaxed);
        if self.granule == 1 {
            if self.punch(first, pages) {
                self.extents.lock().expect("kept memory lock").give_back(first, pages);
            }
            return;
        }
        let g = first / self.granule;
        let (start, end) = (g * self.granule, (g + 1) * self.granule);
        {
            let mut extents = self.extents.lock().expect("kept memory lock");
            let live = &mut extents.live[g as usize];
            *live -= 1;
            if *live > 0 {
                // Its pages wait for the rest of the granule.
                return;
            }
            // On no list while it is punched: the lock is not held across it.
            let untaken: Vec<u32> = extents.free.range(start..end).map(|(&f, _)| f).collect();
            for f in untaken {
                extents.free.remove(&f);
            }
        }
        if self.punch(start, self.granule) {
            self.extents.lock().expect("kept memory lock").free.insert(start, end - start);
        }
    }

    /// Punches `pages` pages from `first` out of the file; whether it took.
    fn punch(&self, first: u32, pages: u32) -> bool {
        let punch = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
        let (offset, len) = (u64::from(first) * PAGE as u64, u64::from(pages) * PAGE as u64);
        match rustix::fs::fallocate(&self.memfd, punch, offset, len) {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(error = %e, "kept-file memory cannot free a body's pages; retiring them");
                false
            }
        }
    }
}

impl Extents {
    /// Makes an extent of a page-granule file free, joined with its free
    /// neighbours.
    fn give_back(&mut self, mut first: u32, mut pages: u32) {
        if let Some(next) = self.free.remove(&(first + pages)) {
            pages += next;
        }
        if let Some((&before, &len)) = self.free.range(..first).next_back()
            && before + len == first
        {
            self.free.remove(&before);
            first = before;
            pages += len;
        }
        self.free.insert(first, pages);
    }
}

/// One kept body; the owner behind its [`Bytes`].
#[derive(Debug)]
struct Body {
    memory: Arc<KeptMemory>,
    first: u32,
    pages: u32,
    len: usize,
}

impl Body {
    fn offset(&self) -> u64 {
        u64::from(self.first) * PAGE as u64
    }
}

impl AsRef<[u8]> for Body {
    fn as_ref(&self) -> &[u8] {
        let start = self.offset() as usize;
        &self.memory.map[start..start + self.len]
    }
}

impl Drop for Body {
    fn drop(&mut self) {
        self.memory.release(self.first, self.pages);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A memfd of `pages` pages laid out by pages, whatever shmem's setting.
    fn of_pages(pages: usize) -> Arc<KeptMemory> {
        let memfd = |_| Ok(File::from(rustix::fs::memfd_create("test", MemfdFlags::CLOEXEC)?));
        KeptMemory::with_granule((pages * PAGE) as u64, PAGE, "memfd".into(), memfd).unwrap()
    }

    fn usage(capacity_pages: usize, used_pages: usize, bodies: u64, granule: usize, held_granules: usize) -> KeptUsage {
        KeptUsage {
            capacity_bytes: (capacity_pages * PAGE) as u64,
            used_bytes: (used_pages * PAGE) as u64,
            resident_bytes: (if granule == 1 { used_pages } else { held_granules * granule } * PAGE) as u64,
            bodies,
            backing: if granule == 1 { "memfd".into() } else { crate::huge_tmpfs::BACKING.into() },
            largest_page_bytes: (granule * PAGE) as u64,
        }
    }

    #[test]
    fn bodies_take_whole_pages_first_fit_and_freed_extents_join_again() {
        let memory = of_pages(4);
        let a = memory.store(&[1; PAGE + 1]).unwrap();
        let b = memory.store(&[2; 10]).unwrap();
        let c = memory.store(&[3; PAGE]).unwrap();
        assert_eq!(memory.usage(), usage(4, 4, 3, 1, 0));
        assert_eq!((&a[..], &b[..], &c[..]), (&[1u8; PAGE + 1][..], &[2u8; 10][..], &[3u8; PAGE][..]));
        assert_eq!([&a, &b, &c].map(|x| memory.place(x)), [Some(0), Some(2 * PAGE as u64), Some(3 * PAGE as u64)]);
        assert_eq!(memory.place(&a.slice(5..9)), Some(5));
        assert_eq!(memory.place(&[0u8; 4][..]), None);
        assert_eq!(memory.locate(&a), None, "too short to be worth a sendfile of its own");
        assert!(memory.store(&[4; 1]).is_none(), "full");
        // Freed a and b next to each other make one extent of three pages.
        let shared = b.clone();
        drop((a, b));
        assert!(memory.store(&[5; 3 * PAGE]).is_none(), "a clone keeps b's page");
        drop(shared);
        assert_eq!(memory.usage(), usage(4, 1, 1, 1, 0));
        let d = memory.store(&[5; 3 * PAGE]).unwrap();
        assert_eq!(memory.place(&d), Some(0));
        assert_eq!(&d[..], &[5u8; 3 * PAGE][..]);
        drop((c, d));
        assert_eq!(memory.store(&[6; 4 * PAGE]).map(|e| memory.place(&e)), Some(Some(0)));
    }

    #[test]
    fn a_freed_body_never_shows_its_next_bytes_through_a_packet_in_flight() {
        use std::io::Read;
        // A pipe stands in for a socket: sendfile references the body's
        // pages, as packets in flight do.
        let memory = of_pages(2);
        let body = memory.store(&[7; 2 * PAGE]).unwrap();
        let (mut rx, tx) = std::io::pipe().unwrap();
        let mut off = memory.place(&body).unwrap();
        assert_eq!(rustix::fs::sendfile(&tx, memory.memfd(), Some(&mut off), 2 * PAGE).unwrap(), 2 * PAGE);
        drop(body);
        let again = memory.store(&[9; 2 * PAGE]).unwrap();
        assert_eq!(memory.place(&again), Some(0), "the same pages of the file");
        let mut got = vec![0; 2 * PAGE];
        rx.read_exact(&mut got).unwrap();
        assert!(got.iter().all(|&b| b == 7), "the packet's bytes changed");
        assert_eq!(&again[..], &[9u8; 2 * PAGE][..]);
    }

    #[test]
    fn on_huge_pages_a_freed_body_waits_for_its_granule_and_never_shows_through_a_packet_in_flight() {
        use std::io::Read;
        let memory = match KeptMemory::in_private_huge_tmpfs(4 << 20) {
            Ok(memory) => memory,
            Err(e) => {
                // SAFETY: reads the process's real user id.
                #[allow(unsafe_code)]
                let root = unsafe { libc::getuid() } == 0;
                assert!(!root, "as root, a private huge tmpfs must be possible: {e}");
                eprintln!("SKIPPED: no private huge tmpfs for this user here ({e})");
                return;
            }
        };
        let granule = crate::arena::pmd_size() / PAGE;
        let body = 256 << 10;
        let a = memory.store(&vec![1; body]).unwrap();
        let b = memory.store(&vec![2; body]).unwrap();
        assert_eq!([&a, &b].map(|x| memory.place(x)), [Some(0), Some(body as u64)]);
        // A pipe stands in for a socket: sendfile references a's pages.
        let (mut rx, tx) = std::io::pipe().unwrap();
        let mut off = memory.place(&a).unwrap();
        assert_eq!(rustix::fs::sendfile(&tx, memory.memfd(), Some(&mut off), 64 << 10).unwrap(), 64 << 10);
        drop(a);
        // a's pages wait for b: the next body takes pages never taken.
        let c = memory.store(&vec![3; body]).unwrap();
        assert_eq!(memory.place(&c), Some(2 * body as u64));
        assert_eq!(memory.usage(), usage(2 * granule, 3 * body / PAGE, 2, granule, 1));
        // A body never lies across a granule's end.
        let long = memory.store(&vec![4; (granule * PAGE) - 3 * body + PAGE]).unwrap();
        assert_eq!(memory.place(&long), Some((granule * PAGE) as u64));
        drop((b, c));
        // The granule is empty: punched whole, free whole.
        assert_eq!(memory.usage(), usage(2 * granule, long.len() / PAGE, 1, granule, 1));
        let d = memory.store(&vec![9; body]).unwrap();
        assert_eq!(memory.place(&d), Some(0), "a's pages, taken again");
        let mut got = vec![0; 64 << 10];
        rx.read_exact(&mut got).unwrap();
        assert!(got.iter().all(|&x| x == 1), "the packet's bytes changed: {:?}", &got[..8]);
        assert!(d.iter().all(|&x| x == 9) && long.iter().all(|&x| x == 4));
    }
}
