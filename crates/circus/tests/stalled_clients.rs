//! Clients that stop reading may not stall everyone else: once the blocks
//! queued for them crowd out reads, their downloads are parked (the blocks
//! are taken back) and they go on where they stopped when they read again;
//! a response that makes no progress is closed after the send timeout.

mod common;

use std::{
    io::{Read, Write},
    net::TcpStream,
    time::{Duration, Instant},
};

const SIZE: usize = 32 << 20;

fn raw_get_all(addr: &str, deadline: Duration) -> Result<Vec<u8>, String> {
    let mut s = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(deadline)).unwrap();
    s.write_all(b"GET /big.bin HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n").unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).map_err(|e| format!("after {} bytes: {e}", all.len()))?;
    let split = all.windows(4).position(|w| w == b"\r\n\r\n").ok_or("no head")? + 4;
    Ok(all[split..].to_vec())
}

/// `n` connections that ask for ranges of the file and never read.
fn stalled(addr: &str, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|i| {
            let mut s = TcpStream::connect(addr).unwrap();
            let from = (i * (128 << 10)) % (SIZE - (1 << 20));
            s.write_all(format!("GET /big.bin HTTP/1.1\r\nhost: t\r\nrange: bytes={from}-\r\n\r\n").as_bytes())
                .unwrap();
            s
        })
        .collect()
}

/// What a stalled client gets once it reads again: the rest of the file
/// from `from`, or a cut (EOF or reset before the end). Wrong bytes fail.
fn read_rest(mut c: TcpStream, i: usize, from: usize, data: &[u8]) -> Rest {
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut head = Vec::new();
    let mut body = 0;
    let mut buf = vec![0u8; 1 << 20];
    while body < SIZE - from {
        let n = match c.read(&mut buf) {
            Ok(0) => return Rest::Cut,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Rest::Cut,
            Err(e) => panic!("stalled client {i} after {body} bytes of body: {e}"),
        };
        let mut got = &buf[..n];
        if head.len() < 4 || !head.ends_with(b"\r\n\r\n") {
            let before = head.len();
            head.extend_from_slice(got);
            match head.windows(4).position(|w| w == b"\r\n\r\n") {
                Some(p) => {
                    got = &got[p + 4 - before..];
                    head.truncate(p + 4);
                }
                None => continue,
            }
        }
        assert!(got == &data[from + body..from + body + got.len()], "stalled client {i} got other bytes");
        body += got.len();
    }
    Rest::Whole
}

#[derive(Debug, PartialEq)]
enum Rest {
    Whole,
    Cut,
}

fn metric(addr: &str, name: &str) -> u64 {
    let (mut r, _, _) = common::get_head(addr, "/metrics", &[]);
    let mut text = String::new();
    r.read_to_string(&mut text).unwrap();
    let line = text.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap_or_else(|| panic!("no {name}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// `n` connections ask for ranges and stop reading, then a download of the
/// whole file runs beside them; then every `n / 10`th reads again. Returns
/// what those got.
fn stalled_beside_a_download(n: usize, cache: &str) -> (Vec<Rest>, common::ServerProc) {
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..SIZE).map(|i| (i / 4096) as u8).collect();
    std::fs::write(dir.path().join("big.bin"), &data).unwrap();
    let s = common::serve(&[dir.path().to_str().unwrap(), "--cache", cache]);
    let held = stalled(&s.addr, n);
    // Let them fill their sockets and pin what they can, until they have
    // taken nothing for long enough to be parked (checked once a tick).
    let waited = Instant::now();
    while metric(&s.admin, "circus_downloads_parked_total") == 0 {
        assert!(waited.elapsed() < Duration::from_secs(10), "no download was parked within 10 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    let started = Instant::now();
    let got = raw_get_all(&s.addr, Duration::from_secs(30))
        .expect("the download stalled behind clients that stopped reading");
    let took = started.elapsed();
    assert!(got == data, "{} bytes, not the file", got.len());
    eprintln!("--cache {cache}: 32 MiB beside {n} stalled connections in {:.2} s", took.as_secs_f64());
    assert!(took < Duration::from_secs(20), "took {took:?}");
    eprintln!(
        "--cache {cache}: after: {} bytes detached, {} parked, {} cut",
        metric(&s.admin, "circus_cache_detached_bytes"),
        metric(&s.admin, "circus_downloads_parked_total"),
        metric(&s.admin, "circus_connections_cut_total")
    );
    // They read again all at once: one after another, the last would have
    // taken no byte for longer than the send timeout.
    let resumed = Instant::now();
    let rests = std::thread::scope(|scope| {
        let readers: Vec<_> = held
            .into_iter()
            .enumerate()
            .step_by(n / 10)
            .map(|(i, c)| {
                let data = &data;
                scope.spawn(move || read_rest(c, i, (i * (128 << 10)) % (SIZE - (1 << 20)), data))
            })
            .collect();
        readers.into_iter().map(|r| r.join().unwrap()).collect()
    });
    eprintln!("--cache {cache}: the 10 that read again were done in {:.2} s", resumed.elapsed().as_secs_f64());
    drop(dir);
    (rests, s)
}

#[test]
fn clients_that_stop_reading_are_parked_and_get_the_rest_when_they_read_again() {
    // A download has at most 32 blocks of 64 KiB queued or held: 30 stalled
    // connections can pin 60 MiB, most of a 64 MiB cache, so unless their
    // blocks are taken back the download beside them waits. What they hold
    // is also under the detached-memory cap (the cache size), so none may
    // be cut. (With 200, what they hold at once depends on timing: the
    // first parked free memory for the next to fill their sockets.)
    let (rests, s) = stalled_beside_a_download(30, "64MiB");
    assert!(rests.iter().all(|r| *r == Rest::Whole), "{rests:?}");
    assert_eq!(metric(&s.admin, "circus_connections_cut_total"), 0);
}

#[test]
fn with_too_little_memory_to_hold_for_them_stalled_clients_are_cut_never_served_wrong_bytes() {
    // What the stalled sockets hold does not fit beside a 16 MiB cache:
    // some are cut, which their clients see as a short body.
    let (rests, s) = stalled_beside_a_download(200, "16MiB");
    let cut = metric(&s.admin, "circus_connections_cut_total");
    eprintln!("{cut} connections cut; of those read again: {rests:?}");
    assert!(cut > 0, "nothing was cut: the test does not exercise the cap");
}

#[test]
fn a_response_without_progress_is_closed_after_the_send_timeout_and_the_address_cap_holds() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("big.bin"), vec![1u8; SIZE]).unwrap();
    let s = common::serve(&[dir.path().to_str().unwrap(), "--send-timeout", "2", "--max-connections-per-ip", "4"]);
    let mut held = stalled(&s.addr, 1).pop().unwrap();
    held.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    std::thread::sleep(Duration::from_secs(4));
    // Closed: reading what the kernel buffered ends in EOF or a reset, not a timeout.
    let started = Instant::now();
    let mut sink = vec![0u8; 1 << 20];
    let end = loop {
        match held.read(&mut sink) {
            Ok(0) => break Ok(()),
            Ok(_) => {}
            Err(e) => break Err(e),
        }
    };
    match end {
        Ok(()) => {}
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}"),
    }
    assert!(started.elapsed() < Duration::from_secs(10), "the stalled response was never closed");
    // Four connections from one address at most: the fifth is answered 503.
    let four: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(&s.addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(200));
    let (_, status, headers) = common::get_head(&s.addr, "/big.bin", &[]);
    assert_eq!(status, 503);
    assert_eq!(headers.get("retry-after").map(String::as_str), Some("1"), "{headers:?}");
    drop(four);
}
