//! Scheduler parameters, with the Circus paper's defaults.

use serde::{Deserialize, Serialize};

/// Which block-selection policy runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyKind {
    /// Opportunistic block reordering around a shared active region.
    #[default]
    Circus,
    /// Each client receives its blocks in order; a conventional server with an
    /// LRU buffer cache. Equal to Circus with region advancement off.
    Sequential,
}

impl std::str::FromStr for PolicyKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "circus" => Ok(Self::Circus),
            "sequential" => Ok(Self::Sequential),
            other => Err(format!("unknown policy {other:?}: use circus or sequential")),
        }
    }
}

/// What the circus policy gives up when the clients of a file differ in
/// speed and the file is larger than memory: either the slower clients'
/// missing blocks are read again, or the faster clients wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Favor {
    /// Every client at its own speed; blocks a slower client missed are read
    /// again on a later pass (rules C1-C3).
    #[default]
    Speed,
    /// Each block stays until every native client of its file has taken it,
    /// so the file is read about once however the speeds differ; the active
    /// region moves at the pace of the file's slowest native client, and
    /// faster ones wait for it (rule C13). Plain (in-order) downloads of a
    /// file are paced to stay within memory of each other (rule C15). For
    /// storage or an origin whose reads are the scarce or billed resource.
    Storage,
}

impl std::str::FromStr for Favor {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "speed" => Ok(Self::Speed),
            "storage" => Ok(Self::Storage),
            other => Err(format!("unknown favor {other:?}: use speed or storage")),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchedConfig {
    pub policy: PolicyKind,
    /// Unit of storage reads and network sends, in bytes (paper: 64 KiB).
    pub block_size: u32,
    /// Blocks queued per client ahead of its socket (paper: 5).
    pub queue_len: u32,
    /// Hard budget for resident and in-flight blocks, in bytes. Blocks pinned
    /// by queued sends count.
    pub cache_bytes: u64,
    /// Target length of a file's active region, in bytes (paper: 16 MiB).
    pub active_len: u64,
    /// Leapfront distance as a multiple of the active length (paper: 1.0).
    pub leapfront: f64,
    /// Fraction of its file a client must hold before it may read outside
    /// the active region on its own (paper: 0.75).
    pub threshold: f64,
    /// Blocks fetched per storage read, counting the demanded one. 1 reads
    /// exactly what a client asked for; more read ahead sequentially.
    pub readahead: u32,
    /// Speed (each client at its pace) or storage (each block read once for
    /// all native clients; the region waits for the slowest). Circus only.
    #[serde(default)]
    pub favor: Favor,
}

/// Under [`Favor::Storage`], a client that has had a resident block queued
/// for this long without sending anything (a stalled or very slow socket:
/// under one block in two seconds) stops holding its file's region (C13).
pub const HOLD_STALL_NANOS: u64 = 2_000_000_000;

/// Blocks an in-order client may have queued when those past `queue_len`
/// are resident (C12): thirty-two 64 KiB blocks make a 2 MiB run (nginx's
/// `sendfile_max_chunk`), one `sendfile` and one round trip to the
/// scheduler instead of six or seven.
pub const IN_ORDER_HIT_QUEUE: u32 = 32;

/// Longest read-ahead run of an in-order client alone on its file (C17),
/// unless `readahead` asks for more: 512 KiB, eight 64 KiB blocks, four
/// times the kernel's default read-ahead window. With one positioning per
/// run instead of per block, a disk serves several times as many plain
/// downloads of distinct files.
pub const IN_ORDER_RUN_BYTES: u64 = 512 * 1024;

impl SchedConfig {
    /// Most blocks the scheduler ever has out for one client (sends it
    /// asked for and not yet reported sent).
    pub fn max_queued(&self) -> u32 {
        self.queue_len.max(IN_ORDER_HIT_QUEUE)
    }
}

impl Default for SchedConfig {
    fn default() -> Self {
        Self {
            policy: PolicyKind::Circus,
            block_size: 64 * 1024,
            queue_len: 5,
            cache_bytes: 64 << 20,
            active_len: 16 << 20,
            leapfront: 1.0,
            threshold: 0.75,
            readahead: 1,
            favor: Favor::Speed,
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("block size must be between 512 bytes and 64 MiB, got {0}")]
    BlockSize(u32),
    #[error("queue length must be at least 1, got {0}")]
    QueueLen(u32),
    #[error("cache of {cache} bytes cannot hold even {blocks} blocks of {block} bytes: raise --cache or lower --block")]
    CacheTooSmall { cache: u64, block: u32, blocks: u32 },
    #[error("active length must be at least one block")]
    ActiveLen,
    #[error("leapfront factor must be at least 1.0 (the region must be able to slide), got {0}")]
    Leapfront(f64),
    #[error("client threshold must be within 0.0..=1.0, got {0}")]
    Threshold(f64),
    #[error("readahead must be between 1 and 64 blocks, got {0}")]
    Readahead(u32),
}

impl SchedConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(512..=64 << 20).contains(&self.block_size) {
            return Err(ConfigError::BlockSize(self.block_size));
        }
        if self.queue_len == 0 {
            return Err(ConfigError::QueueLen(self.queue_len));
        }
        // Two blocks: one being sent while the next is read.
        if self.cache_bytes < 2 * u64::from(self.block_size) {
            return Err(ConfigError::CacheTooSmall { cache: self.cache_bytes, block: self.block_size, blocks: 2 });
        }
        if self.active_len < u64::from(self.block_size) {
            return Err(ConfigError::ActiveLen);
        }
        if !(self.leapfront >= 1.0 && self.leapfront.is_finite()) {
            return Err(ConfigError::Leapfront(self.leapfront));
        }
        if !(0.0..=1.0).contains(&self.threshold) {
            return Err(ConfigError::Threshold(self.threshold));
        }
        if !(1..=64).contains(&self.readahead) {
            return Err(ConfigError::Readahead(self.readahead));
        }
        Ok(())
    }

    pub(crate) fn active_blocks(&self) -> u32 {
        (self.active_len / u64::from(self.block_size)).clamp(1, u64::from(u32::MAX)) as u32
    }

    pub(crate) fn cache_blocks(&self) -> u64 {
        self.cache_bytes / u64::from(self.block_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_values_are_named() {
        assert_eq!(SchedConfig::default().validate(), Ok(()));
        let bad = SchedConfig { cache_bytes: 1000, ..Default::default() };
        assert!(bad.validate().unwrap_err().to_string().contains("raise --cache"));
        let bad = SchedConfig { threshold: 1.5, ..Default::default() };
        assert_eq!(bad.validate(), Err(ConfigError::Threshold(1.5)));
        assert_eq!("sequential".parse(), Ok(PolicyKind::Sequential));
        assert!("fifo".parse::<PolicyKind>().is_err());
        assert_eq!("storage".parse(), Ok(Favor::Storage));
        assert!("latency".parse::<Favor>().unwrap_err().contains("speed or storage"));
    }
}
