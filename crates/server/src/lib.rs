//! `circus serve`: an HTTP/1.1 and HTTP/2 (cleartext, prior knowledge)
//! server for a directory of large files.
//!
//! Ordinary clients get standard HTTP (ranges, multipart ranges,
//! conditional requests, `Repr-Digest`). Clients that send
//! `Accept: application/vnd.circus.blocks` get the native stream: a manifest,
//! then verified blocks in the scheduler's order (docs/protocol.md). Both
//! kinds are clients of one scheduler ([`circus_sched`]) and one block cache,
//! so a block read once from storage serves every download that needs it.
//!
//! Parts: [`files`] (safe path resolution, one [`circus_store::LocalFile`]
//! per file version), `driver` (the task that owns the scheduler and cache,
//! reading through each version's [`circus_store::BlockSource`]), `body`
//! (response bodies fed by the driver), `http` (routing and HTTP
//! semantics, with [`circus_http`]'s rules), `state` (what handlers share),
//! `memory` (how `--cache` is divided), `observe` (`/metrics`, `/status`),
//! `arena`, `huge_tmpfs`, `kept_memory` and `sendfile` (cache memory on a
//! private tmpfs of huge pages, in a memfd or in an unlinked file on
//! `--cache-dir`, and kept files' bodies on the same kind of private
//! tmpfs or in a memfd, sent with `sendfile(2)` instead of copied), `pacer` (a
//! storage read cap), `hitlane` (resident small objects answered before
//! hyper sees the connection), `answers` (the lane's answers written with
//! their bodies shared, not copied), `small` (whole small local files kept
//! for the lane), `admin` (the admin listener's endpoints: metrics, status,
//! purge, prefetch), [`tls`] (certificates for HTTPS, reloaded on SIGHUP),
//! [`ktls_probe`] and `ktls_stream` (records encrypted by the kernel where
//! it can, with `sendfile` as in the clear),
//! [`acme`] (certificates issued and renewed by an ACME CA),
//! `redirect` (the cleartext listener that redirects to HTTPS),
//! [`settings`] and [`listen`] (every setting, as flag and TOML key),
//! [`access_log`], [`private`] (signed URLs and bearer tokens per prefix),
//! `listing` (directory pages), `nodelay` (Nagle off on client
//! connections, set once on the listener where they inherit it),
//! `send_mark` (how much unsent data each connection keeps in the kernel:
//! little, so the scheduler sees readers' real positions, but at least one
//! bandwidth-delay product of the connection, so a long round trip does not
//! leave the window waiting for the server, and for files larger than the
//! cache 100 ms of the connection's rate, so a link never idles while the
//! server is late), `gather` (an HTTP/2 connection's
//! writes of one poll gathered into one system call), `lent` (the bodies
//! of kept files lent to that writer, so their frames are gathered by
//! reference rather than copied) and `linger` (a connection that ends with
//! bytes unread closes in stages, so the close never cuts its last answer).
//! With `--origin`, requests go to [`circus_origin`]'s tier;
//! its native clients join the same scheduler once an object's tree is
//! known.
//!
//! ```no_run
//! # async fn run() -> std::io::Result<()> {
//! let cfg = circus_server::ServeConfig::new("/srv/files".into());
//! let server = circus_server::Server::bind(cfg).await?;
//! println!("listening on {}", server.local_addr());
//! let stop = async { let _ = tokio::signal::ctrl_c().await; };
//! tokio::spawn(server.run(stop)).await.expect("the server's task panicked")
//! # }
//! ```

pub mod access_log;
pub mod acme;
mod activity;
mod admin;
mod answers;
mod arena;
mod body;
pub mod config;
mod driver;
pub mod files;
mod gather;
mod hitlane;
mod http;
mod huge_tmpfs;
mod inline_first;
mod kept_memory;
pub mod ktls_probe;
mod ktls_stream;
mod lent;
mod linger;
pub mod listen;
mod listing;
mod mailbox;
mod memory;
mod metrics;
mod nodelay;
mod observe;
mod open_connections;
mod pacer;
pub mod private;
mod recent_files;
mod redirect;
mod rewind;
mod send_mark;
mod sendfile;
pub mod settings;
mod side_listener;
mod small;
mod state;
pub mod tls;
mod tls_records;

