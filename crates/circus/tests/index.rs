//! Hash indexes: a native request never waits long for one (it gets the
//! plain stream while the build goes on), `circus index` builds them ahead
//! into the directory `serve --index-dir` reads and removes those of
//! deleted files, and `/status` lists the builds in progress.

mod common;

use std::{
    io::Read,
    process::Command,
    time::{Duration, Instant},
};

const NATIVE: &str = "application/vnd.circus.blocks";

fn data(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

fn circus(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_circus")).args(args).output().expect("run circus")
}

#[test]
fn a_native_request_does_not_wait_for_an_index_build_and_later_ones_are_native() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = data(8 << 20, 1);
    std::fs::write(dir.path().join("big.bin"), &bytes).unwrap();
    let s = common::serve(&[dir.path().to_str().unwrap(), "--index-wait", "0"]);
    let (mut r, status, headers) = common::get_head(&s.addr, "/big.bin", &[("accept", NATIVE)]);
    assert_eq!(status, 200);
    assert_ne!(headers.get("content-type").map(String::as_str), Some(NATIVE), "{headers:?}");
    let note = headers.get("circus-index").unwrap_or_else(|| panic!("no circus-index field: {headers:?}"));
    assert!(note.starts_with("building;") && note.contains("size=8388608"), "{note}");
    let mut body = Vec::new();
    r.read_to_end(&mut body).unwrap();
    assert!(body == bytes, "the plain stream is not the file");
    // The build went on: soon native requests get the native stream.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, status, headers) = common::get_head(&s.addr, "/big.bin", &[("accept", NATIVE)]);
        assert_eq!(status, 200);
        if headers.get("content-type").map(String::as_str) == Some(NATIVE) {
            break;
        }
        assert!(Instant::now() < deadline, "the index was never built");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (mut r, _, _) = common::get_head(&s.admin, "/status", &[]);
    let mut status = String::new();
    r.read_to_string(&mut status).unwrap();
    let json: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(json["index_builds"], serde_json::json!([]), "no build left in progress");
    // circus get takes the plain stream of a file still being indexed.
    std::fs::write(dir.path().join("other.bin"), data(4 << 20, 2)).unwrap();
    let out_dir = tempfile::tempdir().unwrap();
    let out = out_dir.path().join("other.bin");
    let got = circus(&["get", &format!("http://{}/other.bin", s.addr), "-o", out.to_str().unwrap()]);
    assert!(got.status.success(), "{}", String::from_utf8_lossy(&got.stderr));
    assert!(std::fs::read(&out).unwrap() == data(4 << 20, 2));
}

#[test]
fn circus_index_builds_ahead_into_the_index_dir_and_removes_indexes_of_deleted_files() {
    let root = tempfile::tempdir().unwrap();
    let indexes = tempfile::tempdir().unwrap();
    std::fs::create_dir(root.path().join("a")).unwrap();
    std::fs::write(root.path().join("a/b.bin"), data(3 << 20, 3)).unwrap();
    std::fs::write(root.path().join("c.bin"), data(100_000, 4)).unwrap();
    std::fs::write(root.path().join(".hidden"), b"not served, not indexed").unwrap();
    let (r, x) = (root.path().to_str().unwrap(), indexes.path().to_str().unwrap());
    let run = circus(&["index", r, "--index-dir", x]);
    let said = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(run.status.success(), "{said}");
    assert!(said.contains("2 built"), "{said}");
    let idx = |dir: &std::path::Path| {
        std::fs::read_dir(dir)
            .map(|d| d.filter(|e| e.as_ref().unwrap().path().extension().is_some()).count())
            .unwrap_or(0)
    };
    assert_eq!(idx(indexes.path()), 2);
    // Served with the same index dir, the first native request is native
    // at once, and nothing is written beside the data.
    let s = common::serve(&[r, "--index-dir", x, "--index-wait", "1"]);
    let (_, status, headers) = common::get_head(&s.addr, "/a/b.bin", &[("accept", NATIVE)]);
    assert_eq!((status, headers.get("content-type").map(String::as_str)), (200, Some(NATIVE)));
    assert!(!root.path().join(".circus").exists(), "an index was written beside the data");
    drop(s);
    // Run again after a deletion: nothing to build, one index removed.
    std::fs::remove_file(root.path().join("c.bin")).unwrap();
    let run = circus(&["index", r, "--index-dir", x]);
    let said = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(said.contains("0 built, 1 already current, 1 of deleted files removed"), "{said}");
    assert_eq!(idx(indexes.path()), 1);
}
