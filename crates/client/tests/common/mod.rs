//! Test fixtures on real sockets at 127.0.0.1: an in-process circus server
//! over a temporary directory, a TCP proxy that cuts or corrupts the first
//! connection, a minimal plain HTTP server that knows nothing of circus, and
//! a scripted raw server for hostile answers (`raw`).

#![allow(dead_code)] // each test file uses a different part

pub mod raw;

use bytes::Bytes;
use circus_server::{ServeConfig, Server};
use http::{Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::{body::Incoming, service::service_fn};
use hyper_util::rt::TokioIo;
use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

pub const BLOCK: usize = 64 * 1024;

/// Bytes planted in `marked.bin`, in the middle of block 5, for the proxy to
/// find and corrupt.
pub const MARKER: &[u8] = b"<<circus-corrupt-me-please>>";

/// Deterministic pseudo-random bytes (xorshift), so failures reproduce.
pub fn data(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 32) as u8
        })
        .collect()
}

/// A circus server over a temporary directory.
pub struct Fixture {
    pub dir: tempfile::TempDir,
    /// Where downloads go.
    pub out: tempfile::TempDir,
    pub addr: SocketAddr,
}

impl Fixture {
    /// Serves `big.bin` (3 MiB and a short last block), `one.bin` (1 MiB),
    /// `marked.bin` (2 MiB holding [`MARKER`]) and `empty`.
    pub async fn start() -> Fixture {
        Self::with_block(BLOCK as u32).await
    }

    /// [`Fixture::start`] with the server cutting files into `block_size`
    /// blocks.
    pub async fn with_block(block_size: u32) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("big.bin"), data(3 * 1024 * 1024 + 123, 1)).unwrap();
        std::fs::write(dir.path().join("one.bin"), data(1024 * 1024, 2)).unwrap();
        let mut marked = data(2 * 1024 * 1024, 3);
        let at = 5 * BLOCK + 1000;
        marked[at..at + MARKER.len()].copy_from_slice(MARKER);
        std::fs::write(dir.path().join("marked.bin"), marked).unwrap();
        std::fs::write(dir.path().join("empty"), b"").unwrap();
        let mut cfg = ServeConfig::new(dir.path().to_owned());
        cfg.listen = vec!["127.0.0.1:0".parse().unwrap()];
        cfg.admin_listen = None;
        cfg.sched.block_size = block_size;
        let server = Server::bind(cfg).await.unwrap();
        let addr = server.local_addr();
        tokio::spawn(server.run(std::future::pending()));
        Fixture { dir, out: tempfile::tempdir().unwrap(), addr }
    }

    pub fn url(&self, name: &str) -> String {
        format!("http://{}/{name}", self.addr)
    }

    pub fn served(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.dir.path().join(name)).unwrap()
    }

    pub fn out(&self, name: &str) -> PathBuf {
        self.out.path().join(name)
    }
}

/// The files a download leaves beside `output`, if any.
pub fn litter(output: &Path) -> Vec<PathBuf> {
    [".circus-part", ".circus-state", ".circus-state.tmp"]
        .iter()
        .map(|s| {
            let mut p = output.as_os_str().to_owned();
            p.push(s);
            PathBuf::from(p)
        })
        .filter(|p| p.exists())
        .collect()
}

/// What the proxy does to the first connection through it; later ones pass
/// through untouched.
#[derive(Debug, Clone, Default)]
pub struct Sabotage {
    /// Close both sides after this many bytes from the server.
    pub cut_after: Option<u64>,
    /// Flip one bit of the first occurrence of these bytes from the server.
    pub flip: Option<&'static [u8]>,
}

/// One proxied connection, as seen so far.
#[derive(Debug, Default)]
pub struct Conn {
    /// The start of what the client sent (its first request head).
    pub request: Mutex<String>,
    /// Bytes forwarded from the server to the client.
    pub down: AtomicU64,
}

impl Conn {
    pub fn request(&self) -> String {
        self.request.lock().unwrap().to_ascii_lowercase()
    }
}

pub struct Proxy {
    pub addr: SocketAddr,
    pub conns: Arc<Mutex<Vec<Arc<Conn>>>>,
}

