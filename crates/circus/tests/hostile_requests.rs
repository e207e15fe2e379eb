//! Requests a careful server refuses: missing, doubled or malformed Host
//! fields, dotfiles, a Circus-Need given twice or not in ASCII, and new
//! connections while it drains for shutdown.

mod common;

use std::{
    io::{BufReader, Read, Write},
    net::TcpStream,
    time::Duration,
};

/// Sends `head` (a whole request head) and returns the response status.
fn status_of(addr: &str, head: &[u8]) -> u16 {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(head).unwrap();
    let mut r = BufReader::new(s);
    common::read_head(&mut r).0
}

fn site() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("small.txt"), b"hello").unwrap();
    std::fs::write(dir.path().join("big.bin"), vec![7u8; 1 << 20]).unwrap();
    std::fs::write(dir.path().join(".env"), b"SECRET=1").unwrap();
    std::fs::create_dir(dir.path().join(".git")).unwrap();
    std::fs::write(dir.path().join(".git/config"), b"[core]").unwrap();
    dir
}

#[test]
fn http11_requests_without_exactly_one_valid_host_get_400_in_the_hit_lane_and_in_hyper() {
    let dir = site();
    let s = common::serve(&[dir.path().to_str().unwrap()]);
    // Admit the small file to the hit lane first: one plain GET.
    assert_eq!(status_of(&s.addr, b"GET /small.txt HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n"), 200);
    std::thread::sleep(Duration::from_millis(300));
    for path in ["/small.txt", "/big.bin"] {
        let cases: [(&str, u16); 6] = [
            ("host: example.com\r\n", 200),
            ("host: [::1]:8080\r\n", 200),
            ("", 400),
            ("host: a\r\nhost: b\r\n", 400),
            ("host: a b\r\n", 400),
            ("host: a/b\r\n", 400),
        ];
        for (fields, want) in cases {
            let head = format!("GET {path} HTTP/1.1\r\n{fields}connection: close\r\n\r\n");
            assert_eq!(status_of(&s.addr, head.as_bytes()), want, "{path} with {fields:?}");
        }
        // HTTP/1.0 may omit Host.
        let head = format!("GET {path} HTTP/1.0\r\n\r\n");
        assert_eq!(status_of(&s.addr, head.as_bytes()), 200, "{path} over HTTP/1.0");
    }
}

#[test]
fn dotfiles_are_404_unless_asked_for() {
    let dir = site();
    let s = common::serve(&[dir.path().to_str().unwrap()]);
    for path in ["/.env", "/.git/config", "/%2egit/config"] {
        let head = format!("GET {path} HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n");
        assert_eq!(status_of(&s.addr, head.as_bytes()), 404, "{path}");
    }
    let s = common::serve(&[dir.path().to_str().unwrap(), "--dotfiles", "true"]);
    assert_eq!(status_of(&s.addr, b"GET /.env HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n"), 200);
}

#[test]
fn a_circus_need_given_twice_or_not_in_ascii_is_400() {
    let dir = site();
    let s = common::serve(&[dir.path().to_str().unwrap()]);
    let native = "accept: application/vnd.circus.blocks\r\n";
    let ok = format!("GET /big.bin HTTP/1.1\r\nhost: a\r\n{native}circus-need: 0-3\r\nconnection: close\r\n\r\n");
    assert_eq!(status_of(&s.addr, ok.as_bytes()), 200);
    let twice = format!(
        "GET /big.bin HTTP/1.1\r\nhost: a\r\n{native}circus-need: 0-3\r\ncircus-need: 5\r\nconnection: close\r\n\r\n"
    );
    assert_eq!(status_of(&s.addr, twice.as_bytes()), 400);
    // "0-3" with an Arabic-Indic three.
    let mut odd = format!("GET /big.bin HTTP/1.1\r\nhost: a\r\n{native}circus-need: 0-").into_bytes();
    odd.extend_from_slice("\u{663}".as_bytes());
    odd.extend_from_slice(b"\r\nconnection: close\r\n\r\n");
    assert_eq!(status_of(&s.addr, &odd), 400);
}

#[test]
fn new_connections_are_refused_while_the_server_drains() {
    let dir = site();
    let s = common::serve(&[dir.path().to_str().unwrap(), "--drain-timeout", "20"]);
    // A download in progress that reads nothing keeps the drain going.
    let mut slow = TcpStream::connect(&s.addr).unwrap();
    slow.write_all(b"GET /big.bin HTTP/1.1\r\nhost: a\r\n\r\n").unwrap();
    let mut first = [0u8; 1];
    slow.read_exact(&mut first).unwrap();
    let pid = s.child.id().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    std::thread::sleep(Duration::from_millis(500));
    // Refused at once, or closed without an answer: never left hanging.
    match TcpStream::connect(&s.addr) {
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}"),
        Ok(mut c) => {
            c.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
            let _ = c.write_all(b"GET /small.txt HTTP/1.1\r\nhost: a\r\n\r\n");
            let mut buf = [0u8; 16];
            let got = c.read(&mut buf);
            assert!(matches!(got, Ok(0) | Err(_)), "a new connection was served during the drain: {got:?}");
            if let Err(e) = got {
                assert_ne!(e.kind(), std::io::ErrorKind::WouldBlock, "a new connection hung during the drain");
            }
        }
    }
    drop(slow);
}

#[test]
fn idle_connections_at_the_cap_make_room_for_new_clients() {
    let dir = site();
    let s = common::serve(&[dir.path().to_str().unwrap(), "--max-connections", "100"]);
    // A hundred connections that never finish a request head (slowloris),
    // one of them a keep-alive connection that was answered once.
    let mut answered = TcpStream::connect(&s.addr).unwrap();
    answered.write_all(b"GET /small.txt HTTP/1.1\r\nhost: t\r\n\r\n").unwrap();
    let mut buf = [0u8; 512];
    let _ = answered.read(&mut buf).unwrap();
    let mut idle: Vec<TcpStream> = (0..99)
        .map(|_| {
            let mut c = TcpStream::connect(&s.addr).unwrap();
            c.write_all(b"GET /small.txt HTTP/1.1\r\n").unwrap();
            c
        })
        .collect();
    idle.push(answered);
    std::thread::sleep(Duration::from_millis(300));
    // New clients are served, not answered 503 until the idle ones time out.
    for i in 0..10 {
        let status = status_of(&s.addr, b"GET /big.bin HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n");
        assert_eq!(status, 200, "new client {i} at the cap");
    }
    drop(idle);
}
