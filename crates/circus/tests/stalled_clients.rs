//! Clients that stop reading may not stall everyone else: the blocks they
//! pin are released by closing them once they crowd out reads, and a
//! response that makes no progress is closed after the send timeout.

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

#[test]
fn two_hundred_clients_that_stop_reading_do_not_stall_a_download() {
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..SIZE).map(|i| (i / 4096) as u8).collect();
    std::fs::write(dir.path().join("big.bin"), &data).unwrap();
    let s = common::serve(&[dir.path().to_str().unwrap(), "--cache", "16MiB"]);
    let held = stalled(&s.addr, 200);
    // Let them fill their sockets and pin what they can.
    std::thread::sleep(Duration::from_secs(1));
    let started = Instant::now();
    let got = raw_get_all(&s.addr, Duration::from_secs(30))
        .expect("the download stalled behind clients that stopped reading");
    let took = started.elapsed();
    assert!(got == data, "{} bytes, not the file", got.len());
    eprintln!("32 MiB beside 200 stalled connections in {:.2} s", took.as_secs_f64());
    assert!(took < Duration::from_secs(20), "took {took:?}");
    drop(held);
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
    let (_, status, _) = common::get_head(&s.addr, "/big.bin", &[]);
    assert_eq!(status, 503);
    drop(four);
}
