//! The paper's experiments, scaled to finish on a 2-core machine.
//!
//! Scaling (documented in docs/results/bench.md): the link rates, the server
//! link (1 Gbit/s), the load, the 64 KiB block and the disk (5 ms
//! positioning, 50 MB/s media rate) are the paper's. The file is 16 times
//! smaller (32 MiB instead of 512 MiB) so that downloads complete within a
//! one-minute window, and memory shrinks with it: 4 MiB instead of the
//! simulator's 64 MiB, so the file is eight times the cache as there. The
//! active region is 2 MiB rather than 16/16 = 1 MiB, so that it still holds
//! more than the blocks queued for its clients. Sessions 2-5 used 12 MiB,
//! on the belief that 4 MiB could not hold the blocks queued for 24 clients;
//! circus holds them (most queued blocks are the same region blocks), and
//! the `memory` sweep shows what the choice does to every server. The client links are the
//! paper's sensitivity mix, 10T and T3 with equal probability: a T1 client
//! needs 174 s for 32 MiB, longer than a run. Pure data: no I/O here.

/// A server under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Server {
    Circus,
    Sequential,
    NginxSendfile,
    NginxDirectio,
}

impl Server {
    pub const ALL: [Server; 4] = [Server::Circus, Server::Sequential, Server::NginxSendfile, Server::NginxDirectio];

    pub fn name(self) -> &'static str {
        match self {
            Server::Circus => "circus",
            Server::Sequential => "sequential",
            Server::NginxSendfile => "nginx-sendfile",
            Server::NginxDirectio => "nginx-directio",
        }
    }

    /// A circus process (native clients) rather than nginx (plain HTTP clients).
    pub fn is_circus(self) -> bool {
        matches!(self, Server::Circus | Server::Sequential)
    }
}

/// One client link class: the paper's names and rates.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    pub name: &'static str,
    pub bits_per_s: f64,
}

pub const T1: Link = Link { name: "T1", bits_per_s: 1_544_000.0 };
pub const TEN_T: Link = Link { name: "10T", bits_per_s: 10_000_000.0 };
pub const T3: Link = Link { name: "T3", bits_per_s: 44_736_000.0 };

/// One measured configuration (the sim's flags of the same name).
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// The swept value, for tables and plots.
    pub x: f64,
    pub load: f64,
    pub links: Vec<Link>,
    pub server_link_bps: f64,
    pub file_size: u64,
    pub files: u32,
    pub cache: u64,
    pub active: u64,
    pub block: u64,
    pub queue: u32,
    pub threshold: f64,
    pub leapfront: f64,
    /// Round-trip time added to every client path (NFQUEUE delay line).
    pub rtt_s: f64,
    /// Packet loss probability on every client path (iptables statistic).
    pub loss: f64,
    pub warmup_s: f64,
    pub measure_s: f64,
    /// Every client starts together and downloads once; measured from the
    /// start until the last finishes (at most `measure_s`).
    pub cohort: bool,
}

const MIB: u64 = 1 << 20;

impl Default for Point {
    /// The scaled paper defaults at 40% load.
    fn default() -> Self {
        Point {
            x: 0.4,
            load: 0.4,
            links: vec![TEN_T, T3],
            server_link_bps: 1e9,
            file_size: 32 * MIB,
            files: 1,
            cache: 4 * MIB,
            active: 2 * MIB,
            block: 64 * 1024,
            queue: 5,
            threshold: 0.75,
            leapfront: 1.0,
            rtt_s: 0.0,
            loss: 0.0,
            warmup_s: 20.0,
            measure_s: 40.0,
            cohort: false,
        }
    }
}

impl Point {
    /// Concurrent downloads offering `load` times the server link, as the
    /// simulator sizes them: `load * link * mean(1 / rate)` (each download
    /// draws its class with equal probability; a slot is held for a time
    /// inversely proportional to the rate).
    pub fn clients(&self) -> usize {
        let demand = self.load * self.server_link_bps / 8.0;
        let mean_s_per_byte = self.links.iter().map(|l| 8.0 / l.bits_per_s).sum::<f64>() / self.links.len() as f64;
        (demand * mean_s_per_byte).round().max(1.0) as usize
    }

    /// First downloads start at random over this many seconds, as in the
    /// simulator: one download time of the slowest class (half a second for
    /// a cohort), so the run does not start in lock-step.
    pub fn stagger_s(&self) -> f64 {
        if self.cohort {
            return 0.5;
        }
        let slowest = self.links.iter().map(|l| l.bits_per_s).fold(f64::INFINITY, f64::min);
        self.file_size as f64 * 8.0 / slowest
    }

