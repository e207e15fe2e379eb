//! Files that change while they are served: no download may end successful
//! with bytes of two versions, and a file replaced under the same size and
//! mtime is served as its new self, also after a restart.

mod common;

use std::{
    io::{Read, Write},
    net::TcpStream,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU32, Ordering},
    },
    time::{Duration, Instant},
};

const SIZE: usize = 4 << 20;

/// Version `k` of the file: every byte is `k`, so a download holding two
/// versions is one whose bytes are not all alike.
fn version(k: u8) -> Vec<u8> {
    vec![k; SIZE]
}

/// Rewrites `path` in place with version `k`, the ways people do:
/// `dd conv=notrunc` (write over, no truncation), `cp` (truncate, then
/// write), and either one followed by `touch -r` (the old mtime back). The
/// data goes in one `write(2)`, so that the file's states on disk are whole
/// versions (and, after a truncation, the empty file): a writer paused
/// halfway would leave a torn file that is itself a state of the disk.
fn rewrite(path: &Path, k: u8, how: u32) {
    let old_mtime = std::fs::metadata(path).unwrap().modified().unwrap();
    let mut f = std::fs::OpenOptions::new().write(true).truncate(how % 2 == 1).open(path).unwrap();
    f.write_all(&version(k)).unwrap();
    if how % 4 >= 2 {
        f.set_modified(old_mtime).unwrap();
    }
}

/// Which version a completed download holds (the empty file that `cp`
/// leaves for a moment counts as one), or `None` for a splice.
fn single_version(bytes: &[u8]) -> Option<u8> {
    match bytes {
        [] => Some(0),
        [first, ..] => (bytes.len() == SIZE && bytes.iter().all(|b| b == first)).then_some(*first),
    }
}

/// A plain GET read to the end: the body if the response was complete.
fn raw_get(addr: &str) -> Option<Vec<u8>> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(20))).ok()?;
    s.write_all(b"GET /f.bin HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n").ok()?;
    let mut all = Vec::new();
    let _ = s.read_to_end(&mut all);
    let split = all.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&all[..split]).to_ascii_lowercase();
    if !head.starts_with("http/1.1 200") {
        return None;
    }
    let len: usize = head.lines().find_map(|l| l.strip_prefix("content-length:"))?.trim().parse().ok()?;
    // Complete means every promised byte came: a cut connection is short.
    (all.len() - split == len).then(|| all[split..].to_vec())
}

fn circus_get(url: &str, out: &Path, plain: bool) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_circus"));
    cmd.args(["get", "-q", "--retries", "3", "--timeout", "20s", "-o"]).arg(out).arg(url);
    if plain {
        cmd.arg("--plain");
    }
    cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("start circus get")
}

#[derive(Default)]
struct Tally {
    complete: AtomicU32,
    refused: AtomicU32,
    spliced: AtomicU32,
}

impl Tally {
    fn count(&self, who: &str, got: Option<Vec<u8>>) {
        match got {
            None => _ = self.refused.fetch_add(1, Ordering::Relaxed),
            Some(bytes) => match single_version(&bytes) {
                Some(_) => _ = self.complete.fetch_add(1, Ordering::Relaxed),
                None => {
                    self.spliced.fetch_add(1, Ordering::Relaxed);
                    let kinds: std::collections::BTreeSet<u8> = bytes.iter().copied().collect();
                    eprintln!("{who}: a successful download holds versions {kinds:?} ({} bytes)", bytes.len());
                }
            },
        }
    }
}