pub use circus_http::HttpError;
pub use config::ServeConfig;
pub use memory::{MemoryPlan, PlanError};
pub use settings::Settings;

/// The hit lane's request head handling, for the fuzz targets in `fuzz/`;
/// not an API.
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::hitlane::{LaneOutcome, Offered, answer_for_fuzzing};
}

use bytes::Bytes;
use files::FileTable;
use hyper::service::service_fn;
use hyper_util::{
    rt::{TokioIo, TokioTimer},
    server::{conn::auto, graceful::GracefulShutdown},
};
use prometheus_client::registry::Registry;
use sendfile::{Sendable as SendableMemory, SendfileStream};
use state::AppState;
use std::{future::Future, net::SocketAddr, sync::Arc};
use tokio::{net::TcpListener, sync::Semaphore};

#[derive(Debug)]
pub struct Server {
    /// One per `--listen` address.
    listeners: Vec<TcpListener>,
    /// With `--tls-cert`/`--tls-key`: the listener speaks HTTPS only.
    tls: Option<Arc<tls::Certificates>>,
    /// With HTTPS on a kernel that encrypts records: the cipher suites it
    /// takes (see `ktls_probe`).
    kernel_records: Option<Arc<::ktls::CompatibleCiphers>>,
    /// `--admin-listen`: /metrics, /status, purge and prefetch.
    admin: Option<TcpListener>,
    /// `--redirect-listen`: cleartext, redirecting to HTTPS.
    redirect: Option<TcpListener>,
    /// Memory that connections send from without copying.
    sendable: SendableMemory,
    /// `--access-log`: a line per request.
    access_log: Option<Arc<access_log::AccessLog>>,
    state: Arc<AppState>,
    cfg: ServeConfig,
}

