//! Downloads over real sockets at 127.0.0.1 from an in-process circus
//! server (or a plain one), through a proxy that breaks things on purpose.

mod common;

use bytes::Bytes;
use circus_client::{GetError, GetOptions, Mode, Protocol, Sha256Digest, download, download_with, http_client};
use common::{BLOCK, Fixture, MARKER, Proxy, Sabotage, litter, plain_server};
use std::time::{Duration, Instant};

fn opts(url: String, output: &std::path::Path) -> GetOptions {
    let mut o = GetOptions::new(url, output);
    // Fast retries keep the tests quick; the count stays at the default.
    o.backoff = Duration::from_millis(20);
    o.timeout = Duration::from_secs(10);
    o
}

fn blocks(len: usize) -> u32 {
    len.div_ceil(BLOCK) as u32
}

#[tokio::test]
async fn native_download_is_byte_exact() {
    let f = Fixture::start().await;
    let out = f.out("big.bin");
    let report = download(&opts(f.url("big.bin"), &out), &()).await.unwrap();
    let want = f.served("big.bin");
    assert_eq!(std::fs::read(&out).unwrap(), want);
    assert_eq!(report.protocol, Protocol::Native);
    assert_eq!(report.bytes, want.len() as u64);
    assert_eq!(report.blocks_received, blocks(want.len()));
    assert_eq!((report.blocks_corrupt, report.reconnects, report.resumed_bytes), (0, 0, 0));
    // The manifest carries the SHA-256, so the whole file was checked too.
    assert_eq!(report.sha256, Some(Sha256Digest::parse(&sha256_hex(&want)).unwrap()));
    assert!(litter(&out).is_empty(), "{:?}", litter(&out));
}

#[tokio::test]
async fn empty_file_downloads_natively() {
    let f = Fixture::start().await;
    let out = f.out("empty");
    let report = download(&opts(f.url("empty"), &out), &()).await.unwrap();
    assert_eq!((report.protocol, report.bytes), (Protocol::Native, 0));
    assert_eq!(std::fs::read(&out).unwrap(), b"");
    assert!(litter(&out).is_empty());
}

#[tokio::test]
async fn plain_mode_from_a_circus_server_is_byte_exact() {
    let f = Fixture::start().await;
    let out = f.out("big.bin");
    let mut o = opts(f.url("big.bin"), &out);
    o.mode = Mode::Plain;
    let report = download(&o, &()).await.unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), f.served("big.bin"));
    assert_eq!(report.protocol, Protocol::Plain);
    assert_eq!(report.blocks_received, 0);
    assert!(litter(&out).is_empty());
}

#[tokio::test]
async fn auto_falls_back_to_plain_when_the_server_ignores_accept() {
    let body = Bytes::from(common::data(700_000, 9));
    let addr = plain_server(body.clone()).await;
    let out = tempfile::tempdir().unwrap();
    let path = out.path().join("f");
    let report = download(&opts(format!("http://{addr}/f"), &path), &()).await.unwrap();
    assert_eq!(report.protocol, Protocol::Plain);
    assert_eq!(std::fs::read(&path).unwrap(), body);
    assert!(litter(&path).is_empty());
}

#[tokio::test]
async fn plain_server_download_resumes_with_range() {
    let body = Bytes::from(common::data(3_000_000, 10));
    let addr = plain_server(body.clone()).await;
    let proxy = Proxy::start(addr, Sabotage { cut_after: Some(1_000_000), ..Default::default() }).await;
    let out = tempfile::tempdir().unwrap();
    let path = out.path().join("f");
    let report = download(&opts(proxy.url("f"), &path), &()).await.unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), body);
    assert!(report.reconnects >= 1);
    let conns = proxy.conns();
    assert!(conns[1].request().contains("range: bytes="), "{}", conns[1].request());
    assert!(conns[1].request().contains("if-range: \"plain-v1\""), "{}", conns[1].request());
    assert!(conns[1].down.load(std::sync::atomic::Ordering::Relaxed) < 2_100_000);
}

