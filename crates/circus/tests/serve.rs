//! End-to-end tests of `circus serve` as a child process: interop with
//! curl, wget and aria2c, graceful drain on SIGTERM, and the memory budget
//! under hundreds of slow connections.

mod common;

use common::ServerProc;
use std::{
    io::{Read, Write},
    net::TcpStream,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

/// `circus serve ROOT EXTRA...` on a free port.
fn serve(root: &Path, extra: &[&str]) -> ServerProc {
    let mut args = vec![root.to_str().unwrap()];
    args.extend_from_slice(extra);
    common::serve(&args)
}

fn data_dir(size: usize) -> (tempfile::TempDir, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..size as u64).map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8).collect();
    std::fs::write(dir.path().join("big.bin"), &data).unwrap();
    (dir, data)
}

/// A tool CI installs; elsewhere a missing one is reported and skipped.
fn tool(name: &str) -> Option<PathBuf> {
    let found =
        std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).map(|d| d.join(name)).find(|p| p.is_file()));
    if found.is_none() {
        assert!(std::env::var_os("CI").is_none(), "{name} must be installed in CI (see .ci/run)");
        eprintln!("skipping {name}: not installed");
    }
    found
}

fn run(cmd: &mut Command) {
    let out = cmd.output().expect("run tool");
    assert!(out.status.success(), "{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn curl_wget_and_aria2c_download_byte_exact_and_resume() {
    let (dir, data) = data_dir(6 << 20);
    let s = serve(dir.path(), &["--cache", "4MiB"]);
    let url = format!("http://{}/big.bin", s.addr);
    let out = tempfile::tempdir().unwrap();
    if let Some(curl) = tool("curl") {
        let p = out.path().join("curl.bin");
        run(Command::new(&curl).args(["-sSf", "-o"]).arg(&p).arg(&url));
        assert!(std::fs::read(&p).unwrap() == data, "curl copy differs");
        // Resume a partial copy: curl sends Range from the file's length.
        std::fs::write(&p, &data[..1_234_567]).unwrap();
        run(Command::new(&curl).args(["-sSf", "-C", "-", "-o"]).arg(&p).arg(&url));
        assert!(std::fs::read(&p).unwrap() == data, "curl resume differs");
        let h2 = out.path().join("h2.bin");
        run(Command::new(&curl).args(["-sSf", "--http2-prior-knowledge", "-o"]).arg(&h2).arg(&url));
        assert!(std::fs::read(&h2).unwrap() == data, "curl h2c copy differs");
    }
    if let Some(wget) = tool("wget") {
        let p = out.path().join("wget.bin");
        std::fs::write(&p, &data[..777_777]).unwrap();
        run(Command::new(&wget).args(["-q", "-c", "-O"]).arg(&p).arg(&url));
        assert!(std::fs::read(&p).unwrap() == data, "wget resume differs");
    }
    if let Some(aria) = tool("aria2c") {
        // Eight connections on eight ranges of the same file at once.
        run(Command::new(&aria)
            .args(["-q", "-x8", "-s8", "--min-split-size=1M", "--allow-overwrite=true", "-d"])
            .arg(out.path())
            .args(["-o", "aria.bin", &url]));
        assert!(std::fs::read(out.path().join("aria.bin")).unwrap() == data, "aria2c copy differs");
    }
}

#[test]
fn sigterm_lets_downloads_in_progress_finish() {
    let Some(curl) = tool("curl") else { return };
    let (dir, data) = data_dir(3 << 20);
    let mut s = serve(dir.path(), &["--drain-timeout", "20"]);
    let out = tempfile::tempdir().unwrap();
    let p = out.path().join("slow.bin");
    let mut download = Command::new(&curl)
        .args(["-sSf", "--limit-rate", "2M", "-o"])
        .arg(&p)
        .arg(format!("http://{}/big.bin", s.addr))
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(400));
    run(Command::new("kill").args(["-TERM", &s.child.id().to_string()]));
    assert!(download.wait().unwrap().success(), "download cut by shutdown");
    assert!(std::fs::read(&p).unwrap() == data);
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "server did not exit after draining");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(s.child.try_wait().unwrap().unwrap().success());
}

fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 =
        status.lines().find(|l| l.starts_with("VmRSS:")).unwrap().split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

