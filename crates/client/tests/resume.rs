//! Resuming from what an earlier run left on disk: the part file and the
//! state file are trusted only as far as the data checks out, and a resume
//! request stays small enough for any server to take.

mod common;

use base64::Engine;
use circus_client::{GetOptions, Mode, Sha256Digest, download};
use circus_proto::{MAX_SENT_NEED_LEN, parse_need};
use common::{Fixture, Proxy, Sabotage, litter};
use std::{path::Path, time::Duration};

fn opts(url: String, output: &Path) -> GetOptions {
    let mut o = GetOptions::new(url, output);
    o.backoff = Duration::from_millis(20);
    o.timeout = Duration::from_secs(10);
    o
}

/// Runs a download through `proxy`, which cuts its first connection, so
/// that part and state files stay behind; returns the state as JSON.
async fn interrupted(proxy: &Proxy, name: &str, out: &Path, mode: Mode) -> serde_json::Value {
    let mut o = opts(proxy.url(name), out);
    (o.retries, o.mode) = (0, mode);
    download(&o, &()).await.unwrap_err();
    assert_eq!(litter(out).len(), 2, "{:?}", litter(out));
    serde_json::from_slice(&std::fs::read(state_path(out)).unwrap()).unwrap()
}

fn state_path(out: &Path) -> std::path::PathBuf {
    let mut p = out.as_os_str().to_owned();
    p.push(".circus-state");
    p.into()
}

fn part_path(out: &Path) -> std::path::PathBuf {
    let mut p = out.as_os_str().to_owned();
    p.push(".circus-part");
    p.into()
}

/// The state file's bitmap of verified blocks: bit `b % 8` of byte `b / 8`.
fn bitmap(blocks: u32, held: impl Fn(u32) -> bool) -> (String, u32) {
    let mut bits = vec![0u8; blocks.div_ceil(8) as usize];
    let mut count = 0;
    for b in (0..blocks).filter(|&b| held(b)) {
        bits[b as usize / 8] |= 1 << (b % 8);
        count += 1;
    }
    (base64::engine::general_purpose::STANDARD.encode(bits), count)
}

#[tokio::test]
async fn a_damaged_part_file_is_never_installed_from_a_complete_state() {
    let f = Fixture::start().await;
    let proxy = Proxy::start(f.addr, Sabotage { cut_after: Some(1 << 20), ..Default::default() }).await;
    let out = f.out("big.bin");
    let mut state = interrupted(&proxy, "big.bin", &out, Mode::Auto).await;
    let want = f.served("big.bin");
    // The state claims every block, with no whole-file digest to check (as
    // for an origin object, whose SHA-256 the server does not know)...
    let blocks = want.len().div_ceil(common::BLOCK) as u32;
    let (verified, count) = bitmap(blocks, |_| true);
    state["verified"] = verified.into();
    state["verified_count"] = count.into();
    state["sha256"] = "00".repeat(32).into();
    state.as_object_mut().unwrap().remove("repr_sha256");
    std::fs::write(state_path(&out), serde_json::to_vec(&state).unwrap()).unwrap();
    // ...but one byte of the part file went bad since.
    let mut part = want.clone();
    part[2_000_000] ^= 0x40;
    std::fs::write(part_path(&out), &part).unwrap();

    let report = download(&opts(proxy.url("big.bin"), &out), &()).await.unwrap();
    assert!(std::fs::read(&out).unwrap() == want, "the damaged byte was installed");
    assert_eq!(report.restarts, 1, "{report:?}");
    assert_eq!(report.blocks_received, blocks, "fetched again from scratch: {report:?}");
    assert!(litter(&out).is_empty());
}

#[tokio::test]
async fn a_damaged_plain_part_file_is_fetched_again() {
    let f = Fixture::start().await;
    let proxy = Proxy::start(f.addr, Sabotage { cut_after: Some(1 << 20), ..Default::default() }).await;
    let out = f.out("big.bin");
    let mut state = interrupted(&proxy, "big.bin", &out, Mode::Plain).await;
    let want = f.served("big.bin");
    state["bytes_done"] = want.len().into();
    std::fs::write(state_path(&out), serde_json::to_vec(&state).unwrap()).unwrap();
    let mut part = want.clone();
    part[2_000_000] ^= 0x40;
    std::fs::write(part_path(&out), &part).unwrap();

    let mut o = opts(proxy.url("big.bin"), &out);
    o.mode = Mode::Plain;
    o.expect_digest = Some(Sha256Digest::parse(&sha256_hex(&want)).unwrap());
    let report = download(&o, &()).await.unwrap();
    assert!(std::fs::read(&out).unwrap() == want, "the damaged byte was installed");
    assert_eq!(report.restarts, 1, "{report:?}");
    assert!(report.sha256.is_some(), "{report:?}");
}

#[tokio::test]
async fn a_fragmented_resume_sends_a_bounded_need_that_covers_every_missing_block() {
    // 8 MiB in 1 KiB blocks, every other one missing: the exact Circus-Need
    // (about 19 KiB) cannot fit in the server's 16 KiB request head.
    let block = 1024;
    let f = Fixture::with_block(block as u32).await;
    std::fs::write(f.dir.path().join("frag.bin"), common::data(8 << 20, 11)).unwrap();
    let proxy = Proxy::start(f.addr, Sabotage { cut_after: Some(1 << 20), ..Default::default() }).await;
    let out = f.out("frag.bin");
    let mut state = interrupted(&proxy, "frag.bin", &out, Mode::Auto).await;
    let want = f.served("frag.bin");
    let blocks = want.len().div_ceil(block) as u32;
    let (verified, count) = bitmap(blocks, |b| b % 2 == 0);
    state["verified"] = verified.into();
    state["verified_count"] = count.into();
    std::fs::write(state_path(&out), serde_json::to_vec(&state).unwrap()).unwrap();
    std::fs::write(part_path(&out), &want).unwrap();

    let report = download(&opts(proxy.url("frag.bin"), &out), &()).await.unwrap();
    assert!(std::fs::read(&out).unwrap() == want);
    let request = proxy.conns()[1].request();
    let need = request.lines().find_map(|l| l.strip_prefix("circus-need: ")).expect("a Circus-Need");
    assert!(need.len() <= MAX_SENT_NEED_LEN, "{} bytes", need.len());
    let asked = parse_need(need, blocks).unwrap();
    assert!((0..blocks).filter(|b| b % 2 == 1).all(|b| asked.contains(b)), "a missing block was not asked for");
    // The coarser list brought back blocks already held: harmless.
    assert!(report.blocks_duplicate > 0, "{report:?}");
    assert_eq!(report.blocks_received, blocks / 2, "{report:?}");
}

fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(data))
}
