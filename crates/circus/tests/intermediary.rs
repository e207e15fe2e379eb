//! `circus serve --origin` as an HTTP intermediary (RFC 9110 §7.6, RFC 9111):
//! what reaches the origin and what reaches the client, through real
//! sockets. The origin here is scripted per test: it records every request
//! it receives (method, target, fields, body) and answers with the raw
//! response the script gives.

mod common;

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{TcpListener, TcpStream},
    sync::{Arc, Mutex},
    thread,
};

/// A request as the origin received it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    target: String,
    /// Names lowercased, in order.
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

type Script = dyn Fn(&Seen) -> Vec<u8> + Send + Sync;

struct ScriptedOrigin {
    addr: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl ScriptedOrigin {
    fn start(script: impl Fn(&Seen) -> Vec<u8> + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let script: Arc<Script> = Arc::new(script);
        let log = seen.clone();
        thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let (script, log) = (script.clone(), log.clone());
                thread::spawn(move || serve_conn(conn, &*script, &log));
            }
        });
        ScriptedOrigin { addr, seen }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Requests received for `target` with `method`.
    fn count(&self, method: &str, target: &str) -> usize {
        self.seen().iter().filter(|s| s.method == method && s.target == target).count()
    }

    fn tier(&self) -> common::ServerProc {
        let url = format!("http://{}/", self.addr);
        common::serve(&["--origin", url.as_str()])
    }
}

fn serve_conn(conn: TcpStream, script: &Script, log: &Mutex<Vec<Seen>>) -> Option<()> {
    let mut out = conn.try_clone().ok()?;
    let mut r = BufReader::new(conn);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let mut parts = line.split_whitespace();
        let (method, target) = (parts.next()?.to_owned(), parts.next()?.to_owned());
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            r.read_line(&mut h).ok()?;
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            let (n, v) = h.split_once(':')?;
            headers.push((n.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
        let field = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
        let mut body = Vec::new();
        if let Some(len) = field("content-length") {
            body.resize(len.parse().ok()?, 0);
            r.read_exact(&mut body).ok()?;
        } else if field("transfer-encoding").is_some_and(|t| t.contains("chunked")) {
            loop {
                let mut size = String::new();
                r.read_line(&mut size).ok()?;
                let n = usize::from_str_radix(size.trim(), 16).ok()?;
                let mut chunk = vec![0; n + 2];
                r.read_exact(&mut chunk).ok()?;
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..n]);
            }
        }
        let seen = Seen { method, target, headers, body };
        let response = script(&seen);
        log.lock().unwrap().push(seen);
        out.write_all(&response).ok()?;
    }
}

/// A raw response with a Content-Length for `body`.
fn response(status: &str, fields: &[(&str, &str)], body: &str) -> Vec<u8> {
    let mut s = format!("HTTP/1.1 {status}\r\n");
    for (n, v) in fields {
        s += &format!("{n}: {v}\r\n");
    }
    (s + &format!("content-length: {}\r\n\r\n{body}", body.len())).into_bytes()
}

/// What the client got.
#[derive(Debug)]
struct Answer {
    status: u16,
    /// Names lowercased; a field sent several times is joined by ", ".
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// One request on its own connection; the body is read to its end.
fn send(addr: &str, method: &str, target: &str, fields: &[(&str, &str)], body: &[u8]) -> Answer {
    let mut s = TcpStream::connect(addr).unwrap();
    let mut req = format!("{method} {target} HTTP/1.1\r\nhost: tier.test\r\nconnection: close\r\n");
    for (n, v) in fields {
        req += &format!("{n}: {v}\r\n");
    }
    if !body.is_empty() || method == "PUT" || method == "POST" {
        req += &format!("content-length: {}\r\n", body.len());
    }
    req += "\r\n";
    s.write_all(req.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut r = BufReader::new(s);
    let (status, fields) = common::read_fields(&mut r);
    let mut headers: Vec<(String, String)> = Vec::new();
    for (n, v) in fields {
        match headers.iter_mut().find(|(m, _)| *m == n) {
            Some((_, old)) => *old = format!("{old}, {v}"),
            None => headers.push((n, v)),
        }
    }
    let mut body = Vec::new();
    if method != "HEAD" {
        let _ = r.read_to_end(&mut body);
    }
    let chunked = headers.iter().any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    Answer { status, body: if chunked { dechunk(&body) } else { body }, headers }
}

/// A chunked body decoded (a cut one ends where it was cut).
fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = raw.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&raw[..eol]).ok().and_then(|s| usize::from_str_radix(s.trim(), 16).ok());
        let Some(n) = size.filter(|&n| n > 0) else { break };
        let chunk = &raw[eol + 2..];
        out.extend_from_slice(&chunk[..n.min(chunk.len())]);
        raw = chunk.get(n + 2..).unwrap_or(&[]);
    }
    out
}

