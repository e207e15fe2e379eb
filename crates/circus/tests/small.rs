//! End-to-end tests of the hit lane for whole small local files: after one
//! plain GET through the full path, pipelined requests for the file are
//! answered before hyper with the same fields and bytes, the first request
//! the lane does not take hands the connection over in order, and a file
//! rewritten on disk is served anew within about a second.

mod common;

use std::{
    collections::HashMap,
    io::{BufReader, Write},
    net::TcpStream,
    time::{Duration, Instant},
};

/// One keep-alive connection: sends `requests` in one write and reads
/// one response per request (`true` marks a HEAD).
fn pipelined(addr: &str, requests: &[(&str, bool)]) -> Vec<(u16, HashMap<String, String>, Vec<u8>)> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let burst: String = requests.iter().map(|(r, _)| *r).collect();
    s.write_all(burst.as_bytes()).unwrap();
    let mut r = BufReader::new(s);
    requests.iter().map(|&(_, head)| common::read_response(&mut r, head)).collect()
}

/// The value of an unlabelled metric on /metrics.
fn metric(addr: &str, name: &str) -> f64 {
    let got = pipelined(addr, &[("GET /metrics HTTP/1.1\r\nhost: t\r\n\r\n", false)]);
    let text = String::from_utf8(got[0].2.clone()).unwrap();
    text.lines().find_map(|l| l.strip_prefix(name)?.trim().parse().ok()).unwrap_or(0.0)
}

#[test]
fn small_files_are_answered_by_the_lane_like_the_full_path_and_follow_changes() {
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..3000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(dir.path().join("m.json"), &data).unwrap();
    let server = common::serve(&[dir.path().to_str().unwrap()]);
    let addr = server.addr.as_str();
    let get = "GET /m.json HTTP/1.1\r\nhost: t\r\n\r\n";

    // The full path answers first and admits the file in the background.
    let first = pipelined(addr, &[(get, false)]);
    assert_eq!((first[0].0, first[0].2.as_slice()), (200, data.as_slice()));
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(&server.admin, "circus_small_files_resident_bytes") == 0.0 {
        assert!(Instant::now() < deadline, "the small file was never kept");
        std::thread::sleep(Duration::from_millis(20));
    }
    let reads = metric(&server.admin, "circus_storage_read_bytes_total");
    let hits = pipelined(addr, &[(get, false), (get, false), (get, false)]);
    assert!(hits.iter().all(|r| r.2 == data));
    assert_eq!(metric(&server.admin, "circus_storage_read_bytes_total"), reads, "the lane reads nothing from storage");

    let responses = pipelined(
        addr,
        &[
            (get, false),
            ("HEAD /m.json HTTP/1.1\r\nhost: t\r\n\r\n", true),
            ("GET /m.json?v=2 HTTP/1.1\r\nhost: t\r\nconnection: keep-alive\r\n\r\n", false),
            ("GET /m.json HTTP/1.1\r\nhost: t\r\nrange: bytes=10-19\r\n\r\n", false),
            (get, false),
        ],
    );
    let statuses: Vec<u16> = responses.iter().map(|r| r.0).collect();
    assert_eq!(statuses, [200, 200, 200, 206, 200]);
    assert_eq!(responses[0].2, data);
    assert_eq!(responses[2].2, data);
    assert_eq!(responses[3].2, data[10..20]);
    assert_eq!(responses[4].2, data, "hyper answers after the hand-over");
    // The lane's fields are the full path's (the last response is hyper's).
    let fields = |i: usize| {
        let mut h = responses[i].1.clone();
        h.remove("date").expect("a date field");
        h
    };
    assert_eq!(fields(0), fields(4));
    assert!(fields(0).contains_key("repr-digest"));
    assert_eq!(responses[1].1["content-length"], "3000");

    // Rewritten with other bytes: within about a second the lane lets go.
    let changed = vec![9u8; 1234];
    std::fs::write(dir.path().join("m.json"), &changed).unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    let after = pipelined(addr, &[(get, false)]);
    assert_eq!(after[0].2, changed);
    assert_ne!(after[0].1["etag"], responses[0].1["etag"]);

    // Gone from disk: a 404, not the kept bytes.
    std::fs::remove_file(dir.path().join("m.json")).unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    let gone = pipelined(addr, &[(get, false)]);
    assert_eq!(gone[0].0, 404);
}

