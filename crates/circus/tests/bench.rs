//! End-to-end: `circus bench quick` through the built binary, with real
//! server processes (circus and nginx) reading the FUSE disk model and
//! real clients over the netns + HTB links. Needs root, /dev/fuse and
//! nginx (CI has all three); elsewhere it prints why it is skipped.

use serde_json::Value;
use std::{path::Path, process::Command};

const BIN: &str = env!("CARGO_BIN_EXE_circus");

fn skip_reason() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let root = status.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"));
    if !root {
        return Some("not root (netns, HTB and the FUSE mount need root)".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing".into());
    }
    if !Path::new("/usr/sbin/nginx").exists() && !Path::new("/usr/bin/nginx").exists() {
        return Some("nginx is not installed (apt-get install nginx)".into());
    }
    None
}

/// One bench at a time: each loads both cores and times what it measures
/// (downloads behind links were 15% slower than their links while `bench
/// defaults` ran beside them), so the tests of this file take turns.
static ONE_BENCH_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `circus bench ARGS --json --work DIR` and returns its report.
fn bench_report(args: &[&str], dir: &Path) -> Value {
    let _turn = ONE_BENCH_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let run = Command::new(BIN)
        .args(["bench"])
        .args(args)
        .arg("--json")
        .arg("--work")
        .arg(dir)
        .env("CIRCUS_LOG", "warn")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "bench failed: {stderr}");
    serde_json::from_slice(&run.stdout).unwrap()
}

#[test]
fn bench_quick_measures_circus_and_nginx_on_the_same_disk_and_links() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let turn = ONE_BENCH_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let run = Command::new(BIN)
        .args(["bench", "quick", "--servers", "circus,nginx-sendfile", "--no-sim", "--json", "--work"])
        .arg(dir.path())
        .arg("--out")
        .arg(&out)
        .env("CIRCUS_LOG", "warn")
        .output()
        .unwrap();
    drop(turn);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "bench failed: {stderr}");
    let rows: Vec<Value> =
        String::from_utf8_lossy(&run.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(rows.len(), 2, "{rows:?}");
    for row in &rows {
        for key in [
            "server",
            "net_bytes_per_s",
            "storage_bytes_read",
            "storage_bytes_per_s",
            "miss_ratio",
            "download_mean_s",
            "download_ideal_s",
            "cpu_s",
            "peak_rss_bytes",
            "link_mode",
            "disk_mode",
        ] {
            assert!(row.get(key).is_some(), "{key} missing in {row}");
        }
        assert!(row["net_bytes_per_s"].as_f64().unwrap() > 1e6, "{row}");
        assert!(row["link_mode"].as_str().unwrap().starts_with("kernel"), "{row}");
    }
    let storage = |i: usize| rows[i]["storage_bytes_read"].as_f64().unwrap();
    assert!(storage(0) > 0.0 && storage(1) > 0.0, "every server reads through the disk model: {rows:?}");
    // circus shares reads; nginx reads once per client.
    assert!(storage(0) < storage(1), "{rows:?}");
    for ext in ["json", "csv", "svg"] {
        assert!(out.join(format!("quick.{ext}")).exists(), "quick.{ext} not written");
    }
    // Nothing left behind: no mount under the work dir, no namespace of ours.
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(!mounts.contains(&*dir.path().to_string_lossy()), "mount left behind");
}

/// `circus bench https` end to end at a small scale: nginx and circus with
/// the same certificate, driven by wrk, h2load and curl; every load gives
/// both servers a rate and a ratio with its spread. It needs nginx, wrk,
/// h2load, curl and openssl (CI installs them all; a missing one fails).
#[test]
fn bench_https_drives_circus_and_nginx_with_wrk_h2load_and_curl() {
    let dir = tempfile::tempdir().unwrap();
    let report = bench_report(
        &["https", "--file-size", "4MiB", "--clients", "3", "--seconds", "1", "--rounds", "2"],
        dir.path(),
    );
    let rows = report["rows"].as_array().unwrap();
    // Five loads, each: circus, nginx and their ratio.
    assert_eq!(rows.len(), 15, "{report}");
    for row in rows {
        let first = row["figures"][0][1].as_f64().unwrap();
        assert!(first > 0.0, "{row}");
    }
    let ratios: Vec<&Value> = rows.iter().filter(|r| r["server"].as_str().unwrap().starts_with("ratio")).collect();
    assert_eq!(ratios.len(), 5, "{report}");
    assert!(report["verdict"].as_str().unwrap().contains("circus / nginx"), "{report}");
}