impl Server {
    /// Binds the listener and starts the scheduler driver. Must be called
    /// inside a tokio runtime.
    pub async fn bind(cfg: ServeConfig) -> std::io::Result<Server> {
        if let Err(e) = cfg.sched.validate() {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()));
        }
        let mut files = FileTable::new(&cfg.root, cfg.sched.block_size)
            .map_err(|e| std::io::Error::new(e.kind(), format!("cannot serve {}: {e}", cfg.root.display())))?
            .with_dotfiles(cfg.dotfiles)
            .with_listing(cfg.listing)
            .with_index_wait(cfg.index_wait);
        if let Some(dir) = &cfg.index_dir {
            files = files
                .with_index_dir(dir)
                .map_err(|e| std::io::Error::new(e.kind(), format!("--index-dir {}: {e}", dir.display())))?;
        }
        let mut listeners = Vec::with_capacity(cfg.listen.len());
        for addr in &cfg.listen {
            let bound = TcpListener::bind(addr).await;
            let listener = bound.map_err(|e| std::io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
            nodelay::on_listener(&listener);
            listeners.push(listener);
        }
        if listeners.is_empty() {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "no address to listen on"));
        }
        let admin = match cfg.admin_listen {
            Some(addr) => Some(TcpListener::bind(addr).await.map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("admin listener on {addr}: {e} (give --admin-listen ADDR, or off)"),
                )
            })?),
            None => None,
        };
        let redirect = match cfg.redirect_listen {
            Some(_) if cfg.tls.is_empty() && !cfg.acme.enabled() => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "--redirect-listen redirects to HTTPS: give --tls-cert and --tls-key, or --acme, too",
                ));
            }
            Some(addr) => Some(
                TcpListener::bind(addr)
                    .await
                    .map_err(|e| std::io::Error::new(e.kind(), format!("redirect listener on {addr}: {e}")))?,
            ),
            None => None,
        };
        let mut registry = Registry::default();
        let metrics = Arc::new(metrics::Metrics::register(&mut registry));
        let mut cfg = cfg;
        let plan = MemoryPlan::new(cfg.sched.cache_bytes, cfg.sched.block_size, cfg.origin.as_ref())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        cfg.sched.cache_bytes = plan.scheduler;
        let kept = if cfg.zero_copy { kept_memory(&plan) } else { None };
        let small = small::SmallFiles::new(plan.small_files, small::largest_kept(cfg.sched.block_size));
        let small = Arc::new(small.with_memory(kept.clone()));
        let arena = if cfg.zero_copy { cache_arena(&cfg)? } else { None };
        let storage = driver::Storage {
            io_threads: cfg.io_threads,
            arena: arena.clone(),
            pacer: cfg.read_rate.map(|r| Arc::new(pacer::ReadPacer::new(r))),
        };
        let driver = driver::spawn(cfg.sched.clone(), storage, metrics.clone());
        let origin = match &cfg.origin {
            Some(o) => {
                let budget = circus_origin::TierBudget { stored: plan.origin_store, fetching: plan.origin_fetches };
                let tier = circus_origin::OriginTier::new(o, budget, cfg.sched.block_size, &mut registry)
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
                Some(Arc::new(tier))
            }
            None => None,
        };
        let private = private::PrivateRules::new(&cfg.private)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let send_marks = send_mark::SendMarks::new(&cfg, !cfg.tls.is_empty() || cfg.acme.enabled());
        let cache_pages = memory::CachePages::new(arena.as_deref());
        tracing::info!(backing = %cache_pages.backing, largest_page = cache_pages.largest_page_bytes, "block cache memory");
        let state = Arc::new(AppState {
            files,
            driver,
            metrics,
            registry,
            origin,
            small,
            memory: plan,
            cache_pages,
            private,
            send_marks,
        });
        let https = !cfg.tls.is_empty() || cfg.acme.enabled();
        // Records go to the kernel where it takes them (see `ktls_probe`); the
        // probe comes first, as rustls must be told to let keys out.
        let kernel_records = match https {
            false => None,
            true => {
                let m = &state.metrics;
                match ktls_probe::kernel_records().await {
                    Ok(ciphers) => {
                        m.ktls_available.set(1);
                        m.tls_send_path.get_or_create(&metrics::PathLabel { path: "ktls" }).set(1);
                        tracing::info!(?ciphers, "kTLS: HTTPS records are encrypted by the kernel");
                        Some(Arc::new(ciphers))
                    }
                    Err(why) => {
                        m.tls_send_path.get_or_create(&metrics::PathLabel { path: "userspace" }).set(1);
                        tracing::info!(%why, "no kTLS: HTTPS records are encrypted by rustls in user space");
                        None
                    }
                }
            }
        };
        let tls = match https {
            false => None,
            true => Some(Arc::new(
                tls::Certificates::load(&cfg.tls, cfg.acme.enabled(), kernel_records.is_some())
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?,
            )),
        };
        let access_log = access_log::AccessLog::open(cfg.access_log.clone(), cfg.access_log_format)?.map(Arc::new);
        let sendable = SendableMemory { blocks: arena, kept };
        Ok(Server { listeners, tls, kernel_records, admin, redirect, sendable, access_log, state, cfg })
    }

    /// The first listener's address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addrs()[0]
    }

    /// Every listener's address, in the order given.
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.listeners.iter().map(|l| l.local_addr().expect("bound listener has an address")).collect()
    }

    /// The certificates served, for reloading them (SIGHUP), when the
    /// listener speaks HTTPS.
    pub fn certificates(&self) -> Option<Arc<tls::Certificates>> {
        self.tls.clone()
    }

    /// The redirect listener's address, when there is one.
    pub fn redirect_addr(&self) -> Option<SocketAddr> {
        self.redirect.as_ref().map(|l| l.local_addr().expect("bound listener has an address"))
    }

    /// The access log, for reopening it (SIGUSR1), when there is one.
    pub fn access_log(&self) -> Option<Arc<access_log::AccessLog>> {
        self.access_log.clone()
    }

    /// The admin listener's address, when there is one.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().map(|l| l.local_addr().expect("bound listener has an address"))
    }

    /// Serves until `shutdown` resolves, then stops accepting and waits up
    /// to the drain timeout for downloads in progress. Run it in a task of
    /// a multi-thread runtime (`tokio::spawn`), not where the runtime is
    /// blocked on: each connection's task is spawned from the accept loop,
    /// and from a worker it starts in that worker's queue, without the
    /// shared queue and a wake-up (per connection, 9.8 system calls with
    /// one, 8.0 without).
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
        let mut builder = auto::Builder::new(inline_first::InlineFirst);
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(self.cfg.header_timeout)
            // No pipeline_flush: it makes hyper copy every body byte into
            // its write buffer (80% of an origin tier's CPU serving a large
            // object to 50 clients) and rules out sendfile; pipelined small
            // hits are batched by the hit lane before hyper instead.
            .max_buf_size(self.cfg.max_header_bytes.max(8192));
        builder
            .http2()
            .max_header_list_size(self.cfg.max_header_bytes as u32)
            .max_concurrent_streams(self.cfg.max_streams);
        let builder = Arc::new(builder);
        let graceful = GracefulShutdown::new();
        // Tells connections still in the hit lane to close; hyper's are
        // told by `graceful`.
        let (stop, stopping) = tokio::sync::watch::channel(false);
        if let Some(listener) = self.admin {
            tokio::spawn(admin::run(listener, self.state.clone(), stopping.clone()));
        }
        if let (Some(certs), true) = (&self.tls, self.cfg.acme.enabled()) {
            tokio::spawn(acme::maintain(self.cfg.acme.clone(), certs.clone(), stopping.clone()));
        }
        if let Some(listener) = self.redirect {
            let https_port = self.listeners[0].local_addr()?.port();
            tokio::spawn(redirect::run(listener, https_port, stopping.clone()));
        }
        let limits = hitlane::Limits { idle: self.cfg.header_timeout, max_head: self.cfg.max_header_bytes };
        let slots = Arc::new(Semaphore::new(self.cfg.max_connections));
        // Near the cap, each new connection closes the idlest open one.
        let headroom = (self.cfg.max_connections / 50).max(1);
        let open = Arc::new(open_connections::OpenConnections::default());
        let per_address = Arc::new(PerAddress::new(self.cfg.max_connections_per_ip));
        let send_timeout = self.cfg.send_timeout;
        // The lane's answers, counted without a label lookup per connection.
        let answered_200 = self.state.metrics.response_counter(200);
        tokio::pin!(shutdown);
        loop {
            let (stream, peer) = tokio::select! {
                accepted = accept_any(&self.listeners) => match accepted {
                    Ok(conn) => conn,
                    Err(e) => {
                        // Out of file descriptors and the like: back off, keep serving.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                },
                () = &mut shutdown => break,
            };
            nodelay::on_accepted(&stream);
            let state = self.state.clone();
            if slots.available_permits() <= headroom && open.evict_idlest() {
                self.state.metrics.connections_evicted.inc();
            }
            let permit = slots.clone().try_acquire_owned().ok();
            let address = per_address.admit(peer.ip());
            let busy = permit.is_none() || address.is_none();
            // Resident small objects (of the origin tier, or whole small
            // local files) are answered before hyper sees the connection
            // (Lava's hit server).
            let lane: Option<Arc<dyn circus_http::HitSource>> = match &state.origin {
                _ if busy => None,
                // Private paths go to the full path, which checks them.
                _ if !state.private.is_empty() => Some(Arc::new(hitlane::PublicOnly(state.clone()))),
                Some(tier) => Some(tier.clone()),
                None => Some(state.clone()),
            };
            let (builder, sendable, watcher, stopping) =
                (builder.clone(), self.sendable.clone(), graceful.watcher(), stopping.clone());
            let metrics = self.state.metrics.clone();
            let answered = answered_200.clone();
            let activity = activity::Activity::new(Some(peer));
            // At most this much unsent data is kept in the kernel, so a block
            // counts as sent when TCP is about to transmit it and the
            // scheduler sees each client's real pace (measured: a
            // mixed-speed crowd read the file 5.0 times without it, 3.1 with
            // it). Unlike a small send buffer this leaves the congestion
            // window free on long-RTT paths. It is set at the first write
            // past the hit lane, whose whole small answers need none: a
            // connection the lane serves alone makes no system call for it.
            activity.want_send_mark(self.state.send_marks.base());
            let registration = open.register(&activity);
            let tls = self.tls.as_ref().map(|c| tokio_rustls::TlsAcceptor::from(c.current()));
            let log = self.access_log.clone();
            // Every event of the connection's life carries its peer (at
            // debug level: a span costs nothing unless that level is on).
            let span = tracing::debug_span!("connection", %peer, tls = tls.is_some());
            let kernel = self.kernel_records.clone();
            let conn = Connection {
                state,
                lane,
                limits,
                stopping,
                answered,
                busy,
                builder,
                sendable,
                activity,
                tls,
                kernel,
                log,
            };
            let room = slots.clone();
            let task = async move {
                metrics.connections.inc();
                // The watchdog closes the connection by dropping it
                // (whether it is in the hit lane or with hyper).
                let watchdog = activity::watch(conn.activity.clone(), send_timeout);
                // Bytes the client sent after its last request must not
                // turn the close into a reset that cuts the last answer.
                let closing = linger::Closing::hold(&stream);
                // Boxed: the task stays small (see `Connection::serve`). A
                // panic in a connection's code (its own or a library's, on
                // what a client sent) ends that connection only, and is
                // counted out like any other end.
                let served = Box::pin(futures_util::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(
                    conn.serve(stream, watcher),
                )));
                tokio::select! {
                    ended = served => match ended {
                        Err(_) => tracing::warn!(%peer, "a connection's task panicked; the connection was closed"),
                        // Boxed as serving is, to keep the task small.
                        // Near the connection cap the slot goes to a new
                        // client instead: a lingering connection holds it
                        // and can no longer be evicted.
                        Ok(()) => if let Some(closing) = closing.filter(|_| room.available_permits() > headroom) {
                            Box::pin(closing.close()).await;
                        },
                    },
                    // A connection the watchdog ends is dropped at once:
                    // a client it cut gets no more time.
                    verdict = watchdog => {
                        if verdict == activity::Verdict::Cut {
                            metrics.connections_cut.inc();
                        }
                        // (Evictions are counted where they are decided.)
                        tracing::debug!(%peer, ?verdict, "connection closed by the watchdog");
                    }
                }
                metrics.connections.dec();
                drop((permit, address, registration));
            };
            tokio::spawn(tracing::Instrument::instrument(task, span));
        }
        // New connections are refused from now on, not left waiting in
        // the backlog of a listener nobody accepts from.
        drop(self.listeners);
        let _ = stop.send(true);
        tracing::info!("shutting down: draining downloads in progress");
        if tokio::time::timeout(self.cfg.drain_timeout, graceful.shutdown()).await.is_err() {
            tracing::warn!("drain timeout passed; closing remaining connections");
        }
        Ok(())
    }
}

