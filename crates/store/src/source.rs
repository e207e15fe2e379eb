//! The one seam the scheduler's driver reads blocks through: a version of
//! some content (a local file, an origin object, a test double) that can
//! produce its blocks and its hash index.

use crate::{FileIndex, ReadError};
use bytes::Bytes;
use std::{fmt, future::Future, pin::Pin, sync::Arc};

/// What a [`BlockSource`] read returns: a future that borrows the source.
pub type ReadFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, ReadError>> + Send + 'a>>;

/// One version of some content, as the driver reads it.
pub trait BlockSource: fmt::Debug + Send + Sync {
    /// `len` bytes at `offset`: one block of the version. A version that
    /// is no longer what it was fails with a changed [`ReadError`].
    fn read_block(&self, offset: u64, len: u32) -> ReadFuture<'_, Bytes>;

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
