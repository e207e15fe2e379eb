//! A lean native client for load generation: it decodes and verifies every
//! block like `circus get`, but discards the bytes instead of writing them,
//! so fifty concurrent 1 GiB downloads do not turn into 50 GiB of disk
//! writes on the measuring machine.

use bytes::{Bytes, BytesMut};
use circus_proto::{CONTENT_TYPE, Decoder, Frame};
use http::Request;
use http_body_util::{BodyExt, Empty};
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector},
    rt::TokioExecutor,
};
use std::{
    net::IpAddr,
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

#[derive(Debug, Clone, Copy, Default)]
pub struct Outcome {
    pub bytes: u64,
    pub blocks: u64,
    pub seconds: f64,
}

/// How a download connects and what it reports while it runs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options<'a> {
    /// Client-side throttling, bytes per second (when links are not emulated).
    pub rate: Option<f64>,
    /// Source address (one per emulated client link).
    pub local: Option<IpAddr>,
    /// Every body byte received is added here as it arrives.
    pub counter: Option<&'a AtomicU64>,
    /// A plain HTTP GET (any server) instead of the native block stream.
    pub plain: bool,
}

/// Downloads `url` natively at up to `rate` bytes/s; fails on any block
/// that does not verify or a stream that ends before END.
pub async fn download(url: &str, rate: Option<f64>) -> Result<Outcome, String> {
    download_with(url, Options { rate, ..Options::default() }).await
}

/// Receive buffer of a throttled download (the kernel doubles it).
const THROTTLED_RCVBUF: usize = 128 * 1024;

/// [`download`] with a source address, a live byte counter, or plain HTTP.
pub async fn download_with(url: &str, opts: Options<'_>) -> Result<Outcome, String> {
    let mut connector = HttpConnector::new();
    connector.set_local_address(opts.local);
    connector.set_nodelay(true);
    if opts.rate.is_some() {
        // A throttled reader stands in for a slow link. With the kernel's
        // receive-buffer autotuning, loopback would fill megabytes of it at
        // once and the server would see a fast client that then stalls;
        // a link that slow never takes a burst like that. A fixed small
        // buffer keeps what the server sees close to the reader's pace.
        connector.set_recv_buffer_size(Some(THROTTLED_RCVBUF));
    }
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build(connector);
    let mut req = Request::get(url);
    if !opts.plain {
        req = req.header("accept", CONTENT_TYPE);
    }
    let req = req.body(Empty::new()).map_err(|e| e.to_string())?;
    let rate = opts.rate;
    let start = Instant::now();
    let res = client.request(req).await.map_err(|e| e.to_string())?;
    if !res.status().is_success() {
        return Err(format!("status {}", res.status()));
    }
    // A server may answer a native request with the plain file (one that
    // does not speak circus, or a circus origin tier that has not learnt
    // the object's hash tree yet): the protocol says to take it as such.
    let is_native =
        res.headers().get(http::header::CONTENT_TYPE).is_some_and(|t| t.as_bytes() == CONTENT_TYPE.as_bytes());
    let plain = opts.plain || !is_native;
    let mut body = res.into_body();
    let (mut decoder, mut buf, mut out) = (Decoder::new(), BytesMut::new(), Outcome::default());
    let mut manifest = None;
    while let Some(frame) = body.frame().await {
        let chunk = frame.map_err(|e| e.to_string())?.into_data().unwrap_or_default();
        out.bytes += chunk.len() as u64;
        if let Some(c) = opts.counter {
            c.fetch_add(chunk.len() as u64, Ordering::Relaxed);
        }
        if plain {
            throttle(rate, out.bytes, start).await;
            continue;
        }
        buf.extend_from_slice(&chunk);
        while let Some(f) = decoder.decode(&mut buf).map_err(|e| e.to_string())? {
            match f {
                Frame::Manifest(m) => manifest = Some(m),
                Frame::Block(b) => {
                    let m = manifest.as_ref().ok_or("block before manifest")?;
                    m.check_block(b).map_err(|e| e.to_string())?;
                    out.blocks += 1;
                }
                Frame::End => {
                    out.seconds = start.elapsed().as_secs_f64();
                    return Ok(out);
                }
                Frame::Error { code, message } => return Err(format!("server error {code}: {message}")),
                Frame::Unknown { .. } => {}
            }
        }
        throttle(rate, out.bytes, start).await;
    }
    if plain {
        out.seconds = start.elapsed().as_secs_f64();
        return Ok(out);
    }
    Err("stream ended before END".into())
}

/// Sleeps until the bytes so far fit the rate: a token bucket with the
/// whole download as its window.
async fn throttle(rate: Option<f64>, bytes: u64, start: Instant) {
    if let Some(rate) = rate {
        let due = Duration::from_secs_f64(bytes as f64 / rate);
        let elapsed = start.elapsed();
        if due > elapsed {
            tokio::time::sleep(due - elapsed).await;
        }
    }
}
