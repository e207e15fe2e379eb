//! A [`BlockSource`] for one version of a file under the served root: reads
//! past the page cache with [`BlockReader`] (each read checked to still be
//! the version), and the hash index loaded from the index directory or
//! built once on a blocking thread, logging its progress.

use crate::{
    BlockReader, BlockSource, FileIndex, FileVersion, ReadError, ReadFuture, RunFuture, StoreError, read_each,
    split_run,
};
use bytes::Bytes;
use std::{
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex, OnceLock,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};
use tokio::sync::OnceCell;

/// How often a long index build logs its progress.
const BUILD_LOG_EVERY: Duration = Duration::from_secs(10);

/// One version of a local file.
#[derive(Debug)]
pub struct LocalFile {
    /// The served root and the file's path relative to it (`/` separators).
    root: PathBuf,
    rel: String,
    /// The file itself, symlinks resolved.
    path: PathBuf,
    index_dir: PathBuf,
    version: FileVersion,
    block_size: u32,
    reader: Arc<OnceLock<Arc<BlockReader>>>,
    index: OnceCell<Arc<FileIndex>>,
    /// While the index is being built: bytes hashed so far.
    build: Mutex<Option<Arc<AtomicU64>>>,
    /// A block failed its hash while the version looked unchanged.
    stale: AtomicBool,
}

/// Where a local file is and how it is indexed.
#[derive(Debug, Clone)]
pub struct LocalPlace<'a> {
    pub root: &'a Path,
    pub rel: &'a str,
    pub path: &'a Path,
    pub index_dir: &'a Path,
}

impl LocalFile {
    pub fn new(place: LocalPlace<'_>, version: FileVersion, block_size: u32) -> Self {
        LocalFile {
            root: place.root.to_owned(),
            rel: place.rel.to_owned(),
            path: place.path.to_owned(),
            index_dir: place.index_dir.to_owned(),
            version,
            block_size,
            reader: Arc::default(),
            index: OnceCell::new(),
            build: Mutex::new(None),
            stale: AtomicBool::new(false),
        }
    }

    pub fn version(&self) -> FileVersion {
        self.version
    }

    /// The file itself, symlinks resolved.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether a block failed its hash under this version (see
    /// [`BlockSource::distrust`]).
    pub fn is_distrusted(&self) -> bool {
        self.stale.load(Ordering::Relaxed)
    }

    async fn build_index(&self) -> Result<Arc<FileIndex>, ReadError> {
        let done = Arc::new(AtomicU64::new(0));
        *self.build.lock().expect("build lock") = Some(done.clone());
        let (root, dir, rel, block, version) =
            (self.root.clone(), self.index_dir.clone(), self.rel.clone(), self.block_size, self.version);
        let built = tokio::task::spawn_blocking(move || {
            if let Some(index) = FileIndex::load_stored(&dir, &rel, version, block) {
                return Ok(index);
            }
            let started = Instant::now();
            let mut logged = started;
            tracing::info!(file = %rel, bytes = version.size, "building the hash index");
            let index = FileIndex::load_or_build(&dir, &root, &rel, version, block, &mut |hashed| {
                done.store(hashed, Ordering::Relaxed);
                if logged.elapsed() >= BUILD_LOG_EVERY {
                    logged = Instant::now();
                    let pct = hashed as f64 * 100.0 / version.size.max(1) as f64;
                    tracing::info!(file = %rel, hashed, "hash index {pct:.0}% built");
                }
            })?;
            let secs = started.elapsed().as_secs_f64();
            let rate = version.size as f64 / secs.max(1e-9) / 1e6;
            tracing::info!(file = %rel, "hash index built in {secs:.1} s ({rate:.0} MB/s)");
            Ok::<_, StoreError>(index)
        })
        .await;
        *self.build.lock().expect("build lock") = None;
        match built {
            Ok(built) => Ok(Arc::new(built?)),
            Err(e) => Err(ReadError::internal(format!("index task: {e}"))),
        }
    }
}

impl BlockSource for LocalFile {
    fn read_block(&self, offset: u64, len: u32) -> ReadFuture<'_, Bytes> {
        let (slot, path, version) = (self.reader.clone(), self.path.clone(), self.version);
        Box::pin(async move {
            let read = tokio::task::spawn_blocking(move || {
                let reader = match slot.get() {
                    Some(r) => r.clone(),
                    None => {
                        let r = Arc::new(BlockReader::open(&path, version)?);
                        slot.get_or_init(|| r).clone()
                    }
                };
                reader.read_block(offset, len)
            });
            match read.await {
                Ok(read) => Ok(read?),
                Err(e) => Err(ReadError::internal(format!("read task: {e}"))),
            }
        })
    }

    fn reads_runs(&self) -> bool {
        true
    }

    /// One `pread` for the whole run: one positioning on a disk. A run that
    /// fails for another reason than a changed file is read again block
    /// by block, so that a bad sector fails its own block only.
    fn read_run(&self, offset: u64, lens: Vec<u32>) -> RunFuture<'_> {
        Box::pin(async move {
            let total: u64 = lens.iter().map(|&l| u64::from(l)).sum();
            let read = match u32::try_from(total) {
                Ok(total) => self.read_block(offset, total).await,
                Err(_) => Err(ReadError::internal(format!("a run of {total} bytes is too long for one read"))),
            };
            match read {
                Err(e) if !e.is_changed() && lens.len() > 1 => read_each(self, offset, lens).await,
                read => split_run(read, &lens),
            }
        })
    }

    fn shares_buffers(&self) -> bool {
        false
    }

    fn index(&self) -> ReadFuture<'_, Arc<FileIndex>> {
        Box::pin(async move { self.index.get_or_try_init(|| self.build_index()).await.cloned() })
    }

    fn index_now(&self) -> Option<Arc<FileIndex>> {
        self.index.get().cloned()
    }

    fn build_progress(&self) -> Option<u64> {
        self.build.lock().expect("build lock").as_ref().map(|done| done.load(Ordering::Relaxed))
    }

    fn distrust(&self) {
        self.stale.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn source(dir: &Path, data: &[u8]) -> LocalFile {
        let path = dir.join("f");
        std::fs::File::create(&path).unwrap().write_all(data).unwrap();
        let version = FileVersion::of(&std::fs::metadata(&path).unwrap());
        let place = LocalPlace { root: dir, rel: "f", path: &path, index_dir: dir };
        LocalFile::new(place, version, 65536)
    }

    #[tokio::test]
    async fn a_run_is_read_whole_and_split_into_its_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..(3 * 65536 + 100)).map(|i| (i % 251) as u8).collect();
        let file = source(dir.path(), &data);
        let blocks = file.read_run(65536, vec![65536, 65536, 100]).await;
        let got: Vec<&[u8]> = blocks.iter().map(|b| &b.as_ref().unwrap()[..]).collect();
        assert_eq!(got, [&data[65536..131072], &data[131072..196608], &data[196608..]]);
    }

    #[tokio::test]
    async fn a_run_of_a_shrunk_file_fails_every_block_as_changed() {
        let dir = tempfile::tempdir().unwrap();
        let data = vec![7u8; 4 * 65536];
        let file = source(dir.path(), &data);
        std::fs::OpenOptions::new().write(true).open(dir.path().join("f")).unwrap().set_len(65536 + 10).unwrap();
        let blocks = file.read_run(0, vec![65536; 4]).await;
        assert_eq!(blocks.len(), 4);
        assert!(blocks.iter().all(|b| b.as_ref().is_err_and(ReadError::is_changed)), "{blocks:?}");
    }
}
