//! Servers that misbehave on purpose, scripted on raw sockets: a download
//! must fail fast with an error that blames the server, never allocate or
//! wait on a server's say-so, and ride out answers that only mean "later".

mod common;

use circus_client::{GetError, GetOptions, download};
use circus_proto::{CONTENT_TYPE, HashTree, MANIFEST_FIXED_LEN, PREAMBLE, compute_root};
use common::{
    litter,
    raw::{self, Reply},
};
use std::time::{Duration, Instant};

const NATIVE: &str = "content-type: application/vnd.circus.blocks";

fn opts(url: String, output: &std::path::Path) -> GetOptions {
    let mut o = GetOptions::new(url, output);
    o.backoff = Duration::from_millis(20);
    // Long enough that a client waiting on the server is plainly seen.
    o.timeout = Duration::from_secs(10);
    o
}

/// A native body: the preamble and a MANIFEST written field by field, with
/// `claimed_len` in its header (default: its true length).
fn manifest_body(file_size: u64, block_size: u32, leaves: &[[u8; 32]], claimed_len: Option<u32>) -> Vec<u8> {
    let etag = b"\"v1\"";
    let len = MANIFEST_FIXED_LEN + etag.len() + 32 * leaves.len();
    let mut v = PREAMBLE.to_vec();
    v.push(1);
    v.extend_from_slice(&claimed_len.unwrap_or(len as u32).to_be_bytes());
    v.extend_from_slice(&file_size.to_be_bytes());
    v.extend_from_slice(&block_size.to_be_bytes());
    v.extend_from_slice(&(leaves.len() as u32).to_be_bytes());
    v.extend_from_slice(&compute_root(leaves));
    v.extend_from_slice(&[0; 32]);
    v.extend_from_slice(&(etag.len() as u16).to_be_bytes());
    v.extend_from_slice(etag);
    leaves.iter().for_each(|l| v.extend_from_slice(l));
    v
}

#[tokio::test]
async fn invalid_manifests_fail_at_once_and_blame_the_server() {
    assert_eq!(CONTENT_TYPE, NATIVE.split(": ").nth(1).unwrap());
    let two = [HashTree::leaf_hash(b"a"), HashTree::leaf_hash(b"b")];
    let one = &two[..1];
    let fixed_only = 4 + 5 + MANIFEST_FIXED_LEN;
    struct Case {
        what: &'static str,
        body: Vec<u8>,
    }
    let cases = [
        // Consistent, but each block would be buffered whole: 4 GiB.
        Case { what: "a 4 GiB block", body: manifest_body(2 * u64::from(u32::MAX), u32::MAX, &two, None) },
        Case { what: "a block over 64 MiB", body: manifest_body(2 * (64 << 20) + 2, (64 << 20) + 1, &two, None) },
        // A frame claiming 64 MiB of leaves for a one-block file, and a
        // leaf count the geometry does not have; both stall after the
        // fixed part, so only a check of that part ends them early.
        Case {
            what: "a length the fields do not describe",
            body: manifest_body(1, 1, one, Some(64 << 20))[..fixed_only].to_vec(),
        },
        Case { what: "a leaf count the geometry lacks", body: manifest_body(5, 1, one, None)[..fixed_only].to_vec() },
    ];
    for Case { what, body } in cases {
        let (addr, requests) = raw::serve(move |_, _| Reply::stall("200 OK", &[NATIVE], &body)).await;
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("f");
        let started = Instant::now();
        let err = download(&opts(format!("http://{addr}/f"), &out), &()).await.unwrap_err();
        assert!(matches!(err, GetError::InvalidManifest { .. }), "{what}: {err}");
        assert!(err.to_string().contains("invalid manifest"), "{what}: {err}");
        assert!(!err.retry_may_help(), "{what}");
        assert!(started.elapsed() < Duration::from_secs(5), "{what}: took {:?}", started.elapsed());
        assert_eq!(requests.lock().unwrap().len(), 1, "{what}: a broken server is not asked again");
        assert!(litter(&out).is_empty(), "{what}: {:?}", litter(&out));
    }
}

#[tokio::test]
async fn service_unavailable_is_retried_until_the_server_serves() {
    let body = common::data(100_000, 5);
    let served = body.clone();
    let (addr, requests) = raw::serve(move |n, _| match n {
        0 => Reply::close("503 Service Unavailable", &["content-length: 9"], b"indexing\n"),
        1 => Reply::close("503 Service Unavailable", &["content-length: 0"], b""),
        _ => Reply::close("200 OK", &[&format!("content-length: {}", served.len())], &served),
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("f");
    let mut o = opts(format!("http://{addr}/f"), &out);
    o.retries = 2;
    let report = download(&o, &()).await.unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), body);
    assert_eq!(report.reconnects, 2, "{report:?}");
    assert_eq!(requests.lock().unwrap().len(), 3);
}

#[tokio::test]
async fn retry_after_is_honoured() {
    let (addr, requests) = raw::serve(|n, _| match n {
        0 => Reply::close("503 Service Unavailable", &["retry-after: 1", "content-length: 0"], b""),
        _ => Reply::close("200 OK", &["content-length: 3"], b"abc"),
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("f");
    let started = Instant::now();
    download(&opts(format!("http://{addr}/f"), &out), &()).await.unwrap();
    // The backoff alone would have waited 20 ms.
    assert!(started.elapsed() >= Duration::from_millis(950), "{:?}", started.elapsed());
    assert_eq!(requests.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn service_unavailable_on_every_try_reports_the_status() {
    let (addr, requests) =
        raw::serve(|_, _| Reply::close("503 Service Unavailable", &["content-length: 5"], b"busy\n")).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("f");
    let mut o = opts(format!("http://{addr}/f"), &out);
    o.retries = 2;
    let err = download(&o, &()).await.unwrap_err();
    let GetError::Status { status, message } = &err else { panic!("{err}") };
    assert_eq!((status.as_u16(), message.as_str()), (503, "busy"));
    assert_eq!(requests.lock().unwrap().len(), 3, "the first try and two retries");
    assert!(litter(&out).is_empty());
}

#[tokio::test]
async fn a_body_cut_at_the_same_place_on_every_try_without_validators_gives_up() {
    // No ETag or Last-Modified: every try starts again from byte 0 and gets
    // as far as the last one did. That is no progress, so the retries run out.
    let (addr, requests) = raw::serve(|_, _| {
        let mut r = Reply::close("200 OK", &["content-length: 1000000"], &[7u8; 300_000]);
        // Close after the partial body: shorter than announced.
        r.hold = false;
        r
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("f");
    let mut o = opts(format!("http://{addr}/f"), &out);
    o.retries = 2;
    let started = Instant::now();
    let err =
        tokio::time::timeout(Duration::from_secs(20), download(&o, &())).await.expect("gave up in time").unwrap_err();
    assert!(matches!(err, GetError::Network { .. }), "{err}");
    let tries = requests.lock().unwrap().len();
    assert!(tries <= 4, "{tries} tries for retries = 2");
    assert!(started.elapsed() < Duration::from_secs(10));
}
