//! [`FileEntry`]: one version of some content as the scheduler serves it,
//! whatever its blocks come from (a [`BlockSource`]).

use crate::{BlockSource, FileIndex, ReadError};
use bytes::{Bytes, BytesMut};
use circus_core::{BlockLayout, FileId};
use circus_proto::{Manifest, encode_preamble};
use std::{
    sync::{Arc, OnceLock},
    time::{Duration, SystemTime},
};

/// One version of one file (a local file or an origin object).
#[derive(Debug)]
pub struct FileEntry {
    pub id: FileId,
    /// The name it is served under: a path relative to the root, or an
    /// origin target.
    pub rel: String,
    pub source: Arc<dyn BlockSource>,
    pub size: u64,
    pub modified: SystemTime,
    pub etag: String,
    pub content_type: String,
    pub layout: BlockLayout,
    /// The encoded preamble and manifest, shared by every native response
    /// of this version (32 bytes per block: 128 KiB for a 256 MiB file, which
    /// a slow client would otherwise pin once per connection).
    preface: OnceLock<Bytes>,
}

/// What describes a version besides its blocks.
#[derive(Debug, Clone)]
pub struct Description {
    pub size: u64,
    pub modified: SystemTime,
    pub etag: String,
    pub content_type: String,
}

impl FileEntry {
    /// A version of `rel` read through `source` in blocks of `block_size`.
    pub fn new(id: FileId, rel: String, source: Arc<dyn BlockSource>, d: Description, block_size: u32) -> Self {
        FileEntry {
            id,
            rel,
            source,
            size: d.size,
            modified: d.modified,
            etag: d.etag,
            content_type: d.content_type,
            layout: BlockLayout::new(d.size, block_size),
            preface: OnceLock::new(),
        }
    }

    /// The native stream's preamble and manifest, encoded once.
    pub fn preface(&self, index: &FileIndex) -> Result<Bytes, ReadError> {
        if let Some(p) = self.preface.get() {
            return Ok(p.clone());
        }
        let manifest = Manifest::new(self.layout, index.leaves.clone(), index.sha256, self.etag.clone());
        let mut buf = BytesMut::new();
        encode_preamble(&mut buf);
        manifest.encode(&mut buf).map_err(|e| ReadError::internal(e.to_string()))?;
        Ok(self.preface.get_or_init(|| buf.freeze()).clone())
    }

    /// The hash index if it is known already (never waits).
    pub fn index_now(&self) -> Option<Arc<FileIndex>> {
        self.source.index_now()
    }

    /// Bytes hashed so far, while the index is being built.
    pub fn build_progress(&self) -> Option<u64> {
        self.source.build_progress()
    }

    /// The hash index, loaded or built on first use (concurrent callers
    /// wait for the one build).
    pub async fn index(&self) -> Result<Arc<FileIndex>, ReadError> {
        self.source.index().await
    }

    /// The hash index if it is ready within `wait`. The build goes on in
    /// the background either way (one per version), so a request that
    /// cannot wait for a large file still starts it.
    pub async fn index_within(self: &Arc<Self>, wait: Duration) -> Result<Option<Arc<FileIndex>>, ReadError> {
        if let Some(index) = self.index_now() {
            return Ok(Some(index));
        }
        // A task of its own: a waiter that gives up must not cancel the
        // build. It holds the entry, so a table that lets go of idle
        // entries keeps this one (and shows its progress) until it is done.
        let entry = self.clone();
        let build = tokio::spawn(async move { entry.index().await });
        match tokio::time::timeout(wait, build).await {
            Ok(joined) => joined.map_err(|e| ReadError::internal(format!("index task: {e}")))?.map(Some),
            Err(_) => Ok(None),
        }
    }
}
