//! Hot serving: N concurrent plain downloads of one file that is already in
//! memory (circus's block cache, nginx's page cache), with the same client
//! program (curl) for both servers.

use crate::{BenchError, BenchOptions, Report, Row, io_err, make_file, procs::ServerProc};
use std::time::Instant;

async fn blast(server: &ServerProc, clients: usize, size: u64) -> Result<f64, BenchError> {
    let url = format!("http://{}/hot.bin", server.addr);
    let started = Instant::now();
    let mut children = Vec::new();
    for _ in 0..clients {
        let child = tokio::process::Command::new("curl")
            .args(["-sSf", "--max-time", "300", "-o", "/dev/null", "-w", "%{size_download}", &url])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .map_err(io_err("starting curl (apt-get install curl)"))?;
        children.push(child);
    }
    for child in children {
        let out = child.wait_with_output().await.map_err(io_err("waiting for curl"))?;
        let got: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(0);
        if !out.status.success() || got != size {
            return Err(BenchError::Client(format!("curl got {got} of {size} bytes from {}", server.name)));
        }
    }
    Ok(clients as f64 * size as f64 / started.elapsed().as_secs_f64())
}

pub async fn run(opts: &BenchOptions, log: &mut (dyn FnMut(&str) + Send)) -> Result<Report, BenchError> {
    let root = opts.work.join("hot");
    std::fs::create_dir_all(&root).map_err(io_err("creating data dir"))?;
    let file = root.join("hot.bin");
    make_file(&file, opts.file_size, opts.seed)?;
    let mut rows = Vec::new();
    let cache = (opts.file_size + (64 << 20)).max(opts.cache);
    let circus = ServerProc::circus(&opts.circus, &root, &["--cache".into(), cache.to_string()])?;
    let nginx = ServerProc::nginx(&root, &opts.work, false)?;
    for server in [&circus, &nginx] {
        // Warm-up: one full download puts the file in memory.
        blast(server, 1, opts.file_size).await?;
        let cpu = server.cpu_seconds();
        log(&format!("{}: {} concurrent downloads", server.name, opts.clients));
        let rate = blast(server, opts.clients, opts.file_size).await?;
        log(&format!("  {:.2} GB/s", rate / 1e9));
        rows.push(
            Row::new(&server.name)
                .with("aggregate_bytes_per_s", rate)
                .with("cpu_s", server.cpu_seconds() - cpu)
                .with("rss_bytes", server.rss_bytes() as f64),
        );
    }
    if let Ok(read) = circus.metric("circus_storage_read_bytes_total") {
        rows[0].figures.push(("storage_bytes_read".into(), read));
    }
    let ratio = rows[0].figures[0].1 / rows[1].figures[0].1;
    Ok(Report {
        scenario: "hot".into(),
        setup: format!(
            "{} concurrent curl downloads of a resident {} byte file, same machine",
            opts.clients, opts.file_size
        ),
        verdict: format!(
            "circus / nginx aggregate throughput = {ratio:.2} (target >= 1.0: {})",
            if ratio >= 1.0 { "met" } else { "NOT met" }
        ),
        rows,
    })
}