    pub fn link_spec(&self) -> String {
        self.links.iter().map(|l| l.name).collect::<Vec<_>>().join("+")
    }

    /// The scheduler settings of this point, as flags both `circus serve`
    /// and `circus sim` take.
    fn sched_flags(&self, policy: &str) -> Vec<(&'static str, String)> {
        vec![
            ("--policy", policy.to_string()),
            ("--cache", self.cache.to_string()),
            ("--block", self.block.to_string()),
            ("--queue", self.queue.to_string()),
            ("--active", self.active.to_string()),
            ("--threshold", self.threshold.to_string()),
            ("--leapfront", self.leapfront.to_string()),
        ]
    }

    /// `circus serve` flags for this point.
    pub fn serve_args(&self, policy: &str) -> Vec<String> {
        self.sched_flags(policy).into_iter().flat_map(|(k, v)| [k.to_string(), v]).collect()
    }

    /// `circus sim` flags predicting this point for `policy`.
    pub fn sim_args(&self, policy: &str) -> Vec<String> {
        let mut args = vec!["sim".to_string(), "--json".into(), "--link".into(), self.link_spec()];
        let mut flags = self.sched_flags(policy);
        flags.extend([
            ("--load", self.load.to_string()),
            ("--files", self.files.to_string()),
            ("--file-size", self.file_size.to_string()),
            ("--server-link", format!("{}bit", self.server_link_bps)),
            ("--rtt", format!("{}ms", self.rtt_s * 1e3)),
            ("--loss", self.loss.to_string()),
            ("--warmup", format!("{}s", self.warmup_s)),
            ("--measure", format!("{}s", self.measure_s)),
        ]);
        for (k, v) in flags {
            args.extend([k.to_string(), v]);
        }
        if self.cohort {
            args.extend(["--cohort".into(), self.clients().to_string()]);
        }
        args
    }
}

/// A named experiment: points times servers.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: &'static str,
    pub title: &'static str,
    pub x_label: &'static str,
    pub log2_x: bool,
    pub servers: Vec<Server>,
    pub points: Vec<Point>,
}

/// Names accepted by `circus bench`, with what they mirror.
pub const NAMES: &[(&str, &str)] = &[
    ("mixed40", "the target: 10T+T3 at 40% load, circus vs sequential vs nginx (sendfile, directio)"),
    ("cohort40", "mixed40's 24 clients starting together, once each: storage read amplification"),
    ("quick", "mixed40 shrunk for CI: 16 MiB file, 6 s warm-up, 12 s measured"),
    ("load", "Figures 8-10: load 0.1-0.6, 10T+T3"),
    ("file-size", "Figure 11: 16, 32, 48 MiB"),
    ("files", "Figure 12: 1, 2, 4 files"),
    ("delay-loss", "Figure 13: T3 at 30% load; x = 0 base, 1 RTT +75 ms, 2 loss 10%, 3 both"),
    ("block-size", "Figure 14: 16, 64, 256 KiB blocks"),
    ("queue", "Figure 15: queue 1, 5, 20 blocks"),
    ("threshold", "Figure 16: client threshold 0.25, 0.75, 1"),
    ("leapfront", "Figure 17: leapfront 1, 2, 4"),
    ("rtt", "not in the paper: added RTT 0, 10, 40, 80 ms for native downloads, 10T+T3 at 40% load"),
    ("memory", "not in the paper: cache 4, 8, 16 MiB for circus, sequential and nginx sendfile"),
];

/// A sweep point: shorter windows so two servers times four points fit in five minutes.
fn sweep(x: f64, f: impl FnOnce(&mut Point)) -> Point {
    let mut p = Point { x, warmup_s: 10.0, measure_s: 20.0, ..Point::default() };
    f(&mut p);
    p
}