/// The next connection on any of `listeners`.
async fn accept_any(listeners: &[TcpListener]) -> std::io::Result<(tokio::net::TcpStream, SocketAddr)> {
    std::future::poll_fn(|cx| {
        for listener in listeners {
            if let std::task::Poll::Ready(accepted) = listener.poll_accept(cx) {
                return std::task::Poll::Ready(accepted);
            }
        }
        std::task::Poll::Pending
    })
    .await
}

/// One accepted connection and what serving it needs.
struct Connection {
    state: Arc<AppState>,
    lane: Option<Arc<dyn circus_http::HitSource>>,
    limits: hitlane::Limits,
    stopping: tokio::sync::watch::Receiver<bool>,
    answered: prometheus_client::metrics::counter::Counter,
    /// Over a connection cap: every request is answered 503.
    busy: bool,
    builder: Arc<auto::Builder<inline_first::InlineFirst>>,
    sendable: SendableMemory,
    activity: Arc<activity::Activity>,
    /// HTTPS: the handshake first, then the lane and hyper (no sendfile,
    /// unless the kernel takes the records).
    tls: Option<tokio_rustls::TlsAcceptor>,
    /// The cipher suites whose records the kernel takes (see `ktls_probe`).
    kernel: Option<Arc<::ktls::CompatibleCiphers>>,
    log: Option<Arc<access_log::AccessLog>>,
}

