//! HTTP conformance of `circus serve` for ordinary clients, through real
//! sockets on 127.0.0.1 with an in-process server.

use bytes::Bytes;
use circus_server::{ServeConfig, Server};
use http::{Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use std::{net::SocketAddr, path::Path};

struct Fixture {
    _dir: tempfile::TempDir,
    addr: SocketAddr,
    /// The admin listener: /metrics and /status.
    admin: SocketAddr,
    data: Vec<u8>,
    client: Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
}

async fn start(cache: u64) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    std::fs::write(dir.path().join("f.bin"), &data).unwrap();
    std::fs::write(dir.path().join("empty"), b"").unwrap();
    std::fs::write(dir.path().join("page.html"), b"<p>hi</p>").unwrap();
    std::fs::create_dir(dir.path().join("d")).unwrap();
    let (addr, admin) = serve(dir.path(), cache).await;
    Fixture { addr, admin, _dir: dir, data, client: Client::builder(TokioExecutor::new()).build_http() }
}

async fn serve(root: &Path, cache: u64) -> (SocketAddr, SocketAddr) {
    let mut cfg = ServeConfig::new(root.to_owned());
    cfg.listen = vec!["127.0.0.1:0".parse().unwrap()];
    cfg.admin_listen = Some("127.0.0.1:0".parse().unwrap());
    cfg.sched.cache_bytes = cache;
    let server = Server::bind(cfg).await.unwrap();
    let (addr, admin) = (server.local_addr(), server.admin_addr().unwrap());
    tokio::spawn(server.run(std::future::pending()));
    (addr, admin)
}

struct Got {
    status: StatusCode,
    headers: http::HeaderMap,
    body: Bytes,
}

impl Fixture {
    async fn get(&self, method: &str, path: &str, headers: &[(&str, &str)]) -> Got {
        self.request(self.addr, method, path, headers).await
    }

    /// GET from the admin listener.
    async fn admin(&self, path: &str) -> Got {
        self.request(self.admin, "GET", path, &[]).await
    }

    async fn request(&self, at: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> Got {
        let mut req = Request::builder().method(method).uri(format!("http://{at}{path}"));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let res = self.client.request(req.body(Full::new(Bytes::new())).unwrap()).await.unwrap();
        let (parts, body) = res.into_parts();
        Got { status: parts.status, headers: parts.headers, body: body.collect().await.unwrap().to_bytes() }
    }
}

impl Got {
    fn header(&self, name: impl header::AsHeaderName) -> &str {
        self.headers.get(name).map(|v| v.to_str().unwrap()).unwrap_or("")
    }
}

#[tokio::test]
async fn whole_file_head_and_content_headers() {
    let f = start(8 << 20).await;
    let got = f.get("GET", "/f.bin", &[]).await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.body, f.data);
    assert_eq!(got.header(header::CONTENT_LENGTH), "1000000");
    assert_eq!(got.header(header::ACCEPT_RANGES), "bytes");
    assert_eq!(got.header(header::CONTENT_TYPE), "application/octet-stream");
    assert!(got.header(header::ETAG).starts_with('"'));
    assert!(!got.header(header::LAST_MODIFIED).is_empty());
    let head = f.get("HEAD", "/f.bin", &[]).await;
    assert_eq!((head.status, head.body.len()), (StatusCode::OK, 0));
    assert_eq!(head.header(header::CONTENT_LENGTH), "1000000");
    assert_eq!(f.get("GET", "/page.html", &[]).await.header(header::CONTENT_TYPE), "text/html");
    let empty = f.get("GET", "/empty", &[]).await;
    assert_eq!((empty.status, empty.body.len()), (StatusCode::OK, 0));
}

