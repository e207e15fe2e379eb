//! A Wisconsin Proxy Benchmark-style run of the origin tier: an origin that
//! answers after a fixed delay, objects of 0–40 KiB with 1% at 1 MiB, and
//! closed-loop clients. Phase 1 asks only for new objects (all misses);
//! phase 2 repeats a recently requested object with a configured
//! probability (recency-weighted: the k-th most recent with weight 1/k),
//! else a new one. Per phase: latency (whole answer, and to the response
//! head for new objects and for repeats), hit ratio, byte hit ratio (bytes
//! not fetched from the origin over bytes served), throughput, server CPU
//! and memory, for the circus tier and for Varnish and Squid (Debian's) in
//! front of the same origin, one after the other, each starting cold.
//!
//! Two variants: `wpb` (clients on loopback) and `wpb-modem` (WPB's 28.8
//! kbit/s modem clients, scaled: see [`Variant::Modem`]).

mod clients;
mod origin;
mod plot;

use crate::{
    BenchError, BenchOptions, Report, Row,
    netem::{NetPlan, Network, is_root},
    procs::{ServerProc, VARNISHD},
    squid,
};
use std::{
    net::IpAddr,
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

const REPEAT: f64 = 0.5;
/// WPB's modem: 28.8 kbit/s down.
pub const MODEM_BPS: f64 = 28_800.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// Clients on loopback, 40 requests each per phase.
    Fast,
    /// Every client behind its own 28.8 kbit/s link (3,600 bytes/s). Scaled
    /// to finish in minutes: 6 requests per client per phase, and no 1 MiB
    /// objects (one takes 4.9 minutes at that rate, so a phase would last
    /// as long as its unluckiest client's large object).
    Modem,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Fast => "wpb",
            Variant::Modem => "wpb-modem",
        }
    }

    fn per_client(self) -> usize {
        match self {
            Variant::Fast => 40,
            Variant::Modem => 6,
        }
    }

    fn big_objects(self) -> bool {
        self == Variant::Fast
    }
}

/// Where the servers listen and how clients reach them.
struct Links {
    net: Option<Network>,
    mode: &'static str,
}

impl Links {
    fn host(&self) -> String {
        crate::netem::server_host(self.net.as_ref())
    }

    /// The origin is in the bench, in the root namespace: on the veth's
    /// unshaped control address when the servers are in their namespace.
    fn origin_host(&self) -> String {
        self.net.as_ref().map_or("127.0.0.1".into(), |n| n.plan.control_ip().to_string())
    }

    fn wrap(&self) -> Vec<String> {
        crate::netem::server_wrap(self.net.as_ref())
    }

    fn local(&self, clients: usize) -> Option<Vec<IpAddr>> {
        let plan = &self.net.as_ref()?.plan;
        Some((0..clients).map(|c| IpAddr::V4(plan.client_ip(c / plan.per_class, c % plan.per_class))).collect())
    }
}

/// One modem link class per 250 clients: addresses are `10.x.(1+class).(1+i)`.
fn modem_links(clients: usize) -> Result<Links, BenchError> {
    if !is_root() {
        return Ok(Links { net: None, mode: "client-throttle (loopback, clients pace their reads; not root)" });
    }
    let classes = clients.div_ceil(250).max(1);
    let plan = NetPlan {
        id: std::process::id(),
        subnet: Network::free_subnet(std::process::id())?,
        server_link_bps: 10e9,
        class_bps: vec![MODEM_BPS; classes],
        per_class: clients.div_ceil(classes),
        loss: 0.0,
        line: None,
    };
    Ok(Links { net: Some(Network::up(plan)?), mode: "kernel (netns + veth + HTB class per client, reno)" })
}

/// Which servers run, in order; a missing peer is skipped with the reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Circus,
    Varnish,
    Squid,
}

fn start(kind: Kind, opts: &BenchOptions, origin: &str, cache: u64, links: &Links) -> Result<ServerProc, BenchError> {
    let (host, wrap) = (links.host(), links.wrap());
    match kind {
        Kind::Circus => {
            let mut args =
                vec!["--origin".to_owned(), format!("http://{origin}/"), "--cache".into(), cache.to_string()];
            args.extend(opts.server_args.iter().cloned());
            ServerProc::circus_serve_at(&opts.circus, "circus-origin-tier", &args, &host, &wrap)
        }
        Kind::Varnish => ServerProc::varnish(origin, &opts.work, cache, &host, &wrap),
        Kind::Squid => {
            squid::remove_stale_segments();
            ServerProc::squid(origin, &opts.work.join("squid.log"), cache, &host, &wrap)
        }
    }
}

