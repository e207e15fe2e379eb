//! The NFQUEUE line on a real emulated network: packets from the server
//! arrive the set delay late, requests to it cost the set overhead, and the
//! control address passes untouched. Needs root (namespaces, iptables).

use circus_bench::{
    delay::LineSpec,
    netem::{NetPlan, Network, is_root},
};
use std::{
    io::{Read, Write},
    net::{Ipv4Addr, SocketAddr, TcpStream},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

/// An echo server in the namespace (python3, as CI has it), killed on drop.
struct Echo(Child);

impl Drop for Echo {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn echo_in(net: &Network, port: u16) -> Echo {
    let script = format!(
        "import socket,threading\n\
         s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
         s.bind(('{}', {port})); s.listen(64)\n\
         def serve(c):\n  while True:\n    d=c.recv(65536)\n    if not d: return\n    c.sendall(d)\n\
         while True:\n  c,_=s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()\n",
        net.plan.server_ip()
    );
    let mut argv = net.plan.exec_in();
    argv.extend(["python3".into(), "-c".into(), script]);
    let echo =
        Echo(Command::new(&argv[0]).args(&argv[1..]).stdin(Stdio::null()).spawn().expect("python3 in the namespace"));
    let server = SocketAddr::from((net.plan.server_ip(), port));
    for _ in 0..100 {
        if TcpStream::connect_timeout(&server, Duration::from_millis(200)).is_ok() {
            return echo;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the echo server did not start");
}

/// Median of 9 (connect time, echo round trip) from `source`.
fn times(source: Ipv4Addr, server: SocketAddr) -> (Duration, Duration) {
    let mut connects = Vec::new();
    let mut echoes = Vec::new();
    for _ in 0..9 {
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        socket.bind(&SocketAddr::from((source, 0)).into()).unwrap();
        let t = Instant::now();
        socket.connect(&server.into()).unwrap();
        connects.push(t.elapsed());
        let mut c: TcpStream = socket.into();
        c.set_nodelay(true).unwrap();
        let mut buf = [0u8; 5];
        let t = Instant::now();
        c.write_all(b"hello").unwrap();
        c.read_exact(&mut buf).unwrap();
        echoes.push(t.elapsed());
        assert_eq!(&buf, b"hello");
    }
    connects.sort();
    echoes.sort();
    (connects[4], echoes[4])
}

fn network(line: LineSpec) -> Network {
    let id = std::process::id();
    Network::up(NetPlan {
        id,
        subnet: Network::free_subnet(id).unwrap(),
        server_link_bps: 10e9,
        class_bps: vec![10e9],
        per_class: 1,
        loss: 0.0,
        line: Some(line),
    })
    .unwrap()
}

#[test]
fn the_line_delays_packets_from_the_server_and_charges_requests_its_overhead() {
    if !is_root() {
        eprintln!("\n*** SKIPPED: the NFQUEUE line test needs root (namespaces, iptables) ***\n");
        return;
    }
    let ms = Duration::from_millis;
    // Delay: both the SYN-ACK and the echo come back 4 ms late; the
    // control address is not queued. Upper bounds sit below what a delay
    // applied twice (or to the control address) would give, with the
    // slack a loaded machine needs: CI saw an echo take 6.06 ms here.
    let net = network(LineSpec { delay: ms(4), super_packets: true, ..LineSpec::default() });
    let _echo = echo_in(&net, 7007);
    let server = SocketAddr::from((net.plan.server_ip(), 7007));
    let (connect, echo) = times(net.plan.client_ip(0, 0), server);
    eprintln!("delay 4 ms: connect {connect:?}, echo {echo:?}");
    assert!(connect >= ms(4) && connect < ms(8), "connect took {connect:?}");
    assert!(echo >= ms(4) && echo < ms(8), "echo took {echo:?}");
    let (connect, echo) = times(net.plan.control_ip(), server);
    assert!(connect < ms(4) && echo < ms(4), "control address: {connect:?}, {echo:?}");
    drop(_echo);
    drop(net);
    // Overhead: only packets carrying data to the server pay it.
    let net = network(LineSpec { overhead: ms(3), super_packets: true, ..LineSpec::default() });
    let _echo = echo_in(&net, 7007);
    let server = SocketAddr::from((net.plan.server_ip(), 7007));
    let (connect, echo) = times(net.plan.client_ip(0, 0), server);
    eprintln!("overhead 3 ms: connect {connect:?}, echo {echo:?}");
    assert!(connect < ms(3), "a SYN carries no data, yet connect took {connect:?}");
    assert!(echo >= ms(3) && echo < ms(6), "echo took {echo:?}");
}