fn get(addr: &str, target: &str, fields: &[(&str, &str)]) -> Answer {
    send(addr, "GET", target, fields, b"")
}

#[test]
fn every_end_to_end_field_is_relayed_and_stored_and_no_hop_by_hop_one_crosses() {
    let origin = ScriptedOrigin::start(|_| {
        response(
            "200 OK",
            &[
                ("cache-control", "max-age=3600"),
                ("etag", "\"a\""),
                ("link", "</style.css>; rel=preload"),
                ("content-disposition", "attachment; filename=\"doc.txt\""),
                ("access-control-allow-origin", "*"),
                ("strict-transport-security", "max-age=63072000"),
                ("x-custom", "kept"),
                ("connection", "x-hop"),
                ("x-hop", "per connection"),
                ("keep-alive", "timeout=5"),
            ],
            "the document",
        )
    });
    let tier = origin.tier();
    let fields = [("connection", "x-secret"), ("x-secret", "for the tier only"), ("x-app", "forwarded")];
    let miss = get(&tier.addr, "/doc", &fields);
    let hit = get(&tier.addr, "/doc", &fields);
    assert_eq!(origin.count("GET", "/doc"), 1, "the second answer is a hit");
    for (what, a) in [("miss", &miss), ("hit", &hit)] {
        assert_eq!((a.status, a.body.as_slice()), (200, &b"the document"[..]), "{what}");
        for (name, value) in [
            ("link", "</style.css>; rel=preload"),
            ("content-disposition", "attachment; filename=\"doc.txt\""),
            ("access-control-allow-origin", "*"),
            ("strict-transport-security", "max-age=63072000"),
            ("x-custom", "kept"),
        ] {
            assert_eq!(a.header(name), Some(value), "{what}: {name} relayed");
        }
        assert_eq!(a.header("x-hop"), None, "{what}: a field the origin's Connection named crossed");
        assert_eq!(a.header("keep-alive"), None, "{what}");
        assert!(a.header("via").is_some_and(|v| v.contains("circus")), "{what}: no Via: {:?}", a.headers);
    }
    let asked = &origin.seen()[0];
    assert_eq!(asked.header("x-secret"), None, "a field the client's Connection named reached the origin");
    assert_eq!(asked.header("x-app"), Some("forwarded"));
    assert!(asked.header("via").is_some_and(|v| v.contains("circus")), "no Via to the origin: {:?}", asked.headers);
}

