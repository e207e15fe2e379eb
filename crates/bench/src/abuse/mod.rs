//! `abuse`: what a well-behaved user sees while others attack the server.
//! One client downloads the large file again and again and another sends a
//! small request every 10 ms, first on a quiet server, then beside each
//! attack in turn (non-reading connections, zero-window HTTP/2 streams,
//! idle HTTP/1.1 and HTTP/2 floods, slowloris, overlapping ranges). For
//! each: download throughput against the quiet run, small-request
//! latency, and the server's memory. circus and nginx in one run, one after
//! the other on the same files.

mod attack;
mod probe;

use crate::{BenchError, BenchOptions, Report, Row, io_err, make_file, procs::ServerProc};
use attack::Attack;
use std::time::Duration;

/// How long each phase is measured, after its attack settled.
const WINDOW: Duration = Duration::from_secs(5);
/// Time for an attack's sockets to fill and the server to react.
const SETTLE: Duration = Duration::from_secs(2);

const PHASES: [Attack; 7] = [
    Attack::Quiet,
    Attack::NonReading(1000),
    Attack::ZeroWindowH2 { connections: 10, streams: 100 },
    Attack::IdleH1(10_000),
    Attack::IdleH2(1000),
    Attack::Slowloris(1000),
    Attack::OverlappingRanges(10),
];

/// The targets: a user keeps half the quiet download rate and small
/// requests stay under 100 ms at the 99th percentile.
const MIN_THROUGHPUT_RATIO: f64 = 0.5;
const MAX_SMALL_P99_S: f64 = 0.1;

pub async fn run(opts: &BenchOptions, log: &mut (dyn FnMut(&str) + Send)) -> Result<Report, BenchError> {
    attack::raise_open_files(PHASES.iter().map(Attack::connections).max().unwrap_or(0))?;
    let root = opts.work.join("abuse");
    std::fs::create_dir_all(&root).map_err(io_err("creating data dir"))?;
    make_file(&root.join("big.bin"), opts.file_size, opts.seed)?;
    std::fs::write(root.join("small.txt"), vec![b's'; 1024]).map_err(io_err("writing small.txt"))?;
    let (big, small) = ("/big.bin", "/small.txt");
    let mut rows = Vec::new();
    let mut verdicts = Vec::new();
    for server in ["circus", "nginx-sendfile"] {
        let proc = match server {
            "circus" => {
                let mut args = vec!["--cache".to_string(), opts.cache.to_string()];
                args.extend(opts.server_args.iter().cloned());
                ServerProc::circus(&opts.circus, &root, &args)?
            }
            _ => ServerProc::nginx(&root, &opts.work, false)?,
        };
        // Warm: the small file is admitted to circus's hit lane on its first
        // plain GET; both servers then see the large file once.
        probe::measure(&proc.addr, big, small, Duration::from_secs(1)).await;
        let mut quiet = f64::NAN;
        let (mut worst_ratio, mut worst_p99) = (f64::INFINITY, 0.0f64);
        for phase in PHASES {
            if phase.needs_h2c() && server != "circus" {
                log(&format!(
                    "{server}: {}: skipped (this nginx serves HTTP/2 only with TLS or on an h2-only port)",
                    phase.name()
                ));
                continue;
            }
            log(&format!("{server}: {}: opening connections", phase.name()));
            let running = attack::start(phase, &proc.addr, big, opts.file_size).await?;
            tokio::time::sleep(SETTLE).await;
            log(&format!(
                "{server}: {}: {} open, {} refused; measuring {} s",
                phase.name(),
                running.opened,
                running.failed,
                WINDOW.as_secs()
            ));
            let seen = probe::measure(&proc.addr, big, small, WINDOW).await;
            let rss = proc.rss_bytes();
            drop(running);
            if phase == Attack::Quiet {
                quiet = seen.download_bytes_per_s;
            }
            let ratio = seen.download_bytes_per_s / quiet;
            let p99 = seen.small_quantile(0.99);
            worst_ratio = worst_ratio.min(ratio);
            worst_p99 = worst_p99.max(p99);
            log(&format!(
                "  {:.0} MB/s ({:.2} of quiet), small p99 {:.1} ms, {} small failed, rss {:.0} MiB",
                seen.download_bytes_per_s / 1e6,
                ratio,
                p99 * 1e3,
                seen.small_failed,
                rss as f64 / 1048576.0
            ));
            let mut row = Row::new(format!("{server} {}", phase.name()))
                .with("download_bytes_per_s", seen.download_bytes_per_s)
                .with("download_vs_quiet", ratio)
                .with("small_p50_ms", seen.small_quantile(0.5) * 1e3)
                .with("small_p99_ms", p99 * 1e3)
                .with("small_ok", seen.small_ok as f64)
                .with("small_failed", seen.small_failed as f64)
                .with("attack_connections", phase.connections() as f64)
                .with("rss_bytes", rss as f64);
            if server == "circus" {
                for (name, metric) in [
                    ("parked", "circus_downloads_parked_total"),
                    ("cut", "circus_connections_cut_total"),
                    ("evicted", "circus_connections_evicted_total"),
                ] {
                    row = row.with(name, proc.metric(metric).unwrap_or(f64::NAN));
                }
            }
            rows.push(row);
            // Let the server see the attack's connections close.
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let peak = proc.peak_rss_bytes();
        rows.push(Row::new(format!("{server} peak")).with("peak_rss_bytes", peak as f64));
        let met = worst_ratio >= MIN_THROUGHPUT_RATIO && worst_p99 < MAX_SMALL_P99_S;
        verdicts.push(format!(
            "{server}: worst {:.2} of quiet throughput, worst small p99 {:.1} ms ({})",
            worst_ratio,
            worst_p99 * 1e3,
            if met { "targets met" } else { "targets NOT met" }
        ));
    }
    Ok(Report {
        scenario: "abuse".into(),
        setup: format!(
            "a {}-byte file downloaded again and again plus a 1 KiB request every 10 ms, {} s per phase after {} s to settle; circus --cache {}; targets: >= {MIN_THROUGHPUT_RATIO} of quiet throughput, small p99 < {} ms",
            opts.file_size,
            WINDOW.as_secs(),
            SETTLE.as_secs(),
            opts.cache,
            MAX_SMALL_P99_S * 1e3
        ),
        verdict: verdicts.join("; "),
        rows,
    })
}
