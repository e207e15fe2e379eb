//! Lava's boot scenario, scaled down: clients arrive uniformly over a window,
//! each fetches its own set of small objects one after another (a machine
//! booting from images), then asks for one more object of its set per
//! second until the run ends. Boot latency (arrival to the last byte of the
//! set) as mean and standard deviation; every object is resident in the
//! tier (warmed first) and in nginx's page cache, and both run the same
//! clients in the same run.

use crate::{BenchError, BenchOptions, Report, Row, io_err, loadgen, procs::ServerProc};
use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, Empty};
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use std::time::{Duration, Instant, SystemTime};

const OBJECT: usize = 20 * 1024;
/// Objects per client: 100 x 20 KiB = 2 MiB (Lava: 10 MiB).
const SET: usize = 100;
/// Arrivals spread over this window (Lava: 5 minutes).
const ARRIVALS: Duration = Duration::from_secs(30);
/// Steady state after the last arrival.
const STEADY: Duration = Duration::from_secs(15);

fn make_sets(dir: &std::path::Path, clients: usize) -> Result<(), BenchError> {
    std::fs::create_dir_all(dir).map_err(io_err("creating object dir"))?;
    let month_ago = SystemTime::now() - Duration::from_secs(30 * 86_400);
    for c in 0..clients {
        for i in 0..SET {
            let path = dir.join(format!("c{c}-{i}"));
            if std::fs::metadata(&path).is_ok_and(|m| m.len() == OBJECT as u64) {
                continue;
            }
            let body: Vec<u8> = (0..OBJECT).map(|b| (b ^ c ^ (i << 3)) as u8).collect();
            std::fs::write(&path, body).map_err(io_err("writing object"))?;
            let f = std::fs::File::options().write(true).open(&path).map_err(io_err("opening object"))?;
            f.set_modified(month_ago).map_err(io_err("setting object mtime"))?;
        }
    }
    Ok(())
}

/// Boot latencies (seconds) of `clients` against `addr`.
async fn run_clients(addr: &str, clients: usize) -> Result<Vec<f64>, BenchError> {
    let http: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let start = Instant::now();
    let end = start + ARRIVALS + STEADY;
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..clients {
        let (http, addr) = (http.clone(), addr.to_owned());
        let arrive = start + ARRIVALS.mul_f64(c as f64 / clients as f64);
        tasks.spawn(async move {
            tokio::time::sleep_until(arrive.into()).await;
            let get = |i: usize| {
                let (http, uri) = (http.clone(), format!("http://{addr}/c{c}-{i}"));
                async move {
                    let res =
                        http.get(uri.parse().expect("uri")).await.map_err(|e| BenchError::Client(format!("{e}")))?;
                    if res.status() != StatusCode::OK {
                        return Err(BenchError::Client(format!("{uri}: {}", res.status())));
                    }
                    let body = res.into_body().collect().await.map_err(|e| BenchError::Client(format!("{e}")))?;
                    if body.to_bytes().len() != OBJECT {
                        return Err(BenchError::Client(format!("{uri}: short body")));
                    }
                    Ok(())
                }
            };
            let booting = Instant::now();
            for i in 0..SET {
                get(i).await?;
            }
            let boot = booting.elapsed().as_secs_f64();
            let mut i = 0;
            while Instant::now() + Duration::from_secs(1) < end {
                tokio::time::sleep(Duration::from_secs(1)).await;
                get(i % SET).await?;
                i += 1;
            }
            Ok::<_, BenchError>(boot)
        });
    }
    let mut boots = Vec::new();
    while let Some(j) = tasks.join_next().await {
        boots.push(j.map_err(|e| BenchError::Client(format!("client task: {e}")))??);
    }
    Ok(boots)
}

pub async fn run(opts: &BenchOptions, log: &mut (dyn FnMut(&str) + Send)) -> Result<Report, BenchError> {
    let dir = opts.work.join(format!("boot-{}", opts.clients));
    make_sets(&dir, opts.clients)?;
    let paths: Vec<String> = (0..opts.clients).flat_map(|c| (0..SET).map(move |i| format!("/c{c}-{i}"))).collect();
    // nginx is the origin as well as the peer: `circus serve DIR` keeps a
    // descriptor open per file it has served and ran out at this many files
    // (see docs/results/cache.md). Once the tier is warm it asks nothing of it.
    let nginx = ServerProc::nginx(&dir, &opts.work, false)?;
    // Room for every object in the store, which gets 7/8 of the budget.
    let cache = ((opts.clients * SET * (OBJECT + 2048)) as u64 * 5 / 4).max(opts.cache);
    let mut args = vec!["--origin".to_owned(), format!("http://{}/", nginx.addr), "--cache".into(), cache.to_string()];
    args.extend(opts.server_args.iter().cloned());
    let tier = ServerProc::circus_serve(&opts.circus, "circus-origin-tier", &args)?;
    let mut rows = Vec::new();
    for server in [&tier, &nginx] {
        // Warm-up: every object once (the tier stores it, nginx's page cache fills).
        loadgen::run(&server.addr, &paths, 8, 4, Duration::from_secs(4)).await?;
        let before = tier.metric("circus_origin_requests_total").unwrap_or(0.0);
        log(&format!("{}: {} clients booting over {} s", server.name, opts.clients, ARRIVALS.as_secs()));
        let boots = run_clients(&server.addr, opts.clients).await?;
        let n = boots.len() as f64;
        let mean = boots.iter().sum::<f64>() / n;
        let sd = (boots.iter().map(|b| (b - mean).powi(2)).sum::<f64>() / n).sqrt();
        let max = boots.iter().copied().fold(0.0, f64::max);
        log(&format!("  boot latency {mean:.4} s +- {sd:.4} s (max {max:.4} s)"));
        let mut row = Row::new(&server.name).with("boot_mean_s", mean).with("boot_sd_s", sd).with("boot_max_s", max);
        if std::ptr::eq(server, &tier) {
            row = row.with(
                "origin_requests_during_run",
                tier.metric("circus_origin_requests_total").unwrap_or(0.0) - before,
            );
        }
        rows.push(row);
    }
    let verdict = format!(
        "boot latency circus tier {:.4} s +- {:.4} s, nginx {:.4} s +- {:.4} s (Lava paper: 1.7 s +- 0.9 s for 10 MiB over its network; loopback here)",
        rows[0].get("boot_mean_s").unwrap_or(0.0),
        rows[0].get("boot_sd_s").unwrap_or(0.0),
        rows[1].get("boot_mean_s").unwrap_or(0.0),
        rows[1].get("boot_sd_s").unwrap_or(0.0)
    );
    Ok(Report {
        scenario: "boot".into(),
        setup: format!(
            "{} clients arriving uniformly over {} s, each fetching its own {} x {} B objects in sequence, then one per second for {} s; all resident",
            opts.clients,
            ARRIVALS.as_secs(),
            SET,
            OBJECT,
            STEADY.as_secs()
        ),
        verdict,
        rows,
    })
}
