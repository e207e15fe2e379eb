//! What a well-behaved user sees while the server is under attack: one
//! plain download of the large file after another, and a stream of small
//! requests on a keep-alive connection, timed one by one.

use std::time::{Duration, Instant};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

/// What the user saw over one measuring window.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    /// Body bytes of the large file received, per second.
    pub download_bytes_per_s: f64,
    /// Small requests answered 200, and their latencies in seconds.
    pub small_ok: usize,
    pub small_latencies: Vec<f64>,
    /// Small requests that failed (an error status, a dropped connection,
    /// or no answer within a second).
    pub small_failed: usize,
}

impl Seen {
    /// The `q` quantile of the small requests' latencies, failures counted
    /// as a second each (so failing fast cannot look good).
    pub fn small_quantile(&self, q: f64) -> f64 {
        let mut all = self.small_latencies.clone();
        all.extend(std::iter::repeat_n(1.0, self.small_failed));
        if all.is_empty() {
            return f64::NAN;
        }
        all.sort_by(f64::total_cmp);
        all[((all.len() - 1) as f64 * q).round() as usize]
    }
}

/// Runs the download loop and the small-request stream together for
/// `window`.
pub async fn measure(addr: &str, big: &str, small: &str, window: Duration) -> Seen {
    let deadline = Instant::now() + window;
    let (bytes, mut seen) = tokio::join!(download_until(addr, big, deadline), small_until(addr, small, deadline));
    seen.download_bytes_per_s = bytes as f64 / window.as_secs_f64();
    seen
}

/// Downloads `path` again and again until `deadline`; body bytes received.
async fn download_until(addr: &str, path: &str, deadline: Instant) -> u64 {
    let mut total = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    while Instant::now() < deadline {
        let Ok(mut c) = TcpStream::connect(addr).await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let req = format!("GET {path} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n");
        if c.write_all(req.as_bytes()).await.is_err() {
            continue;
        }
        let mut head_done = false;
        let mut head = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let n = match tokio::time::timeout(left, c.read(&mut buf)).await {
                Ok(Ok(n)) if n > 0 => n,
                _ => break,
            };
            if head_done {
                total += n as u64;
            } else {
                head.extend_from_slice(&buf[..n]);
                if let Some(p) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                    if !head.starts_with(b"HTTP/1.1 200") {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        break;
                    }
                    head_done = true;
                    total += (head.len() - p - 4) as u64;
                }
            }
        }
    }
    total
}

/// Requests `path` on a keep-alive connection every 10 ms until
/// `deadline`, timing each.
async fn small_until(addr: &str, path: &str, deadline: Instant) -> Seen {
    let mut seen = Seen::default();
    let mut conn: Option<TcpStream> = None;
    let req = format!("GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n");
    while Instant::now() < deadline {
        let started = Instant::now();
        let answer = tokio::time::timeout(Duration::from_secs(1), async {
            let c = match conn.as_mut() {
                Some(c) => c,
                None => conn.insert(TcpStream::connect(addr).await?),
            };
            c.write_all(req.as_bytes()).await?;
            read_small_response(c).await
        })
        .await;
        match answer {
            Ok(Ok(200)) => {
                seen.small_ok += 1;
                seen.small_latencies.push(started.elapsed().as_secs_f64());
            }
            _ => {
                seen.small_failed += 1;
                conn = None;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    seen
}

/// Reads one response with a Content-Length body; its status.
async fn read_small_response(c: &mut TcpStream) -> std::io::Result<u16> {
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = c.read(&mut buf).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        got.extend_from_slice(&buf[..n]);
        let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else { continue };
        let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        if got.len() >= end + 4 + len {
            let status = head.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
            return Ok(status);
        }
    }
}
