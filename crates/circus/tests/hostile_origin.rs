//! `circus serve --origin` in front of a hostile origin, through real
//! sockets: an origin whose body overruns its Content-Length (past the
//! framing on the wire, with a response smuggled in the excess, or inside a
//! chunked body that also claims a Content-Length), and an origin that
//! stalls inside a chunked body. What is asserted is what a client sees:
//! never a response passed off as complete with bytes the origin did not
//! frame as that response, never a bad copy served from the store, never a
//! hang. The origin is scripted per test (raw HTTP/1.1 on std threads) and
//! every wait, on either side, is bounded.

mod common;

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{Shutdown, TcpListener, TcpStream},
    sync::{Arc, Mutex},
    thread,
    time::{Duration, Instant},
};

/// Longest any socket read of the test waits, on either side.
const WAIT: Duration = Duration::from_secs(20);

/// A request as the origin received it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    target: String,
}

/// What the origin does once a reply's bytes are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Then {
    /// Reads the next request on the same connection.
    KeepAlive,
    /// Closes the connection.
    Close,
    /// Sends nothing more and keeps the connection open until the tier
    /// hangs up (or [`WAIT`] passes).
    Stall,
}

struct Reply {
    bytes: Vec<u8>,
    then: Then,
}

/// The script gets each request and how many requests for the same target
/// came before it.
type Script = dyn Fn(&Seen, usize) -> Reply + Send + Sync;

struct Origin {
    addr: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    /// Per stalled connection: how long after the stall began the tier hung
    /// up, or `None` when it had not after [`WAIT`].
    stalls: Arc<Mutex<Vec<Option<Duration>>>>,
}

impl Origin {
    fn start(script: impl Fn(&Seen, usize) -> Reply + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (seen, stalls) = (Arc::new(Mutex::new(Vec::new())), Arc::new(Mutex::new(Vec::new())));
        let script: Arc<Script> = Arc::new(script);
        let (log, stall_log) = (seen.clone(), stalls.clone());
        thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let (script, log, stall_log) = (script.clone(), log.clone(), stall_log.clone());
                thread::spawn(move || serve_conn(conn, &*script, &log, &stall_log));
            }
        });
        Origin { addr, seen, stalls }
    }

    /// GET requests received for `target`.
    fn count(&self, target: &str) -> usize {
        self.seen.lock().unwrap().iter().filter(|s| s.method == "GET" && s.target == target).count()
    }

    /// Waits (boundedly) for `n` stalled connections to have ended, and
    /// returns what [`Origin::stalls`] holds.
    fn stalls_ended(&self, n: usize) -> Vec<Option<Duration>> {
        let until = Instant::now() + WAIT + Duration::from_secs(5);
        while self.stalls.lock().unwrap().len() < n && Instant::now() < until {
            thread::sleep(Duration::from_millis(20));
        }
        self.stalls.lock().unwrap().clone()
    }

    /// `circus serve --origin` in front of this origin, with `extra` flags.
    fn tier(&self, extra: &[&str]) -> common::ServerProc {
        let url = format!("http://{}/", self.addr);
        let mut args = vec!["--origin", url.as_str()];
        args.extend_from_slice(extra);
        common::serve(&args)
    }
}

fn serve_conn(
    conn: TcpStream,
    script: &Script,
    log: &Mutex<Vec<Seen>>,
    stalls: &Mutex<Vec<Option<Duration>>>,
) -> Option<()> {
    conn.set_read_timeout(Some(WAIT)).ok()?;
    let mut out = conn.try_clone().ok()?;
    let mut r = BufReader::new(conn);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let mut parts = line.split_whitespace();
        let (method, target) = (parts.next()?.to_owned(), parts.next()?.to_owned());
        // The tier sends GETs without a body: the head is the request.
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).ok()? == 0 || h.trim_end().is_empty() {
                break;
            }
        }
        let seen = Seen { method, target };
        let reply = {
            let mut log = log.lock().unwrap();
            let before = log.iter().filter(|s| s.target == seen.target).count();
            log.push(seen.clone());
            script(&seen, before)
        };
        // One write: whatever the reply holds past its framing is in the
        // tier's socket buffer with the rest, before any close.
        out.write_all(&reply.bytes).ok()?;
        out.flush().ok()?;
        match reply.then {
            Then::KeepAlive => {}
            Then::Close => {
                let _ = out.shutdown(Shutdown::Write);
                return None;
            }
            Then::Stall => {
                let began = Instant::now();
                // Anything the tier sends here is ignored; EOF (or an error)
                // is the tier hanging up, a timeout is it not doing so.
                let mut sink = [0u8; 1024];
                let hung_up = loop {
                    match r.read(&mut sink) {
                        Ok(0) => break true,
                        Ok(_) => {}
                        Err(e) => {
                            break !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut);
                        }
                    }
                };
                stalls.lock().unwrap().push(hung_up.then(|| began.elapsed()));
                return None;
            }
        }
    }
}

