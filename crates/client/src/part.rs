//! The files of a download in progress: `PATH.circus-part`, written in place
//! by a dedicated blocking thread, and `PATH.circus-state`, rewritten by the
//! same thread right after it synced the part file.
//!
//! One thread owning the file and a FIFO channel give the ordering the state
//! file needs for free: every write queued before a checkpoint is on disk
//! (written, then `fdatasync`ed) before the checkpoint's JSON is saved, so a
//! crash never leaves a state file that claims a block the disk lacks.

use crate::{GetError, state::save_atomic};
use bytes::Bytes;
use std::{
    ffi::OsString,
    fs::File,
    os::unix::fs::FileExt,
    path::{Path, PathBuf},
};
use tokio::sync::{mpsc, oneshot};

/// Writes queued ahead of the disk. Bounded, so a disk slower than the
/// network slows the download rather than filling memory: 64 blocks of
/// 64 KiB is 4 MiB.
const QUEUE: usize = 64;

/// Where a download keeps its data.
#[derive(Debug, Clone)]
pub(crate) struct Paths {
    pub output: PathBuf,
    pub part: PathBuf,
    pub state: PathBuf,
}

impl Paths {
    pub fn new(output: &Path) -> Self {
        let with = |suffix: &str| {
            let mut s: OsString = output.as_os_str().to_owned();
            s.push(suffix);
            PathBuf::from(s)
        };
        Self { output: output.to_owned(), part: with(".circus-part"), state: with(".circus-state") }
    }
}

#[derive(Debug)]
enum Cmd {
    Write {
        offset: u64,
        data: Bytes,
    },
    /// Save this state, then empty the part file and size it to `len`: a
    /// start-over. The state goes first so it never describes old bytes.
    Reset {
        len: u64,
        state: Vec<u8>,
    },
    /// fdatasync the part file, then save this state.
    Checkpoint(Vec<u8>),
}

/// The writer thread's handle.
#[derive(Debug)]
pub(crate) struct Writer {
    tx: Option<mpsc::Sender<Cmd>>,
    part: PathBuf,
    /// The thread's result, sent as it exits: the part file, still locked.
    done: Option<oneshot::Receiver<Result<File, GetError>>>,
    /// The part file once the thread has stopped: kept open, so the lock
    /// holds through the check and the rename until the writer is dropped.
    closed: Option<File>,
}

impl Writer {
    /// Opens (or creates) the part file; returns the writer and the file's
    /// current length.
    pub async fn open(paths: &Paths) -> Result<(Self, u64), GetError> {
        let part = paths.part.clone();
        let opened = tokio::task::spawn_blocking(move || {
            let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&part)?;
            // Two downloads into one part file would each record the
            // other's blocks as missing, or worse, as theirs.
            let locked = match file.try_lock() {
                Ok(()) => true,
                Err(std::fs::TryLockError::WouldBlock) => false,
                Err(std::fs::TryLockError::Error(e)) => return Err(e),
            };
            let len = file.metadata()?.len();
            Ok::<_, std::io::Error>((file, len, locked))
        })
        .await
        .map_err(|e| GetError::local("open", &paths.part, std::io::Error::other(e)))?;
        let (file, len, locked) = opened.map_err(|e| GetError::local("create", &paths.part, e))?;
        if !locked {
            // Another download (in this process or another) writes it: a
            // local conflict that is over once that download ends.
            let busy = std::io::Error::new(
                std::io::ErrorKind::ResourceBusy,
                format!("another download of {} holds it", paths.output.display()),
            );
            return Err(GetError::local("lock", &paths.part, busy));
        }
        let (tx, rx) = mpsc::channel(QUEUE);
        let paths = paths.clone();
        let (done_tx, done) = oneshot::channel();
        let (part, paths_part) = (paths.part.clone(), paths.part.clone());
        // A thread of its own rather than one from tokio's blocking pool:
        // it lives as long as the download, and a process running hundreds
        // of downloads must not exhaust the pool that hashing and renaming
        // also need.
        std::thread::Builder::new()
            .name("circus-writer".into())
            .spawn(move || {
                let _ = done_tx.send(run(file, &paths, rx));
            })
            .map_err(|e| GetError::local("start a writer thread for", part, e))?;
        Ok((Self { tx: Some(tx), part: paths_part, done: Some(done), closed: None }, len))
    }

    pub async fn write(&mut self, offset: u64, data: Bytes) -> Result<(), GetError> {
        self.send(Cmd::Write { offset, data }).await
    }

    pub async fn reset(&mut self, len: u64, state: Vec<u8>) -> Result<(), GetError> {
        self.send(Cmd::Reset { len, state }).await
    }

    pub async fn checkpoint(&mut self, state: Vec<u8>) -> Result<(), GetError> {
        self.send(Cmd::Checkpoint(state)).await
    }

    /// Waits for every queued command, then `fsync`s the part file. The
    /// file stays locked until the writer is dropped.
    pub async fn close(&mut self) -> Result<(), GetError> {
        self.tx = None;
        self.join().await
    }

    async fn send(&mut self, cmd: Cmd) -> Result<(), GetError> {
        let sent = match &self.tx {
            Some(tx) => tx.send(cmd).await.is_ok(),
            None => false,
        };
        if sent {
            return Ok(());
        }
        // The thread only stops early on an error: fetch it.
        self.tx = None;
        self.join().await?;
        Err(GetError::local("write", &self.part, std::io::Error::other("the writer stopped")))
    }

    async fn join(&mut self) -> Result<(), GetError> {
        let Some(done) = self.done.take() else { return Ok(()) };
        let file = done.await.unwrap_or_else(|_| {
            Err(GetError::local("write", &self.part, std::io::Error::other("the writer thread panicked")))
        })?;
        self.closed = Some(file);
        Ok(())
    }
}

