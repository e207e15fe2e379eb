//! End-to-end tests of `circus serve --origin`: the built binary in front
//! of a small HTTP origin started by each test (std threads, raw HTTP/1.1,
//! so faults are easy to inject: slow chunks, a connection cut, an origin
//! that dies). The origin counts the body bytes it sends and the requests
//! it answers, which is what the tier's promises are about.

mod common;

use std::{
    collections::HashMap,
    io::{BufRead, BufReader, Read, Write},
    net::{Shutdown, TcpListener, TcpStream},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

#[derive(Clone, Default)]
struct Obj {
    data: Arc<Vec<u8>>,
    cache_control: &'static str,
    /// Extra response headers.
    extra: Vec<(&'static str, &'static str)>,
    /// The body is this request header's value (for private and Vary tests).
    echo: Option<&'static str>,
    /// Sleep before each 64 KiB chunk.
    chunk_delay: Duration,
    /// After this many body bytes of this object in total, the origin dies
    /// for it: the current connection is cut and later requests are refused.
    die_after: Option<u64>,
    /// Once the body bytes sent in total reach this mark (which the test may
    /// move), the object is replaced by these bytes under ETag "v2" (a new
    /// version published mid-transfer).
    replaced_after: Option<(Arc<AtomicU64>, Arc<Vec<u8>>)>,
    /// The replacement keeps ETag "v1" (and so passes If-Match "v1"), as
    /// replicas that compute ETags from size and mtime do.
    reuse_etag: bool,
}

#[derive(Default)]
struct Counters {
    body_bytes: AtomicU64,
    requests: AtomicU64,
    not_modified: AtomicU64,
    /// When the last body byte of any response went out.
    last_send: Mutex<Option<Instant>>,
}

struct TestOrigin {
    addr: String,
    counters: Arc<Counters>,
}

const ETAG: &str = "\"v1\"";

fn start_origin(objects: HashMap<&'static str, Obj>) -> TestOrigin {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let counters = Arc::new(Counters::default());
    let objects = Arc::new(objects);
    let dead = Arc::new(AtomicBool::new(false));
    let c = counters.clone();
    thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let (objects, c, dead) = (objects.clone(), c.clone(), dead.clone());
            thread::spawn(move || {
                let _ = serve_conn(conn, &objects, &c, &dead);
            });
        }
    });
    TestOrigin { addr, counters }
}

fn serve_conn(
    mut conn: TcpStream,
    objects: &HashMap<&'static str, Obj>,
    c: &Counters,
    dead: &AtomicBool,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let path = as_a_web_server_reads(line.split_whitespace().nth(1).unwrap_or("/"));
        let mut headers = HashMap::new();
        loop {
            let mut h = String::new();
            reader.read_line(&mut h)?;
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((n, v)) = h.split_once(':') {
                headers.insert(n.trim().to_ascii_lowercase(), v.trim().to_owned());
            }
        }
        c.requests.fetch_add(1, Ordering::SeqCst);
        let Some(obj) = objects.get(path.as_str()) else {
            conn.write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")?;
            continue;
        };
        if obj.die_after.is_some() && dead.load(Ordering::SeqCst) {
            return conn.shutdown(Shutdown::Both);
        }
        let replaced = obj
            .replaced_after
            .as_ref()
            .filter(|(after, _)| c.body_bytes.load(Ordering::SeqCst) >= after.load(Ordering::SeqCst));
        let (etag, data): (&str, Vec<u8>) = match (obj.echo, replaced) {
            (Some(h), _) => (ETAG, headers.get(h).cloned().unwrap_or_else(|| "none".into()).into_bytes()),
            (None, Some((_, new))) => (if obj.reuse_etag { ETAG } else { "\"v2\"" }, new.to_vec()),
            (None, None) => (ETAG, obj.data.to_vec()),
        };
        let mut head = format!(
            "cache-control: {}\r\netag: {etag}\r\nlast-modified: Mon, 01 Jan 2024 00:00:00 GMT\r\n",
            obj.cache_control
        );
        for (n, v) in &obj.extra {
            head += &format!("{n}: {v}\r\n");
        }
        if headers.get("if-none-match").map(String::as_str) == Some(etag) {
            c.not_modified.fetch_add(1, Ordering::SeqCst);
            conn.write_all(format!("HTTP/1.1 304 Not Modified\r\n{head}\r\n").as_bytes())?;
            continue;
        }
        if headers.get("if-match").is_some_and(|m| m != etag) {
            conn.write_all(b"HTTP/1.1 412 Precondition Failed\r\ncontent-length: 0\r\n\r\n")?;
            continue;
        }
        let len = data.len() as u64;
        let (status, start, end) = match headers.get("range").and_then(|r| r.strip_prefix("bytes=")) {
            Some(r) => {
                let (a, b) = r.split_once('-').unwrap();
                let a: u64 = a.parse().unwrap();
                let b: u64 = b.parse::<u64>().unwrap_or(u64::MAX).min(len.saturating_sub(1));
                if a >= len {
                    conn.write_all(format!("HTTP/1.1 416 Range Not Satisfiable\r\ncontent-range: bytes */{len}\r\ncontent-length: 0\r\n\r\n").as_bytes())?;
                    continue;
                }
                head += &format!("content-range: bytes {a}-{b}/{len}\r\n");
                ("206 Partial Content", a, b + 1)
            }
            None => ("200 OK", 0, len),
        };
        conn.write_all(format!("HTTP/1.1 {status}\r\n{head}content-length: {}\r\n\r\n", end - start).as_bytes())?;
        for chunk in data[start as usize..end as usize].chunks(64 * 1024) {
            thread::sleep(obj.chunk_delay);
            if let Some(limit) = obj.die_after
                && (dead.load(Ordering::SeqCst) || c.body_bytes.load(Ordering::SeqCst) >= limit)
            {
                dead.store(true, Ordering::SeqCst);
                return conn.shutdown(Shutdown::Both);
            }
            conn.write_all(chunk)?;
            c.body_bytes.fetch_add(chunk.len() as u64, Ordering::SeqCst);
            *c.last_send.lock().unwrap() = Some(Instant::now());
        }
    }
}

