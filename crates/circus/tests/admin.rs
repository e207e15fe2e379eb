//! The admin listener (`--admin-listen`) of a tier in front of an origin:
//! purge by target and by prefix, prefetch, and the metrics that show
//! bytes from the origin beside bytes served, by object class. The origin
//! is another `circus serve` of a directory whose files are old enough to
//! be fresh for a while by the heuristic of RFC 9111 §4.2.2.

mod common;

use std::{
    io::{Read, Write},
    net::TcpStream,
    path::Path,
    time::{Duration, Instant, SystemTime},
};

/// One request on its own connection: the status and the body.
fn call(addr: &str, method: &str, target: &str) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let req = format!("{method} {target} HTTP/1.1\r\nhost: test\r\nconnection: close\r\ncontent-length: 0\r\n\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("a response head");
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).expect("a status");
    (status, raw[end + 4..].to_vec())
}

/// A counter's value in the admin listener's /metrics (0 when absent).
fn metric(admin: &str, name: &str) -> u64 {
    let (status, body) = call(admin, "GET", "/metrics");
    assert_eq!(status, 200);
    let text = String::from_utf8(body).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .map_or(0, |v| v.trim().parse::<f64>().unwrap() as u64)
}

fn origin_requests(admin: &str) -> u64 {
    metric(admin, "circus_origin_requests_total")
}

/// Writes `bytes` to `root/rel` with a modification time a year ago.
fn old_file(root: &Path, rel: &str, bytes: &[u8]) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, bytes).unwrap();
    let year_ago = SystemTime::now() - Duration::from_secs(365 * 24 * 3600);
    std::fs::File::options().write(true).open(&path).unwrap().set_modified(year_ago).unwrap();
}

