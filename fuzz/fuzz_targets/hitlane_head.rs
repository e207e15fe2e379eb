//! The hit lane's handling of request heads (`circus_server`'s hitlane,
//! through `fuzzing::answer_for_fuzzing`) on untrusted bytes. Its source
//! answers every target but those containing "miss".
//!
//! Properties, checked against an independent httparse parse of the same
//! bytes: each request the lane offered to its source is a whole head that
//! httparse reads with the same method (GET or HEAD), path, version 1.1 and
//! header fields; only neutral fields and exactly one valid Host; the
//! answered requests are exactly the bytes consumed, in order; the lane
//! stops at the first request it does not answer, hands off only what it
//! may not answer (never a head merely incomplete), and waits otherwise;
//! it reads nothing past an answered `Connection: close`.

#![no_main]

use circus_http::rfc9110::host_ok;
use circus_server::fuzzing::answer_for_fuzzing;
use libfuzzer_sys::fuzz_target;

const NEUTRAL: [&str; 7] = ["host", "user-agent", "accept", "accept-encoding", "accept-language", "connection", "te"];
const MAX_HEADERS: usize = 32;

fn hit(target: &str) -> bool {
    !target.contains("miss")
}

/// What httparse makes of the head at the front of `bytes`, and whether
/// the lane may answer it (before asking its source).
enum Parse {
    Partial,
    Error,
    Complete {
        len: usize,
        method: String,
        path: String,
        headers: Vec<(String, Vec<u8>)>,
        lane_may_answer: bool,
        /// It says `Connection: close`: nothing after it is read.
        closes: bool,
    },
}

fn parse(bytes: &[u8]) -> Parse {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(bytes) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Parse::Partial,
        Err(_) => return Parse::Error,
    };
    let method = req.method.unwrap_or_default().to_owned();
    let path = req.path.unwrap_or_default().to_owned();
    let neutral = |h: &httparse::Header<'_>| {
        NEUTRAL.iter().any(|n| n.eq_ignore_ascii_case(h.name))
            && (!h.name.eq_ignore_ascii_case("connection")
                || h.value.eq_ignore_ascii_case(b"keep-alive")
                || h.value.eq_ignore_ascii_case(b"close"))
    };
    let closes =
        req.headers.iter().any(|h| h.name.eq_ignore_ascii_case("connection") && h.value.eq_ignore_ascii_case(b"close"));
    let hosts = req.headers.iter().filter(|h| h.name.eq_ignore_ascii_case("host")).map(|h| h.value);
    let lane_may_answer = matches!(&method[..], "GET" | "HEAD")
        && req.version == Some(1)
        && path.starts_with('/')
        && req.headers.iter().all(neutral)
        && host_ok(hosts);
    let headers = req.headers.iter().map(|h| (h.name.to_owned(), h.value.to_vec())).collect();
    Parse::Complete { len, method, path, headers, lane_may_answer, closes }
}

fuzz_target!(|data: &[u8]| {
    let outcome = answer_for_fuzzing(data, hit);
    let mut at = 0;
    for (i, offered) in outcome.offered.iter().enumerate() {
        let Parse::Complete { len, method, path, headers, lane_may_answer, closes } = parse(&data[at..]) else {
            panic!("request {i} at byte {at} offered but not a whole head");
        };
        assert!(lane_may_answer, "request {i} ({method} {path}) should have gone to hyper");
        assert_eq!((&method[..], &path), (if offered.head { "HEAD" } else { "GET" }, &offered.target));
        assert_eq!(headers, offered.headers);
        assert_eq!(offered.answered, hit(&path));
        let last = i + 1 == outcome.offered.len();
        assert!(offered.answered || (last && outcome.handed_off), "went on past a request it did not answer");
        if offered.answered {
            at += len;
        }
        if offered.answered && closes {
            assert!(last && outcome.closed, "went on past a request to close");
        }
    }
    assert_eq!(at, outcome.consumed, "consumed bytes are not the answered requests");
    if outcome.closed {
        assert!(!outcome.handed_off, "closed and handed off");
        return;
    }

    let rest = &data[at..];
    let refused = outcome.offered.last().is_some_and(|o| !o.answered);
    match parse(rest) {
        _ if rest.is_empty() => assert!(!outcome.handed_off, "handed off with nothing left"),
        Parse::Partial => assert!(!outcome.handed_off, "handed off an incomplete head"),
        Parse::Error => assert!(outcome.handed_off, "waits on a head httparse refuses"),
        Parse::Complete { lane_may_answer, path, .. } => {
            assert!(outcome.handed_off, "stopped before a whole head");
            assert_eq!(refused, lane_may_answer, "{path:?}: offered {refused}, answerable {lane_may_answer}");
        }
    }
});
