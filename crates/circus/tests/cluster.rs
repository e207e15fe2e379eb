//! End-to-end tests of a cluster: several `circus serve --origin ...
//! --peers ...` processes on loopback in front of one HTTP origin that
//! counts the body bytes it sends. Every node serves every URL; each group
//! of an object has one owner, the only node that asks the origin for it,
//! so a crowd spread over the nodes costs the origin one copy of the
//! object, and a node that dies mid-crowd costs at most its share again.

mod common;

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{TcpListener, TcpStream},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

const ETAG: &str = "\"cluster-v1\"";

/// An HTTP origin of one object at `/big.bin`: ranges, an ETag, a day of
/// freshness, chunks of 64 KiB each `delay` apart; counts body bytes sent.
struct Origin {
    addr: String,
    sent: Arc<AtomicU64>,
}

fn start_origin(data: Arc<Vec<u8>>, delay: Duration) -> Origin {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let sent = Arc::new(AtomicU64::new(0));
    let counter = sent.clone();
    thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let (data, sent) = (data.clone(), counter.clone());
            thread::spawn(move || serve_origin(conn, &data, &sent, delay));
        }
    });
    Origin { addr, sent }
}

fn serve_origin(mut conn: TcpStream, data: &[u8], sent: &AtomicU64, delay: Duration) -> std::io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let path = line.split_whitespace().nth(1).unwrap_or("/").to_owned();
        let mut range = None;
        loop {
            let mut h = String::new();
            reader.read_line(&mut h)?;
            if h.trim_end().is_empty() {
                break;
            }
            if let Some((n, v)) = h.split_once(':')
                && n.trim().eq_ignore_ascii_case("range")
            {
                range = v.trim().strip_prefix("bytes=").map(str::to_owned);
            }
        }
        if path != "/big.bin" {
            conn.write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")?;
            continue;
        }
        let len = data.len();
        let (status, start, end) = match range.as_deref().and_then(|r| r.split_once('-')) {
            Some((a, b)) => {
                let a: usize = a.parse().unwrap();
                let b = b.parse::<usize>().unwrap_or(usize::MAX).min(len - 1);
                ("206 Partial Content", a, b + 1)
            }
            None => ("200 OK", 0, len),
        };
        let mut head = format!(
            "HTTP/1.1 {status}\r\netag: {ETAG}\r\nlast-modified: Mon, 01 Jan 2024 00:00:00 GMT\r\n\
             cache-control: max-age=86400\r\ncontent-length: {}\r\n",
            end - start
        );
        if status.starts_with("206") {
            head += &format!("content-range: bytes {start}-{}/{len}\r\n", end - 1);
        }
        conn.write_all(format!("{head}\r\n").as_bytes())?;
        for chunk in data[start..end].chunks(64 << 10) {
            thread::sleep(delay);
            conn.write_all(chunk)?;
            sent.fetch_add(chunk.len() as u64, Ordering::SeqCst);
        }
    }
}

/// Bytes that differ between nearby offsets, so a shifted block shows.
fn data(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[2]).collect()
}

/// `n` members on loopback ports chosen now, each told the whole list.
fn cluster(origin: &Origin, n: usize, extra: &[&str]) -> Vec<common::ServerProc> {
    let ports: Vec<u16> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect::<Vec<_>>()
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect();
    let urls: Vec<String> = ports.iter().map(|p| format!("http://127.0.0.1:{p}")).collect();
    let (peers, origin_url) = (urls.join(","), format!("http://{}/", origin.addr));
    let nodes: Vec<common::ServerProc> = ports
        .iter()
        .zip(&urls)
        .map(|(port, me)| {
            let mut args = vec!["--origin", &origin_url, "--peers", &peers, "--peer-self", me];
            args.extend_from_slice(&["--origin-block", "256KiB", "--peer-group", "1MiB", "--peer-probe", "200ms"]);
            args.extend_from_slice(extra);
            common::serve_on(&format!("127.0.0.1:{port}"), &args, &[])
        })
        .collect();
    // Members started before the others were listening saw them down for
    // a probe or two.
    let deadline = Instant::now() + Duration::from_secs(10);
    for node in &nodes {
        while common::metric(&node.admin, "circus_peers_live") < n as f64 {
            assert!(Instant::now() < deadline, "{} does not see all {n} members live", node.addr);
            thread::sleep(Duration::from_millis(50));
        }
    }
    nodes
}

