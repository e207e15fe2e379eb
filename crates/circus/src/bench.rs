//! `circus bench SCENARIO`: real servers, real sockets; JSON or a table.

use anyhow::Context;
use circus_bench::{
    disk::DiskParams,
    experiment::{DiskMode, ExperimentOptions, LinkMode},
    scenarios::{self, Server},
};
use circus_core::ByteSize;
use clap::{Args, ValueEnum};
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// The paper's experiments on an emulated disk and links: mixed40 (the
    /// target: circus, sequential, nginx sendfile and directio), cohort40,
    /// quick, load, delay-loss, file-size, files, block-size, queue,
    /// threshold, leapfront, memory (cache 4-16 MiB, not in the paper), rtt
    /// (added RTT 0-80 ms for native downloads, not in the paper).
    /// Others: amplification (50 mixed-speed native clients, storage bytes read),
    /// amplification-plain (10 curl clients at 15-60 MB/s on a 200 MiB file,
    /// storage bytes read beside the best any cache could do),
    /// amplification-mixed (the same, half curl and half native),
    /// amplification-segmented (8 aria2c clients, -x16 -s16),
    /// amplification-curl (amplification's crowd, every client curl, with
    /// nginx under a memory cgroup as the reference),
    /// hot (50 downloads of a resident file, circus vs nginx),
    /// https (HTTPS vs nginx: 1 KiB and 1 MiB keep-alive and 1 KiB with a new
    /// TLS connection per request by wrk, h2 by h2load, 50 curl downloads
    /// of a resident file),
    /// defaults (in clear, circus at its defaults vs nginx: 1 KiB to 16 MiB
    /// objects by wrk over keep-alive and new connections, h2 by h2load,
    /// concurrent curl downloads of a resident large file),
    /// slow (thousands of idle downloads, memory per connection),
    /// abuse (a download and small requests beside non-reading, zero-window
    /// h2, idle, slowloris and overlapping-range attackers; circus vs nginx),
    /// lava (1 KiB / 10 KiB resident objects at the highest rate, origin tier vs nginx),
    /// lava-miss (hit rate while the tier fills 1 MiB objects from the origin,
    /// and what a hit, a miss and a revalidation cost; origin tier vs nginx proxy_cache),
    /// clips (players of distinct clips at 1.5 Mbit/s on the emulated disk, N rising
    /// until one falls behind; circus vs nginx; root),
    /// cluster (a crowd on one object through 4 nodes in namespaces behind HAProxy:
    /// 1 node, 4 circus nodes, one of them killed, 4 nginx slice caches; root; default
    /// 200 clients, 16MiB),
    /// origin (a crowd missing one large origin object: origin bytes / size),
    /// origin-amplification (amplification's crowd through an origin tier:
    /// origin bytes / size),
    /// wpb (cold phase, then recency-weighted repeats, against a delayed origin;
    /// the tier, then Varnish and Squid when installed),
    /// wpb-modem (the same behind 28.8 kbit/s client links, scaled; default 200 clients),
    /// boot (Lava's boot scenario, scaled: boot latency mean and sd),
    /// signature-latency, signature-overhead, signature-bandwidth (Martin's
    /// signature curves for a content-server mix as one-way latency,
    /// per-request overhead or link bandwidth varies; circus vs nginx; root).
    #[arg(required_unless_present = "quick")]
    scenario: Option<String>,
    /// The CI smoke run (the `quick` scenario, under 2 minutes).
    #[arg(long)]
    quick: bool,
    /// Test file size (amplification, amplification-curl, hot, https, defaults, slow: default 1GiB;
    /// amplification-plain, -mixed and -segmented: 200MiB; the paper's
    /// scenarios: overrides every point's).
    #[arg(long)]
    file_size: Option<ByteSize>,
    /// Seconds per timed load (https, defaults: default 5) or the least a
    /// step of offered load lasts (signature-*: default 1.5; longer at low
    /// rates, to offer 400 requests).
    #[arg(long)]
    seconds: Option<f64>,
    /// Alternating rounds of every load against each server (https, defaults).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Clients or connections (default: 50; slow 5000; origin, boot 100; wpb-modem 200;
    /// amplification-plain and -mixed 10, amplification-segmented 8).
    #[arg(long)]
    clients: Option<usize>,
    /// Server cache budget (amplification, hot, slow: default 64MiB; the
    /// paper's scenarios: overrides every point's, and bounds the page cache
    /// of buffered readers of the emulated disk alike).
    #[arg(long)]
    cache: Option<ByteSize>,
    /// How client links are emulated (the paper's scenarios and the plain
    /// crowds; default: kernel when root, else client).
    #[arg(long, value_enum)]
    links: Option<Links>,
    /// What the servers read from: the shared FUSE disk model, or the real disk.
    #[arg(long, value_enum, default_value = "model")]
    disk: Disk,
    /// Disk model: positioning time of a non-contiguous read.
    #[arg(long, default_value = "5ms")]
    disk_positioning: humantime::Duration,
    /// Disk model: media rate in bytes per second.
    #[arg(long, default_value_t = 50e6)]
    disk_rate: f64,
    /// Only these servers (comma separated: circus,sequential,nginx-sendfile,nginx-directio).
    #[arg(long, value_delimiter = ',')]
    servers: Vec<String>,
    /// Skip the simulator's prediction beside circus and sequential rows.
    #[arg(long)]
    no_sim: bool,
    /// Where JSON, CSV and SVG go (default: WORK/results).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Scratch directory (test files are kept there for reruns).
    #[arg(long, default_value = "/tmp/circus-bench")]
    work: PathBuf,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// signature-*: measure only these values of the sweep (comma separated,
    /// in its unit: us of one-way latency or of overhead, Mbit/s) after the
    /// baseline, which sets the ladder of offered load.
    #[arg(long, value_delimiter = ',')]
    at: Vec<f64>,
    /// Extra flag for the circus servers started, e.g. --server-arg=--leapfront=2 (repeatable).
    #[arg(long = "server-arg", allow_hyphen_values = true)]
    server_args: Vec<String>,
    /// Print JSON (one object per server and point) instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Links {
    Kernel,
    Client,
}

