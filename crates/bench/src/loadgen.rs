//! A load generator for small objects: many keep-alive HTTP/1.1
//! connections, each keeping `depth` pipelined requests outstanding, so the
//! offered rate is the highest the server can take (throughput at
//! saturation; the rate is set by the server, not by the client's round
//! trips). Raw sockets and a minimal response parser keep the client's own
//! CPU cost low, since it shares the machine with the server.

use crate::BenchError;
use bytes::{Buf, BytesMut};
use std::{
    sync::Arc,
    time::{Duration, Instant},
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

#[derive(Debug, Clone, Copy, Default)]
pub struct Load {
    pub responses: u64,
    pub payload_bytes: u64,
    pub seconds: f64,
}

impl Load {
    pub fn req_per_s(&self) -> f64 {
        self.responses as f64 / self.seconds
    }

    pub fn payload_mbit_per_s(&self) -> f64 {
        self.payload_bytes as f64 * 8.0 / 1e6 / self.seconds
    }
}

/// Requests `paths` round-robin (each connection from its own offset) for
/// `duration`; counts only responses that arrived within it. Any status
/// other than 200 fails the run.
pub async fn run(
    addr: &str,
    paths: &[String],
    connections: usize,
    depth: usize,
    duration: Duration,
) -> Result<Load, BenchError> {
    let reqs: Arc<Vec<Vec<u8>>> =
        Arc::new(paths.iter().map(|p| format!("GET {p} HTTP/1.1\r\nHost: bench\r\n\r\n").into_bytes()).collect());
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..connections {
        let (addr, reqs) = (addr.to_owned(), reqs.clone());
        let offset = c * reqs.len() / connections.max(1);
        tasks.spawn(async move {
            // A server that stops answering fails the run instead of hanging it.
            tokio::time::timeout(duration + Duration::from_secs(10), connection(&addr, &reqs, offset, depth, deadline))
                .await
                .map_err(|_| BenchError::Client(format!("{addr} stopped answering")))?
        });
    }
    let mut total = Load::default();
    while let Some(joined) = tasks.join_next().await {
        let load = joined.map_err(|e| BenchError::Client(format!("load task: {e}")))??;
        total.responses += load.responses;
        total.payload_bytes += load.payload_bytes;
    }
    total.seconds = duration.as_secs_f64();
    Ok(total)
}

async fn connection(
    addr: &str,
    reqs: &[Vec<u8>],
    mut next: usize,
    depth: usize,
    deadline: Instant,
) -> Result<Load, BenchError> {
    let client = |e: std::io::Error| BenchError::Client(format!("{addr}: {e}"));
    let stream = TcpStream::connect(addr).await.map_err(client)?;
    stream.set_nodelay(true).map_err(client)?;
    let (mut rd, mut wr) = stream.into_split();
    let mut out = Vec::new();
    let mut push = |out: &mut Vec<u8>, n: usize| {
        for _ in 0..n {
            out.extend_from_slice(&reqs[next % reqs.len()]);
            next += 1;
        }
    };
    push(&mut out, depth);
    wr.write_all(&out).await.map_err(client)?;
    let mut outstanding = depth;
    let mut buf = BytesMut::with_capacity(256 * 1024);
    let mut load = Load::default();
    // The head of a response whose body is still arriving, parsed once.
    let mut waiting: Option<(u16, usize, usize)> = None;
    while outstanding > 0 {
        if rd.read_buf(&mut buf).await.map_err(client)? == 0 {
            return Err(BenchError::Client(format!("{addr} closed a keep-alive connection")));
        }
        let now = Instant::now();
        let mut done = 0;
        loop {
            let head = match waiting.take() {
                Some(head) => head,
                None => match parse_head(&buf)? {
                    Some(head) => head,
                    None => break,
                },
            };
            let (status, head, body) = head;
            if buf.len() < head + body {
                waiting = Some((status, head, body));
                break;
            }
            if status != 200 {
                return Err(BenchError::Client(format!("{addr} answered {status}")));
            }
            buf.advance(head + body);
            done += 1;
            if now < deadline {
                load.responses += 1;
                load.payload_bytes += body as u64;
            }
        }
        outstanding -= done;
        if now < deadline && done > 0 {
            out.clear();
            push(&mut out, done);
            wr.write_all(&out).await.map_err(client)?;
            outstanding += done;
        }
    }
    Ok(load)
}

/// `(status, head length, body length)` of the first response in `buf`
/// once it is all there. Only Content-Length framing is expected.
#[cfg(test)]
fn parse(buf: &[u8]) -> Result<Option<(u16, usize, usize)>, BenchError> {
    Ok(parse_head(buf)?.filter(|&(_, head, len)| buf.len() >= head + len))
}

/// `(status, head length, body length)` of the response starting `buf`
/// once its head is all there. Only Content-Length framing is expected.
/// httparse, as the servers' own parsers: the generator shares the cores
/// with the server it measures, and every cycle it spends is one the
/// server does not get.
pub(crate) fn parse_head(buf: &[u8]) -> Result<Option<(u16, usize, usize)>, BenchError> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut headers);
    let head = match response.parse(buf) {
        Ok(httparse::Status::Complete(head)) => head,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(BenchError::Client(format!("malformed response head: {e}"))),
    };
    let len = response
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse::<usize>().ok())
        .ok_or_else(|| BenchError::Client("response without Content-Length".into()))?;
    Ok(Some((response.code.unwrap_or(0), head, len)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_complete_responses_only() {
        let r = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcHTTP/1.1";
        assert_eq!(parse(r).unwrap(), Some((200, 38, 3)));
        assert_eq!(parse(&r[..39]).unwrap(), None);
        assert!(parse(b"HTTP/1.1 200 OK\r\n\r\n").is_err());
        // A server's garbage fails the run instead of being counted.
        assert!(parse(b"HTTP/1.1 2x0 OK\r\nContent-Length: 3\r\n\r\nabc").is_err());
        assert!(parse(b"HTTP/1.1 200 OK\r\nContent-Length: lots\r\n\r\nabc").is_err());
    }
}
