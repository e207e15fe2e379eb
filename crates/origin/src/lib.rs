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
//! same first answer relayed to its one client (a large one continues
//! from it). Other methods than GET and
//! HEAD are forwarded with their bodies and invalidate what is stored.
//! Whole-object digests the origin gives are checked (`integrity`), so a
//! version spliced from two of the origin's never passes as whole.
//!
//! Parts: `source` (the origin behind one `get`: `client`, the pooled HTTP
//! client with `tls` for https origins, or `s3`, a bucket through
//! object_store), `target` (normalisation: never outside the prefix),
//! `admit` (what a first answer becomes), `blocks` (single-flight block
//! fetches, `fetch`, checked as they arrive), `respond` (answers from the
//! store, and relayed ones), `continued` (a large unstored answer relayed
//! from its first part), `object` (a stored version), `hit` (whole small
//! objects answered by the hit lane, before hyper), `store` (the byte
//! budget, S3-FIFO admission via quick_cache), `body` (response bodies),
//! `leaves` (each version's hash tree, learnt as its blocks pass),
//! `integrity` (the origin's whole-object digests), `peers` (the tier as
//! a member of a cluster: groups fetched from their owners, probes;
//! docs/cluster.md) with `hot` (hot groups served by their replicas),
//! `peer_auth` (members' proofs under a shared key), `member_purge`
//! (purges that reach every member) and `peer_first` (members' bodies
//! before this node's clients'), `metrics`.
//!
//! The tier never calls into the server: [`OriginTier::handle`] returns an
//! [`Answer`], a response, or a version to stream natively.
//!
//! Native clients (`Accept: application/vnd.circus.blocks`) of a version
//! whose tree is complete are served like local files: a [`FileEntry`]
//! backed by the tier joins the scheduler, which reads blocks through
//! [`OriginBlocks`] (store or single-flight fetch) and sends them in its
//! own order, shared across clients. Until the tree is complete they get the
//! plain response, which the protocol lets every client fall back on.

mod admit;
mod blocks;
mod body;
mod client;
mod continued;
mod error;
mod fetch;
mod hit;
mod hot;
mod integrity;
mod leaves;
mod member_purge;
mod metrics;
mod object;
mod peer_auth;
mod peer_first;
mod peers;
mod respond;
pub mod rfc9111;
mod s3;
mod source;
mod store;
mod target;
mod tls;

pub use blocks::OriginBlocks;
pub use error::SetupError;
pub use hot::HOT_HEADER;
pub use member_purge::{MemberPurged, PURGE_PATH, PurgeReach};
pub use peer_auth::{PEER_AUTH_HEADER, PeerKey};
pub use peers::{DnsMembers, MemberClaim, MemberSource, PEER_HEADER, PROBE_PATH, PeerConfig};
pub use source::{OriginSource, S3Config};

