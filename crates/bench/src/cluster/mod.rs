//! `circus bench cluster`: a crowd on one large object through four nodes,
//! each in its own network namespace behind an HTB-shaped link, HAProxy in
//! front (dist/haproxy.cfg, unchanged), nginx serving the object as the
//! origin and counting the body bytes it sends. Four runs, each with fresh
//! servers:
//!
//! 1. one circus node alone, a quarter of the crowd, straight to it: one
//!    node's throughput at the same load per node;
//! 2. four circus nodes (`--peers`), the whole crowd;
//! 3. the same, one node killed (SIGKILL) once a third of the bytes are
//!    delivered: its clients resume through the front;
//! 4. four nginx nodes with proxy_cache and the slice module (the Lancache
//!    design), the whole crowd: the reference.
//!
//! Figures per run: downloads verified (blake3 of the whole body), origin
//! bytes over the object size, aggregate throughput, and the bytes each
//! node sent (clients and peers) as the largest over the mean.
//!
//! The target setting is four 1 Gbit/s nodes, 200 clients and a 1 GiB
//! object; on two cores that is 200 GiB through one proxy, so the links,
//! the object and the run are scaled down (100 Mbit/s, `--file-size`,
//! default 16 MiB) and the targets, which are ratios, kept. The nodes use
//! the machine's TCP congestion control unless `CIRCUS_BENCH_CC` names
//! another (reno, say); `CIRCUS_BENCH_CLUSTER_RUNS=1,2` runs only the runs
//! it numbers.

mod crowd;
pub mod net;

use crate::{
    BenchError, BenchOptions, Report, Row, io_err, make_file,
    netem::{Network, is_root},
    procs::{ServerProc, free_port},
};
use net::{ClusterNet, NetUp};
use std::{
    path::{Path, PathBuf},
    sync::{Arc, atomic::Ordering},
    time::{Duration, Instant},
};

const NODES: usize = 4;
const LINK_BPS: f64 = 100e6;
/// Every node listens on this port of its own address.
const PORT: u16 = 8080;
const PATH: &str = "/big.bin";
/// The front's configuration, as shipped.
const HAPROXY_CFG: &str = include_str!("../../../../dist/haproxy.cfg");
/// Longest a crowd may take.
const CROWD_LIMIT: Duration = Duration::from_secs(600);

#[derive(Debug, Clone, Copy, PartialEq)]
enum System {
    Circus,
    NginxSlice,
}

/// One run's setting.
struct Run {
    system: System,
    nodes: usize,
    clients: usize,
    /// Kill the last node once this share of the bytes is delivered.
    kill_at: Option<f64>,
}

/// What one run measured.
struct Measured {
    crowd: crowd::Outcome,
    origin_bytes: u64,
    /// Bytes each node sent, clients and peers.
    node_bytes: Vec<u64>,
    killed: Option<usize>,
}

/// What every run shares.
struct Ctx<'a> {
    opts: &'a BenchOptions,
    net: NetUp,
    root: PathBuf,
    digest: blake3::Hash,
}

