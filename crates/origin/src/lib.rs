//! The caching tier in front of an origin: an HTTP server (`circus serve
//! --origin http://host:port/`) or an S3 bucket (`--origin s3://BUCKET`).
//!
//! A request is answered from a stored object version when RFC 9111 allows
//! ([`crate::rfc9111`]): the hit path is two table lookups (the object's
//! description, then its block) and a response around shared `Bytes`.
//! Otherwise the tier asks the origin for the first block with a Range GET
//! (one request per target however many clients miss at once), learns the
//! size and caching headers from it, and fetches further blocks with Range
//! GETs as readers reach them, one fetch per block (`fetch`). Other
//! storable statuses are stored whole when small; anything not stored
//! (private, no-store, a cookie, credentials, an unstorable status) is that
//! same first answer relayed to its one client. Other methods than GET and
//! HEAD are forwarded with their bodies and invalidate what is stored.
//! Whole-object digests the origin gives are checked (`integrity`), so a
//! version spliced from two of the origin's never passes as whole.
//!
//! Parts: `source` (the origin behind one `get`: `client`, the pooled HTTP
//! client with `tls` for https origins, or `s3`, a bucket through object_store), `object` (a stored version),
//! `hit` (whole small objects answered by the hit lane, before hyper),
//! `fetch` (single-flight block fetches), `store` (the byte budget, S3-FIFO
//! admission via quick_cache), `body` (response bodies), `leaves` (each
//! version's hash tree, learnt as its blocks pass).
//!
//! Native clients (`Accept: application/vnd.circus.blocks`) of a version
//! whose tree is complete are served like local files: a [`FileEntry`]
//! backed by the tier joins the scheduler, which reads blocks through
//! [`OriginBlocks`] (store or single-flight fetch) and sends them in its
//! own order, shared across clients. Until the tree is complete they get the
//! plain response, which the protocol lets every client fall back on.

mod body;
mod client;
mod continued;
mod error;
mod fetch;
mod hit;
mod integrity;
mod leaves;
mod metrics;
mod object;
pub mod rfc9111;
mod s3;
mod source;
mod store;
mod target;
mod tls;

pub use error::SetupError;
pub use source::{OriginSource, S3Config};

use bytes::Bytes;
use circus_core::FileId;
use circus_http::{
    HttpError, ResBody, empty, full,
    rfc9110::{self, Conditionals, Precondition, Ranges, Validators},
};
use circus_store::{BlockSource, Description, FileEntry, FileIndex, ReadError, ReadFuture};
use client::content_range;
use fetch::BlockFetch;
use futures_util::StreamExt;
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use metrics::OriginMetrics;
pub(crate) use object::Object;
use prometheus_client::registry::Registry;
use rfc9111::CacheControl;
use rustc_hash::FxHashMap;
use source::{OriginResponse, Source};
use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, Weak,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, SystemTime},
};
use store::Store;
use tokio::sync::{OnceCell, Semaphore};

/// The tier's share of the memory budget, in bytes.
#[derive(Debug, Clone, Copy)]
pub struct TierBudget {
    /// Stored blocks and object descriptions.
    pub stored: u64,
    /// Fetches in flight (their buffers are held outside the store).
    pub fetching: u64,
}

/// Settings of the origin tier.
#[derive(Debug, Clone)]
pub struct OriginConfig {
    /// Where objects come from.
    pub source: OriginSource,
    /// Unit of origin fetches and of storage.
    pub block_size: u32,
    /// Blocks fetched ahead of the furthest reader of an object.
    pub readahead: u32,
    /// Longest wait for a response head or between two body chunks.
    pub timeout: Duration,
    /// Origin requests in flight at once.
    pub max_fetches: usize,
    /// CA certificates (PEM) an https origin's certificate must chain to,
    /// instead of the system's roots.
    pub ca_file: Option<std::path::PathBuf>,
}

impl OriginConfig {
    pub fn new(source: OriginSource) -> Self {
        OriginConfig {
            source,
            block_size: 1 << 20,
            readahead: 4,
            timeout: Duration::from_secs(30),
            max_fetches: 64,
            ca_file: None,
        }
    }
}

