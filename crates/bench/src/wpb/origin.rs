//! The WPB origin: answers `/w/ID` after a fixed delay, with a body whose
//! size is fixed per object id by the seed, Range support, and a counter of
//! the body bytes it sent (the byte hit ratio's denominator side).

use crate::{BenchError, io_err};
use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::{body::Incoming, service::service_fn};
use hyper_util::rt::TokioIo;
use rand::{Rng, SeedableRng};
use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

pub const DELAY: Duration = Duration::from_millis(50);

/// Object `id`'s size: uniform 0–40 KiB, and with `big` 1% at 1 MiB
/// (WPB's mix).
pub fn size_of(id: u64, seed: u64, big: bool) -> usize {
    let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let large = r.random_bool(0.01);
    if large && big { 1 << 20 } else { r.random_range(0..=40 * 1024) }
}

/// Starts the origin on `host` (port 0); returns HOST:PORT.
pub async fn start(host: &str, seed: u64, big: bool, sent: Arc<AtomicU64>) -> Result<String, BenchError> {
    let listener = tokio::net::TcpListener::bind(format!("{host}:0"))
        .await
        .map_err(io_err(format!("binding the origin on {host}")))?;
    let addr = listener.local_addr().map_err(io_err("origin address"))?.to_string();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let sent = sent.clone();
            let service = service_fn(move |req: Request<Incoming>| {
                let sent = sent.clone();
                async move { Ok::<_, std::convert::Infallible>(answer(&req, seed, big, &sent).await) }
            });
            tokio::spawn(hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service));
        }
    });
    Ok(addr)
}

async fn answer(req: &Request<Incoming>, seed: u64, big: bool, sent: &AtomicU64) -> Response<Full<Bytes>> {
    tokio::time::sleep(DELAY).await;
    let Some(id) = req.uri().path().strip_prefix("/w/").and_then(|s| s.parse::<u64>().ok()) else {
        return Response::builder().status(StatusCode::NOT_FOUND).body(Full::default()).expect("response");
    };
    let len = size_of(id, seed, big);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_fixed_per_id_and_the_modem_mix_has_no_large_objects() {
        let fast: Vec<usize> = (0..2000).map(|id| size_of(id, 1, true)).collect();
        let modem: Vec<usize> = (0..2000).map(|id| size_of(id, 1, false)).collect();
        assert_eq!(fast, (0..2000).map(|id| size_of(id, 1, true)).collect::<Vec<_>>(), "deterministic");
        let large = fast.iter().filter(|&&s| s == 1 << 20).count();
        assert!((5..=40).contains(&large), "about 1% at 1 MiB: {large}");
        assert!(modem.iter().all(|&s| s <= 40 * 1024));
        // Small objects keep their sizes; only the large ones change.
        for (f, m) in fast.iter().zip(&modem) {
            assert!(f == m || *f == 1 << 20);
        }
    }
}
