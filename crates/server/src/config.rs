//! What the server runs with: every setting typed, with its default
//! ([`ServeConfig::new`]); `settings` overlays what the file and the flags
//! give.

use circus_core::ByteSize;
use circus_origin::OriginConfig;
use circus_sched::SchedConfig;
use std::{net::SocketAddr, path::PathBuf, time::Duration};

#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub root: PathBuf,
    /// Where content is served (HTTPS when `tls` is given).
    pub listen: Vec<SocketAddr>,
    /// Where `/metrics`, `/status` and the operators' endpoints (purge,
    /// prefetch) are served (`None`: nowhere).
    pub admin_listen: Option<SocketAddr>,
    /// Certificates and keys: the listener speaks HTTPS when given.
    pub tls: Vec<crate::tls::CertFiles>,
    pub sched: SchedConfig,
    /// Connections served at once; more are answered 503 and closed.
    pub max_connections: usize,
    /// Largest request head (request line and headers) accepted.
    pub max_header_bytes: usize,
    /// How long a connection may take to send its request head.
    pub header_timeout: Duration,
    /// Storage reads in flight at once.
    pub io_threads: usize,
    /// How long SIGTERM waits for downloads in progress.
    pub drain_timeout: Duration,
    /// Unsent bytes a connection may hold in the kernel (TCP_NOTSENT_LOWAT);
    /// `None` leaves the system default.
    pub send_lowat: Option<u32>,
    /// Keep cached blocks in a memfd and send them with `sendfile(2)`
    /// instead of copying them into each socket.
    pub zero_copy: bool,
    /// Where the zero-copy cache file lives (`None`: a memfd).
    pub cache_dir: Option<PathBuf>,
    /// Where hash indexes are stored (`None`: `ROOT/.circus/index`).
    pub index_dir: Option<PathBuf>,
    /// How long a native request waits for its file's hash index to be
    /// built before it gets the plain stream instead (the build goes on).
    pub index_wait: Duration,
    /// Most bytes per second read from storage (`None`: as fast as it goes).
    pub read_rate: Option<u64>,
    /// Serve from this origin through the caching tier instead of `root`.
    pub origin: Option<OriginConfig>,
    /// Serve files and directories whose names start with a dot (`.git/`,
    /// `.env`); refused with 404 by default.
    pub dotfiles: bool,
    /// Directories without an `index.html` answer a listing of their
    /// entries (off: 403).
    pub listing: bool,
    /// A connection whose response makes no progress (no byte taken by the
    /// client) for this long is closed, as nginx's `send_timeout`; an idle
    /// HTTP/2 connection with no stream open is closed after it too.
    pub send_timeout: Duration,
    /// Connections one client address may hold at once (0: no cap).
    pub max_connections_per_ip: usize,
    /// Streams one HTTP/2 connection may have open at once.
    pub max_streams: u32,
}

impl ServeConfig {
    pub fn new(root: PathBuf) -> Self {
        ServeConfig {
            root,
            listen: vec![SocketAddr::from(([127, 0, 0, 1], 8080))],
            admin_listen: Some(SocketAddr::from(([127, 0, 0, 1], 9180))),
            tls: Vec::new(),
            sched: SchedConfig { cache_bytes: 256 << 20, ..SchedConfig::default() },
            max_connections: 10_000,
            // Room for the longest Circus-Need the server parses, and
            // ordinary fields beside it: a resume always fits.
            max_header_bytes: circus_proto::MAX_NEED_LEN + 8 * 1024,
            header_timeout: Duration::from_secs(30),
            io_threads: 16,
            drain_timeout: Duration::from_secs(30),
            send_lowat: Some(128 * 1024),
            zero_copy: true,
            cache_dir: None,
            index_dir: None,
            index_wait: Duration::from_secs(2),
            read_rate: None,
            origin: None,
            dotfiles: false,
            listing: true,
            send_timeout: Duration::from_secs(60),
            max_connections_per_ip: 0,
            max_streams: 100,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Its message names the line and the key; the source is not repeated.
    #[error(transparent)]
    Toml(#[from] toml::de::Error),
    #[error("block size {0} is too large")]
    BlockTooLarge(ByteSize),
    #[error("origin {0}")]
    Origin(String),
    #[error(transparent)]
    Sched(#[from] circus_sched::ConfigError),
    #[error(transparent)]
    Memory(#[from] crate::memory::PlanError),
    #[error("{0}")]
    Tls(&'static str),
}
