//! A download across a long round trip: `circus serve` in a network
//! namespace behind the bench's NFQUEUE line, which holds every packet from
//! the server 20 ms (only that way: a round trip of 20 ms), on a link of
//! 400 Mbit/s. Needs root (namespaces, iptables); elsewhere it says
//! loudly that it is skipped.

mod common;

use circus_bench::{
    delay::LineSpec,
    netem::{NetPlan, Network, is_root},
};
use std::{
    io::{BufReader, Read, Write},
    net::{SocketAddr, TcpStream},
    process::Command,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

const PORT: u16 = 7080;

/// The most unsent bytes `ss` saw on the server's sockets in `namespace`
/// until `stop`.
fn most_unsent(namespace: String, stop: Arc<AtomicBool>) -> u64 {
    let filter = format!("( sport = :{PORT} )");
    let mut most = 0;
    while !stop.load(Ordering::Relaxed) {
        let out = Command::new("ip")
            .args(["netns", "exec", &namespace, "ss", "-tinH", "state", "established", &filter])
            .output()
            .expect("ss in the namespace");
        let text = String::from_utf8_lossy(&out.stdout);
        for word in text.split_whitespace() {
            if let Some(n) = word.strip_prefix("notsent:").and_then(|n| n.parse::<u64>().ok()) {
                most = most.max(n);
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    most
}

/// A 16 MiB file, three times over one keep-alive connection (the later
/// ones start with the window the first opened): the kernel holds a round trip's
/// worth of it unsent, so acknowledgements that open the window find bytes
/// to send without waiting for the server to wake. A fixed mark of
/// 128 KiB left the window waiting whenever the server was late (at half
/// load, downloads took up to twice nginx's time).
#[test]
fn across_a_long_round_trip_the_kernel_holds_a_round_trip_of_a_download_unsent() {
    if !is_root() {
        eprintln!("\n*** SKIPPED: the WAN download test needs root (namespaces, iptables) ***\n");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let body: Vec<u8> = (0..16u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    std::fs::write(dir.path().join("big.bin"), &body).unwrap();
    let id = std::process::id();
    let net = Network::up(NetPlan {
        id,
        subnet: Network::free_subnet(id).unwrap(),
        // 50 MB/s: a download lasts a third of a second, long enough for
        // the unsent backlog to be seen at its height.
        server_link_bps: 400e6,
        class_bps: vec![400e6],
        per_class: 1,
        loss: 0.0,
        line: Some(LineSpec { delay: Duration::from_millis(20), super_packets: true, ..LineSpec::default() }),
    })
    .unwrap();
    let namespace = net.plan.namespace();
    let listen = SocketAddr::from((net.plan.server_ip(), PORT));
    let wrapper = ["ip", "netns", "exec", namespace.as_str()];
    let root = dir.path().to_str().unwrap();
    let _server = common::serve_via(&wrapper, &listen.to_string(), &[root, "--cache", "256MiB"], &[]);

    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.bind(&SocketAddr::from((net.plan.client_ip(0, 0), 0)).into()).unwrap();
    socket.connect_timeout(&listen.into(), Duration::from_secs(5)).unwrap();
    let stream: TcpStream = socket.into();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut conn = BufReader::new(stream);
    let stop = Arc::new(AtomicBool::new(false));
    // Stops the sampler however the test ends.
    struct Stop(Arc<AtomicBool>);
    impl Drop for Stop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let _stop = Stop(stop.clone());
    let sampler = {
        let (namespace, stop) = (namespace.clone(), stop.clone());
        std::thread::spawn(move || most_unsent(namespace, stop))
    };
    for round in 0..3 {
        let started = Instant::now();
        conn.get_mut().write_all(b"GET /big.bin HTTP/1.1\r\nHost: wan\r\n\r\n").unwrap();
        let (status, fields) = common::read_head(&mut conn);
        assert_eq!(status, 200);
        assert_eq!(fields["content-length"], body.len().to_string());
        let mut got = vec![0u8; body.len()];
        conn.read_exact(&mut got).unwrap();
        assert!(got == body, "the download arrived altered");
        eprintln!("download {round}: {:?}", started.elapsed());
    }
    stop.store(true, Ordering::Relaxed);
    let most = sampler.join().unwrap();
    eprintln!("most unsent on the server's socket: {most} bytes");
    // 20 ms of 50 MB/s is 1 MB; the fixed mark kept at most about
    // 192 KiB.
    assert!(most > 512 << 10, "the server kept at most {most} bytes unsent across a 20 ms round trip");
}