impl Connection {
    /// The hit lane first (after the handshake, over TLS), then hyper for
    /// the rest of the connection's life. The handshake and hyper's
    /// connection are boxed: inline they made the connection's task several
    /// kilobytes, copied when it is spawned and again when it ends, for
    /// every connection, the many the lane serves alone included.
    async fn serve(self, stream: tokio::net::TcpStream, watcher: hyper_util::server::graceful::Watcher) {
        let Connection { state, lane, limits, stopping, answered, busy, builder, sendable, activity, tls, kernel, log } =
            self;
        let tls_connections = state.metrics.tls_connections.clone();
        let peer = activity.peer();
        let encrypted = tls.is_some();
        let lane_log = log.clone();
        let counted = activity.clone();
        // Over HTTP/2 in the clear, the bodies of kept files are lent to
        // the writer, which gathers their frames by reference (`lent`).
        let lender = (!encrypted).then(lent::Lender::default);
        let lending = lender.clone();
        let service = service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
            if req.version() == ::http::Version::HTTP_2
                && let Some(lender) = &lending
            {
                req.extensions_mut().insert(lender.clone());
            }
            let state = state.clone();
            let in_flight = counted.response();
            let connection = counted.clone();
            let logged = log.as_ref().map(|log| access_log::Pending::of(log.clone(), &req, peer, encrypted));
            let span = tracing::debug_span!("request", method = %req.method(), target = %req.uri());
            let handled = async move {
                let res = if busy {
                    let mut res = http::error_response(&HttpError::Busy);
                    res.headers_mut().insert(::http::header::CONNECTION, ::http::HeaderValue::from_static("close"));
                    res
                } else {
                    http::handle(state, req).await
                };
                let res = match logged {
                    Some(pending) => pending.answered(res),
                    None => res,
                };
                Ok::<_, std::convert::Infallible>(res.map(|body| activity::Counted::new(body, in_flight)))
            };
            activity::on_connection(connection, tracing::Instrument::instrument(handled, span))
        });
        // Resident objects are answered by the lane until the first request
        // it does not take; what it read and left is replayed to hyper.
        let lane =
            Lane { source: lane, peer: hitlane::Peer { addr: peer, tls: encrypted }, limits, stopping, answered };
        // hyper over `io` for the rest of the connection's life; h2
        // connections gather their small frames into fewer writes, and all
        // of them into full records where rustls encrypts (`gather`).
        macro_rules! serve_http {
            ($io:expr, $h2:expr) => {
                serve_http!($io, $h2, gather::split)
            };
            ($io:expr, $h2:expr, $split:path) => {
                if $h2 {
                    let (io, gathering) = $split($io, lender);
                    gathering
                        .around(watcher.watch(builder.serve_connection(TokioIo::new(io), service).into_owned()))
                        .await
                } else {
                    Box::pin(watcher.watch(builder.serve_connection(TokioIo::new($io), service).into_owned())).await
                }
            };
        }
        // An HTTPS connection whose records rustls encrypts: the lane (which
        // speaks HTTP/1.1 only), then hyper.
        macro_rules! serve_rustls {
            ($encrypted:expr, $h2:expr) => {{
                tls_connections.get_or_create(&metrics::PathLabel { path: "userspace" }).inc();
                let lane = if $h2 { Lane { source: None, ..lane } } else { lane };
                let Some((encrypted, unread)) = lane.first($encrypted, &activity, lane_log.as_deref()).await else {
                    return;
                };
                let io = rewind::Rewind::new(tls_records::WholeRecords(encrypted), unread);
                serve_http!(io, $h2, gather::split_for_records)
            }};
        }
        let served = match (tls, kernel) {
            (None, _) => {
                // The lane's bodies leave by `sendfile` too, where they can.
                let stream = SendfileStream::new(stream, sendable);
                let Some((stream, unread)) = lane.first(stream, &activity, lane_log.as_deref()).await else { return };
                let h2 = unread.starts_with(H2_PREFACE);
                let io = stream.with_unread(unread).with_activity(activity.clone());
                serve_http!(io, h2)
            }
            (Some(acceptor), Some(kernel)) => {
                // Read record by record, so that the kernel can take over
                // at a record's boundary (see `ktls_stream`).
                let socket = SendfileStream::new(stream, sendable).with_activity(activity.clone());
                let handshake =
                    Box::pin(tokio::time::timeout(limits.idle, acceptor.accept(::ktls::CorkStream::new(socket))));
                let Ok(Ok(mut encrypted)) = handshake.await else {
                    return tracing::debug!(?peer, "TLS handshake failed or timed out");
                };
                let Some(h2) = after_handshake(&mut encrypted).await else { return };
                let suite = encrypted.get_ref().1.negotiated_cipher_suite();
                if !suite.is_some_and(|s| kernel.is_compatible(s)) {
                    // A suite the kernel does not take: rustls encrypts.
                    serve_rustls!(encrypted, h2)
                } else {
                    // Bounded as the handshake is: taking over may wait for
                    // the rest of a record the client began.
                    let taken = tokio::time::timeout(limits.idle, ktls_stream::KernelTlsStream::take_over(encrypted));
                    let records = match taken.await {
                        Err(_) => return tracing::debug!(?peer, "client silent while the kernel took over"),
                        Ok(Ok(records)) => records,
                        Ok(Err(e)) if ktls_stream::client_gone(&e) => {
                            return tracing::debug!(?peer, error = %e, "client gone while the kernel took over");
                        }
                        Ok(Err(e)) => {
                            tls_connections.get_or_create(&metrics::PathLabel { path: "ktls_refused" }).inc();
                            return tracing::warn!(?peer, error = %e, "the kernel refused the TLS keys; connection lost");
                        }
                    };
                    tls_connections.get_or_create(&metrics::PathLabel { path: "ktls" }).inc();
                    let lane = if h2 { Lane { source: None, ..lane } } else { lane };
                    let Some((records, unread)) = lane.first(records, &activity, lane_log.as_deref()).await else {
                        return;
                    };
                    serve_http!(rewind::Rewind::new(records, unread), h2)
                }
            }
            (Some(acceptor), None) => {
                // The stamps keep the watchdog informed during the handshake too.
                let plain = SendfileStream::new(stream, SendableMemory::default()).with_activity(activity.clone());
                let handshake = Box::pin(tokio::time::timeout(limits.idle, acceptor.accept(plain)));
                let Ok(Ok(mut encrypted)) = handshake.await else {
                    return tracing::debug!(?peer, "TLS handshake failed or timed out");
                };
                let Some(h2) = after_handshake(&mut encrypted).await else { return };
                serve_rustls!(encrypted, h2)
            }
        };
        if let Err(e) = served {
            tracing::debug!(?peer, error = %e, "connection ended with an error");
        }
    }
}