#[test]
fn unsafe_methods_reach_the_origin_with_their_body_and_invalidate_what_is_stored() {
    let version = Arc::new(Mutex::new(1));
    let v = version.clone();
    let origin = ScriptedOrigin::start(move |req| match req.method.as_str() {
        "PUT" | "POST" | "DELETE" => {
            *v.lock().unwrap() += 1;
            let body = format!("{} {} bytes", req.method, req.body.len());
            response("201 Created", &[("location", "/doc"), ("x-written", "yes")], &body)
        }
        _ => {
            let body = format!("version {}", v.lock().unwrap());
            response("200 OK", &[("cache-control", "max-age=3600")], &body)
        }
    });
    let tier = origin.tier();
    assert_eq!(get(&tier.addr, "/doc", &[]).body, b"version 1");
    assert_eq!(get(&tier.addr, "/doc", &[]).body, b"version 1", "stored");
    assert_eq!(origin.count("GET", "/doc"), 1);

    let body = vec![7u8; 300_000];
    let put = send(&tier.addr, "PUT", "/doc", &[("content-type", "application/octet-stream")], &body);
    assert_eq!(put.status, 201, "{put:?}");
    assert_eq!(put.body, b"PUT 300000 bytes");
    assert_eq!((put.header("location"), put.header("x-written")), (Some("/doc"), Some("yes")));
    let at_origin = origin.seen().into_iter().find(|s| s.method == "PUT").expect("the PUT reached the origin");
    assert!(at_origin.body == body, "the PUT's body arrived changed ({} bytes)", at_origin.body.len());
    assert_eq!(at_origin.header("content-type"), Some("application/octet-stream"));

    assert_eq!(get(&tier.addr, "/doc", &[]).body, b"version 2", "a PUT invalidates the stored response");
    let post = send(&tier.addr, "POST", "/form?x=1", &[], b"a=b");
    assert_eq!((post.status, post.body.as_slice()), (201, &b"POST 3 bytes"[..]));
    assert_eq!(
        get(&tier.addr, "/doc", &[]).body,
        b"version 3",
        "a response's Location names a stored target: it is invalidated too"
    );
    assert_eq!(send(&tier.addr, "DELETE", "/doc", &[], b"").status, 201);
    assert_eq!(origin.count("DELETE", "/doc"), 1);
}

#[test]
fn every_origin_status_reaches_the_client_with_its_fields_and_body_in_one_origin_request() {
    let origin = ScriptedOrigin::start(|req| match req.target.as_str() {
        "/moved" => response("301 Moved Permanently", &[("location", "/new")], "moved"),
        "/found" => response("302 Found", &[("location", "/elsewhere"), ("cache-control", "no-store")], "found"),
        "/nothing" => response("204 No Content", &[("x-why", "empty")], ""),
        "/login" => response("401 Unauthorized", &[("www-authenticate", "Basic realm=\"r\"")], "who are you"),
        "/gone" => response("410 Gone", &[], "gone for good"),
        "/down" => response("503 Service Unavailable", &[("retry-after", "120")], "maintenance"),
        "/broken" => response("500 Internal Server Error", &[], "origin bug"),
        _ => response("404 Not Found", &[], "no such page"),
    });
    let tier = origin.tier();
    for (target, status, field, body) in [
        ("/moved", 301, Some(("location", "/new")), "moved"),
        ("/found", 302, Some(("location", "/elsewhere")), "found"),
        ("/nothing", 204, Some(("x-why", "empty")), ""),
        ("/login", 401, Some(("www-authenticate", "Basic realm=\"r\"")), "who are you"),
        ("/gone", 410, None, "gone for good"),
        ("/down", 503, Some(("retry-after", "120")), "maintenance"),
        ("/broken", 500, None, "origin bug"),
        ("/missing", 404, None, "no such page"),
    ] {
        let a = get(&tier.addr, target, &[]);
        assert_eq!(a.status, status, "{target}: {a:?}");
        assert_eq!(String::from_utf8_lossy(&a.body), body, "{target}: the origin's body");
        if let Some((name, value)) = field {
            assert_eq!(a.header(name), Some(value), "{target}");
        }
        assert_eq!(origin.count("GET", target), 1, "{target}: one client request, one origin request");
    }
}

#[test]
fn a_response_that_is_not_stored_is_fetched_once_per_request() {
    let origin = ScriptedOrigin::start(|req| {
        let body = format!("for {}", req.header("x-user").unwrap_or("nobody"));
        response("200 OK", &[("cache-control", "no-store")], &body)
    });
    let tier = origin.tier();
    for user in ["ann", "bob"] {
        let a = get(&tier.addr, "/me", &[("x-user", user)]);
        // The tier asks for its first block; all of the object was in it,
        // so the answer is that part as the whole response.
        assert_eq!((a.status, a.header("content-range")), (200, None), "{a:?}");
        assert_eq!(a.body, format!("for {user}").as_bytes());
    }
    assert_eq!(origin.count("GET", "/me"), 2, "a second fetch after the first block was no-store");
}

