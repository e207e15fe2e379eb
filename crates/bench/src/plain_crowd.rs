//! Storage read amplification for the clients most crowds are made of:
//! curl downloads, each receiving the file front to back at the rate its
//! link allows, all starting within half a second, through a cache far
//! smaller than the file.
//!
//! The links are emulated in the kernel when the bench runs as root
//! (`--links kernel`, the default then: [`crate::netem`], an HTB class per
//! client address, the servers in a namespace) or by the clients
//! themselves over loopback (`--links client`: `curl --limit-rate`,
//! aria2c's download limit). The two are not the same crowd. A client
//! behind a link takes data as the link delivers it, and its receive
//! buffer stays nearly empty. A client that throttles its own reads lets
//! its receive buffer fill: loopback delivers whatever the buffer takes
//! (the kernel grows it up to `tcp_rmem`'s maximum, 32 MiB here) at once,
//! so the server sees bursts and a client running megabytes ahead of what
//! it has read, a different distance for each client.
//! - `amplification-plain`: 10 curl clients at 15-60 MB/s (uniform);
//! - `amplification-mixed`: the same, half curl and half native;
//! - `amplification-segmented`: 8 aria2c clients with 16 connections each
//!   (`-x16 -s16`), each connection receiving its own ranges in order;
//! - `amplification-curl`: `amplification`'s crowd (50 clients at 10, 20
//!   or 40 MB/s, a 1 GiB file), every client curl.
//!
//! Each crowd runs against the circus policy favoring speed (the default),
//! favoring storage (plain downloads paced to stay together, rule C15), the
//! sequential policy (an LRU block cache), and, unless some clients are
//! native, nginx with its page cache bounded to the same budget by a
//! memory cgroup (`memcg`), so the kernel's own page cache decides what
//! stays. Beside each unpaced figure of an all-curl crowd stands the
//! fewest reads any cache of the same size could have done for the same
//! arrivals and rates (Belady's offline rule, `circus_sim::bound`): plain
//! downloads read at fixed times whatever the server does, so no eviction
//! can beat that number, and a target below it can only be met by slowing
//! clients down. It takes each download at its average rate, so it holds
//! only as far as the downloads read steadily: not for paced ones (no
//! bound is printed beside them), nor for bursts into a client's receive
//! buffer.
//! aria2c's connections are in-order readers too, of ranges it picks as it
//! goes; their bound is computed afterwards from the ranges, times and
//! rates in the server's access log (`range_log`).

use crate::{
    BenchError, BenchOptions, Report, Row, amplification,
    experiment::LinkMode,
    io_err, make_file,
    memcg::MemoryCgroup,
    native_client,
    netem::{NetPlan, Network},
    procs::ServerProc,
};
use circus_core::BlockLayout;
use circus_sim::bound::{Reader, fewest_reads};
use rand::{Rng, SeedableRng};
use std::time::{Duration, Instant};

/// Client rates of the small crowds, bytes per second: drawn uniformly in
/// this range.
const RATES: std::ops::Range<f64> = 15e6..60e6;

/// The server's block size (its default), for the bound.
const BLOCK: u32 = 64 << 10;

/// Bytes on the wire per byte of payload in a full segment (1,514-byte
/// Ethernet frames carrying 1,448 bytes of TCP payload with timestamps):
/// an emulated link runs this much faster than the client's rate, so the
/// payload arrives at the rate and the ideal time stays size / rate.
const WIRE_PER_PAYLOAD: f64 = 1514.0 / 1448.0;

/// Who makes up the crowd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Crowd {
    /// Every client is curl.
    Plain,
    /// Every other client is a native one.
    Mixed,
    /// Every client is aria2c with 16 connections, each fetching its own
    /// ranges in order (`-x16 -s16`).
    Segmented,
    /// `amplification`'s crowd and rates, every client curl.
    Large,
}