/// The path a typical web server serves for a request target: percent
/// escapes decoded (`%2f` included), then dot segments resolved (clamped
/// at the root), as nginx and most origins do.
fn as_a_web_server_reads(target: &str) -> String {
    let path = target.split('?').next().unwrap_or("/");
    let mut decoded = Vec::new();
    let b = path.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match (b[i], b.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok())) {
            (b'%', Some(v)) => {
                decoded.push(v);
                i += 3;
            }
            (c, _) => {
                decoded.push(c);
                i += 1;
            }
        }
    }
    let mut out: Vec<String> = Vec::new();
    for seg in String::from_utf8_lossy(&decoded).split('/') {
        match seg {
            "" | "." => {}
            ".." => _ = out.pop(),
            s => out.push(s.to_owned()),
        }
    }
    format!("/{}", out.join("/"))
}

/// `circus serve --origin` in front of `origin`.
fn tier(origin: &TestOrigin, extra: &[&str]) -> common::ServerProc {
    let url = format!("http://{}/", origin.addr);
    let mut args = vec!["--origin", url.as_str()];
    args.extend_from_slice(extra);
    common::serve(&args)
}

/// What a client saw: status, headers, and whether the body it read was
/// complete (as long as Content-Length) and equal to `expect`.
#[derive(Debug)]
struct Got {
    status: u16,
    headers: HashMap<String, String>,
    body: Vec<u8>,
    complete: bool,
    first_byte: Option<Instant>,
}

/// GET with extra headers; the body is kept only when `keep` (the crowd
/// tests compare it on the fly against `expect` instead).
fn get(addr: &str, path: &str, extra: &[(&str, &str)], expect: Option<&[u8]>) -> Got {
    let (mut r, status, headers) = common::get_head(addr, path, extra);
    let want: Option<usize> = headers.get("content-length").and_then(|v| v.parse().ok());
    let mut body = Vec::new();
    let (mut read, mut same, mut first_byte) = (0usize, true, None);
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        match r.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                first_byte.get_or_insert_with(Instant::now);
                match expect {
                    Some(e) => same &= e.get(read..read + n) == Some(&buf[..n]),
                    None => body.extend_from_slice(&buf[..n]),
                }
                read += n;
            }
        }
    }
    let complete = want == Some(read) && same;
    Got { status, headers, body, complete, first_byte }
}

