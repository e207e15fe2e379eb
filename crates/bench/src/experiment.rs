//! Runs a [`Scenario`]: for each point, the emulated disk is mounted over
//! the test files, and each server in turn is started on it and loaded by a
//! closed population of real clients over the emulated links. One row of
//! figures per (point, server), measured over the same window for all.

use crate::{
    BenchError,
    disk::DiskParams,
    fusedisk::DiskMount,
    io_err, make_file,
    native_client::{self, Options},
    netem::{NetPlan, Network, is_root},
    procs::ServerProc,
    scenarios::{Point, Scenario, Server},
};
use rand::{Rng, SeedableRng};
use serde_json::{Map, Value, json};
use std::{
    net::IpAddr,
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

/// How client links are emulated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkMode {
    /// netns + veth + HTB per client address (root).
    Kernel,
    /// Clients throttle their own reads over loopback; no server link limit.
    ClientThrottle,
}

/// What the servers read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskMode {
    /// The FUSE one-arm disk model, shared by every server.
    Model,
    /// The machine's disk directly (caches dropped before each run;
    /// storage bytes from /proc/PID/io). On this VM it is host-cached.
    Real,
}

#[derive(Debug, Clone)]
pub struct ExperimentOptions {
    pub circus: PathBuf,
    pub work: PathBuf,
    pub links: Option<LinkMode>,
    pub disk: DiskMode,
    pub disk_params: DiskParams,
    pub seed: u64,
    /// Extra `circus serve` flags.
    pub server_args: Vec<String>,
    /// Only these servers (empty: the scenario's).
    pub only: Vec<Server>,
    /// Add the simulator's prediction to circus and sequential rows.
    pub sim: bool,
}

impl LinkMode {
    /// The mode asked for, else kernel links when root and the clients'
    /// own throttling otherwise; kernel links need root.
    pub fn resolve(asked: Option<LinkMode>) -> Result<LinkMode, BenchError> {
        let links = asked.unwrap_or(if is_root() { LinkMode::Kernel } else { LinkMode::ClientThrottle });
        if links == LinkMode::Kernel && !is_root() {
            return Err(BenchError::Setup("--links kernel needs root: run as root or use --links client".into()));
        }
        Ok(links)
    }

    pub fn name(self) -> &'static str {
        match self {
            LinkMode::Kernel => "kernel (netns + veth + HTB per client, reno)",
            LinkMode::ClientThrottle => "client-throttle (loopback, not root)",
        }
    }
}

impl DiskMode {
    pub fn name(self) -> &'static str {
        match self {
            DiskMode::Model => "model (FUSE, one arm)",
            DiskMode::Real => "real (O_DIRECT or page cache, caches dropped)",
        }
    }
}

/// Runs every point and server of `scenario`; one JSON object per row.
pub async fn run(
    scenario: &Scenario,
    opts: &ExperimentOptions,
    log: &mut (dyn FnMut(&str) + Send),
) -> Result<Vec<Map<String, Value>>, BenchError> {
    let links = LinkMode::resolve(opts.links)?;
    let servers: Vec<Server> =
        scenario.servers.iter().copied().filter(|s| opts.only.is_empty() || opts.only.contains(s)).collect();
    let mut rows = Vec::new();
    for (i, point) in scenario.points.iter().enumerate() {
        log(&format!(
            "[{}] point {}/{}: x={} load {} links {} file {} MiB x{} cache {} MiB; {} clients; links {}; disk {}",
            scenario.name,
            i + 1,
            scenario.points.len(),
            point.x,
            point.load,
            point.link_spec(),
            point.file_size >> 20,
            point.files,
            point.cache >> 20,
            point.clients(),
            links.name(),
            opts.disk.name()
        ));
        let backing = opts.work.join(format!("files-{}", point.file_size));
        std::fs::create_dir_all(&backing).map_err(io_err("creating data dir"))?;
        for f in 0..point.files {
            make_file(&backing.join(file_name(f)), point.file_size, opts.seed + u64::from(f))?;
        }
        let net = match links {
            LinkMode::Kernel => Some(Network::up(NetPlan {
                id: std::process::id(),
                subnet: Network::free_subnet(std::process::id())?,
                server_link_bps: point.server_link_bps,
                class_bps: point.links.iter().map(|l| l.bits_per_s).collect(),
                per_class: point.clients(),
                loss: point.loss,
                line: (point.rtt_s > 0.0).then(|| crate::delay::LineSpec {
                    delay: std::time::Duration::from_secs_f64(point.rtt_s),
                    ..Default::default()
                }),
            })?),
            LinkMode::ClientThrottle if point.loss > 0.0 || point.rtt_s > 0.0 => {
                return Err(BenchError::Setup(
                    "delay and loss need the kernel link emulation: run as root with --links kernel".into(),
                ));
            }
            LinkMode::ClientThrottle => None,
        };
        for &server in &servers {
            let mut row = run_one(scenario, point, server, opts, net.as_ref(), &backing, log).await?;
            row.insert("link_mode".into(), json!(links.name()));
            row.insert("disk_mode".into(), json!(opts.disk.name()));
            if opts.sim && server.is_circus() {
                add_sim(&mut row, point, server, opts)?;
            }
            log(&format!("  {}", summary(&row)));
            rows.push(row);
        }
    }
    Ok(rows)
}

