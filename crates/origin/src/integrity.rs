//! What the origin says a whole representation hashes to, checked as its
//! blocks pass, so that a version pieced together from two of the origin's
//! versions is never passed off as complete.
//!
//! The signals: `Repr-Digest: sha-256=:…:` (RFC 9530), `Content-MD5` on a
//! whole 200, and for an S3 origin the ETag of a single-part upload (the
//! hex MD5 of the object). An origin that reuses an ETag for new bytes and
//! ignores If-Match (replicas computing ETags from size and mtime do) still
//! cannot make a spliced version match its own digest.
//!
//! The digest runs over the blocks in order. Blocks completed out of order
//! wait (up to [`PENDING_LIMIT`] bytes); beyond that they are dropped and
//! read again when the digest reaches them (see `OriginTier::verified`).

use base64::Engine;
use bytes::Bytes;
use circus_core::BlockLayout;
use circus_store::ReadError;
use http::{HeaderMap, StatusCode, header};
use sha2::Digest;
use std::{
    collections::BTreeMap,
    sync::{Mutex, OnceLock},
};

/// Out-of-order blocks kept waiting for the digest to reach them.
const PENDING_LIMIT: u64 = 8 << 20;

/// A whole-representation digest the origin gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expected {
    Sha256([u8; 32]),
    Md5([u8; 16]),
}

impl Expected {
    /// The strongest signal in an origin's response head, if any.
    /// `status` is the first fetch's (Content-MD5 covers a whole 200 only;
    /// on a 206 it is the part's); `s3` when the origin is a bucket, whose
    /// ETag of a single-part object is its MD5 in hex.
    pub fn from_response(status: StatusCode, h: &HeaderMap, s3: bool) -> Option<Self> {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.decode(s.trim()).ok();
        let repr = h.get_all("repr-digest").iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(','));
        for item in repr {
            let Some((alg, value)) = item.split_once('=') else { continue };
            let inner = value.trim().strip_prefix(':').and_then(|v| v.strip_suffix(':'));
            if alg.trim().eq_ignore_ascii_case("sha-256")
                && let Some(d) = inner.and_then(b64).and_then(|d| <[u8; 32]>::try_from(d).ok())
            {
                return Some(Expected::Sha256(d));
            }
        }
        if status == StatusCode::OK
            && let Some(d) = h.get("content-md5").and_then(|v| b64(v.to_str().ok()?)?.try_into().ok())
        {
            return Some(Expected::Md5(d));
        }
        let etag = h.get(header::ETAG).and_then(|v| v.to_str().ok()).map(|e| e.trim_matches('"'));
        match etag.filter(|e| s3 && e.len() == 32) {
            Some(hex) => (0..16)
                .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok())
                .collect::<Option<Vec<u8>>>()
                .and_then(|v| v.try_into().ok())
                .map(Expected::Md5),
            None => None,
        }
    }
}

#[derive(Debug)]
enum Hasher {
    Sha256(sha2::Sha256),
    Md5(md5::Md5),
}

#[derive(Debug)]
struct Hashing {
    hasher: Option<Hasher>,
    /// The next block the digest needs.
    next: u32,
    pending: BTreeMap<u32, Bytes>,
    pending_bytes: u64,
}

/// The digest check of one version.
#[derive(Debug)]
pub struct Integrity {
    expected: Expected,
    /// The origin's block layout.
    layout: BlockLayout,
    hashing: Mutex<Hashing>,
    outcome: OnceLock<Result<(), ReadError>>,
}

impl Integrity {
    pub fn new(expected: Expected, layout: BlockLayout) -> Self {
        let hasher = match expected {
            Expected::Sha256(_) => Hasher::Sha256(sha2::Sha256::new()),
            Expected::Md5(_) => Hasher::Md5(md5::Md5::new()),
        };
        let hashing = Hashing { hasher: Some(hasher), next: 0, pending: BTreeMap::new(), pending_bytes: 0 };
        let integrity = Integrity { expected, layout, hashing: Mutex::new(hashing), outcome: OnceLock::new() };
        if layout.blocks() == 0 {
            let hasher = integrity.hashing.lock().expect("integrity lock").hasher.take();
            let _ = integrity.finish(hasher); // kept as the outcome
        }
        integrity
    }

    /// Feeds origin block `b`, whole; returns the outcome if this block
    /// completed the digest. A block the digest has passed changes nothing.
    pub fn record(&self, b: u32, bytes: &Bytes) -> Option<Result<(), ReadError>> {
        let mut h = self.hashing.lock().expect("integrity lock");
        if b < h.next || h.hasher.is_none() {
            return None;
        }
        if b > h.next {
            if h.pending_bytes + bytes.len() as u64 <= PENDING_LIMIT && !h.pending.contains_key(&b) {
                h.pending_bytes += bytes.len() as u64;
                h.pending.insert(b, bytes.clone());
            }
            return None;
        }
        h.update(bytes);
        loop {
            let next = h.next;
            let Some(more) = h.pending.remove(&next) else { break };
            h.pending_bytes -= more.len() as u64;
            h.update(&more);
        }
        if h.next < self.layout.blocks() {
            return None;
        }
        // Taken under the lock that hashed the last block, so that nobody
        // sees a running digest that waits for a block past the end.
        let hasher = h.hasher.take();
        drop(h);
        Some(self.finish(hasher))
    }