#[test]
fn a_request_head_trickled_in_is_cut_off_after_the_header_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("circus.toml");
    std::fs::write(&config, "header_timeout = \"1s\"\n").unwrap();
    let server = common::serve(&[dir.path().to_str().unwrap(), "--config", config.to_str().unwrap()]);
    let mut s = TcpStream::connect(&server.addr).unwrap();
    s.write_all(b"GET /m.json HTTP/1.1\r\nhost: t\r\n").unwrap();
    let started = Instant::now();
    // One more header line every 200 ms: each read brings bytes, but the
    // head never ends; the server must not wait for it forever.
    let closed = loop {
        std::thread::sleep(Duration::from_millis(200));
        if s.write_all(b"x-slow: 1\r\n").is_err() {
            break started.elapsed();
        }
        if started.elapsed() > Duration::from_secs(10) {
            panic!("the server still took header lines after 10 s");
        }
    };
    // Cut off about a second in (the write after the close fails), not
    // whenever a gap between two lines happens to pass the timeout.
    assert!(closed >= Duration::from_millis(900), "cut off after {closed:?}, before the timeout");
    assert!(closed < Duration::from_secs(4), "cut off only after {closed:?}: the timeout restarted with each line");
}

#[test]
fn a_request_to_close_gets_the_kept_file_then_the_end_of_the_connection() {
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..5000u32).map(|i| (i * 13 % 251) as u8).collect();
    std::fs::write(dir.path().join("c.bin"), &data).unwrap();
    let server = common::serve(&[dir.path().to_str().unwrap()]);
    let addr = server.addr.as_str();
    pipelined(addr, &[("GET /c.bin HTTP/1.1\r\nhost: t\r\n\r\n", false)]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(&server.admin, "circus_small_files_resident_bytes") == 0.0 {
        assert!(Instant::now() < deadline, "the small file was never kept");
        std::thread::sleep(Duration::from_millis(20));
    }
    let reads = metric(&server.admin, "circus_storage_read_bytes_total");
    // A request after the close is never answered: the connection ends.
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let close = "GET /c.bin HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n";
    s.write_all([close, "GET /c.bin HTTP/1.1\r\nhost: t\r\n\r\n"].concat().as_bytes()).unwrap();
    let mut r = BufReader::new(s);
    let (status, fields, body) = common::read_response(&mut r, false);
    assert_eq!((status, body.as_slice()), (200, data.as_slice()));
    assert_eq!(fields.get("connection").map(String::as_str), Some("close"));
    let mut rest = Vec::new();
    std::io::Read::read_to_end(&mut r, &mut rest).unwrap();
    assert!(rest.is_empty(), "bytes after the closing answer: {}", String::from_utf8_lossy(&rest));
    assert_eq!(metric(&server.admin, "circus_storage_read_bytes_total"), reads, "answered from the kept copy");
}