impl Crowd {
    fn scenario(self) -> &'static str {
        match self {
            Crowd::Plain => "amplification-plain",
            Crowd::Mixed => "amplification-mixed",
            Crowd::Segmented => "amplification-segmented",
            Crowd::Large => "amplification-curl",
        }
    }

    fn who(self) -> &'static str {
        match self {
            Crowd::Plain => "curl clients at 15-60 MB/s",
            Crowd::Mixed => "clients at 15-60 MB/s, half curl and half native,",
            Crowd::Segmented => "aria2c clients at 15-60 MB/s (-x16 -s16, 16 ranges each)",
            Crowd::Large => "curl clients at 10, 20 or 40 MB/s",
        }
    }

    /// Targets: favoring speed, favoring storage.
    fn targets(self) -> (f64, f64) {
        match self {
            Crowd::Plain => (1.5, 1.1),
            Crowd::Mixed => (1.3, 1.05),
            Crowd::Segmented => (1.2, 1.2),
            Crowd::Large => (2.5, 1.1),
        }
    }

    /// A client's rate, bytes per second.
    fn rate(self, rng: &mut impl Rng) -> f64 {
        match self {
            Crowd::Large => amplification::RATES[rng.random_range(0..amplification::RATES.len())],
            _ => rng.random_range(RATES),
        }
    }

    /// Whether every client reads front to back (curl): the offline optimum
    /// applies, and nginx can serve them all.
    fn all_curl(self) -> bool {
        matches!(self, Crowd::Plain | Crowd::Large)
    }
}

/// One client of the crowd, drawn before the run so that every server
/// sees the same crowd and the links can be built for it.
#[derive(Debug, Clone, Copy)]
struct Client {
    rate: f64,
    jitter: Duration,
    plain: bool,
}

/// The crowd of `opts.seed`: each client's rate, start and kind.
fn draw(opts: &BenchOptions, crowd: Crowd) -> Vec<Client> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(opts.seed);
    (0..opts.clients)
        .map(|i| Client {
            rate: crowd.rate(&mut rng),
            jitter: Duration::from_millis(rng.random_range(0..500)),
            plain: crowd != Crowd::Mixed || i % 2 == 0,
        })
        .collect()
}

/// Where the servers listen and how their clients reach them.
struct Links {
    /// With kernel links: the namespace, veth and HTB classes.
    net: Option<Network>,
}

impl Links {
    /// Builds one link per client when `mode` is kernel.
    fn up(mode: LinkMode, clients: &[Client]) -> Result<Links, BenchError> {
        if mode == LinkMode::ClientThrottle {
            return Ok(Links { net: None });
        }
        if clients.len() > 240 {
            return Err(BenchError::Setup(
                "kernel links take at most 240 clients (one address block each): use --links client for more".into(),
            ));
        }
        let class_bps: Vec<f64> = clients.iter().map(|c| c.rate * 8.0 * WIRE_PER_PAYLOAD).collect();
        let total: f64 = class_bps.iter().sum();
        let id = std::process::id();
        let net = Network::up(NetPlan {
            id,
            subnet: Network::free_subnet(id)?,
            // Never the bottleneck: the clients' links are.
            server_link_bps: (total * 1.5).max(1e9),
            class_bps,
            per_class: 1,
            loss: 0.0,
            line: None,
        })?;
        Ok(Links { net: Some(net) })
    }

    fn host(&self) -> String {
        crate::netem::server_host(self.net.as_ref())
    }

    fn wrap(&self) -> Vec<String> {
        crate::netem::server_wrap(self.net.as_ref())
    }

    /// Client `i`'s source address, behind its own link; `None` when
    /// clients throttle themselves.
    fn source(&self, i: usize) -> Option<std::net::Ipv4Addr> {
        self.net.as_ref().map(|n| n.plan.client_ip(i, 0))
    }