#[test]
fn a_page_for_one_cookie_is_never_served_to_another() {
    // No Cache-Control, no Vary: heuristically cacheable by its age, and
    // personal by its cookie, as many web applications answer.
    let origin = ScriptedOrigin::start(|req| {
        let who = req.header("cookie").unwrap_or("anonymous").to_owned();
        let set = format!("seen={who}");
        response("200 OK", &[("last-modified", "Mon, 01 Jan 2024 00:00:00 GMT"), ("set-cookie", &set)], &who)
    });
    let tier = origin.tier();
    assert_eq!(get(&tier.addr, "/account", &[("cookie", "user=ann")]).body, b"user=ann");
    assert_eq!(get(&tier.addr, "/account", &[("cookie", "user=bob")]).body, b"user=bob");
    let anonymous = get(&tier.addr, "/account", &[]);
    assert_eq!(anonymous.body, b"anonymous");
    assert_eq!(get(&tier.addr, "/account", &[("cookie", "user=cat")]).body, b"user=cat");
    assert_eq!(
        get(&tier.addr, "/account", &[]).header("set-cookie"),
        Some("seen=anonymous"),
        "a response with Set-Cookie is relayed to its own client, never stored for another"
    );
    assert_eq!(origin.count("GET", "/account"), 5);
}

#[test]
fn ranges_of_a_stored_object_without_validators_are_served_from_the_store() {
    let origin = ScriptedOrigin::start(|req| {
        assert!(req.header("range").is_none_or(|r| r.starts_with("bytes=0-")), "only the tier's first block");
        response("200 OK", &[("cache-control", "max-age=3600")], "0123456789")
    });
    let tier = origin.tier();
    assert_eq!(get(&tier.addr, "/plain", &[]).body, b"0123456789");
    let part = get(&tier.addr, "/plain", &[("range", "bytes=2-4")]);
    assert_eq!((part.status, part.body.as_slice()), (206, &b"234"[..]), "{part:?}");
    assert_eq!(part.header("content-range"), Some("bytes 2-4/10"));
    let guarded = get(&tier.addr, "/plain", &[("range", "bytes=2-4"), ("if-range", "\"x\"")]);
    assert_eq!((guarded.status, guarded.body.len()), (200, 10), "If-Range cannot match an object without validators");
    assert_eq!(origin.count("GET", "/plain"), 1);
}

#[test]
fn several_representations_of_one_target_are_stored_side_by_side() {
    let origin = ScriptedOrigin::start(|req| {
        let body = match req.header("accept-language") {
            Some("fr") => "bonjour",
            Some("de") => "hallo",
            _ => "hello",
        };
        response("200 OK", &[("cache-control", "max-age=3600"), ("vary", "Accept-Language")], body)
    });
    let tier = origin.tier();
    for _ in 0..3 {
        for (lang, body) in [("en", "hello"), ("fr", "bonjour"), ("de", "hallo")] {
            let a = get(&tier.addr, "/greeting", &[("accept-language", lang)]);
            assert_eq!(String::from_utf8_lossy(&a.body), body, "{lang}");
        }
    }
    assert_eq!(origin.count("GET", "/greeting"), 3, "one origin request per representation");
}