/// A raw response head with exactly `fields` (no framing added), then `body`.
fn raw(status: &str, fields: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut s = format!("HTTP/1.1 {status}\r\n");
    for (n, v) in fields {
        s += &format!("{n}: {v}\r\n");
    }
    let mut out = (s + "\r\n").into_bytes();
    out.extend_from_slice(body);
    out
}

/// A chunked body of `pieces`, with the last chunk (`0`) when `end`.
fn chunks(pieces: &[&[u8]], end: bool) -> Vec<u8> {
    let mut s = Vec::new();
    for p in pieces {
        s.extend_from_slice(format!("{:x}\r\n", p.len()).as_bytes());
        s.extend_from_slice(p);
        s.extend_from_slice(b"\r\n");
    }
    if end {
        s.extend_from_slice(b"0\r\n\r\n");
    }
    s
}

/// What the client got.
#[derive(Debug)]
struct Answer {
    status: u16,
    /// Names lowercased; a field sent several times is joined by ", ".
    headers: Vec<(String, String)>,
    /// The body as received (dechunked when chunked), up to where the
    /// connection ended.
    body: Vec<u8>,
    /// The connection ended with a clean EOF (not a reset or a timeout).
    clean_eof: bool,
    /// A chunked body ended with its last chunk.
    last_chunk: bool,
    elapsed: Duration,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// Whether the response presents its body as whole: its framing
    /// (Content-Length, or chunked with the last chunk) is met exactly and
    /// the connection ended cleanly.
    fn complete(&self) -> bool {
        let framed = match self.header("transfer-encoding") {
            Some(te) if te.contains("chunked") => self.last_chunk,
            _ => self.header("content-length").and_then(|l| l.parse().ok()) == Some(self.body.len()),
        };
        framed && self.clean_eof
    }
}

/// `GET target` on its own connection (`connection: close`); the response
/// is read to the connection's end, each read within [`WAIT`].
fn get(addr: &str, target: &str) -> Answer {
    let started = Instant::now();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s.write_all(format!("GET {target} HTTP/1.1\r\nhost: tier.test\r\nconnection: close\r\n\r\n").as_bytes()).unwrap();
    let mut r = BufReader::new(s);
    let (status, fields) = common::read_fields(&mut r);
    let mut headers: Vec<(String, String)> = Vec::new();
    for (n, v) in fields {
        match headers.iter_mut().find(|(m, _)| *m == n) {
            Some((_, old)) => *old = format!("{old}, {v}"),
            None => headers.push((n, v)),
        }
    }
    let mut raw_body = Vec::new();
    let clean_eof = r.read_to_end(&mut raw_body).is_ok();
    let chunked = headers.iter().any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    let (body, last_chunk) = if chunked { dechunk(&raw_body) } else { (raw_body, false) };
    Answer { status, headers, body, clean_eof, last_chunk, elapsed: started.elapsed() }
}

/// A chunked body decoded (a cut one ends where it was cut), and whether
/// it ended with its last chunk.
fn dechunk(mut raw: &[u8]) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    while let Some(eol) = raw.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&raw[..eol]).ok().and_then(|s| usize::from_str_radix(s.trim(), 16).ok());
        let Some(n) = size else { break };
        if n == 0 {
            return (out, true);
        }
        let chunk = &raw[eol + 2..];
        if chunk.len() < n + 2 {
            out.extend_from_slice(&chunk[..n.min(chunk.len())]);
            break;
        }
        out.extend_from_slice(&chunk[..n]);
        raw = &chunk[n + 2..];
    }
    (out, false)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// What the origin frames as the body (Content-Length: 10), and what it
/// sends past it.
const FRAMED: &[u8] = b"0123456789";
const EXCESS: &[u8] = b"ABCDEFGHIJ";