    fn describe(&self) -> &'static str {
        match self.net {
            Some(_) => {
                "behind emulated links (an HTB class per client, servers in a namespace; curl and aria2c unthrottled)"
            }
            None => {
                "throttling themselves over loopback (curl --limit-rate, aria2c --max-overall-download-limit; native clients alike)"
            }
        }
    }
}

/// One finished download.
struct Done {
    start_s: f64,
    seconds: f64,
    rate: f64,
    plain: bool,
}

/// A server the crowd runs against.
enum Contender {
    Circus {
        name: &'static str,
        policy: &'static str,
        favor: &'static str,
    },
    /// nginx (sendfile) with its page cache bounded to the cache budget.
    Nginx,
}

pub async fn run(opts: &BenchOptions, crowd: Crowd, log: &mut (dyn FnMut(&str) + Send)) -> Result<Report, BenchError> {
    crate::external::require(if crowd == Crowd::Segmented { &["aria2c"] } else { &["curl"] })?;
    let root = opts.work.join("amplification-plain");
    std::fs::create_dir_all(&root).map_err(io_err("creating data dir"))?;
    make_file(&root.join("data.bin"), opts.file_size, opts.seed)?;
    let clients = draw(opts, crowd);
    let links = Links::up(LinkMode::resolve(opts.links)?, &clients)?;
    let mut contenders = vec![
        Contender::Circus { name: "circus", policy: "circus", favor: "speed" },
        Contender::Circus { name: "circus, favor storage", policy: "circus", favor: "storage" },
        Contender::Circus { name: "sequential", policy: "sequential", favor: "speed" },
    ];
    if crowd != Crowd::Mixed {
        contenders.push(Contender::Nginx);
    }
    let mut rows = Vec::new();
    for contender in contenders {
        let row = match contender {
            Contender::Circus { name, policy, favor } => {
                // Other processes' dirty pages (a build's, a previous
                // contender's log) written back during a two-second run
                // would slow its direct reads: on disk before the clock starts.
                sync()?;
                let mut args = vec!["--policy".into(), policy.into(), "--cache".into(), opts.cache.to_string()];
                args.extend(["--favor".into(), favor.into()]);
                // aria2c picks its ranges as it goes: the server's log says
                // which each connection read, and when.
                let access_log = opts.work.join(format!("access-{policy}-{favor}.log"));
                if crowd == Crowd::Segmented {
                    let _ = std::fs::remove_file(&access_log);
                    args.extend(["--access-log".into(), access_log.display().to_string()]);
                    args.extend(["--access-log-format".into(), "json".into()]);
                }
                args.extend(opts.server_args.iter().cloned());
                let server = ServerProc::circus_at(&opts.circus, &root, &args, &links.host(), &links.wrap())?;
                let url = format!("http://{}/data.bin", server.addr);
                // Native clients need the file's hash index: build it before the clock starts.
                if crowd == Crowd::Mixed {
                    native_client::download(&url, None).await.map_err(BenchError::Client)?;
                }
                let before = server.metric("circus_storage_read_bytes_total")?;
                let cpu = server.cpu_seconds();
                log(&format!("{name}: {} clients ({crowd:?}) downloading {} bytes", opts.clients, opts.file_size));
                let done = crowd_run(&url, opts, &clients, &links, crowd, log).await?;
                let read = server.metric("circus_storage_read_bytes_total")? - before;
                // Paced downloads (favoring storage) do not read at the
                // steady rate the offline bound assumes: no bound beside them.
                let paced = favor == "storage";
                let row = figures(Row::new(name), read, &done, opts, crowd, paced)
                    .with("server_cpu_s", server.cpu_seconds() - cpu);
                if crowd == Crowd::Segmented && !paced {
                    let readers = crate::range_log::readers(&access_log)?;
                    row.with("best_possible_amplification", fewest(&readers, opts))
                } else {
                    row
                }
            }
            Contender::Nginx => nginx_row(&root, opts, &clients, &links, crowd, log).await?,
        };
        rows.push(row);
    }
    let figure = |r: &Row, k: &str| r.get(k).unwrap_or(f64::NAN);
    let (amp, slow) = (figure(&rows[0], "amplification"), figure(&rows[0], "download_vs_ideal_mean"));
    let stored = figure(&rows[1], "amplification");
    let (target, storage_target) = crowd.targets();
    let met = |ok: bool| if ok { "met" } else { "NOT met" };
    let beyond = match (rows[0].get("best_possible_amplification"), rows[0].get("lower_bound_amplification")) {
        (Some(b), _) if b > target => format!("; no cache of this size could do better than {b:.2} for these clients"),
        (Some(b), _) => format!("; the best any cache could do for these clients: {b:.2}"),
        (None, Some(b)) => format!("; no cache of this size could do better than {b:.2} for the curl half alone"),
        (None, None) => String::new(),
    };
    let nginx = rows
        .get(3)
        .map(|r| format!("; nginx (page cache bounded alike) {:.2} times", figure(r, "amplification")))
        .unwrap_or_default();
    Ok(Report {
        scenario: crowd.scenario().into(),
        setup: format!(
            "{} {} {} download one {} byte file, starting within 0.5 s; cache {} bytes (nginx: a memory cgroup limit of its idle usage plus the cache); {}",
            opts.clients,
            crowd.who(),
            links.describe(),
            opts.file_size,
            opts.cache,
            receive_buffers()
        ),
        verdict: format!(
            "favoring speed circus reads the file {amp:.2} times (target <= {target}: {}), downloads at {slow:.3} x their ideal time (target <= 1.10: {}){beyond}; favoring storage {stored:.2} times (target <= {storage_target}: {}), downloads at {:.2} x ideal; sequential (LRU) {:.2} times{nginx}",
            met(amp <= target),
            met(slow <= 1.1),
            met(stored <= storage_target),
            figure(&rows[1], "download_vs_ideal_mean"),
            figure(&rows[2], "amplification"),
        ),
        rows,
    })
}