#[test]
fn statuses_other_than_200_are_stored_where_rfc_9111_allows() {
    let old = ("last-modified", "Mon, 01 Jan 2024 00:00:00 GMT");
    let origin = ScriptedOrigin::start(move |req| match req.target.as_str() {
        "/moved" => response("301 Moved Permanently", &[("location", "/new"), old], "moved"),
        "/gone" => response("410 Gone", &[old], "gone"),
        "/missing" => response("404 Not Found", &[("cache-control", "max-age=60")], "no such page"),
        "/temporary" => response("302 Found", &[("location", "/x"), old], "not heuristically cacheable"),
        "/teapot" => response("418 I'm a teapot", &[("cache-control", "max-age=60")], "explicitly fresh"),
        _ => response("500 Internal Server Error", &[old], "never stored"),
    });
    let tier = origin.tier();
    for (target, status, origin_requests) in [
        ("/moved", 301, 1),
        ("/gone", 410, 1),
        ("/missing", 404, 1),
        ("/teapot", 418, 1),
        ("/temporary", 302, 3),
        ("/error", 500, 3),
    ] {
        for _ in 0..3 {
            let a = get(&tier.addr, target, &[]);
            assert_eq!(a.status, status, "{target}: {a:?}");
            assert!(!a.body.is_empty(), "{target}: the body");
        }
        let head = send(&tier.addr, "HEAD", target, &[], b"");
        assert_eq!(head.status, status, "{target}: HEAD");
        assert_eq!(origin.count("GET", target), origin_requests + usize::from(origin_requests > 1), "{target}");
    }
    let moved = get(&tier.addr, "/moved", &[]);
    assert_eq!((moved.header("location"), moved.body.as_slice()), (Some("/new"), &b"moved"[..]));
    assert!(moved.header("age").is_some(), "a stored response carries Age");
}

#[test]
fn stale_responses_are_served_only_as_the_origin_and_the_request_allow() {
    // Each answer is already stale on arrival (Age beyond max-age).
    let n = Arc::new(Mutex::new(0));
    let count = n.clone();
    let origin = ScriptedOrigin::start(move |req| {
        let mut n = count.lock().unwrap();
        *n += 1;
        let stale = [("age", "100"), ("cache-control", "max-age=60, stale-while-revalidate=3600")];
        match req.target.as_str() {
            "/swr" => response("200 OK", &stale, &format!("swr {n}")),
            "/sie" if *n > 1 => response("503 Service Unavailable", &[], "down"),
            "/sie" => {
                response("200 OK", &[("age", "100"), ("cache-control", "max-age=60, stale-if-error=3600")], "sie")
            }
            _ => response("200 OK", &[("age", "100"), ("cache-control", "max-age=60")], "plain"),
        }
    });
    let tier = origin.tier();
    assert_eq!(get(&tier.addr, "/swr", &[]).body, b"swr 1");
    assert_eq!(get(&tier.addr, "/swr", &[]).body, b"swr 1", "stale-while-revalidate serves the stored one");
    let waited = std::time::Instant::now();
    while origin.count("GET", "/swr") < 2 {
        assert!(waited.elapsed().as_secs() < 5, "no revalidation in the background");
        thread::sleep(std::time::Duration::from_millis(20));
    }

    *n.lock().unwrap() = 0;
    assert_eq!(get(&tier.addr, "/sie", &[]).body, b"sie");
    let a = get(&tier.addr, "/sie", &[]);
    assert_eq!((a.status, a.body.as_slice()), (200, &b"sie"[..]), "stale-if-error stands in for a 503");

    assert_eq!(get(&tier.addr, "/plain", &[]).body, b"plain");
    assert_eq!(get(&tier.addr, "/plain", &[("cache-control", "max-stale=3600")]).body, b"plain");
    assert_eq!(origin.count("GET", "/plain"), 1, "max-stale accepts the stored response");
    get(&tier.addr, "/plain", &[]);
    assert_eq!(origin.count("GET", "/plain"), 2, "without it the stale response is fetched again");
    assert_eq!(get(&tier.addr, "/never", &[("cache-control", "only-if-cached")]).status, 504);
    assert_eq!(origin.count("GET", "/never"), 0);
}

#[test]
fn a_wrong_digest_on_an_object_sent_in_one_response_is_relayed_not_enforced() {
    // One block comes from one response: nothing can be spliced, and the
    // field is the origin's to send (caches store Content-MD5 as they get it).
    let origin = ScriptedOrigin::start(|_| {
        response("200 OK", &[("cache-control", "max-age=3600"), ("content-md5", "N7UdGUp1E+RbVvZSTy1R8g==")], "body")
    });
    let tier = origin.tier();
    for _ in 0..2 {
        let a = get(&tier.addr, "/md5", &[]);
        assert_eq!((a.body.as_slice(), a.header("content-md5")), (&b"body"[..], Some("N7UdGUp1E+RbVvZSTy1R8g==")));
    }
    assert_eq!(origin.count("GET", "/md5"), 1);
}

