//! What a run measured, as JSON and as a table for people.

use serde::Serialize;
use std::fmt::Write as _;

#[derive(Debug, Clone, Serialize)]
pub struct SimReport {
    pub policy: String,
    pub links: String,
    pub load: f64,
    pub files: u32,
    pub file_size: u64,
    pub block_size: u32,
    pub cache_bytes: u64,
    /// Concurrent download slots (closed loop: a finished download is
    /// replaced at once by a new one).
    pub clients: usize,
    pub seed: u64,
    pub warmup_s: f64,
    pub measured_s: f64,
    /// Offered demand: load times the server link, bytes per second.
    pub offered_bytes_per_s: f64,
    pub net_bytes_per_s: f64,
    pub disk_bytes_per_s: f64,
    /// Disk bytes read / bytes sent, over the measured interval.
    pub miss_ratio: f64,
    /// Disk bytes read / file size: for a cohort run, how many times the
    /// file was read to serve everybody.
    pub amplification: f64,
    /// For a cohort of plain (in-order) downloads only: the fewest times
    /// any cache of this size could have read the file for them had each
    /// gone at its link rate from when it started (see [`crate::bound`]).
    /// Queueing at the disk or the server link shifts when clients read,
    /// as pacing would, so a run can come in a little below it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub amplification_bound: Option<f64>,
    /// The share of downloads that were plain HTTP.
    pub plain_share: f64,
    pub download_mean_s: f64,
    pub download_p95_s: f64,
    /// File size / client link rate, averaged over the completed downloads.
    pub download_ideal_s: f64,
    pub clients_completed: u64,
    pub clients_failed: u64,
    pub per_class: Vec<ClassReport>,
    pub disk_busy_fraction: f64,
    /// Scheduler totals over the whole run, warm-up included.
    pub scheduler: circus_sched::Counters,
    pub events: u64,
    pub wall_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ClassReport {
    pub class: String,
    pub completed: u64,
    pub download_mean_s: f64,
    pub download_ideal_s: f64,
}

impl SimReport {
    /// Network throughput as a fraction of the offered load.
    pub fn net_vs_offered(&self) -> f64 {
        self.net_bytes_per_s / self.offered_bytes_per_s
    }

    /// Mean download time over ideal (1.0 is perfect).
    pub fn slowdown(&self) -> f64 {
        self.download_mean_s / self.download_ideal_s
    }

    pub fn table(&self) -> String {
        let mb = |b: f64| format!("{:.2} MB/s", b / 1e6);
        let rows: Vec<(&str, String)> = vec![
            ("policy", self.policy.clone()),
            ("clients", format!("{} x {} concurrent, load {:.2}", self.clients, self.links, self.load)),
            ("files", format!("{} x {}", self.files, circus_core::ByteSize(self.file_size))),
            ("measured", format!("{:.0} s after {:.0} s warm-up", self.measured_s, self.warmup_s)),
            ("offered", mb(self.offered_bytes_per_s)),
            ("network", format!("{} ({:.1}% of offered)", mb(self.net_bytes_per_s), 100.0 * self.net_vs_offered())),
            ("disk", format!("{} (busy {:.0}%)", mb(self.disk_bytes_per_s), 100.0 * self.disk_busy_fraction)),
            ("miss ratio", format!("{:.4} (file read {:.2} times)", self.miss_ratio, self.amplification)),
            ("plain", format!("{:.0}% of downloads in order", 100.0 * self.plain_share)),
            (
                "download",
                format!(
                    "mean {:.1} s, p95 {:.1} s, ideal {:.1} s ({:+.1}%)",
                    self.download_mean_s,
                    self.download_p95_s,
                    self.download_ideal_s,
                    100.0 * (self.slowdown() - 1.0)
                ),
            ),
            ("completed", format!("{} ({} failed)", self.clients_completed, self.clients_failed)),
            (
                "reads",
                format!(
                    "{} lead, {} private, {} read-ahead; {} hits, {} joined reads",
                    self.scheduler.lead_reads,
                    self.scheduler.private_reads,
                    self.scheduler.readahead_reads,
                    self.scheduler.hits,
                    self.scheduler.joined_reads
                ),
            ),
            ("wall time", format!("{:.2} s, {} events", self.wall_s, self.events)),
        ];
        let mut rows = rows;
        if let Some(bound) = self.amplification_bound {
            rows.insert(8, ("best cache", format!("file read {bound:.2} times (Belady, offline)")));
        }
        let mut out = String::new();
        for (k, v) in rows {
            let _ = writeln!(out, "{k:>11}  {v}");
        }
        for c in &self.per_class {
            let _ = writeln!(
                out,
                "{:>11}  {} done, mean {:.1} s, ideal {:.1} s",
                c.class, c.completed, c.download_mean_s, c.download_ideal_s
            );
        }
        out
    }
}
