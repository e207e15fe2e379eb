//! The hit lane: Lava's hit server in front of hyper.
//!
//! An HTTP/1.1 connection starts here, in clear or over TLS (after the
//! handshake, when ALPN chose http/1.1 or nothing). Each complete request head in the
//! read buffer is parsed in place (httparse); a plain GET or HEAD of an
//! object the [`HitSource`] holds resident is answered with its
//! prerendered head and its resident body ([`Answers`]: the body is shared,
//! not copied), and the answers to a batch of pipelined requests leave
//! together, in vectored writes. Nothing is allocated per request (in
//! clear) and no task, channel or header map is involved.
//!
//! The first request the lane does not answer (a miss, a range, a
//! condition, credentials, HTTP/2, a malformed head, anything unusual)
//! hands the connection to hyper for the rest of its life: the answers
//! already made are written first, and the unread bytes are replayed to
//! hyper ahead of the socket, so responses stay in request order and hyper
//! sees exactly the bytes the client sent. The lane therefore only has to
//! be right about what it answers, not about HTTP as a whole.

use crate::{
    access_log::{AccessLog, Entry},
    activity::Activity,
    answers::{Answers, Rendered},
    state::AppState,
};
use bytes::{Buf, Bytes, BytesMut};
use circus_http::HitSource;
use prometheus_client::metrics::counter::Counter;
use std::{io, net::SocketAddr, sync::Arc, time::Duration};
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt},
    sync::watch,
    time::Instant,
};

/// Headers a request may carry and still be answered by the lane; any
/// other name sends it to hyper. These change nothing in a whole, stored,
/// unvaried response (`Connection` only when it says keep-alive, or close:
/// the answer then says so and the connection ends after it).
const NEUTRAL: [&str; 7] = ["host", "user-agent", "accept", "accept-encoding", "accept-language", "connection", "te"];

/// Most headers parsed in place; a request with more goes to hyper.
const MAX_HEADERS: usize = 32;

/// Answers buffered before they are written, so that a burst of tiny
/// pipelined requests for larger objects cannot grow the output without
/// bound: the rest of the burst waits until this much has gone out. A
/// connection holds at most this plus one answer (up to 1 MiB); bodies of
/// 4 KiB or more are the store's own bytes, shared, and held outside its
/// budget only while a replaced version is still being written.
const OUT_LIMIT: usize = 256 * 1024;

/// How a connection left the lane.
pub(crate) enum Exit<S> {
    /// Closed by the client, by idleness or by shutdown.
    Closed,
    /// hyper takes over: replay `unread`, then read the stream.
    HandOff(S, Bytes),
}

/// Who is at the other end, for the access log.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer {
    pub addr: Option<SocketAddr>,
    pub tls: bool,
}

/// Bounds the lane applies while it owns a connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Longest wait for the next whole request head, counted from the
    /// last answer (so a head trickled in byte by byte is bounded too).
    pub idle: Duration,
    /// A head that grows past this goes to hyper (which answers 431).
    pub max_head: usize,
}