/// What one trip to the origin for a target yields, shared by every
/// request that waited on it.
#[derive(Debug, Clone)]
enum Lookup {
    Stored(Arc<Object>),
    /// Not shareable and not a whole answer to the request (a part of a
    /// private object, say): each waiter makes its own request and the
    /// answer is never stored.
    NotShared,
    /// The origin's answer, whole, not stored (a status other than 200,
    /// no-store, no length): the waiter that takes it relays it; any other
    /// waiter asks on its own.
    Relay(Arc<Mutex<Option<OriginResponse>>>),
    Failed(ReadError),
}

impl Lookup {
    /// The origin failed, or answered with a server error: what a stale
    /// response may stand in for (stale-if-error).
    fn is_origin_error(&self) -> bool {
        match self {
            Lookup::Failed(_) => true,
            Lookup::Relay(first) => {
                first.lock().expect("relay lock").as_ref().is_some_and(|r| r.status.is_server_error())
            }
            Lookup::Stored(o) => o.status.is_server_error(),
            Lookup::NotShared => false,
        }
    }
}

/// What an operator purges.
#[derive(Debug, Clone)]
pub enum Purge {
    /// One target (path and query), every representation of it.
    Target(String),
    /// Every target whose normalised form starts with this.
    Prefix(String),
}

/// What the tier answers a request with.
#[derive(Debug)]
pub enum Answer {
    /// A response to send as it is.
    Response(Response<ResBody>),
    /// The native block stream of a version whose tree is known: the server
    /// joins the client to its scheduler (shared with every other native
    /// client of the version) and adds `headers` to the response.
    Native { file: Arc<FileEntry>, headers: HeaderMap },
}

impl From<Response<ResBody>> for Answer {
    fn from(res: Response<ResBody>) -> Self {
        Answer::Response(res)
    }
}

/// A block as a reader finds it.
pub(crate) enum BlockRef {
    Ready(Bytes),
    Pending(Arc<BlockFetch>),
}

#[derive(Debug)]
pub struct OriginTier {
    client: Source,
    store: Store,
    /// Blocks being fetched; an entry is removed after its bytes are in
    /// the store (or it failed), so a reader always finds one or the other.
    inflight: Mutex<FxHashMap<(u64, u32), Arc<BlockFetch>>>,
    /// First fetches and revalidations in flight, per target.
    lookups: Mutex<HashMap<String, Arc<OnceCell<Lookup>>>>,
    next_version: AtomicU64,
    block_size: u32,
    readahead: u32,
    slots: Arc<Semaphore>,
    /// Bytes (in KiB permits) of fetches in flight: their buffers are held
    /// outside the store, so this share of the budget is set apart for them.
    fetch_kib: Arc<Semaphore>,
    fetch_kib_total: u32,
    metrics: Arc<OriginMetrics>,
    /// The scheduler's block size: the unit of native blocks and leaves.
    native_block: u32,
    /// The scheduler's view of each version being served natively, by
    /// version; weak, as the entries hold the tier.
    natives: Mutex<FxHashMap<u64, Weak<FileEntry>>>,
}

/// A version of an origin object as the scheduler reads it: blocks come
/// from the tier's store or its single-flight fetches.
#[derive(Debug)]
pub struct OriginBlocks {
    tier: Arc<OriginTier>,
    obj: Arc<Object>,
}

impl BlockSource for OriginBlocks {
    /// `len` bytes at `offset` (one native block, within one origin block).
    fn read_block(&self, offset: u64, len: u32) -> ReadFuture<'_, Bytes> {
        Box::pin(self.tier.read(&self.obj, offset, len))
    }

    /// Reads may share the origin block's buffer.
    fn shares_buffers(&self) -> bool {
        true
    }

    fn index(&self) -> ReadFuture<'_, Arc<FileIndex>> {
        let index = self.index_now().ok_or_else(|| ReadError::internal("an origin version's tree is not known"));
        Box::pin(async move { index })
    }

    fn index_now(&self) -> Option<Arc<FileIndex>> {
        self.obj.leaves.index()
    }
}