#[test]
fn an_origin_that_sends_more_than_its_content_length_is_never_stored_or_passed_off_as_complete() {
    // A storable 404 whose Content-Length says 10 bytes, followed by 20 in
    // the same write, then the close. HTTP/1.1 framing makes the body the
    // first 10 (RFC 9112 §6.3); the rest is no part of this response, and
    // the tier's HTTP client stops at the Content-Length (and drops the
    // connection over the excess). A 502 would be right too; a 404 with
    // any other body, or with the excess after it, would not.
    let origin = Origin::start(|_, _| {
        let fields = [("cache-control", "max-age=60"), ("content-length", "10")];
        Reply { bytes: raw("404 Not Found", &fields, &[FRAMED, EXCESS].concat()), then: Then::Close }
    });
    let tier = origin.tier(&["--origin-timeout", "5"]);
    for round in 1..=3 {
        let a = get(&tier.addr, "/more");
        assert!(!contains(&a.body, EXCESS), "round {round}: bytes past the Content-Length reached the client: {a:?}");
        match a.status {
            // Refused: a failure is never stored, the next asks again.
            502 => assert_eq!(origin.count("/more"), round, "round {round}: a refused answer was stored"),
            // Served: only ever the framed body, presented as whole.
            404 => {
                assert_eq!(a.body, FRAMED, "round {round}: {a:?}");
                assert_eq!(a.header("content-length"), Some("10"), "round {round}: {a:?}");
                assert!(a.complete(), "round {round}: {a:?}");
            }
            _ => panic!("round {round}: neither the framed 404 nor a 502: {a:?}"),
        }
    }
}

#[test]
fn a_response_smuggled_past_a_content_length_never_answers_another_request() {
    // The excess past the 404's Content-Length is a whole response of its
    // own, and the origin keeps the connection open: were the tier's client
    // to take it for the answer to its next request on that connection, a
    // 200 the origin never sent for /next would be served and stored.
    // RFC 9112 §6.3: such data MUST NOT be processed as a separate response.
    let origin = Origin::start(|req, _| {
        let fresh = ("cache-control", "max-age=60");
        let bytes = match req.target.as_str() {
            "/split" => {
                let smuggled = raw("200 OK", &[fresh, ("content-length", "8")], b"SMUGGLED");
                raw("404 Not Found", &[fresh, ("content-length", "10")], &[FRAMED, &smuggled].concat())
            }
            _ => raw("200 OK", &[fresh, ("content-length", "7")], b"genuine"),
        };
        Reply { bytes, then: Then::KeepAlive }
    });
    let tier = origin.tier(&["--origin-timeout", "5"]);
    for round in 1..=3 {
        let a = get(&tier.addr, "/split");
        assert!(!contains(&a.body, b"SMUGGLED"), "round {round}: {a:?}");
        assert!(a.status == 502 || (a.status == 404 && a.body == FRAMED && a.complete()), "round {round}: {a:?}");
        let b = get(&tier.addr, "/next");
        assert_eq!((b.status, b.body.as_slice()), (200, &b"genuine"[..]), "round {round}: {b:?}");
        assert!(b.complete(), "round {round}: {b:?}");
    }
    assert_eq!(origin.count("/next"), 1, "/next is asked for once, then served from the store");
}

#[test]
fn a_chunked_404_longer_than_its_content_length_is_refused_with_a_502_and_never_stored() {
    // A 404 that claims Content-Length: 10 and is also chunked, with 20
    // bytes in its chunks: the chunked framing wins on the wire, so the
    // tier reads all 20 (the case above never gets past 10) and its check
    // of the body against the Content-Length it will serve must refuse
    // them (RFC 9112 §6.3: such a message ought to be handled as an
    // error). The origin behaves from its third answer on.
    let origin = Origin::start(|_, before| {
        let fresh = ("cache-control", "max-age=60");
        let bytes = if before < 2 {
            let fields = [fresh, ("content-length", "10"), ("transfer-encoding", "chunked")];
            raw("404 Not Found", &fields, &chunks(&[FRAMED, EXCESS], true))
        } else {
            raw("404 Not Found", &[fresh, ("content-length", "10")], b"gone away.")
        };
        Reply { bytes, then: Then::KeepAlive }
    });
    let tier = origin.tier(&["--origin-timeout", "5"]);
    for round in 1..=2 {
        let a = get(&tier.addr, "/overrun");
        assert_eq!(a.status, 502, "round {round}: {a:?}");
        assert!(!contains(&a.body, FRAMED) && !contains(&a.body, EXCESS), "round {round}: {a:?}");
        assert_eq!(origin.count("/overrun"), round, "round {round}: not asked again: a bad copy was stored");
    }
    // The same 404, framed right, is stored: what kept the bad one out was
    // the refusal, not its status or its Cache-Control.
    for _ in 0..2 {
        let a = get(&tier.addr, "/overrun");
        assert_eq!((a.status, a.body.as_slice()), (404, &b"gone away."[..]), "{a:?}");
        assert!(a.complete(), "{a:?}");
    }
    assert_eq!(origin.count("/overrun"), 3);
}