#[test]
fn files_up_to_a_mebibyte_are_kept_whole_and_answered_by_the_lane_in_pipelined_bursts() {
    let dir = tempfile::tempdir().unwrap();
    // Four blocks at the default 64 KiB, and fifteen: both under the
    // 1 MiB kept whole.
    let data: Vec<u8> = (0..200 << 10).map(|i: u32| (i.wrapping_mul(31) % 251) as u8).collect();
    std::fs::write(dir.path().join("m.bin"), &data).unwrap();
    let large: Vec<u8> = (0..960 << 10).map(|i: u32| (i.wrapping_mul(17) % 253) as u8).collect();
    std::fs::write(dir.path().join("l.bin"), &large).unwrap();
    let over = vec![7u8; (1 << 20) + 1];
    std::fs::write(dir.path().join("over.bin"), &over).unwrap();
    let server = common::serve(&[dir.path().to_str().unwrap()]);
    let addr = server.addr.as_str();
    let get = "GET /m.bin HTTP/1.1\r\nhost: t\r\n\r\n";
    // Together under what is read for admission at once (2 MiB).
    let get_large = "GET /l.bin HTTP/1.1\r\nhost: t\r\n\r\n";
    pipelined(addr, &[(get, false), (get_large, false), ("GET /over.bin HTTP/1.1\r\nhost: t\r\n\r\n", false)]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(&server.admin, "circus_small_files_resident_bytes") < (data.len() + large.len()) as f64 {
        assert!(Instant::now() < deadline, "the files of four and fifteen blocks were never both kept");
        std::thread::sleep(Duration::from_millis(20));
    }
    let reads = metric(&server.admin, "circus_storage_read_bytes_total");
    // Twenty answers of 200 KiB are more than the lane queues at once
    // (256 KiB): it writes, then answers the rest of the burst.
    let mut burst = vec![(get, false); 20];
    burst.push(("HEAD /m.bin HTTP/1.1\r\nhost: t\r\n\r\n", true));
    burst.push(("GET /m.bin HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n", false));
    let answers = pipelined(addr, &burst);
    for (i, (status, fields, body)) in answers.iter().enumerate() {
        assert_eq!(*status, 200, "answer {i}");
        assert_eq!(fields["content-length"], data.len().to_string(), "answer {i}");
        if i != 20 {
            assert!(*body == data, "answer {i} is not the file");
        }
    }
    assert_eq!(answers[21].1.get("connection").map(String::as_str), Some("close"));
    let answers = pipelined(addr, &[(get_large, false), (get_large, false)]);
    assert!(answers.iter().all(|(status, _, body)| *status == 200 && *body == large), "the kept 960 KiB");
    assert_eq!(metric(&server.admin, "circus_storage_read_bytes_total"), reads, "the lane reads nothing from storage");
    // Over 1 MiB: served by the full path, never kept.
    let resident = metric(&server.admin, "circus_small_files_resident_bytes");
    let kept = (data.len() + large.len() + (64 << 10)) as f64;
    assert!(resident < kept, "{resident} bytes kept: the file over 1 MiB too");
    let got = pipelined(addr, &[("GET /over.bin HTTP/1.1\r\nhost: t\r\n\r\n", false)]);
    assert!(got[0].2 == over);
}

#[test]
fn a_mix_of_files_well_under_the_store_is_read_once_whatever_the_start() {
    // The signature bench's mix in its store (a sixteenth of the cache it
    // gives): 64 files of 1-16 KiB and 16 of 256 KiB, 4.8 MB of 6.75. The
    // store hashes paths with a seed drawn at each start; with shards of
    // six such files, more than half the starts lost some to a full shard
    // and read them again at every request.
    let dir = tempfile::tempdir().unwrap();
    let mut files: Vec<(String, usize)> = (0..64).map(|i| (format!("small-{i:02}.bin"), (1 + i % 16) << 10)).collect();
    files.extend((0..16).map(|i| (format!("medium-{i:02}.bin"), 256 << 10)));
    for (i, (name, size)) in files.iter().enumerate() {
        let bytes: Vec<u8> = (0..*size).map(|j| ((i * 131 + j * 7) % 251) as u8).collect();
        std::fs::write(dir.path().join(name), bytes).unwrap();
    }
    let total: usize = files.iter().map(|f| f.1).sum();
    let gets: Vec<String> = files.iter().map(|(name, _)| format!("GET /{name} HTTP/1.1\r\nhost: t\r\n\r\n")).collect();
    let every = |addr: &str| {
        for chunk in gets.chunks(8) {
            let burst: Vec<(&str, bool)> = chunk.iter().map(|g| (g.as_str(), false)).collect();
            assert!(pipelined(addr, &burst).iter().all(|r| r.0 == 200));
        }
    };
    for start in 0..3 {
        let server = common::serve(&[dir.path().to_str().unwrap(), "--cache", "107968368"]);
        let addr = server.addr.as_str();
        // Each file is admitted after the full path answered it, a few at
        // a time: ask again until a whole pass reads nothing.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let before = metric(&server.admin, "circus_storage_read_bytes_total");
            every(addr);
            std::thread::sleep(Duration::from_millis(100));
            if metric(&server.admin, "circus_storage_read_bytes_total") == before {
                break;
            }
            assert!(Instant::now() < deadline, "start {start}: the mix was never all kept");
        }
        let resident = metric(&server.admin, "circus_small_files_resident_bytes");
        assert!(resident >= total as f64, "start {start}: {resident} bytes kept of {total}");
        let reads = metric(&server.admin, "circus_storage_read_bytes_total");
        for _ in 0..3 {
            every(addr);
        }
        let again = metric(&server.admin, "circus_storage_read_bytes_total") - reads;
        assert_eq!(again, 0.0, "start {start}: {again} bytes read again for a mix the store holds");
    }
}

