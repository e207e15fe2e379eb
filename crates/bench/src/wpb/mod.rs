//! A Wisconsin Proxy Benchmark-style run of the origin tier: an origin that
//! answers after a fixed delay, objects of 0–40 KiB with 1% at 1 MiB, and
//! closed-loop clients. Phase 1 asks only for new objects (all misses);
//! phase 2 repeats a recently requested object with a configured
//! probability (recency-weighted: the k-th most recent with weight 1/k),
//! else a new one. Per phase: latency, hit ratio, byte hit ratio (bytes not
//! fetched from the origin over bytes served), throughput and server CPU,
//! for the circus tier and for Varnish (Debian's) in front of the same
//! origin, each starting cold.

use crate::{BenchError, BenchOptions, Report, Row, io_err, procs::ServerProc};
use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Empty, Full};
use hyper::{body::Incoming, service::service_fn};
use hyper_util::{
    client::legacy::Client,
    rt::{TokioExecutor, TokioIo},
};
use rand::{Rng, SeedableRng};
use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

const ORIGIN_DELAY: Duration = Duration::from_millis(50);
const PER_CLIENT: usize = 40;
const REPEAT: f64 = 0.5;
const HISTORY: usize = 100;

/// Object `id`'s size: uniform 0–40 KiB, 1% at 1 MiB (WPB's mix).
fn size_of(id: u64, seed: u64) -> usize {
    let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    if r.random_bool(0.01) { 1 << 20 } else { r.random_range(0..=40 * 1024) }
}

/// The delayed origin: `/w/ID` with Range support; counts body bytes.
async fn origin(seed: u64, sent: Arc<AtomicU64>) -> Result<String, BenchError> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(io_err("binding the origin"))?;
    let addr = listener.local_addr().map_err(io_err("origin address"))?.to_string();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let sent = sent.clone();
            let service = service_fn(move |req: Request<Incoming>| {
                let sent = sent.clone();
                async move { Ok::<_, std::convert::Infallible>(answer(&req, seed, &sent).await) }
            });
            tokio::spawn(hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service));
        }
    });
    Ok(addr)
}

async fn answer(req: &Request<Incoming>, seed: u64, sent: &AtomicU64) -> Response<Full<Bytes>> {
    tokio::time::sleep(ORIGIN_DELAY).await;
    let Some(id) = req.uri().path().strip_prefix("/w/").and_then(|s| s.parse::<u64>().ok()) else {
        return Response::builder().status(StatusCode::NOT_FOUND).body(Full::default()).expect("response");
    };
    let len = size_of(id, seed);
    let body: Vec<u8> = (0..len).map(|i| (i as u64 ^ id) as u8).collect();
    let range = req.headers().get(header::RANGE).and_then(|v| {
        v.to_str()
            .ok()?
            .strip_prefix("bytes=")?
            .split_once('-')
            .map(|(a, b)| (a.parse::<usize>().ok(), b.parse::<usize>().ok()))
    });
    let b = Response::builder().header(header::CACHE_CONTROL, "max-age=3600").header(header::ETAG, format!("\"{id}\""));
    let res = match range {
        Some((Some(a), b_end)) if a < len => {
            let e = b_end.unwrap_or(len - 1).min(len - 1);
            sent.fetch_add((e + 1 - a) as u64, Ordering::Relaxed);
            b.status(StatusCode::PARTIAL_CONTENT)
                .header(header::CONTENT_RANGE, format!("bytes {a}-{e}/{len}"))
                .body(Full::new(Bytes::copy_from_slice(&body[a..=e])))
        }
        Some(_) => b
            .status(StatusCode::RANGE_NOT_SATISFIABLE)
            .header(header::CONTENT_RANGE, format!("bytes */{len}"))
            .body(Full::default()),
        None => {
            sent.fetch_add(len as u64, Ordering::Relaxed);
            b.body(Full::new(Bytes::from(body)))
        }
    };
    res.expect("response")
}

#[derive(Debug, Default)]
struct Phase {
    latencies: Vec<f64>,
    bytes: u64,
    seconds: f64,
}

/// `clients` closed-loop clients, `PER_CLIENT` requests each; client `c`'s
/// new objects are `base + c * 1_000_000 + n`.
async fn phase(addr: &str, clients: usize, repeat: f64, base: u64, seed: u64) -> Result<Phase, BenchError> {
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..clients {
        let (client, addr) = (client.clone(), addr.to_owned());
        tasks.spawn(async move {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed + c as u64);
            let mut history: Vec<u64> = Vec::new();
            let (mut lat, mut bytes) = (Vec::new(), 0u64);
            for n in 0..PER_CLIENT as u64 {
                let id = if !history.is_empty() && rng.random_bool(repeat) {
                    // k-th most recent with weight 1/k.
                    let weights: f64 = (1..=history.len()).map(|k| 1.0 / k as f64).sum();
                    let mut x = rng.random_range(0.0..weights);
                    let mut pick = history[history.len() - 1];
                    for k in 1..=history.len() {
                        x -= 1.0 / k as f64;
                        if x <= 0.0 {
                            pick = history[history.len() - k];
                            break;
                        }
                    }
                    pick
                } else {
                    base + c as u64 * 1_000_000 + n
                };
                history.push(id);
                if history.len() > HISTORY {
                    history.remove(0);
                }
                let t = Instant::now();
                let uri = format!("http://{addr}/w/{id}").parse().map_err(|e| BenchError::Client(format!("{e}")))?;
                let res = client.get(uri).await.map_err(|e| BenchError::Client(format!("tier: {e}")))?;
                if res.status() != StatusCode::OK {
                    return Err(BenchError::Client(format!("tier answered {}", res.status())));
                }
                let body =
                    res.into_body().collect().await.map_err(|e| BenchError::Client(format!("tier body: {e}")))?;
                bytes += body.to_bytes().len() as u64;
                lat.push(t.elapsed().as_secs_f64());
            }
            Ok::<_, BenchError>((lat, bytes))
        });
    }
    let mut out = Phase::default();
    while let Some(j) = tasks.join_next().await {
        let (lat, bytes) = j.map_err(|e| BenchError::Client(format!("client task: {e}")))??;
        out.latencies.extend(lat);
        out.bytes += bytes;
    }
    out.seconds = started.elapsed().as_secs_f64();
    Ok(out)
}