struct Setup {
    _dir: tempfile::TempDir,
    _origin: common::ServerProc,
    tier: common::ServerProc,
    admin: String,
    big: Vec<u8>,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    for rel in ["a/x.txt", "a/y.txt", "b/z.txt"] {
        old_file(dir.path(), rel, rel.as_bytes());
    }
    let big: Vec<u8> = (0..3u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    old_file(dir.path(), "big.bin", &big);
    let origin = common::serve(&[dir.path().to_str().unwrap()]);
    let url = format!("http://{}/", origin.addr);
    let tier = common::serve(&["--origin", &url, "--origin-block", "1MiB", "--cache", "64MiB"]);
    let admin = tier.admin.clone();
    Setup { _dir: dir, _origin: origin, tier, admin, big }
}

#[test]
fn purge_forgets_a_target_or_every_target_under_a_prefix_and_only_those() {
    let s = setup();
    for t in ["/a/x.txt", "/a/y.txt", "/b/z.txt"] {
        assert_eq!(call(&s.tier.addr, "GET", t), (200, t.as_bytes()[1..].to_vec()));
    }
    let asked = origin_requests(&s.admin);
    for t in ["/a/x.txt", "/a/y.txt", "/b/z.txt"] {
        assert_eq!(call(&s.tier.addr, "GET", t).0, 200);
    }
    assert_eq!(origin_requests(&s.admin), asked, "stored and fresh: no origin request");

    let (status, body) = call(&s.admin, "POST", "/purge?target=/a/x.txt");
    assert_eq!((status, String::from_utf8_lossy(&body).trim()), (200, r#"{"purged":1}"#));
    assert_eq!(call(&s.tier.addr, "GET", "/a/x.txt").0, 200);
    assert_eq!(origin_requests(&s.admin), asked + 1, "a purged target is asked for again");

    let (status, body) = call(&s.admin, "POST", "/purge?prefix=/a/");
    assert_eq!((status, String::from_utf8_lossy(&body).trim()), (200, r#"{"purged":2}"#));
    assert_eq!(call(&s.tier.addr, "GET", "/a/y.txt").0, 200);
    assert_eq!(call(&s.tier.addr, "GET", "/b/z.txt").0, 200);
    assert_eq!(origin_requests(&s.admin), asked + 2, "only the prefix was purged");

    // A target outside the tier's space, or none at all, is refused.
    assert_eq!(call(&s.admin, "POST", "/purge?target=/../etc/passwd").0, 400);
    assert_eq!(call(&s.admin, "POST", "/purge").0, 400);
    assert_eq!(call(&s.admin, "GET", "/purge?target=/a/x.txt").0, 405);
}

#[test]
fn prefetch_answers_202_and_the_object_is_then_served_without_asking_the_origin() {
    let s = setup();
    let (status, body) = call(&s.admin, "POST", "/prefetch?target=/big.bin");
    assert_eq!((status, String::from_utf8_lossy(&body).trim()), (202, r#"{"prefetching":"/big.bin"}"#));
    let fetched = r#"circus_origin_class_fetched_bytes_total{class="medium"}"#;
    let started = Instant::now();
    while metric(&s.admin, fetched) < s.big.len() as u64 {
        assert!(started.elapsed() < Duration::from_secs(20), "prefetch did not finish");
        std::thread::sleep(Duration::from_millis(50));
    }
    let asked = origin_requests(&s.admin);
    let (status, body) = call(&s.tier.addr, "GET", "/big.bin");
    assert_eq!(status, 200);
    assert!(body == s.big, "the prefetched object, whole");
    assert_eq!(origin_requests(&s.admin), asked, "served from the store");
    let served = r#"circus_origin_class_served_bytes_total{class="medium"}"#;
    assert_eq!(metric(&s.admin, served), s.big.len() as u64, "the client's bytes, counted as served");
    assert_eq!(metric(&s.admin, fetched), s.big.len() as u64, "the origin sent it once");
}

#[test]
fn the_admin_listener_shows_status_with_the_memory_plan() {
    let s = setup();
    let (status, body) = call(&s.admin, "GET", "/status");
    assert_eq!(status, 200);
    let status: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let memory = &status["memory"];
    let parts = ["scheduler", "small_files", "origin_store", "origin_fetches"].map(|k| memory[k].as_u64().unwrap());
    assert_eq!(memory["total"].as_u64(), Some(64 << 20));
    assert_eq!(parts.iter().sum::<u64>(), 64 << 20, "{memory}");
    assert!(parts[2] > 0 && parts[3] > 0, "{memory}");
    // The block cache's memory: a private tmpfs of huge pages where user
    // namespaces are allowed, else a memfd, of 4 KiB pages unless the
    // kernel lets shmem have huge ones.
    let pages = &status["cache_pages"];
    let page = pages["largest_page_bytes"].as_u64().unwrap();
    match pages["backing"].as_str() {
        Some("private huge tmpfs") => assert!(page >= 2 << 20 && page.is_power_of_two(), "{pages}"),
        Some("memfd") => assert!(page == 4096 || (page >= 2 << 20 && page.is_power_of_two()), "{pages}"),
        _ => panic!("{pages}"),
    }
    assert_eq!(call(&s.admin, "GET", "/nothing").0, 404);
}

#[test]
fn without_an_origin_purge_and_prefetch_are_refused_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f"), b"f").unwrap();
    let server = common::serve(&[dir.path().to_str().unwrap()]);
    let admin = server.admin.clone();
    let (status, body) = call(&admin, "POST", "/purge?target=/f");
    assert_eq!(status, 400);
    assert!(String::from_utf8_lossy(&body).contains("origin tier"), "{}", String::from_utf8_lossy(&body));
    assert_eq!(call(&admin, "POST", "/prefetch?target=/f").0, 400);
    assert_eq!(call(&admin, "GET", "/metrics").0, 200);
}

#[test]
fn the_content_listener_serves_files_named_status_and_metrics_not_the_operators_pages() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("status"), b"a file called status").unwrap();
    let s = common::serve(&[dir.path().to_str().unwrap()]);
    let (status, body) = call(&s.addr, "GET", "/status");
    assert_eq!((status, body.as_slice()), (200, &b"a file called status"[..]));
    // No file called metrics: a 404, not the server's counters.
    let (status, body) = call(&s.addr, "GET", "/metrics");
    assert_eq!(status, 404);
    assert!(!String::from_utf8_lossy(&body).contains("circus_"), "{}", String::from_utf8_lossy(&body));
    assert_eq!(call(&s.admin, "GET", "/metrics").0, 200);
}

#[test]
fn by_default_the_admin_listener_is_on_loopback_and_can_be_switched_off() {
    use std::{
        io::BufRead,
        process::{Command, Stdio},
    };
    let dir = tempfile::tempdir().unwrap();
    // The lines the server prints: two when the admin listener is on (read
    // as they come), one when it is off (read until the server is killed).
    let printed = |extra: &[&str], lines: usize| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_circus"))
            .arg("serve")
            .arg(dir.path())
            .args(["--listen", "127.0.0.1:0"])
            .args(extra)
            .env("CIRCUS_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut text = String::new();
        for _ in 0..lines {
            out.read_line(&mut text).unwrap();
        }
        let _ = child.kill();
        let _ = child.wait();
        std::io::Read::read_to_string(&mut out, &mut text).unwrap();
        text
    };
    let default = printed(&[], 2);
    // The default port may be taken on this machine: then the server says so.
    assert!(default.contains("circus admin on http://127.0.0.1:9180") || default.is_empty(), "{default}");
    let off = printed(&["--admin-listen", "off"], 1);
    assert!(off.starts_with("circus listening on http://127.0.0.1:") && !off.contains("admin"), "{off}");
}

/// `/status` in a browser: a self-contained page that reads the JSON every
/// second, rendered by headless Chromium while a download is under way;
/// without Accept: text/html the same path stays JSON.
#[test]
fn the_status_page_renders_live_in_headless_chromium() {
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("big.bin"), vec![3u8; 24 << 20]).unwrap();
    let s = common::serve(&[dir.path().to_str().unwrap()]);
    let mut download = Command::new("curl")
        .args(["-s", "--limit-rate", "2M", "-o", "/dev/null"])
        .arg(format!("http://{}/big.bin", s.addr))
        .spawn()
        .expect("curl is installed (.ci/run installs it)");
    std::thread::sleep(std::time::Duration::from_millis(800));
    let (status, json) = call(&s.admin, "GET", "/status");
    assert_eq!(status, 200);
    let json: serde_json::Value = serde_json::from_slice(&json).expect("plain /status is JSON");
    // Each file by its path, each download with its client's address.
    let file = &json["scheduler"]["files"][0];
    assert_eq!(file["path"], "big.bin", "{json}");
    let peer = file["clients"][0]["peer"].as_str().unwrap_or_else(|| panic!("no peer: {json}"));
    assert!(peer.starts_with("127.0.0.1:"), "{peer}");
    let dom = Command::new("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=3000", "--dump-dom"])
        .arg(format!("http://{}/status", s.admin))
        .stderr(Stdio::null())
        .output()
        .expect("chromium is missing: apt-get install chromium (.ci/run installs it)");
    let _ = download.kill();
    let _ = download.wait();
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert!(dom.contains("<h1>circus status</h1>"), "{dom}");
    assert!(dom.contains("updated "), "the page's script did not fetch the status: {dom}");
    assert!(dom.contains("24.0 MiB") && dom.contains("independent"), "the download is not shown: {dom}");
    assert!(dom.contains("big.bin") && dom.contains(peer), "the file's path and the client's address: {dom}");
    let made_of = ["private huge tmpfs, pages up to 2.0 MiB", "memfd, pages up to "];
    assert!(
        dom.contains("cache memory") && made_of.iter().any(|m| dom.contains(m)),
        "what the cache is made of: {dom}"
    );
    assert!(!dom.contains("http://") && !dom.contains("https://"), "the page loads nothing from elsewhere");
}
