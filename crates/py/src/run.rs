//! `download`: the download runs on a runtime of its own with the GIL
//! released; the calling thread wakes every [`POLL`] to report progress, to
//! pass the download's notes (a resume, a start-over, a reconnect) to the
//! `logging` module as the `circus_client` logger's INFO records, and to
//! look for Ctrl-C, and cancels the download (keeping its progress) if
//! either raises.

use crate::{errors, options::Args, report::Report};
use circus_client::ProgressSink;
use pyo3::{exceptions::PyRuntimeError, prelude::*};
use std::{
    collections::HashMap,
    path::PathBuf,
    sync::Arc,
    sync::Mutex,
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

/// How often the calling thread wakes while a download runs: the progress
/// callback's rate, and how late Ctrl-C may be noticed.
pub const POLL: Duration = Duration::from_millis(100);

/// The download behind `circus_client.download` (python/circus_client),
/// which checks and documents the arguments.
#[pyfunction]
#[pyo3(signature = (
    url, path, *, progress=None, plain=false, retries=5, timeout=30.0, limit_rate=None,
    sha256=None, verify=true, ca_file=None, headers=None,
))]
#[allow(clippy::too_many_arguments)]
pub fn download(
    py: Python<'_>,
    url: String,
    path: PathBuf,
    progress: Option<Bound<'_, PyAny>>,
    plain: bool,
    retries: u32,
    timeout: f64,
    limit_rate: Option<u64>,
    sha256: Option<String>,
    verify: bool,
    ca_file: Option<PathBuf>,
    headers: Option<HashMap<String, String>>,
) -> PyResult<Report> {
    let args = Args {
        url,
        path,
        plain,
        retries,
        timeout,
        limit_rate,
        sha256,
        verify,
        ca_file,
        headers: headers.unwrap_or_default(),
    };
    let opts = args.into_options().map_err(|e| errors::to_py(py, &e))?;
    // A runtime per call, as `circus get` has: nothing survives between
    // calls, so a fork (multiprocessing) never inherits a runtime whose
    // threads are gone.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("circus-client")
        .build()
        .map_err(|e| PyRuntimeError::new_err(format!("cannot start the download's runtime: {e}")))?;
    let client =
        circus_client::https_client(opts.timeout, opts.ca_file.as_deref()).map_err(|e| errors::to_py(py, &e))?;
    let counters = Arc::new(Counters::default());
    let logger = py.import("logging")?.call_method1("getLogger", ("circus_client",))?;
    let (cancel, cancelled) = tokio::sync::oneshot::channel::<()>();
    let mut task = runtime.spawn({
        let counters = counters.clone();
        async move {
            let cancelled = async {
                let _ = cancelled.await;
            };
            circus_client::download_until(&client, &opts, &*counters, cancelled).await
        }
    });
    let mut shown = None;
    let joined = loop {
        let polled = py.detach(|| runtime.block_on(async { tokio::time::timeout(POLL, &mut task).await }));
        if let Ok(joined) = polled {
            break joined;
        }
        let reported = counters.log_notes(&logger).and_then(|()| counters.show(progress.as_ref(), &mut shown));
        if let Err(raised) = py.check_signals().and(reported) {
            let _ = cancel.send(());
            // Wait for the download to save its progress and close its part
            // file, so the same call may start again at once. (If it had
            // already finished, the file is in place; the exception is
            // raised all the same.)
            py.detach(|| {
                let _ = runtime.block_on(&mut task);
                drop(runtime);
            });
            return Err(raised);
        }
    };
    py.detach(move || drop(runtime));
    counters.log_notes(&logger)?;
    let report = match joined {
        Ok(Ok(report)) => report,
        Ok(Err(e)) => return Err(errors::to_py(py, &e)),
        Err(panicked) => return Err(PyRuntimeError::new_err(format!("the download task failed: {panicked}"))),
    };
    counters.show(progress.as_ref(), &mut shown)?;
    Ok(report.into())
}

/// Progress as the download's task records it, for the calling thread to
/// read.
#[derive(Debug)]
struct Counters {
    /// The file's size, [`UNKNOWN`] until the server says.
    total: AtomicU64,
    /// Bytes in place, this run's and earlier runs'.
    done: AtomicU64,
    /// Notes not yet passed to `logging`.
    notes: Mutex<Vec<String>>,
}

const UNKNOWN: u64 = u64::MAX;

impl Default for Counters {
    fn default() -> Self {
        Self { total: AtomicU64::new(UNKNOWN), done: AtomicU64::new(0), notes: Mutex::default() }
    }
}

impl ProgressSink for Counters {
    fn start(&self, total: Option<u64>, done: u64) {
        self.total.store(total.unwrap_or(UNKNOWN), Ordering::Relaxed);
        self.done.store(done, Ordering::Relaxed);
    }

    fn advance(&self, bytes: u64) {
        self.done.fetch_add(bytes, Ordering::Relaxed);
    }

    fn note(&self, message: &str) {
        self.notes.lock().expect("notes lock").push(message.to_owned());
    }
}

impl Counters {
    /// Logs the notes that came since the last call, at INFO, on the
    /// calling thread (a handler may raise: that stops the download too).
    fn log_notes(&self, logger: &Bound<'_, PyAny>) -> PyResult<()> {
        let notes = std::mem::take(&mut *self.notes.lock().expect("notes lock"));
        for note in notes {
            // No arguments, so `logging` leaves a `%` in the note alone.
            logger.call_method1("info", (note,))?;
        }
        Ok(())
    }

    /// Calls `progress(done, total)` if anything changed since `shown`.
    fn show(&self, progress: Option<&Bound<'_, PyAny>>, shown: &mut Option<(u64, Option<u64>)>) -> PyResult<()> {
        let Some(progress) = progress else { return Ok(()) };
        let total = Some(self.total.load(Ordering::Relaxed)).filter(|&t| t != UNKNOWN);
        let now = (self.done.load(Ordering::Relaxed), total);
        if *shown == Some(now) || (now.0 == 0 && total.is_none()) {
            return Ok(());
        }
        *shown = Some(now);
        progress.call1(now)?;
        Ok(())
    }
}
