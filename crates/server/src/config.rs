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
    /// Where content is served (HTTPS when `tls` or `acme` is given).
    pub listen: Vec<SocketAddr>,
    /// Where `/metrics`, `/status` and the operators' endpoints (purge,
    /// prefetch) are served (`None`: nowhere).
    pub admin_listen: Option<SocketAddr>,
    /// Certificates and keys: the listener speaks HTTPS when given.
    pub tls: Vec<crate::tls::CertFiles>,
    /// Certificates from an ACME CA: the listener speaks HTTPS when it
    /// names domains.
    pub acme: crate::acme::AcmeConfig,
    /// A cleartext listener that redirects every request to HTTPS.
    pub redirect_listen: Option<SocketAddr>,
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
    /// Unsent bytes a cleartext connection may hold in the kernel
    /// (TCP_NOTSENT_LOWAT), at least: raised to one bandwidth-delay
    /// product of the connection (see `send_mark`); `None` leaves the
    /// system default. HTTPS
    /// connections always keep the system default: their bytes also wait
    /// in rustls's buffer, and there the low mark cost a fifth of the
    /// server's CPU per byte (50 downloads of 1 GiB: 60 s of CPU with it,
    /// 48-50 s without) through the wake-ups it adds.
    pub send_lowat: Option<u32>,
    /// The least mark, in place of `send_lowat`, while a cleartext HTTP/1.x
    /// connection sends a file larger than the cache; raised to the slack
    /// of the connection's delivery rate (see `send_mark`).
    pub send_lowat_uncached: Option<u32>,
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
    /// Path prefixes only signed URLs or bearer tokens may read.
    pub private: Vec<crate::private::PrivateConfig>,
    /// Where a line per request goes (off by default).
    pub access_log: crate::access_log::Target,
    pub access_log_format: crate::access_log::Format,
}

impl ServeConfig {
    pub fn new(root: PathBuf) -> Self {
        ServeConfig {
            root,
            listen: vec![SocketAddr::from(([127, 0, 0, 1], 8080))],
            admin_listen: Some(SocketAddr::from(([127, 0, 0, 1], 9180))),
            tls: Vec::new(),
            acme: crate::acme::AcmeConfig::default(),
            redirect_listen: None,
            sched: SchedConfig { cache_bytes: 256 << 20, ..SchedConfig::default() },
            max_connections: 10_000,
            // Room for the longest Circus-Need the server parses, and
            // ordinary fields beside it: a resume always fits.
            max_header_bytes: circus_proto::MAX_NEED_LEN + 8 * 1024,
            header_timeout: Duration::from_secs(30),
            io_threads: 16,
            drain_timeout: Duration::from_secs(30),
            send_lowat: Some(128 * 1024),
            send_lowat_uncached: Some(16 * 1024),
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
            private: Vec::new(),
            access_log: crate::access_log::Target::Off,
            access_log_format: crate::access_log::Format::Combined,
        }
    }
}

impl ServeConfig {
    /// The names of the settings (as flags and keys are named) whose values
    /// differ between `self` and `other`: what a reload would change.
    pub fn differing(&self, other: &ServeConfig) -> Vec<&'static str> {
        // Every field named, so that a new setting cannot be left out here.
        let ServeConfig {
            root: _,
            listen: _,
            admin_listen: _,
            tls: _,
            acme: _,
            redirect_listen: _,
            sched: _,
            max_connections: _,
            max_header_bytes: _,
            header_timeout: _,
            io_threads: _,
            drain_timeout: _,
            send_lowat: _,
            send_lowat_uncached: _,
            zero_copy: _,
            cache_dir: _,
            index_dir: _,
            index_wait: _,
            read_rate: _,
            origin: _,
            dotfiles: _,
            listing: _,
            send_timeout: _,
            max_connections_per_ip: _,
            max_streams: _,
            private: _,
            access_log: _,
            access_log_format: _,
        } = self;
        let (a, b) = (self, other);
        let (sa, sb) = (&a.sched, &b.sched);
        let same = |x: &dyn std::fmt::Debug, y: &dyn std::fmt::Debug| format!("{x:?}") == format!("{y:?}");
        let fields: [(&'static str, bool); 36] = [
            ("root", same(&a.root, &b.root)),
            ("listen", same(&a.listen, &b.listen)),
            ("admin_listen", same(&a.admin_listen, &b.admin_listen)),
            ("tls_cert", same(&a.tls, &b.tls)),
            ("acme", a.acme == b.acme),
            ("redirect_listen", a.redirect_listen == b.redirect_listen),
            ("cache", sa.cache_bytes == sb.cache_bytes),
            ("policy", sa.policy == sb.policy),
            ("block", sa.block_size == sb.block_size),
            ("queue", sa.queue_len == sb.queue_len),
            ("active", sa.active_len == sb.active_len),
            ("leapfront", sa.leapfront == sb.leapfront),
            ("threshold", sa.threshold == sb.threshold),
            ("readahead", sa.readahead == sb.readahead),
            ("favor", sa.favor == sb.favor),
            ("max_connections", a.max_connections == b.max_connections),
            ("max_header", a.max_header_bytes == b.max_header_bytes),
            ("header_timeout", a.header_timeout == b.header_timeout),
            ("io_threads", a.io_threads == b.io_threads),
            ("drain_timeout", a.drain_timeout == b.drain_timeout),
            ("send_lowat", a.send_lowat == b.send_lowat),
            ("send_lowat_uncached", a.send_lowat_uncached == b.send_lowat_uncached),
            ("zero_copy", a.zero_copy == b.zero_copy),
            ("cache_dir", a.cache_dir == b.cache_dir),
            ("index_dir", a.index_dir == b.index_dir),
            ("index_wait", a.index_wait == b.index_wait),
            ("read_rate", a.read_rate == b.read_rate),
            ("origin", same(&a.origin, &b.origin)),
            ("dotfiles", a.dotfiles == b.dotfiles),
            ("listing", a.listing == b.listing),
            ("send_timeout", a.send_timeout == b.send_timeout),
            ("max_connections_per_ip", a.max_connections_per_ip == b.max_connections_per_ip),
            ("max_streams", a.max_streams == b.max_streams),
            ("private", a.private == b.private),
            ("access_log", a.access_log == b.access_log),
            ("access_log_format", a.access_log_format == b.access_log_format),
        ];
        fields.into_iter().filter(|(_, same)| !same).map(|(name, _)| name).collect()
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
    #[error("cluster: {0}")]
    Peers(String),
    #[error(transparent)]
    Sched(#[from] circus_sched::ConfigError),
    #[error(transparent)]
    Memory(#[from] crate::memory::PlanError),
    #[error("{0}")]
    Tls(&'static str),
    #[error(transparent)]
    Private(#[from] crate::private::PrivateError),
}