fn pattern(size: usize, seed: u64) -> Arc<Vec<u8>> {
    Arc::new((0..size as u64).map(|i| ((i ^ seed).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8).collect())
}

#[test]
fn a_crowd_missing_one_object_fetches_it_once_and_streams_before_it_is_whole() {
    let size = 32 << 20;
    let data = pattern(size, 1);
    // About 1.5 s for the whole object at the origin.
    let big = Obj {
        data: data.clone(),
        cache_control: "max-age=600",
        chunk_delay: Duration::from_millis(3),
        ..Obj::default()
    };
    let origin = start_origin(HashMap::from([("/big.bin", big)]));
    let t = tier(&origin, &["--cache", "256MiB"]);
    let clients: Vec<_> = (0..100)
        .map(|_| {
            let (addr, data) = (t.addr.clone(), data.clone());
            thread::spawn(move || get(&addr, "/big.bin", &[], Some(&data)))
        })
        .collect();
    let results: Vec<Got> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    let origin_done = origin.counters.last_send.lock().unwrap().expect("origin sent the object");
    for (i, g) in results.iter().enumerate() {
        assert_eq!(g.status, 200, "client {i}");
        assert!(g.complete, "client {i} got a wrong or short body");
        assert!(g.first_byte.unwrap() < origin_done, "client {i} waited for the whole object before its first byte");
    }
    let fetched = origin.counters.body_bytes.load(Ordering::SeqCst);
    let last_first = results.iter().filter_map(|g| g.first_byte).max().unwrap();
    eprintln!(
        "origin bytes / size = {:.3}; last first byte {:?} before the origin finished",
        fetched as f64 / size as f64,
        origin_done - last_first
    );
    assert!(fetched as f64 <= 1.05 * size as f64, "origin sent {fetched} bytes for a {size} byte object");
}

#[test]
fn an_origin_that_dies_mid_transfer_fails_every_waiter_and_no_body_looks_complete() {
    let size = 8 << 20;
    let data = pattern(size, 2);
    let dies = Obj {
        data: data.clone(),
        cache_control: "max-age=600",
        chunk_delay: Duration::from_millis(2),
        die_after: Some(3 << 20),
        ..Obj::default()
    };
    let origin = start_origin(HashMap::from([("/dies.bin", dies)]));
    let t = tier(&origin, &["--cache", "64MiB"]);
    let clients: Vec<_> = (0..10)
        .map(|_| {
            let (addr, data) = (t.addr.clone(), data.clone());
            thread::spawn(move || get(&addr, "/dies.bin", &[], Some(&data)))
        })
        .collect();
    for (i, c) in clients.into_iter().enumerate() {
        let g = c.join().unwrap();
        eprintln!("client {i}: status {} and {} body bytes", g.status, if g.complete { "all" } else { "not all" });
        assert!(!g.complete, "client {i} saw a complete body from an origin that died: {g:?}");
    }
    // Afterwards: an error status or a cut body, never a complete-looking one.
    let g = get(&t.addr, "/dies.bin", &[], Some(&data));
    assert!(!g.complete, "a request after the origin died looked complete: {g:?}");
}

#[test]
fn an_object_replaced_mid_transfer_never_yields_a_body_mixing_two_versions() {
    let size = 8 << 20;
    let (v1, v2) = (pattern(size, 5), pattern(size, 6));
    let obj = Obj {
        data: v1.clone(),
        cache_control: "max-age=600",
        chunk_delay: Duration::from_millis(2),
        replaced_after: Some((Arc::new(AtomicU64::new(3 << 20)), v2.clone())),
        ..Obj::default()
    };
    let origin = start_origin(HashMap::from([("/obj.bin", obj)]));
    let t = tier(&origin, &["--cache", "64MiB"]);
    let clients: Vec<_> = (0..10)
        .map(|_| {
            let (addr, v1) = (t.addr.clone(), v1.clone());
            thread::spawn(move || get(&addr, "/obj.bin", &[], Some(&v1)))
        })
        .collect();
    for (i, c) in clients.into_iter().enumerate() {
        let g = c.join().unwrap();
        // Block fetches carry If-Match "v1": the origin answers 412 once it
        // has v2, and the download is cut rather than continued with v2 bytes.
        assert!(!g.complete, "client {i} got a complete body although the object changed under it");
    }
    // The next request learns the new version and gets it whole.
    let g = get(&t.addr, "/obj.bin", &[], Some(&v2));
    assert!(g.complete && g.headers.get("etag").map(String::as_str) == Some("\"v2\""), "{:?}", g.headers);
}

#[test]
fn an_origin_that_reuses_its_etag_for_new_bytes_never_gets_a_spliced_object_passed_as_whole() {
    use base64::Engine;
    use sha2::Digest;
    let size = 8 << 20;
    let (v1, v2) = (pattern(size, 7), pattern(size, 8));
    let digest = base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(&*v1));
    let repr_digest: &'static str = Box::leak(format!("sha-256=:{digest}:").into_boxed_str());
    let obj = Obj {
        data: v1.clone(),
        cache_control: "max-age=600",
        extra: vec![("repr-digest", repr_digest)],
        chunk_delay: Duration::from_millis(2),
        replaced_after: Some((Arc::new(AtomicU64::new(3 << 20)), v2.clone())),
        reuse_etag: true,
        ..Obj::default()
    };
    let origin = start_origin(HashMap::from([("/obj.bin", obj)]));
    let t = tier(&origin, &["--cache", "64MiB"]);
    let clients: Vec<_> = (0..10)
        .map(|_| {
            let addr = t.addr.clone();
            thread::spawn(move || get(&addr, "/obj.bin", &[], None))
        })
        .collect();
    for (i, c) in clients.into_iter().enumerate() {
        let g = c.join().unwrap();
        let whole = g.headers.get("content-length").and_then(|l| l.parse().ok()) == Some(g.body.len());
        // If-Match "v1" passes and every block names "v1": only the digest
        // tells the versions apart. A whole body must be v1, all of it.
        assert!(!whole || g.body == *v1, "client {i} got a whole-looking body spliced from two versions");
    }
}

