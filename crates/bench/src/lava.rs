//! Lava's hit-server throughput: small objects (1 KiB and 10 KiB), all
//! resident, requested at the highest rate the server takes, by the same
//! generator for every server in the same run: circus as a caching tier in
//! front of an origin (`serve --origin`) and nginx serving the files from
//! the page cache. circus serving the directory itself (the tier's origin,
//! at its defaults: small files from its small-file store through the hit
//! lane) is measured too.
//!
//! The generator shares the two cores with the server it drives, so a rate
//! ratio understates the servers' own: beside the rates come each side's
//! CPU per request and the machine's ceiling, the ratio a server costing
//! nothing but its kernel work would reach (the generator's CPU plus the
//! server's system CPU per request, the lesser of the servers', against
//! nginx's rate), as `bench defaults` reports it.

use crate::{
    BenchError, BenchOptions, Report, Row, io_err, loadgen,
    procs::{self, ServerProc},
};
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
        let (mut cpu, mut system, mut client) = ([0.0; 3], [0.0; 3], [0.0; 3]);
        for _ in 0..ROUNDS {
            for (i, server) in servers.iter().enumerate() {
                let (user0, system0) = server.cpu_split();
                let client0 = procs::own_cpu_seconds();
                let load = loadgen::run(&server.addr, &paths, opts.clients, DEPTH, MEASURE / ROUNDS).await?;
                client[i] += procs::own_cpu_seconds() - client0;
                let (user1, system1) = server.cpu_split();
                cpu[i] += user1 + system1 - user0 - system0;
                system[i] += system1 - system0;
                totals[i].responses += load.responses;
                totals[i].payload_bytes += load.payload_bytes;
                totals[i].seconds += load.seconds;
            }
        }
        let us_per_req = |seconds: f64, i: usize| seconds * 1e6 / totals[i].responses.max(1) as f64;
        let mut rates = Vec::new();
        for (i, server) in servers.iter().enumerate() {
            let load = totals[i];
            log(&format!(
                "{size} B objects, {}: {:.0} req/s, {:.0} Mbit/s of payload; CPU per request: server {:.2} us, generator {:.2} us",
                server.name,
                load.req_per_s(),
                load.payload_mbit_per_s(),
                us_per_req(cpu[i], i),
                us_per_req(client[i], i),
            ));
            let mut row = Row::new(format!("{} {}KiB", server.name, size / 1024))
                .with("req_per_s", load.req_per_s())
                .with("payload_mbit_per_s", load.payload_mbit_per_s())
                .with("server_cpu_s", cpu[i])
                .with("server_cpu_us_per_req", us_per_req(cpu[i], i))
                .with("server_system_cpu_us_per_req", us_per_req(system[i], i))
                .with("generator_cpu_us_per_req", us_per_req(client[i], i));
            if i == 0 {
                // Must stay 0: every request was a hit.
                let during = tier.metric("circus_origin_requests_total").unwrap_or(0.0) - origin_reqs;
                row = row.with("origin_requests_during_run", during);
            }
            rates.push(load.req_per_s());
            rows.push(row);
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let floor_us = (0..3).map(|i| us_per_req(client[i] + system[i], i)).fold(f64::MAX, f64::min);
        let ceiling = cores * 1e6 / floor_us / rates[1];
        // The tier (Lava's design) against nginx, then circus at its
        // defaults against nginx (whose pipelined target is 3x).
        for (i, target) in [(0, if size == 1024 { 1.5 } else { 1.0 }), (2, if size == 1024 { 3.0 } else { 1.0 })] {
            let ratio = rates[i] / rates[1];
            let cpu_ratio = us_per_req(cpu[1], 1) / us_per_req(cpu[i], i);
            rows.push(
                Row::new(format!("ratio {} {}KiB", servers[i].name, size / 1024))
                    .with("over_nginx", ratio)
                    .with("target", target)
                    .with("ceiling", ceiling)
                    .with("nginx_server_cpu_per_req_over_this", cpu_ratio),
            );
            verdicts.push(format!(
                "{}KiB: {}/nginx req/s = {ratio:.2} (target >= {target}: {}; this machine's ceiling {ceiling:.2}; nginx spends {cpu_ratio:.2} x its server CPU per request)",
                size / 1024,
                servers[i].name,
                if ratio >= target { "met" } else { "NOT met" }
            ));
        }
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
    // Rows are named "SERVER SIZE"; ratio rows start with "ratio".
    let line = |server: &str, figure: &str| {
        let points =
            rows.iter().filter(|r| r.server.rsplit_once(' ').is_some_and(|(s, _)| s == server)).filter_map(|r| {
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
        series: vec![line("circus-origin-tier", figure), line("circus", figure), line("nginx-sendfile", figure)],
        ..Chart::default()
    };
    let charts = [
        chart("Resident small objects: requests", "requests/s", "req_per_s"),
        chart("Resident small objects: payload", "Mbit/s of payload", "payload_mbit_per_s"),
    ];
    circus_plot::write_grid_svg(path, &charts, 2).map_err(|e| BenchError::Setup(format!("plot: {e}")))
}