/// The crowd against nginx in a memory cgroup limited to its idle usage
/// plus the cache budget. The file is dropped from the page cache first, so
/// nginx finds in memory only what it read itself; its storage reads are
/// the `read_bytes` of its processes.
async fn nginx_row(
    root: &std::path::Path,
    opts: &BenchOptions,
    clients: &[Client],
    links: &Links,
    crowd: Crowd,
    log: &mut (dyn FnMut(&str) + Send),
) -> Result<Row, BenchError> {
    let cgroup = MemoryCgroup::create("nginx")?;
    // Into the cgroup first: `ip netns exec` mounts the namespace's own
    // /sys, where the cgroup's directory is not.
    let mut wrap = cgroup.wrap();
    wrap.extend(links.wrap());
    let server = ServerProc::nginx_at(root, &opts.work, false, &links.host(), &wrap)?;
    drop_page_cache()?;
    let idle = cgroup.usage()?;
    cgroup.limit(idle + opts.cache)?;
    let url = format!("http://{}/data.bin", server.addr);
    let before = server.io_read_bytes();
    let cpu = server.cpu_seconds();
    log(&format!(
        "nginx: {} clients ({crowd:?}) downloading {} bytes; memory limit {} (idle {idle} + cache)",
        opts.clients,
        opts.file_size,
        idle + opts.cache
    ));
    let done = crowd_run(&url, opts, clients, links, crowd, log).await?;
    let read = server.io_read_bytes().saturating_sub(before) as f64;
    let row = figures(Row::new("nginx, page cache bounded"), read, &done, opts, crowd, false)
        .with("server_cpu_s", server.cpu_seconds() - cpu)
        .with("memory_limit_bytes", (idle + opts.cache) as f64)
        .with("memory_peak_bytes", cgroup.peak()? as f64)
        .with("page_cache_end_bytes", cgroup.page_cache()? as f64);
    drop(server);
    Ok(row)
}