pub async fn run(opts: &BenchOptions, log: &mut (dyn FnMut(&str) + Send)) -> Result<Report, BenchError> {
    if !is_root() {
        return Err(BenchError::Setup("bench cluster builds network namespaces: run it as root".into()));
    }
    if !["/usr/sbin/haproxy", "/usr/bin/haproxy"].iter().any(|p| Path::new(p).exists()) {
        return Err(BenchError::Setup("haproxy is not installed: apt-get install haproxy".into()));
    }
    let root = opts.work.join("cluster-origin");
    std::fs::create_dir_all(&root).map_err(io_err("creating the origin's directory"))?;
    let object = root.join(PATH.trim_start_matches('/'));
    make_file(&object, opts.file_size, opts.seed)?;
    let digest = blake3::hash(&std::fs::read(&object).map_err(io_err("reading the object"))?);
    let id = std::process::id();
    // The machine's congestion control unless CIRCUS_BENCH_CC names one
    // (reno: flows share a link evenly; BBR, this machine's default, lets
    // the established flows of a node's clients crowd out a member's
    // request).
    let congestion_control = std::env::var("CIRCUS_BENCH_CC").ok().filter(|c| !c.is_empty());
    let plan =
        ClusterNet { id, subnet: Network::free_subnet(id)?, nodes: NODES, link_bps: LINK_BPS, congestion_control };
    let ctx = Ctx { opts, net: NetUp::up(plan)?, root, digest };
    let per_node = opts.clients.div_ceil(NODES);
    let runs = [
        ("circus, 1 node", Run { system: System::Circus, nodes: 1, clients: per_node, kill_at: None }),
        ("circus, 4 nodes", Run { system: System::Circus, nodes: NODES, clients: opts.clients, kill_at: None }),
        (
            "circus, 4 nodes, 1 killed",
            Run { system: System::Circus, nodes: NODES, clients: opts.clients, kill_at: Some(1.0 / 3.0) },
        ),
        (
            "nginx slice, 4 nodes",
            Run { system: System::NginxSlice, nodes: NODES, clients: opts.clients, kill_at: None },
        ),
    ];
    // CIRCUS_BENCH_CLUSTER_RUNS=1,2 runs only those (numbered as above).
    let chosen: Option<Vec<usize>> = std::env::var("CIRCUS_BENCH_CLUSTER_RUNS")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect());
    let mut rows = Vec::new();
    let mut one_node = 0.0;
    for (i, (name, r)) in runs.iter().enumerate() {
        if chosen.as_ref().is_some_and(|c| !c.contains(&(i + 1))) {
            continue;
        }
        log(&format!("{name}: {} clients, {} bytes each", r.clients, opts.file_size));
        let m = run_one(&ctx, i + 1, r, log).await?;
        let row = row(name, r, &m, opts.file_size, one_node);
        if r.nodes == 1 {
            one_node = row.get("throughput_mbit_s").unwrap_or(0.0);
        }
        log(&format!("{name}: {}", summary(&row)));
        rows.push(row);
    }
    let verdict = verdict(&rows);
    Ok(Report {
        scenario: "cluster".into(),
        setup: format!(
            "{NODES} nodes in network namespaces, each link {} Mbit/s both ways (HTB); HAProxy in front \
             (dist/haproxy.cfg); nginx as the origin; {} clients (one node alone: {per_node}) download one \
             {} byte object at once, each body checked whole (blake3); a cut download resumes through the front",
            LINK_BPS / 1e6,
            opts.clients,
            opts.file_size
        ),
        rows,
        verdict,
    })
}

fn row(name: &str, r: &Run, m: &Measured, size: u64, one_node: f64) -> Row {
    let delivered = m.crowd.verified as f64 * size as f64;
    let throughput = delivered * 8.0 / m.crowd.seconds.max(1e-9) / 1e6;
    let alive: Vec<f64> =
        m.node_bytes.iter().enumerate().filter(|(n, _)| Some(*n) != m.killed).map(|(_, &b)| b as f64).collect();
    let mean = alive.iter().sum::<f64>() / alive.len().max(1) as f64;
    let max = alive.iter().copied().fold(0.0, f64::max);
    let mut row = Row::new(name)
        .with("clients", r.clients as f64)
        .with("verified", m.crowd.verified as f64)
        .with("failed", m.crowd.failures.len() as f64)
        .with("resumes", m.crowd.resumes as f64)
        .with("origin_x", m.origin_bytes as f64 / size as f64)
        .with("throughput_mbit_s", throughput)
        .with("node_max_over_mean", if mean > 0.0 { max / mean } else { 0.0 })
        .with("seconds", m.crowd.seconds);
    if r.nodes > 1 && one_node > 0.0 {
        row = row.with("x_one_node", throughput / one_node);
    }
    row
}

fn summary(row: &Row) -> String {
    row.figures.iter().map(|(n, v)| format!("{n} {v:.3}")).collect::<Vec<_>>().join(", ")
}

