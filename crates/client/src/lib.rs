//! The circus download client: `circus get URL` as a library.
//!
//! From a circus server it downloads natively (docs/protocol.md): the server
//! sends blocks in whatever order suits it, each is checked against the
//! manifest's BLAKE3 leaf hash the moment it arrives and written in place,
//! and an interrupted download resumes by asking only for the blocks still
//! missing (`Circus-Need`). From any other server it downloads the plain
//! file and resumes with `Range` and `If-Range`. Either way:
//!
//! - data goes to `PATH.circus-part`; progress is kept in the sidecar
//!   `PATH.circus-state` (JSON), saved only after the part file was synced,
//!   so a later run (or process) resumes where this one stopped;
//! - a broken connection is retried with exponential backoff (200 ms,
//!   doubling; `retries` failures in a row without progress end it);
//! - when complete, the part file is read back whole: a native download must
//!   hash to the manifest's root (kept in the state file), and the file must
//!   match every SHA-256 known (`expect_digest`, the server's `Repr-Digest`,
//!   the manifest). Only then is it renamed to `PATH`: a state file alone
//!   never makes a download complete. Data that fails the check is
//!   discarded; if it held bytes from an earlier run (which the disk may
//!   have damaged since) the download starts over once, else it fails.
//!   `PATH` never holds partial or wrong content.
//!
//! Exit codes of `circus get`, from [`GetError::exit_code`]:
//!
//! | code | meaning |
//! | --- | --- |
//! | 0 | success: the file is complete, verified and in place |
//! | 1 | local or usage error ([`GetError::Usage`], [`GetError::Local`]) |
//! | 2 | network or server failure after the retries ([`GetError::Network`]); rerun later to resume |
//! | 3 | integrity failure ([`GetError::Integrity`]): digest mismatch, or blocks bad on every try |
//! | 4 | HTTP error status ([`GetError::Status`]), with the server's reason |
//! | 5 | the server broke the protocol ([`GetError::InvalidManifest`]); `--plain` may work |
//! | 130 | interrupted ([`GetError::Cancelled`]); run again to resume |
//!
//! ```no_run
//! use circus_client::{GetOptions, Mode, download};
//! # async fn run() -> Result<(), circus_client::GetError> {
//! let mut opts = GetOptions::new("http://127.0.0.1:8080/big.iso", "big.iso");
//! opts.mode = Mode::Auto; // native if the server speaks it, else plain HTTP
//! opts.limit_rate = Some(10 << 20); // bytes per second
//! let report = download(&opts, &()).await?; // `&()`: no progress display
//! println!("{} bytes, {} reconnects", report.bytes, report.reconnects);
//! # Ok(()) }
//! ```
//!
//! Many downloads in one process (a benchmark) share one [`HttpClient`]
//! through [`download_with`]; [`download_until`] also takes a future that
//! cancels the download (Ctrl-C), keeping its progress.
//! [`download_to_writer`] sends the verified file to a writer (`circus get
//! -o -`: stdout); [`default_output`] is the name `circus get` saves under
//! when given none.

mod digest;
mod error;
mod fetch;
mod native;
mod output;
mod part;
mod plain;
mod progress;
mod session;
mod state;
mod throttle;
mod tls;
mod to_writer;
mod verify;

pub use digest::Sha256Digest;
pub use error::{EXIT_CODES, GetError};
pub use fetch::{HttpClient, http_client, https_client};
pub use output::{default_output, output_name};
pub use progress::{BarProgress, ProgressSink};
pub use to_writer::download_to_writer;

/// The state file parser, for the fuzz targets in `fuzz/`; not an API.
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::state::{FuzzState, StateError};
}

use std::{path::PathBuf, time::Duration};

/// Which protocols a download may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Ask for the native stream; take the plain file if that is what comes.
    #[default]
    Auto,
    /// Plain HTTP only, even from a circus server.
    Plain,
}

/// The protocol a download actually used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    #[default]
    Native,
    Plain,
}