#[test]
fn a_stalled_origin_times_out_into_an_error_not_a_short_success() {
    let data = pattern(4 << 20, 3);
    let stall =
        Obj { data: data.clone(), cache_control: "max-age=600", chunk_delay: Duration::from_secs(5), ..Obj::default() };
    let origin = start_origin(HashMap::from([("/stall.bin", stall)]));
    let t = tier(&origin, &["--origin-timeout", "1"]);
    let started = Instant::now();
    let g = get(&t.addr, "/stall.bin", &[], Some(&data));
    assert!(!g.complete, "{g:?}");
    assert!(g.status == 502 || g.status == 200, "status {}", g.status);
    assert!(started.elapsed() < Duration::from_secs(20), "the timeout did not end the request");
}

#[test]
fn private_and_credentialed_responses_are_never_served_to_another_client() {
    let me = |cc| Obj { cache_control: cc, echo: Some("x-user"), ..Obj::default() };
    let origin = start_origin(HashMap::from([
        ("/private", me("private, max-age=600")),
        ("/nostore", me("no-store")),
        ("/auth", me("max-age=600")),
    ]));
    let t = tier(&origin, &[]);
    for round in 0..3 {
        for user in ["alice", "bob"] {
            for path in ["/private", "/nostore"] {
                let g = get(&t.addr, path, &[("x-user", user)], None);
                assert_eq!((g.status, g.body.as_slice()), (200, user.as_bytes()), "{path} round {round}");
            }
            let g = get(&t.addr, "/auth", &[("x-user", user), ("authorization", user)], None);
            assert_eq!(g.body, user.as_bytes(), "/auth round {round}");
        }
    }
    // Without credentials, /auth is shared (max-age, no private): stored once.
    let before = origin.counters.requests.load(Ordering::SeqCst);
    let a = get(&t.addr, "/auth", &[("x-user", "carol")], None);
    let b = get(&t.addr, "/auth", &[("x-user", "dave")], None);
    assert_eq!((a.body.as_slice(), b.body.as_slice()), (&b"carol"[..], &b"carol"[..]));
    assert_eq!(origin.counters.requests.load(Ordering::SeqCst) - before, 1);
}

#[test]
fn vary_selects_the_stored_representation() {
    let lang = Obj {
        cache_control: "max-age=600",
        echo: Some("accept-language"),
        extra: vec![("vary", "Accept-Language")],
        ..Obj::default()
    };
    let origin = start_origin(HashMap::from([("/lang", lang)]));
    let t = tier(&origin, &[]);
    for l in ["en", "fr", "en", "fr", "en"] {
        let g = get(&t.addr, "/lang", &[("accept-language", l)], None);
        assert_eq!(g.body, l.as_bytes());
        assert_eq!(g.headers.get("vary").map(String::as_str), Some("Accept-Language"));
    }
}

