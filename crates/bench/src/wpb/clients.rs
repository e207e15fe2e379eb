//! WPB's closed-loop clients: each asks for an object, reads it whole, and
//! asks for the next, on its own keep-alive connection (one per client, as
//! a browser behind a modem would), from its own source address when the
//! links are emulated in the kernel, or pacing its reads when they are not.

use crate::BenchError;
use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector},
    rt::TokioExecutor,
};
use rand::{Rng, SeedableRng};
use std::{
    net::IpAddr,
    time::{Duration, Instant},
};

/// How many recent objects a client may repeat.
const HISTORY: usize = 100;
/// A request that takes longer failed (40 KiB at 28.8 kbit/s takes 11 s).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// One phase's load.
#[derive(Debug, Clone)]
pub struct Load {
    pub addr: String,
    pub clients: usize,
    pub per_client: usize,
    /// Probability that a request repeats a recent object.
    pub repeat: f64,
    /// Client `c`'s `n`-th new object is `base + c * 1_000_000 + n`.
    pub base: u64,
    pub seed: u64,
    /// Source address of client `c`, or none (loopback).
    pub local: Option<Vec<IpAddr>>,
    /// Client-side pacing, bytes per second (links not emulated).
    pub pace: Option<f64>,
}

/// What one phase measured, over every client.
#[derive(Debug, Default)]
pub struct Phase {
    /// Request to last body byte, seconds.
    pub latencies: Vec<f64>,
    /// Request to response head, for new objects and for repeats.
    pub ttfb_new: Vec<f64>,
    pub ttfb_repeat: Vec<f64>,
    pub bytes: u64,
    pub seconds: f64,
    /// Responses a peer marked as hits (X-Cache, X-Varnish), see [`header_hit`].
    pub header_hits: u64,
    /// Requests sent again after their connection failed before an answer.
    pub retries: u64,
}

/// Whether a response says it was a cache hit: Squid's `X-Cache: HIT from
/// ...`, or Varnish's `X-Varnish` carrying two transaction ids (this
/// request's and the one that stored the object). None when neither is set.
pub fn header_hit(h: &HeaderMap) -> Option<bool> {
    if let Some(v) = h.get("x-cache") {
        return Some(v.to_str().is_ok_and(|s| s.starts_with("HIT")));
    }
    h.get("x-varnish").map(|v| v.to_str().is_ok_and(|s| s.split_whitespace().count() == 2))
}

/// The k-th most recent entry of `history`, with weight 1/k.
fn recent(history: &[u64], rng: &mut impl Rng) -> u64 {
    let weights: f64 = (1..=history.len()).map(|k| 1.0 / k as f64).sum();
    let mut x = rng.random_range(0.0..weights);
    for k in 1..=history.len() {
        x -= 1.0 / k as f64;
        if x <= 0.0 {
            return history[history.len() - k];
        }
    }
    history[0]
}

/// Runs `load` to completion: every client makes `per_client` requests.
pub async fn run(load: &Load) -> Result<Phase, BenchError> {
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..load.clients {
        let load = load.clone();
        tasks.spawn(async move { client(&load, c).await });
    }
    let mut out = Phase::default();
    while let Some(j) = tasks.join_next().await {
        let p = j.map_err(|e| BenchError::Client(format!("client task: {e}")))??;
        out.latencies.extend(p.latencies);
        out.ttfb_new.extend(p.ttfb_new);
        out.ttfb_repeat.extend(p.ttfb_repeat);
        out.bytes += p.bytes;
        out.header_hits += p.header_hits;
        out.retries += p.retries;
    }
    out.seconds = started.elapsed().as_secs_f64();
    Ok(out)
}

async fn client(load: &Load, c: usize) -> Result<Phase, BenchError> {
    let mut connector = HttpConnector::new();
    connector.set_local_address(load.local.as_ref().map(|l| l[c]));
    connector.set_nodelay(true);
    let http: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build(connector);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(load.seed + c as u64);
    let mut history: Vec<u64> = Vec::new();
    let mut out = Phase::default();
    for n in 0..load.per_client as u64 {
        let repeat = !history.is_empty() && rng.random_bool(load.repeat);
        let id = if repeat { recent(&history, &mut rng) } else { load.base + c as u64 * 1_000_000 + n };
        history.push(id);
        if history.len() > HISTORY {
            history.remove(0);
        }
        let t = Instant::now();
        let uri: http::Uri =
            format!("http://{}/w/{id}", load.addr).parse().map_err(|e| BenchError::Client(format!("{e}")))?;
        let get = async {
            // As a browser does (RFC 9112 9.3.1), a GET that failed before
            // any answer, typically on a keep-alive connection the server
            // had closed, is sent once more on a new connection.
            let res = match http.get(uri.clone()).await {
                Ok(res) => res,
                Err(_) => {
                    out.retries += 1;
                    http.get(uri).await.map_err(|e| format!("request (retried): {e}"))?
                }
            };
            let ttfb = t.elapsed().as_secs_f64();
            if res.status() != StatusCode::OK {
                return Err(format!("answered {}", res.status()));
            }
            let hit = header_hit(res.headers()) == Some(true);
            let mut body = res.into_body();
            let mut got = 0u64;
            while let Some(frame) = body.frame().await {
                let data = frame.map_err(|e| format!("body: {e}"))?.into_data().unwrap_or_default();
                got += data.len() as u64;
                if let Some(rate) = load.pace {
                    let due = Duration::from_secs_f64(got as f64 / rate);
                    tokio::time::sleep(due.saturating_sub(t.elapsed())).await;
                }
            }
            Ok::<_, String>((ttfb, hit, got))
        };
        let (ttfb, hit, got) = tokio::time::timeout(REQUEST_TIMEOUT, get)
            .await
            .map_err(|_| {
                BenchError::Client(format!("{} /w/{id}: no whole answer within {REQUEST_TIMEOUT:?}", load.addr))
            })?
            .map_err(|e| BenchError::Client(format!("{} /w/{id}: {e}", load.addr)))?;
        out.latencies.push(t.elapsed().as_secs_f64());
        if repeat { &mut out.ttfb_repeat } else { &mut out.ttfb_new }.push(ttfb);
        out.bytes += got;
        out.header_hits += u64::from(hit);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hits_are_read_from_squid_and_varnish_headers() {
        let cases = [
            ("squid hit", "x-cache", "HIT from vm", Some(true)),
            ("squid miss", "x-cache", "MISS from vm", Some(false)),
            ("varnish hit", "x-varnish", "32770 3", Some(true)),
            ("varnish miss", "x-varnish", "32770", Some(false)),
            ("neither", "age", "3", None),
        ];
        for (name, key, value, want) in cases {
            let mut h = HeaderMap::new();
            h.insert(key, value.parse().unwrap());
            assert_eq!(header_hit(&h), want, "{name}");
        }
    }

    #[test]
    fn repeats_favour_the_most_recent_objects() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let history: Vec<u64> = (0..10).collect();
        let picks: Vec<u64> = (0..10_000).map(|_| recent(&history, &mut rng)).collect();
        let count = |id| picks.iter().filter(|&&p| p == id).count();
        // Weight 1/k: the newest (k = 1) about ten times the oldest (k = 10).
        assert!(count(9) > 5 * count(0), "{} vs {}", count(9), count(0));
        assert!(picks.iter().all(|p| history.contains(p)));
    }
}
