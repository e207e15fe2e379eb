//! Server settings: typed, validated, loadable from TOML.

use circus_core::ByteSize;
use circus_origin::{OriginConfig, OriginSource, S3Config};
use circus_sched::{PolicyKind, SchedConfig};
use serde::Deserialize;
use std::{net::SocketAddr, path::PathBuf, time::Duration};

#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub root: PathBuf,
    pub listen: SocketAddr,
    /// Where `/metrics`, `/status` and the operators' endpoints (purge,
    /// prefetch) are served; off unless given.
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
            listen: "127.0.0.1:8080".parse().expect("valid address"),
            admin_listen: None,
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

/// Settings as written in the TOML file, and as the command line gives
/// them: every key optional, unknown keys rejected. Applying one overlays
/// only what it sets, so the binary applies the file, then the flags.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub listen: Option<SocketAddr>,
    pub admin_listen: Option<SocketAddr>,
    /// Certificate chains (PEM), each with the key at the same place in
    /// `tls_key`.
    pub tls_cert: Option<Vec<PathBuf>>,
    pub tls_key: Option<Vec<PathBuf>>,
    pub cache: Option<ByteSize>,
    pub policy: Option<PolicyKind>,
    pub block: Option<ByteSize>,
    pub queue: Option<u32>,
    pub active: Option<ByteSize>,
    pub leapfront: Option<f64>,
    pub threshold: Option<f64>,
    pub readahead: Option<u32>,
    /// speed (default) or storage (rule C13 of docs/scheduler.md).
    pub favor: Option<circus_sched::Favor>,
    pub max_connections: Option<usize>,
    pub max_header: Option<ByteSize>,
    pub header_timeout_secs: Option<u64>,
    pub io_threads: Option<usize>,
    pub drain_timeout_secs: Option<u64>,
    /// 0 leaves the system default.
    pub send_lowat: Option<ByteSize>,
    pub zero_copy: Option<bool>,
    /// A directory for the cache file, e.g. a tmpfs mounted `huge=always`.
    pub cache_dir: Option<PathBuf>,
    pub index_dir: Option<PathBuf>,
    /// Bytes per second; 0 removes the cap.
    pub read_rate: Option<ByteSize>,
    /// `http://host:port/` or `s3://BUCKET[/PREFIX]`: serve this origin
    /// through the caching tier.
    pub origin: Option<String>,
    /// Unit of origin fetches (default 1MiB).
    pub origin_block: Option<ByteSize>,
    /// Origin blocks fetched ahead of the furthest reader (default 4).
    pub origin_readahead: Option<u32>,
    /// Seconds to wait for the origin's response head or next chunk (default 30).
    pub origin_timeout_secs: Option<u64>,
    /// CA certificates (PEM) for an https origin, instead of the system's.
    pub origin_ca: Option<PathBuf>,
    /// An S3-compatible server (`http://127.0.0.1:9000`) instead of AWS;
    /// buckets are then addressed path style.
    pub s3_endpoint: Option<String>,
    pub s3_region: Option<String>,
    /// Plain HTTP to the endpoint (default: when it is an http:// URL).
    pub s3_allow_http: Option<bool>,
    /// Credentials; by default AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
    pub s3_access_key_id: Option<String>,
    pub s3_secret_access_key: Option<String>,
    /// Freshness of objects without a Cache-Control of their own (default:
    /// heuristic, a tenth of the time since Last-Modified, at most a day).
    pub s3_max_age_secs: Option<u64>,
    /// Serve dotfiles (default false: 404).
    pub dotfiles: Option<bool>,
    /// List directories without an index.html (default true).
    pub listing: Option<bool>,
    /// Seconds without progress before a connection is closed (default 60).
    pub send_timeout_secs: Option<u64>,
    /// Seconds a native request waits for an index build (default 2).
    pub index_wait_secs: Option<u64>,
    /// Connections per client address (default 0: no cap).
    pub max_connections_per_ip: Option<usize>,
    /// Open streams per HTTP/2 connection (default 100).
    pub max_streams: Option<u32>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config file: {0}")]
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