impl OriginTier {
    /// A tier keeping `budget.stored` bytes of descriptions and blocks,
    /// with `budget.fetching` bytes of fetches in flight; native blocks of
    /// `native_block` bytes. Fails on origin settings that cannot work.
    pub fn new(
        cfg: &OriginConfig,
        budget: TierBudget,
        native_block: u32,
        registry: &mut Registry,
    ) -> Result<Self, SetupError> {
        let TierBudget { stored, fetching } = budget;
        let fetch_kib_total = u32::try_from(fetching / 1024).unwrap_or(u32::MAX).max(1);
        Ok(OriginTier {
            client: Source::new(&cfg.source, cfg.timeout, cfg.ca_file.as_deref())?,
            store: Store::new(stored, 16 * 1024, u64::from(cfg.block_size)),
            fetch_kib: Arc::new(Semaphore::new(fetch_kib_total as usize)),
            fetch_kib_total,
            inflight: Mutex::default(),
            lookups: Mutex::default(),
            next_version: AtomicU64::new(1),
            block_size: cfg.block_size,
            readahead: cfg.readahead,
            slots: Arc::new(Semaphore::new(cfg.max_fetches.max(1))),
            metrics: Arc::new(OriginMetrics::register(registry)),
            native_block,
            natives: Mutex::default(),
        })
    }

    /// Answers a GET or HEAD for `req`'s target.
    pub async fn handle<B>(self: &Arc<Self>, req: &Request<B>, head: bool) -> Result<Answer, HttpError> {
        // Normalised before anything else: the origin and the store only
        // ever see a target inside the prefix.
        let target = &target::normalize(req.uri().path_and_query().map_or("/", |p| p.as_str()))?;
        let h = req.headers();
        // The hit path below allocates nothing but the response: lookups
        // borrow the target, Vary values are compared in place.
        let now = SystemTime::now();
        // A request with credentials is someone's own: only what the origin
        // marked shared is served to it from the store, and its answer is
        // relayed to it alone.
        let credentials = h.contains_key(header::AUTHORIZATION) || h.contains_key(header::COOKIE);
        if credentials || CacheControl::parse(h).no_store {
            let shared = self.store.object(target, |o| {
                CacheControl::of_response(&o.headers).0.shared_explicitly()
                    && o.selected_by(h)
                    && o.freshness.usable(h, now)
            });
            if let Some(o) = shared.filter(|_| credentials) {
                self.metrics.hits.inc();
                return Ok(self.respond(&o, h, head, now));
            }
            return self.relay(target, h, head).await.map(Answer::from);
        }
        let found = self.store.object(target, |o| o.selected_by(h));
        let outcome = match found {
            Some(o) if o.freshness.usable(h, now) => {
                self.metrics.hits.inc();
                Lookup::Stored(o)
            }
            Some(o) if o.freshness.serve_while_revalidating(h, now) => {
                self.metrics.hits.inc();
                self.revalidate_in_background(target, h, o.clone());
                Lookup::Stored(o)
            }
            _ if CacheControl::parse(h).only_if_cached => return Err(HttpError::NotStored),
            stale => {
                self.metrics.misses.inc();
                let fallback = stale.clone().filter(|o| o.freshness.serve_on_error(h, now));
                match (self.lookup(target, h, stale).await, fallback) {
                    (out, Some(o)) if out.is_origin_error() => Lookup::Stored(o),
                    (out, _) => out,
                }
            }
        };
        match outcome {
            Lookup::Stored(o) if o.selected_by(h) => Ok(self.respond(&o, h, head, now)),
            Lookup::Relay(first) => {
                let taken = first.lock().expect("relay lock").take();
                match taken {
                    Some(res) => Ok(self.relayed(res, head).into()),
                    // Another waiter took the origin's answer: ask again.
                    None => self.relay(target, h, head).await.map(Answer::from),
                }
            }
            Lookup::Stored(_) | Lookup::NotShared => self.relay(target, h, head).await.map(Answer::from),
            Lookup::Failed(e) => Err(e.into()),
        }
    }