/// A raw response whose body is sent chunked, in `pieces`.
fn chunked(fields: &[(&str, &str)], pieces: &[&[u8]]) -> Vec<u8> {
    let mut s = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n".to_vec();
    for (n, v) in fields {
        s.extend_from_slice(format!("{n}: {v}\r\n").as_bytes());
    }
    s.extend_from_slice(b"\r\n");
    for p in pieces {
        s.extend_from_slice(format!("{:x}\r\n", p.len()).as_bytes());
        s.extend_from_slice(p);
        s.extend_from_slice(b"\r\n");
    }
    s.extend_from_slice(b"0\r\n\r\n");
    s
}

#[test]
fn responses_without_a_length_are_stored_when_they_fit_a_block_and_relayed_whole_when_not() {
    let large: Vec<u8> = (0..1_500_000u32).map(|i| (i % 249) as u8).collect();
    let big = large.clone();
    let origin = ScriptedOrigin::start(move |req| {
        let fresh = [("cache-control", "max-age=3600")];
        match req.target.as_str() {
            "/small" => chunked(&fresh, &[b"hello ", b"chunked ", b"world"]),
            _ => chunked(&fresh, &big.chunks(100_000).collect::<Vec<_>>()),
        }
    });
    let tier = origin.tier();
    for _ in 0..2 {
        let a = get(&tier.addr, "/small", &[]);
        assert_eq!((a.status, a.body.as_slice()), (200, &b"hello chunked world"[..]), "{a:?}");
        assert_eq!(a.header("transfer-encoding").filter(|t| t.contains(',')), None, "framing relayed twice");
    }
    assert_eq!(origin.count("GET", "/small"), 1, "a small response without a length is stored");
    let a = get(&tier.addr, "/large", &[]);
    assert!(a.status == 200 && a.body == large, "{} bytes relayed, not the body", a.body.len());
}

#[test]
fn a_content_range_on_a_whole_200_is_an_ordinary_field() {
    let origin = ScriptedOrigin::start(|_| {
        response("200 OK", &[("cache-control", "max-age=3600"), ("content-range", "ananananananana")], "whole")
    });
    let tier = origin.tier();
    for _ in 0..2 {
        let a = get(&tier.addr, "/odd", &[]);
        assert_eq!((a.body.as_slice(), a.header("content-range")), (&b"whole"[..], Some("ananananananana")));
    }
    assert_eq!(origin.count("GET", "/odd"), 1);
}

#[test]
fn a_head_relayed_to_the_origin_is_sent_as_a_head() {
    let origin = ScriptedOrigin::start(|req| match req.method.as_str() {
        "HEAD" => b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nx-seen: head\r\n\r\n".to_vec(),
        _ => response("200 OK", &[("x-seen", "get")], "hello"),
    });
    let tier = origin.tier();
    // A request with credentials is relayed, not answered from the store.
    let a = send(&tier.addr, "HEAD", "/private", &[("authorization", "Bearer t")], b"");
    assert_eq!((a.status, a.header("x-seen"), a.header("content-length")), (200, Some("head"), Some("5")), "{a:?}");
    assert_eq!((origin.count("HEAD", "/private"), origin.count("GET", "/private")), (1, 0));
}

/// `bytes=A-B` or `bytes=A-` of an object of `size` bytes.
fn asked_range(range: Option<&str>, size: usize) -> Option<(usize, usize)> {
    let (a, b) = range?.strip_prefix("bytes=")?.split_once('-')?;
    let a: usize = a.parse().ok()?;
    let b = if b.is_empty() { size - 1 } else { b.parse::<usize>().ok()?.min(size - 1) };
    Some((a, b))
}

