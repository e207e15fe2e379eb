//! Answers made from what is stored (conditions, ranges, the native
//! stream of a version whose tree is known) and from the origin's own
//! answers relayed.

use crate::{
    Answer, Object, OriginBlocks, OriginTier, body, client, metrics, peers::Upstream, rfc9111, source::OriginResponse,
};
use circus_core::FileId;
use circus_http::{
    HttpError, ResBody, empty, full,
    rfc9110::{self, Conditionals, Precondition, Ranges, Validators},
};
use circus_store::{Description, FileEntry};
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode, header};
use std::{
    sync::{Arc, Weak},
    time::SystemTime,
};

impl OriginTier {
    /// The scheduler's entry for `obj`, once its tree is complete: one per
    /// version while any download or cached block uses it, so that every
    /// native client of the version shares the scheduler's reads.
    pub(crate) fn native_entry(self: &Arc<Self>, obj: &Arc<Object>) -> Option<Arc<FileEntry>> {
        // A tree learnt from blocks not shown to be one version is no tree.
        let index = obj.leaves.index().filter(|_| obj.trusted())?;
        let mut natives = self.natives.lock().expect("natives lock");
        if let Some(entry) = natives.get(&obj.version).and_then(Weak::upgrade) {
            return Some(entry);
        }
        natives.retain(|_, e| e.strong_count() > 0);
        let blocks = OriginBlocks { tier: self.clone(), obj: obj.clone() };
        // Local files number theirs from 1; the top bit keeps the two apart.
        let id = FileId(obj.version | 1 << 63);
        let content_type = obj.headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
        let described = Description {
            size: obj.size,
            modified: obj.last_modified.unwrap_or(SystemTime::UNIX_EPOCH),
            // Resumes name the version by ETag (If-Range): an origin that
            // gave none gets one that names this fetched version.
            etag: obj.etag.clone().unwrap_or_else(|| format!("\"circus-origin-{:x}\"", obj.version)),
            content_type: content_type.unwrap_or("application/octet-stream").to_owned(),
        };
        let entry = Arc::new(FileEntry::new(id, obj.target.clone(), Arc::new(blocks), described, index.block_size));
        natives.insert(obj.version, Arc::downgrade(&entry));
        Some(entry)
    }

    /// The native stream of `file` (a version of `obj` with its tree
    /// known), with the origin's fields that name the version.
    pub(crate) fn native(&self, obj: &Object, file: Arc<FileEntry>) -> Answer {
        let mut headers = HeaderMap::new();
        headers.insert(header::ETAG, HeaderValue::from_str(&file.etag).expect("etag is a header value"));
        for name in [header::LAST_MODIFIED, HeaderName::from_static("repr-digest")] {
            if let Some(v) = obj.headers.get(&name) {
                headers.insert(name, v.clone());
            }
        }
        headers.insert(header::VARY, HeaderValue::from_static("Accept"));
        Answer::Native { file, headers }
    }

