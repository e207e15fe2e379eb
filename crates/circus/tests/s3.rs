//! End-to-end tests of `circus serve --origin s3://BUCKET/PREFIX`: the built
//! binary in front of an S3-compatible server that each test runs in its
//! own process (s3s-fs, an S3 API over a directory, on 127.0.0.1 port 0),
//! so no install step and no fixed port. Objects are files in the bucket's
//! directory, written by the test.
//!
//! s3s-fs ignores If-Match and If-None-Match, which AWS honours; the
//! fixture wraps it to answer them as S3 does (412, 304) and to count
//! requests, so revalidation and version changes behave as on AWS.

mod common;

use s3s::{
    S3, S3Request, S3Response, S3Result,
    auth::SimpleAuth,
    dto::{ETagCondition, GetObjectInput, GetObjectOutput, HeadObjectInput, HeadObjectOutput},
    s3_error,
    service::S3ServiceBuilder,
};
use std::{
    collections::HashMap,
    io::Read,
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

const BUCKET: &str = "media";
const PREFIX: &str = "pre/fix";
const KEY_ID: &str = "circus-test";
const SECRET: &str = "circus-test-secret";

#[derive(Debug, Default)]
struct Counters {
    gets: AtomicU64,
    not_modified: AtomicU64,
    precondition_failed: AtomicU64,
}

/// s3s-fs with the conditional GET that S3 has.
#[derive(Debug)]
struct Conditional {
    fs: s3s_fs::FileSystem,
    counters: Arc<Counters>,
}

fn matches(cond: &ETagCondition, etag: Option<&str>) -> bool {
    cond.is_any() || cond.as_etag().is_some_and(|c| Some(c.value()) == etag)
}

#[async_trait::async_trait]
impl S3 for Conditional {
    async fn get_object(&self, req: S3Request<GetObjectInput>) -> S3Result<S3Response<GetObjectOutput>> {
        self.counters.gets.fetch_add(1, Ordering::SeqCst);
        let (if_match, if_none_match) = (req.input.if_match.clone(), req.input.if_none_match.clone());
        let res = self.fs.get_object(req).await?;
        let etag = res.output.e_tag.as_ref().map(|e| e.value().to_owned());
        if if_match.is_some_and(|c| !matches(&c, etag.as_deref())) {
            self.counters.precondition_failed.fetch_add(1, Ordering::SeqCst);
            return Err(s3_error!(PreconditionFailed));
        }
        if if_none_match.is_some_and(|c| matches(&c, etag.as_deref())) {
            self.counters.not_modified.fetch_add(1, Ordering::SeqCst);
            return Err(s3_error!(NotModified));
        }
        Ok(res)
    }

    async fn head_object(&self, req: S3Request<HeadObjectInput>) -> S3Result<S3Response<HeadObjectOutput>> {
        self.fs.head_object(req).await
    }
}

/// An S3 server on its own runtime; dropping it (or [`S3Server::kill`])
/// stops the runtime, which closes the listener and every connection at
/// once, in the middle of any response.
struct S3Server {
    rt: Option<tokio::runtime::Runtime>,
    endpoint: String,
    root: tempfile::TempDir,
    counters: Arc<Counters>,
}

impl S3Server {
    fn start() -> Self {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join(BUCKET)).unwrap();
        let counters = Arc::new(Counters::default());
        let fs = s3s_fs::FileSystem::new(root.path()).unwrap();
        let mut b = S3ServiceBuilder::new(Conditional { fs, counters: counters.clone() });
        b.set_auth(SimpleAuth::from_single(KEY_ID, SECRET));
        let service = b.build();
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        rt.spawn(async move {
            let http = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
            while let Ok((socket, _)) = listener.accept().await {
                let conn = http.serve_connection(hyper_util::rt::TokioIo::new(socket), service.clone()).into_owned();
                tokio::spawn(conn);
            }
        });
        S3Server { rt: Some(rt), endpoint, root, counters }
    }

    /// Writes `key` (under the prefix) whole: a new file renamed into place,
    /// as a PUT replaces an object at once.
    fn put(&self, key: &str, data: &[u8]) {
        let path = self.root.path().join(BUCKET).join(PREFIX).join(key);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let tmp = tmp_name(&path);
        std::fs::write(&tmp, data).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
    }

    fn kill(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }

    fn gets(&self) -> u64 {
        self.counters.gets.load(Ordering::SeqCst)
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.kill();
    }
}

fn tmp_name(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap().to_owned();
    name.push(".tmp");
    path.with_file_name(name)
}