impl FileConfig {
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        Ok(toml::from_str(text)?)
    }

    /// Overlays these settings on `cfg`, then validates the result.
    pub fn apply(&self, cfg: &mut ServeConfig) -> Result<(), ConfigError> {
        fn set<T: Copy>(target: &mut T, value: Option<T>) {
            if let Some(v) = value {
                *target = v;
            }
        }
        let s = &mut cfg.sched;
        set(&mut s.cache_bytes, self.cache.map(|b| b.0));
        set(&mut s.policy, self.policy);
        if let Some(b) = self.block {
            s.block_size = u32::try_from(b.0).map_err(|_| ConfigError::BlockTooLarge(b))?;
        }
        set(&mut s.active_len, self.active.map(|b| b.0));
        set(&mut s.queue_len, self.queue);
        set(&mut s.leapfront, self.leapfront);
        set(&mut s.threshold, self.threshold);
        set(&mut s.readahead, self.readahead);
        set(&mut s.favor, self.favor);
        set(&mut cfg.listen, self.listen);
        if let Some(addr) = self.admin_listen {
            cfg.admin_listen = Some(addr);
        }
        match (&self.tls_cert, &self.tls_key) {
            (None, None) => {}
            (Some(certs), Some(keys)) if certs.len() == keys.len() => {
                cfg.tls = certs
                    .iter()
                    .zip(keys)
                    .map(|(cert, key)| crate::tls::CertFiles { cert: cert.clone(), key: key.clone() })
                    .collect();
            }
            _ => return Err(ConfigError::Tls("give one --tls-key for each --tls-cert, in the same order")),
        }
        set(&mut cfg.max_connections, self.max_connections);
        set(&mut cfg.max_header_bytes, self.max_header.map(|b| b.0 as usize));
        set(&mut cfg.io_threads, self.io_threads);
        set(&mut cfg.header_timeout, self.header_timeout_secs.map(Duration::from_secs));
        set(&mut cfg.drain_timeout, self.drain_timeout_secs.map(Duration::from_secs));
        set(&mut cfg.zero_copy, self.zero_copy);
        set(&mut cfg.dotfiles, self.dotfiles);
        set(&mut cfg.listing, self.listing);
        set(&mut cfg.send_timeout, self.send_timeout_secs.map(Duration::from_secs));
        set(&mut cfg.index_wait, self.index_wait_secs.map(Duration::from_secs));
        set(&mut cfg.max_connections_per_ip, self.max_connections_per_ip);
        set(&mut cfg.max_streams, self.max_streams.map(|n| n.max(1)));
        if let Some(dir) = &self.index_dir {
            cfg.index_dir = Some(dir.clone());
        }
        if let Some(dir) = &self.cache_dir {
            cfg.cache_dir = Some(dir.clone());
        }
        if let Some(r) = self.read_rate {
            cfg.read_rate = Some(r.0).filter(|&v| v > 0);
        }
        if let Some(b) = self.send_lowat {
            cfg.send_lowat = u32::try_from(b.0).ok().filter(|&v| v > 0);
        }
        if let Some(url) = &self.origin {
            let source = parse_origin(url)?;
            match cfg.origin.as_mut() {
                // An origin named again (a flag over the file) keeps the
                // other origin settings already given.
                Some(o) => o.source = carry_s3_settings(source, &o.source),
                None => cfg.origin = Some(OriginConfig::new(source)),
            }
        }
        self.apply_s3(cfg)?;
        if let Some(o) = cfg.origin.as_mut() {
            if let Some(b) = self.origin_block {
                o.block_size = u32::try_from(b.0).ok().filter(|&v| v > 0).ok_or(ConfigError::BlockTooLarge(b))?;
            }
            set(&mut o.readahead, self.origin_readahead);
            set(&mut o.timeout, self.origin_timeout_secs.map(Duration::from_secs));
            if let Some(ca) = &self.origin_ca {
                o.ca_file = Some(ca.clone());
            }
            let block = cfg.sched.block_size;
            if o.block_size % block != 0 {
                return Err(ConfigError::Origin(format!(
                    "--origin-block ({}) must be a multiple of --block ({block}): native downloads of origin objects are cut into blocks of --block",
                    o.block_size
                )));
            }
        }
        cfg.sched.validate()?;
        crate::memory::MemoryPlan::new(cfg.sched.cache_bytes, cfg.sched.block_size, cfg.origin.as_ref())?;
        Ok(())
    }
}