/// Writes dirty pages out and drops clean ones, so no server finds the
/// file in memory it did not read itself.
fn drop_page_cache() -> Result<(), BenchError> {
    sync()?;
    std::fs::write("/proc/sys/vm/drop_caches", "1\n").map_err(io_err("dropping the page cache (needs root)"))
}

/// Writes every dirty page of the machine out (`sync`).
fn sync() -> Result<(), BenchError> {
    let synced = std::process::Command::new("sync").status().map_err(io_err("running sync"))?;
    if synced.success() { Ok(()) } else { Err(BenchError::Setup("sync failed".into())) }
}

/// The figures of one run: bytes read, amplification, download times
/// against their ideal, and for an all-curl crowd that was not `paced` the
/// offline optimum.
fn figures(row: Row, read: f64, done: &[Done], opts: &BenchOptions, crowd: Crowd, paced: bool) -> Row {
    let slowdowns: Vec<f64> = done.iter().map(|d| d.seconds / (opts.file_size as f64 / d.rate)).collect();
    let mut row = row
        .with("storage_bytes_read", read)
        .with("amplification", read / opts.file_size as f64)
        .with("download_vs_ideal_mean", slowdowns.iter().sum::<f64>() / slowdowns.len() as f64)
        .with("download_vs_ideal_max", slowdowns.iter().copied().fold(0.0, f64::max));
    if paced {
        // Each download's rate varied as the pacing held it back.
    } else if crowd.all_curl() {
        // An all-curl crowd reads in a sequence fixed in advance; native
        // clients choose their order as they go, and aria2c its ranges
        // (whose bound comes from the server's log).
        row = row.with("best_possible_amplification", bound(done, opts));
    } else if crowd == Crowd::Mixed {
        // The curl half alone needs this many reads whatever the native
        // half does: a block read early for a native client still counts
        // once, and reading early never lowers the offline optimum.
        row = row.with("lower_bound_amplification", bound(done, opts));
    }
    row
}

/// Starts the crowd and waits for every download; fails if one fails.
async fn crowd_run(
    url: &str,
    opts: &BenchOptions,
    clients: &[Client],
    links: &Links,
    crowd: Crowd,
    log: &mut (dyn FnMut(&str) + Send),
) -> Result<Vec<Done>, BenchError> {
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (i, &Client { rate, jitter, plain }) in clients.iter().enumerate() {
        let (url, size) = (url.to_string(), opts.file_size);
        let into = opts.work.join(format!("aria2c-{i}"));
        let way = Way { rate, source: links.source(i) };
        tasks.spawn(async move {
            tokio::time::sleep(jitter).await;
            let start_s = started.elapsed().as_secs_f64();
            let seconds = match crowd {
                Crowd::Segmented => aria2c(&url, way, size, &into).await?,
                _ if plain => curl(&url, way, size).await?,
                _ => {
                    let o = native_client::Options {
                        rate: way.source.is_none().then_some(rate),
                        local: way.source.map(std::net::IpAddr::V4),
                        ..Default::default()
                    };
                    native_client::download_with(&url, o).await.map_err(BenchError::Client)?.seconds
                }
            };
            Ok::<_, BenchError>(Done { start_s, seconds, rate, plain })
        });
    }
    let mut done = Vec::new();
    while let Some(r) = tasks.join_next().await {
        done.push(r.map_err(|e| BenchError::Client(e.to_string()))??);
        log(&format!("  {}/{} done after {:.0} s", done.len(), opts.clients, started.elapsed().as_secs_f64()));
    }
    Ok(done)
}

/// How one client gets its rate: from its own link (a source address
/// behind an HTB class), or by throttling itself to `rate` bytes per second.
#[derive(Debug, Clone, Copy)]
struct Way {
    rate: f64,
    source: Option<std::net::Ipv4Addr>,
}

