//! Lava's hit server while its miss tier fills: the delivery rate of
//! resident small objects with and without a concurrent fill of 1 MiB
//! objects from the origin (Lava measured an 18% drop during a 1 MB
//! transfer), and what a hit, a miss and a revalidation each cost: latency
//! and the tier's CPU per request. circus as a caching tier
//! (`serve --origin`) and nginx with `proxy_cache` in front of the same
//! origin, in the same run.
//!
//! The origin is nginx serving a directory: `/hit/` holds the resident
//! objects, `/fill/` the large ones, each requested once, one every 84 ms:
//! 100 Mbit/s of miss traffic, an origin link's worth (nginx's `limit_rate`
//! cannot pace a 1 MiB response: it lets a second's worth go at once);
//! `/miss/` small objects each requested once; `/reval/` small objects the
//! origin marks `max-age=1`, so each later request revalidates with a
//! conditional request answered 304.

use crate::{BenchError, BenchOptions, Report, Row, io_err, loadgen, procs::ServerProc};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use std::{
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant, SystemTime},
};

const HIT_OBJECTS: usize = 1000;
const SMALL: u64 = 1024;
const FILL_SIZE: u64 = 1 << 20;
/// Large objects per tier: more than a run's fills (about 12 a second).
const FILL_OBJECTS: usize = 400;
/// Requests per kind in the cost table.
const COST_REQUESTS: usize = 2000;
/// Miss traffic: one fill per this interval, 100 Mbit/s of 1 MiB fills.
const FILL_EVERY: Duration = Duration::from_micros(83_886);
const DEPTH: usize = 8;
const ROUND: Duration = Duration::from_secs(2);
const ROUNDS: usize = 5;

/// The origin's directory tree, as [`crate::lava`] does for hits: files
/// last modified a month ago stay fresh by heuristic for the whole run.
fn make_tree(root: &Path, seed: u64) -> Result<(), BenchError> {
    let month_ago = SystemTime::now() - Duration::from_secs(30 * 86_400);
    let kinds: [(&str, usize, u64); 4] = [
        ("hit", HIT_OBJECTS, SMALL),
        ("fill", FILL_OBJECTS, FILL_SIZE),
        ("miss", COST_REQUESTS * 2, SMALL),
        ("reval", COST_REQUESTS, SMALL),
    ];
    for (k, (dir, n, size)) in kinds.into_iter().enumerate() {
        std::fs::create_dir_all(root.join(dir)).map_err(io_err("creating object dir"))?;
        for i in 0..n {
            let path = root.join(dir).join(format!("{i}"));
            crate::make_file(&path, size, seed + (k * 100_000 + i) as u64)?;
            let f = std::fs::File::options().write(true).open(&path).map_err(io_err("opening object"))?;
            f.set_modified(month_ago).map_err(io_err("setting object mtime"))?;
        }
    }
    Ok(())
}

/// One keep-alive HTTP/1.1 connection for sequential requests.
struct Conn {
    send: hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
}

impl Conn {
    async fn open(addr: &str) -> Result<Conn, BenchError> {
        let stream =
            tokio::net::TcpStream::connect(addr).await.map_err(|e| BenchError::Client(format!("{addr}: {e}")))?;
        stream.set_nodelay(true).map_err(io_err("TCP_NODELAY"))?;
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| BenchError::Client(format!("{addr}: {e}")))?;
        tokio::spawn(conn);
        Ok(Conn { send })
    }

    /// GETs `path` and reads the whole body: its length, or an error
    /// unless the status is 200.
    async fn get(&mut self, path: &str) -> Result<u64, BenchError> {
        let fail = |e: hyper::Error| BenchError::Client(format!("GET {path}: {e}"));
        let req = http::Request::get(path).header("host", "bench").body(Empty::new()).expect("request");
        // The connection takes the next request once the last is done.
        self.send.ready().await.map_err(fail)?;
        let res = self.send.send_request(req).await.map_err(fail)?;
        if res.status() != http::StatusCode::OK {
            return Err(BenchError::Client(format!("GET {path}: {}", res.status())));
        }
        Ok(res.into_body().collect().await.map_err(fail)?.to_bytes().len() as u64)
    }
}