fn run(file: File, paths: &Paths, mut rx: mpsc::Receiver<Cmd>) -> Result<File, GetError> {
    let part = |action, e| GetError::local(action, &paths.part, e);
    while let Some(cmd) = rx.blocking_recv() {
        match cmd {
            Cmd::Write { offset, data } => file.write_all_at(&data, offset).map_err(|e| part("write", e))?,
            Cmd::Reset { len, state } => {
                save_atomic(&paths.state, &state).map_err(|e| GetError::local("save", &paths.state, e))?;
                file.set_len(0).map_err(|e| part("truncate", e))?;
                // Preallocating (sparsely) the final size lets blocks land
                // anywhere; a full disk may still show up on a later write.
                file.set_len(len).map_err(|e| part("resize", e))?;
            }
            Cmd::Checkpoint(state) => {
                file.sync_data().map_err(|e| part("sync", e))?;
                save_atomic(&paths.state, &state).map_err(|e| GetError::local("save", &paths.state, e))?;
            }
        }
    }
    file.sync_all().map_err(|e| part("sync", e))?;
    Ok(file)
}

/// Moves the finished part file to the output path (atomically, replacing
/// any file there), makes the rename durable and drops the state file.
pub(crate) async fn install(paths: &Paths) -> Result<(), GetError> {
    let p = paths.clone();
    tokio::task::spawn_blocking(move || {
        std::fs::rename(&p.part, &p.output).map_err(|e| GetError::local("rename the part file to", &p.output, e))?;
        let dir = match p.output.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        // Without this a crash could lose the rename and leave the part
        // file, whose state file is about to go.
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
        match std::fs::remove_file(&p.state) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(GetError::local("remove the finished download's state", &p.state, e))
            }
            _ => Ok(()),
        }
    })
    .await
    .map_err(|e| GetError::local("rename", &paths.output, std::io::Error::other(e)))?
}

/// Removes the part and state files: their content is known to be wrong.
pub(crate) async fn discard(paths: &Paths) {
    let p = paths.clone();
    let _ = tokio::task::spawn_blocking(move || {
        let _ = std::fs::remove_file(&p.part);
        let _ = std::fs::remove_file(&p.state);
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn writes_in_place_and_checkpoints_after_sync() {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths::new(&dir.path().join("out.bin"));
        assert!(paths.part.ends_with("out.bin.circus-part") && paths.state.ends_with("out.bin.circus-state"));
        let (mut w, len) = Writer::open(&paths).await.unwrap();
        assert_eq!(len, 0);
        w.reset(8, b"fresh".to_vec()).await.unwrap();
        w.write(4, Bytes::from_static(b"wxyz")).await.unwrap();
        w.write(0, Bytes::from_static(b"abcd")).await.unwrap();
        w.checkpoint(b"two blocks".to_vec()).await.unwrap();
        w.close().await.unwrap();
        assert_eq!(std::fs::read(&paths.part).unwrap(), b"abcdwxyz");
        assert_eq!(std::fs::read(&paths.state).unwrap(), b"two blocks");
        install(&paths).await.unwrap();
        assert_eq!(std::fs::read(&paths.output).unwrap(), b"abcdwxyz");
        assert!(!paths.part.exists() && !paths.state.exists());
    }

    #[tokio::test]
    async fn reset_discards_old_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths::new(&dir.path().join("out"));
        std::fs::write(&paths.part, b"old old old").unwrap();
        let (mut w, len) = Writer::open(&paths).await.unwrap();
        assert_eq!(len, 11);
        w.reset(4, b"s".to_vec()).await.unwrap();
        w.close().await.unwrap();
        assert_eq!(std::fs::read(&paths.part).unwrap(), [0; 4]);
    }

    #[tokio::test]
    async fn one_download_per_part_file() {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths::new(&dir.path().join("out"));
        let (mut first, _) = Writer::open(&paths).await.unwrap();
        let err = Writer::open(&paths).await.unwrap_err();
        assert!(err.to_string().contains("another download"), "{err}");
        // Closed, the file stays locked through the check and the rename...
        first.close().await.unwrap();
        assert!(Writer::open(&paths).await.is_err());
        // ...until the download drops its writer.
        drop(first);
        Writer::open(&paths).await.unwrap();
    }

    #[tokio::test]
    async fn an_unwritable_directory_is_a_local_error() {
        let paths = Paths::new(Path::new("/nonexistent-dir/for/circus/out"));
        let err = Writer::open(&paths).await.unwrap_err();
        assert_eq!(err.exit_code(), 1);
        assert!(err.to_string().contains("out.circus-part"), "{err}");
    }
}
