//! Downloading to a writer instead of a named file (`circus get -o -`).
//!
//! The file goes to a private temporary directory first, is verified like
//! any download, and only then copied to the writer: whatever reads it sees
//! the whole, checked file or nothing, never a prefix that later turns out
//! wrong. The price is room for one copy in the temporary directory (the
//! system's, `$TMPDIR`), and no resume across runs, since the next run
//! cannot find the part file: it is removed whether the download succeeds
//! or fails.

use crate::{GetError, GetOptions, HttpClient, ProgressSink, Report, session};
use std::{
    io::Write,
    os::unix::fs::DirBuilderExt,
    path::PathBuf,
    sync::atomic::{AtomicU64, Ordering},
};

/// Downloads `opts.url` (ignoring `opts.output`) and, once it is complete
/// and verified, copies it to `out`. `Report::path` is `-`.
pub async fn download_to_writer(
    client: &HttpClient,
    opts: &GetOptions,
    progress: &dyn ProgressSink,
    mut out: impl Write + Send + 'static,
) -> Result<Report, GetError> {
    let dir = TempDir::create()?;
    let file = dir.0.join("download");
    let opts = GetOptions { output: file.clone(), ..opts.clone() };
    let mut report = session::download(client, &opts, progress, std::future::pending()).await?;
    progress.status("writing to stdout");
    tokio::task::spawn_blocking(move || {
        let mut f = std::fs::File::open(&file).map_err(|e| GetError::local("read", &file, e))?;
        std::io::copy(&mut f, &mut out).and_then(|_| out.flush()).map_err(|e| GetError::local("write to", "-", e))
    })
    .await
    .map_err(|e| GetError::local("write to", "-", std::io::Error::other(e)))??;
    drop(dir);
    report.path = PathBuf::from("-");
    Ok(report)
}

/// A directory only this process uses (mode 0700), removed when dropped.
#[derive(Debug)]
struct TempDir(PathBuf);

impl TempDir {
    fn create() -> Result<Self, GetError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let base = std::env::temp_dir();
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        // A name taken (by a stale directory or another user) is tried again
        // with the next number: `create` fails rather than reuse it.
        let mut last = None;
        for _ in 0..16 {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let path = base.join(format!("circus-get-{}-{nanos}-{n}", std::process::id()));
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => return Ok(Self(path)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => return Err(GetError::local("create a temporary directory in", base, e)),
            }
        }
        Err(GetError::local("create a temporary directory in", base, last.expect("tried")))
    }

    #[cfg(test)]
    fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_dirs_are_private_distinct_and_removed() {
        use std::os::unix::fs::PermissionsExt;
        let (a, b) = (TempDir::create().unwrap(), TempDir::create().unwrap());
        assert_ne!(a.path(), b.path());
        let mode = std::fs::metadata(a.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        std::fs::write(a.path().join("download.circus-part"), b"x").unwrap();
        let path = a.path().to_owned();
        drop(a);
        assert!(!path.exists());
    }
}
