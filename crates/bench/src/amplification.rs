//! Storage read amplification: N native clients of mixed speeds download one
//! file together from a server whose cache is far smaller than the file.
//! Amplification = storage bytes read / file size (1.0 = every block read
//! once for everybody).

use crate::{BenchError, BenchOptions, Report, Row, io_err, make_file, native_client, procs::ServerProc};
use rand::{Rng, SeedableRng};

/// Client rates, bytes per second, drawn with equal probability: a 4x spread
/// like 10 vs 40 Mbit/s-class links scaled up to finish in minutes.
pub const RATES: [f64; 3] = [10e6, 20e6, 40e6];

pub async fn run(opts: &BenchOptions, log: &mut (dyn FnMut(&str) + Send)) -> Result<Report, BenchError> {
    let root = opts.work.join("amplification");
    std::fs::create_dir_all(&root).map_err(io_err("creating data dir"))?;
    let file = root.join("data.bin");
    make_file(&file, opts.file_size, opts.seed)?;
    let mut rows = Vec::new();
    for policy in ["circus", "sequential"] {
        let mut args = vec!["--policy".into(), policy.into(), "--cache".into(), opts.cache.to_string()];
        args.extend(opts.server_args.iter().cloned());
        let server = ServerProc::circus(&opts.circus, &root, &args)?;
        // Build the hash index before the clock starts: it is a one-off
        // read of the file that every later run reuses.
        native_client::download(&format!("http://{}/data.bin", server.addr), None).await.map_err(BenchError::Client)?;
        let before = server.metric("circus_storage_read_bytes_total")?;
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
        let read = server.metric("circus_storage_read_bytes_total")? - before;
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
    Ok(Report {
        scenario: "amplification".into(),
        setup: format!(
            "{} native clients at 10/20/40 MB/s (client-side throttling) download one {} byte file together; cache {} bytes",
            opts.clients, opts.file_size, opts.cache
        ),
        verdict: format!(
            "circus reads the file {amp:.3} times (target <= 1.10: {}), sequential {:.3} times",
            if amp <= 1.10 { "met" } else { "NOT met" },
            rows[1].get("amplification").unwrap_or(f64::NAN)
        ),
        rows,
    })
}
