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

use bytes::Bytes;
use memmap2::Mmap;
use rustix::fs::{FallocateFlags, MemfdFlags, Mode, OFlags};
use std::{
    fs::File,
    io,
    os::{fd::AsFd, unix::fs::FileExt},
    path::Path,
    sync::{Arc, Mutex},
};

const PAGE: usize = 4096;

#[derive(Debug)]
pub struct Arena {
    memfd: File,
    map: Mmap,
    slot_len: usize,
    free: Mutex<Vec<u32>>,
}

impl Arena {
    /// An arena of `slots` slots of `slot_len` bytes (rounded up to pages).
    /// Memory is only used by slots that hold a block. The backing file is a
    /// memfd, or with `dir` an unlinked file there: on a tmpfs mounted with
    /// `huge=always` its pages are large folios, which `sendfile` hands to
    /// the socket a folio at a time instead of 4 KiB at a time.
    pub fn new(slot_len: usize, slots: usize, dir: Option<&Path>) -> io::Result<Arc<Arena>> {
        let slot_len = slot_len.div_ceil(PAGE) * PAGE;
        let slots = u32::try_from(slots).map_err(|_| io::Error::other("too many cache slots"))?;
        let memfd = File::from(match dir {
            None => rustix::fs::memfd_create("circus-cache", MemfdFlags::CLOEXEC)?,
            Some(dir) => {
                rustix::fs::open(dir, OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC, Mode::RUSR | Mode::WUSR)
                    .map_err(|e| io::Error::new(e.kind(), format!("unlinked cache file in {}: {e}", dir.display())))?
            }
        });
        memfd.set_len(slot_len as u64 * u64::from(slots))?;
        // SAFETY: the memfd is private to this arena, and a slot's bytes are
        // written only while the slot is on the free list, so no slice
        // handed out through the map ever sees them change.
        #[allow(unsafe_code)]
        let map = unsafe { Mmap::map(&memfd)? };
        Ok(Arc::new(Arena { memfd, map, slot_len, free: Mutex::new((0..slots).rev().collect()) }))
    }

    /// Takes a free slot, to be filled later; `None` when every slot is
    /// taken (the caller keeps blocks in ordinary memory then). Taking slots
    /// in the order reads are issued puts a file's consecutive blocks in
    /// consecutive slots, whatever order the reads finish in.
    pub fn slot(self: &Arc<Self>) -> Option<EmptySlot> {
        let idx = self.free.lock().expect("arena lock").pop()?;
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

    pub fn memfd(&self) -> impl AsFd + '_ {
        &self.memfd
    }

    fn release(&self, idx: u32) {
        let offset = u64::from(idx) * self.slot_len as u64;
        let punch = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
        if let Err(e) = rustix::fs::fallocate(&self.memfd, punch, offset, self.slot_len as u64) {
            // Without the hole the slot could show new bytes through packets
            // still in flight: retire it rather than reuse it.
            tracing::error!(error = %e, "cache arena cannot free a slot; retiring it");
            return;
        }
        self.free.lock().expect("arena lock").push(idx);
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
        u64::from(self.idx) * self.arena.slot_len as u64
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