fn file_name(f: u32) -> String {
    format!("data-{f}.bin")
}

/// A download that finished: when, how long, and its ideal time.
#[derive(Debug, Clone, Copy)]
struct Done {
    end: f64,
    seconds: f64,
    ideal: f64,
}

async fn run_one(
    scenario: &Scenario,
    point: &Point,
    server: Server,
    opts: &ExperimentOptions,
    net: Option<&Network>,
    backing: &Path,
    log: &mut (dyn FnMut(&str) + Send),
) -> Result<Map<String, Value>, BenchError> {
    // A fresh disk per run: same model, empty queue, head parked.
    let mount = match opts.disk {
        DiskMode::Model => {
            let mnt = opts.work.join(format!("mnt-{}", std::process::id()));
            // Buffered readers get the memory circus gets for its cache.
            Some(DiskMount::mount(backing, &mnt, opts.disk_params, point.cache)?)
        }
        DiskMode::Real => {
            drop_caches();
            None
        }
    };
    let root = mount.as_ref().map_or(backing.to_owned(), |m| m.mountpoint.clone());
    let (host, wrap) = (crate::netem::server_host(net), crate::netem::server_wrap(net));
    let logs = opts.work.join("logs");
    std::fs::create_dir_all(&logs).map_err(io_err("creating log dir"))?;
    let proc = match server {
        Server::Circus | Server::Sequential => {
            let mut args = point.serve_args(if server == Server::Circus { "circus" } else { "sequential" });
            args.extend(opts.server_args.iter().cloned());
            ServerProc::circus_at(&opts.circus, &root, &args, &host, &wrap)?
        }
        Server::NginxSendfile => ServerProc::nginx_at(&root, &logs, false, &host, &wrap)?,
        Server::NginxDirectio => ServerProc::nginx_at(&root, &logs, true, &host, &wrap)?,
    };
    let base = format!("http://{}", proc.addr);
    if server.is_circus() {
        // The hash index is built on the first request of each file: a
        // one-off read that happens before the measured window.
        for f in 0..point.files {
            native_client::download(&format!("{base}/{}", file_name(f)), None).await.map_err(BenchError::Client)?;
        }
    }

    let counter = Arc::new(AtomicU64::new(0));
    let done = Arc::new(Mutex::new(Vec::<Done>::new()));
    let failures = Arc::new(AtomicU64::new(0));
    let slots_done = Arc::new(AtomicU64::new(0));
    let cohort = point.cohort;
    let start = Instant::now();
    let end_s = point.warmup_s + point.measure_s;
    let mut tasks = tokio::task::JoinSet::new();
    for slot in 0..point.clients() {
        let (counter, done, failures, slots_done) =
            (counter.clone(), done.clone(), failures.clone(), slots_done.clone());
        let (links, files, size, base) = (point.links.clone(), point.files, point.file_size, base.clone());
        let local = net.map(|n| (0..links.len()).map(|c| IpAddr::V4(n.plan.client_ip(c, slot))).collect::<Vec<_>>());
        let throttle = net.is_none();
        let seed = opts.seed.wrapping_mul(1000).wrapping_add(slot as u64);
        let stagger = point.stagger_s();
        tasks.spawn(async move {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            tokio::time::sleep(Duration::from_secs_f64(rng.random_range(0.0..stagger))).await;
            let mut downloads = 0;
            // A cohort downloads once per slot; otherwise the slot loops.
            while start.elapsed().as_secs_f64() < end_s && !(cohort && downloads == 1) {
                downloads += 1;
                let class = rng.random_range(0..links.len());
                let rate = links[class].bits_per_s / 8.0;
                let url = format!("{base}/{}", file_name(rng.random_range(0..files)));
                let o = Options {
                    rate: throttle.then_some(rate),
                    local: local.as_ref().map(|l| l[class]),
                    counter: Some(&counter),
                    plain: !server.is_circus(),
                };
                match native_client::download_with(&url, o).await {
                    Ok(out) if out.bytes >= size => done.lock().expect("lock").push(Done {
                        end: start.elapsed().as_secs_f64(),
                        seconds: out.seconds,
                        ideal: size as f64 / rate,
                    }),
                    _ => {
                        failures.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            }
            slots_done.fetch_add(1, Ordering::Relaxed);
        });
    }

    let sample = |proc: &ServerProc| Sample {
        bytes: counter.load(Ordering::Relaxed),
        storage: match &mount {
            Some(m) => m.stats().bytes_read,
            None => proc.io_read_bytes(),
        },
        disk: mount.as_ref().map(|m| m.stats()).unwrap_or_default(),
        cpu: proc.cpu_seconds(),
        reported: if server.is_circus() {
            proc.metric("circus_storage_read_bytes_total").unwrap_or(f64::NAN)
        } else {
            f64::NAN
        },
    };
    tokio::time::sleep(Duration::from_secs_f64(point.warmup_s)).await;
    let a = sample(&proc);
    let t0 = start.elapsed().as_secs_f64();
    let mut last = (t0, a.bytes);
    let clients = point.clients() as u64;
    while start.elapsed().as_secs_f64() < end_s && !(cohort && slots_done.load(Ordering::Relaxed) == clients) {
        let left = end_s - start.elapsed().as_secs_f64();
        tokio::time::sleep(Duration::from_secs_f64(left.clamp(0.0, 0.5))).await;
        let (t, b) = (start.elapsed().as_secs_f64(), counter.load(Ordering::Relaxed));
        if t - last.0 < 10.0 && t < end_s {
            continue;
        }
        log(&format!(
            "    {} t={:.0}s {:.1} MB/s, {} downloads done",
            server.name(),
            t,
            (b - last.1) as f64 / (t - last.0).max(1e-3) / 1e6,
            done.lock().expect("lock").len()
        ));
        last = (t, b);
    }
    let b = sample(&proc);
    let t1 = start.elapsed().as_secs_f64();
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    let peak_rss = proc.peak_rss_bytes();
    drop(proc);
    let mount_used = mount.is_some();
    drop(mount);

    let window = t1 - t0;
    let mut finished: Vec<Done> = done.lock().expect("lock").iter().copied().filter(|d| d.end >= t0).collect();
    finished.sort_by(|x, y| x.seconds.total_cmp(&y.seconds));
    let n = finished.len();
    let mean = |f: fn(&Done) -> f64| if n == 0 { f64::NAN } else { finished.iter().map(f).sum::<f64>() / n as f64 };
    let (dl_mean, dl_ideal) = (mean(|d| d.seconds), mean(|d| d.ideal));
    let p95 = if n == 0 { f64::NAN } else { finished[((n as f64 * 0.95).ceil() as usize).clamp(1, n) - 1].seconds };
    let net_bytes = (b.bytes - a.bytes) as f64;
    let storage = (b.storage - a.storage) as f64;
    let mut row = Map::new();
    let mut put = |k: &str, v: Value| {
        row.insert(k.to_string(), v);
    };
    put("scenario", json!(scenario.name));
    put("x", json!(point.x));
    put("server", json!(server.name()));
    put("clients", json!(point.clients()));
    put("offered_bytes_per_s", json!(point.load * point.server_link_bps / 8.0));
    put("net_bytes_per_s", num(net_bytes / window));
    put("storage_bytes_read", num(storage));
    put("storage_bytes_per_s", num(storage / window));
    put("miss_ratio", num(storage / net_bytes));
    put("amplification", num(storage / (point.file_size * u64::from(point.files)) as f64));
    put("download_mean_s", num(dl_mean));
    put("download_p95_s", num(p95));
    put("download_ideal_s", num(dl_ideal));
    put("download_vs_ideal", num(dl_mean / dl_ideal));
    put("downloads", json!(n));
    put("failed_downloads", json!(failures.load(Ordering::Relaxed)));
    if mount_used {
        put("storage_reads", json!(b.disk.reads - a.disk.reads));
        put("storage_seeks", json!(b.disk.seeks - a.disk.seeks));
        put("storage_busy", num((b.disk.busy_s - a.disk.busy_s) / window));
    }
    put("cpu_s", num(b.cpu - a.cpu));
    put("peak_rss_bytes", json!(peak_rss));
    put("server_reported_storage_bytes", num(b.reported - a.reported));
    put("window_s", num(window));
    // Other work on the machine slows every server; say how busy it was.
    let load = std::fs::read_to_string("/proc/loadavg").ok().and_then(|l| l.split_whitespace().next()?.parse().ok());
    put("machine_load_1m", num(load.unwrap_or(f64::NAN)));
    Ok(row)
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    bytes: u64,
    storage: u64,
    cpu: f64,
    reported: f64,
    disk: crate::disk::DiskStats,
}

/// JSON has no NaN: missing figures are null.
fn num(v: f64) -> Value {
    if v.is_finite() { json!(v) } else { Value::Null }
}

fn drop_caches() {
    let _ = std::process::Command::new("sync").status();
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3\n");
}

/// Runs `circus sim` with the point's parameters and adds `sim_*` figures.
fn add_sim(
    row: &mut Map<String, Value>,
    point: &Point,
    server: Server,
    opts: &ExperimentOptions,
) -> Result<(), BenchError> {
    let policy = if server == Server::Circus { "circus" } else { "sequential" };
    let mut args = point.sim_args(policy);
    if server == Server::Circus
        && let Some(favor) = favor_in(&opts.server_args)
    {
        // The simulator runs the scheduler as the server was told to.
        args.extend(["--favor".into(), favor.to_owned()]);
    }
    args.extend([
        "--disk-positioning".into(),
        format!("{}ms", opts.disk_params.positioning_s * 1e3),
        "--disk-rate".into(),
        format!("{}", opts.disk_params.rate),
        "--seed".into(),
        opts.seed.to_string(),
    ]);
    let out = std::process::Command::new(&opts.circus).args(&args).output().map_err(io_err("running circus sim"))?;
    let sim: Value = serde_json::from_slice(&out.stdout).map_err(|e| {
        BenchError::Setup(format!(
            "circus sim {}: {e}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    })?;
    for (k, as_k) in [
        ("net_bytes_per_s", "sim_net_bytes_per_s"),
        ("disk_bytes_per_s", "sim_storage_bytes_per_s"),
        ("miss_ratio", "sim_miss_ratio"),
        ("amplification", "sim_amplification"),
        ("download_mean_s", "sim_download_mean_s"),
        ("download_ideal_s", "sim_download_ideal_s"),
    ] {
        row.insert(as_k.into(), sim.get(k).cloned().unwrap_or(Value::Null));
    }
    Ok(())
}

/// The `--favor` given to the servers (`--favor=X` or `--favor X`), if any.
fn favor_in(server_args: &[String]) -> Option<&str> {
    server_args.iter().enumerate().find_map(|(i, a)| match a.strip_prefix("--favor") {
        Some(v) if v.starts_with('=') => Some(&v[1..]),
        Some("") => server_args.get(i + 1).map(String::as_str),
        _ => None,
    })
}

/// One line for the progress log.
pub fn summary(row: &Map<String, Value>) -> String {
    let f = |k: &str| row.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN);
    format!(
        "{:<15} net {:6.2} MB/s  storage {:6.2} MB/s  miss {:.3}  download {:.1} s (ideal {:.1} s, p95 {:.1} s, n={})  cpu {:.1} s  rss {:.0} MiB",
        row.get("server").and_then(Value::as_str).unwrap_or("?"),
        f("net_bytes_per_s") / 1e6,
        f("storage_bytes_per_s") / 1e6,
        f("miss_ratio"),
        f("download_mean_s"),
        f("download_ideal_s"),
        f("download_p95_s"),
        f("downloads"),
        f("cpu_s"),
        f("peak_rss_bytes") / (1 << 20) as f64,
    )
}

#[cfg(test)]
mod tests {
    use super::favor_in;

    #[test]
    fn favor_in_finds_the_servers_favor_in_either_form() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(favor_in(&args(&["--cache", "4MiB", "--favor=storage"])), Some("storage"));
        assert_eq!(favor_in(&args(&["--favor", "speed", "--cache", "4MiB"])), Some("speed"));
        assert_eq!(favor_in(&args(&["--cache", "4MiB"])), None);
        assert_eq!(favor_in(&args(&["--favorite=x"])), None);
    }
}