/// The figures against the targets, in words.
fn verdict(rows: &[Row]) -> String {
    let names = ["circus, 1 node", "circus, 4 nodes", "circus, 4 nodes, 1 killed", "nginx slice, 4 nodes"];
    let get = |i: usize, f: &str| rows.iter().find(|r| r.server == names[i]).and_then(|r| r.get(f)).unwrap_or(f64::NAN);
    let all_verified = |i: usize| get(i, "verified") == get(i, "clients");
    format!(
        "4 nodes: origin {:.3} x the object (target <= 1.05), {:.2} x one node's throughput (>= 3.6), \
         busiest node {:.2} x the mean (<= 1.5), every download verified: {}; one node killed: origin {:.3} x \
         (<= 1.3), every download verified: {} ({} resumes); nginx slice: origin {:.3} x, {:.2} x one circus \
         node's throughput",
        get(1, "origin_x"),
        get(1, "x_one_node"),
        get(1, "node_max_over_mean"),
        all_verified(1),
        get(2, "origin_x"),
        all_verified(2),
        get(2, "resumes"),
        get(3, "origin_x"),
        get(3, "x_one_node"),
    )
}

async fn run_one(
    ctx: &Ctx<'_>,
    index: usize,
    r: &Run,
    log: &mut (dyn FnMut(&str) + Send),
) -> Result<Measured, BenchError> {
    let plan = &ctx.net.plan;
    let work = ctx.opts.work.join(format!("cluster-run{index}"));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(io_err("creating the run's directory"))?;
    let access_log = work.join("origin-bytes.log");
    let origin = ServerProc::nginx_counting_origin(&ctx.root, &work, &plan.root_ip().to_string(), &access_log)?;
    let mut nodes = start_nodes(ctx, r, &origin.addr, &work)?;
    wait_for_members(&nodes, r).await?;
    let front = match r.nodes {
        1 => None,
        _ => Some(haproxy(&work, &nodes)?),
    };
    let addr = front.as_ref().map_or_else(|| nodes[0].addr.clone(), |f| f.addr.clone());
    let before: Vec<u64> = (0..r.nodes).map(|n| ctx.net.sent_by(n)).collect();
    let progress = Arc::new(crowd::Progress::default());
    let size = ctx.opts.file_size;
    let crowd = tokio::spawn(crowd::run(addr, PATH, r.clients, size, ctx.digest, progress.clone()));
    let (total, started) = (size * r.clients as u64, Instant::now());
    let mut killed = None;
    let (mut last_sent, mut last_log) = (before.clone(), Instant::now());
    while !crowd.is_finished() {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let bytes = progress.bytes.load(Ordering::Relaxed);
        if let Some(share) = r.kill_at
            && killed.is_none()
            && bytes as f64 >= share * total as f64
        {
            let victim = r.nodes - 1;
            let _ = nodes[victim].child.kill();
            killed = Some(victim);
            log(&format!("  killed node {} at {:.0}% of the bytes", victim + 1, 100.0 * bytes as f64 / total as f64));
        }
        if last_log.elapsed() >= Duration::from_secs(5) {
            let sent: Vec<u64> = (0..r.nodes).map(|n| ctx.net.sent_by(n)).collect();
            let secs = last_log.elapsed().as_secs_f64();
            let rates: Vec<String> =
                sent.iter().zip(&last_sent).map(|(a, b)| format!("{:.0}", (a - b) as f64 * 8.0 / secs / 1e6)).collect();
            log(&format!(
                "  {:.0} s: {:.0}% of the bytes, {} of {} downloads done; nodes send {} Mbit/s",
                started.elapsed().as_secs_f64(),
                100.0 * bytes as f64 / total as f64,
                progress.done.load(Ordering::Relaxed),
                r.clients,
                rates.join(" / ")
            ));
            (last_sent, last_log) = (sent, Instant::now());
        }
        if started.elapsed() > CROWD_LIMIT {
            crowd.abort();
            return Err(BenchError::Client(format!("the crowd took longer than {CROWD_LIMIT:?}")));
        }
    }
    let outcome = crowd.await.map_err(|e| BenchError::Client(format!("crowd: {e}")))?;
    if let Some(why) = outcome.failures.first() {
        log(&format!("  {} downloads failed, the first: {why}", outcome.failures.len()));
    }
    let node_bytes = (0..r.nodes).map(|n| ctx.net.sent_by(n) - before[n]).collect();
    if r.system == System::Circus {
        for node in nodes.iter().filter(|n| n.child.id() != 0) {
            let m = |name: &str| node.metric(name).unwrap_or(f64::NAN);
            log(&format!(
                "  {}: from the origin {:.1} MiB, from peers {:.1} MiB, peer requests {} ({} failed), served to peers {}",
                node.name,
                m("circus_origin_fetched_bytes_total") / 1048576.0,
                m("circus_peer_fetched_bytes_total") / 1048576.0,
                m("circus_peer_requests_total"),
                m("circus_peer_errors_total"),
                m("circus_peer_served_requests_total"),
            ));
        }
    }
    // The origin logs a response when it ends: stop every client of it first.
    drop(front);
    nodes.clear();
    drop(origin);
    let origin_bytes = std::fs::read_to_string(&access_log)
        .map_err(io_err("reading the origin's log"))?
        .lines()
        .filter_map(|l| l.trim().parse::<u64>().ok())
        .sum();
    Ok(Measured { crowd: outcome, origin_bytes, node_bytes, killed })
}