/// How an HTTP/2 connection in clear (prior knowledge) begins.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n";

/// After a handshake: whether the client chose h2 (`None`: the handshake
/// was an ACME validation, answered and closed).
async fn after_handshake<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    encrypted: &mut tokio_rustls::server::TlsStream<S>,
) -> Option<bool> {
    let alpn = encrypted.get_ref().1.alpn_protocol();
    if alpn == Some(tls::ACME_TLS_ALPN) {
        // An ACME validation: the handshake was all it needed.
        let _ = tokio::io::AsyncWriteExt::shutdown(encrypted).await;
        tracing::debug!("ACME validation handshake answered");
        return None;
    }
    Some(alpn == Some(b"h2"))
}

/// The hit lane as a connection meets it.
struct Lane {
    /// `None`: straight to hyper.
    source: Option<Arc<dyn circus_http::HitSource>>,
    peer: hitlane::Peer,
    limits: hitlane::Limits,
    stopping: tokio::sync::watch::Receiver<bool>,
    answered: prometheus_client::metrics::counter::Counter,
}

impl Lane {
    /// Answers resident objects until the first request the lane does not
    /// take; then the stream and what was read of it but not answered, for
    /// hyper (`None`: the connection is over).
    async fn first<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
        self,
        stream: S,
        activity: &Arc<activity::Activity>,
        log: Option<&access_log::AccessLog>,
    ) -> Option<(S, Bytes)> {
        let Some(source) = self.source else { return Some((stream, Bytes::new())) };
        let ran =
            hitlane::run(stream, self.peer, &*source, self.limits, self.stopping, &self.answered, activity, log).await;
        match ran {
            Ok(hitlane::Exit::HandOff(stream, unread)) => Some((stream, unread)),
            Ok(hitlane::Exit::Closed) | Err(_) => None,
        }
    }
}