    /// Forwards a request of another method than GET or HEAD to the
    /// origin, its body streamed, and relays the answer. An unsafe
    /// method's answer that is no error invalidates what is stored for the
    /// target and for the targets its Location and Content-Location name
    /// on this host (RFC 9111 §4.4).
    pub async fn forward<B>(self: &Arc<Self>, req: Request<B>) -> Result<Response<ResBody>, HttpError>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let target = target::normalize(req.uri().path_and_query().map_or("/", |p| p.as_str()))?;
        let (parts, body) = req.into_parts();
        let host = parts.headers.get(header::HOST).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let method = parts.method;
        self.metrics.relayed.inc();
        self.metrics.origin_requests.inc();
        let body = body.map_err(Into::into).boxed_unsync();
        let res = self.client.send(method.clone(), &target, parts.headers, body).await.map_err(|e| {
            self.metrics.origin_errors.inc();
            HttpError::from(e)
        })?;
        if !method.is_safe() && (res.status.is_success() || res.status.is_redirection()) {
            self.store.forget_object(&target);
            for name in [header::LOCATION, header::CONTENT_LOCATION] {
                let named = res.headers.get(name).and_then(|v| v.to_str().ok());
                if let Some(t) = named.and_then(|v| target::on_host(v, host.as_deref())) {
                    self.store.forget_object(&t);
                }
            }
        }
        Ok(self.relayed(res, false))
    }

    /// Revalidates `stale` while it is served (stale-while-revalidate);
    /// joins a revalidation already under way.
    fn revalidate_in_background(self: &Arc<Self>, target: &str, h: &HeaderMap, stale: Arc<Object>) {
        let (tier, target, h) = (self.clone(), target.to_owned(), h.clone());
        tokio::spawn(async move { tier.lookup(&target, &h, Some(stale)).await });
    }

    /// One origin trip per target at a time; concurrent callers share it.
    async fn lookup(self: &Arc<Self>, target: &str, h: &HeaderMap, stale: Option<Arc<Object>>) -> Lookup {
        let cell = self.lookups.lock().expect("lookups lock").entry(target.to_owned()).or_default().clone();
        let out = cell.get_or_init(|| self.first_fetch(target, h, stale)).await.clone();
        let mut lookups = self.lookups.lock().expect("lookups lock");
        if lookups.get(target).is_some_and(|c| Arc::ptr_eq(c, &cell)) {
            lookups.remove(target);
        }
        out
    }

    /// Asks for the first block (conditionally when `stale` is given) and
    /// admits the answer. The body of the first block goes on streaming
    /// into its block fetch after this returns.
    async fn first_fetch(self: &Arc<Self>, target: &str, h: &HeaderMap, stale: Option<Arc<Object>>) -> Lookup {
        let mut fh = forwarded(h);
        if let Some(s) = &stale {
            fh.extend(rfc9111::revalidation_headers(&s.headers));
        }
        let first_block = format!("bytes=0-{}", self.block_size - 1);
        fh.insert(header::RANGE, HeaderValue::from_str(&first_block).expect("ASCII"));
        let request_time = SystemTime::now();
        self.metrics.origin_requests.inc();
        let res = match self.client.get(target, &fh).await {
            Ok(res) => res,
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
            let last = layout.block_of(last_byte).expect("in the object");
            if layout.offset(last) + u64::from(layout.block_len(last)) != last_byte + 1 {
                return Lookup::Failed(ReadError::origin("origin answered a range that ends inside a block"));
            }
            let fetches = self.register(&obj, 0, last);
            self.spawn_fetch(obj.clone(), 0, fetches, Some(res));
        }
        self.store.put_object(target, obj.clone());
        Lookup::Stored(obj)
    }

    /// Block `b` of `obj`, resident or on its way; starts fetches for it and
    /// the `readahead` blocks after it that are neither.
    fn block(self: &Arc<Self>, obj: &Arc<Object>, b: u32, readahead: u32) -> BlockRef {
        let last = (b + readahead).min(obj.layout.blocks() - 1);
        if let Some(bytes) = self.store.block(obj.version, b) {
            if last > b {
                self.ensure(obj, b + 1, last);
            }
            return BlockRef::Ready(bytes);
        }
        loop {
            self.ensure(obj, b, last);
            if let Some(f) = self.inflight.lock().expect("inflight lock").get(&(obj.version, b)) {
                return BlockRef::Pending(f.clone());
            }
            // Completed between the two looks; if it was evicted at once (a
            // budget smaller than the readers' spread) the next round claims it.
            if let Some(bytes) = self.store.block(obj.version, b) {
                return BlockRef::Ready(bytes);
            }
        }
    }

    /// `len` bytes at `offset` of `obj`, within one of its blocks.
    async fn read(self: &Arc<Self>, obj: &Arc<Object>, offset: u64, len: u32) -> Result<Bytes, ReadError> {
        let b = obj
            .layout
            .block_of(offset)
            .ok_or_else(|| ReadError::origin(format!("{}: read past the end", obj.target)))?;
        let at = (offset - obj.layout.offset(b)) as usize;
        // The scheduler's reads are the demand: no read-ahead of our own,
        // whose blocks its out-of-order reads might never come for.
        match self.block(obj, b, 0) {
            BlockRef::Ready(bytes) => bytes
                .get(at..at + len as usize)
                .map(|part| bytes.slice_ref(part))
                .ok_or_else(|| ReadError::origin(format!("{}: a native block crosses origin blocks", obj.target))),
            BlockRef::Pending(fetch) => fetch.range(at, len as usize).await,
        }
    }

    /// Checks the whole version against the origin's digest (when it gave
    /// one), reading the blocks the check still needs (resident, in flight
    /// or fetched); a mismatch forgets the version. `Ok` without a digest.
    /// A mismatch is a change: the version's bytes were not one version's.
    pub(crate) async fn verified(self: &Arc<Self>, obj: &Arc<Object>) -> Result<(), ReadError> {
        let Some(check) = &obj.integrity else { return Ok(()) };
        loop {
            if let Some(outcome) = check.outcome() {
                return outcome;
            }
            let Some(b) = check.next_needed() else {
                // The last block is being hashed: its outcome is a moment away.
                tokio::task::yield_now().await;
                continue;
            };
            let bytes = self.read(obj, obj.layout.offset(b), obj.layout.block_len(b)).await?;
            if let Some(Err(e)) = check.record(b, &bytes) {
                self.metrics.origin_errors.inc();
                tracing::warn!(target = %obj.target, error = %e, "origin object failed its digest");
                self.store.forget_version(&obj.target, obj.version);
                return Err(e);
            }
        }
    }

    /// The scheduler's entry for `obj`, once its tree is complete: one per
    /// version while any download or cached block uses it, so that every
    /// native client of the version shares the scheduler's reads.
    fn native_entry(self: &Arc<Self>, obj: &Arc<Object>) -> Option<Arc<FileEntry>> {
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
    fn native(&self, obj: &Object, file: Arc<FileEntry>) -> Answer {
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

    /// Stores an answer of another status than 200 whole, body and all,
    /// when RFC 9111 allows and its body is at most a block, and relays
    /// it otherwise.
    async fn keep_status(
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
    async fn keep_unsized(
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
    async fn read_whole(&self, mut body: source::OriginBody, len: u64) -> Result<Bytes, ReadError> {
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

    /// Claims the blocks in `first..=last` that are neither resident nor in
    /// flight, under one lock so that no block gets two fetches, and starts
    /// one ranged request per run of them.
    fn ensure(self: &Arc<Self>, obj: &Arc<Object>, first: u32, last: u32) {
        let mut runs: Vec<(u32, Vec<Arc<BlockFetch>>)> = Vec::new();
        {
            let mut inflight = self.inflight.lock().expect("inflight lock");
            let mut open = false;
            for b in first..=last {
                if inflight.contains_key(&(obj.version, b)) || self.store.has_block(obj.version, b) {
                    open = false;
                    continue;
                }
                let fetch = Arc::new(BlockFetch::new(obj.layout.block_len(b)));
                inflight.insert((obj.version, b), fetch.clone());
                match runs.last_mut() {
                    Some((_, run)) if open => run.push(fetch),
                    _ => runs.push((b, vec![fetch])),
                }
                open = true;
            }
        }
        for (start, fetches) in runs {
            self.spawn_fetch(obj.clone(), start, fetches, None);
        }
    }

    /// Registers fetches for `first..=last` of a version nobody else knows yet.
    fn register(&self, obj: &Object, first: u32, last: u32) -> Vec<Arc<BlockFetch>> {
        let mut inflight = self.inflight.lock().expect("inflight lock");
        (first..=last)
            .map(|b| {
                let fetch = Arc::new(BlockFetch::new(obj.layout.block_len(b)));
                inflight.insert((obj.version, b), fetch.clone());
                fetch
            })
            .collect()
    }

    fn spawn_fetch(
        self: &Arc<Self>,
        obj: Arc<Object>,
        first: u32,
        fetches: Vec<Arc<BlockFetch>>,
        res: Option<OriginResponse>,
    ) {
        let tier = self.clone();
        tokio::spawn(async move {
            let mut done = Done {
                tier: tier.clone(),
                version: obj.version,
                leaves: obj.leaves.clone(),
                integrity: obj.integrity.clone(),
                first,
                fetches,
                next: 0,
            };
            if let Err(e) = tier.pump(&obj, &mut done, res).await {
                tier.metrics.origin_errors.inc();
                tracing::warn!(target = %obj.target, block = first + done.next as u32, error = %e, "origin fetch failed");
                if e.is_changed() {
                    // The next request revalidates and fetches the new version.
                    tier.store.forget_version(&obj.target, obj.version);
                }
                done.fail(&e);
            }
        });
    }

    /// Receives the blocks of `done` from the origin into their fetches.
    async fn pump(&self, obj: &Object, done: &mut Done, res: Option<OriginResponse>) -> Result<(), ReadError> {
        let layout = obj.layout;
        let last = done.first + done.fetches.len() as u32 - 1;
        let (start, end) = (layout.offset(done.first), layout.offset(last) + u64::from(layout.block_len(last)) - 1);
        // An origin that ignores Range sends a whole object in one fetch:
        // it takes the whole share rather than wait for more than exists.
        let kib = u32::try_from((end - start + 1).div_ceil(1024)).unwrap_or(u32::MAX).min(self.fetch_kib_total);
        let _bytes = self.fetch_kib.acquire_many(kib).await.map_err(|e| ReadError::origin(e.to_string()))?;
        let _slot = self.slots.acquire().await.map_err(|e| ReadError::origin(e.to_string()))?;
        let res = match res {
            Some(res) => res,
            None => {
                self.metrics.origin_requests.inc();
                let res = self.client.get(&obj.target, &obj.fetch_headers(start, end)).await?;
                let ok = match res.status {
                    StatusCode::PARTIAL_CONTENT => content_range(&res.headers) == Some((start, end, obj.size)),
                    StatusCode::OK => (start, end + 1) == (0, obj.size),
                    StatusCode::PRECONDITION_FAILED => {
                        return Err(ReadError::changed(format!("origin object changed (412 to bytes={start}-{end})")));
                    }
                    s => {
                        return Err(ReadError::origin(format!(
                            "origin answered {} to bytes={start}-{end}",
                            s.as_u16()
                        )));
                    }
                };
                if !ok {
                    return Err(ReadError::origin(format!(
                        "origin answered a different range than bytes={start}-{end}"
                    )));
                }
                // An origin that ignores If-Match (some S3-compatible
                // servers do) still names the version it sent.
                let etag = res.headers.get(header::ETAG).and_then(|v| v.to_str().ok());
                if let (Some(got), Some(want)) = (etag, obj.etag.as_deref())
                    && got != want
                {
                    return Err(ReadError::changed(format!("origin object changed (ETag {got}, stored {want})")));
                }
                // What else the origin says about the version must agree too.
                for name in [header::LAST_MODIFIED, HeaderName::from_static("repr-digest")] {
                    if let (Some(got), Some(want)) = (res.headers.get(&name), obj.headers.get(&name))
                        && got != want
                    {
                        return Err(ReadError::changed(format!(
                            "origin object changed ({name} {got:?}, stored {want:?})"
                        )));
                    }
                }
                res
            }
        };
        let mut body = res.body;
        let wait = self.client.timeout();
        while let Some(chunk) = tokio::time::timeout(wait, body.next())
            .await
            .map_err(|_| ReadError::origin(format!("origin sent nothing for {wait:?}")))?
        {
            let mut data = chunk?;
            self.metrics.fetched(metrics::class(obj.size, self.block_size), data.len() as u64);
            while !data.is_empty() {
                let Some(fetch) = done.fetches.get(done.next) else {
                    return Err(ReadError::changed(
                        "origin sent more bytes than its range or length: the object is not what it said",
                    ));
                };
                let want = fetch.len_left();
                let piece = if data.len() > want { data.split_to(want) } else { std::mem::take(&mut data) };
                fetch.push(piece);
                if fetch.len_left() == 0 {
                    done.complete_next()?;
                }
            }
        }
        if done.next < done.fetches.len() {
            let got = done.fetches[done.next].received();
            return Err(ReadError::origin(format!(
                "origin closed the body early (block {} has {got} bytes)",
                done.first as usize + done.next
            )));
        }
        Ok(())
    }

    fn respond(self: &Arc<Self>, obj: &Arc<Object>, h: &HeaderMap, head: bool, now: SystemTime) -> Answer {
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
        res.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        res.headers_mut().insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
        if head || len == 0 {
            return res.into();
        }
        // The hit path for small objects: one resident block, no stream.
        let single = obj.layout.block_of(start) == obj.layout.block_of(end) && obj.trusted();
        if let Some(b) = obj.layout.block_of(start).filter(|_| single)
            && let Some(bytes) = self.store.block(obj.version, b)
        {
            let off = obj.layout.offset(b);
            self.metrics.served(metrics::class(obj.size, self.block_size), len);
            *res.body_mut() = full(bytes.slice((start - off) as usize..=(end - off) as usize));
            return res.into();
        }
        *res.body_mut() = body::range(self.clone(), obj.clone(), start, end);
        res.into()
    }

    /// Forwards the request as it is and relays the answer to this client
    /// only; nothing is stored.
    async fn relay(&self, target: &str, h: &HeaderMap, head: bool) -> Result<Response<ResBody>, HttpError> {
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

    /// Forgets what is stored for `scope` (a target, or every target under
    /// a prefix), so the next request asks the origin; how many targets
    /// were forgotten.
    pub fn purge(&self, scope: &Purge) -> Result<usize, HttpError> {
        Ok(match scope {
            Purge::Target(t) => {
                let t = target::normalize(t)?;
                self.store.purge(|stored| stored == t)
            }
            Purge::Prefix(p) => {
                let p = target::normalize(p)?;
                self.store.purge(|stored| stored.starts_with(&p))
            }
        })
    }

    /// Fetches `target` whole into the store in the background, as a plain
    /// GET without credentials would find it; errors are logged.
    pub fn prefetch(self: &Arc<Self>, target: &str) -> Result<(), HttpError> {
        let target = target::normalize(target)?;
        let req = Request::head(target.as_str()).body(()).map_err(|_| HttpError::BadRequest("bad target"))?;
        let tier = self.clone();
        tokio::spawn(async move {
            // A HEAD looks the target up (one origin trip on a miss) and
            // sends no body; the blocks are then fetched in one run.
            if let Err(e) = tier.handle(&req, true).await {
                return tracing::warn!(%target, error = %e, "prefetch failed");
            }
            let Some(obj) = tier.store.object(&target, |o| o.selected_by(&HeaderMap::new())) else {
                return tracing::info!(%target, "not prefetched: the origin's answer is not stored");
            };
            match tier.fetch_whole(&obj).await {
                Ok(()) => tracing::info!(%target, bytes = obj.size, "prefetched"),
                Err(e) => tracing::warn!(%target, error = %e, "prefetch failed"),
            }
        });
        Ok(())
    }

    /// Every block of `obj` in the store (fetched in runs where missing),
    /// and its digest checked when the origin gave one.
    async fn fetch_whole(self: &Arc<Self>, obj: &Arc<Object>) -> Result<(), ReadError> {
        let layout = obj.layout;
        if layout.blocks() == 0 || obj.status != StatusCode::OK {
            return Ok(());
        }
        self.ensure(obj, 0, layout.blocks() - 1);
        for b in 0..layout.blocks() {
            self.read(obj, layout.offset(b), layout.block_len(b)).await?;
        }
        self.verified(obj).await
    }

    /// An origin's answer as the client gets it: hop-by-hop fields
    /// dropped, Via added, the body streamed (none for HEAD) and counted.
    fn relayed(&self, res: OriginResponse, head: bool) -> Response<ResBody> {
        let OriginResponse { status, mut headers, body } = res;
        client::strip_hop_by_hop(&mut headers);
        headers.append(header::VIA, client::VIA);
        let counters = self.metrics.clone();
        let body = if head { empty() } else { body::relayed(body, move |n| counters.served(metrics::UNSTORED, n)) };
        let mut res = Response::new(body);
        *res.status_mut() = status;
        *res.headers_mut() = headers;
        res
    }

    /// Publishes the store's size to /metrics.
    pub fn observe(&self) {
        self.metrics.resident.set(self.store.used() as i64);
    }
}

/// The client's headers that select a representation (Accept without the
/// native type: see [`circus_http::accept::without_native`]), without the ones that ask for a
/// part or a condition (the tier fetches whole blocks).
fn forwarded(h: &HeaderMap) -> HeaderMap {
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
    fh
}

/// A 206 that holds all `size` bytes of the object, as the 200 it answers.
fn whole(mut res: OriginResponse, size: u64) -> OriginResponse {
    res.status = StatusCode::OK;
    res.headers.remove(header::CONTENT_RANGE);
    res.headers.insert(header::CONTENT_LENGTH, HeaderValue::from(size));
    res
}

/// The blocks of one origin request; on drop (the fetch task ended, even by
/// panic), the ones not complete fail, so no waiter waits forever.
struct Done {
    tier: Arc<OriginTier>,
    version: u64,
    leaves: Arc<leaves::Leaves>,
    integrity: Option<Arc<integrity::Integrity>>,
    first: u32,
    fetches: Vec<Arc<BlockFetch>>,
    /// Index of the block being received.
    next: usize,
}

impl Done {
    /// Checks the block being received (now whole) against what the
    /// version's other blocks and digest say, then stores it and moves to
    /// the next. Stored before it leaves `inflight`, so readers find one or
    /// the other. A block that fails the check fails the fetch before any
    /// reader sees it complete.
    fn complete_next(&mut self) -> Result<(), ReadError> {
        let b = self.first + self.next as u32;
        let fetch = &self.fetches[self.next];
        if let Some(bytes) = fetch.assembled() {
            if !self.leaves.record(b, &bytes) {
                return Err(ReadError::changed(format!(
                    "block {b} came again with other bytes: the origin changed the object under the same validators"
                )));
            }
            if let Some(Err(e)) = self.integrity.as_ref().and_then(|i| i.record(b, &bytes)) {
                return Err(e);
            }
            if let Some(bytes) = fetch.complete() {
                self.tier.store.put_block(self.version, b, bytes);
            }
        }
        self.forget(b, fetch);
        self.next += 1;
        Ok(())
    }

    fn fail(&mut self, why: &ReadError) {
        while let Some(fetch) = self.fetches.get(self.next) {
            fetch.fail(why);
            self.forget(self.first + self.next as u32, fetch);
            self.next += 1;
        }
    }

    fn forget(&self, b: u32, fetch: &Arc<BlockFetch>) {
        let mut inflight = self.tier.inflight.lock().expect("inflight lock");
        if inflight.get(&(self.version, b)).is_some_and(|f| Arc::ptr_eq(f, fetch)) {
            inflight.remove(&(self.version, b));
        }
    }
}

impl Drop for Done {
    fn drop(&mut self) {
        self.fail(&ReadError::origin("origin fetch stopped"));
    }
}
