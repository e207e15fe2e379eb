//! What one simulation run models.

use crate::{disk::DiskModel, link::LinkMix, link::TcpModel};
use circus_core::BitRate;
use circus_sched::SchedConfig;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimConfig {
    pub sched: SchedConfig,
    /// Client link classes, drawn with equal probability per download.
    pub links: LinkMix,
    /// Offered client demand as a fraction of the server link.
    pub load: f64,
    /// Distinct files, each requested with equal probability.
    pub files: u32,
    pub file_size: u64,
    pub server_link: BitRate,
    pub tcp: TcpModel,
    pub disk: DiskModel,
    pub seed: u64,
    /// Simulated seconds before measuring (default: one ideal download of
    /// the slowest class, so every client slot has cycled once).
    pub warmup_secs: Option<f64>,
    /// Simulated seconds measured after warm-up (default: two ideal
    /// downloads of the slowest class).
    pub measure_secs: Option<f64>,
    /// Instead of holding a load: this many clients start together (within
    /// half a second), nobody replaces them, and the run lasts until all
    /// finish. Measures storage read amplification of a release-day crowd.
    pub cohort: Option<usize>,
    /// The share of downloads that are plain HTTP (in order, front to back,
    /// like curl or a browser); the rest are native clients that take
    /// blocks in any order.
    #[serde(default)]
    pub plain_share: f64,
}

impl Default for SimConfig {
    /// The paper's setting: one 512 MiB file, 1 Gbit/s server link, 40%
    /// load; the 64 MiB cache is our assumption (the paper's was not
    /// recovered).
    fn default() -> Self {
        Self {
            sched: SchedConfig::default(),
            links: "10T".parse().expect("valid mix"),
            load: 0.4,
            files: 1,
            file_size: 512 << 20,
            server_link: BitRate(1e9),
            tcp: TcpModel::default(),
            disk: DiskModel::default(),
            seed: 1,
            warmup_secs: None,
            measure_secs: None,
            cohort: None,
            plain_share: 0.0,
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimConfigError {
    #[error(transparent)]
    Sched(#[from] circus_sched::ConfigError),
    #[error("load must be above 0 and at most 4 (times the server link), got {0}")]
    Load(f64),
    #[error("need at least one file")]
    Files,
    #[error("file size must be positive")]
    FileSize,
    #[error("loss must be within 0.0..1.0, got {0}")]
    Loss(f64),
    #[error("the disk model needs at least one disk, a non-negative positioning time and a positive media rate")]
    Disk,
    #[error("warm-up and measured durations must be positive")]
    Duration,
    #[error("the plain share must be within 0.0..=1.0, got {0}")]
    PlainShare(f64),
}

impl SimConfig {
    pub fn validate(&self) -> Result<(), SimConfigError> {
        self.sched.validate()?;
        if !(self.load > 0.0 && self.load <= 4.0) {
            return Err(SimConfigError::Load(self.load));
        }
        if self.files == 0 {
            return Err(SimConfigError::Files);
        }
        if self.file_size == 0 {
            return Err(SimConfigError::FileSize);
        }
        if !(0.0..1.0).contains(&self.tcp.loss) {
            return Err(SimConfigError::Loss(self.tcp.loss));
        }
        let d = &self.disk;
        if d.disks == 0 || d.positioning_secs < 0.0 || d.media_bytes_per_sec <= 0.0 {
            return Err(SimConfigError::Disk);
        }
        if self.warmup_secs.is_some_and(|s| s < 0.0) || self.measure_secs.is_some_and(|s| s <= 0.0) {
            return Err(SimConfigError::Duration);
        }
        if !(0.0..=1.0).contains(&self.plain_share) {
            return Err(SimConfigError::PlainShare(self.plain_share));
        }
        Ok(())
    }

    /// Concurrent downloads that offer `load` times the server link.
    ///
    /// Each download draws its class with equal probability, so each class
    /// brings an equal share of the bytes demanded, and a slot is held for a
    /// time inversely proportional to its rate. By Little's law the slots
    /// needed are `load * link * mean(1 / rate)`, the closed-loop equivalent
    /// of open arrivals at `load * link / file_size` per second.
    pub fn clients(&self) -> usize {
        let demand = self.load * self.server_link.bytes_per_sec();
        (demand * self.links.mean_secs_per_byte()).round().max(1.0) as usize
    }

    /// Seconds to download one file at the slowest class's sustained TCP
    /// rate (its link rate unless RTT and loss lower it).
    pub fn slowest_ideal_secs(&self) -> f64 {
        self.file_size as f64 / self.tcp.rate(self.links.slowest().rate().bytes_per_sec())
    }

    pub fn warmup(&self) -> f64 {
        if self.cohort.is_some() {
            return 0.0;
        }
        self.warmup_secs.unwrap_or_else(|| self.slowest_ideal_secs())
    }

    /// A cohort run measures until everyone finished, bounded at 20 ideal
    /// downloads of the slowest class so a stuck scheduler cannot hang it.
    pub fn measure(&self) -> f64 {
        if self.cohort.is_some() {
            return self.measure_secs.unwrap_or(20.0 * self.slowest_ideal_secs());
        }
        self.measure_secs.unwrap_or_else(|| 2.0 * self.slowest_ideal_secs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_share_outside_zero_to_one_is_refused() {
        for bad in [-0.1, 1.5, f64::NAN] {
            let cfg = SimConfig { plain_share: bad, ..SimConfig::default() };
            assert!(matches!(cfg.validate(), Err(SimConfigError::PlainShare(_))), "{bad} accepted");
        }
        assert!(SimConfig { plain_share: 1.0, ..SimConfig::default() }.validate().is_ok());
    }
}