#[test]
fn small_objects_are_hits_until_stale_then_revalidated_with_the_etag() {
    let data = pattern(1024, 4);
    let small = Obj { data: data.clone(), cache_control: "max-age=1", ..Obj::default() };
    let origin = start_origin(HashMap::from([("/small", small)]));
    let t = tier(&origin, &[]);
    for _ in 0..50 {
        let g = get(&t.addr, "/small", &[], None);
        assert_eq!((g.status, g.body.as_slice()), (200, data.as_slice()));
    }
    assert_eq!(origin.counters.requests.load(Ordering::SeqCst), 1, "50 requests, one origin fetch");
    let g = get(&t.addr, "/small", &[("if-none-match", ETAG)], None);
    assert_eq!(g.status, 304);
    thread::sleep(Duration::from_millis(2100));
    let g = get(&t.addr, "/small", &[], None);
    assert_eq!((g.status, g.body.as_slice()), (200, data.as_slice()));
    assert_eq!(origin.counters.not_modified.load(Ordering::SeqCst), 1, "stale copy revalidated by a 304");
    assert_eq!(origin.counters.body_bytes.load(Ordering::SeqCst), 1024, "the body came once");
    let r = get(&t.addr, "/small", &[("range", "bytes=10-19")], None);
    assert_eq!((r.status, r.body.as_slice()), (206, &data[10..20]));
}

#[test]
fn pipelined_hits_answered_before_hyper_match_the_full_path_and_hand_over_in_order() {
    let (a, b) = (pattern(1024, 5), pattern(10 * 1024, 6));
    let cc = "max-age=60";
    let objects = HashMap::from([
        ("/a", Obj { data: a.clone(), cache_control: cc, ..Obj::default() }),
        ("/b", Obj { data: b.clone(), cache_control: cc, extra: vec![("vary", "accept-encoding")], ..Obj::default() }),
    ]);
    let origin = start_origin(objects);
    let t = tier(&origin, &[]);
    // Misses, through hyper (connection: close), which store both objects.
    let full = get(&t.addr, "/a", &[], None);
    assert_eq!((full.status, full.body.as_slice()), (200, a.as_slice()));
    assert_eq!(get(&t.addr, "/b", &[], None).body, *b);

    // One keep-alive connection, everything pipelined in one write: hits
    // (the lane's), then a request that Vary does not let the stored /b
    // answer (hyper's from there on, and an origin fetch), then a range
    // and hits, through hyper.
    let mut s = TcpStream::connect(&t.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let req = |line: &str, extra: &str| format!("{line} HTTP/1.1\r\nhost: t\r\n{extra}\r\n");
    let burst = [
        req("GET /a", ""),
        req("GET /b", "connection: keep-alive\r\n"),
        req("HEAD /a", ""),
        req("GET /b", "accept-encoding: gzip\r\n"),
        req("GET /a", "range: bytes=3-9\r\n"),
        req("GET /a", ""),
        req("GET /a", "connection: close\r\n"),
    ]
    .concat();
    s.write_all(burst.as_bytes()).unwrap();
    let mut r = BufReader::new(s);
    let responses: Vec<_> =
        [false, false, true, false, false, false, false].map(|head| common::read_response(&mut r, head)).into();
    let bodies: Vec<(u16, &[u8])> = responses.iter().map(|(st, _, body)| (*st, body.as_slice())).collect();
    let (a, b) = (&a[..], &b[..]);
    assert_eq!(bodies, [(200, a), (200, b), (200, &[][..]), (200, b), (206, &a[3..10]), (200, a), (200, a)]);
    // The lane's answers carry the same fields as hyper's full path on the
    // same connection (Age and Date may have ticked: a second boundary can
    // fall between the two answers).
    let without_clock = |h: &HashMap<String, String>| {
        let mut h = h.clone();
        h.remove("age").expect("an age field");
        h.remove("date").expect("a date field");
        h
    };
    assert_eq!(without_clock(&responses[0].1), without_clock(&responses[5].1));
    assert_eq!(responses[1].1["vary"], "accept-encoding");
    assert_eq!(responses[0].1["etag"], full.headers["etag"]);
    assert_eq!(responses[2].1["content-length"], "1024", "HEAD gives the length of the whole object");
    let mut rest = Vec::new();
    r.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "connection: close ends the connection after its answer");
    assert_eq!(origin.counters.requests.load(Ordering::SeqCst), 3, "two misses, one for another /b; the rest hits");
}

