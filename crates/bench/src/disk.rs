//! A one-arm disk model: the scarce resource of the paper's experiments.
//!
//! Pure: time is passed in (seconds since the model's epoch) and nothing
//! here sleeps or reads. Reads are served one at a time in arrival order
//! (FIFO, one arm). A read that does not start where the previous read on
//! the same file ended pays the positioning time; every read pays its
//! length over the media rate. The FUSE file system in [`crate::fusedisk`]
//! sleeps until the completion time this model returns, so every server
//! reading through it sees the same disk, and the model counts the bytes
//! each run read.

/// Disk parameters. The paper's disk: 5 ms positioning, 50 MB/s media rate,
/// which gives about 10.4 MB/s for scattered 64 KiB reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DiskParams {
    /// Seconds to position the arm for a read that is not contiguous with the previous one.
    pub positioning_s: f64,
    /// Media transfer rate, bytes per second.
    pub rate: f64,
}

impl Default for DiskParams {
    fn default() -> Self {
        DiskParams { positioning_s: 0.005, rate: 50e6 }
    }
}

/// Counters, cumulative since the model was made.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DiskStats {
    pub bytes_read: u64,
    pub reads: u64,
    /// Reads that paid the positioning time.
    pub seeks: u64,
    /// Seconds the arm was busy.
    pub busy_s: f64,
}

#[derive(Debug, Clone)]
pub struct DiskModel {
    params: DiskParams,
    /// (file id, offset) just past the last read: where the head is.
    head: Option<(u64, u64)>,
    /// When the arm finishes the reads accepted so far.
    free_at: f64,
    stats: DiskStats,
}

impl DiskModel {
    pub fn new(params: DiskParams) -> Self {
        DiskModel { params, head: None, free_at: 0.0, stats: DiskStats::default() }
    }

    /// Accepts a read of `len` bytes at `offset` of file `file`, arriving at
    /// `now`; returns when it completes. Reads queue behind each other.
    pub fn read(&mut self, now: f64, file: u64, offset: u64, len: u64) -> f64 {
        let contiguous = self.head == Some((file, offset));
        let mut service = len as f64 / self.params.rate;
        if !contiguous {
            service += self.params.positioning_s;
            self.stats.seeks += 1;
        }
        let start = self.free_at.max(now);
        self.free_at = start + service;
        self.head = Some((file, offset + len));
        self.stats.bytes_read += len;
        self.stats.reads += 1;
        self.stats.busy_s += service;
        self.free_at
    }

    pub fn stats(&self) -> DiskStats {
        self.stats
    }

    pub fn params(&self) -> DiskParams {
        self.params
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K64: u64 = 64 * 1024;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn first_read_positions_then_contiguous_reads_stream() {
        let mut d = DiskModel::new(DiskParams::default());
        let t1 = d.read(0.0, 1, 0, K64);
        assert!(close(t1, 0.005 + K64 as f64 / 50e6));
        let t2 = d.read(t1, 1, K64, K64);
        assert!(close(t2 - t1, K64 as f64 / 50e6), "contiguous read pays no positioning");
        assert_eq!(d.stats().seeks, 1);
        assert_eq!(d.stats().bytes_read, 2 * K64);
    }

    #[test]
    fn interleaved_streams_pay_positioning_every_read() {
        let cases = [
            // (name, reads as (file, offset)), expected seeks
            ("two streams on one file", vec![(1, 0), (1, 10 * K64), (1, K64), (1, 11 * K64)], 4),
            ("same offset, other file", vec![(1, 0), (2, K64)], 2),
            ("one stream", vec![(1, 0), (1, K64), (1, 2 * K64)], 1),
        ];
        for (name, reads, seeks) in cases {
            let mut d = DiskModel::new(DiskParams::default());
            for (f, off) in reads {
                d.read(0.0, f, off, K64);
            }
            assert_eq!(d.stats().seeks, seeks, "{name}");
        }
    }

    #[test]
    fn one_arm_queues_reads_fifo() {
        let p = DiskParams { positioning_s: 0.01, rate: 1e6 };
        let mut d = DiskModel::new(p);
        // Three scattered reads arriving together finish one after another.
        let a = d.read(0.0, 1, 0, 1000);
        let b = d.read(0.0, 1, 50_000, 1000);
        let c = d.read(0.0, 1, 90_000, 1000);
        assert!(close(a, 0.011) && close(b, 0.022) && close(c, 0.033));
        // An idle arm starts a late read at its arrival.
        assert!(close(d.read(1.0, 1, 91_000, 1000), 1.001));
        assert!(close(d.stats().busy_s, 0.034));
    }

    #[test]
    fn scattered_64k_reads_give_the_papers_disk_rate() {
        let mut d = DiskModel::new(DiskParams::default());
        let mut t = 0.0;
        for i in 0..100u64 {
            t = d.read(t, 1, (i * 7 % 100) * 3 * K64, K64);
        }
        let rate = 100.0 * K64 as f64 / t;
        assert!((rate - 10.4e6).abs() < 0.1e6, "{rate}");
    }
}