use bytes::Bytes;
use circus_http::{HttpError, ResBody};
use circus_store::{FileEntry, ReadError};
use fetch::BlockFetch;
use http::{HeaderMap, Request, Response, header};
use http_body_util::BodyExt;
use metrics::OriginMetrics;
pub(crate) use object::Object;
use prometheus_client::registry::Registry;
use rfc9111::CacheControl;
use rustc_hash::FxHashMap;
use source::{OriginResponse, Source};
use std::{
    collections::HashMap,
    sync::{Arc, Mutex, Weak, atomic::AtomicU64},
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
    /// The cluster this tier is a member of, if any.
    pub peers: Option<PeerConfig>,
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
            peers: None,
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

/// Prefetches that may run at once.
const PREFETCHES: usize = 4;

/// What an operator purges.
#[derive(Debug, Clone)]
pub enum Purge {
    /// One target (path and query), every representation of it.
    Target(String),
    /// Every target whose normalised form starts with this string (end it
    /// with `/` for a directory: `/img` also names `/img2/`).
    Prefix(String),
}

/// RFC 9211's field: how the tier's store took part in a response.
pub const CACHE_STATUS: &str = "cache-status";

/// Its value for an answer from the store (the hit lane's too).
pub(crate) const HIT: &str = "circus; hit";

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

/// Fetches in flight: how many at once, and the bytes (in KiB permits)
/// their buffers hold outside the store, set apart from the budget.
#[derive(Debug)]
struct FetchPool {
    slots: Arc<Semaphore>,
    kib: Arc<Semaphore>,
    kib_total: u32,
}

impl FetchPool {
    fn new(slots: usize, bytes: u64) -> Self {
        let kib_total = u32::try_from(bytes / 1024).unwrap_or(u32::MAX).max(1);
        FetchPool {
            slots: Arc::new(Semaphore::new(slots.max(1))),
            kib: Arc::new(Semaphore::new(kib_total as usize)),
            kib_total,
        }
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
    /// The other members of the cluster, when there is one.
    peers: Option<Arc<peers::Peers>>,
    /// In a cluster: members' bodies go before this node's clients'.
    peer_first: Option<Arc<peer_first::PeerFirst>>,
    store: Store,
    /// Blocks being fetched; an entry is removed after its bytes are in
    /// the store (or it failed), so a reader always finds one or the other.
    inflight: Mutex<FxHashMap<(u64, u32), Arc<BlockFetch>>>,
    /// First fetches and revalidations in flight, per target.
    lookups: Mutex<HashMap<String, Arc<OnceCell<Lookup>>>>,
    next_version: AtomicU64,
    block_size: u32,
    readahead: u32,
    /// Room for fetches from the origin, for fetches asked of owners, and
    /// for fetches asked of hot groups' replicas (the last two empty
    /// without a cluster). Each kind waits only on kinds nearer the
    /// origin, so none can hold the room another needs to finish.
    origin_pool: FetchPool,
    peer_pool: FetchPool,
    replica_pool: FetchPool,
    /// Prefetches running at once (operators' requests beyond are refused).
    prefetches: Arc<Semaphore>,
    metrics: Arc<OriginMetrics>,
    /// The scheduler's block size: the unit of native blocks and leaves.
    native_block: u32,
    /// The scheduler's view of each version being served natively, by
    /// version; weak, as the entries hold the tier.
    natives: Mutex<FxHashMap<u64, Weak<FileEntry>>>,
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
        // In a cluster, half the room goes to fetches asked of peers: an
        // eighth of it to those asked of hot groups' replicas.
        let to_peers = if cfg.peers.is_some() { fetching / 2 } else { 0 };
        let to_replicas = to_peers / 8;
        let peers = match &cfg.peers {
            Some(p) => {
                let peers = Arc::new(peers::Peers::new(p, cfg.timeout, cfg.block_size)?);
                peers::Peers::spawn_probes(&peers);
                Some(peers)
            }
            None => None,
        };
        Ok(OriginTier {
            client: Source::new(&cfg.source, cfg.timeout, cfg.ca_file.as_deref())?,
            peer_first: peers.as_ref().map(|_| Arc::default()),
            peers,
            store: Store::new(stored, 16 * 1024, u64::from(cfg.block_size)),
            origin_pool: FetchPool::new(cfg.max_fetches, fetching - to_peers),
            peer_pool: FetchPool::new(cfg.max_fetches, to_peers - to_replicas),
            replica_pool: FetchPool::new(cfg.max_fetches, to_replicas),
            inflight: Mutex::default(),
            lookups: Mutex::default(),
            next_version: AtomicU64::new(1),
            block_size: cfg.block_size,
            readahead: cfg.readahead,
            prefetches: Arc::new(Semaphore::new(PREFETCHES)),
            metrics: Arc::new(OriginMetrics::register(registry)),
            native_block,
            natives: Mutex::default(),
        })
    }

    /// Whether a `method` request with headers `h` for `target` (as the
    /// client sent it) comes from a member: one marked as a member's that this tier
    /// does not take as one (no cluster, or no proof of the cluster's key)
    /// is counted, and its caller serves it as a client's, without the
    /// mark.
    pub fn member_claim(&self, method: &http::Method, target: &str, h: &HeaderMap) -> MemberClaim {
        if !h.contains_key(PEER_HEADER) {
            return MemberClaim::Client;
        }
        let claim = match (&self.peers, target::normalize(target)) {
            (Some(peers), Ok(target)) => peers.claim(method, &target, h),
            _ => MemberClaim::Impostor,
        };
        if claim == MemberClaim::Impostor {
            self.metrics.peer_refused.inc();
        }
        claim
    }

    /// Answers a GET or HEAD for `req`'s target.
    pub async fn handle<B>(self: &Arc<Self>, req: &Request<B>, head: bool) -> Result<Answer, HttpError> {
        let mut status = "circus; fwd=uri-miss";
        let mut answer = self.answer(req, head, &mut status).await?;
        let value = http::HeaderValue::from_static(status);
        match &mut answer {
            Answer::Response(res) => res.headers_mut().insert(CACHE_STATUS, value),
            Answer::Native { headers, .. } => headers.insert(CACHE_STATUS, value),
        };
        Ok(answer)
    }

    /// [`OriginTier::handle`], saying in `status` how the store took part
    /// (RFC 9211's `hit`, `fwd=uri-miss`, `fwd=stale`, `fwd=bypass`).
    async fn answer<B>(
        self: &Arc<Self>,
        req: &Request<B>,
        head: bool,
        status: &mut &'static str,
    ) -> Result<Answer, HttpError> {
        // Normalised before anything else: the origin and the store only
        // ever see a target inside the prefix.
        let target = &target::normalize(req.uri().path_and_query().map_or("/", |p| p.as_str()))?;
        let h = req.headers();
        if self.peers.is_some() && h.contains_key(PEER_HEADER) {
            if target == PROBE_PATH {
                *status = "circus; fwd=bypass";
                return Ok(peers::probe_answer().into());
            }
            self.metrics.peer_served.inc();
            if peers::Upstream::for_request(h) == peers::Upstream::OwnerOnly {
                self.metrics.replica_served.inc();
            }
        }
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
                *status = HIT;
                return Ok(self.respond(&o, h, head, now));
            }
            *status = "circus; fwd=bypass";
            return self.relay(target, h, head).await.map(Answer::from);
        }
        let found = self.store.object(target, |o| o.selected_by(h));
        let outcome = match found {
            Some(o) if o.freshness.usable(h, now) => {
                self.metrics.hits.inc();
                *status = HIT;
                Lookup::Stored(o)
            }
            Some(o) if o.freshness.serve_while_revalidating(h, now) => {
                self.metrics.hits.inc();
                *status = HIT;
                self.revalidate_in_background(target, h, o.clone());
                Lookup::Stored(o)
            }
            _ if CacheControl::parse(h).only_if_cached => return Err(HttpError::NotStored),
            stale => {
                self.metrics.misses.inc();
                if stale.is_some() {
                    *status = "circus; fwd=stale";
                }
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

    /// Forgets what is stored for `scope` (a target, or every target under
    /// a prefix), so the next request asks the origin; how many targets
    /// were forgotten.
    pub fn purge(&self, scope: &Purge) -> Result<usize, HttpError> {
        Ok(match scope {
            Purge::Target(t) => {
                let t = target::normalize(&target::encode_for_request(t))?;
                self.store.purge(|stored| stored == t)
            }
            Purge::Prefix(p) => {
                let p = target::normalize(&target::encode_for_request(p))?;
                self.store.purge(|stored| stored.starts_with(&p))
            }
        })
    }

    /// Fetches `target` whole into the store in the background, as a plain
    /// GET without credentials would find it; errors are logged.
    pub fn prefetch(self: &Arc<Self>, target: &str) -> Result<(), HttpError> {
        let target = target::normalize(&target::encode_for_request(target))?;
        let Ok(running) = self.prefetches.clone().try_acquire_owned() else {
            return Err(HttpError::Busy);
        };
        let req = Request::head(target.as_str()).body(()).map_err(|_| HttpError::BadRequest("bad target"))?;
        let tier = self.clone();
        tokio::spawn(async move {
            let _running = running;
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

    /// Publishes the store's size to /metrics.
    pub fn observe(&self) {
        self.metrics.resident.set(self.store.used() as i64);
        if let Some(p) = &self.peers {
            self.metrics.live_peers.set(p.live_count() as i64);
        }
    }
}