/// What a native reader saw: the response's content type, the order the
/// blocks came in (each checked against the manifest), and the bytes put
/// together.
#[derive(Debug, Default)]
struct NativeGot {
    content_type: String,
    order: Vec<u32>,
    data: Vec<u8>,
    ended: bool,
    error: Option<(circus_proto::ErrorCode, String)>,
}

/// A native GET over HTTP/1.0 (so the body is the stream itself, not
/// chunked), read `pace` apart per 64 KiB; `progress` counts the blocks
/// received so far.
fn get_native(addr: &str, path: &str, pace: Duration, progress: &AtomicU64) -> NativeGot {
    use circus_proto::{Decoder, Frame};
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let req = format!("GET {path} HTTP/1.0\r\naccept: {}\r\n\r\n", circus_proto::CONTENT_TYPE);
    s.write_all(req.as_bytes()).unwrap();
    let mut r = BufReader::new(s);
    let (_, headers) = common::read_head(&mut r);
    let mut got =
        NativeGot { content_type: headers.get("content-type").cloned().unwrap_or_default(), ..Default::default() };
    let mut body = Vec::new();
    if got.content_type != circus_proto::CONTENT_TYPE {
        r.read_to_end(&mut body).unwrap();
        got.data = body;
        return got;
    }
    let (mut decoder, mut buf, mut manifest) = (Decoder::new(), bytes::BytesMut::new(), None);
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        thread::sleep(pace);
        let n = r.read(&mut chunk).unwrap_or(0);
        buf.extend_from_slice(&chunk[..n]);
        while let Some(frame) = decoder.decode(&mut buf).unwrap() {
            match frame {
                Frame::Manifest(m) => {
                    got.data = vec![0; m.file_size as usize];
                    manifest = Some(m);
                }
                Frame::Block(b) => {
                    let b = manifest.as_ref().unwrap().check_block(b).expect("every block matches its leaf");
                    got.data[b.offset() as usize..][..b.data().len()].copy_from_slice(b.data());
                    got.order.push(b.index());
                    progress.fetch_add(1, Ordering::SeqCst);
                }
                Frame::End => got.ended = true,
                Frame::Error { code, message } => got.error = Some((code, message)),
                Frame::Unknown { .. } => {}
            }
        }
        if n == 0 {
            return got;
        }
    }
}

#[test]
fn native_clients_of_an_origin_object_share_out_of_order_reads_once_its_tree_is_known() {
    let size = 24 << 20;
    let data = pattern(size, 7);
    let obj = Obj { data: data.clone(), cache_control: "max-age=600", ..Obj::default() };
    let origin = start_origin(HashMap::from([("/big.bin", obj)]));
    // The tier keeps less than the object: native reads go back to the origin.
    let t = tier(&origin, &["--cache", "16MiB", "--origin-block", "256KiB"]);
    let none = AtomicU64::new(0);

    // The tree is learnt from the first pass: until then a native client
    // gets the plain object (the protocol's fallback), whole and exact.
    let first = get_native(&t.addr, "/big.bin", Duration::ZERO, &none);
    assert_ne!(first.content_type, circus_proto::CONTENT_TYPE);
    assert!(first.data == *data, "the plain fallback differs from the object");
    let after_first = origin.counters.body_bytes.load(Ordering::SeqCst);

    // Now natively: a slow client, then three fast ones joining a third of
    // the way in, which the scheduler starts where the slow one's blocks
    // are in memory and serves from shared reads.
    let progress = Arc::new(AtomicU64::new(0));
    let slow = {
        let (addr, progress) = (t.addr.clone(), progress.clone());
        thread::spawn(move || get_native(&addr, "/big.bin", Duration::from_millis(10), &progress))
    };
    let blocks = (size / (64 << 10)) as u64;
    let started = Instant::now();
    while progress.load(Ordering::SeqCst) < blocks / 3 {
        assert!(started.elapsed() < Duration::from_secs(60), "the slow native client made no progress");
        thread::sleep(Duration::from_millis(5));
    }
    let fast: Vec<_> = (0..3)
        .map(|_| {
            let addr = t.addr.clone();
            thread::spawn(move || get_native(&addr, "/big.bin", Duration::ZERO, &AtomicU64::new(0)))
        })
        .collect();
    let fast: Vec<NativeGot> = fast.into_iter().map(|f| f.join().unwrap()).collect();
    let slow = slow.join().unwrap();
    for (i, g) in std::iter::once(&slow).chain(&fast).enumerate() {
        assert_eq!(g.content_type, circus_proto::CONTENT_TYPE, "client {i}");
        assert!(g.ended && g.error.is_none(), "client {i}: {:?}", g.error);
        assert_eq!(g.order.len() as u64, blocks, "client {i}: each block once");
        assert!(g.data == *data, "client {i}: wrong bytes");
    }
    assert!(fast.iter().all(|g| g.order[0] != 0), "a late client started at block 0 rather than in the shared region");
    let native_bytes = origin.counters.body_bytes.load(Ordering::SeqCst) - after_first;
    eprintln!(
        "first pass {:.2} x size, four native clients {:.2} x size; late clients' first blocks {:?}",
        after_first as f64 / size as f64,
        native_bytes as f64 / size as f64,
        fast.iter().map(|g| g.order[0]).collect::<Vec<_>>()
    );
    // Sharing: four downloads through a cache smaller than the object cost
    // far less than four reads of it (each late client must still get the
    // third that left memory before it came).
    assert!((native_bytes as f64) < 2.5 * size as f64, "{native_bytes} origin bytes for four native downloads");
}