/// `circus serve --origin s3://media/pre/fix` with the credentials in the
/// environment, as an operator would give them.
fn tier(s3: &S3Server, extra: &[&str]) -> common::ServerProc {
    tier_with_secret(s3, SECRET, extra)
}

fn tier_with_secret(s3: &S3Server, secret: &str, extra: &[&str]) -> common::ServerProc {
    let origin = format!("s3://{BUCKET}/{PREFIX}");
    let mut args = vec!["--origin", &origin, "--s3-endpoint", &s3.endpoint, "--s3-region", "us-east-1"];
    args.extend_from_slice(extra);
    common::serve_env(&args, &[("AWS_ACCESS_KEY_ID", KEY_ID), ("AWS_SECRET_ACCESS_KEY", secret)])
}

#[derive(Debug)]
struct Got {
    status: u16,
    headers: HashMap<String, String>,
    body: Vec<u8>,
    /// The body was as long as Content-Length said.
    complete: bool,
}

/// GET over a raw connection. With `pause`, reads that many body bytes,
/// runs the callback, then reads the rest (what a slow reader does while
/// the origin changes under it).
fn get(addr: &str, path: &str, extra: &[(&str, &str)], pause: Option<(usize, &mut dyn FnMut())>) -> Got {
    let (mut r, status, headers) = common::get_head(addr, path, extra);
    let len: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    let mut body = Vec::with_capacity(len);
    if let Some((first, then)) = pause {
        let mut part = vec![0; first.min(len)];
        if r.read_exact(&mut part).is_ok() {
            body.extend_from_slice(&part);
        }
        then();
    }
    // An error (reset) or EOF ends the body; `complete` tells which.
    let _ = r.read_to_end(&mut body);
    Got { status, headers, complete: body.len() == len, body }
}

/// Bytes that differ at every offset between versions (`seed`) and
/// between nearby offsets, so a splice or a shifted block shows.
fn data(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[1] ^ seed).collect()
}

#[test]
fn small_object_is_byte_exact_and_missing_key_is_404() {
    let s3 = S3Server::start();
    s3.put("hello.txt", b"hello, s3\n");
    s3.put("empty", b"");
    let server = tier(&s3, &[]);
    let got = get(&server.addr, "/hello.txt", &[], None);
    assert_eq!((got.status, got.body.as_slice()), (200, &b"hello, s3\n"[..]), "{:?}", got.headers);
    assert!(got.headers.contains_key("etag") && got.headers.contains_key("last-modified"), "{:?}", got.headers);
    assert_eq!(get(&server.addr, "/nothing-here", &[], None).status, 404);
    // The bucket itself (a listing at S3) is no object.
    assert_eq!(get(&server.addr, "/", &[], None).status, 404);
    // An empty object cannot answer the first-block range (416 from S3):
    // the tier asks for it plainly.
    let empty = get(&server.addr, "/empty", &[], None);
    assert_eq!((empty.status, empty.body.len(), empty.complete), (200, 0, true));
}

#[test]
fn multi_block_object_and_ranges_are_byte_exact() {
    let s3 = S3Server::start();
    let obj = data((1 << 20) + 12_345, 1);
    s3.put("dir/big.bin", &obj);
    // Fresh for an hour: S3 objects have no Cache-Control, and the
    // heuristic gives a just-written one no freshness at all.
    let server = tier(&s3, &["--origin-block", "64KiB", "--cache", "16MiB", "--s3-max-age", "3600"]);
    let got = get(&server.addr, "/dir/big.bin", &[], None);
    assert_eq!(got.status, 200);
    assert!(got.complete && got.body == obj, "body differs (len {} of {})", got.body.len(), obj.len());
    // 17 blocks: the first block alone, then runs of read-ahead; several
    // ranged GETs, not one whole-object GET.
    let gets = s3.gets();
    assert!(gets > 2, "{gets} S3 GETs for 17 blocks");
    // Served from the tier now: a range across a block boundary, no S3 trip.
    let part = get(&server.addr, "/dir/big.bin", &[("range", "bytes=100000-200000")], None);
    assert_eq!(part.status, 206);
    assert_eq!(part.headers.get("content-range").map(String::as_str), Some("bytes 100000-200000/1060921"));
    assert!(part.body == obj[100_000..=200_000], "range body differs");
    assert_eq!(s3.gets(), gets, "a stored object was fetched again");
}