impl FileConfig {
    fn apply_s3(&self, cfg: &mut ServeConfig) -> Result<(), ConfigError> {
        fn set<T: Clone>(target: &mut Option<T>, value: &Option<T>) {
            if value.is_some() {
                target.clone_from(value);
            }
        }
        let Some(OriginSource::S3(s3)) = cfg.origin.as_mut().map(|o| &mut o.source) else {
            let given = [
                ("s3_endpoint", self.s3_endpoint.is_some()),
                ("s3_region", self.s3_region.is_some()),
                ("s3_allow_http", self.s3_allow_http.is_some()),
                ("s3_access_key_id", self.s3_access_key_id.is_some()),
                ("s3_secret_access_key", self.s3_secret_access_key.is_some()),
                ("s3_max_age_secs", self.s3_max_age_secs.is_some()),
            ];
            return match given.iter().find(|(_, set)| *set) {
                Some((name, _)) => Err(ConfigError::Origin(format!(
                    "setting {name} applies to an S3 origin only: give origin = \"s3://BUCKET\" (--origin s3://BUCKET)"
                ))),
                None => Ok(()),
            };
        };
        set(&mut s3.endpoint, &self.s3_endpoint);
        set(&mut s3.region, &self.s3_region);
        set(&mut s3.allow_http, &self.s3_allow_http);
        set(&mut s3.access_key_id, &self.s3_access_key_id);
        set(&mut s3.secret_access_key, &self.s3_secret_access_key);
        set(&mut s3.max_age, &self.s3_max_age_secs.map(Duration::from_secs));
        if let Some(e) = &s3.endpoint
            && !(e.starts_with("http://") || e.starts_with("https://"))
        {
            return Err(ConfigError::Origin(format!("S3 endpoint {e}: give an http:// or https:// URL")));
        }
        Ok(())
    }
}

/// `http://host:port/prefix` or `s3://BUCKET[/PREFIX]`.
fn parse_origin(url: &str) -> Result<OriginSource, ConfigError> {
    if let Some(rest) = url.strip_prefix("s3://") {
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(ConfigError::Origin(format!("{url}: give a bucket, as in s3://BUCKET/PREFIX")));
        }
        let prefix = prefix.trim_matches('/').to_owned();
        return Ok(OriginSource::S3(S3Config { bucket: bucket.to_owned(), prefix, ..S3Config::default() }));
    }
    let uri: http::Uri = url.parse().map_err(|e| ConfigError::Origin(format!("{url}: {e}")))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.authority().is_none() {
        return Err(ConfigError::Origin(format!(
            "{url}: give an http:// or https://host[:port]/ URL, or s3://BUCKET[/PREFIX]"
        )));
    }
    Ok(OriginSource::Http(uri))
}

