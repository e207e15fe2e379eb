//! One stored version of an origin object: its size and block layout, the
//! headers replayed to clients, what selects it (Vary) and how fresh it is.
//! Block bytes live in the store under the version number, so a version
//! refreshed by a 304 keeps its blocks and a new version never mixes with
//! an old one.

use super::{client, integrity::Integrity, leaves::Leaves};
use crate::rfc9111::{self, Freshness};
use bytes::Bytes;
use circus_core::BlockLayout;
use http::{HeaderMap, HeaderName, StatusCode, header};
use std::{sync::Arc, time::SystemTime};

/// The fields of an origin response a cache stores and replays (RFC 9111
/// §3.1): all but the hop-by-hop ones, Content-Length and Accept-Ranges
/// (set per response by the tier, which serves ranges of every stored
/// object), Age (computed per response) and a cluster owner's word that
/// a group is hot (about one group, between two members). A part's
/// Content-Range is taken off by the caller, which knows the status.
fn end_to_end(res: &HeaderMap) -> HeaderMap {
    let mut h = res.clone();
    client::strip_hop_by_hop(&mut h);
    for name in [header::CONTENT_LENGTH, header::ACCEPT_RANGES, header::AGE] {
        h.remove(name);
    }
    h.remove(crate::HOT_HEADER);
    h
}

#[derive(Debug)]
pub struct Object {
    /// The request target (path and query) at the origin.
    pub target: String,
    /// Unique per fetched response; keys the blocks in the store.
    pub version: u64,
    /// 200, whose bytes are blocks in the store, or another status, whose
    /// (small) body is `body`.
    pub status: StatusCode,
    pub body: Bytes,
    pub size: u64,
    pub layout: BlockLayout,
    /// The fields replayed to clients: the origin's end-to-end ones and Via.
    pub headers: HeaderMap,
    pub etag: Option<String>,
    pub last_modified: Option<SystemTime>,
    pub vary: Vec<HeaderName>,
    /// This version's values of the `vary` fields.
    pub vary_values: Vec<Option<String>>,
    /// Request headers sent with every block fetch of this version (the
    /// varied ones), so each block comes from the same representation.
    pub forward: HeaderMap,
    pub freshness: Freshness,
    /// The head of a whole 200 response as the hit lane writes it, up to
    /// the per-request `age` (and `date` when the origin sent none).
    pub wire_head: Vec<u8>,
    /// The version's hash tree, learnt as its blocks are fetched (shared
    /// with the same version refreshed by a 304).
    pub leaves: Arc<Leaves>,
    /// The check of the whole version against the digest the origin gave,
    /// if it gave one (shared like `leaves`).
    pub integrity: Option<Arc<Integrity>>,
}

impl Object {
    /// From a storable origin response (`rfc9111::storable` said yes).
    #[allow(clippy::too_many_arguments)] // reason: all are facts of one response; a struct would only rename them
    pub fn new(
        target: &str,
        version: u64,
        size: u64,
        block_size: u32,
        native_block: u32,
        req: &HeaderMap,
        res: &HeaderMap,
        request_time: SystemTime,
        response_time: SystemTime,
    ) -> Self {
        let mut headers = end_to_end(res);
        headers.append(header::VIA, client::VIA);
        let vary = rfc9111::vary_fields(res).unwrap_or_default();
        let mut forward = HeaderMap::new();
        for name in &vary {
            for v in req.get_all(name) {
                forward.append(name.clone(), v.clone());
            }
        }
        Object {
            target: target.to_owned(),
            version,
            status: StatusCode::OK,
            body: Bytes::new(),
            size,
            layout: BlockLayout::new(size, block_size),
            etag: res.get(header::ETAG).and_then(|v| v.to_str().ok()).map(str::to_owned),
            last_modified: res
                .get(header::LAST_MODIFIED)
                .and_then(|v| v.to_str().ok())
                .and_then(|s| httpdate::parse_http_date(s).ok()),
            vary_values: rfc9111::vary_values(&vary, req),
            vary,
            forward,
            freshness: Freshness::of(res, request_time, response_time),
            wire_head: wire_head(&headers, size),
            headers,
            leaves: Arc::new(Leaves::new(size, native_block, block_size)),
            integrity: None,
        }
    }

    /// This version refreshed by a 304: same bytes, new headers and age.
    pub fn refreshed(&self, not_modified: &HeaderMap, request_time: SystemTime, response_time: SystemTime) -> Self {
        // The stored Via already names the tier after the origin's hops.
        let mut fresh = end_to_end(not_modified);
        fresh.remove(header::VIA);
        let merged = rfc9111::merge_not_modified(&self.headers, &fresh);
        Object {
            target: self.target.clone(),
            version: self.version,
            status: self.status,
            body: self.body.clone(),
            size: self.size,
            layout: self.layout,
            etag: self.etag.clone(),
            last_modified: self.last_modified,
            vary: self.vary.clone(),
            vary_values: self.vary_values.clone(),
            forward: self.forward.clone(),
            freshness: Freshness::of(&merged, request_time, response_time),
            wire_head: wire_head(&merged, self.size),
            headers: merged,
            leaves: self.leaves.clone(),
            integrity: self.integrity.clone(),
        }
    }

    /// Whether this version was selected by requests like `req` (Vary).
    /// A native request is compared as it would be forwarded: the tier
    /// makes the native stream itself (see `without_native`).
    pub fn selected_by(&self, req: &HeaderMap) -> bool {
        if self.vary.contains(&header::ACCEPT) && circus_http::accept::wants_native(req) {
            return rfc9111::vary_matches(&self.vary, &self.vary_values, &circus_http::accept::without_native(req));
        }
        rfc9111::vary_matches(&self.vary, &self.vary_values, req)
    }

    /// Whether this version may be offered as whole: the origin gave no
    /// digest, or every block was checked against it.
    pub fn trusted(&self) -> bool {
        self.integrity.as_ref().is_none_or(|i| i.verified())
    }

    /// Whether requests that select this version select `other` too: the
    /// same fields varied on, with the same values (`other` replaces it).
    pub fn same_selection(&self, other: &Object) -> bool {
        self.vary == other.vary && self.vary_values == other.vary_values
    }

    /// Headers for a block fetch: the varied request headers, and a
    /// precondition so that a changed origin object fails the fetch (412)
    /// instead of splicing two versions into one body.
    pub fn fetch_headers(&self, start: u64, end: u64) -> HeaderMap {
        let mut h = self.forward.clone();
        h.insert(header::RANGE, format!("bytes={start}-{end}").parse().expect("ASCII"));
        if let Some(etag) = self.headers.get(header::ETAG).filter(|e| !e.as_bytes().starts_with(b"W/")) {
            h.insert(header::IF_MATCH, etag.clone());
        } else if let Some(lm) = self.headers.get(header::LAST_MODIFIED) {
            h.insert(header::IF_UNMODIFIED_SINCE, lm.clone());
        }
        h
    }

    /// Bytes this description holds, for the store's budget.
    pub fn header_bytes(&self) -> u64 {
        let fields: u64 =
            self.headers.iter().chain(self.forward.iter()).map(|(n, v)| (n.as_str().len() + v.len() + 32) as u64).sum();
        fields + self.wire_head.len() as u64 + self.leaves.bytes() + self.body.len() as u64
    }
}

/// Status line and the fixed headers of a whole 200 response: the same
/// fields hyper writes for the tier's own 200s.
fn wire_head(headers: &HeaderMap, size: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
    for (name, value) in headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("content-length: {size}\r\naccept-ranges: bytes\r\n").as_bytes());
    out
}