#[test]
fn a_chunked_200_longer_than_its_content_length_is_never_stored_or_served_short_as_whole() {
    // The same conflict on a 200, every time: the chunks hold 20 bytes, the
    // Content-Length says 10. Transfer-Encoding wins (RFC 9112 §6.3), so the
    // first 10 bytes are not the body; they must not be stored, nor served
    // as a whole 200. A 502, a response cut short, or the 20 bytes framed as
    // such are all right.
    let origin = Origin::start(|_, _| {
        let fields = [("cache-control", "max-age=60"), ("content-length", "10"), ("transfer-encoding", "chunked")];
        Reply { bytes: raw("200 OK", &fields, &chunks(&[FRAMED, EXCESS], true)), then: Then::KeepAlive }
    });
    let tier = origin.tier(&["--origin-timeout", "5"]);
    let (whole, mut asked) = ([FRAMED, EXCESS].concat(), 0);
    for round in 1..=3 {
        let a = get(&tier.addr, "/overrun");
        let short_as_whole = a.status == 200 && a.body == FRAMED && a.complete();
        assert!(!short_as_whole, "round {round}: the first 10 of 20 bytes served as a whole 200: {a:?}");
        let served_whole = a.status == 200 && a.body == whole && a.complete();
        assert!(
            a.status == 502 || !a.complete() || served_whole,
            "round {round}: neither a 502, nor cut short, nor the chunked body: {a:?}"
        );
        // Only the whole body may have been stored; anything else is asked
        // for again.
        if !served_whole {
            asked += 1;
            assert!(origin.count("/overrun") >= asked, "round {round}: answered from a bad stored copy: {a:?}");
        }
    }
}

#[test]
fn an_origin_stalling_inside_a_chunked_body_gets_a_502_after_the_origin_timeout_and_nothing_partial_is_stored() {
    // A storable chunked 200 without a length: the first answer sends one
    // chunk and then nothing, the connection held open; later ones are whole.
    let whole: &[&[u8]] = &[b"partial ", b"then ", b"the rest"];
    let origin = Origin::start(move |_, before| {
        let fields = [("cache-control", "max-age=60"), ("transfer-encoding", "chunked")];
        if before == 0 {
            Reply { bytes: raw("200 OK", &fields, &chunks(&whole[..1], false)), then: Then::Stall }
        } else {
            Reply { bytes: raw("200 OK", &fields, &chunks(whole, true)), then: Then::KeepAlive }
        }
    });
    let tier = origin.tier(&["--origin-timeout", "1"]);
    let a = get(&tier.addr, "/stall");
    assert_eq!(a.status, 502, "{a:?}");
    assert!(!contains(&a.body, b"partial"), "part of the stalled body reached the client: {a:?}");
    assert!(a.clean_eof, "the 502 did not end cleanly: {a:?}");
    // Given up on by the 1 s timeout, not by anything quicker or slower.
    assert!(a.elapsed >= Duration::from_millis(900), "gave up before the origin timeout: {a:?}");
    assert!(a.elapsed < Duration::from_secs(10), "the origin timeout did not end the wait: {a:?}");
    // The tier lets go of the stalled connection.
    let stalls = origin.stalls_ended(1);
    assert!(matches!(stalls.as_slice(), [Some(d)] if *d < Duration::from_secs(10)), "{stalls:?}");
    // Nothing partial was stored: the next request asks the origin, which
    // now sends it whole; that whole body is stored.
    for _ in 0..2 {
        let b = get(&tier.addr, "/stall");
        assert_eq!((b.status, b.body.as_slice()), (200, &b"partial then the rest"[..]), "{b:?}");
        assert!(b.complete(), "{b:?}");
    }
    assert_eq!(origin.count("/stall"), 2, "the stalled answer was stored, or the whole one was not");
}
