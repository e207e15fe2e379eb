//! Lava's hit-server throughput: small objects (1 KiB and 10 KiB), all
//! resident, requested at the highest rate the server takes, by the same
//! generator for every server in the same run: circus as a caching tier in
//! front of an origin (`serve --origin`) and nginx serving the files from
//! the page cache. circus serving the directory itself (the tier's origin)
//! is measured too: its reads go through the block scheduler, so small
//! files pay a scheduler round trip that the tier's hit path does not.

use crate::{BenchError, BenchOptions, Report, Row, io_err, loadgen, procs::ServerProc};
use std::{
    path::Path,
    time::{Duration, SystemTime},
};

const OBJECTS: usize = 1000;
const SIZES: [u64; 2] = [1024, 10 * 1024];
const DEPTH: usize = 8;
const MEASURE: Duration = Duration::from_secs(10);
const WARM: Duration = Duration::from_secs(2);
const ROUNDS: u32 = 5;

/// `OBJECTS` files of `size` bytes, last modified a month ago so that the
/// tier's heuristic freshness (a tenth of their age, capped at a day; the
/// origin sends no Cache-Control) keeps them fresh for the whole run.
fn make_objects(dir: &Path, size: u64, seed: u64) -> Result<Vec<String>, BenchError> {
    std::fs::create_dir_all(dir).map_err(io_err("creating object dir"))?;
    let month_ago = SystemTime::now() - Duration::from_secs(30 * 86_400);
    (0..OBJECTS)
        .map(|i| {
            let path = dir.join(format!("o{i}"));
            crate::make_file(&path, size, seed + i as u64)?;
            let f = std::fs::File::options().write(true).open(&path).map_err(io_err("opening object"))?;
            f.set_modified(month_ago).map_err(io_err("setting object mtime"))?;
            Ok(format!("/o{i}"))
        })
        .collect()
}

pub async fn run(opts: &BenchOptions, log: &mut (dyn FnMut(&str) + Send)) -> Result<Report, BenchError> {
    let mut rows = Vec::new();
    let mut verdicts = Vec::new();
    for size in SIZES {
        let dir = opts.work.join(format!("lava-{size}"));
        let paths = make_objects(&dir, size, opts.seed)?;
        let origin = ServerProc::circus(&opts.circus, &dir, &opts.server_args)?;
        let mut tier_args = vec![
            "--origin".to_owned(),
            format!("http://{}/", origin.addr),
            "--cache".into(),
            opts.cache.max(64 << 20).to_string(),
        ];
        tier_args.extend(opts.server_args.iter().cloned());
        let tier = ServerProc::circus_serve(&opts.circus, "circus-origin-tier", &tier_args)?;
        let nginx = ServerProc::nginx(&dir, &opts.work, false)?;
        let servers = [&tier, &nginx, &origin];
        for server in servers {
            loadgen::run(&server.addr, &paths, opts.clients, DEPTH, WARM).await?;
        }
        // Short alternating rounds, so that other load on the machine falls
        // on both servers alike rather than on whichever ran second.
        let origin_reqs = tier.metric("circus_origin_requests_total").unwrap_or(0.0);
        let mut totals = [loadgen::Load::default(); 3];
        let mut cpu = [0.0; 3];
        for _ in 0..ROUNDS {
            for (i, server) in servers.iter().enumerate() {
                let before = server.cpu_seconds();
                let load = loadgen::run(&server.addr, &paths, opts.clients, DEPTH, MEASURE / ROUNDS).await?;
                cpu[i] += server.cpu_seconds() - before;
                totals[i].responses += load.responses;
                totals[i].payload_bytes += load.payload_bytes;
                totals[i].seconds += load.seconds;
            }
        }
        let mut rates = Vec::new();
        for (i, server) in servers.iter().enumerate() {
            let load = totals[i];
            log(&format!(
                "{size} B objects, {}: {:.0} req/s, {:.0} Mbit/s of payload",
                server.name,
                load.req_per_s(),
                load.payload_mbit_per_s()
            ));
            let mut row = Row::new(format!("{} {}KiB", server.name, size / 1024))
                .with("req_per_s", load.req_per_s())
                .with("payload_mbit_per_s", load.payload_mbit_per_s())
                .with("server_cpu_s", cpu[i]);
            if i == 0 {
                // Must stay 0: every request was a hit.
                let during = tier.metric("circus_origin_requests_total").unwrap_or(0.0) - origin_reqs;
                row = row.with("origin_requests_during_run", during);
            }
            rates.push(load.req_per_s());
            rows.push(row);
        }
        let ratio = rates[0] / rates[1];
        let target = if size == 1024 { 1.5 } else { 1.0 };
        verdicts.push(format!(
            "{}KiB: tier/nginx req/s = {ratio:.2} (target >= {target}: {})",
            size / 1024,
            if ratio >= target { "met" } else { "NOT met" }
        ));
    }
    plot(&rows, &opts.work.join("cache-lava.svg"))?;
    log(&format!("plot: {}", opts.work.join("cache-lava.svg").display()));
    Ok(Report {
        scenario: "lava".into(),
        setup: format!(
            "{OBJECTS} resident objects per size, {} keep-alive connections x {DEPTH} pipelined requests, {}s per server in {ROUNDS} alternating rounds, client on the same 2 cores",
            opts.clients,
            MEASURE.as_secs()
        ),
        verdict: verdicts.join("; "),
        rows,
    })
}

/// Requests and payload per second against object size, one line per server.
fn plot(rows: &[Row], path: &Path) -> Result<(), BenchError> {
    use circus_plot::{Chart, Scale, Series};
    let line = |server: &str, figure: &str| {
        let points = rows.iter().filter(|r| r.server.starts_with(server)).filter_map(|r| {
            let kib: f64 = r.server.rsplit(' ').next()?.trim_end_matches("KiB").parse().ok()?;
            Some((kib, r.get(figure)?))
        });
        Series::new(server, points.collect::<Vec<_>>())
    };
    let chart = |title: &str, y: &str, figure: &str| Chart {
        title: title.into(),
        x_label: "object size (KiB)".into(),
        y_label: y.into(),
        x_scale: Scale::Log2,
        y_from_zero: true,
        series: vec![line("circus-origin-tier", figure), line("nginx-sendfile", figure)],
        ..Chart::default()
    };
    let charts = [
        chart("Resident small objects: requests", "requests/s", "req_per_s"),
        chart("Resident small objects: payload", "Mbit/s of payload", "payload_mbit_per_s"),
    ];
    circus_plot::write_grid_svg(path, &charts, 2).map_err(|e| BenchError::Setup(format!("plot: {e}")))
}
