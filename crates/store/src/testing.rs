//! Test doubles for the [`BlockSource`] seam: content held in memory, and
//! a wrapper that fails chosen reads, so the driver and the servers above
//! it are tested without a disk or an origin.

use crate::{BlockSource, FileIndex, ReadError, ReadFuture, RunFuture, read_each, split_run};
use bytes::Bytes;
use circus_core::{BlockLayout, Fault};
use sha2::{Digest, Sha256};
use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
};

/// A version held in memory, its index computed from its bytes.
#[derive(Debug)]
pub struct MemSource {
    bytes: Bytes,
    index: Arc<FileIndex>,
    reads: AtomicU64,
    requests: AtomicU64,
}

impl MemSource {
    pub fn new(bytes: impl Into<Bytes>, block_size: u32) -> Self {
        let bytes = bytes.into();
        let layout = BlockLayout::new(bytes.len() as u64, block_size);
        let leaves: Vec<[u8; 32]> = (0..layout.blocks())
            .map(|b| {
                let at = layout.offset(b) as usize;
                circus_proto::HashTree::leaf_hash(&bytes[at..at + layout.block_len(b) as usize])
            })
            .collect();
        let index = FileIndex {
            size: bytes.len() as u64,
            version: None,
            block_size,
            sha256: Sha256::digest(&bytes).into(),
            root: circus_proto::compute_root(&leaves),
            leaves,
        };
        MemSource { bytes, index: Arc::new(index), reads: AtomicU64::new(0), requests: AtomicU64::new(0) }
    }

    /// Blocks read so far.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Requests so far: a run of blocks read together counts once.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    fn slice(&self, offset: u64, len: u64) -> Result<Bytes, ReadError> {
        let (start, end) = (offset as usize, (offset + len) as usize);
        match self.bytes.get(start..end) {
            Some(_) => Ok(self.bytes.slice(start..end)),
            None => Err(ReadError::storage(format!("read of {len} bytes at {offset} past the end"))),
        }
    }
}

impl BlockSource for MemSource {
    fn read_block(&self, offset: u64, len: u32) -> ReadFuture<'_, Bytes> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.requests.fetch_add(1, Ordering::Relaxed);
        let read = self.slice(offset, u64::from(len));
        Box::pin(async move { read })
    }

    fn reads_runs(&self) -> bool {
        true
    }

    /// One request for the run, as a local file reads it.
    fn read_run(&self, offset: u64, lens: Vec<u32>) -> RunFuture<'_> {
        self.reads.fetch_add(lens.len() as u64, Ordering::Relaxed);
        self.requests.fetch_add(1, Ordering::Relaxed);
        let read = self.slice(offset, lens.iter().map(|&l| u64::from(l)).sum());
        Box::pin(async move { split_run(read, &lens) })
    }

    fn shares_buffers(&self) -> bool {
        true
    }

    fn index(&self) -> ReadFuture<'_, Arc<FileIndex>> {
        let index = self.index.clone();
        Box::pin(async move { Ok(index) })
    }

    fn index_now(&self) -> Option<Arc<FileIndex>> {
        Some(self.index.clone())
    }
}

/// Another source whose reads at chosen offsets fail (or return other
/// bytes, as a file rewritten under an unchanged version would).
#[derive(Debug)]
pub struct FaultySource {
    inner: Arc<dyn BlockSource>,
    faults: Mutex<HashMap<u64, Injected>>,
    distrusted: std::sync::atomic::AtomicBool,
}

/// What a read at a chosen offset does instead.
#[derive(Debug, Clone)]
pub enum Injected {
    /// Fails with this fault.
    Fail(Fault),
    /// Returns these bytes.
    Corrupt(Bytes),
}

impl FaultySource {
    pub fn new(inner: Arc<dyn BlockSource>) -> Self {
        FaultySource { inner, faults: Mutex::default(), distrusted: Default::default() }
    }

    /// Reads at `offset` do `what` from now on.
    pub fn inject(&self, offset: u64, what: Injected) {
        self.faults.lock().expect("faults lock").insert(offset, what);
    }

    /// Whether a reader said this version is not to be trusted.
    pub fn was_distrusted(&self) -> bool {
        self.distrusted.load(Ordering::Relaxed)
    }
}

impl BlockSource for FaultySource {
    fn read_block(&self, offset: u64, len: u32) -> ReadFuture<'_, Bytes> {
        let injected = self.faults.lock().expect("faults lock").get(&offset).cloned();
        match injected {
            None => self.inner.read_block(offset, len),
            Some(Injected::Corrupt(bytes)) => Box::pin(async move { Ok(bytes) }),
            Some(Injected::Fail(fault)) => {
                let why = format!("injected {fault} fault at {offset}");
                let e = match fault {
                    Fault::Changed => ReadError::changed(why),
                    Fault::Origin => ReadError::origin(why),
                    Fault::Storage => ReadError::storage(why),
                    _ => ReadError::internal(why),
                };
                Box::pin(async move { Err(e) })
            }
        }
    }

    fn reads_runs(&self) -> bool {
        self.inner.reads_runs()
    }

    /// A run with an injected block is read block by block, so each
    /// injection hits its own block; other runs go to the inner source whole.
    fn read_run(&self, offset: u64, lens: Vec<u32>) -> RunFuture<'_> {
        let end = offset + lens.iter().map(|&l| u64::from(l)).sum::<u64>();
        let injected = self.faults.lock().expect("faults lock").keys().any(|&at| (offset..end).contains(&at));
        if !injected {
            return self.inner.read_run(offset, lens);
        }
        Box::pin(read_each(self, offset, lens))
    }

    fn shares_buffers(&self) -> bool {
        self.inner.shares_buffers()
    }

    fn index(&self) -> ReadFuture<'_, Arc<FileIndex>> {
        self.inner.index()
    }

    fn index_now(&self) -> Option<Arc<FileIndex>> {
        self.inner.index_now()
    }

    fn distrust(&self) {
        self.distrusted.store(true, Ordering::Relaxed);
    }
}
