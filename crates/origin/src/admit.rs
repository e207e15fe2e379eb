//! What the first answer for a target becomes: a stored version whose
//! first block streams in, a small answer of another status stored whole,
//! an unsized one stored if it ends within a block, or the answer relayed
//! as it is to the one client that asked.

use crate::client::content_range;
use crate::{
    Lookup, Object, OriginTier,
    fetch::Via,
    integrity, metrics,
    peers::{Peers, Upstream},
    respond::{forwarded, whole},
    rfc9111,
    source::{OriginBody, OriginResponse},
};
use bytes::Bytes;
use circus_store::ReadError;
use futures_util::StreamExt;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use std::{
    sync::{Arc, Mutex, atomic::Ordering},
    time::SystemTime,
};

impl OriginTier {
    /// Asks for the first block (conditionally when `stale` is given) and
    /// admits the answer. The body of the first block goes on streaming
    /// into its block fetch after this returns.
    pub(crate) async fn first_fetch(
        self: &Arc<Self>,
        target: &str,
        h: &HeaderMap,
        stale: Option<Arc<Object>>,
    ) -> Lookup {
        let mut fh = forwarded(h);
        if let Some(s) = &stale {
            fh.extend(rfc9111::revalidation_headers(&s.headers));
        }
        let first_block = format!("bytes=0-{}", self.block_size - 1);
        fh.insert(header::RANGE, HeaderValue::from_str(&first_block).expect("ASCII"));
        let request_time = SystemTime::now();
        let (res, peer) = match self.first_answer(target, fh, h.get(header::CACHE_CONTROL)).await {
            Ok(answered) => answered,
            Err(e) => {
                self.metrics.origin_errors.inc();
                return Lookup::Failed(e);
            }
        };
        let response_time = SystemTime::now();
        let status = res.status;
        // Versions are described by the request as the origin saw it.
        let h = &circus_http::accept::without_native(h);
        if status == StatusCode::NOT_MODIFIED {
            let Some(s) = stale else {
                return Lookup::Failed(ReadError::origin("origin answered 304 to an unconditional request"));
            };
            self.metrics.revalidated.inc();
            let fresh = Arc::new(s.refreshed(&res.headers, request_time, response_time));
            self.store.put_object(target, fresh.clone());
            return Lookup::Stored(fresh);
        }
        if let Some(s) = &stale {
            // Changed at the origin: its blocks must not be mixed in.
            self.store.forget_version(target, s.version);
        }
        let relay = |res| Lookup::Relay(Arc::new(Mutex::new(Some(res))));
        let (size, last_byte) = match status {
            StatusCode::PARTIAL_CONTENT => match content_range(&res.headers) {
                Some((0, last, size)) => (size, last),
                _ => {
                    return Lookup::Failed(ReadError::origin(
                        "origin sent a Content-Range that does not start the object",
                    ));
                }
            },
            StatusCode::OK => {
                match res.headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse().ok()) {
                    Some(size) => (size, u64::saturating_sub(size, 1)),
                    None => return self.keep_unsized(target, h, res, request_time, response_time).await,
                }
            }
            // An empty object cannot satisfy bytes=0-N: ask for it plainly.
            StatusCode::RANGE_NOT_SATISFIABLE => return Lookup::NotShared,
            // The answer to the request whatever its Range asked.
            _ => return self.keep_status(target, h, res, request_time, response_time).await,
        };
        if rfc9111::storable(h, status, &res.headers).is_err() {
            return match status {
                StatusCode::OK => relay(res),
                // The whole object in one part: the answer to the request.
                _ if last_byte + 1 == size => relay(whole(res, size)),
                // The rest follows from the same version, or the request
                // is relayed as it is.
                _ => match self.continued(target, h, forwarded(h), res, (last_byte, size)) {
                    Ok(res) => relay(res),
                    Err(_) => Lookup::NotShared,
                },
            };
        }
        let version = self.next_version.fetch_add(1, Ordering::Relaxed);
        // A part's Content-Range is framing; on a 200 it is the origin's field.
        let mut fields = res.headers.clone();
        if status == StatusCode::PARTIAL_CONTENT {
            fields.remove(header::CONTENT_RANGE);
        }
        // The member's own entry; this tier adds its own as it answers.
        if peer.is_some() {
            fields.remove(crate::CACHE_STATUS);
        }
        let obj = Object::new(
            target,
            version,
            size,
            self.block_size,
            self.native_block,
            h,
            &fields,
            request_time,
            response_time,
        );
        // A version in one block comes from one response: nothing to splice
        // (a block fetched again is checked against its leaves), and an
        // origin's wrong digest must not cut what it sent whole.
        let expected = integrity::Expected::from_response(status, &res.headers, self.client.is_s3())
            .filter(|_| obj.layout.blocks() > 1);
        let integrity = expected.map(|e| Arc::new(integrity::Integrity::new(e, obj.layout)));
        let obj = Arc::new(Object { integrity, ..obj });
        let layout = obj.layout;
        if layout.blocks() > 0 {
            let Some(last) = layout.block_of(last_byte) else {
                return Lookup::Failed(ReadError::origin("origin answered a range past the object's end"));
            };
            if layout.offset(last) + u64::from(layout.block_len(last)) != last_byte + 1 {
                return Lookup::Failed(ReadError::origin("origin answered a range that ends inside a block"));
            }
            let via = if peer.is_some() { Via::Owner } else { Via::Origin };
            let fetches = self.register(&obj, 0, last, via);
            self.spawn_fetch(obj.clone(), 0, fetches, Some((res, peer)), Upstream::Owner);
        }
        self.store.put_object(target, obj.clone());
        Lookup::Stored(obj)
    }

    /// The first answer for `target` to the request headers `fh`: from the
    /// owner of its first group when that is another live member (a member
    /// that fails is out, and the next is asked), else from the origin;
    /// with the member that answered.
    ///
    /// Asked for a peer too: the owner of a first group is the first of
    /// that group's ranking among the members live in the asker's view,
    /// and the asker is live in its own (a node not in its own list asks
    /// the origin), so each hop goes to a member that scores higher than
    /// the one before. However the views differ, no request comes back to
    /// a member it passed.
    ///
    /// A peer is also given the client's Cache-Control, so that a client
    /// that asks for revalidation (no-cache, max-age=0) gets it from the
    /// member whose copy it would otherwise be.
    async fn first_answer(
        &self,
        target: &str,
        fh: HeaderMap,
        cache_control: Option<&HeaderValue>,
    ) -> Result<(OriginResponse, Option<Arc<str>>), ReadError> {
        let mut to_peer = fh.clone();
        if let Some(cc) = cache_control {
            to_peer.insert(header::CACHE_CONTROL, cc.clone());
        }
        if let Some((res, m)) = self.ask_member(target, to_peer, |p: &Peers| p.first_owner(target)).await? {
            return Ok((res, Some(m)));
        }
        self.metrics.origin_requests.inc();
        Ok((self.client.get(target, &fh).await?, None))
    }

    /// Stores an answer of another status than 200 whole, body and all,
    /// when RFC 9111 allows and its body is at most a block, and relays
    /// it otherwise.
    pub(crate) async fn keep_status(
        &self,
        target: &str,
        h: &HeaderMap,
        res: OriginResponse,
        request_time: SystemTime,
        response_time: SystemTime,
    ) -> Lookup {
        let len = res.headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        let small = len.is_some_and(|n| n <= u64::from(self.block_size));
        if !small || rfc9111::storable(h, res.status, &res.headers).is_err() {
            return Lookup::Relay(Arc::new(Mutex::new(Some(res))));
        }
        let (status, headers) = (res.status, res.headers.clone());
        let body = match self.read_whole(res.body, len.unwrap_or(0)).await {
            Ok(body) => body,
            Err(e) => {
                self.metrics.origin_errors.inc();
                return Lookup::Failed(e);
            }
        };
        let version = self.next_version.fetch_add(1, Ordering::Relaxed);
        let size = body.len() as u64;
        let blocks = (self.block_size, self.native_block);
        let obj = Object::new(target, version, size, blocks.0, blocks.1, h, &headers, request_time, response_time);
        let obj = Arc::new(Object { status, body, ..obj });
        self.store.put_object(target, obj.clone());
        Lookup::Stored(obj)
    }

    /// A 200 without Content-Length (chunked, or ended by the close):
    /// stored as an object of one block when RFC 9111 allows and it ends
    /// within a block; relayed otherwise, what was read put back in front.
    pub(crate) async fn keep_unsized(
        &self,
        target: &str,
        h: &HeaderMap,
        mut res: OriginResponse,
        request_time: SystemTime,
        response_time: SystemTime,
    ) -> Lookup {
        let relay = |res| Lookup::Relay(Arc::new(Mutex::new(Some(res))));
        if rfc9111::storable(h, res.status, &res.headers).is_err() {
            return relay(res);
        }
        let (mut read, wait) = (Vec::new(), self.client.timeout());
        loop {
            match tokio::time::timeout(wait, res.body.next()).await {
                Err(_) => return Lookup::Failed(ReadError::origin(format!("origin sent nothing for {wait:?}"))),
                Ok(Some(Err(e))) => return Lookup::Failed(e),
                Ok(Some(Ok(chunk))) => read.extend_from_slice(&chunk),
                Ok(None) => break,
            }
            if read.len() > self.block_size as usize {
                let head = Bytes::from(read);
                res.body = futures_util::stream::once(async move { Ok(head) }).chain(res.body).boxed();
                return relay(res);
            }
        }
        self.metrics.fetched(metrics::class(read.len() as u64, self.block_size), read.len() as u64);
        let (version, size) = (self.next_version.fetch_add(1, Ordering::Relaxed), read.len() as u64);
        let blocks = (self.block_size, self.native_block);
        let obj = Object::new(target, version, size, blocks.0, blocks.1, h, &res.headers, request_time, response_time);
        if size > 0 {
            let bytes = Bytes::from(read);
            obj.leaves.record(0, &bytes);
            self.store.put_block(version, 0, bytes);
        }
        let obj = Arc::new(obj);
        self.store.put_object(target, obj.clone());
        Lookup::Stored(obj)
    }

    /// All `len` bytes of a body, each chunk within the origin timeout.
    pub(crate) async fn read_whole(&self, mut body: OriginBody, len: u64) -> Result<Bytes, ReadError> {
        let mut out = Vec::with_capacity(len as usize);
        let wait = self.client.timeout();
        while let Some(chunk) = tokio::time::timeout(wait, body.next())
            .await
            .map_err(|_| ReadError::origin(format!("origin sent nothing for {wait:?}")))?
        {
            out.extend_from_slice(&chunk?);
            if out.len() as u64 > len {
                return Err(ReadError::origin("origin sent more bytes than its Content-Length"));
            }
        }
        self.metrics.fetched(metrics::class(out.len() as u64, self.block_size), out.len() as u64);
        if (out.len() as u64) < len {
            return Err(ReadError::origin(format!("origin closed the body at {} of {len} bytes", out.len())));
        }
        Ok(out.into())
    }
}