#[test]
fn memory_budget_holds_with_500_slow_clients() {
    let (dir, _) = data_dir(32 << 20);
    let s = serve(dir.path(), &["--cache", "16MiB"]);
    let pid = s.child.id();
    let baseline = rss_bytes(pid);
    // Clients that ask and then read almost nothing: their sockets fill and
    // the server must hold at most their queued blocks, within the budget.
    let mut conns = Vec::new();
    for i in 0..500 {
        let mut c = TcpStream::connect(&s.addr).unwrap();
        let accept = if i % 2 == 0 { "application/vnd.circus.blocks" } else { "*/*" };
        write!(c, "GET /big.bin HTTP/1.1\r\nHost: x\r\nAccept: {accept}\r\n\r\n").unwrap();
        conns.push(c);
    }
    std::thread::sleep(Duration::from_secs(2));
    for c in conns.iter_mut().take(50) {
        let mut buf = [0u8; 4096];
        c.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
        let _ = c.read(&mut buf);
    }
    std::thread::sleep(Duration::from_millis(500));
    let mut status = String::new();
    let mut c = TcpStream::connect(&s.admin).unwrap();
    write!(c, "GET /status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    c.read_to_string(&mut status).unwrap();
    let json: serde_json::Value = serde_json::from_str(status.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    let used = json["scheduler"]["used_bytes"].as_u64().unwrap();
    assert!(used <= 16 << 20, "scheduler holds {used} bytes over its 16 MiB budget");
    let clients: usize =
        json["scheduler"]["files"].as_array().unwrap().iter().map(|f| f["clients"].as_array().unwrap().len()).sum();
    // Each download is still served (parked: it pins nothing) or its
    // connection was cut because what it held did not fit beside the cache.
    let mut metrics = String::new();
    let mut c = TcpStream::connect(&s.admin).unwrap();
    write!(c, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    c.read_to_string(&mut metrics).unwrap();
    let cut: usize = metrics
        .lines()
        .find_map(|l| l.strip_prefix("circus_connections_cut_total "))
        .expect("connections_cut metric")
        .parse()
        .unwrap();
    eprintln!("{clients} downloads served, {cut} connections cut");
    assert!(clients + cut >= 500, "{clients} downloads active and {cut} cut: some were lost");
    // Memory: the cache, what stalled connections hold outside it (capped
    // at the cache size), and a little per connection.
    let rss = rss_bytes(pid);
    let per_client = rss.saturating_sub(baseline + 2 * (16 << 20)) / 500;
    eprintln!("rss {rss} baseline {baseline}: {per_client} bytes per slow client beyond the cache and what they hold");
    assert!(per_client <= 128 * 1024, "{per_client} bytes per slow client beyond the cache budget");
}

/// The `cache_pages` part of the admin listener's `/status`.
fn cache_pages(admin: &str) -> serde_json::Value {
    let (mut r, status, _) = common::get_head(admin, "/status", &[]);
    assert_eq!(status, 200);
    let mut body = Vec::new();
    r.read_to_end(&mut body).unwrap();
    let status: serde_json::Value = serde_json::from_slice(&body).unwrap();
    status["cache_pages"].clone()
}

#[test]
fn at_the_defaults_the_cache_is_a_private_tmpfs_of_huge_pages_and_serves_byte_exact() {
    let (dir, data) = data_dir(5 << 20);
    let mounts_before = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let server = serve(dir.path(), &["--cache", "4MiB"]);
    let pages = cache_pages(&server.admin);
    if pages["backing"] != "private huge tmpfs" {
        // As root, with shmem huge pages off (the kernel's default), it
        // must work, unless a sandbox forbids user namespaces.
        let root = std::fs::metadata("/proc/self").is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0);
        let shmem = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/shmem_enabled").unwrap_or_default();
        assert!(!(root && shmem.contains("[never]")), "as root a private huge tmpfs is possible here: {pages}");
        eprintln!("SKIPPED: no private huge tmpfs for this user or kernel here; the cache is {pages} (shmem: {shmem})");
        return;
    }
    assert!(pages["largest_page_bytes"].as_u64().unwrap() >= 2 << 20, "{pages}");
    // More than the cache: the second download reuses freed granules.
    for _ in 0..2 {
        let (mut r, status, _) = common::get_head(&server.addr, "/big.bin", &[]);
        assert_eq!(status, 200);
        let mut body = Vec::new();
        r.read_to_end(&mut body).unwrap();
        assert!(body == data, "download differs ({} of {} bytes)", body.len(), data.len());
    }
    // The mount was the server's child's alone.
    assert_eq!(std::fs::read_to_string("/proc/self/mounts").unwrap(), mounts_before);
}

#[test]
fn a_cache_dir_serves_byte_exact_and_a_missing_one_is_refused_by_name() {
    let (dir, data) = data_dir(3 << 20);
    let cache = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), &["--cache", "2MiB", "--cache-dir", cache.path().to_str().unwrap()]);
    // Twice: the second download reuses freed slots of the cache file.
    for _ in 0..2 {
        let (mut r, status, _) = common::get_head(&server.addr, "/big.bin", &[]);
        assert_eq!(status, 200);
        let mut body = Vec::new();
        r.read_to_end(&mut body).unwrap();
        assert!(body == data, "cache-dir download differs ({} of {} bytes)", body.len(), data.len());
    }
    // /status says what the cache is made of: a file there, whose pages
    // may be as large as the kernel's huge pages.
    let pages = &cache_pages(&server.admin);
    let backing = pages["backing"].as_str().unwrap();
    assert_eq!(backing, format!("file in {}", cache.path().display()), "{pages}");
    assert!(pages["largest_page_bytes"].as_u64().unwrap() >= 2 << 20, "{pages}");
    let missing = cache.path().join("missing");
    let out = Command::new(env!("CARGO_BIN_EXE_circus"))
        .args([
            "serve",
            dir.path().to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "off",
            "--cache-dir",
        ])
        .arg(&missing)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "started with a missing --cache-dir");
    assert!(stderr.contains("--cache-dir") && stderr.contains("missing"), "{stderr}");
}