/// The run's nodes, each in its namespace on its address, port [`PORT`].
fn start_nodes(ctx: &Ctx<'_>, r: &Run, origin: &str, work: &Path) -> Result<Vec<ServerProc>, BenchError> {
    let plan = &ctx.net.plan;
    let size = ctx.opts.file_size;
    // Room for the whole object and what is in flight.
    let cache = (size + size / 4 + (64 << 20)).max(ctx.opts.cache);
    let urls: Vec<String> = (0..r.nodes).map(|n| format!("http://{}:{PORT}", plan.node_ip(n))).collect();
    (0..r.nodes)
        .map(|n| {
            let (ip, wrap) = (plan.node_ip(n).to_string(), plan.exec_in(n));
            match r.system {
                System::Circus => {
                    let mut args =
                        vec!["--origin".to_owned(), format!("http://{origin}/"), "--cache".into(), cache.to_string()];
                    if r.nodes > 1 {
                        // Groups of 1 MiB: a 16 MiB object spreads over every node.
                        args.extend(["--peers".into(), urls.join(","), "--peer-self".into(), urls[n].clone()]);
                        args.extend(["--peer-group".into(), "1MiB".into()]);
                    }
                    args.extend(ctx.opts.server_args.iter().cloned());
                    let name = format!("circus-node{}", n + 1);
                    ServerProc::circus_listening(&ctx.opts.circus, &name, &args, &format!("{ip}:{PORT}"), &ip, &wrap)
                }
                System::NginxSlice => {
                    let dir = work.join(format!("node{}", n + 1));
                    std::fs::create_dir_all(&dir).map_err(io_err("creating a node's directory"))?;
                    ServerProc::nginx_slice_node(origin, &dir, &ip, PORT, &wrap, cache)
                }
            }
        })
        .collect()
}

/// Until every circus member sees every other live (members started
/// before the others listened saw them down for a probe).
async fn wait_for_members(nodes: &[ServerProc], r: &Run) -> Result<(), BenchError> {
    if r.system != System::Circus || r.nodes == 1 {
        return Ok(());
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    for node in nodes {
        while node.metric("circus_peers_live").unwrap_or(0.0) < r.nodes as f64 {
            if Instant::now() > deadline {
                return Err(BenchError::Setup(format!("{} does not see all {} members live", node.name, r.nodes)));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// HAProxy with the shipped configuration in front of `nodes`.
fn haproxy(work: &Path, nodes: &[ServerProc]) -> Result<ServerProc, BenchError> {
    let cfg = work.join("haproxy.cfg");
    std::fs::write(&cfg, HAPROXY_CFG).map_err(io_err("writing haproxy.cfg"))?;
    let addr = format!("127.0.0.1:{}", free_port()?);
    let mut cmd = std::process::Command::new("haproxy");
    cmd.args(["-db", "-f"]).arg(&cfg).env("CIRCUS_FRONT", &addr).stdout(std::process::Stdio::null());
    for (i, n) in nodes.iter().enumerate() {
        cmd.env(format!("CIRCUS_NODE{}", i + 1), &n.addr);
    }
    let child = cmd.spawn().map_err(io_err("starting haproxy"))?;
    let front = ServerProc { name: "haproxy".into(), child, addr, admin: None };
    for _ in 0..100 {
        if std::net::TcpStream::connect(&front.addr).is_ok() {
            return Ok(front);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(BenchError::Setup("haproxy did not listen within 5 s".into()))
}
