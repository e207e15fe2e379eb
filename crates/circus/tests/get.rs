//! End-to-end: the `circus` binary serving a directory (`circus serve`) and
//! downloading from it (`circus get`), as separate processes on 127.0.0.1.

mod common;

use std::{
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

const BIN: &str = env!("CARGO_BIN_EXE_circus");

/// Kills the child process when the test ends, however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `circus get ARGS` to completion (at most a minute).
fn get(args: &[&str]) -> (i32, String) {
    let child = Command::new(BIN)
        .arg("get")
        .args(args)
        .env("CIRCUS_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = Running(child);
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "circus get hung");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.0.stderr.take().unwrap(), &mut stderr).unwrap();
    (status.code().unwrap_or(-1), stderr)
}

#[test]
fn get_downloads_byte_exact_natively_and_plainly() {
    let served = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..2_500_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    std::fs::write(served.path().join("f.bin"), &data).unwrap();
    let server = common::serve(&[served.path().to_str().unwrap()]);
    let addr = server.addr.clone();
    let out = tempfile::tempdir().unwrap();
    for (name, extra) in [("native", None), ("plain", Some("--plain"))] {
        let path = out.path().join(name);
        let url = format!("http://{addr}/f.bin");
        let mut args = vec![url.as_str(), "-o", path.to_str().unwrap()];
        args.extend(extra);
        let (code, stderr) = get(&args);
        assert_eq!(code, 0, "{name}: {stderr}");
        assert_eq!(std::fs::read(&path).unwrap(), data, "{name}");
        assert!(stderr.contains("SHA-256 verified") || name == "plain", "{name}: {stderr}");
    }
    // Exactly the two outputs: no part or state files left behind.
    assert_eq!(std::fs::read_dir(out.path()).unwrap().count(), 2);
}

#[test]
fn get_of_a_missing_file_exits_4_with_the_status() {
    let served = tempfile::tempdir().unwrap();
    let server = common::serve(&[served.path().to_str().unwrap()]);
    let addr = server.addr.clone();
    let out = tempfile::tempdir().unwrap();
    let path = out.path().join("nope");
    let (code, stderr) = get(&[&format!("http://{addr}/nope"), "-o", path.to_str().unwrap()]);
    assert_eq!(code, 4, "{stderr}");
    assert!(stderr.contains("404") && stderr.contains("not found"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert_eq!(std::fs::read_dir(out.path()).unwrap().count(), 0);
}

#[test]
fn get_with_a_bad_url_or_digest_exits_1() {
    let (code, stderr) = get(&["ftp://example.invalid/f", "-o", "/nonexistent/f"]);
    assert_eq!(code, 1, "{stderr}");
    let (code, stderr) = get(&["http://127.0.0.1:9/f", "--expect-digest", "md5:00"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("--expect-digest"), "{stderr}");
}