/// One curl download; its duration in seconds.
async fn curl(url: &str, way: Way, size: u64) -> Result<f64, BenchError> {
    let mut cmd = tokio::process::Command::new("curl");
    cmd.args(["-sSf", "--max-time", "600"]);
    match way.source {
        Some(ip) => cmd.args(["--interface", &ip.to_string()]),
        None => cmd.args(["--limit-rate", &format!("{}", way.rate as u64)]),
    };
    let out = cmd
        .args(["-o", "/dev/null", "-w", "%{size_download} %{time_total}", url])
        .kill_on_drop(true)
        .output()
        .await
        .map_err(io_err("running curl"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut parts = text.split_whitespace();
    let got: u64 = parts.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let seconds: f64 = parts.next().and_then(|s| s.parse().ok()).unwrap_or(f64::NAN);
    if !out.status.success() || got != size {
        return Err(BenchError::Client(format!(
            "curl {url} got {got} of {size} bytes: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(seconds)
}

/// One aria2c download with 16 connections, each fetching its own ranges,
/// into `dir` (removed afterwards); its duration in seconds.
async fn aria2c(url: &str, way: Way, size: u64, dir: &std::path::Path) -> Result<f64, BenchError> {
    std::fs::create_dir_all(dir).map_err(io_err("creating the aria2c directory"))?;
    let started = Instant::now();
    let mut cmd = tokio::process::Command::new("aria2c");
    cmd.args(["-q", "-x16", "-s16", "--min-split-size=1M", "--file-allocation=none", "--allow-overwrite=true"]);
    match way.source {
        Some(ip) => cmd.arg(format!("--interface={ip}")),
        None => cmd.arg(format!("--max-overall-download-limit={}", way.rate as u64)),
    };
    let out = cmd
        .arg("-d")
        .arg(dir)
        .args(["-o", "data.bin", url])
        .kill_on_drop(true)
        .output()
        .await
        .map_err(io_err("running aria2c"))?;
    let seconds = started.elapsed().as_secs_f64();
    let got = std::fs::metadata(dir.join("data.bin")).map(|m| m.len()).unwrap_or(0);
    let _ = std::fs::remove_dir_all(dir);
    if !out.status.success() || got != size {
        return Err(BenchError::Client(format!(
            "aria2c {url} got {got} of {size} bytes: {}",
            String::from_utf8_lossy(&out.stdout).trim()
        )));
    }
    Ok(seconds)
}

/// How large a client's receive buffer may grow (`net.ipv4.tcp_rmem`).
/// A client throttled by `--limit-rate` lets its buffer fill, and takes
/// that much at loopback speed in bursts (a 50-client crowd read its file
/// 4.4 times with 32 MiB, 2.5 with 6 MiB), so every report says which.
fn receive_buffers() -> String {
    match std::fs::read_to_string("/proc/sys/net/ipv4/tcp_rmem") {
        Ok(v) => {
            format!("clients' receive buffers up to {} bytes (tcp_rmem)", v.split_whitespace().last().unwrap_or("?"))
        }
        Err(e) => format!("tcp_rmem unknown ({e})"),
    }
}

/// The fewest times any cache of the server's size could have read the
/// file for these downloads, each at the rate it actually got.
fn bound(done: &[Done], opts: &BenchOptions) -> f64 {
    let readers: Vec<Reader> =
        done.iter().filter(|d| d.plain).map(|d| Reader::whole(d.start_s, opts.file_size as f64 / d.seconds)).collect();
    fewest(&readers, opts)
}

/// The fewest reads of the file, over its size, for these readers.
fn fewest(readers: &[Reader], opts: &BenchOptions) -> f64 {
    let layout = BlockLayout::new(opts.file_size, BLOCK);
    let reads = fewest_reads(readers, layout, (opts.cache / u64::from(BLOCK)) as usize);
    reads as f64 / f64::from(layout.blocks())
}