impl Proxy {
    pub async fn start(target: SocketAddr, sabotage: Sabotage) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let conns: Arc<Mutex<Vec<Arc<Conn>>>> = Arc::default();
        let list = conns.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let conn = Arc::new(Conn::default());
                let first = {
                    let mut l = list.lock().unwrap();
                    l.push(conn.clone());
                    l.len() == 1
                };
                let plan = if first { sabotage.clone() } else { Sabotage::default() };
                tokio::spawn(relay(client, target, conn, plan));
            }
        });
        Proxy { addr, conns }
    }

    pub fn url(&self, name: &str) -> String {
        format!("http://{}/{name}", self.addr)
    }

    pub fn conns(&self) -> Vec<Arc<Conn>> {
        self.conns.lock().unwrap().clone()
    }
}

async fn relay(client: TcpStream, target: SocketAddr, conn: Arc<Conn>, plan: Sabotage) {
    let Ok(server) = TcpStream::connect(target).await else { return };
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let up = {
        let conn = conn.clone();
        async move {
            let mut buf = vec![0u8; 16 * 1024];
            while let Ok(n @ 1..) = cr.read(&mut buf).await {
                {
                    let mut req = conn.request.lock().unwrap();
                    // Enough for a request head at any server's limit.
                    if req.len() < 64 * 1024 {
                        req.push_str(&String::from_utf8_lossy(&buf[..n]));
                    }
                }
                if sw.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        }
    };
    let down = async move {
        let mut buf = vec![0u8; 64 * 1024];
        let mut tail: Vec<u8> = Vec::new(); // the last bytes seen, for a marker split across reads
        let mut flip = plan.flip;
        while let Ok(n @ 1..) = sr.read(&mut buf).await {
            let mut n = n;
            if let Some(marker) = flip {
                let mut window = std::mem::take(&mut tail);
                window.extend_from_slice(&buf[..n]);
                if let Some(pos) = window.windows(marker.len()).position(|w| w == marker) {
                    // The match's last byte is always in this read.
                    let last = pos + marker.len() - 1 - (window.len() - n);
                    buf[last] ^= 0x01;
                    flip = None;
                }
                tail = window[window.len().saturating_sub(marker.len())..].to_vec();
            }
            let sent = conn.down.load(Ordering::Relaxed);
            if let Some(cut) = plan.cut_after
                && sent + n as u64 >= cut
            {
                n = (cut - sent) as usize;
                let _ = cw.write_all(&buf[..n]).await;
                conn.down.fetch_add(n as u64, Ordering::Relaxed);
                return; // dropping both halves closes the connection
            }
            if cw.write_all(&buf[..n]).await.is_err() {
                return;
            }
            conn.down.fetch_add(n as u64, Ordering::Relaxed);
        }
    };
    tokio::select! {
        () = up => {}
        () = down => {}
    }
}

/// A plain HTTP/1.1 server for one buffer that ignores `Accept` (as any
/// non-circus server does) and supports `Range: bytes=N-` with `If-Range`.
pub async fn plain_server(body: Bytes) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let body = body.clone();
            let service = service_fn(move |req| {
                let body = body.clone();
                async move { Ok::<_, std::convert::Infallible>(plain_response(&req, body)) }
            });
            tokio::spawn(hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service));
        }
    });
    addr
}

fn plain_response(req: &Request<Incoming>, body: Bytes) -> Response<Full<Bytes>> {
    const ETAG: &str = "\"plain-v1\"";
    let h = req.headers();
    let if_range_ok = h.get(header::IF_RANGE).is_none_or(|v| v == ETAG);
    let from = h
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok()?.strip_prefix("bytes=")?.strip_suffix('-')?.parse::<usize>().ok())
        .filter(|&f| if_range_ok && f < body.len());
    let builder =
        Response::builder().header(header::ETAG, ETAG).header(header::CONTENT_TYPE, "application/octet-stream");
    match from {
        Some(f) => builder
            .status(StatusCode::PARTIAL_CONTENT)
            .header(header::CONTENT_RANGE, format!("bytes {f}-{}/{}", body.len() - 1, body.len()))
            .body(Full::new(body.slice(f..))),
        None => builder.body(Full::new(body)),
    }
    .unwrap()
}
