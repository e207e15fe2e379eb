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
        }
    }
}

/// The TOML file: every key optional, unknown keys rejected.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub listen: Option<SocketAddr>,
    pub cache: Option<String>,
    pub policy: Option<PolicyKind>,
    pub block: Option<String>,
    pub queue: Option<u32>,
    pub active: Option<String>,
    pub leapfront: Option<f64>,
    pub threshold: Option<f64>,
    pub readahead: Option<u32>,
    pub max_connections: Option<usize>,
    pub max_header: Option<String>,
    pub header_timeout_secs: Option<u64>,
    pub io_threads: Option<usize>,
    pub drain_timeout_secs: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config file: {0}")]
    Toml(#[from] toml::de::Error),
    #[error("config key {key}: {source}")]
    Unit { key: &'static str, source: circus_core::UnitError },
    #[error(transparent)]
    Sched(#[from] circus_sched::ConfigError),
}

impl FileConfig {
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        Ok(toml::from_str(text)?)
    }

    /// Overlays the file's settings on `cfg`.
    pub fn apply(&self, cfg: &mut ServeConfig) -> Result<(), ConfigError> {
        let size = |key, v: &Option<String>| -> Result<Option<u64>, ConfigError> {
            v.as_deref()
                .map(|s| ByteSize::parse(s).map(|b| b.0).map_err(|source| ConfigError::Unit { key, source }))
                .transpose()
        };
        if let Some(v) = self.listen {
            cfg.listen = v;
        }
        if let Some(v) = size("cache", &self.cache)? {
            cfg.sched.cache_bytes = v;
        }
        if let Some(v) = self.policy {
            cfg.sched.policy = v;
        }
        if let Some(v) = size("block", &self.block)? {
            cfg.sched.block_size = u32::try_from(v).unwrap_or(u32::MAX);
        }
        if let Some(v) = size("active", &self.active)? {
            cfg.sched.active_len = v;
        }
        if let Some(v) = size("max_header", &self.max_header)? {
            cfg.max_header_bytes = v as usize;
        }
        let s = &mut cfg.sched;
        s.queue_len = self.queue.unwrap_or(s.queue_len);
        s.leapfront = self.leapfront.unwrap_or(s.leapfront);
        s.threshold = self.threshold.unwrap_or(s.threshold);
        s.readahead = self.readahead.unwrap_or(s.readahead);
        cfg.max_connections = self.max_connections.unwrap_or(cfg.max_connections);
        cfg.io_threads = self.io_threads.unwrap_or(cfg.io_threads);
        if let Some(v) = self.header_timeout_secs {
            cfg.header_timeout = Duration::from_secs(v);
        }
        if let Some(v) = self.drain_timeout_secs {
            cfg.drain_timeout = Duration::from_secs(v);
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
        let bad = FileConfig::parse("block = \"huge\"").unwrap().apply(&mut cfg).unwrap_err();
        assert!(bad.to_string().contains("block"), "{bad}");
    }
}