pub fn scenario(name: &str) -> Option<Scenario> {
    let both = vec![Server::Circus, Server::Sequential];
    let s = |name, title, x_label, log2_x, servers, points| Scenario { name, title, x_label, log2_x, servers, points };
    Some(match name {
        "mixed40" => s("mixed40", "10T+T3 at 40% load", "load", false, Server::ALL.to_vec(), vec![Point::default()]),
        "cohort40" => s(
            "cohort40",
            "10T+T3 cohort of 24",
            "load",
            false,
            Server::ALL.to_vec(),
            vec![Point { cohort: true, warmup_s: 0.0, measure_s: 45.0, ..Point::default() }],
        ),
        "quick" => s(
            "quick",
            "10T+T3 at 40% load (quick)",
            "load",
            false,
            Server::ALL.to_vec(),
            vec![Point { file_size: 16 * MIB, cache: 8 * MIB, warmup_s: 6.0, measure_s: 12.0, ..Point::default() }],
        ),
        "load" => s(
            "load",
            "Load sweep, 10T+T3",
            "load",
            false,
            both,
            [0.1, 0.2, 0.4, 0.6].map(|l| sweep(l, |p| p.load = l)).to_vec(),
        ),
        "file-size" => s(
            "file-size",
            "File size, 10T+T3, 40% load",
            "file size (MiB)",
            false,
            both,
            [16, 32, 48].map(|m| sweep(m as f64, |p| p.file_size = m * MIB)).to_vec(),
        ),
        "files" => s(
            "files",
            "Number of files, 10T+T3, 40% load",
            "files",
            true,
            both,
            [1, 2, 4].map(|n| sweep(n as f64, |p| p.files = n)).to_vec(),
        ),
        "delay-loss" => s(
            "delay-loss",
            "T3 at 30% load, delay and loss",
            "0 base, 1 +75 ms RTT, 2 10% loss, 3 both",
            false,
            both,
            [(0.0, 0.0), (0.075, 0.0), (0.0, 0.1), (0.075, 0.1)]
                .into_iter()
                .enumerate()
                .map(|(i, (rtt, loss))| {
                    sweep(i as f64, |p| {
                        p.links = vec![T3];
                        p.load = 0.3;
                        p.rtt_s = rtt;
                        p.loss = loss;
                    })
                })
                .collect(),
        ),
        "block-size" => s(
            "block-size",
            "Block size, 10T+T3, 40% load",
            "block size (KiB)",
            true,
            both,
            [16, 64, 256].map(|k| sweep(k as f64, |p| p.block = k * 1024)).to_vec(),
        ),
        "queue" => s(
            "queue",
            "Queue length, 10T+T3, 40% load",
            "queue (blocks)",
            true,
            vec![Server::Circus],
            [1, 5, 20].map(|q| sweep(q as f64, |p| p.queue = q)).to_vec(),
        ),
        "threshold" => s(
            "threshold",
            "Client threshold, 10T+T3, 40% load",
            "threshold",
            false,
            vec![Server::Circus],
            [0.25, 0.75, 1.0].map(|t| sweep(t, |p| p.threshold = t)).to_vec(),
        ),
        "leapfront" => s(
            "leapfront",
            "Leapfront factor, 10T+T3, 40% load",
            "leapfront",
            true,
            vec![Server::Circus],
            [1.0, 2.0, 4.0].map(|l| sweep(l, |p| p.leapfront = l)).to_vec(),
        ),
        "memory" => s(
            "memory",
            "Server memory, 10T+T3, 40% load",
            "cache (MiB)",
            true,
            vec![Server::Circus, Server::Sequential, Server::NginxSendfile],
            // Three servers times three points: a shorter warm-up keeps it within five minutes.
            [4, 8, 16]
                .map(|m| {
                    sweep(m as f64, |p| {
                        p.cache = m * MIB;
                        p.warmup_s = 8.0;
                    })
                })
                .to_vec(),
        ),
        "rtt" => s(
            "rtt",
            "Added round-trip time, 10T+T3, 40% load",
            "added RTT (ms)",
            false,
            both,
            // Up to a bandwidth-delay product (T3 at 80 ms: 447 KB) above a
            // client's queue of 5 blocks (320 KiB).
            [0.0, 10.0, 40.0, 80.0].map(|ms| sweep(ms, |p| p.rtt_s = ms / 1e3)).to_vec(),
        ),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_match_the_simulators_sizing() {
        // The sim reports 24 clients for 10T+T3 at 40% of 1 Gbit/s.
        assert_eq!(Point::default().clients(), 24);
        let t3 = Point { links: vec![T3], ..Point::default() };
        assert_eq!(t3.clients(), 9);
    }

    #[test]
    fn every_named_scenario_exists_and_fits_five_minutes() {
        for (name, _) in NAMES {
            let s = scenario(name).unwrap_or_else(|| panic!("{name} missing"));
            let secs: f64 = s.points.iter().map(|p| (p.warmup_s + p.measure_s + 5.0) * s.servers.len() as f64).sum();
            let limit = if *name == "quick" { 120.0 } else { 300.0 };
            assert!(secs <= limit, "{name}: {secs} s");
        }
        assert!(scenario("nope").is_none());
    }

    #[test]
    fn sim_args_carry_the_scaled_parameters() {
        let a = Point::default().sim_args("sequential").join(" ");
        for want in ["--link 10T+T3", "--policy sequential", "--file-size 33554432", "--warmup 20s", "--load 0.4"] {
            assert!(a.contains(want), "{want} missing in {a}");
        }
    }
}