/// What to download, where, and how.
#[derive(Debug, Clone)]
pub struct GetOptions {
    /// An `http://` or `https://` URL.
    pub url: String,
    /// The file to create. `PATH.circus-part` and `PATH.circus-state` sit
    /// beside it while the download runs.
    pub output: PathBuf,
    pub mode: Mode,
    /// Attempts in a row that may fail without any progress before giving
    /// up; 0 gives up at the first failure.
    pub retries: u32,
    /// Wait before the first retry; doubles each further one (up to 10 s).
    pub backoff: Duration,
    /// Received bytes per second, `None` for no limit.
    pub limit_rate: Option<u64>,
    /// Connecting, waiting for a response, and silence mid-body each give
    /// up after this long (the attempt fails and is retried).
    pub timeout: Duration,
    /// The file's SHA-256 as the user knows it; always checked.
    pub expect_digest: Option<Sha256Digest>,
    /// Check the digests the server gave (`Repr-Digest`, the manifest).
    pub verify_digest: bool,
    /// For `https://`: trust only these CA certificates (PEM), not the
    /// system's roots.
    pub ca_file: Option<PathBuf>,
    /// Sent with every request (an `Authorization` for a private path).
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
}

impl GetOptions {
    /// Defaults: auto mode, 5 retries from 200 ms, no rate limit, 30 s
    /// timeout, server digests verified.
    pub fn new(url: impl Into<String>, output: impl Into<PathBuf>) -> Self {
        Self {
            url: url.into(),
            output: output.into(),
            mode: Mode::Auto,
            retries: 5,
            backoff: Duration::from_millis(200),
            limit_rate: None,
            timeout: Duration::from_secs(30),
            expect_digest: None,
            verify_digest: true,
            ca_file: None,
            headers: Vec::new(),
        }
    }
}

/// What a finished download did.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub path: PathBuf,
    pub protocol: Protocol,
    /// The file's size.
    pub bytes: u64,
    /// Bytes already in place from an earlier run when this one started.
    pub resumed_bytes: u64,
    /// Response body bytes received over every connection (in native mode
    /// this includes manifests and frame headers).
    pub received_bytes: u64,
    /// Blocks verified and written by this run (native mode).
    pub blocks_received: u32,
    /// Blocks that failed verification and were dropped (asked for again).
    pub blocks_corrupt: u32,
    /// Valid blocks received again although already written.
    pub blocks_duplicate: u32,
    /// Connections made after the first.
    pub reconnects: u32,
    /// Times the progress was discarded because the file changed.
    pub restarts: u32,
    /// The file's SHA-256, when a digest was checked.
    pub sha256: Option<Sha256Digest>,
    pub elapsed: Duration,
}

/// Downloads `opts.url` to `opts.output` with a client of its own.
pub async fn download(opts: &GetOptions, progress: &dyn ProgressSink) -> Result<Report, GetError> {
    download_with(&https_client(opts.timeout, opts.ca_file.as_deref())?, opts, progress).await
}

/// Downloads with a shared client (connection pool), for many downloads in
/// one process.
pub async fn download_with(
    client: &HttpClient,
    opts: &GetOptions,
    progress: &dyn ProgressSink,
) -> Result<Report, GetError> {
    session::download(client, opts, progress, std::future::pending()).await
}

/// Downloads with a shared client until done or until `cancelled` resolves,
/// whichever comes first. A cancelled download fails with
/// [`GetError::Cancelled`] after saving its progress and closing its part
/// file, so the same download may start again at once and resume. (A
/// cancel that comes while the checked file is being renamed into place
/// is too late: the download succeeds.)
///
/// ```no_run
/// # async fn run(client: circus_client::HttpClient, opts: circus_client::GetOptions) {
/// let ctrl_c = async {
///     let _ = tokio::signal::ctrl_c().await;
/// };
/// match circus_client::download_until(&client, &opts, &(), ctrl_c).await {
///     Err(circus_client::GetError::Cancelled) => eprintln!("interrupted; run again to resume"),
///     other => println!("{other:?}"),
/// }
/// # }
/// ```
pub async fn download_until(
    client: &HttpClient,
    opts: &GetOptions,
    progress: &dyn ProgressSink,
    cancelled: impl Future<Output = ()>,
) -> Result<Report, GetError> {
    session::download(client, opts, progress, cancelled).await
}