#[tokio::test]
async fn single_and_multiple_ranges() {
    let f = start(8 << 20).await;
    let got = f.get("GET", "/f.bin", &[("range", "bytes=65530-65545")]).await;
    assert_eq!(got.status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(got.header(header::CONTENT_RANGE), "bytes 65530-65545/1000000");
    assert_eq!(got.body, f.data[65530..=65545]);
    let tail = f.get("GET", "/f.bin", &[("range", "bytes=-100")]).await;
    assert_eq!(tail.body, f.data[999_900..]);
    let multi = f.get("GET", "/f.bin", &[("range", "bytes=0-9,500000-500009")]).await;
    assert_eq!(multi.status, StatusCode::PARTIAL_CONTENT);
    let ct = multi.header(header::CONTENT_TYPE).to_owned();
    let boundary = ct.strip_prefix("multipart/byteranges; boundary=").expect("multipart");
    let body = String::from_utf8_lossy(&multi.body);
    assert_eq!(body.matches(&format!("--{boundary}")).count(), 3);
    assert!(body.contains("Content-Range: bytes 500000-500009/1000000"));
    assert_eq!(multi.header(header::CONTENT_LENGTH), multi.body.len().to_string());
    let bad = f.get("GET", "/f.bin", &[("range", "bytes=2000000-")]).await;
    assert_eq!(bad.status, StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(bad.header(header::CONTENT_RANGE), "bytes */1000000");
}

#[tokio::test]
async fn conditional_requests_and_if_range() {
    let f = start(8 << 20).await;
    let first = f.get("HEAD", "/f.bin", &[]).await;
    let etag = first.header(header::ETAG).to_owned();
    let modified = first.header(header::LAST_MODIFIED).to_owned();
    assert_eq!(f.get("GET", "/f.bin", &[("if-none-match", &etag)]).await.status, StatusCode::NOT_MODIFIED);
    assert_eq!(f.get("GET", "/f.bin", &[("if-modified-since", &modified)]).await.status, StatusCode::NOT_MODIFIED);
    assert_eq!(f.get("GET", "/f.bin", &[("if-match", "\"nope\"")]).await.status, StatusCode::PRECONDITION_FAILED);
    assert_eq!(f.get("GET", "/f.bin", &[("if-match", &etag)]).await.status, StatusCode::OK);
    let matching = f.get("GET", "/f.bin", &[("range", "bytes=0-0"), ("if-range", &etag)]).await;
    assert_eq!(matching.status, StatusCode::PARTIAL_CONTENT);
    let stale = f.get("GET", "/f.bin", &[("range", "bytes=0-0"), ("if-range", "\"old\"")]).await;
    assert_eq!((stale.status, stale.body.len()), (StatusCode::OK, 1_000_000));
}

#[tokio::test]
async fn bad_requests_get_clear_errors() {
    let f = start(8 << 20).await;
    let cases = [
        ("GET", "/missing", StatusCode::NOT_FOUND),
        ("GET", "/f.bin/", StatusCode::NOT_FOUND),
        ("GET", "/.circus/index", StatusCode::NOT_FOUND),
        ("GET", "/a/%2e%2e/f.bin", StatusCode::FORBIDDEN),
        ("GET", "/f%zz", StatusCode::BAD_REQUEST),
        ("POST", "/f.bin", StatusCode::METHOD_NOT_ALLOWED),
    ];
    for (method, path, want) in cases {
        let got = f.get(method, path, &[]).await;
        assert_eq!(got.status, want, "{method} {path}");
        assert!(!got.body.is_empty(), "{method} {path}: a reason in the body");
    }
    let native_bad = f.get("GET", "/f.bin", &[("accept", circus_proto::CONTENT_TYPE), ("circus-need", "9-1")]).await;
    assert_eq!(native_bad.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn head_and_plain_get_never_build_the_index_and_the_digest_appears_once_known() {
    let f = start(8 << 20).await;
    // HEADs and plain GETs of a new file neither wait for nor start an index
    // build (which reads and hashes the whole file).
    for _ in 0..20 {
        assert!(f.get("HEAD", "/f.bin", &[]).await.header("repr-digest").is_empty());
    }
    let plain = f.get("GET", "/f.bin", &[]).await;
    assert_eq!((plain.status, plain.header("repr-digest")), (StatusCode::OK, ""));
    assert!(plain.body == f.data);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let index_dir = f._dir.path().join(".circus/index");
    let stored = std::fs::read_dir(&index_dir).map(|d| d.count()).unwrap_or(0);
    assert_eq!(stored, 0, "a plain request built an index in {}", index_dir.display());
    // A native request builds it; plain responses carry the digest from then on.
    let native = f.get("GET", "/f.bin", &[("accept", circus_proto::CONTENT_TYPE)]).await;
    assert_eq!(native.header(header::CONTENT_TYPE), circus_proto::CONTENT_TYPE);
    assert_eq!(&native.body[..4], b"CRC1");
    let digest = f.get("HEAD", "/f.bin", &[]).await.header("repr-digest").to_owned();
    use base64::Engine;
    use sha2::Digest;
    let want = base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(&f.data));
    assert_eq!(digest, format!("sha-256=:{want}:"));
    for path in ["/.circus", "/.circus/index", "/d/../.circus/index"] {
        assert_ne!(f.get("GET", path, &[]).await.status, StatusCode::OK, "{path}");
    }
}

#[tokio::test]
async fn plain_downloads_share_one_read_per_block_with_a_small_cache() {
    // Cache of 4 blocks, far below the file: many concurrent plain downloads
    // still complete byte-exact, and the budget holds.
    let f = start(4 * 65536).await;
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (client, uri) = (f.client.clone(), format!("http://{}/f.bin", f.addr));
        tasks.push(tokio::spawn(async move {
            let res = client.request(Request::get(uri).body(Full::new(Bytes::new())).unwrap()).await.unwrap();
            res.into_body().collect().await.unwrap().to_bytes()
        }));
    }
    // A scheduler deadlock shows as a hang: fail in bounded time instead.
    for t in tasks {
        let body = tokio::time::timeout(std::time::Duration::from_secs(60), t).await.expect("download hung");
        assert_eq!(body.unwrap(), f.data);
    }
    let status = f.admin("/status").await;
    let json: serde_json::Value = serde_json::from_slice(&status.body).unwrap();
    assert!(json["scheduler"]["used_bytes"].as_u64().unwrap() <= 4 * 65536);
    let metrics = String::from_utf8(f.admin("/metrics").await.body.to_vec()).unwrap();
    assert!(metrics.contains("circus_storage_read_bytes_total"), "{metrics}");
}

#[tokio::test]
async fn overlapping_ranges_never_make_a_response_larger_than_the_file_nor_read_it_twice() {
    let f = start(8 << 20).await;
    let whole_64_times = format!("bytes={}", vec!["0-"; 64].join(","));
    for range in [whole_64_times.as_str(), "bytes=0-,1-,2-,3-", "bytes=0-600000,400000-"] {
        let r = f.get("GET", "/f.bin", &[("range", range)]).await;
        assert_eq!(r.status, StatusCode::OK, "{range}");
        assert!(r.body == f.data, "{range}: {} bytes", r.body.len());
    }
    let merged = f.get("GET", "/f.bin", &[("range", "bytes=0-99,50-149,150-199")]).await;
    assert_eq!(merged.status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(merged.header(header::CONTENT_RANGE), "bytes 0-199/1000000");
    assert!(merged.body[..] == f.data[..200]);
    let metrics = String::from_utf8(f.admin("/metrics").await.body.to_vec()).unwrap();
    let read: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("circus_storage_read_bytes_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no read counter in {metrics}"));
    assert!(read <= f.data.len() as u64, "{read} bytes read from storage for a file of {}", f.data.len());
}
