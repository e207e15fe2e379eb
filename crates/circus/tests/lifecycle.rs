//! Signals, as an operator's service manager sends them: SIGHUP reloads
//! the configuration without dropping a download, SIGTERM refuses new
//! connections at once and lets downloads in progress finish.

use std::{
    io::{BufRead, BufReader},
    net::TcpStream,
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

/// `circus serve --config FILE`, its stderr in `log`; killed when dropped.
struct Served {
    child: Child,
    addr: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(config: &Path, log: &Path) -> Served {
    let mut child = Command::new(env!("CARGO_BIN_EXE_circus"))
        .args(["serve", "--config"])
        .arg(config)
        .env("CIRCUS_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    let addr = line.trim().strip_prefix("circus listening on http://").unwrap_or_else(|| panic!("{line:?}")).to_owned();
    Served { child, addr }
}

fn signal(child: &Child, name: &str) {
    let ok = Command::new("kill").args(["-s", name, &child.id().to_string()]).status().unwrap();
    assert!(ok.success());
}

/// curl downloading `url` at `rate` into `out`.
fn slow_download(url: &str, rate: &str, out: &Path) -> Child {
    Command::new("curl")
        .args(["-sS", "--fail", "--max-time", "60", "--limit-rate", rate, "-o"])
        .arg(out)
        .arg(url)
        .stderr(Stdio::null())
        .spawn()
        .expect("curl is installed (.ci/run installs it)")
}

fn config(dir: &Path, root: &Path, cache: &str) -> std::path::PathBuf {
    let path = dir.join("circus.toml");
    let text = format!(
        "root = {:?}\nlisten = [\"127.0.0.1:0\"]\nadmin_listen = \"off\"\ncache = {cache:?}\ndrain_timeout = \"20s\"\n",
        root.to_str().unwrap()
    );
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn sighup_reloads_the_configuration_without_dropping_any_of_twenty_downloads() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("files");
    std::fs::create_dir(&root).unwrap();
    let data: Vec<u8> = (0..(3u32 << 20)).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    std::fs::write(root.join("f.bin"), &data).unwrap();
    let conf = config(dir.path(), &root, "64MiB");
    let log = dir.path().join("server.log");
    let mut s = serve(&conf, &log);
    let url = format!("http://{}/f.bin", s.addr);
    // 3 MiB at 1.5 MiB/s: each download is under way for about two seconds.
    let outs: Vec<_> = (0..20).map(|i| dir.path().join(format!("out{i}"))).collect();
    let mut curls: Vec<Child> = outs.iter().map(|o| slow_download(&url, "1500K", o)).collect();
    std::thread::sleep(Duration::from_millis(600));
    // A new cache size in the file (applied on restart only), then two
    // hangups: the second while the first's reload may still be going on.
    config(dir.path(), &root, "128MiB");
    signal(&s.child, "HUP");
    std::thread::sleep(Duration::from_millis(100));
    signal(&s.child, "HUP");
    for (i, curl) in curls.iter_mut().enumerate() {
        let status = curl.wait().unwrap();
        assert!(status.success(), "download {i} failed: {status}");
        assert!(std::fs::read(&outs[i]).unwrap() == data, "download {i} differs");
    }
    assert!(s.child.try_wait().unwrap().is_none(), "the server ended on SIGHUP");
    assert!(TcpStream::connect(&s.addr).is_ok(), "the server stopped listening");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("change only when the server is restarted") && text.contains("settings=cache"),
        "the setting that needs a restart is not named:\n{text}"
    );
    // A broken file changes nothing and ends nothing.
    std::fs::write(&conf, "cache = \"lots\"\n").unwrap();
    signal(&s.child, "HUP");
    std::thread::sleep(Duration::from_millis(300));
    assert!(TcpStream::connect(&s.addr).is_ok(), "a bad reload stopped the server");
    assert!(std::fs::read_to_string(&log).unwrap().contains("configuration not reloaded"));
}

#[test]
fn sigterm_refuses_new_connections_at_once_and_lets_a_download_finish() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("files");
    std::fs::create_dir(&root).unwrap();
    let data = vec![5u8; 2 << 20];
    std::fs::write(root.join("f.bin"), &data).unwrap();
    let conf = config(dir.path(), &root, "64MiB");
    let mut s = serve(&conf, &dir.path().join("server.log"));
    let out = dir.path().join("out");
    // 2 MiB at 1 MiB/s: still going when SIGTERM comes.
    let mut curl = slow_download(&format!("http://{}/f.bin", s.addr), "1M", &out);
    std::thread::sleep(Duration::from_millis(500));
    signal(&s.child, "TERM");
    let sent = Instant::now();
    let refused = loop {
        match TcpStream::connect(&s.addr) {
            Err(_) => break sent.elapsed(),
            Ok(_) if sent.elapsed() > Duration::from_secs(2) => panic!("still accepting 2 s after SIGTERM"),
            Ok(_) => std::thread::sleep(Duration::from_millis(2)),
        }
    };
    eprintln!("new connections refused {refused:?} after SIGTERM");
    assert!(refused < Duration::from_millis(100), "refused only after {refused:?}");
    assert!(curl.wait().unwrap().success(), "the download in progress was dropped");
    assert_eq!(std::fs::read(&out).unwrap(), data);
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the server did not exit after draining");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_access_log_has_a_line_per_request_and_sigusr1_reopens_it_after_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("files");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("small.txt"), b"hello").unwrap();
    std::fs::write(root.join("big.bin"), vec![1u8; 1 << 20]).unwrap();
    let log = dir.path().join("access.log");
    let conf = config(dir.path(), &root, "64MiB");
    let mut text = std::fs::read_to_string(&conf).unwrap();
    text += &format!("access_log = {:?}\n", log.to_str().unwrap());
    std::fs::write(&conf, text).unwrap();
    let s = serve(&conf, &dir.path().join("server.log"));
    let curl = |path: &str, extra: &[&str]| {
        let out = Command::new("curl")
            .args(["-sS", "-o", "/dev/null", "-A", "test-agent \"quoted\""])
            .args(extra)
            .arg(format!("http://{}{path}", s.addr))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    // The full path, then the hit lane once the small file is resident,
    // a miss, and a HEAD.
    curl("/small.txt", &[]);
    curl("/big.bin", &[]);
    curl("/small.txt?again", &[]);
    curl("/missing", &[]);
    curl("/big.bin", &["-I"]);
    curl("/big.bin", &["-r", "100-199"]);
    std::thread::sleep(Duration::from_millis(200));
    let lines = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = lines.lines().collect();
    assert_eq!(lines.len(), 6, "{lines:#?}");
    assert!(lines[0].starts_with("127.0.0.1 - - ["), "{}", lines[0]);
    assert!(lines[0].contains("\"GET /small.txt HTTP/1.1\" 200 5 \"-\" \"test-agent \\\"quoted\\\"\""), "{}", lines[0]);
    assert!(lines[1].contains("\"GET /big.bin HTTP/1.1\" 200 1048576 ") && lines[1].contains("mode=plain tls=0"));
    assert!(lines[3].contains("\"GET /missing HTTP/1.1\" 404 "), "{}", lines[3]);
    assert!(lines[4].contains("\"HEAD /big.bin HTTP/1.1\" 200 0 "), "{}", lines[4]);
    assert!(lines[1].ends_with(" range=-"), "{}", lines[1]);
    assert!(lines[5].contains(" 206 100 ") && lines[5].ends_with(" range=100-199/1048576"), "{}", lines[5]);
    // logrotate: the file is moved away, SIGUSR1, and lines go to a new file.
    let rotated = dir.path().join("access.log.1");
    std::fs::rename(&log, &rotated).unwrap();
    signal(&s.child, "USR1");
    std::thread::sleep(Duration::from_millis(300));
    curl("/small.txt", &[]);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(std::fs::read_to_string(&rotated).unwrap().lines().count(), 6);
    let fresh = std::fs::read_to_string(&log).expect("SIGUSR1 reopened the log by its path");
    assert_eq!(fresh.lines().count(), 1, "{fresh}");
}