#[tokio::test]
async fn interrupted_native_download_resumes_with_circus_need() {
    let f = Fixture::start().await;
    let proxy = Proxy::start(f.addr, Sabotage { cut_after: Some(1 << 20), ..Default::default() }).await;
    let out = f.out("big.bin");
    let report = download(&opts(proxy.url("big.bin"), &out), &()).await.unwrap();
    let want = f.served("big.bin");
    assert_eq!(std::fs::read(&out).unwrap(), want);
    assert!(report.reconnects >= 1, "{report:?}");
    assert_eq!(report.blocks_received, blocks(want.len()), "each block written once: {report:?}");
    let conns = proxy.conns();
    assert!(conns.len() >= 2);
    let second = conns[1].request();
    assert!(second.contains("circus-need: ") && second.contains("if-range: \""), "{second}");
    // Only the rest crossed the second time, not the whole file again.
    let again = conns[1].down.load(std::sync::atomic::Ordering::Relaxed);
    assert!(again < want.len() as u64 - (1 << 19), "{again} bytes on the second connection");
    assert!(litter(&out).is_empty());
}

#[tokio::test]
async fn resume_across_runs_fetches_only_missing_blocks() {
    let f = Fixture::start().await;
    let proxy = Proxy::start(f.addr, Sabotage { cut_after: Some(1 << 20), ..Default::default() }).await;
    let out = f.out("big.bin");
    let mut o = opts(proxy.url("big.bin"), &out);
    o.retries = 0;
    let err = download(&o, &()).await.unwrap_err();
    assert!(matches!(err, GetError::Network { .. }), "{err}");
    assert_eq!(err.exit_code(), 2);
    assert!(!out.exists());
    assert_eq!(litter(&out).len(), 2, "part and state files stay for the next run");

    // A new run (the proxy passes later connections through untouched).
    let report = download(&opts(proxy.url("big.bin"), &out), &()).await.unwrap();
    let want = f.served("big.bin");
    assert_eq!(std::fs::read(&out).unwrap(), want);
    assert!(report.resumed_bytes > 0, "{report:?}");
    assert!(report.blocks_received < blocks(want.len()), "{report:?}");
    assert_eq!(report.reconnects, 0);
    assert!(litter(&out).is_empty());
}

#[tokio::test]
async fn a_changed_file_starts_over() {
    let f = Fixture::start().await;
    let proxy = Proxy::start(f.addr, Sabotage { cut_after: Some(512 << 10), ..Default::default() }).await;
    let out = f.out("one.bin");
    let mut o = opts(proxy.url("one.bin"), &out);
    o.retries = 0;
    download(&o, &()).await.unwrap_err();
    // New content, same size, a different modification time: a new ETag.
    // (In the past: a server takes a file dated in the future for one still
    // being written, and answers 503 until that time.)
    let path = f.dir.path().join("one.bin");
    std::fs::write(&path, common::data(1024 * 1024, 77)).unwrap();
    let earlier = std::time::SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::options().write(true).open(&path).unwrap().set_modified(earlier).unwrap();
    let report = download(&opts(proxy.url("one.bin"), &out), &()).await.unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), f.served("one.bin"));
    assert_eq!(report.restarts, 1, "{report:?}");
    assert_eq!(report.blocks_received, 16);
}

#[tokio::test]
async fn corrupt_block_is_never_written_and_is_fetched_again() {
    let f = Fixture::start().await;
    let proxy = Proxy::start(f.addr, Sabotage { flip: Some(MARKER), ..Default::default() }).await;
    let out = f.out("marked.bin");
    let report = download(&opts(proxy.url("marked.bin"), &out), &()).await.unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), f.served("marked.bin"));
    assert!(report.blocks_corrupt >= 1, "{report:?}");
    assert_eq!(report.blocks_received, 32, "every block written once, the bad one only when good: {report:?}");
    assert!(report.reconnects >= 1, "the bad block needs a second request: {report:?}");
    // Block 5 alone was asked for the second time (on the same connection
    // when the first ended cleanly with END).
    let requests: String = proxy.conns().iter().map(|c| c.request()).collect();
    assert!(requests.contains("circus-need: 5\r\n"), "{requests}");
}