/// A response's fields as curl printed them, lowercased and sorted, without
/// the status line and `date`.
fn fields(curl: &Path, url: &str, extra: &[&str]) -> Vec<String> {
    let out = Command::new(curl).args(["-sS", "-D", "-", "-o", "/dev/null"]).args(extra).arg(url).output().unwrap();
    assert!(out.status.success(), "curl {extra:?}: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines: Vec<String> = text
        .lines()
        .skip(1)
        .map(|l| l.trim().to_ascii_lowercase())
        .filter(|l| !l.is_empty() && !l.starts_with("date:"))
        .collect();
    lines.sort();
    lines
}

/// Kept files of many sizes, fetched together as streams of one h2
/// connection: their frames are gathered by reference into shared writes
/// (`lent`), and each file must still arrive whole and alone.
#[test]
fn kept_files_fetched_together_over_h2_arrive_each_whole() {
    let Some(curl) = tool("curl") else { return };
    let dir = tempfile::tempdir().unwrap();
    let sizes: Vec<usize> = (0..24).map(|i| 1000 + i * 41_000).collect();
    let files: Vec<(String, Vec<u8>)> = sizes
        .iter()
        .enumerate()
        .map(|(i, &size)| {
            let seed = i as u64 + 1;
            let data = (0..size as u64).map(|j| (j.wrapping_mul(seed * 0x9E37_79B9) >> 24) as u8).collect();
            (format!("f{i:02}.bin"), data)
        })
        .collect();
    for (name, data) in &files {
        std::fs::write(dir.path().join(name), data).unwrap();
    }
    let s = serve(dir.path(), &[]);
    // A plain GET of each has it kept whole; give those reads a moment.
    for (name, _) in &files {
        run(Command::new(&curl).args(["-sSf", "-o", "/dev/null", &format!("http://{}/{name}", s.addr)]));
    }
    std::thread::sleep(Duration::from_millis(500));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let stream = tokio::net::TcpStream::connect(&s.addr).await.unwrap();
        let (send, conn) = hyper::client::conn::http2::handshake::<_, _, http_body_util::Empty<bytes::Bytes>>(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(stream),
        )
        .await
        .unwrap();
        tokio::spawn(conn);
        for round in 0..3 {
            let mut fetches = tokio::task::JoinSet::new();
            for (i, (name, _)) in files.iter().enumerate() {
                let mut send = send.clone();
                let req = hyper::Request::get(format!("http://{}/{name}", s.addr)).body(Default::default()).unwrap();
                fetches.spawn(async move {
                    let res = send.send_request(req).await.unwrap();
                    assert_eq!(res.status(), 200);
                    (i, http_body_util::BodyExt::collect(res.into_body()).await.unwrap().to_bytes())
                });
            }
            while let Some(fetched) = fetches.join_next().await {
                let (i, got) = fetched.unwrap();
                let (name, data) = &files[i];
                assert!(got == data[..], "round {round}: {name} differs ({} bytes, want {})", got.len(), data.len());
            }
        }
    });
}

#[test]
fn a_small_file_has_the_same_fields_on_every_path_and_2000_h2_streams_arrive_whole() {
    let Some(curl) = tool("curl") else { return };
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(dir.path().join("small.bin"), &data).unwrap();
    let s = serve(dir.path(), &[]);
    let url = format!("http://{}/small.bin", s.addr);
    // The first plain GET has the file kept whole (and its hash index
    // built, for Repr-Digest); give that read a moment.
    fields(&curl, &url, &[]);
    std::thread::sleep(Duration::from_millis(500));
    // A condition that does not hold keeps the request on the full path,
    // which renders every field for it.
    let full_path = fields(&curl, &url, &["--http2-prior-knowledge", "-H", "If-None-Match: \"other\""]);
    assert!(full_path.iter().any(|l| l.starts_with("repr-digest:")), "{full_path:?}");
    assert_eq!(fields(&curl, &url, &["--http2-prior-knowledge"]), full_path, "h2, kept whole");
    assert_eq!(fields(&curl, &url, &[]), full_path, "HTTP/1.1, the hit lane");

    // Streams multiplexed on one connection, answered inline and written
    // together: every one complete. (curl 7.88 cannot multiplex h2c.)
    let Some(h2load) = tool("h2load") else { return };
    let out = Command::new(h2load).args(["-n", "2000", "-c", "1", "-m", "100", &url]).output().unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("2000 succeeded, 0 failed"), "{report}");
    assert!(report.contains("(2000000) data"), "every body whole: {report}");
}