/// Fetches `/fill/N`, one every [`FILL_EVERY`] (or back to back if a fill
/// takes longer), N from `next`, until `stop`; counts whole fills in `done`.
async fn fill(
    addr: String,
    next: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
) -> Result<(), BenchError> {
    let mut conn = Conn::open(&addr).await?;
    let mut due = tokio::time::Instant::now();
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep_until(due).await;
        due += FILL_EVERY;
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let n = next.fetch_add(1, Ordering::Relaxed);
        if n >= FILL_OBJECTS as u64 {
            return Err(BenchError::Setup(format!("all {FILL_OBJECTS} fill objects used: raise FILL_OBJECTS")));
        }
        if conn.get(&format!("/fill/{n}")).await? != FILL_SIZE {
            return Err(BenchError::Client(format!("/fill/{n} arrived short")));
        }
        done.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

/// Mean and 95th percentile of `samples`, ms.
fn mean_p95_ms(samples: &mut [Duration]) -> (f64, f64) {
    samples.sort();
    let mean = samples.iter().map(Duration::as_secs_f64).sum::<f64>() / samples.len().max(1) as f64;
    let p95 = samples.get(samples.len() * 95 / 100).map_or(f64::NAN, Duration::as_secs_f64);
    (mean * 1e3, p95 * 1e3)
}

/// A kind of request in the cost table.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Hit,
    Miss,
    Revalidation,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Hit => "hit",
            Kind::Miss => "miss",
            Kind::Revalidation => "revalidation",
        }
    }
}

/// What [`COST_REQUESTS`] sequential requests of `kind` cost `tier`:
/// (mean ms, p95 ms, tier CPU us per request). `tier_index` picks the
/// tier's own half of the `/miss/` objects.
async fn cost(tier: &ServerProc, tier_index: usize, kind: Kind) -> Result<(f64, f64, f64), BenchError> {
    let mut conn = Conn::open(&tier.addr).await?;
    let mut samples = Vec::with_capacity(COST_REQUESTS);
    let cpu = tier.cpu_seconds_fine();
    for i in 0..COST_REQUESTS {
        let path = match kind {
            Kind::Hit => format!("/hit/{}", i % HIT_OBJECTS),
            Kind::Miss => format!("/miss/{}", tier_index * COST_REQUESTS + i),
            Kind::Revalidation => format!("/reval/{i}"),
        };
        let t = Instant::now();
        conn.get(&path).await?;
        samples.push(t.elapsed());
    }
    let cpu_us = (tier.cpu_seconds_fine() - cpu) * 1e6 / COST_REQUESTS as f64;
    let (mean, p95) = mean_p95_ms(&mut samples);
    Ok((mean, p95, cpu_us))
}

/// The hit rate of one round, quiet or while a fill runs beside it:
/// (requests per second, fills completed).
async fn hit_round(
    tier: &ServerProc,
    hits: &[String],
    clients: usize,
    next: &Arc<AtomicU64>,
    filling: bool,
) -> Result<(f64, u64), BenchError> {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let filler = filling.then(|| tokio::spawn(fill(tier.addr.clone(), next.clone(), stop.clone(), done.clone())));
    let load = loadgen::run(&tier.addr, hits, clients, DEPTH, ROUND).await;
    stop.store(true, Ordering::Relaxed);
    if let Some(f) = filler {
        f.await.map_err(|e| BenchError::Client(format!("filler: {e}")))??;
    }
    Ok((load?.req_per_s(), done.load(Ordering::Relaxed)))
}