#[test]
fn a_large_private_object_is_relayed_from_its_first_answer_and_no_byte_is_fetched_twice() {
    let size = (5 << 20) / 2;
    let body: Vec<u8> = (0..size).map(|i| (i * 31 % 251) as u8).collect();
    let served = body.clone();
    let origin = ScriptedOrigin::start(move |req| {
        let fields = [("cache-control", "private"), ("etag", "\"v1\""), ("content-type", "application/x-test")];
        let mut head = String::new();
        for (n, v) in fields {
            head += &format!("{n}: {v}\r\n");
        }
        let (status, part) = match asked_range(req.header("range"), size) {
            Some((a, b)) => {
                head += &format!("content-range: bytes {a}-{b}/{size}\r\n");
                ("206 Partial Content", &served[a..=b])
            }
            None => ("200 OK", &served[..]),
        };
        let mut out = format!("HTTP/1.1 {status}\r\n{head}content-length: {}\r\n\r\n", part.len()).into_bytes();
        out.extend_from_slice(part);
        out
    });
    let tier = origin.tier();
    let a = get(&tier.addr, "/private.bin", &[]);
    assert_eq!((a.status, a.header("content-range")), (200, None), "{:?}", a.headers);
    assert_eq!(a.header("cache-control"), Some("private"));
    assert!(a.body == body, "the whole object, in order ({} of {size} bytes)", a.body.len());
    let ranges: Vec<Option<String>> = origin.seen().iter().map(|s| s.header("range").map(str::to_owned)).collect();
    assert_eq!(ranges, [Some("bytes=0-1048575".to_owned()), Some("bytes=1048576-".to_owned())], "{ranges:?}");
}

#[test]
fn the_rest_of_a_relayed_private_object_from_another_version_cuts_the_body() {
    let size = 3 << 20;
    let origin = ScriptedOrigin::start(move |req| {
        // Ignores If-Match, and the object changes after the first part.
        let (a, b) = asked_range(req.header("range"), size).unwrap_or((0, size - 1));
        let (etag, byte) = if a == 0 { ("\"v1\"", b'1') } else { ("\"v2\"", b'2') };
        let head = format!(
            "HTTP/1.1 206 Partial Content\r\ncache-control: private\r\netag: {etag}\r\ncontent-range: bytes {a}-{b}/{size}\r\ncontent-length: {}\r\n\r\n",
            b - a + 1
        );
        [head.into_bytes(), vec![byte; b - a + 1]].concat()
    });
    let tier = origin.tier();
    let a = get(&tier.addr, "/changing.bin", &[]);
    assert_eq!(a.status, 200);
    assert!(a.body.len() < size, "a body of two versions passed as whole");
    assert!(a.body.iter().all(|&b| b == b'1'), "bytes of the second version were sent");
}

#[test]
fn the_rest_of_a_relayed_private_object_may_come_as_a_whole_200() {
    let size = 3 << 20;
    let body: Vec<u8> = (0..size).map(|i| (i * 7 % 253) as u8).collect();
    let served = body.clone();
    let origin = ScriptedOrigin::start(move |req| {
        // Answers the first block as asked, then ignores Range.
        let head = "cache-control: private\r\netag: \"v1\"\r\n";
        match asked_range(req.header("range"), size).filter(|&(a, _)| a == 0) {
            Some((a, b)) => {
                let part = &served[a..=b];
                let fields = format!("{head}content-range: bytes {a}-{b}/{size}\r\ncontent-length: {}\r\n", part.len());
                [format!("HTTP/1.1 206 Partial Content\r\n{fields}\r\n").into_bytes(), part.to_vec()].concat()
            }
            None => [format!("HTTP/1.1 200 OK\r\n{head}content-length: {size}\r\n\r\n").into_bytes(), served.clone()]
                .concat(),
        }
    });
    let tier = origin.tier();
    let a = get(&tier.addr, "/ignores-range.bin", &[]);
    assert_eq!(a.status, 200);
    assert!(a.body == body, "the whole object, in order ({} of {size} bytes)", a.body.len());
    assert_eq!(origin.count("GET", "/ignores-range.bin"), 2);
}