/// Connections per client address, capped.
#[derive(Debug)]
struct PerAddress {
    cap: usize,
    open: std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>,
}

impl PerAddress {
    fn new(cap: usize) -> Self {
        PerAddress { cap, open: Default::default() }
    }

    /// A place for one more connection from `ip`, or `None` at the cap.
    fn admit(self: &Arc<Self>, ip: std::net::IpAddr) -> Option<AddressSlot> {
        if self.cap == 0 {
            return Some(AddressSlot(None));
        }
        let mut open = self.open.lock().expect("per-address lock");
        let n = open.entry(ip).or_insert(0);
        if *n >= self.cap {
            return None;
        }
        *n += 1;
        Some(AddressSlot(Some((self.clone(), ip))))
    }
}

/// Held while a connection lives; gives its address's place back.
struct AddressSlot(Option<(Arc<PerAddress>, std::net::IpAddr)>);

impl Drop for AddressSlot {
    fn drop(&mut self) {
        if let Some((table, ip)) = &self.0 {
            let mut open = table.open.lock().expect("per-address lock");
            if let Some(n) = open.get_mut(ip) {
                *n -= 1;
                if *n == 0 {
                    open.remove(ip);
                }
            }
        }
    }
}

/// Memory for kept files' bodies that connections send without copying,
/// twice the store's budget of sparse pages (see `kept_memory`): made as
/// the block cache's is, on a private tmpfs of huge pages where that
/// gives them, else in a memfd; none where no memfd can be made, and
/// bodies stay on the heap then.
fn kept_memory(plan: &MemoryPlan) -> Option<Arc<kept_memory::KeptMemory>> {
    if plan.small_files == 0 {
        return None;
    }
    let bytes = 2 * plan.small_files;
    if arena::huge_tmpfs_worth_it() {
        match kept_memory::KeptMemory::in_private_huge_tmpfs(bytes) {
            Ok(memory) => return Some(memory),
            Err(e) => tracing::info!(why = %e, "no private tmpfs of huge pages for kept files: a memfd instead"),
        }
    }
    kept_memory::KeptMemory::new(bytes)
        .inspect_err(|e| tracing::warn!(error = %e, "no memfd for kept files: their bodies are written from the heap"))
        .ok()
}