pub async fn run(opts: &BenchOptions, log: &mut (dyn FnMut(&str) + Send)) -> Result<Report, BenchError> {
    let root = opts.work.join("lava-miss");
    make_tree(&root, opts.seed)?;
    let origin =
        ServerProc::nginx_origin(&root, &opts.work, "location /reval/ { add_header Cache-Control \"max-age=1\"; }")?;
    let cache = opts.cache.max((FILL_OBJECTS as u64 * FILL_SIZE) * 2);
    let mut tier_args =
        vec!["--origin".to_owned(), format!("http://{}/", origin.addr), "--cache".into(), cache.to_string()];
    tier_args.extend(opts.server_args.iter().cloned());
    let tiers = [
        ServerProc::circus_serve(&opts.circus, "circus-origin-tier", &tier_args)?,
        ServerProc::nginx_proxy_cache(&origin.addr, &opts.work, cache)?,
    ];
    let hits: Vec<String> = (0..HIT_OBJECTS).map(|i| format!("/hit/{i}")).collect();
    for tier in &tiers {
        loadgen::run(&tier.addr, &hits, opts.clients, DEPTH, ROUND).await?;
        let mut conn = Conn::open(&tier.addr).await?;
        for i in 0..COST_REQUESTS {
            conn.get(&format!("/reval/{i}")).await?;
        }
    }
    // Alternating rounds: quiet and filling for each tier in turn.
    let nexts: Vec<Arc<AtomicU64>> = tiers.iter().map(|_| Arc::new(AtomicU64::new(0))).collect();
    let mut quiet = vec![Vec::new(); tiers.len()];
    let mut filling = vec![Vec::new(); tiers.len()];
    let mut fills = vec![0u64; tiers.len()];
    for round in 0..ROUNDS {
        for (i, tier) in tiers.iter().enumerate() {
            let (q, _) = hit_round(tier, &hits, opts.clients, &nexts[i], false).await?;
            let (f, n) = hit_round(tier, &hits, opts.clients, &nexts[i], true).await?;
            log(&format!(
                "round {}/{ROUNDS} {}: {q:.0} hits/s quiet, {f:.0} while filling ({n} fills)",
                round + 1,
                tier.name
            ));
            quiet[i].push(q);
            filling[i].push(f);
            fills[i] += n;
        }
    }
    // Revalidations need the entries a second old, and the hit rounds took longer.
    let mut rows = Vec::new();
    let mut verdicts = Vec::new();
    for (i, tier) in tiers.iter().enumerate() {
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        let (q, f) = (mean(&quiet[i]), mean(&filling[i]));
        let drops: Vec<f64> = quiet[i].iter().zip(&filling[i]).map(|(q, f)| 1.0 - f / q).collect();
        let drop = 1.0 - f / q;
        let spread = drops.iter().fold((f64::MAX, f64::MIN), |(lo, hi), &d| (lo.min(d), hi.max(d)));
        let mut row = Row::new(&tier.name)
            .with("hits_per_s_quiet", q)
            .with("hits_per_s_filling", f)
            .with("drop", drop)
            .with("drop_min", spread.0)
            .with("drop_max", spread.1)
            .with("fills_per_s", fills[i] as f64 / (ROUND.as_secs_f64() * ROUNDS as f64));
        for kind in [Kind::Hit, Kind::Miss, Kind::Revalidation] {
            let (mean_ms, p95_ms, cpu_us) = cost(tier, i, kind).await?;
            log(&format!(
                "{} {}: mean {mean_ms:.3} ms, p95 {p95_ms:.3} ms, {cpu_us:.0} us CPU",
                tier.name,
                kind.name()
            ));
            row = row
                .with(&format!("{}_mean_ms", kind.name()), mean_ms)
                .with(&format!("{}_p95_ms", kind.name()), p95_ms)
                .with(&format!("{}_cpu_us", kind.name()), cpu_us);
        }
        verdicts.push(format!(
            "{}: hits drop {:.1}% while filling ({:.1}-{:.1}%; Lava: 18%)",
            tier.name,
            drop * 100.0,
            spread.0 * 100.0,
            spread.1 * 100.0
        ));
        rows.push(row);
    }
    let met = rows[0].get("drop").is_some_and(|d| d <= 0.18);
    verdicts.push(format!("target (circus drop <= 18%): {}", if met { "met" } else { "NOT met" }));
    Ok(Report {
        scenario: "lava-miss".into(),
        setup: format!(
            "origin nginx on loopback; fills of {FILL_SIZE}-byte objects one every {FILL_EVERY:?} (100 Mbit/s); \
             {HIT_OBJECTS} resident {SMALL}-byte objects, {} keep-alive connections x {DEPTH} pipelined requests, \
             {ROUNDS} alternating rounds of {}s quiet and {}s filling per tier; cost table: {COST_REQUESTS} sequential \
             requests per kind on one connection; tiers' cache {cache} bytes; load generators on the same 2 cores",
            opts.clients,
            ROUND.as_secs(),
            ROUND.as_secs(),
        ),
        verdict: verdicts.join("; "),
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_and_p95_of_samples() {
        let mut s: Vec<Duration> = (1..=100).rev().map(Duration::from_millis).collect();
        let (mean, p95) = mean_p95_ms(&mut s);
        assert!((mean - 50.5).abs() < 1e-9);
        assert_eq!(p95, 96.0);
    }
}