/// GETs `/big.bin` from the first of `addrs`; when a node cuts the body
/// short, resumes where it stopped from the next one (Range with
/// If-Range), as a download manager does. The body and how many resumes.
fn download(addrs: &[String]) -> (Vec<u8>, usize) {
    let mut body = Vec::new();
    for (tries, addr) in addrs.iter().enumerate() {
        let range = format!("bytes={}-", body.len());
        let extra: &[(&str, &str)] =
            if body.is_empty() { &[] } else { &[("range", range.as_str()), ("if-range", ETAG)] };
        let Ok(mut s) = TcpStream::connect(addr) else { continue };
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut req = "GET /big.bin HTTP/1.1\r\nhost: test\r\nconnection: close\r\n".to_owned();
        for (n, v) in extra {
            req += &format!("{n}: {v}\r\n");
        }
        s.write_all(format!("{req}\r\n").as_bytes()).unwrap();
        let mut r = BufReader::new(s);
        // Via comes twice from a node that had the block from another.
        let (status, fields) = common::read_fields(&mut r);
        let want = if body.is_empty() { 200 } else { 206 };
        assert_eq!(status, want, "{addr} answered {status}: {fields:?}");
        let len: usize = fields.iter().find(|(n, _)| n == "content-length").expect("a length").1.parse().unwrap();
        let before = body.len();
        let _ = r.read_to_end(&mut body);
        if body.len() == before + len {
            return (body, tries);
        }
    }
    panic!("no node finished the download ({} bytes)", body.len());
}

/// GETs `/big.bin` from `addr` with the `extra` fields: status and body.
fn get_with(addr: &str, extra: &[(&str, &str)]) -> (u16, Vec<u8>) {
    call(addr, "GET", "/big.bin", extra)
}

/// `method path` (no body) to `addr` with the `extra` fields: status and
/// body.
fn call(addr: &str, method: &str, path: &str, extra: &[(&str, &str)]) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nhost: test\r\ncontent-length: 0\r\nconnection: close\r\n");
    for (n, v) in extra {
        req += &format!("{n}: {v}\r\n");
    }
    s.write_all(format!("{req}\r\n").as_bytes()).unwrap();
    let mut r = BufReader::new(s);
    let (status, fields) = common::read_fields(&mut r);
    let mut body = Vec::new();
    if method != "HEAD" {
        let len: usize = fields.iter().find(|(n, _)| n == "content-length").map_or(0, |(_, v)| v.parse().unwrap());
        r.take(len as u64).read_to_end(&mut body).unwrap();
    }
    (status, body)
}

/// Nine clients spread over three `nodes`, none cut off, each gets `obj`
/// whole, and `origin` sends it exactly once.
fn nine_clients_cost_one_copy(nodes: &[common::ServerProc], obj: &Arc<Vec<u8>>, origin: &Origin) {
    let addrs: Vec<String> = nodes.iter().map(|n| n.addr.clone()).collect();
    let clients: Vec<_> = (0..9)
        .map(|i| {
            let order: Vec<String> = addrs.iter().cycle().skip(i % 3).take(3).cloned().collect();
            thread::spawn(move || download(&order))
        })
        .collect();
    for c in clients {
        let (body, resumes) = c.join().unwrap();
        assert!(body == **obj, "a client got other bytes ({} of {})", body.len(), obj.len());
        assert_eq!(resumes, 0, "no node failed, yet a download was cut");
    }
    let sent = origin.sent.load(Ordering::SeqCst);
    assert_eq!(sent, obj.len() as u64, "the origin sent {sent} bytes for an object of {}", obj.len());
}

#[test]
fn a_crowd_over_three_nodes_costs_the_origin_one_copy() {
    let obj = Arc::new(data(12 << 20));
    let origin = start_origin(obj.clone(), Duration::ZERO);
    let nodes = cluster(&origin, 3, &["--cache", "64MiB"]);
    nine_clients_cost_one_copy(&nodes, &obj, &origin);
    // A member's ask of one resident block goes ahead of the node's own
    // clients like any other member's body (it once took the small-object
    // shortcut, which no client waited for).
    let ahead = || common::metric(&nodes[0].admin, "circus_peer_first_bodies_total");
    let before = ahead();
    let (status, body) = get_with(&nodes[0].addr, &[("circus-peer", "1"), ("range", "bytes=262144-524287")]);
    assert!(status == 206 && body[..] == obj[262_144..524_288], "{status}, {} bytes", body.len());
    assert_eq!(ahead(), before + 1.0, "the member's body did not go first");
    // Without a key, a purge cannot be proved to the other members, and
    // says so.
    let (status, answer) = call(&nodes[0].admin, "POST", "/purge?target=/big.bin", &[]);
    let answer: serde_json::Value = serde_json::from_slice(&answer).unwrap();
    assert!(status == 200 && answer["members"].is_null() && answer["note"].is_string(), "{status}: {answer}");
    // Every node asked the others for what it does not own, and the
    // origin bytes each counted add up to the one copy.
    let fetched: f64 = nodes.iter().map(|n| common::metric(&n.admin, "circus_origin_fetched_bytes_total")).sum();
    assert_eq!(fetched, obj.len() as f64);
    for n in &nodes {
        assert!(
            common::metric(&n.admin, "circus_peer_fetched_bytes_total") > 0.0,
            "{} fetched nothing from a peer",
            n.addr
        );
    }
}

