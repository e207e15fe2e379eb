//! A crowd missing one large origin object: `clients` curl downloads start
//! together through the caching tier; the tier's count of bytes fetched
//! from the origin over the object size shows the single flight, and each
//! client's time to first byte against the fastest whole download shows
//! that nobody waits for the whole object first.

use crate::{BenchError, BenchOptions, Report, Row, io_err, make_file, procs::ServerProc};
use std::time::Instant;

pub async fn run(opts: &BenchOptions, log: &mut (dyn FnMut(&str) + Send)) -> Result<Report, BenchError> {
    let root = opts.work.join("origin");
    std::fs::create_dir_all(&root).map_err(io_err("creating data dir"))?;
    make_file(&root.join("big.bin"), opts.file_size, opts.seed)?;
    let origin = ServerProc::circus(&opts.circus, &root, &opts.server_args)?;
    // The object fits in the store (7/8 of the budget; the rest is for
    // fetches in flight): the figure is about fetches shared, not eviction.
    let cache = opts.file_size + opts.file_size / 4 + (64 << 20);
    let mut args = vec!["--origin".to_owned(), format!("http://{}/", origin.addr), "--cache".into(), cache.to_string()];
    args.extend(opts.server_args.iter().cloned());
    let tier = ServerProc::circus_serve(&opts.circus, "circus-origin-tier", &args)?;
    let url = format!("http://{}/big.bin", tier.addr);
    log(&format!("{} clients missing one {} byte object", opts.clients, opts.file_size));
    let started = Instant::now();
    let mut children = Vec::new();
    for _ in 0..opts.clients {
        let child = tokio::process::Command::new("curl")
            .args([
                "-sSf",
                "--max-time",
                "600",
                "-o",
                "/dev/null",
                "-w",
                "%{size_download} %{time_starttransfer} %{time_total}",
            ])
            .arg(&url)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .map_err(io_err("starting curl (apt-get install curl)"))?;
        children.push(child);
    }
    let (mut max_first, mut min_total, mut max_total) = (0f64, f64::MAX, 0f64);
    for child in children {
        let out = child.wait_with_output().await.map_err(io_err("waiting for curl"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let f: Vec<f64> = text.split_whitespace().filter_map(|v| v.parse().ok()).collect();
        if !out.status.success() || f.len() != 3 || f[0] as u64 != opts.file_size {
            return Err(BenchError::Client(format!("curl through the tier: {text}")));
        }
        max_first = max_first.max(f[1]);
        min_total = min_total.min(f[2]);
        max_total = max_total.max(f[2]);
    }
    let wall = started.elapsed().as_secs_f64();
    let fetched = tier.metric("circus_origin_fetched_bytes_total")?;
    let ratio = fetched / opts.file_size as f64;
    log(&format!(
        "origin bytes / object size = {ratio:.3}; slowest first byte {max_first:.3} s; fastest download {min_total:.3} s"
    ));
    let row = Row::new("circus-origin-tier")
        .with("origin_bytes_over_size", ratio)
        .with("max_time_to_first_byte_s", max_first)
        .with("min_download_s", min_total)
        .with("max_download_s", max_total)
        .with("aggregate_bytes_per_s", opts.clients as f64 * opts.file_size as f64 / wall)
        .with("tier_rss_bytes", tier.rss_bytes() as f64);
    let single = ratio <= 1.05;
    let early = max_first < min_total;
    Ok(Report {
        scenario: "origin".into(),
        setup: format!(
            "{} concurrent curl downloads of one {} byte object through circus serve --origin (origin: circus serve DIR), same machine",
            opts.clients, opts.file_size
        ),
        verdict: format!(
            "origin bytes / size = {ratio:.3} (target <= 1.05: {}); slowest first byte {max_first:.2} s before the fastest complete download {min_total:.2} s: {}",
            if single { "met" } else { "NOT met" },
            if early { "met" } else { "NOT met" }
        ),
        rows: vec![row],
    })
}