pub async fn run(
    opts: &BenchOptions,
    variant: Variant,
    log: &mut (dyn FnMut(&str) + Send),
) -> Result<Report, BenchError> {
    let per_client = variant.per_client();
    let links = match variant {
        Variant::Fast => Links { net: None, mode: "loopback" },
        Variant::Modem => modem_links(opts.clients)?,
    };
    let pace = (variant == Variant::Modem && links.net.is_none()).then_some(MODEM_BPS / 8.0);
    let sent = Arc::new(AtomicU64::new(0));
    // Every cache gets room for both phases' objects (about 170 MB): Varnish
    // aborts deliveries mid-body when its malloc store cannot make room
    // (seen with 64 MiB), which would measure that, not caching.
    let cache = opts.cache.max(256 << 20);
    let origin_addr = origin::start(&links.origin_host(), opts.seed, variant.big_objects(), sent.clone()).await?;
    let mut skipped = Vec::new();
    let mut kinds = vec![Kind::Circus];
    for (kind, installed, why) in [
        (
            Kind::Varnish,
            Path::new(VARNISHD).exists(),
            "varnish skipped: varnishd is not installed (apt-get install -y varnish)",
        ),
        (Kind::Squid, squid::installed(), "squid skipped: squid is not installed (apt-get install -y squid)"),
    ] {
        if installed {
            kinds.push(kind);
        } else {
            log(why);
            skipped.push(why);
        }
    }
    let mut rows = Vec::new();
    for kind in kinds {
        // One server at a time, so that each has the machine and its
        // memory figures are its own.
        let server = start(kind, opts, &origin_addr, cache, &links)?;
        answering(&server)?;
        let baseline_rss = server.rss_bytes();
        let fetched_before = sent.load(Ordering::Relaxed);
        for (name, repeat, base) in [("phase1-cold", 0.0, 0u64), ("phase2-repeats", REPEAT, 1u64 << 40)] {
            let hits = circus_hits(kind, &server);
            let origin_bytes = sent.load(Ordering::Relaxed);
            let cpu = server.cpu_seconds();
            log(&format!("{} {name}: {} clients x {per_client} requests ({})", server.name, opts.clients, links.mode));
            // Phase 2's new objects are new; its repeats are of its own history.
            let load = clients::Load {
                addr: server.addr.clone(),
                clients: opts.clients,
                per_client,
                repeat,
                base,
                seed: opts.seed,
                local: links.local(opts.clients),
                pace,
            };
            let (mut p, rss_max) = sampling_rss(&server, clients::run(&load)).await?;
            let requests = p.latencies.len() as f64;
            let hit_ratio = if kind == Kind::Circus {
                (circus_hits(kind, &server) - hits) / requests
            } else {
                p.header_hits as f64 / requests
            };
            if repeat > 0.0 && hit_ratio == 0.0 {
                log(&format!("  warning: {} served no hit in a phase of repeats: is it caching?", server.name));
            }
            let fetched = sent.load(Ordering::Relaxed) - origin_bytes;
            // What the cache can hold at most is what this server fetched.
            let cached = sent.load(Ordering::Relaxed) - fetched_before;
            let beyond = rss_max.saturating_sub(baseline_rss + cached) as f64 / opts.clients as f64;
            p.latencies.sort_by(f64::total_cmp);
            let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
            let m = mean(&p.latencies);
            let sd = (p.latencies.iter().map(|l| (l - m).powi(2)).sum::<f64>() / requests).sqrt();
            let pct = |q: f64| p.latencies[((requests - 1.0) * q) as usize];
            let mut row = Row::new(format!("{} {name}", server.name))
                .with("requests", requests)
                .with("latency_mean_s", m)
                .with("latency_sd_s", sd)
                .with("latency_p50_s", pct(0.5))
                .with("latency_p99_s", pct(0.99))
                .with("ttfb_new_mean_s", mean(&p.ttfb_new));
            if !p.ttfb_repeat.is_empty() {
                row = row.with("ttfb_repeat_mean_s", mean(&p.ttfb_repeat));
            }
            let row = row
                .with("hit_ratio", hit_ratio)
                .with("byte_hit_ratio", 1.0 - fetched as f64 / p.bytes.max(1) as f64)
                .with("throughput_bytes_per_s", p.bytes as f64 / p.seconds)
                .with("phase_s", p.seconds)
                .with("server_cpu_s", server.cpu_seconds() - cpu)
                .with("retries", p.retries as f64)
                .with("peak_rss_bytes", server.peak_rss_bytes() as f64)
                .with("rss_beyond_cache_per_client_bytes", beyond);
            log(&format!(
                "  mean latency {m:.3} s, hit ratio {hit_ratio:.2}, byte hit ratio {:.2}, {:.0} s",
                row.get("byte_hit_ratio").unwrap_or(0.0),
                p.seconds
            ));
            rows.push(row);
        }
    }
    let svg = opts.work.join(format!("cache-{}.svg", variant.name()));
    plot::write(&rows, variant.name(), &svg)?;
    log(&format!("plot: {}", svg.display()));
    let verdict = rows
        .chunks(2)
        .map(|r| {
            format!(
                "{}: latency cold / repeats {:.3} / {:.3} s, phase 2 hit ratio {:.2}, byte hit ratio {:.2}",
                r[0].server.split(' ').next().unwrap_or_default(),
                r[0].get("latency_mean_s").unwrap_or(0.0),
                r[1].get("latency_mean_s").unwrap_or(0.0),
                r[1].get("hit_ratio").unwrap_or(0.0),
                r[1].get("byte_hit_ratio").unwrap_or(0.0),
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    Ok(Report {
        scenario: variant.name().into(),
        setup: format!(
            "{} closed-loop clients x {per_client} requests per phase; links: {}{}; origin delay {} ms; sizes uniform 0-40 KiB{}; phase 2 repeats a recent object with p = {REPEAT} (weight 1/k for the k-th most recent); cache {} bytes per server, memory only{}",
            opts.clients,
            links.mode,
            if variant == Variant::Modem { ", 28.8 kbit/s per client" } else { "" },
            origin::DELAY.as_millis(),
            if variant.big_objects() { ", 1% 1 MiB" } else { " (no 1 MiB objects)" },
            cache,
            if skipped.is_empty() { String::new() } else { format!("; {}", skipped.join("; ")) }
        ),
        verdict: format!("{verdict} (no target set)"),
        rows,
    })
}

/// Waits until `server` answers HTTP. Varnish's manager listens before its
/// child accepts: a request sent in between got its connection closed. The
/// probe's path is no object: the origin answers 404 with no body, so the
/// byte counts do not move.
fn answering(server: &ServerProc) -> Result<(), BenchError> {
    use std::io::{Read, Write};
    for _ in 0..100 {
        let answer = std::net::TcpStream::connect(&server.addr).and_then(|mut c| {
            c.set_read_timeout(Some(Duration::from_secs(2)))?;
            write!(c, "GET /ready HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")?;
            let mut head = [0u8; 12];
            c.read_exact(&mut head)?;
            Ok(head)
        });
        if answer.is_ok_and(|h| h.starts_with(b"HTTP/1.")) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(BenchError::Setup(format!(
        "{} at {} did not answer HTTP within 10 s: see its log under the work dir",
        server.name, server.addr
    )))
}

/// The tier's hit counter (the peers' hits are read from their headers;
/// asking them for /metrics would be a request to the origin).
fn circus_hits(kind: Kind, server: &ServerProc) -> f64 {
    if kind == Kind::Circus { server.metric("circus_origin_hits_total").unwrap_or(0.0) } else { 0.0 }
}

/// Runs `phase` while sampling the server's resident memory every 250 ms;
/// returns its result and the largest sample.
async fn sampling_rss<T>(
    server: &ServerProc,
    phase: impl Future<Output = Result<T, BenchError>>,
) -> Result<(T, u64), BenchError> {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let mut max = 0;
    tokio::pin!(phase);
    loop {
        tokio::select! {
            r = &mut phase => return Ok((r?, max.max(server.rss_bytes()))),
            _ = tick.tick() => max = max.max(server.rss_bytes()),
        }
    }
}
