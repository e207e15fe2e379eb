//! The crowd: plain HTTP/1.1 downloads of one object, all at once, each
//! hashed as it arrives and checked whole against the object's digest. A
//! download cut short resumes where it stopped (Range with If-Range on the
//! first answer's ETag), as download managers do, through the same front,
//! which sends it to a live node.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

/// Tries per download, the first included.
const TRIES: usize = 20;
/// Pause before a resume.
const RESUME_AFTER: Duration = Duration::from_millis(200);
/// Longest wait for a response head or the next body bytes.
const STALL: Duration = Duration::from_secs(30);

/// What a crowd's run came to.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Downloads whose bytes matched the object's digest.
    pub verified: usize,
    /// Why each other download failed.
    pub failures: Vec<String>,
    /// Resumes, over every download.
    pub resumes: usize,
    /// From the start to the last download's end.
    pub seconds: f64,
}

/// Counters the scenario watches while the crowd runs.
#[derive(Debug, Default)]
pub struct Progress {
    pub bytes: AtomicU64,
    pub done: AtomicUsize,
}

/// `clients` downloads of `path` (`size` bytes hashing to `digest`) from
/// `addr`, each started at once.
pub async fn run(
    addr: String,
    path: &'static str,
    clients: usize,
    size: u64,
    digest: blake3::Hash,
    progress: Arc<Progress>,
) -> Outcome {
    let started = Instant::now();
    // Dropped (the run aborted), the set aborts every download.
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..clients {
        let (addr, progress) = (addr.clone(), progress.clone());
        tasks.spawn(async move {
            let out = download(&addr, path, size, digest, &progress).await;
            progress.done.fetch_add(1, Ordering::Relaxed);
            out
        });
    }
    let mut outcome = Outcome::default();
    while let Some(t) = tasks.join_next().await {
        match t {
            Ok(Ok(resumes)) => {
                outcome.verified += 1;
                outcome.resumes += resumes;
            }
            Ok(Err(why)) => outcome.failures.push(why),
            Err(e) => outcome.failures.push(format!("client task: {e}")),
        }
    }
    outcome.seconds = started.elapsed().as_secs_f64();
    outcome
}

/// One download, resumed as often as it takes (up to [`TRIES`]); the
/// number of resumes, or why it failed.
async fn download(
    addr: &str,
    path: &str,
    size: u64,
    digest: blake3::Hash,
    progress: &Progress,
) -> Result<usize, String> {
    let mut hasher = blake3::Hasher::new();
    let (mut at, mut etag) = (0u64, None::<String>);
    let mut last_error = String::new();
    for attempt in 0..TRIES {
        if attempt > 0 {
            tokio::time::sleep(RESUME_AFTER).await;
        }
        match part(addr, path, size, &mut at, &mut etag, &mut hasher, progress).await {
            Ok(()) if at == size => {
                return if hasher.finalize() == digest {
                    Ok(attempt)
                } else {
                    Err(format!("{size} bytes that are not the object (after {attempt} resumes)"))
                };
            }
            Ok(()) => last_error = format!("cut at byte {at}"),
            Err(e) => last_error = e,
        }
    }
    Err(format!("gave up after {TRIES} tries at byte {at}: {last_error}"))
}

/// One request from byte `at` on, its body hashed into `hasher` as it
/// comes; `at` advances past what arrived.
async fn part(
    addr: &str,
    path: &str,
    size: u64,
    at: &mut u64,
    etag: &mut Option<String>,
    hasher: &mut blake3::Hasher,
    progress: &Progress,
) -> Result<(), String> {
    let mut s = TcpStream::connect(addr).await.map_err(|e| format!("connect {addr}: {e}"))?;
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: cluster\r\nConnection: close\r\n");
    if *at > 0 {
        req += &format!("Range: bytes={at}-\r\n");
        if let Some(e) = etag.as_deref() {
            req += &format!("If-Range: {e}\r\n");
        }
    }
    s.write_all(format!("{req}\r\n").as_bytes()).await.map_err(|e| format!("request: {e}"))?;
    let (head, mut rest) = read_head(&mut s).await?;
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse::<u16>().ok()).unwrap_or(0);
    let field = |name: &str| {
        head.lines().skip(1).find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    };
    let expected = if *at == 0 { 200 } else { 206 };
    if status != expected {
        return Err(format!("status {status} to bytes={at}-"));
    }
    if *at > 0 && !field("content-range").is_some_and(|r| r.starts_with(&format!("bytes {at}-"))) {
        return Err(format!("a 206 that does not start at {at}"));
    }
    if etag.is_none() {
        *etag = field("etag");
    }
    let mut buf = vec![0u8; 256 << 10];
    loop {
        if !rest.is_empty() {
            let take = rest.len().min((size - *at) as usize);
            hasher.update(&rest[..take]);
            *at += take as u64;
            progress.bytes.fetch_add(take as u64, Ordering::Relaxed);
            rest.clear();
        }
        if *at == size {
            return Ok(());
        }
        let n = tokio::time::timeout(STALL, s.read(&mut buf))
            .await
            .map_err(|_| format!("no bytes for {STALL:?}"))?
            .map_err(|e| format!("body: {e}"))?;
        if n == 0 {
            return Ok(());
        }
        rest.extend_from_slice(&buf[..n]);
    }
}

/// The response head (status line and fields) and the body bytes read
/// with it.
async fn read_head(s: &mut TcpStream) -> Result<(String, Vec<u8>), String> {
    let mut got = Vec::with_capacity(4096);
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).into_owned();
            return Ok((head, got[end + 4..].to_vec()));
        }
        if got.len() > 64 << 10 {
            return Err("a response head over 64 KiB".into());
        }
        let n = tokio::time::timeout(STALL, s.read(&mut buf))
            .await
            .map_err(|_| format!("no response head for {STALL:?}"))?
            .map_err(|e| format!("head: {e}"))?;
        if n == 0 {
            return Err("closed before a response head".into());
        }
        got.extend_from_slice(&buf[..n]);
    }
}