/// The zero-copy cache memory: a slot per block of the budget, plus a
/// quarter for blocks that hyper still holds after the scheduler counted
/// them sent (blocks beyond that use heap memory, as without an arena).
/// Without `--cache-dir`, a file on a private tmpfs of huge pages where the
/// kernel allows one (see `huge_tmpfs`), else a memfd. Without either the
/// server still runs, with ordinary writes; a `--cache-dir` that cannot
/// hold the file is an error, as it was asked for.
fn cache_arena(cfg: &ServeConfig) -> std::io::Result<Option<Arc<arena::Arena>>> {
    let block = cfg.sched.block_size as usize;
    let slots = (cfg.sched.cache_bytes as usize).div_ceil(block) * 5 / 4 + 1;
    if cfg.cache_dir.is_none() && arena::huge_tmpfs_worth_it() {
        match arena::Arena::in_private_huge_tmpfs(block, slots) {
            Ok(arena) => return Ok(Some(arena)),
            Err(e) => tracing::info!(why = %e, "no private tmpfs of huge pages for the cache: a memfd instead"),
        }
    }
    match arena::Arena::new(block, slots, cfg.cache_dir.as_deref()) {
        Ok(arena) => Ok(Some(arena)),
        Err(e) if cfg.cache_dir.is_some() => Err(std::io::Error::new(
            e.kind(),
            format!(
                "--cache-dir: {e} (give a writable directory, e.g. a tmpfs: mount -t tmpfs -o huge=always tmpfs DIR)"
            ),
        )),
        Err(e) => {
            tracing::warn!(error = %e, "no memfd for the cache: sending with ordinary writes");
            Ok(None)
        }
    }
}