/// Bytes the process has read through `read`-like system calls and
/// `sendfile` (`rchar` of /proc/PID/io): a body sent with `sendfile` is
/// counted there, one written from memory is not.
fn read_chars(pid: u32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap();
    io.lines().find_map(|l| l.strip_prefix("rchar:")).unwrap().trim().parse().unwrap()
}

#[test]
fn kept_bodies_of_32_kib_or_more_leave_by_sendfile_and_shorter_ones_from_memory() {
    let dir = tempfile::tempdir().unwrap();
    let long: Vec<u8> = (0..200 << 10).map(|i: u32| (i.wrapping_mul(29) % 251) as u8).collect();
    std::fs::write(dir.path().join("long.bin"), &long).unwrap();
    let short = vec![5u8; 8 << 10];
    std::fs::write(dir.path().join("short.bin"), &short).unwrap();
    let server = common::serve(&[dir.path().to_str().unwrap()]);
    let addr = server.addr.as_str();
    let (get_long, get_short) =
        ("GET /long.bin HTTP/1.1\r\nhost: t\r\n\r\n", "GET /short.bin HTTP/1.1\r\nhost: t\r\n\r\n");
    pipelined(addr, &[(get_long, false), (get_short, false)]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(&server.admin, "circus_small_files_resident_bytes") < (long.len() + short.len()) as f64 {
        assert!(Instant::now() < deadline, "the files were never kept");
        std::thread::sleep(Duration::from_millis(20));
    }
    // /status shows where they are: the long body in pages of its own.
    let status = pipelined(&server.admin, &[("GET /status HTTP/1.1\r\nhost: t\r\n\r\n", false)]);
    let status: serde_json::Value = serde_json::from_slice(&status[0].2).unwrap();
    let small = &status["small_files"];
    assert_eq!(small["files"].as_u64(), Some(2), "{small}");
    assert!(small["used_bytes"].as_u64().unwrap() >= (long.len() + short.len()) as u64, "{small}");
    assert_eq!(small["sendable"]["bodies"].as_u64(), Some(1), "{small}");
    assert!(matches!(small["sendable"]["backing"].as_str(), Some("private huge tmpfs" | "memfd")), "{small}");
    assert_eq!(small["sendable"]["used_bytes"].as_u64(), Some(long.len() as u64), "whole pages: {small}");
    assert!(small["sendable"]["capacity_bytes"].as_u64().unwrap() >= small["budget_bytes"].as_u64().unwrap());
    let pid = server.child.id();
    let before = read_chars(pid);
    let answers = pipelined(addr, &[(get_long, false); 10]);
    assert!(answers.iter().all(|(status, _, body)| *status == 200 && *body == long));
    let sent = read_chars(pid) - before;
    assert!(sent >= 10 * long.len() as u64, "{sent} bytes went out by sendfile, not the 10 kept bodies");
    let before = read_chars(pid);
    let answers = pipelined(addr, &[(get_short, false); 10]);
    assert!(answers.iter().all(|(status, _, body)| *status == 200 && *body == short));
    let sent = read_chars(pid) - before;
    assert!(sent < short.len() as u64, "{sent} bytes of short bodies went out by sendfile");
}