/// `new` with the S3 settings of `old` when both are S3 origins.
fn carry_s3_settings(new: OriginSource, old: &OriginSource) -> OriginSource {
    match (new, old) {
        (OriginSource::S3(new), OriginSource::S3(old)) => {
            OriginSource::S3(S3Config { bucket: new.bucket, prefix: new.prefix, ..old.clone() })
        }
        (new, _) => new,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_overlays_and_rejects_unknown_keys() {
        let mut cfg = ServeConfig::new("/srv".into());
        FileConfig::parse("cache = \"1GiB\"\npolicy = \"sequential\"\nqueue = 8\n").unwrap().apply(&mut cfg).unwrap();
        assert_eq!(
            (cfg.sched.cache_bytes, cfg.sched.policy, cfg.sched.queue_len),
            (1 << 30, PolicyKind::Sequential, 8)
        );
        assert!(FileConfig::parse("cahce = \"1GiB\"").unwrap_err().to_string().contains("unknown field"));
        let bad = FileConfig::parse("block = \"huge\"").unwrap_err();
        assert!(bad.to_string().contains("huge"), "{bad}");
        let mut o = ServeConfig::new("/srv".into());
        FileConfig::parse(
            "origin = \"http://127.0.0.1:9000/files\"\norigin_block = \"256KiB\"\norigin_timeout_secs = 5\n",
        )
        .unwrap()
        .apply(&mut o)
        .unwrap();
        let origin = o.origin.unwrap();
        assert_eq!((origin.source.to_string().as_str(), origin.block_size), ("http://127.0.0.1:9000/files", 256 << 10));
        assert_eq!(origin.timeout, Duration::from_secs(5));
        let tiny = FileConfig::parse("origin = \"http://x/\"\ncache = \"4MiB\"")
            .unwrap()
            .apply(&mut ServeConfig::new("/".into()));
        assert!(tiny.unwrap_err().to_string().contains("give --cache 13981016 or more"));
        let https = FileConfig::parse("origin = \"https://x/\"\norigin_ca = \"/ca.pem\"").unwrap();
        let mut with_https = ServeConfig::new("/".into());
        https.apply(&mut with_https).unwrap();
        assert_eq!(with_https.origin.unwrap().ca_file.as_deref(), Some(std::path::Path::new("/ca.pem")));
        let ftp = FileConfig::parse("origin = \"ftp://x/\"").unwrap().apply(&mut ServeConfig::new("/".into()));
        assert!(ftp.unwrap_err().to_string().contains("https://host[:port]/"));
        let stray = FileConfig::parse("s3_region = \"eu-west-1\"").unwrap().apply(&mut ServeConfig::new("/".into()));
        assert!(stray.unwrap_err().to_string().contains("applies to an S3 origin only"));
        let bytes = FileConfig::parse("cache = 1048576").unwrap();
        assert_eq!(bytes.cache, Some(ByteSize(1 << 20)));
    }

    #[test]
    fn s3_origin_from_file_then_flags() {
        let mut cfg = ServeConfig::new("/".into());
        let file = "origin = \"s3://media/v1/\"\ns3_endpoint = \"http://127.0.0.1:9000\"\ns3_region = \"eu-west-1\"\n\
                    s3_access_key_id = \"AK\"\ns3_secret_access_key = \"SK\"\norigin_block = \"256KiB\"\n";
        FileConfig::parse(file).unwrap().apply(&mut cfg).unwrap();
        // A flag naming another bucket keeps the file's endpoint and keys.
        let flags =
            FileConfig { origin: Some("s3://other".into()), s3_max_age_secs: Some(60), ..FileConfig::default() };
        flags.apply(&mut cfg).unwrap();
        let o = cfg.origin.unwrap();
        let OriginSource::S3(s3) = &o.source else { panic!("{:?}", o.source) };
        assert_eq!((s3.bucket.as_str(), s3.prefix.as_str()), ("other", ""));
        assert_eq!((s3.endpoint.as_deref(), s3.region.as_deref()), (Some("http://127.0.0.1:9000"), Some("eu-west-1")));
        assert_eq!((s3.access_key_id.as_deref(), s3.max_age), (Some("AK"), Some(Duration::from_secs(60))));
        assert_eq!(o.block_size, 256 << 10);
        assert!(!format!("{s3:?}").contains("SK"), "the secret stays out of Debug");
        let prefixed = parse_origin("s3://media/v1/").unwrap();
        assert_eq!(prefixed.to_string(), "s3://media/v1");
        assert!(parse_origin("s3:///x").unwrap_err().to_string().contains("give a bucket"));
        let bad = FileConfig::parse("origin = \"s3://b\"\ns3_endpoint = \"127.0.0.1:9000\"").unwrap();
        assert!(bad.apply(&mut ServeConfig::new("/".into())).unwrap_err().to_string().contains("http:// or https://"));
    }
}
