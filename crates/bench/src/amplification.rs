//! Storage read amplification: N native clients of mixed speeds download one
//! file together from a server whose cache is far smaller than the file.
//! Amplification = storage bytes read / file size (1.0 = every block read
//! once for everybody). The storage is the server's disk, or (scenario
//! `origin-amplification`) an origin behind `circus serve --origin`, where
//! the figure is the bytes the tier fetched from the origin.

use crate::{BenchError, BenchOptions, Report, Row, io_err, make_file, native_client, procs::ServerProc};
use rand::{Rng, SeedableRng};

/// Client rates, bytes per second, drawn with equal probability: a 4x spread
/// like 10 vs 40 Mbit/s-class links scaled up to finish in minutes.
pub const RATES: [f64; 3] = [10e6, 20e6, 40e6];

/// What the server under test reads the file from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    /// A directory it serves.
    Disk,
    /// An origin (`circus serve DIR` on the same machine) behind the tier.
    Origin,
}

pub async fn run(
    opts: &BenchOptions,
    storage: Storage,
    log: &mut (dyn FnMut(&str) + Send),
) -> Result<Report, BenchError> {
    let root = opts.work.join("amplification");
    std::fs::create_dir_all(&root).map_err(io_err("creating data dir"))?;
    let file = root.join("data.bin");
    make_file(&file, opts.file_size, opts.seed)?;
    let mut rows = Vec::new();
    for policy in ["circus", "sequential"] {
        let mut args = vec!["--policy".into(), policy.into(), "--cache".into(), opts.cache.to_string()];
        args.extend(opts.server_args.iter().cloned());
        let (server, _origin, read_metric) = match storage {
            Storage::Disk => (ServerProc::circus(&opts.circus, &root, &args)?, None, "circus_storage_read_bytes_total"),
            Storage::Origin => {
                let origin = ServerProc::circus(&opts.circus, &root, &[])?;
                args.extend(["--origin".into(), format!("http://{}/", origin.addr)]);
                let tier = ServerProc::circus_serve(&opts.circus, "circus-origin-tier", &args)?;
                (tier, Some(origin), "circus_origin_fetched_bytes_total")
            }
        };
        // Build the hash index before the clock starts: it is a one-off
        // read of the file that every later run reuses (an origin tier
        // learns it from this first, plain, pass).
        native_client::download(&format!("http://{}/data.bin", server.addr), None).await.map_err(BenchError::Client)?;
        let before = server.metric(read_metric)?;
        let cpu_before = server.cpu_seconds();
        log(&format!("{policy}: {} clients downloading {} bytes", opts.clients, opts.file_size));
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(opts.seed);
        let started = std::time::Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..opts.clients {
            let rate = RATES[rng.random_range(0..RATES.len())];
            let jitter = std::time::Duration::from_millis(rng.random_range(0..500));
            let url = format!("http://{}/data.bin", server.addr);
            tasks.spawn(async move {
                tokio::time::sleep(jitter).await;
                native_client::download(&url, Some(rate)).await.map(|o| (rate, o))
            });
        }
        let (mut done, mut slowdown) = (0, 0.0);
        while let Some(r) = tasks.join_next().await {
            let (rate, o) = r.map_err(|e| BenchError::Client(e.to_string()))?.map_err(BenchError::Client)?;
            done += 1;
            slowdown += o.seconds / (opts.file_size as f64 / rate);
            if done % 10 == 0 {
                log(&format!("  {done}/{} done after {:.0} s", opts.clients, started.elapsed().as_secs_f64()));
            }
        }
        let read = server.metric(read_metric)? - before;
        let status: serde_json::Value =
            serde_json::from_str(&server.get_text("/status")?).map_err(|e| BenchError::Setup(e.to_string()))?;
        let count = |k: &str| status["counters"][k].as_f64().unwrap_or(f64::NAN);
        rows.push(
            Row::new(policy)
                .with("storage_bytes_read", read)
                .with("amplification", read / opts.file_size as f64)
                .with("download_vs_ideal", slowdown / opts.clients as f64)
                .with("lead_reads", count("lead_reads"))
                .with("private_reads", count("private_reads"))
                .with("hits", count("hits"))
                .with("wall_s", started.elapsed().as_secs_f64())
                .with("cpu_s", server.cpu_seconds() - cpu_before)
                .with("peak_rss_bytes", server.rss_bytes() as f64),
        );
    }
    let amp = rows[0].get("amplification").unwrap_or(f64::NAN);
    let (scenario, reads, from) = match storage {
        Storage::Disk => ("amplification", "reads the file", ""),
        Storage::Origin => (
            "origin-amplification",
            "fetches the object from the origin",
            " through circus serve --origin (origin: circus serve DIR; storage_bytes_read counts origin bytes)",
        ),
    };
    Ok(Report {
        scenario: scenario.into(),
        setup: format!(
            "{} native clients at 10/20/40 MB/s (client-side throttling) download one {} byte file together{from}; cache {} bytes",
            opts.clients, opts.file_size, opts.cache
        ),
        verdict: format!(
            "circus {reads} {amp:.3} times (target <= 1.10: {}), sequential {:.3} times",
            if amp <= 1.10 { "met" } else { "NOT met" },
            rows[1].get("amplification").unwrap_or(f64::NAN)
        ),
        rows,
    })
}
