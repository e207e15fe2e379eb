//! Server settings: typed, validated, loadable from TOML.

use circus_core::ByteSize;
use circus_sched::{PolicyKind, SchedConfig};
use serde::Deserialize;
use std::{net::SocketAddr, path::PathBuf, time::Duration};

#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub root: PathBuf,
    pub listen: SocketAddr,
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
    /// Most bytes per second read from storage (`None`: as fast as it goes).
    pub read_rate: Option<u64>,
    /// Serve from this origin through the caching tier instead of `root`.
    pub origin: Option<crate::origin::OriginConfig>,
}

impl ServeConfig {
    pub fn new(root: PathBuf) -> Self {
        ServeConfig {
            root,
            listen: "127.0.0.1:8080".parse().expect("valid address"),
            sched: SchedConfig { cache_bytes: 256 << 20, ..SchedConfig::default() },
            max_connections: 10_000,
            max_header_bytes: 16 * 1024,
            header_timeout: Duration::from_secs(30),
            io_threads: 16,
            drain_timeout: Duration::from_secs(30),
            send_lowat: Some(128 * 1024),
            zero_copy: true,
            read_rate: None,
            origin: None,
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
    pub cache: Option<ByteSize>,
    pub policy: Option<PolicyKind>,
    pub block: Option<ByteSize>,
    pub queue: Option<u32>,
    pub active: Option<ByteSize>,
    pub leapfront: Option<f64>,
    pub threshold: Option<f64>,
    pub readahead: Option<u32>,
    pub max_connections: Option<usize>,
    pub max_header: Option<ByteSize>,
    pub header_timeout_secs: Option<u64>,
    pub io_threads: Option<usize>,
    pub drain_timeout_secs: Option<u64>,
    /// 0 leaves the system default.
    pub send_lowat: Option<ByteSize>,
    pub zero_copy: Option<bool>,
    /// Bytes per second; 0 removes the cap.
    pub read_rate: Option<ByteSize>,
    /// `http://host:port/`: serve this origin through the caching tier.
    pub origin: Option<String>,
    /// Unit of origin fetches (default 1MiB).
    pub origin_block: Option<ByteSize>,
    /// Origin blocks fetched ahead of the furthest reader (default 4).
    pub origin_readahead: Option<u32>,
    /// Seconds to wait for the origin's response head or next chunk (default 30).
    pub origin_timeout_secs: Option<u64>,
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
        set(&mut cfg.listen, self.listen);
        set(&mut cfg.max_connections, self.max_connections);
        set(&mut cfg.max_header_bytes, self.max_header.map(|b| b.0 as usize));
        set(&mut cfg.io_threads, self.io_threads);
        set(&mut cfg.header_timeout, self.header_timeout_secs.map(Duration::from_secs));
        set(&mut cfg.drain_timeout, self.drain_timeout_secs.map(Duration::from_secs));
        set(&mut cfg.zero_copy, self.zero_copy);
        if let Some(r) = self.read_rate {
            cfg.read_rate = Some(r.0).filter(|&v| v > 0);
        }
        if let Some(b) = self.send_lowat {
            cfg.send_lowat = u32::try_from(b.0).ok().filter(|&v| v > 0);
        }
        if let Some(url) = &self.origin {
            let uri: http::Uri = url.parse().map_err(|e| ConfigError::Origin(format!("{url}: {e}")))?;
            if uri.scheme_str() != Some("http") || uri.authority().is_none() {
                return Err(ConfigError::Origin(format!(
                    "{url}: give an http://host:port/ URL (https is not supported yet)"
                )));
            }
            cfg.origin = Some(crate::origin::OriginConfig::new(uri));
        }
        if let Some(o) = cfg.origin.as_mut() {
            if let Some(b) = self.origin_block {
                o.block_size = u32::try_from(b.0).ok().filter(|&v| v > 0).ok_or(ConfigError::BlockTooLarge(b))?;
            }
            set(&mut o.readahead, self.origin_readahead);
            set(&mut o.timeout, self.origin_timeout_secs.map(Duration::from_secs));
            crate::origin::split_budget(o, cfg.sched.cache_bytes).map_err(ConfigError::Origin)?;
        }
        cfg.sched.validate()?;
        Ok(())
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
        assert_eq!((origin.url.to_string().as_str(), origin.block_size), ("http://127.0.0.1:9000/files", 256 << 10));
        assert_eq!(origin.timeout, Duration::from_secs(5));
        let tiny = FileConfig::parse("origin = \"http://x/\"\ncache = \"4MiB\"")
            .unwrap()
            .apply(&mut ServeConfig::new("/".into()));
        assert!(tiny.unwrap_err().to_string().contains("give --cache 10485760 or more"));
        let https = FileConfig::parse("origin = \"https://x/\"").unwrap().apply(&mut ServeConfig::new("/".into()));
        assert!(https.unwrap_err().to_string().contains("http://host:port/"));
        let bytes = FileConfig::parse("cache = 1048576").unwrap();
        assert_eq!(bytes.cache, Some(ByteSize(1 << 20)));
    }
}
