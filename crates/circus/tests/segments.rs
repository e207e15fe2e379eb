//! A long body leaves the server in whole TCP segments. The server writes
//! a block (or a run of them) at a time, and a block is not a whole number
//! of segments: unless the socket is corked while the body goes out, each
//! write ends in a short segment of its own, and the client receives about
//! twice the segments the bytes need (one trip each through both ends'
//! TCP stacks). Counted by the client's kernel (TCP_INFO), over loopback.

mod common;

use std::{
    io::{Read, Write},
    net::TcpStream,
    os::fd::AsRawFd,
};

/// Segments the client's socket has received, and the largest segment it
/// asked the server for (its advertised MSS).
fn segments_in(s: &TcpStream) -> (u32, u32) {
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    #[allow(unsafe_code)]
    // SAFETY: `tcp_info` is a C struct of integers, valid when zeroed; the
    // kernel writes at most `len` bytes of it.
    let (rc, info) = unsafe {
        let mut info: libc::tcp_info = std::mem::zeroed();
        let rc = libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        );
        (rc, info)
    };
    assert_eq!(rc, 0, "TCP_INFO: {}", std::io::Error::last_os_error());
    (info.tcpi_segs_in, info.tcpi_advmss)
}

/// A connection to `addr` whose receive window can hold a whole response,
/// where the kernel lets the test say so (as root): a window that fills
/// while the reader waits for a core cuts the sender's segments at its
/// edge, which is not what the test looks at.
fn connect(addr: &str) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let room: libc::c_int = 64 << 20;
    #[allow(unsafe_code)]
    // SAFETY: SO_RCVBUFFORCE takes an int; the kernel copies it.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&room as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        eprintln!("SO_RCVBUFFORCE refused (not root): the receive window is the kernel's own");
    }
    socket.connect(&addr.parse::<std::net::SocketAddr>().unwrap().into()).unwrap();
    socket.into()
}

/// Sends `request` on a new connection, reads until the server closes,
/// and returns what arrived with the segments it took.
fn fetch(addr: &str, request: &str) -> (Vec<u8>, u32, u32) {
    let mut s = connect(addr);
    s.write_all(request.as_bytes()).unwrap();
    // Large reads into room made beforehand: a reader that stops to grow
    // its buffer, or reads a little at a time, lets the receive window
    // fill, and the sender splits what the window cuts.
    let mut got = vec![0; 16 << 20];
    let mut len = 0;
    loop {
        match s.read(&mut got[len..]).unwrap() {
            0 => break,
            n => len += n,
        }
    }
    got.truncate(len);
    let (segs, mss) = segments_in(&s);
    (got, segs, mss)
}

fn assert_whole_segments(what: &str, bytes: usize, segs: u32, mss: u32) {
    // The fewest segments the bytes fit in, an eighth more for the window's
    // first round trips and the head, and a few for the handshake and the
    // close. A short segment after every write comes to a third more or
    // (blocks written one at a time) twice as many.
    let fewest = bytes.div_ceil(mss as usize) as u32;
    let allowed = fewest + fewest / 8 + 4;
    eprintln!("{what}: {bytes} bytes in {segs} segments of at most {mss} ({fewest} would do)");
    assert!(
        segs <= allowed,
        "{what}: {bytes} bytes came in {segs} segments of at most {mss}; \
         {fewest} would do, {allowed} are allowed"
    );
}

#[test]
fn a_long_plain_body_and_a_native_download_come_in_whole_segments() {
    let dir = tempfile::tempdir().unwrap();
    // Past the hit lane's largest file (1 MiB): through the scheduler.
    let size = 8 << 20;
    let data: Vec<u8> = (0..size as u64).map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8).collect();
    std::fs::write(dir.path().join("long.bin"), &data).unwrap();
    let server = common::serve(&[dir.path().to_str().unwrap()]);
    let get =
        |accept: &str| format!("GET /long.bin HTTP/1.1\r\nHost: x\r\nAccept: {accept}\r\nConnection: close\r\n\r\n");

    // The first read brings the file into the cache; the others are served
    // from it, as a popular file is.
    for round in 0..4 {
        let (got, segs, mss) = fetch(&server.addr, &get("*/*"));
        assert!(got.ends_with(&data), "round {round}: the body is not the file");
        assert_whole_segments(&format!("plain GET, round {round}"), got.len(), segs, mss);
    }

    // The native stream, once the file's index is built (the first native
    // request of a large file may get the plain stream meanwhile).
    let native = get(circus_proto::CONTENT_TYPE);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (got, segs, mss) = fetch(&server.addr, &native);
        let head = String::from_utf8_lossy(&got[..got.len().min(1024)]).to_ascii_lowercase();
        if head.contains(&format!("content-type: {}", circus_proto::CONTENT_TYPE)) {
            assert!(got.len() > size, "a native download of {size} bytes carried {}", got.len());
            assert_whole_segments("native download", got.len(), segs, mss);
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no native stream within 30 s");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