#[test]
fn credentials_from_the_config_file_and_wrong_ones_are_a_502() {
    let s3 = S3Server::start();
    s3.put("hello.txt", b"hello");
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("circus.toml");
    let text = format!(
        "origin = \"s3://{BUCKET}/{PREFIX}\"\ns3_endpoint = \"{}\"\ns3_region = \"us-east-1\"\n\
         s3_access_key_id = \"{KEY_ID}\"\ns3_secret_access_key = \"{SECRET}\"\n",
        s3.endpoint
    );
    std::fs::write(&conf, text).unwrap();
    let server = common::serve(&["--config", conf.to_str().unwrap()]);
    let got = get(&server.addr, "/hello.txt", &[], None);
    assert_eq!((got.status, got.body.as_slice()), (200, &b"hello"[..]));
    let wrong = tier_with_secret(&s3, "not-the-secret", &[]);
    assert_eq!(get(&wrong.addr, "/hello.txt", &[], None).status, 502);
}

#[test]
fn replaced_object_is_revalidated_then_served_new() {
    let s3 = S3Server::start();
    let v1 = data(300_000, 1);
    s3.put("obj.bin", &v1);
    // max-age 0: every request revalidates with If-None-Match.
    let server = tier(&s3, &["--origin-block", "64KiB", "--cache", "16MiB", "--s3-max-age", "0"]);
    assert!(get(&server.addr, "/obj.bin", &[], None).body == v1);
    let again = get(&server.addr, "/obj.bin", &[], None);
    assert!(again.complete && again.body == v1);
    assert_eq!(s3.counters.not_modified.load(Ordering::SeqCst), 1, "the second request was not revalidated");
    let v2 = data(300_000, 2);
    s3.put("obj.bin", &v2);
    let new = get(&server.addr, "/obj.bin", &[], None);
    assert_eq!(new.status, 200);
    assert!(new.complete && new.body == v2, "after a replace the body is not the new version");
    assert_ne!(new.headers.get("etag"), again.headers.get("etag"));
}

/// A slow reader of a large object: the tier is only read-ahead blocks
/// beyond what the client's socket holds, so the rest is fetched after
/// `change` runs (socket buffers on loopback hold a few MiB at most).
fn slow_read_with(change: impl FnOnce(&mut S3Server), s3: &mut S3Server) -> (Vec<u8>, Got) {
    let v1 = data(16 << 20, 1);
    s3.put("large.bin", &v1);
    let server = tier(s3, &["--origin-block", "256KiB", "--cache", "32MiB"]);
    let mut change = Some(change);
    let mut then = || (change.take().unwrap())(s3);
    let got = get(&server.addr, "/large.bin", &[], Some((1 << 20, &mut then)));
    drop(server);
    (v1, got)
}

#[test]
fn object_replaced_mid_transfer_is_cut_short_never_mixed() {
    let mut s3 = S3Server::start();
    let (v1, got) = slow_read_with(|s3| s3.put("large.bin", &data(16 << 20, 2)), &mut s3);
    assert_eq!(got.status, 200);
    let same = got.body.iter().zip(&v1).take_while(|(a, b)| a == b).count();
    assert_eq!(same, got.body.len(), "byte {same} is not the first version's: two versions were mixed");
    assert!(!got.complete, "the whole first version arrived: the change came too late to test anything");
    assert!(
        s3.counters.precondition_failed.load(Ordering::SeqCst) > 0,
        "no block fetch was refused by If-Match after the change"
    );
}

#[test]
fn s3_killed_mid_transfer_gives_a_short_body() {
    let mut s3 = S3Server::start();
    let (v1, got) = slow_read_with(S3Server::kill, &mut s3);
    assert_eq!(got.status, 200);
    assert!(!got.complete, "a complete body after the origin died");
    assert!(got.body == v1[..got.body.len()], "the bytes before the cut are wrong");
    assert!(got.body.len() >= 1 << 20);
}

#[test]
fn crowd_through_s3_fetches_each_byte_once() {
    let s3 = S3Server::start();
    let obj = Arc::new(data(4 << 20, 3));
    s3.put("crowd.bin", &obj);
    let server = tier(&s3, &["--origin-block", "256KiB", "--cache", "32MiB"]);
    let addr = Arc::new(server.addr.clone());
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let (addr, obj) = (addr.clone(), obj.clone());
            std::thread::spawn(move || {
                let got = get(&addr, "/crowd.bin", &[], None);
                let same = got.body.iter().zip(obj.iter()).take_while(|(a, b)| a == b).count();
                assert!(
                    got.status == 200 && got.complete && got.body == *obj,
                    "a client got other bytes: status {}, {} of {} bytes, the first {same} right, {:?}",
                    got.status,
                    got.body.len(),
                    obj.len(),
                    got.headers
                );
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    // Eight clients at once, one origin read of each byte.
    assert_eq!(common::metric(&server.admin, "circus_origin_fetched_bytes_total"), f64::from(4 << 20));
}