#[test]
fn bench_defaults_drives_circus_and_nginx_in_clear_over_every_size_and_protocol() {
    let dir = tempfile::tempdir().unwrap();
    let report = bench_report(
        &["defaults", "--file-size", "4MiB", "--clients", "3", "--seconds", "1", "--rounds", "1"],
        dir.path(),
    );
    let rows = report["rows"].as_array().unwrap();
    // Eleven loads, each: circus, nginx and their ratio.
    assert_eq!(rows.len(), 33, "{report}");
    for row in rows.iter().filter(|r| !r["server"].as_str().unwrap().starts_with("ratio")) {
        assert!(row["figures"][0][1].as_f64().unwrap() > 0.0, "{row}");
    }
    let names: Vec<&str> = rows.iter().map(|r| r["server"].as_str().unwrap()).collect();
    for load in ["16MiB keep-alive", "1KiB new conn per request", "100KiB h2, 100 streams", "curl downloads"] {
        assert!(names.iter().any(|n| n.starts_with("ratio") && n.contains(load)), "no {load} in {names:?}");
    }
    assert!(report["verdict"].as_str().unwrap().contains("server CPU per byte"), "{report}");
    let plot = std::fs::read_to_string(dir.path().join("defaults.svg")).expect("the run draws its figure");
    assert!(plot.contains("circus / nginx") && plot.contains("h2, 100 streams"), "{plot}");
    // Each ratio comes with the ceiling the clients' and the kernel's
    // measured costs leave on this machine and with server and clients'
    // CPU per byte over nginx's; a server row with what its clients spent.
    let figure = |row: &Value, name: &str| {
        let figures = row["figures"].as_array().unwrap();
        figures.iter().find(|f| f[0] == name).and_then(|f| f[1].as_f64())
    };
    for row in rows {
        let name = row["server"].as_str().unwrap();
        let (key, what) =
            if name.starts_with("ratio") { ("ceiling", "ceiling") } else { ("client_cpu_s_per_gb", "client CPU") };
        let value = figure(row, key).unwrap_or_else(|| panic!("no {what} in {row}"));
        // Three downloads of 4 MiB may cost curl less than a clock tick.
        if !name.contains("curl downloads") {
            assert!(value.is_finite() && value > 0.0, "{what} {value} in {row}");
            if name.starts_with("ratio") {
                let together = figure(row, "cpu_with_clients_per_byte_over_nginx");
                assert!(together.is_some_and(|v| v.is_finite() && v > 0.0), "no server + clients CPU in {row}");
            }
        }
    }
}

#[test]
fn bench_amplification_plain_reports_reads_beside_the_best_any_cache_could_do() {
    // One after the other: each drops the page cache and times downloads.
    amplification_plain_reports_reads_beside_the_best_any_cache_could_do("kernel");
    amplification_plain_reports_reads_beside_the_best_any_cache_could_do("client");
}

fn amplification_plain_reports_reads_beside_the_best_any_cache_could_do(links: &str) {
    // nginx runs in a memory cgroup, after the page cache is dropped, and
    // kernel links live in a namespace: root.
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let report = bench_report(
        &["amplification-plain", "--file-size", "64MiB", "--cache", "24MiB", "--clients", "4", "--links", links],
        dir.path(),
    );
    let setup = report["setup"].as_str().unwrap();
    let said = if links == "kernel" { "behind emulated links" } else { "throttling themselves" };
    assert!(setup.contains(said), "{setup}");
    let figure = |server: &str, name: &str| {
        let row = report["rows"].as_array().unwrap().iter().find(|r| r["server"] == server).unwrap();
        let figures = row["figures"].as_array().unwrap();
        figures
            .iter()
            .find(|f| f[0] == name)
            .and_then(|f| f[1].as_f64())
            .unwrap_or_else(|| panic!("no {name} in {row}"))
    };
    let (circus, lru) = (figure("circus", "amplification"), figure("sequential", "amplification"));
    let best = figure("circus", "best_possible_amplification");
    // The bound is computed from the rates the downloads actually got,
    // which curl measures a little differently from the server's reads.
    assert!(best >= 1.0 && circus >= best * 0.9, "circus {circus} below the best possible {best}: {report}");
    assert!(circus <= lru * 1.05, "circus {circus} against LRU's {lru}: {report}");
    // The bench's verdict holds circus to 1.10 x the ideal time (release
    // builds, docs/results). Here a debug build's downloads last two
    // seconds on a shared machine, where one stall of a quarter second
    // reads as 1.12 (CI: 1.14 once, 1.00-1.06 otherwise): this bound
    // catches downloads left waiting on reads, which run far slower.
    assert!(figure("circus", "download_vs_ideal_mean") <= 1.25, "{report}");
    // Favoring storage, the downloads are paced to stay together and the
    // file is read about once. (Starts spread over half a second put a
    // 60 MB/s download 30 MB ahead: the cache must be large enough for the
    // late starters still to share, as in the full-size scenario.)
    let stored = figure("circus, favor storage", "amplification");
    assert!(stored <= 1.15, "favoring storage {stored}: {report}");
    // nginx, its page cache bounded to the same budget, read the file from
    // storage at least once (nothing was left in memory for it), and the
    // bound held.
    let nginx = "nginx, page cache bounded";
    assert!(figure(nginx, "amplification") >= 0.99, "{report}");
    assert!(figure(nginx, "memory_peak_bytes") <= figure(nginx, "memory_limit_bytes"), "{report}");
}

