//! `circus bench SCENARIO`: real servers, real sockets; JSON or a table.

use anyhow::Context;
use circus_core::ByteSize;
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// amplification (50 mixed-speed native clients, storage bytes read),
    /// hot (50 downloads of a resident file, circus vs nginx),
    /// slow (thousands of idle downloads, memory per connection),
    /// lava (1 KiB / 10 KiB resident objects at the highest rate, origin tier vs nginx),
    /// origin (a crowd missing one large origin object: origin bytes / size),
    /// wpb (cold phase, then recency-weighted repeats, against a delayed origin),
    /// boot (Lava's boot scenario, scaled: boot latency mean and sd).
    scenario: String,
    /// Test file size (default: 1GiB).
    #[arg(long)]
    file_size: Option<ByteSize>,
    /// Clients or connections (default: 50, or 5000 for slow).
    #[arg(long)]
    clients: Option<usize>,
    /// Server cache budget (default: 64MiB).
    #[arg(long, default_value = "64MiB")]
    cache: ByteSize,
    /// Scratch directory (test files are kept there for reruns).
    #[arg(long, default_value = "/tmp/circus-bench")]
    work: PathBuf,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Extra flag for the circus servers started, e.g. --server-arg=--leapfront=2 (repeatable).
    #[arg(long = "server-arg", allow_hyphen_values = true)]
    server_args: Vec<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn main(args: BenchArgs) -> anyhow::Result<()> {
    let default_clients = match args.scenario.as_str() {
        "slow" => 5000,
        "origin" | "boot" => 100,
        _ => 50,
    };
    let opts = circus_bench::BenchOptions {
        circus: std::env::current_exe().context("locating the circus binary")?,
        work: args.work.clone(),
        file_size: args.file_size.map_or(1 << 30, |s| s.0),
        clients: args.clients.unwrap_or(default_clients),
        cache: args.cache.0,
        seed: args.seed,
        server_args: args.server_args.clone(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let report = runtime
        .block_on(circus_bench::run(&args.scenario, &opts, &mut |line| eprintln!("{line}")))
        .with_context(|| format!("bench {}", args.scenario))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.table());
    }
    Ok(())
}
