//! Hot serving: N concurrent plain downloads of one file that is already in
//! memory (circus's block cache, nginx's page cache), with the same client
//! program (curl) for both servers.

use crate::{BenchError, BenchOptions, Report, Row, io_err, make_file, netem::is_root, procs::ServerProc};
use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Instant,
};

/// A tmpfs mounted with `huge=always` for circus's cache file
/// (`--cache-dir`), so its pages are huge as the page cache's large folios
/// are for nginx; unmounted when dropped.
struct HugeTmpfs(PathBuf);

impl HugeTmpfs {
    /// `None` (the cache stays in a memfd of 4 KiB pages) unless root and
    /// the mount works.
    fn mount(dir: &Path, bytes: u64) -> Option<HugeTmpfs> {
        if !is_root() {
            return None;
        }
        std::fs::create_dir_all(dir).ok()?;
        // A mount left by a killed run.
        let _ = Command::new("umount").arg("-l").arg(dir).stderr(Stdio::null()).status();
        let opts = format!("huge=always,size={bytes},mode=0700");
        let ok = Command::new("mount").args(["-t", "tmpfs", "-o", &opts, "circus-hot"]).arg(dir).status();
        ok.is_ok_and(|s| s.success()).then(|| HugeTmpfs(dir.to_owned()))
    }
}

impl Drop for HugeTmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

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

/// Rounds per server, alternating servers: this VM's rates swing by a third
/// from one minute to the next, so one round each compares moods, not servers.
const ROUNDS: usize = 5;

pub async fn run(opts: &BenchOptions, log: &mut (dyn FnMut(&str) + Send)) -> Result<Report, BenchError> {
    let root = opts.work.join("hot");
    std::fs::create_dir_all(&root).map_err(io_err("creating data dir"))?;
    let file = root.join("hot.bin");
    make_file(&file, opts.file_size, opts.seed)?;
    // The scheduler gets 15/16 of the budget (the rest keeps small files),
    // and all of the file must fit with room to spare.
    let cache = (opts.file_size / 15 * 16 + (64 << 20)).max(opts.cache);
    let mut args = vec!["--cache".to_string(), cache.to_string()];
    // The arena takes a quarter more slots than the budget (see serve).
    let huge = HugeTmpfs::mount(&opts.work.join("hot-cache"), cache / 4 * 5 + (64 << 20));
    if let Some(dir) = &huge {
        args.extend(["--cache-dir".to_string(), dir.0.to_string_lossy().into_owned()]);
    }
    args.extend(opts.server_args.iter().cloned());
    let circus = ServerProc::circus(&opts.circus, &root, &args)?;
    let nginx = ServerProc::nginx(&root, &opts.work, false)?;
    let servers = [&circus, &nginx];
    let mut rates = [Vec::new(), Vec::new()];
    let mut cpu = [0.0; 2];
    for server in servers {
        // Warm-up: one full download puts the file in memory.
        blast(server, 1, opts.file_size).await?;
    }
    for round in 1..=ROUNDS {
        for (i, server) in servers.iter().enumerate() {
            log(&format!("round {round}/{ROUNDS}: {}: {} concurrent downloads", server.name, opts.clients));
            let before = server.cpu_seconds();
            let rate = blast(server, opts.clients, opts.file_size).await?;
            cpu[i] += server.cpu_seconds() - before;
            log(&format!("  {:.2} GB/s", rate / 1e9));
            rates[i].push(rate);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let mut rows = Vec::new();
    for (i, server) in servers.iter().enumerate() {
        let (low, high) =
            (rates[i].iter().copied().fold(f64::MAX, f64::min), rates[i].iter().copied().fold(0.0, f64::max));
        rows.push(
            Row::new(&server.name)
                .with("aggregate_bytes_per_s", median(&mut rates[i]))
                .with("min_bytes_per_s", low)
                .with("max_bytes_per_s", high)
                .with("cpu_s_per_gb", cpu[i] / (ROUNDS as f64 * opts.clients as f64 * opts.file_size as f64 / 1e9))
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
            "{} concurrent curl downloads of a resident {} byte file, same machine; median of {ROUNDS} alternating rounds; circus cache pages: {}",
            opts.clients,
            opts.file_size,
            if huge.is_some() {
                "huge (tmpfs huge=always, --cache-dir)".to_string()
            } else {
                format!("memfd, shmem huge pages: {}", shmem_huge_setting())
            }
        ),
        verdict: format!(
            "circus / nginx median aggregate throughput = {ratio:.2} (target >= 1.0: {})",
            if ratio >= 1.0 { "met" } else { "NOT met" }
        ),
        rows,
    })
}

/// The kernel's transparent huge page mode for shared memory: circus's cache
/// pages are shmem, and sendfile walks them page by page unless they are huge.
fn shmem_huge_setting() -> String {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
        .ok()
        .and_then(|s| s.split_whitespace().find(|w| w.starts_with('[')).map(|w| w.trim_matches(['[', ']']).to_string()))
        .unwrap_or_else(|| "unknown".into())
}