#[test]
fn an_origin_object_replaced_under_native_clients_ends_their_streams_with_an_error() {
    let size = 8 << 20;
    let (v1, v2) = (pattern(size, 8), pattern(size, 9));
    // The tier keeps less than the object, so the native pass fetches
    // blocks again (at least 3 MiB); the origin publishes v2 once 1 MiB of
    // that pass has gone out.
    let switch = Arc::new(AtomicU64::new(u64::MAX));
    let obj = Obj {
        data: v1.clone(),
        cache_control: "max-age=600",
        replaced_after: Some((switch.clone(), v2.clone())),
        ..Obj::default()
    };
    let origin = start_origin(HashMap::from([("/obj.bin", obj)]));
    let t = tier(&origin, &["--cache", "8MiB", "--origin-block", "256KiB"]);
    let none = AtomicU64::new(0);
    let first = get_native(&t.addr, "/obj.bin", Duration::ZERO, &none);
    assert!(first.data == *v1, "the plain first pass differs from v1");
    switch.store(origin.counters.body_bytes.load(Ordering::SeqCst) + (1 << 20), Ordering::SeqCst);
    let g = get_native(&t.addr, "/obj.bin", Duration::from_millis(2), &none);
    assert_eq!(g.content_type, circus_proto::CONTENT_TYPE);
    assert!(!g.ended, "a native stream ended as complete although its object changed at the origin");
    let (code, message) = g.error.expect("the stream should end with an ERROR frame");
    assert_eq!(code, circus_proto::ErrorCode::FILE_CHANGED, "{message}: a client must start over, not give up");
}

#[test]
fn no_spelling_of_a_target_leaves_the_origin_prefix() {
    let secret = Obj { data: Arc::new(b"SECRET=1".to_vec()), cache_control: "max-age=60", ..Obj::default() };
    let fine = Obj { data: Arc::new(b"fine".to_vec()), cache_control: "max-age=60", ..Obj::default() };
    let origin = start_origin(HashMap::from([("/.env", secret), ("/sub/ok.txt", fine)]));
    let url = format!("http://{}/sub/", origin.addr);
    let s = common::serve(&["--origin", url.as_str()]);
    let ok = get(&s.addr, "/ok.txt", &[], None);
    assert_eq!((ok.status, ok.body.as_slice()), (200, &b"fine"[..]));
    for target in
        ["/../.env", "/%2e%2e/.env", "/.%2E/.env", "/..%2f.env", "/ok.txt/../../.env", "/a/..%2F..%2F.env", "/..\\.env"]
    {
        let got = get(&s.addr, target, &[], None);
        assert!(
            !String::from_utf8_lossy(&got.body).contains("SECRET"),
            "{target}: the origin's /.env came through ({})",
            got.status
        );
        assert!(got.status == 400 || got.status == 404, "{target}: {}", got.status);
    }
}
