//! `circus bench`: measurements on real processes and real sockets.
//!
//! Each scenario starts the servers it compares as child processes (the
//! `circus` binary itself, and nginx from the system where a scenario
//! compares with it), drives them with real clients over 127.0.0.1, and
//! returns a [`Report`] that prints as JSON or as a table. Every run is
//! bounded in time and cleans up its processes and files.
//!
//! Scenarios:
//! - `amplification`: 50 throttled native clients of mixed speeds download
//!   one file together; storage bytes read over the file size, for the
//!   circus and sequential policies.
//! - `amplification-plain`, `amplification-mixed`,
//!   `amplification-segmented`: the same question for curl downloads (in
//!   order, at 15-60 MB/s, each behind its own emulated link as root, else
//!   throttling itself), all of them or half beside native clients, with
//!   the fewest reads any cache could have done; and for aria2c's 16
//!   parallel ranges per client. `amplification-curl`: `amplification`'s
//!   crowd, every client curl, with nginx (its page cache bounded to the
//!   same budget by a memory cgroup) as the reference.
//! - `hot`: 50 concurrent downloads of a file already in memory, circus
//!   against nginx (sendfile), with the same client program (curl).
//! - `lava`: 1 KiB and 10 KiB resident objects at the highest rate, the
//!   origin tier against nginx.
//! - `lava-miss`: the hit rate of resident objects while the tier fills
//!   1 MiB objects from the origin, and a hit/miss/revalidation cost table;
//!   the origin tier against nginx's proxy_cache.
//! - `clips`: Lava's video clips: players of distinct clips at 1.5 Mbit/s
//!   from the emulated disk, more each step until one falls behind;
//!   circus and nginx.
//! - `cluster`: a crowd on one object through four nodes in network
//!   namespaces behind HAProxy: one node alone, four circus nodes, four
//!   with one killed mid-crowd, four nginx slice caches (Lancache); origin
//!   bytes, throughput against one node's, balance.
//! - `origin`: a crowd missing one large origin object; origin bytes over
//!   the object size.
//! - `origin-amplification`: `amplification`'s crowd through an origin
//!   tier once it knows the object's tree (native, out of order); origin
//!   bytes over the object size.
//! - `boot`: Lava's boot scenario, scaled: clients arriving over a window
//!   each fetch their own set of small objects; boot latency.
//! - `wpb`: a Wisconsin Proxy Benchmark-style cold phase and a phase with
//!   recency-weighted repeats against a delayed origin, the circus tier,
//!   Varnish and Squid in turn; `wpb-modem`: the same behind
//!   28.8 kbit/s client links.
//! - `slow`: thousands of connections that request a file and then read
//!   nothing; server memory per connection beyond the cache budget.
//! - `abuse`: a download and small requests beside non-reading,
//!   zero-window HTTP/2, idle, slowloris and overlapping-range attackers;
//!   throughput against a quiet run, small-request p99, memory; circus and
//!   nginx.
//! - `signature-latency`, `signature-overhead`, `signature-bandwidth`:
//!   Martin's signature curves (response time against delivered
//!   operations per second as offered load rises), one per added latency,
//!   per-request overhead or link bandwidth; circus and nginx.
//!
//! The paper's experiments, in [`experiment`] with the scenarios
//! in [`scenarios`]: every server of a comparison reads through one emulated
//! disk ([`fusedisk`], a FUSE mount over the pure [`disk`] model) and sends
//! over the same emulated links ([`netem`]: netns, veth, HTB per client).

mod abuse;
mod amplification;
mod boot;
mod clips;
mod cluster;
mod defaults;
pub mod delay;
pub mod disk;
pub mod experiment;
mod external;
pub mod fusedisk;
mod hot;
mod https;
mod lava;
mod lava_miss;
pub mod loadgen;
mod memcg;
mod native_client;
pub mod netem;
mod origin;
pub mod output;
mod plain_crowd;
mod procs;
mod range_log;
mod report;
pub mod scenarios;
mod signature;
mod slow;
mod squid;
mod versus;
mod versus_plot;
mod wpb;

pub use report::{Report, Row};

/// Runs one of the paper's scenarios, bounded in time (twice its planned
/// duration plus a minute) and stopped cleanly on Ctrl-C: servers, mounts
/// and namespaces are removed on every path out.
pub async fn run_experiment(
    scenario: &scenarios::Scenario,
    opts: &experiment::ExperimentOptions,
    log: &mut (dyn FnMut(&str) + Send),
) -> Result<Vec<serde_json::Map<String, serde_json::Value>>, BenchError> {
    std::fs::create_dir_all(&opts.work).map_err(io_err(format!("creating {}", opts.work.display())))?;
    let planned: f64 =
        scenario.points.iter().map(|p| (p.warmup_s + p.measure_s + 10.0) * scenario.servers.len() as f64).sum();
    let limit = std::time::Duration::from_secs_f64(2.0 * planned + 60.0);
    tokio::select! {
        // First, so that the signal is taken over before the run starts
        // anything.
        biased;
        _ = tokio::signal::ctrl_c() => Err(BenchError::Setup("interrupted: servers, mounts and namespaces removed".into())),
        r = tokio::time::timeout(limit, experiment::run(scenario, opts, log)) => {
            r.map_err(|_| BenchError::Setup(format!("{} took longer than {} s: see the logs under {}", scenario.name, limit.as_secs(), opts.work.display())))?
        }
    }
}