#[test]
fn a_node_killed_mid_crowd_costs_at_most_its_share_again() {
    let obj = Arc::new(data(16 << 20));
    // 2 ms a chunk: the origin sends the object in about half a second,
    // so the kill lands while blocks are still on their way.
    let origin = start_origin(obj.clone(), Duration::from_millis(2));
    let mut nodes = cluster(&origin, 4, &["--cache", "64MiB"]);
    let addrs: Vec<String> = nodes.iter().map(|n| n.addr.clone()).collect();
    let clients: Vec<_> = (0..12)
        .map(|i| {
            let order: Vec<String> = addrs.iter().cycle().skip(i % 4).take(4).cloned().collect();
            thread::spawn(move || download(&order))
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while origin.sent.load(Ordering::SeqCst) < obj.len() as u64 / 4 {
        assert!(Instant::now() < deadline, "the crowd never got going");
        thread::sleep(Duration::from_millis(5));
    }
    let killed = nodes.remove(3);
    drop(killed);
    let mut resumed = 0;
    for c in clients {
        let (body, resumes) = c.join().unwrap();
        assert!(body == *obj, "a client got other bytes ({} of {})", body.len(), obj.len());
        resumed += resumes;
    }
    let sent = origin.sent.load(Ordering::SeqCst) as f64;
    let ratio = sent / obj.len() as f64;
    eprintln!("origin sent {ratio:.3} x the object; {resumed} downloads resumed through another node");
    // Only the three clients that started on the dead node lost their
    // connection: the others' nodes asked the next owner.
    assert!(resumed <= 3, "{resumed} resumes: clients of live nodes were cut too");
    assert!(ratio <= 1.3, "the origin sent {ratio:.3} x the object after one of four nodes died");
    for n in &nodes {
        assert_eq!(common::metric(&n.admin, "circus_peers_live"), 3.0, "{} still counts the dead node", n.addr);
    }
}

/// Stores far smaller than the object, so each download asks the owners
/// again: from the second pass over a group on, its owner says the group
/// is hot, and the member outside the group's servers then spreads its
/// asks over the owner and the two replicas, which ask the owner in turn.
/// Downloads run four at a time, one per node, so members ask each other
/// at once.
#[test]
fn a_hot_group_is_served_by_its_replicas_too() {
    let obj = Arc::new(data(12 << 20));
    let origin = start_origin(obj.clone(), Duration::ZERO);
    let nodes = cluster(&origin, 4, &["--cache", "8MiB", "--peer-hot-after", "2"]);
    for round in 0..3 {
        let clients: Vec<_> = nodes
            .iter()
            .map(|n| {
                let addr = n.addr.clone();
                thread::spawn(move || download(std::slice::from_ref(&addr)))
            })
            .collect();
        for c in clients {
            let (body, resumes) = c.join().unwrap();
            assert!(body == *obj, "round {round}: other bytes ({} of {})", body.len(), obj.len());
            assert_eq!(resumes, 0);
        }
    }
    let m = |name: &str| nodes.iter().map(|n| common::metric(&n.admin, name)).sum::<f64>();
    let (asks, as_replica) = (m("circus_peer_served_requests_total"), m("circus_peer_replica_served_requests_total"));
    eprintln!("{as_replica} of {asks} asks between members went to replicas of hot groups");
    assert!(as_replica > 0.0, "no member asked a replica ({asks} asks in all)");
}

/// With --peer-key, members prove their asks to each other. A private
/// prefix (a bearer token) is then served by the cluster: owners answer
/// members, which carry no token, and the origin sends one copy. A client
/// that marks its request as a member's is still a client: it needs the
/// token, and is counted. A purge on one node's admin listener reaches
/// every member; one posing as a member's is refused.
#[test]
fn with_a_key_members_prove_themselves_and_clients_cannot_pose_as_members() {
    let obj = Arc::new(data(12 << 20));
    let origin = start_origin(obj.clone(), Duration::ZERO);
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("circus.toml");
    std::fs::write(&conf, "[[private]]\nprefix = \"/\"\ntokens = [\"a-token\"]\n").unwrap();
    let conf = conf.to_str().unwrap();
    let nodes = cluster(&origin, 3, &["--cache", "64MiB", "--peer-key", "members-only", "--config", conf]);
    for n in &nodes {
        let (status, body) = get_with(&n.addr, &[("authorization", "Bearer a-token")]);
        assert_eq!(status, 200, "{}", n.addr);
        assert!(body == *obj, "{}: other bytes ({} of {})", n.addr, body.len(), obj.len());
    }
    let sent = origin.sent.load(Ordering::SeqCst);
    assert_eq!(sent, obj.len() as u64, "the origin sent {sent} bytes for an object of {}", obj.len());
    let asked: f64 = nodes.iter().map(|n| common::metric(&n.admin, "circus_peer_served_requests_total")).sum();
    assert!(asked > 0.0, "no member's ask was taken as one");
    for n in &nodes {
        let unproven = common::metric(&n.admin, "circus_peer_unproven_requests_total");
        assert_eq!(unproven, 0.0, "{}: a member's proof failed", n.addr);
    }
    // A front's health check carries no proof, and is answered whatever
    // the private prefixes.
    let (status, _) = call(&nodes[0].addr, "HEAD", "/.well-known/circus/peer", &[("circus-peer", "probe")]);
    assert_eq!(status, 204);
    let posing: [&[(&str, &str)]; 2] =
        [&[("circus-peer", "1")], &[("circus-peer", "1"), ("circus-peer-auth", "1764201600.00")]];
    let before = common::metric(&nodes[0].admin, "circus_peer_served_requests_total");
    for extra in posing {
        let (status, _) = get_with(&nodes[0].addr, extra);
        assert_eq!(status, 403, "{extra:?}: a client posing as a member still needs the token");
    }
    assert_eq!(common::metric(&nodes[0].admin, "circus_peer_unproven_requests_total"), 2.0);
    assert_eq!(common::metric(&nodes[0].admin, "circus_peer_served_requests_total"), before);
    // Only a member's proof purges: the client posing as one is refused.
    let purge = "/.well-known/circus/purge?target=/big.bin";
    let (status, _) = call(&nodes[1].addr, "POST", purge, &[("circus-peer", "purge")]);
    assert_eq!(status, 403);
    // A purge on one node's admin listener reaches every member: the next
    // crowd costs the origin a second copy, not none.
    let (status, answer) = call(&nodes[0].admin, "POST", "/purge?target=/big.bin", &[]);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
    let answer: serde_json::Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(answer["purged"], 1, "{answer}");
    let members = answer["members"].as_array().unwrap_or_else(|| panic!("no members in {answer}"));
    assert_eq!(members.len(), 2, "{answer}");
    assert!(members.iter().all(|m| m["purged"] == 1), "{answer}");
    for n in &nodes {
        let (status, body) = get_with(&n.addr, &[("authorization", "Bearer a-token")]);
        assert!(status == 200 && body == *obj, "{}: {status}, {} of {} bytes", n.addr, body.len(), obj.len());
    }
    let sent = origin.sent.load(Ordering::SeqCst);
    assert_eq!(sent, 2 * obj.len() as u64, "after the purge, the origin sent {sent} bytes in all");
}

/// Members from DNS: every node runs in a mount namespace of its own whose
/// /etc/hosts is a file the test writes (the resolver reads it on every
/// lookup), naming two of three nodes first, then all three. The third
/// node joins the placement of every member within a few lookups, and the
/// crowd then costs the origin one copy with all three owning groups.
#[test]
fn members_from_a_dns_name_follow_its_addresses() {
    let uid = std::process::Command::new("id").arg("-u").output().expect("id -u");
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        eprintln!(
            "SKIPPED members_from_a_dns_name_follow_its_addresses: needs root (mount namespaces); CI runs as root"
        );
        return;
    }
    // Root without the right to make mount namespaces (a container) is a
    // setup this test cannot run in: said loudly rather than failed.
    let unshare = std::process::Command::new("unshare").args(["-m", "true"]).status();
    if !unshare.as_ref().is_ok_and(|s| s.success()) {
        eprintln!("SKIPPED members_from_a_dns_name_follow_its_addresses: `unshare -m` fails here ({unshare:?})");
        return;
    }
    let obj = Arc::new(data(12 << 20));
    let origin = start_origin(obj.clone(), Duration::ZERO);
    let ips = ["127.0.0.11", "127.0.0.12", "127.0.0.13"];
    let port = (0..50)
        .find_map(|_| {
            let port = TcpListener::bind((ips[0], 0)).ok()?.local_addr().ok()?.port();
            ips[1..].iter().all(|ip| TcpListener::bind((*ip, port)).is_ok()).then_some(port)
        })
        .expect("a port free on all three addresses");
    let dir = tempfile::tempdir().unwrap();
    let hosts = dir.path().join("hosts");
    let listing = |n: usize| -> String {
        let mut text = "127.0.0.1 localhost\n".to_owned();
        for ip in &ips[..n] {
            text += &format!("{ip} members.circus.test\n");
        }
        text
    };
    std::fs::write(&hosts, listing(2)).unwrap();
    let hosts_env = hosts.to_str().unwrap().to_owned();
    let wrapper = ["unshare", "-m", "sh", "-c", "mount --bind \"$CIRCUS_TEST_HOSTS\" /etc/hosts && exec \"$@\"", "sh"];
    let (origin_url, dns) = (format!("http://{}/", origin.addr), format!("members.circus.test:{port}"));
    let nodes: Vec<common::ServerProc> = ips
        .iter()
        .map(|ip| {
            let me = format!("http://{ip}:{port}");
            let args = [
                "--origin",
                &origin_url,
                "--peers-dns",
                &dns,
                "--peer-self",
                &me,
                "--peer-resolve",
                "200ms",
                "--peer-probe",
                "1s",
                "--origin-block",
                "256KiB",
                "--peer-group",
                "1MiB",
                "--cache",
                "64MiB",
            ];
            common::serve_via(&wrapper, &format!("{ip}:{port}"), &args, &[("CIRCUS_TEST_HOSTS", &hosts_env)])
        })
        .collect();
    let live_everywhere = |n: f64| {
        let deadline = Instant::now() + Duration::from_secs(10);
        for node in &nodes {
            while common::metric(&node.admin, "circus_peers_live") != n {
                assert!(Instant::now() < deadline, "{} does not see {n} members live", node.addr);
                thread::sleep(Duration::from_millis(50));
            }
        }
    };
    live_everywhere(2.0);
    std::fs::write(&hosts, listing(3)).unwrap();
    live_everywhere(3.0);
    nine_clients_cost_one_copy(&nodes, &obj, &origin);
    for n in &nodes {
        assert!(common::metric(&n.admin, "circus_origin_fetched_bytes_total") > 0.0, "{} owns nothing", n.addr);
    }
}

/// HAProxy running dist/haproxy.cfg unchanged in front of four nodes,
/// killed when dropped.
struct Front {
    child: std::process::Child,
    addr: String,
}

impl Drop for Front {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn haproxy(nodes: &[common::ServerProc]) -> Front {
    assert_eq!(nodes.len(), 4, "dist/haproxy.cfg names four nodes");
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/../../dist/haproxy.cfg");
    let mut cmd = std::process::Command::new("haproxy");
    cmd.args(["-db", "-f", config]).env("CIRCUS_FRONT", &addr).stdout(std::process::Stdio::null());
    for (i, n) in nodes.iter().enumerate() {
        cmd.env(format!("CIRCUS_NODE{}", i + 1), &n.addr);
    }
    let child = cmd.spawn().expect("haproxy is not installed: apt-get install haproxy (CI installs it)");
    let front = Front { child, addr };
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(&front.addr).is_err() {
        assert!(Instant::now() < deadline, "haproxy does not listen on {}", front.addr);
        thread::sleep(Duration::from_millis(20));
    }
    front
}

#[test]
fn haproxy_with_the_shipped_config_spreads_one_hot_object_over_the_nodes() {
    let obj = Arc::new(data(8 << 20));
    let origin = start_origin(obj.clone(), Duration::ZERO);
    let nodes = cluster(&origin, 4, &["--cache", "64MiB"]);
    let front = haproxy(&nodes);
    let clients: Vec<_> = (0..16)
        .map(|_| {
            let addr = front.addr.clone();
            thread::spawn(move || download(&[addr]))
        })
        .collect();
    for c in clients {
        let (body, _) = c.join().unwrap();
        assert!(body == *obj, "a client got other bytes ({} of {})", body.len(), obj.len());
    }
    assert_eq!(origin.sent.load(Ordering::SeqCst), obj.len() as u64, "the origin sent more than one copy");
    // One URL, yet the bounded load sent clients to several nodes.
    let clients_of = |n: &common::ServerProc| {
        let m = |name| common::metric(&n.admin, name);
        m("circus_origin_hits_total") + m("circus_origin_misses_total") - m("circus_peer_served_requests_total")
    };
    let serving = nodes.iter().filter(|n| clients_of(n) > 0.0).count();
    assert!(serving >= 3, "only {serving} of 4 nodes had clients");
}
