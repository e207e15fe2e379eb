//! `circus sim`: flags to a `SimConfig`, progress to stderr, results to stdout.

use anyhow::{Context, bail};
use circus_core::{BitRate, ByteSize};
use circus_sched::{Favor, PolicyKind, SchedConfig};
use circus_sim::{SimConfig, disk::DiskModel, disk::QueueOrder, link::LinkMix, link::TcpModel};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use std::{path::PathBuf, time::Duration};

#[derive(Debug, Args)]
pub struct SimArgs {
    /// Block-selection policy.
    #[arg(long, default_value = "circus")]
    policy: PolicyKind,
    /// Client links: T1, 10T, T3, modem, mix (T1+10T+T3), or e.g. 10T+T3.
    #[arg(long, default_value = "10T")]
    link: LinkMix,
    /// Offered client demand as a fraction of the server link.
    #[arg(long, default_value_t = 0.4)]
    load: f64,
    /// Distinct files, requested with equal probability.
    #[arg(long, default_value_t = 1)]
    files: u32,
    #[arg(long, default_value = "512MiB")]
    file_size: ByteSize,
    /// Server memory for blocks (a hard budget).
    #[arg(long, default_value = "64MiB")]
    cache: ByteSize,
    #[arg(long, default_value = "64KiB")]
    block: ByteSize,
    /// Blocks queued per client.
    #[arg(long, default_value_t = 5)]
    queue: u32,
    /// Fraction of the file a client holds before it turns independent.
    #[arg(long, default_value_t = 0.75)]
    threshold: f64,
    /// Leapfront distance over active length.
    #[arg(long, default_value_t = 1.0)]
    leapfront: f64,
    /// Active region length.
    #[arg(long, default_value = "16MiB")]
    active: ByteSize,
    /// Blocks per storage read (1 = no read-ahead).
    #[arg(long, default_value_t = 1)]
    readahead: u32,
    /// speed, or storage: each block read once for all clients of a file,
    /// the region moving at its slowest client's pace (rule C13).
    #[arg(long, default_value = "speed")]
    favor: Favor,
    #[arg(long, default_value = "1Gbit")]
    server_link: BitRate,
    /// Round-trip time added to every client path.
    #[arg(long, default_value = "0ms")]
    rtt: humantime::Duration,
    /// Packet loss probability on every client path.
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    #[arg(long, default_value_t = 1)]
    disks: u32,
    /// Disk queue order: fifo, or elevator (contiguous request first).
    #[arg(long, default_value = "fifo")]
    disk_queue: QueueOrder,
    /// Disk positioning time for a non-contiguous read.
    #[arg(long, default_value = "5ms")]
    disk_positioning: humantime::Duration,
    /// Disk media rate (bytes per second, e.g. 50MB).
    #[arg(long, default_value = "50MB")]
    disk_rate: ByteSize,
    /// Simulated warm-up before measuring (default: one slowest download).
    #[arg(long)]
    warmup: Option<humantime::Duration>,
    /// Simulated time measured (default: two slowest downloads).
    #[arg(long)]
    measure: Option<humantime::Duration>,
    /// Start this many clients together instead of holding --load, and run
    /// until all finish (reports read amplification).
    #[arg(long)]
    cohort: Option<usize>,
    /// The share of downloads that are plain HTTP, received in file order
    /// (curl, browsers, apt), from 0 to 1; the rest are native clients.
    #[arg(long, default_value_t = 0.0)]
    plain_share: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Reproduce a figure of the paper (7-17, or "all") as CSV and SVG.
    #[arg(long)]
    figure: Option<String>,
    /// Where --figure writes its files.
    #[arg(long, default_value = "docs/results/sim")]
    out: PathBuf,
    /// Shrink --figure runs for a smoke test: 32 MiB file, 8 MiB cache, 2 MiB
    /// active region, loads 0.2 and 0.4, first/default/last sweep points.
    #[arg(long)]
    quick: bool,
}

impl SimArgs {
    fn config(&self) -> anyhow::Result<SimConfig> {
        let block = u32::try_from(self.block.0).context("--block is too large")?;
        let cfg = SimConfig {
            sched: SchedConfig {
                policy: self.policy,
                block_size: block,
                queue_len: self.queue,
                cache_bytes: self.cache.0,
                active_len: self.active.0,
                leapfront: self.leapfront,
                threshold: self.threshold,
                readahead: self.readahead,
                favor: self.favor,
            },
            links: self.link.clone(),
            load: self.load,
            files: self.files,
            file_size: self.file_size.0,
            server_link: self.server_link,
            tcp: TcpModel { rtt_secs: self.rtt.as_secs_f64(), loss: self.loss, ..TcpModel::default() },
            disk: DiskModel {
                queue: self.disk_queue,
                disks: self.disks,
                positioning_secs: self.disk_positioning.as_secs_f64(),
                media_bytes_per_sec: self.disk_rate.0 as f64,
            },
            seed: self.seed,
            warmup_secs: self.warmup.map(|d| d.as_secs_f64()),
            measure_secs: self.measure.map(|d| d.as_secs_f64()),
            cohort: self.cohort,
            plain_share: self.plain_share,
        };
        cfg.validate().context("invalid simulation settings")?;
        Ok(cfg)
    }
}

pub fn main(args: SimArgs) -> anyhow::Result<()> {
    let cfg = args.config()?;
    if let Some(which) = &args.figure {
        let figures = circus_sim::figures::select(which)?;
        circus_sim::figures::run_figures(&figures, &cfg, &args.out, args.quick, &mut |line| eprintln!("{line}"))
            .with_context(|| format!("reproducing figures into {}", args.out.display()))?;
        return Ok(());
    }
    let bar = progress_bar();
    let report = circus_sim::run(&cfg, &mut |f| bar.set_position((f * 1000.0) as u64))?;
    bar.finish_and_clear();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.table());
    }
    if report.clients_completed == 0 {
        bail!("no download completed in the measured interval: lengthen --measure");
    }
    Ok(())
}

fn progress_bar() -> ProgressBar {
    let bar = ProgressBar::new(1000);
    bar.set_style(
        ProgressStyle::with_template("{spinner} simulating [{bar:40}] {percent}% ({elapsed} wall, eta {eta})")
            .expect("valid template"),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}