use std::path::PathBuf;

#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// The `circus` binary to run as the server.
    pub circus: PathBuf,
    /// Scratch directory for files, configs and logs.
    pub work: PathBuf,
    /// Size of the test file.
    pub file_size: u64,
    /// Number of clients or connections.
    pub clients: usize,
    /// Server cache budget.
    pub cache: u64,
    pub seed: u64,
    /// Extra `circus serve` flags for every circus server the scenario starts.
    pub server_args: Vec<String>,
    /// Length of each timed load (https, defaults).
    pub seconds: f64,
    /// Alternating rounds per load (https, defaults).
    pub rounds: usize,
    /// How the plain crowds' client links are emulated (default: kernel
    /// when root, else the clients throttle themselves).
    pub links: Option<experiment::LinkMode>,
    /// signature-*: the values of the sweep to measure besides the
    /// baseline, which always runs first because it sets the ladder of
    /// offered load (empty: every value).
    pub at: Vec<f64>,
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
    #[error("{0}")]
    Setup(String),
    #[error("client failed: {0}")]
    Client(String),
}

pub(crate) fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> BenchError {
    let what = what.into();
    move |source| BenchError::Io { what, source }
}

/// Runs a scenario by name; `log` receives progress lines. Ctrl-C stops
/// it: its servers, lines and namespaces are removed on the way out.
pub async fn run(name: &str, opts: &BenchOptions, log: &mut (dyn FnMut(&str) + Send)) -> Result<Report, BenchError> {
    std::fs::create_dir_all(&opts.work).map_err(io_err(format!("creating {}", opts.work.display())))?;
    tokio::select! {
        // First, so that the signal is taken over before the scenario
        // starts anything.
        biased;
        _ = tokio::signal::ctrl_c() => Err(BenchError::Setup("interrupted: servers and namespaces removed".into())),
        // Dropping the scenario drops its servers, network and lines, each
        // of which removes itself.
        report = run_scenario(name, opts, log) => report,
    }
}

async fn run_scenario(
    name: &str,
    opts: &BenchOptions,
    log: &mut (dyn FnMut(&str) + Send),
) -> Result<Report, BenchError> {
    match name {
        "abuse" => abuse::run(opts, log).await,
        "amplification" => amplification::run(opts, amplification::Storage::Disk, log).await,
        "origin-amplification" => amplification::run(opts, amplification::Storage::Origin, log).await,
        "amplification-plain" => plain_crowd::run(opts, plain_crowd::Crowd::Plain, log).await,
        "amplification-mixed" => plain_crowd::run(opts, plain_crowd::Crowd::Mixed, log).await,
        "amplification-segmented" => plain_crowd::run(opts, plain_crowd::Crowd::Segmented, log).await,
        "amplification-curl" => plain_crowd::run(opts, plain_crowd::Crowd::Large, log).await,
        "hot" => hot::run(opts, log).await,
        "https" => https::run(opts, log).await,
        "defaults" => defaults::run(opts, log).await,
        "slow" => slow::run(opts, log).await,
        "lava" => lava::run(opts, log).await,
        "lava-miss" => lava_miss::run(opts, log).await,
        "clips" => clips::run(opts, log).await,
        "cluster" => cluster::run(opts, log).await,
        "origin" => origin::run(opts, log).await,
        "wpb" => wpb::run(opts, wpb::Variant::Fast, log).await,
        "wpb-modem" => wpb::run(opts, wpb::Variant::Modem, log).await,
        "boot" => boot::run(opts, log).await,
        "signature-latency" => signature::run(signature::Sweep::Latency, opts, log).await,
        "signature-overhead" => signature::run(signature::Sweep::Overhead, opts, log).await,
        "signature-bandwidth" => signature::run(signature::Sweep::Bandwidth, opts, log).await,
        other => Err(BenchError::Setup(format!(
            "unknown scenario {other:?}: use abuse, amplification, amplification-plain, amplification-mixed, amplification-segmented, amplification-curl, origin-amplification, hot, https, defaults, slow, lava, lava-miss, clips, cluster, origin, wpb, wpb-modem, boot, signature-latency, signature-overhead, signature-bandwidth or one of {}",
            scenarios::NAMES.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// A file of pseudo-random bytes (incompressible, cheap to make).
pub(crate) fn make_file(path: &std::path::Path, size: u64, seed: u64) -> Result<(), BenchError> {
    use rand::{RngCore, SeedableRng};
    use std::io::Write;
    if std::fs::metadata(path).is_ok_and(|m| m.len() == size) {
        return Ok(());
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let file = std::fs::File::create(path).map_err(io_err("creating test file"))?;
    let mut f = std::io::BufWriter::new(&file);
    let mut buf = vec![0u8; 1 << 20];
    let mut left = size;
    while left > 0 {
        rng.fill_bytes(&mut buf);
        let n = left.min(buf.len() as u64) as usize;
        f.write_all(&buf[..n]).map_err(io_err("writing test file"))?;
        left -= n as u64;
    }
    f.flush().map_err(io_err("writing test file"))?;
    // On disk before any server reads it: a direct (O_DIRECT) read of
    // pages still dirty waits for their writeback, inside the first
    // server's timed run and not the others'.
    file.sync_all().map_err(io_err("syncing test file"))
}