    /// Compares the finished digest with the expected one (`None`: another
    /// thread finished it) and keeps the outcome.
    fn finish(&self, hasher: Option<Hasher>) -> Result<(), ReadError> {
        let ok = match (hasher, self.expected) {
            (Some(Hasher::Sha256(s)), Expected::Sha256(want)) => s.finalize().as_slice() == want,
            (Some(Hasher::Md5(m)), Expected::Md5(want)) => m.finalize().as_slice() == want,
            (None, _) => return self.outcome().unwrap_or(Ok(())),
            _ => false,
        };
        let outcome = if ok {
            Ok(())
        } else {
            Err(ReadError::changed(
                "the object's bytes do not match the digest the origin gave: blocks of two versions",
            ))
        };
        self.outcome.get_or_init(|| outcome).clone()
    }

    /// The result once every block was hashed.
    pub fn outcome(&self) -> Option<Result<(), ReadError>> {
        self.outcome.get().cloned()
    }

    /// The block the digest waits for, unless it is done.
    pub fn next_needed(&self) -> Option<u32> {
        let h = self.hashing.lock().expect("integrity lock");
        h.hasher.is_some().then_some(h.next)
    }

    /// Whether the digest matched; false while it is still running.
    pub fn verified(&self) -> bool {
        matches!(self.outcome.get(), Some(Ok(())))
    }
}

impl Hashing {
    fn update(&mut self, bytes: &[u8]) {
        match self.hasher.as_mut().expect("checked by the caller") {
            Hasher::Sha256(s) => s.update(bytes),
            Hasher::Md5(m) => m.update(bytes),
        }
        self.next += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocks(data: &[u8], size: usize) -> Vec<Bytes> {
        data.chunks(size).map(Bytes::copy_from_slice).collect()
    }

    #[test]
    fn blocks_in_any_order_match_the_digest_and_a_spliced_block_does_not() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let layout = BlockLayout::new(data.len() as u64, 4096);
        let want = Expected::Sha256(sha2::Sha256::digest(&data).into());
        let parts = blocks(&data, 4096);
        let i = Integrity::new(want, layout);
        assert_eq!(i.record(2, &parts[2]), None);
        assert_eq!(i.record(0, &parts[0]), None);
        assert_eq!(i.next_needed(), Some(1));
        assert_eq!(i.record(1, &parts[1]), Some(Ok(())));
        assert!(i.verified());
        assert_eq!(i.record(1, &parts[1]), None, "a block seen again changes nothing");

        let other = Integrity::new(want, layout);
        let mut spliced = parts[1].to_vec();
        spliced[7] ^= 1;
        other.record(0, &parts[0]);
        other.record(1, &Bytes::from(spliced));
        assert!(matches!(other.record(2, &parts[2]), Some(Err(_))));
        assert!(!other.verified());
    }

    /// The block the digest waits for is always one of the version's, even
    /// while another thread hashes the last block (a reader asked for block
    /// `blocks()` in that moment and the tier panicked).
    #[test]
    fn the_block_the_digest_waits_for_is_never_past_the_end() {
        let data = vec![7u8; 2 * 4096];
        let layout = BlockLayout::new(data.len() as u64, 4096);
        let want = Expected::Sha256(sha2::Sha256::digest(&data).into());
        let parts = blocks(&data, 4096);
        for _ in 0..2_000 {
            let check = std::sync::Arc::new(Integrity::new(want, layout));
            let watcher = {
                let check = check.clone();
                std::thread::spawn(move || {
                    while check.outcome().is_none() {
                        if let Some(b) = check.next_needed() {
                            assert!(b < layout.blocks(), "the digest waits for block {b} of {}", layout.blocks());
                        }
                    }
                })
            };
            check.record(0, &parts[0]);
            assert_eq!(check.record(1, &parts[1]), Some(Ok(())));
            watcher.join().unwrap();
        }
    }

    #[test]
    fn signals_are_read_from_repr_digest_content_md5_and_an_s3_etag() {
        let mut h = HeaderMap::new();
        let digest = sha2::Sha256::digest(b"x");
        let b64 = base64::engine::general_purpose::STANDARD.encode(digest);
        h.insert("repr-digest", format!("sha-512=:AAAA:, sha-256=:{b64}:").parse().unwrap());
        assert_eq!(
            Expected::from_response(StatusCode::PARTIAL_CONTENT, &h, false),
            Some(Expected::Sha256(digest.into()))
        );
        let mut h = HeaderMap::new();
        h.insert("content-md5", "XrY7u+Ae7tCTyyK7j1rNww==".parse().unwrap());
        assert!(Expected::from_response(StatusCode::OK, &h, false).is_some());
        assert_eq!(Expected::from_response(StatusCode::PARTIAL_CONTENT, &h, false), None, "a part's MD5");
        let mut h = HeaderMap::new();
        h.insert(header::ETAG, "\"5eb63bbbe01eeed093cb22bb8f5acdc3\"".parse().unwrap());
        assert!(matches!(Expected::from_response(StatusCode::OK, &h, true), Some(Expected::Md5(_))));
        assert_eq!(Expected::from_response(StatusCode::OK, &h, false), None, "only a bucket's ETag is an MD5");
        h.insert(header::ETAG, "\"5eb63bbbe01eeed093cb22bb8f5acdc3-2\"".parse().unwrap());
        assert_eq!(Expected::from_response(StatusCode::OK, &h, true), None, "a multipart ETag is no MD5");
    }
}