/// Every process whose parent is `pid`.
fn children(pid: u32) -> Vec<u32> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).map(|d| d.flatten().collect()).unwrap_or(Vec::new());
    tasks
        .iter()
        .flat_map(|t| {
            std::fs::read_to_string(t.path().join("children"))
                .unwrap_or_default()
                .split_whitespace()
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Whether `pid` is still running (a zombie is not).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')))
}

/// A bench under test: killed, and its namespace removed, when dropped
/// (after it stopped on its own, both are already gone).
struct Sweep {
    pid: u32,
    namespace: String,
}

impl Drop for Sweep {
    fn drop(&mut self) {
        if running(self.pid) {
            // Its servers first (nginx's master stops its workers on
            // SIGTERM), then the bench.
            for (p, signal) in
                children(self.pid).into_iter().map(|p| (p, libc::SIGTERM)).chain([(self.pid, libc::SIGKILL)])
            {
                #[allow(unsafe_code)]
                // SAFETY: kill(2) with the pid of the test's child or its.
                unsafe {
                    libc::kill(p as i32, signal);
                }
            }
        }
        let _ = Command::new("ip").args(["netns", "del", &self.namespace]).stderr(std::process::Stdio::null()).status();
    }
}

/// Ctrl-C in the middle of a signature sweep stops it and removes what it
/// started: the servers in the namespace, the namespace, the line. Before,
/// the process died on the signal and left them all behind.
#[test]
fn an_interrupted_signature_sweep_removes_its_servers_and_namespace() {
    if let Some(why) = skip_reason() {
        eprintln!("\n*** SKIPPED: {why} ***\n");
        return;
    }
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let _turn = ONE_BENCH_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut bench = Command::new(BIN)
        .args(["bench", "signature-overhead", "--at", "5", "--seconds", "0.5", "--json", "--work"])
        .arg(dir.path())
        .env("CIRCUS_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = bench.id();
    let namespace = format!("cbn{pid}");
    // However the test ends, the sweep ends with it.
    let _sweep = Sweep { pid, namespace: namespace.clone() };
    let (lines, seen) = std::sync::mpsc::channel();
    let stderr = std::io::BufReader::new(bench.stderr.take().unwrap());
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    // Its servers are up once it has probed their capacity.
    let mut log = Vec::new();
    while !log.iter().any(|l: &String| l.contains("capacity about")) {
        log.push(
            seen.recv_timeout(std::time::Duration::from_secs(120)).unwrap_or_else(|_| panic!("no probe: {log:?}")),
        );
    }
    let servers = children(pid);
    assert!(!servers.is_empty(), "no servers under the bench");
    let namespaces =
        || String::from_utf8_lossy(&Command::new("ip").args(["netns", "list"]).output().unwrap().stdout).into_owned();
    assert!(namespaces().contains(&namespace), "{}", namespaces());
    #[allow(unsafe_code)]
    // SAFETY: kill(2) with a child's pid and a signal number.
    unsafe {
        libc::kill(pid as i32, libc::SIGINT);
    }
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = bench.try_wait().unwrap() {
            break status;
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(30), "the bench did not stop on Ctrl-C");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(!status.success());
    let left: Vec<u32> = servers.iter().copied().filter(|&p| running(p)).collect();
    // What the bench left, the test stops: SIGTERM first (nginx's master
    // then stops its workers), SIGKILL after 5 s.
    for signal in [libc::SIGTERM, libc::SIGKILL] {
        for &p in left.iter().filter(|&&p| running(p)) {
            #[allow(unsafe_code)]
            // SAFETY: as above.
            unsafe {
                libc::kill(p as i32, signal);
            }
        }
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while left.iter().any(|&p| running(p)) && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
    let namespace_left = namespaces().contains(&namespace);
    if namespace_left {
        let _ = Command::new("ip").args(["netns", "del", &namespace]).status();
    }
    assert!(left.is_empty(), "servers left running: {left:?}");
    assert!(!namespace_left, "namespace {namespace} left behind");
    // The rest of its log, to the end of its stderr.
    let rest: Vec<String> = std::iter::from_fn(|| seen.recv_timeout(std::time::Duration::from_secs(5)).ok()).collect();
    assert!(rest.iter().any(|l| l.contains("interrupted")), "{rest:?}");
}