/// Serves `stream` until it closes or needs hyper. Stops at the next
/// request boundary once `shutdown` turns true.
#[allow(clippy::too_many_arguments, reason = "the connection's parts, each used once")]
pub(crate) async fn run<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    peer: Peer,
    source: &dyn HitSource,
    limits: Limits,
    mut shutdown: watch::Receiver<bool>,
    answered: &Counter,
    activity: &Arc<Activity>,
    log: Option<&AccessLog>,
) -> io::Result<Exit<S>> {
    let log = log.map(|log| (log, peer));
    let mut buf = BytesMut::with_capacity(8 * 1024);
    let mut out = Answers::default();
    let mut deadline = Instant::now() + limits.idle;
    loop {
        let read = tokio::select! {
            read = tokio::time::timeout_at(deadline, stream.read_buf(&mut buf)) => read,
            _ = shutdown.wait_for(|stop| *stop) => return Ok(Exit::Closed),
        };
        let Ok(read) = read else { return Ok(Exit::Closed) };
        activity.read();
        if read? == 0 {
            // A half-sent head at EOF: hyper answers it as it would.
            return Ok(if buf.is_empty() { Exit::Closed } else { Exit::HandOff(stream, buf.freeze()) });
        }
        loop {
            let (count, batch) = answer_all(&mut buf, source, &mut out, log);
            if count > 0 {
                answered.inc_by(count);
                // In flight while it is written, each write counting as
                // progress: the watchdog cuts only a client that stalls.
                let _in_flight = activity.response();
                out.write_to(&mut stream, activity).await?;
                deadline = Instant::now() + limits.idle;
            }
            match batch {
                Batch::Full => {}
                Batch::Close => {
                    // The client asked for this to be the last answer.
                    // Over TLS the shutdown sends close_notify; in clear the
                    // close that follows sends the same FIN after the
                    // answer, and a `shutdown` first would only cost a
                    // system call per connection. (Either way, bytes the
                    // client sent after its last request and the lane did
                    // not read make the close a reset.)
                    if peer.tls {
                        let _ = stream.shutdown().await;
                    }
                    return Ok(Exit::Closed);
                }
                Batch::NeedMore if buf.len() <= limits.max_head => break,
                Batch::NeedMore | Batch::Other => return Ok(Exit::HandOff(stream, buf.freeze())),
            }
        }
    }
}

enum Batch {
    /// Every complete request was answered; the buffer holds at most the
    /// start of the next one.
    NeedMore,
    /// The request at the front of the buffer is hyper's.
    Other,
    /// `OUT_LIMIT` reached: write, then answer the rest.
    Full,
    /// The last answer was to a request saying `Connection: close`: write,
    /// then close.
    Close,
}

/// Answers the complete requests at the front of `buf` into `out`,
/// consuming them, until one is not the lane's; returns how many it answered.
fn answer_all(
    buf: &mut BytesMut,
    source: &dyn HitSource,
    out: &mut Answers,
    log: Option<(&AccessLog, Peer)>,
) -> (u64, Batch) {
    let mut count = 0;
    let batch = loop {
        if buf.is_empty() {
            break Batch::NeedMore;
        }
        if out.len() >= OUT_LIMIT {
            break Batch::Full;
        }
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut headers);
        let len = match req.parse(buf) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) => break Batch::NeedMore,
            Err(_) => break Batch::Other,
        };
        let head = match req.method {
            Some("GET") => false,
            Some("HEAD") => true,
            _ => break Batch::Other,
        };
        let target = req.path.unwrap_or("");
        // A missing, doubled or malformed Host goes to hyper's path, which
        // answers 400 (RFC 9112 §3.2).
        let hosts = req.headers.iter().filter(|h| h.name.eq_ignore_ascii_case("host")).map(|h| h.value);
        if req.version != Some(1)
            || !target.starts_with('/')
            || !req.headers.iter().all(neutral)
            || !circus_http::rfc9110::host_ok(hosts)
        {
            break Batch::Other;
        }
        let close = req
            .headers
            .iter()
            .any(|h| h.name.eq_ignore_ascii_case("connection") && h.value.eq_ignore_ascii_case(b"close"));
        let Some(rendered) = out.render(source, target, head, req.headers, close) else {
            break Batch::Other;
        };
        if let Some((log, peer)) = log {
            log_answer(log, peer, &req, head, rendered);
        }
        buf.advance(len);
        count += 1;
        if close {
            break Batch::Close;
        }
    };
    (count, batch)
}

/// The lane's answers where private prefixes exist: only for paths none
/// covers (the full path checks the others).
pub(crate) struct PublicOnly(pub Arc<AppState>);