#[test]
fn a_file_rewritten_in_place_during_downloads_is_never_served_spliced() {
    let rounds: u32 = std::env::var("CIRCUS_REWRITE_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(100);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.bin");
    std::fs::write(&path, version(0)).unwrap();
    // A cache smaller than the file: blocks are read while the writer runs.
    let server = common::serve(&[dir.path().to_str().unwrap(), "--cache", "1MiB", "--block", "64KiB"]);
    let url = format!("http://{}/f.bin", server.addr);
    let out = tempfile::tempdir().unwrap();
    let tally = Arc::new(Tally::default());
    let rewrites = Arc::new(AtomicU32::new(0));
    let started = Instant::now();
    for round in 0..rounds {
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (path, stop, rewrites) = (path.clone(), stop.clone(), rewrites.clone());
            std::thread::spawn(move || {
                let mut k = (round * 7 % 250) as u8 + 1;
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(u64::from(k % 5) * 3));
                    rewrite(&path, k, u32::from(k));
                    rewrites.fetch_add(1, Ordering::Relaxed);
                    k = k % 250 + 1;
                }
            })
        };
        let raw: Vec<_> = (0..2)
            .map(|_| {
                let (addr, tally) = (server.addr.clone(), tally.clone());
                std::thread::spawn(move || tally.count("raw GET", raw_get(&addr)))
            })
            .collect();
        let gets: Vec<(PathBuf, bool, Child)> = (0..6)
            .map(|i| {
                let p = out.path().join(format!("r{round}-{i}.bin"));
                let plain = i < 2;
                let child = circus_get(&url, &p, plain);
                (p, plain, child)
            })
            .collect();
        for (p, plain, mut child) in gets {
            let ok = child.wait().unwrap().success();
            let who = if plain { "circus get --plain" } else { "circus get" };
            tally.count(who, ok.then(|| std::fs::read(&p).unwrap()));
        }
        raw.into_iter().for_each(|t| t.join().unwrap());
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
    }
    let (complete, refused, spliced) = (
        tally.complete.load(Ordering::Relaxed),
        tally.refused.load(Ordering::Relaxed),
        tally.spliced.load(Ordering::Relaxed),
    );
    eprintln!(
        "{rounds} rounds, {} rewrites in {:.1} s: {complete} complete single-version downloads, {refused} ended in an error, {spliced} spliced",
        rewrites.load(Ordering::Relaxed),
        started.elapsed().as_secs_f64()
    );
    assert_eq!(spliced, 0, "downloads ended successful with bytes of two versions");
    assert!(complete > 0, "no download completed: the race says nothing");
    assert!(rewrites.load(Ordering::Relaxed) >= rounds, "the writer did not run");
}

/// The file `root/name` replaced by `data` under its old size and mtime,
/// as `cp -p` or `rsync --inplace -t` leave it.
fn replace_keeping_size_and_mtime(root: &Path, name: &str, data: &[u8]) {
    let path = root.join(name);
    let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
    std::thread::sleep(Duration::from_millis(30));
    std::fs::write(&path, data).unwrap();
    std::fs::File::options().write(true).open(&path).unwrap().set_modified(mtime).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().modified().unwrap(), mtime);
}

fn get_native(url: &str, out: &Path) -> Vec<u8> {
    let _ = std::fs::remove_file(out);
    let status = circus_get(url, out, false).wait().unwrap();
    assert!(status.success(), "circus get {url} failed: {status}");
    std::fs::read(out).unwrap()
}

#[test]
fn a_file_replaced_under_the_same_size_and_mtime_is_served_new_also_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f.bin"), version(1)).unwrap();
    let root = dir.path().to_str().unwrap();
    let args = [root, "--cache", "2MiB", "--block", "64KiB"];
    let server = common::serve(&args);
    let url = format!("http://{}/f.bin", server.addr);
    // The first native download builds and stores the index of version 1.
    assert_eq!(single_version(&get_native(&url, &out.path().join("a"))), Some(1));
    replace_keeping_size_and_mtime(dir.path(), "f.bin", &version(2));
    assert_eq!(single_version(&get_native(&url, &out.path().join("b"))), Some(2));
    assert_eq!(single_version(&raw_get(&server.addr).expect("plain GET")), Some(2));
    // A new process finds the stored index of version 2, then a replacement.
    drop(server);
    replace_keeping_size_and_mtime(dir.path(), "f.bin", &version(3));
    let server = common::serve(&args);
    let url = format!("http://{}/f.bin", server.addr);
    assert_eq!(single_version(&get_native(&url, &out.path().join("c"))), Some(3));
    // An atomic mv of a new file is served from the next request on.
    let tmp = dir.path().join(".tmp-new");
    std::fs::write(&tmp, version(4)).unwrap();
    std::fs::rename(&tmp, dir.path().join("f.bin")).unwrap();
    assert_eq!(single_version(&raw_get(&server.addr).expect("plain GET")), Some(4));
    assert_eq!(single_version(&get_native(&url, &out.path().join("d"))), Some(4));
}
