//! Memory for the bodies of whole kept files ([`crate::small`]) that the
//! kernel can send without copying.
//!
//! The hit lane used to write a kept body from the heap: the kernel copied
//! it into the socket buffer, and at 1 MiB that copy was 59% of the
//! server's CPU (perf, `wrk -t2 -c16` on loopback), where nginx's
//! `sendfile` from the page cache copies nothing. A body of
//! [`SENDABLE_FROM`] bytes or more is therefore copied once, when it is
//! kept, into pages of its own in one memfd, mapped read-only, and handed
//! out as an ordinary [`Bytes`]; the connection layer
//! ([`crate::sendfile`]) finds its slices here and sends them with
//! `sendfile(2)`, as it does the block cache's.
//!
//! Each body takes whole pages, first fit among the free extents of the
//! file. Freeing a body punches its pages out of the memfd before its
//! extent can be taken again, as the block arena frees a slot: packets
//! still in flight keep the old pages, and the next body is written into
//! fresh ones, never showing through an old packet. A hole detaches whole
//! pages only where shmem is made of 4 KiB pages (through part of a huge
//! one it zeroes in place), so the server makes this memory only there
//! ([`crate::arena::granule`]). The file is sparse: only pages that hold a
//! body use memory, and its length (twice the store's budget) leaves room
//! for the gaps between bodies.

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
    sync::{Arc, Mutex},
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
    /// Free extents: first page to their length in pages.
    free: Mutex<BTreeMap<u32, u32>>,
}

impl KeptMemory {
    /// A memfd of `bytes` (rounded up to pages), using memory only for the
    /// pages bodies take.
    pub fn new(bytes: u64) -> io::Result<Arc<KeptMemory>> {
        let pages = u32::try_from(bytes.div_ceil(PAGE as u64).max(1))
            .map_err(|_| io::Error::other("kept-file memory too large"))?;
        let memfd = File::from(rustix::fs::memfd_create("circus-kept", MemfdFlags::CLOEXEC)?);
        memfd.set_len(u64::from(pages) * PAGE as u64)?;
        // SAFETY: the memfd is private to this memory, and an extent's
        // bytes are written only while it is on no free list and no body
        // over it is handed out, so no slice through the map sees them change.
        #[allow(unsafe_code)]
        let map = unsafe { Mmap::map(&memfd)? };
        Ok(Arc::new(KeptMemory { memfd, map, free: Mutex::new(BTreeMap::from([(0, pages)])) }))
    }

    /// Copies `data` into pages of its own and hands it out; `None` when no
    /// free extent is long enough or the memfd cannot take it (out of
    /// memory): the caller keeps it on the heap then.
    pub fn store(self: &Arc<Self>, data: &[u8]) -> Option<Bytes> {
        let pages = u32::try_from(data.len().div_ceil(PAGE).max(1)).ok()?;
        let first = self.take(pages)?;
        let body = Body { memory: self.clone(), first, pages, len: data.len() };
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

    /// The first free extent of `pages` pages or more, taken.
    fn take(&self, pages: u32) -> Option<u32> {
        let mut free = self.free.lock().expect("kept memory lock");
        let (&first, &len) = free.iter().find(|&(_, &len)| len >= pages)?;
        free.remove(&first);
        if len > pages {
            free.insert(first + pages, len - pages);
        }
        Some(first)
    }

    /// Punches the extent out of the file and makes it free again, joined
    /// with its free neighbours. An extent that cannot be punched is
    /// retired: without the hole, packets in flight could show its next
    /// body's bytes.
    fn release(&self, mut first: u32, mut pages: u32) {
        let punch = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
        let (offset, len) = (u64::from(first) * PAGE as u64, u64::from(pages) * PAGE as u64);
        // On no list while it is punched: the lock is not held across it.
        if let Err(e) = rustix::fs::fallocate(&self.memfd, punch, offset, len) {
            tracing::error!(error = %e, "kept-file memory cannot free a body's pages; retiring them");
            return;
        }
        let mut free = self.free.lock().expect("kept memory lock");
        if let Some(next) = free.remove(&(first + pages)) {
            pages += next;
        }
        if let Some((&before, &len)) = free.range(..first).next_back()
            && before + len == first
        {
            free.remove(&before);
            first = before;
            pages += len;
        }
        free.insert(first, pages);
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

    #[test]
    fn bodies_take_whole_pages_first_fit_and_freed_extents_join_again() {
        let memory = KeptMemory::new(4 * PAGE as u64).unwrap();
        let a = memory.store(&[1; PAGE + 1]).unwrap();
        let b = memory.store(&[2; 10]).unwrap();
        let c = memory.store(&[3; PAGE]).unwrap();
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
        let memory = KeptMemory::new(2 * PAGE as u64).unwrap();
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
}