pub async fn run(opts: &BenchOptions, log: &mut (dyn FnMut(&str) + Send)) -> Result<Report, BenchError> {
    let sent = Arc::new(AtomicU64::new(0));
    // Both caches get room for both phases' objects (about 170 MB): Varnish
    // aborts deliveries mid-body when its malloc store cannot make room
    // (seen with 64 MiB), which would measure that, not caching.
    let cache = opts.cache.max(256 << 20);
    let origin_addr = origin(opts.seed, sent.clone()).await?;
    let mut args = vec!["--origin".to_owned(), format!("http://{origin_addr}/"), "--cache".into(), cache.to_string()];
    args.extend(opts.server_args.iter().cloned());
    let tier = ServerProc::circus_serve(&opts.circus, "circus-origin-tier", &args)?;
    // The peer starts cold too and sees the same object ids and sizes.
    let varnish = ServerProc::varnish(&origin_addr, &opts.work, cache)?;
    let mut rows = Vec::new();
    for server in [&tier, &varnish] {
        for (name, repeat, base) in [("phase1-cold", 0.0, 0u64), ("phase2-repeats", REPEAT, 1u64 << 40)] {
            let hits = tier.metric("circus_origin_hits_total").unwrap_or(0.0);
            let origin_bytes = sent.load(Ordering::Relaxed);
            let cpu = server.cpu_seconds();
            log(&format!("{} {name}: {} clients x {PER_CLIENT} requests", server.name, opts.clients));
            // Phase 2's new objects are new; its repeats are of its own history.
            let mut p = phase(&server.addr, opts.clients, repeat, base, opts.seed).await?;
            let requests = p.latencies.len() as f64;
            p.latencies.sort_by(f64::total_cmp);
            let mean = p.latencies.iter().sum::<f64>() / requests;
            let sd = (p.latencies.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / requests).sqrt();
            let pct = |q: f64| p.latencies[((requests - 1.0) * q) as usize];
            let fetched = sent.load(Ordering::Relaxed) - origin_bytes;
            let mut row = Row::new(format!("{} {name}", server.name))
                .with("requests", requests)
                .with("latency_mean_s", mean)
                .with("latency_sd_s", sd)
                .with("latency_p50_s", pct(0.5))
                .with("latency_p99_s", pct(0.99));
            if std::ptr::eq(server, &tier) {
                // Varnish's hits are not counted here; its byte hit ratio is.
                row = row.with("hit_ratio", (tier.metric("circus_origin_hits_total").unwrap_or(0.0) - hits) / requests);
            }
            let row = row
                .with("byte_hit_ratio", 1.0 - fetched as f64 / p.bytes.max(1) as f64)
                .with("throughput_bytes_per_s", p.bytes as f64 / p.seconds)
                .with("server_cpu_s", server.cpu_seconds() - cpu);
            log(&format!("  mean latency {mean:.3} s, byte hit ratio {:.2}", row.get("byte_hit_ratio").unwrap_or(0.0)));
            rows.push(row);
        }
    }
    Ok(Report {
        scenario: "wpb".into(),
        setup: format!(
            "{} closed-loop clients x {PER_CLIENT} requests per phase; origin delay {} ms; sizes uniform 0-40 KiB, 1% 1 MiB; phase 2 repeats a recent object with p = {REPEAT} (weight 1/k for the k-th most recent); cache {} bytes",
            opts.clients,
            ORIGIN_DELAY.as_millis(),
            cache
        ),
        verdict: format!(
            "phase 2 byte hit ratio: circus {:.2}, varnish {:.2}; mean latency cold / repeats: circus {:.3} / {:.3} s, varnish {:.3} / {:.3} s (no target set)",
            rows[1].get("byte_hit_ratio").unwrap_or(0.0),
            rows[3].get("byte_hit_ratio").unwrap_or(0.0),
            rows[0].get("latency_mean_s").unwrap_or(0.0),
            rows[1].get("latency_mean_s").unwrap_or(0.0),
            rows[2].get("latency_mean_s").unwrap_or(0.0),
            rows[3].get("latency_mean_s").unwrap_or(0.0)
        ),
        rows,
    })
}