fn link_mode(links: Links) -> LinkMode {
    match links {
        Links::Kernel => LinkMode::Kernel,
        Links::Client => LinkMode::ClientThrottle,
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Disk {
    Model,
    Real,
}

pub fn main(args: BenchArgs) -> anyhow::Result<()> {
    let name = if args.quick { "quick".to_string() } else { args.scenario.clone().unwrap_or_default() };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let circus = std::env::current_exe().context("locating the circus binary")?;
    if let Some(mut scenario) = scenarios::scenario(&name) {
        for p in &mut scenario.points {
            p.cache = args.cache.map_or(p.cache, |c| c.0);
            p.file_size = args.file_size.map_or(p.file_size, |f| f.0);
        }
        let only = args
            .servers
            .iter()
            .map(|s| {
                Server::ALL.into_iter().find(|k| k.name() == s).with_context(|| {
                    format!("unknown server {s:?}: use circus, sequential, nginx-sendfile or nginx-directio")
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let opts = ExperimentOptions {
            circus,
            work: args.work.clone(),
            links: args.links.map(link_mode),
            disk: match args.disk {
                Disk::Model => DiskMode::Model,
                Disk::Real => DiskMode::Real,
            },
            disk_params: DiskParams { positioning_s: args.disk_positioning.as_secs_f64(), rate: args.disk_rate },
            seed: args.seed,
            server_args: args.server_args.clone(),
            only,
            sim: !args.no_sim,
        };
        let rows = runtime
            .block_on(circus_bench::run_experiment(&scenario, &opts, &mut |line| eprintln!("{line}")))
            .with_context(|| format!("bench {name}"))?;
        let out = args.out.clone().unwrap_or_else(|| args.work.join("results"));
        circus_bench::output::write_all(&out, &scenario, &rows)?;
        eprintln!("wrote {name}.json, {name}.csv and {name}.svg to {}", out.display());
        if args.json {
            print!("{}", circus_bench::output::json_lines(&rows));
        } else {
            for row in &rows {
                println!("{}", circus_bench::experiment::summary(row));
            }
        }
        return Ok(());
    }
    let default_clients = match name.as_str() {
        "slow" => 5000,
        "origin" | "boot" => 100,
        "wpb-modem" | "cluster" => 200,
        "amplification-plain" | "amplification-mixed" => 10,
        "amplification-segmented" => 8,
        _ => 50,
    };
    let opts = circus_bench::BenchOptions {
        circus,
        work: args.work.clone(),
        file_size: args.file_size.map_or(
            match name.as_str() {
                "cluster" => 16 << 20,
                n if n.starts_with("amplification-") && n != "amplification-curl" => 200 << 20,
                _ => 1 << 30,
            },
            |s| s.0,
        ),
        clients: args.clients.unwrap_or(default_clients),
        cache: args.cache.map_or(64 << 20, |c| c.0),
        seed: args.seed,
        server_args: args.server_args.clone(),
        seconds: args.seconds.unwrap_or(if name.starts_with("signature-") { 1.5 } else { 5.0 }),
        rounds: args.rounds.max(1),
        links: args.links.map(link_mode),
        at: args.at.clone(),
    };
    let report = runtime
        .block_on(circus_bench::run(&name, &opts, &mut |line| eprintln!("{line}")))
        .with_context(|| format!("bench {name}"))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.table());
    }
    Ok(())
}
