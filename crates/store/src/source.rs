//! The one seam the scheduler's driver reads blocks through: a version of
//! some content (a local file, an origin object, a test double) that can
//! produce its blocks and its hash index.

use crate::{FileIndex, ReadError};
use bytes::Bytes;
use std::{fmt, future::Future, pin::Pin, sync::Arc};

/// What a [`BlockSource`] read returns: a future that borrows the source.
pub type ReadFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, ReadError>> + Send + 'a>>;

/// What a [`BlockSource::read_run`] returns: one result per block.
pub type RunFuture<'a> = Pin<Box<dyn Future<Output = Vec<Result<Bytes, ReadError>>> + Send + 'a>>;

/// One version of some content, as the driver reads it.
pub trait BlockSource: fmt::Debug + Send + Sync {
    /// `len` bytes at `offset`: one block of the version. A version that
    /// is no longer what it was fails with a changed [`ReadError`].
    fn read_block(&self, offset: u64, len: u32) -> ReadFuture<'_, Bytes>;

    /// Whether [`read_run`](Self::read_run) reads a run as one request, so
    /// that consecutive blocks are worth gathering (a local file: one
    /// `pread`, one disk positioning). A source that fetches blocks
    /// concurrently on its own (the origin tier) says no: its blocks are
    /// read one by one, each reported as soon as it arrives.
    fn reads_runs(&self) -> bool {
        false
    }

    /// Consecutive blocks, the first at `offset`, of lengths `lens`: one
    /// result per block. A source that [`reads_runs`](Self::reads_runs)
    /// reads them as one request, and the blocks may then share one
    /// buffer. By default, one [`read_block`](Self::read_block) after
    /// another.
    fn read_run(&self, offset: u64, lens: Vec<u32>) -> RunFuture<'_> {
        Box::pin(read_each(self, offset, lens))
    }

    /// Whether the bytes read may be slices of larger buffers held
    /// elsewhere: a cache copies them, so that its budget counts what it
    /// holds.
    fn shares_buffers(&self) -> bool;

    /// The version's hash index: known already, loaded or built (a build
    /// may take long; concurrent callers share it).
    fn index(&self) -> ReadFuture<'_, Arc<FileIndex>>;

    /// The hash index if it is known now (never waits).
    fn index_now(&self) -> Option<Arc<FileIndex>>;

    /// Bytes hashed so far while the index is being built.
    fn build_progress(&self) -> Option<u64> {
        None
    }

    /// A block failed its hash though the version looked the same: this
    /// version is not to be trusted again (a new one is made for the next
    /// request).
    fn distrust(&self) {}
}

/// Splits the bytes of one read of a run into its blocks, or gives each
/// block the read's error.
pub fn split_run(read: Result<Bytes, ReadError>, lens: &[u32]) -> Vec<Result<Bytes, ReadError>> {
    match read {
        Ok(bytes) => {
            let mut at = 0;
            lens.iter()
                .map(|&len| {
                    let block = bytes.slice(at..at + len as usize);
                    at += len as usize;
                    Ok(block)
                })
                .collect()
        }
        Err(e) => lens.iter().map(|_| Err(e.clone())).collect(),
    }
}

/// Reads a run one block after another (what [`BlockSource::read_run`]
/// does unless a source reads runs whole).
pub async fn read_each<S: BlockSource + ?Sized>(
    source: &S,
    offset: u64,
    lens: Vec<u32>,
) -> Vec<Result<Bytes, ReadError>> {
    let mut out = Vec::with_capacity(lens.len());
    let mut at = offset;
    for len in lens {
        out.push(source.read_block(at, len).await);
        at += u64::from(len);
    }
    out
}