    pub(crate) fn respond(self: &Arc<Self>, obj: &Arc<Object>, h: &HeaderMap, head: bool, now: SystemTime) -> Answer {
        let hs = |n| h.get(n).and_then(|v: &HeaderValue| v.to_str().ok());
        // A validator the origin did not give must not take part.
        let v = Validators {
            etag: obj.etag.as_deref().unwrap_or(""),
            last_modified: obj.last_modified.unwrap_or(SystemTime::UNIX_EPOCH),
        };
        let has_etag = obj.etag.is_some();
        let has_lm = obj.last_modified.is_some();
        let cond = Conditionals {
            if_match: hs(header::IF_MATCH).filter(|_| has_etag),
            if_none_match: hs(header::IF_NONE_MATCH).filter(|_| has_etag),
            if_modified_since: hs(header::IF_MODIFIED_SINCE).filter(|_| has_lm),
            if_unmodified_since: hs(header::IF_UNMODIFIED_SINCE).filter(|_| has_lm),
        };
        let mut res = Response::new(empty());
        *res.headers_mut() = obj.headers.clone();
        res.headers_mut().insert(header::AGE, rfc9111::age_header(&obj.freshness, now));
        if obj.status != StatusCode::OK {
            // Stored whole: no part of it, no condition on it.
            *res.status_mut() = obj.status;
            if obj.status != StatusCode::NO_CONTENT {
                res.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from(obj.body.len()));
            }
            if !head {
                self.metrics.served(metrics::class(obj.size, self.block_size), obj.body.len() as u64);
                *res.body_mut() = full(obj.body.clone());
            }
            return res.into();
        }
        match rfc9110::evaluate(&cond, &v) {
            Precondition::NotModified => {
                *res.status_mut() = StatusCode::NOT_MODIFIED;
                return res.into();
            }
            Precondition::Failed => {
                *res.status_mut() = StatusCode::PRECONDITION_FAILED;
                return res.into();
            }
            Precondition::Proceed => {}
        }
        if circus_http::accept::wants_native(h)
            && let Some(file) = self.native_entry(obj)
        {
            return self.native(obj, file);
        }
        let size = obj.size;
        // Without validators, an If-Range cannot match: the whole object.
        let if_range = hs(header::IF_RANGE);
        let ranges = if if_range.is_none() || (has_etag || has_lm) && rfc9110::if_range_allows(if_range, &v) {
            rfc9110::resolve_ranges(hs(header::RANGE), size)
        } else {
            Ranges::Whole
        };
        let (start, end) = match ranges {
            Ranges::Unsatisfiable => {
                *res.status_mut() = StatusCode::RANGE_NOT_SATISFIABLE;
                let cr = HeaderValue::from_str(&format!("bytes */{size}")).expect("ASCII");
                res.headers_mut().insert(header::CONTENT_RANGE, cr);
                return res.into();
            }
            // Several ranges of an origin object are answered whole (allowed).
            Ranges::Whole | Ranges::Parts(_) if size == 0 => (0, 0),
            Ranges::Parts(r) if r.len() == 1 => {
                let cr = HeaderValue::from_str(&format!("bytes {}-{}/{size}", r[0].0, r[0].1)).expect("ASCII");
                res.headers_mut().insert(header::CONTENT_RANGE, cr);
                *res.status_mut() = StatusCode::PARTIAL_CONTENT;
                r[0]
            }
            Ranges::Whole | Ranges::Parts(_) => (0, size - 1),
        };
        let len = if size == 0 { 0 } else { end - start + 1 };
        let upstream = Upstream::for_request(h);
        if upstream == Upstream::Origin
            && !head
            && let Some(peers) = &self.peers
            && peers.answered_ask(&obj.target, obj.version, size, start)
        {
            res.headers_mut().insert(crate::HOT_HEADER, HeaderValue::from_static("1"));
        }
        res.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        res.headers_mut().insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
        if head || len == 0 {
            return res.into();
        }
        // The hit path for small objects: one resident block, no stream.
        // Not for a member's ask: its body must go through `body` so that
        // this node's clients hold back while it sends (members first).
        let single = obj.layout.block_of(start) == obj.layout.block_of(end) && obj.trusted() && !upstream.for_member();
        if let Some(b) = obj.layout.block_of(start).filter(|_| single)
            && let Some(bytes) = self.store.block(obj.version, b)
        {
            let off = obj.layout.offset(b);
            self.metrics.served(metrics::class(obj.size, self.block_size), len);
            *res.body_mut() = full(bytes.slice((start - off) as usize..=(end - off) as usize));
            return res.into();
        }
        *res.body_mut() = body::range(self.clone(), obj.clone(), start, end, upstream);
        res.into()
    }

    /// Forwards the request as it is and relays the answer to this client
    /// only; nothing is stored.
    pub(crate) async fn relay(&self, target: &str, h: &HeaderMap, head: bool) -> Result<Response<ResBody>, HttpError> {
        self.metrics.relayed.inc();
        self.metrics.origin_requests.inc();
        let h = &circus_http::accept::without_native(h);
        let res = if head { self.client.head(target, h).await } else { self.client.get(target, h).await };
        let res = res.map_err(|e| {
            self.metrics.origin_errors.inc();
            HttpError::from(e)
        })?;
        Ok(self.relayed(res, head))
    }

    /// An origin's answer as the client gets it: hop-by-hop fields
    /// dropped, Via added, the body streamed (none for HEAD) and counted.
    pub(crate) fn relayed(&self, res: OriginResponse, head: bool) -> Response<ResBody> {
        let OriginResponse { status, mut headers, body } = res;
        client::strip_hop_by_hop(&mut headers);
        headers.append(header::VIA, client::VIA);
        let counters = self.metrics.clone();
        let body = if head {
            empty()
        } else {
            body::relayed(body, move |n| {
                counters.fetched(metrics::UNSTORED, n);
                counters.served(metrics::UNSTORED, n);
            })
        };
        let mut res = Response::new(body);
        *res.status_mut() = status;
        *res.headers_mut() = headers;
        res
    }
}

/// The client's headers that select a representation (Accept without the
/// native type: see [`circus_http::accept::without_native`]), without the ones that ask for a
/// part or a condition (the tier fetches whole blocks).
pub(crate) fn forwarded(h: &HeaderMap) -> HeaderMap {
    let mut fh = circus_http::accept::without_native(h);
    client::strip_hop_by_hop(&mut fh);
    for name in [
        header::RANGE,
        header::IF_RANGE,
        header::IF_MATCH,
        header::IF_NONE_MATCH,
        header::IF_MODIFIED_SINCE,
        header::IF_UNMODIFIED_SINCE,
        header::CACHE_CONTROL,
    ] {
        fh.remove(name);
    }
    fh.remove(crate::PEER_HEADER);
    fh
}

/// A 206 that holds all `size` bytes of the object, as the 200 it answers.
pub(crate) fn whole(mut res: OriginResponse, size: u64) -> OriginResponse {
    res.status = StatusCode::OK;
    res.headers.remove(header::CONTENT_RANGE);
    res.headers.insert(header::CONTENT_LENGTH, HeaderValue::from(size));
    res
}