#[tokio::test]
async fn corruption_on_every_try_is_an_integrity_error() {
    let f = Fixture::start().await;
    // Every connection corrupts: a proxy per try is simplest, so use one
    // that sabotages its first connection and give no retries.
    let proxy = Proxy::start(f.addr, Sabotage { flip: Some(MARKER), ..Default::default() }).await;
    let out = f.out("marked.bin");
    let mut o = opts(proxy.url("marked.bin"), &out);
    o.retries = 0;
    let err = download(&o, &()).await.unwrap_err();
    assert!(matches!(err, GetError::Integrity { .. }), "{err}");
    assert_eq!(err.exit_code(), 3);
    assert!(!out.exists());
}

#[tokio::test]
async fn expect_digest_mismatch_is_an_integrity_error() {
    let f = Fixture::start().await;
    let out = f.out("one.bin");
    let mut o = opts(f.url("one.bin"), &out);
    o.expect_digest = Some(Sha256Digest([0xab; 32]));
    let err = download(&o, &()).await.unwrap_err();
    assert!(matches!(err, GetError::Integrity { .. }), "{err}");
    assert_eq!(err.exit_code(), 3);
    assert!(err.to_string().contains("the expected digest"), "{err}");
    assert!(!out.exists());
    assert!(litter(&out).is_empty(), "wrong content is not kept: {:?}", litter(&out));
    // The right digest passes.
    o.expect_digest = Some(Sha256Digest::parse(&sha256_hex(&f.served("one.bin"))).unwrap());
    download(&o, &()).await.unwrap();
}

#[tokio::test]
async fn missing_file_is_an_http_error() {
    let f = Fixture::start().await;
    let out = f.out("nope");
    let err = download(&opts(f.url("nope"), &out), &()).await.unwrap_err();
    let GetError::Status { status, message } = &err else { panic!("{err}") };
    assert_eq!(status.as_u16(), 404);
    assert!(message.contains("not found"), "{message}");
    assert_eq!(err.exit_code(), 4);
    assert!(!out.exists() && litter(&out).is_empty());
}

#[tokio::test]
async fn refused_connection_is_a_network_error() {
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    }; // closed again: nothing listens there now
    let out = tempfile::tempdir().unwrap();
    let path = out.path().join("f");
    let mut o = opts(format!("http://{addr}/f"), &path);
    o.retries = 1;
    let err = download(&o, &()).await.unwrap_err();
    assert!(matches!(err, GetError::Network { attempts: 2, .. }), "{err}");
    assert_eq!(err.exit_code(), 2);
    assert!(litter(&path).is_empty());
}

#[tokio::test]
async fn limit_rate_paces_the_download() {
    let f = Fixture::start().await;
    let out = f.out("one.bin");
    let mut o = opts(f.url("one.bin"), &out);
    o.limit_rate = Some(2 << 20);
    let t = Instant::now();
    download(&o, &()).await.unwrap();
    let took = t.elapsed();
    // 1 MiB at 2 MiB/s is 0.5 s, less a 50 ms allowance for a burst.
    assert!(took >= Duration::from_millis(400), "{took:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
}

#[tokio::test]
async fn many_downloads_share_one_client() {
    let f = Fixture::start().await;
    let client = http_client(Duration::from_secs(10));
    let runs = (0..4).map(|i| {
        let (client, o) = (client.clone(), opts(f.url("big.bin"), &f.out(&format!("copy{i}"))));
        async move { download_with(&client, &o, &()).await }
    });
    let want = f.served("big.bin");
    for (i, r) in futures_join(runs).await.into_iter().enumerate() {
        r.unwrap();
        assert_eq!(std::fs::read(f.out(&format!("copy{i}"))).unwrap(), want);
    }
}

async fn futures_join<F: std::future::Future + Send + 'static>(futs: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F::Output: Send,
{
    let handles: Vec<_> = futs.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(data))
}
