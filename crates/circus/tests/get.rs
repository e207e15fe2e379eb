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

/// What a `circus get` run did.
struct Run {
    code: i32,
    stdout: Vec<u8>,
    stderr: String,
}

/// Runs `circus get ARGS` to completion (at most a minute).
fn get(args: &[&str]) -> (i32, String) {
    let run = get_in(None, args);
    (run.code, run.stderr)
}

/// Runs `circus get ARGS` in `cwd` (default: the test's), collecting its
/// output as it comes so that a large stdout cannot block it.
fn get_in(cwd: Option<&std::path::Path>, args: &[&str]) -> Run {
    let mut cmd = Command::new(BIN);
    cmd.arg("get").args(args).env("CIRCUS_LOG", "warn").stdout(Stdio::piped()).stderr(Stdio::piped());
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    let mut child = Running(cmd.spawn().unwrap());
    let drain = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            r.read_to_end(&mut v).unwrap();
            v
        })
    };
    let stdout = drain(Box::new(child.0.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.0.stderr.take().unwrap()));
    let status = wait(&mut child, Duration::from_secs(60), "circus get hung");
    Run {
        code: status.code().unwrap_or(-1),
        stdout: stdout.join().unwrap(),
        stderr: String::from_utf8_lossy(&stderr.join().unwrap()).into_owned(),
    }
}

/// Waits for the child to exit; fails the test with `hung` after `limit`.
fn wait(child: &mut Running, limit: Duration, hung: &str) -> std::process::ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            return status;
        }
        assert!(started.elapsed() < limit, "{hung}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The names in `dir`, sorted.
fn names(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
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

#[test]
fn get_without_o_keeps_an_existing_file_unless_forced() {
    let served = tempfile::tempdir().unwrap();
    let data = b"fresh content\n".repeat(1000);
    std::fs::write(served.path().join("f.bin"), &data).unwrap();
    let server = common::serve(&[served.path().to_str().unwrap()]);
    let url = format!("http://{}/f.bin", server.addr);
    let cwd = tempfile::tempdir().unwrap();
    let mine = cwd.path().join("f.bin");
    std::fs::write(&mine, b"my own notes").unwrap();

    let run = get_in(Some(cwd.path()), &[&url]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("f.bin") && run.stderr.contains("--force"), "{}", run.stderr);
    assert_eq!(run.stderr.trim().lines().count(), 1, "one line: {}", run.stderr);
    assert_eq!(std::fs::read(&mine).unwrap(), b"my own notes");
    assert_eq!(names(cwd.path()), ["f.bin"], "no part or state file either");

    let run = get_in(Some(cwd.path()), &[&url, "--force"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(std::fs::read(&mine).unwrap(), data);
    // With -o the name is the user's own choice: it is replaced as before.
    let run = get_in(Some(cwd.path()), &[&url, "-o", "f.bin"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
}

#[test]
fn get_without_o_writes_no_dotfile_named_by_the_url() {
    let served = tempfile::tempdir().unwrap();
    let server = common::serve(&[served.path().to_str().unwrap()]);
    let cwd = tempfile::tempdir().unwrap();
    for path in ["/.bashrc", "/home/me/.ssh%2Fauthorized_keys", "/%2Eprofile"] {
        let url = format!("http://{}{path}", server.addr);
        let run = get_in(Some(cwd.path()), &[&url]);
        assert_eq!(run.code, 1, "{path}: {}", run.stderr);
        assert!(run.stderr.contains("-o"), "{path}: {}", run.stderr);
        assert!(names(cwd.path()).is_empty(), "{path}: {:?}", names(cwd.path()));
    }
    // --force lets a dotfile through: what fails then is the server's 404
    // (circus serve hides dotfiles), not the name.
    let url = format!("http://{}/.bashrc", server.addr);
    let run = get_in(Some(cwd.path()), &[&url, "--force"]);
    assert_eq!(run.code, 4, "{}", run.stderr);
    assert!(names(cwd.path()).is_empty(), "{:?}", names(cwd.path()));
}

#[test]
fn get_to_stdout_writes_only_verified_bytes() {
    let served = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..1_500_000u32).map(|i| (i.wrapping_mul(2_246_822_519) >> 24) as u8).collect();
    std::fs::write(served.path().join("f.bin"), &data).unwrap();
    let server = common::serve(&[served.path().to_str().unwrap()]);
    let cwd = tempfile::tempdir().unwrap();
    let url = format!("http://{}/f.bin", server.addr);
    for extra in [None, Some("--plain")] {
        let mut args = vec![url.as_str(), "-o", "-"];
        args.extend(extra);
        let run = get_in(Some(cwd.path()), &args);
        assert_eq!(run.code, 0, "{extra:?}: {}", run.stderr);
        assert!(run.stdout == data, "{extra:?}: {} bytes on stdout", run.stdout.len());
        assert!(run.stderr.contains("stdout"), "{extra:?}: the summary goes to stderr: {}", run.stderr);
        assert!(names(cwd.path()).is_empty(), "{extra:?}: {:?}", names(cwd.path()));
    }
    // A failed download writes nothing to stdout.
    let run = get_in(Some(cwd.path()), &[&format!("http://{}/nope", server.addr), "-o", "-"]);
    assert_eq!(run.code, 4, "{}", run.stderr);
    assert!(run.stdout.is_empty());
    assert!(names(cwd.path()).is_empty(), "{:?}", names(cwd.path()));
}

#[test]
fn ctrl_c_saves_the_progress_exits_130_and_the_next_run_resumes() {
    let served = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..8_000_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    std::fs::write(served.path().join("f.bin"), &data).unwrap();
    let server = common::serve(&[served.path().to_str().unwrap()]);
    let out = tempfile::tempdir().unwrap();
    let path = out.path().join("f.bin");
    let url = format!("http://{}/f.bin", server.addr);
    // 8 MB at 2 MiB/s: about 4 s, interrupted after 1.5 s.
    let mut child = Running(
        Command::new(BIN)
            .args(["get", "--limit-rate", "2MiB", &url, "-o", path.to_str().unwrap()])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(Duration::from_millis(1500));
    let killed = Command::new("kill").args(["-INT", &child.0.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let status = wait(&mut child, Duration::from_secs(10), "circus get ignored Ctrl-C");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.0.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(130), "{status:?}: {stderr}");
    assert!(stderr.contains("interrupted") && stderr.contains("resumes"), "{stderr}");
    assert_eq!(names(out.path()), ["f.bin.circus-part", "f.bin.circus-state"]);

    let (code, stderr) = get(&[&url, "-o", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("resumed after"), "{stderr}");
    assert_eq!(std::fs::read(&path).unwrap(), data);
    assert_eq!(names(out.path()), ["f.bin"]);
}
