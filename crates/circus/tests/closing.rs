//! How a connection ends when the server ends it (RFC 9112 §9.6): a
//! client that sent more than the server will answer (requests pipelined
//! after a last one, the rest of a body) still gets the whole of the last
//! response. Closing a socket with bytes unread makes the kernel send a
//! reset, which throws away whatever of the response was still on its
//! way; the server must stop sending first, then read and discard until
//! the client closes.

mod common;

use std::{
    io::{Read, Write},
    net::TcpStream,
    time::Duration,
};

/// Sends `first` and `more` in one write, waits a moment (so the server
/// has closed by the time the client reads), then reads to the end: the
/// bytes received, or how far it got before the connection was reset.
fn send_then_read(addr: &str, first: &[u8], more: &[u8]) -> Result<Vec<u8>, String> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(&[first, more].concat()).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mut got = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Ok(got),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => return Err(format!("{e} after {} bytes", got.len())),
        }
    }
}

/// The body of the one response in `wire`, checked against its
/// Content-Length.
fn body(wire: &[u8]) -> &[u8] {
    let end = wire.windows(4).position(|w| w == b"\r\n\r\n").expect("a response head") + 4;
    let head = String::from_utf8_lossy(&wire[..end]).to_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("content-length");
    assert_eq!(wire.len() - end, length, "exactly one body after the head");
    &wire[end..]
}

#[test]
fn the_last_response_arrives_whole_when_the_client_sent_more_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let medium: Vec<u8> = (0..256 << 10).map(|i: u32| (i.wrapping_mul(29) % 251) as u8).collect();
    let large: Vec<u8> = (0..8 << 20).map(|i: u32| (i.wrapping_mul(13) % 241) as u8).collect();
    std::fs::write(dir.path().join("medium.bin"), &medium).unwrap();
    std::fs::write(dir.path().join("large.bin"), &large).unwrap();
    let server = common::serve(&[dir.path().to_str().unwrap()]);
    // Requests the server will never answer: it closes after the first.
    // 72 KB: more than the server reads at once, so some are still in the
    // kernel when it closes.
    let more = b"GET /medium.bin HTTP/1.1\r\nhost: t\r\n\r\n".repeat(2000);
    let cases: [(&str, &[u8], &[u8]); 4] = [
        ("HTTP/1.0, 256 KiB", b"GET /medium.bin HTTP/1.0\r\n\r\n", &medium),
        ("HTTP/1.0, 8 MiB", b"GET /large.bin HTTP/1.0\r\n\r\n", &large),
        ("connection: close, 8 MiB", b"GET /large.bin HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n", &large),
        (
            "connection: close, a range",
            b"GET /large.bin HTTP/1.1\r\nhost: t\r\nrange: bytes=0-4194303\r\nconnection: close\r\n\r\n",
            &large[..4 << 20],
        ),
    ];
    let mut cut = Vec::new();
    for (what, first, expected) in cases {
        // Twice: the first request for a file may take another path than
        // the next (the small-file store admits it after answering).
        for round in 0..2 {
            match send_then_read(&server.addr, first, &more) {
                Ok(wire) => assert!(body(&wire) == expected, "{what}, round {round}: not the file"),
                Err(e) => cut.push(format!("{what}, round {round}: {e}")),
            }
        }
    }
    assert!(cut.is_empty(), "responses cut short: {cut:#?}");
}

#[test]
fn a_body_the_server_refuses_does_not_cut_its_answer() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f"), b"x").unwrap();
    let server = common::serve(&[dir.path().to_str().unwrap()]);
    // A large upload to a server that takes none: the answer is an error,
    // and the body the client goes on sending must not reset it.
    let head = b"PUT /f HTTP/1.1\r\nhost: t\r\ncontent-length: 4000000\r\n\r\n";
    let wire = send_then_read(&server.addr, head, &vec![b'u'; 2 << 20]).unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8_lossy(&wire);
    assert!(text.starts_with("HTTP/1.1 4"), "{text}");
    body(&wire);
}

#[test]
fn an_open_file_limit_short_of_the_connections_is_reported_at_start() {
    // Two descriptors per connection: 10,000 connections (the default cap)
    // need more than a limit of 4,096 gives; 1,000 do not.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    let limited = ["prlimit", "--nofile=4096:4096", "--"];
    let short = common::serve_via(&limited, "127.0.0.1:0", &[root], &[]);
    let enough = common::serve_via(&limited, "127.0.0.1:0", &[root, "--max-connections", "1000"], &[]);
    // Both are listening: whatever they logged at start is in.
    std::thread::sleep(Duration::from_millis(200));
    let said = "the open-file limit is below what --max-connections takes";
    assert!(short.log_text().contains(said), "{}", short.log_text());
    assert!(!enough.log_text().contains(said), "{}", enough.log_text());
}