impl HitSource for PublicOnly {
    fn render(
        &self,
        target: &str,
        method_head: bool,
        headers: &[httparse::Header<'_>],
        head: &mut Vec<u8>,
    ) -> Option<Bytes> {
        let path = target.split('?').next().unwrap_or(target);
        if self.0.private.covers(path) {
            return None;
        }
        match &self.0.origin {
            Some(tier) => tier.render(target, method_head, headers, head),
            None => self.0.render(target, method_head, headers, head),
        }
    }
}

/// The access log's line for a request the lane answered.
fn log_answer(log: &AccessLog, peer: Peer, req: &httparse::Request<'_, '_>, head: bool, rendered: Rendered) {
    let field = |name: &str| {
        req.headers.iter().find(|h| h.name.eq_ignore_ascii_case(name)).and_then(|h| std::str::from_utf8(h.value).ok())
    };
    log.write(&Entry {
        peer: peer.addr,
        method: if head { "HEAD" } else { "GET" },
        target: req.path.unwrap_or(""),
        version: "HTTP/1.1",
        status: rendered.status,
        bytes: rendered.body,
        duration: Duration::ZERO,
        native: false,
        tls: peer.tls,
        cache: "hit",
        // The lane answers whole objects only.
        range: None,
        referer: field("referer"),
        user_agent: field("user-agent"),
    });
}

/// One request head the lane offered to its [`HitSource`], as the fuzz
/// target sees it.
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offered {
    pub target: String,
    pub head: bool,
    /// The header fields passed along, names as sent.
    pub headers: Vec<(String, Vec<u8>)>,
    /// Whether the source answered it.
    pub answered: bool,
}

/// What the lane made of `input`, for the fuzz target (`fuzz/`).
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneOutcome {
    /// Every request offered to the source, in order; all but the last were
    /// answered, and the last too unless the lane handed off there.
    pub offered: Vec<Offered>,
    /// Bytes consumed from the front of `input`: the answered requests.
    pub consumed: usize,
    /// Whether the connection went to hyper; otherwise the lane waits for
    /// the rest of a head (or for the next one), or closes.
    pub handed_off: bool,
    /// Whether the last answer was to `Connection: close` (the connection
    /// ends there).
    pub closed: bool,
}

/// Runs [`answer_all`] over `input` as the connection loop would (writing
/// out a full batch and going on), with a source that answers a request
/// when `hit(target)` says so and records what it was offered.
#[doc(hidden)]
pub fn answer_for_fuzzing(input: &[u8], hit: impl FnMut(&str) -> bool + Send) -> LaneOutcome {
    struct Recorder<F>(std::sync::Mutex<(F, Vec<Offered>)>);
    impl<F: FnMut(&str) -> bool + Send> HitSource for Recorder<F> {
        fn render(
            &self,
            target: &str,
            method_head: bool,
            headers: &[httparse::Header<'_>],
            head: &mut Vec<u8>,
        ) -> Option<Bytes> {
            let mut guard = self.0.lock().expect("not poisoned");
            let (hit, offered) = &mut *guard;
            let answered = hit(target);
            let headers = headers.iter().map(|h| (h.name.to_owned(), h.value.to_vec())).collect();
            offered.push(Offered { target: target.to_owned(), head: method_head, headers, answered });
            answered.then(|| {
                head.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
                Bytes::copy_from_slice(target.as_bytes())
            })
        }
    }
    let source = Recorder(std::sync::Mutex::new((hit, Vec::new())));
    let mut buf = BytesMut::from(input);
    let mut out = Answers::default();
    let (handed_off, closed) = loop {
        match answer_all(&mut buf, &source, &mut out, None).1 {
            Batch::Full => out.clear(),
            Batch::NeedMore => break (false, false),
            Batch::Close => break (false, true),
            Batch::Other => break (true, false),
        }
    };
    let offered = source.0.into_inner().expect("not poisoned").1;
    LaneOutcome { offered, consumed: input.len() - buf.len(), handed_off, closed }
}

fn neutral(h: &httparse::Header<'_>) -> bool {
    let name = h.name;
    NEUTRAL.iter().any(|n| n.eq_ignore_ascii_case(name))
        && (!name.eq_ignore_ascii_case("connection")
            || h.value.eq_ignore_ascii_case(b"keep-alive")
            || h.value.eq_ignore_ascii_case(b"close"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers `/hit` with a fixed response; everything else is a miss.
    struct OneObject;

    impl HitSource for OneObject {
        fn render(
            &self,
            target: &str,
            method_head: bool,
            _: &[httparse::Header<'_>],
            head: &mut Vec<u8>,
        ) -> Option<Bytes> {
            if target != "/hit" {
                return None;
            }
            head.extend_from_slice(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n");
            Some(Bytes::from_static(if method_head { b"" } else { b"ok" }))
        }
    }

    fn answer(input: &[u8]) -> (Vec<u8>, Vec<u8>, bool) {
        let mut buf = BytesMut::from(input);
        let mut out = Answers::default();
        let handed = matches!(answer_all(&mut buf, &OneObject, &mut out, None).1, Batch::Other);
        (out.to_vec(), buf.to_vec(), handed)
    }

    #[test]
    fn pipelined_hits_are_answered_in_order_and_a_partial_head_waits() {
        let get = b"GET /hit HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n";
        let input = [&get[..], b"HEAD /hit HTTP/1.1\r\nHost: x\r\n\r\n", b"GET /hi"].concat();
        let (out, rest, handed) = answer(&input);
        assert!(!handed);
        assert_eq!(out, b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n");
        assert_eq!(rest, b"GET /hi");
    }

    #[test]
    fn the_first_request_not_answered_and_all_after_it_stay_for_hyper() {
        let hit = b"GET /hit HTTP/1.1\r\nHost: x\r\n\r\n";
        for other in [
            &b"GET /miss HTTP/1.1\r\n\r\n"[..],
            b"GET /hit HTTP/1.1\r\nRange: bytes=0-0\r\n\r\n",
            b"GET /hit HTTP/1.1\r\nIf-None-Match: \"x\"\r\n\r\n",
            b"GET /hit HTTP/1.1\r\nAuthorization: Basic eDp5\r\n\r\n",
            b"GET /hit HTTP/1.1\r\nCache-Control: no-cache\r\n\r\n",
            b"GET /hit HTTP/1.1\r\nConnection: close, x\r\n\r\n",
            b"GET /hit HTTP/1.0\r\n\r\n",
            b"POST /hit HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
            b"GET http://x/hit HTTP/1.1\r\n\r\n",
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            b"GET /hit HTTP/1.1\r\nBad Header\r\n\r\n",
            b"GET /hit HTTP/1.1\r\n\r\n",
        ] {
            let input = [&hit[..], other, hit].concat();
            let (out, rest, handed) = answer(&input);
            assert!(handed, "{}", String::from_utf8_lossy(other));
            assert_eq!(out, b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
            assert_eq!(rest, [other, &hit[..]].concat(), "{}", String::from_utf8_lossy(other));
        }
    }

    #[test]
    fn a_request_to_close_is_answered_saying_so_and_nothing_after_it_is_read() {
        let close = b"GET /hit HTTP/1.1\r\nHost: x\r\nConnection: Close\r\n\r\n";
        let next = b"GET /hit HTTP/1.1\r\nHost: x\r\n\r\n";
        let mut buf = BytesMut::from(&[&next[..], close, next].concat()[..]);
        let mut out = Answers::default();
        let (count, batch) = answer_all(&mut buf, &OneObject, &mut out, None);
        assert_eq!(count, 2);
        assert!(matches!(batch, Batch::Close));
        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
        let closing = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok";
        assert_eq!(out.to_vec(), [&answer[..], closing].concat());
        assert_eq!(&buf[..], next, "what follows a close is never answered");
    }
}
