//! The driver: the scheduler and the block cache behind one lock, fed events
//! and carrying out the scheduler's actions. Connections call it through a
//! [`DriverHandle`] on their own task: a download's join, its sent reports
//! and its end cost a lock each, not a message to another task and a
//! wake-up back (at 100 KiB per response, the lock saved about a tenth of
//! the server's CPU). The scheduler's work is quick and never waits: blocks
//! are read on spawned tasks through each version's
//! [`circus_store::BlockSource`] (a local file's reads run on blocking
//! threads), at most `io_threads` at once, and report back under the lock.

use crate::{
    activity::Activity,
    arena::Arena,
    mailbox::{self, End, Mailbox},
    metrics::Metrics,
    pacer::ReadPacer,
};
use bytes::Bytes;
use circus_core::{BlockIdx, BlockSet, ClientId, FileId};
use circus_sched::{Action, Counters, Event, Favor, HOLD_STALL_NANOS, ReadFault, SchedConfig, Scheduler, Status};
use circus_store::{FileEntry, ReadError};
use prometheus_client::metrics::gauge::Gauge;
use rustc_hash::FxHashMap;
use std::{
    ops::Range,
    sync::{
        Arc, Mutex, MutexGuard, Weak,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};
use tokio::{runtime::Handle, sync::Semaphore};

/// A download whose connection took no block for this long while it had
/// blocks waiting or held is parked: its queued blocks are taken back, so
/// sockets that stop reading cannot starve the others of memory.
pub const PARK_AFTER: Duration = Duration::from_secs(1);

/// How often the driver looks for downloads to park (and, favoring
/// storage, lets the scheduler see time pass).
const TICK: Duration = Duration::from_millis(250);

#[derive(Debug)]
enum Cmd {
    Join { id: ClientId, file: Arc<FileEntry>, have: BlockSet, in_order: bool, mailbox: Arc<Mailbox> },
    Sent { id: ClientId, blocks: Range<BlockIdx> },
    Resume { id: ClientId },
    Leave { id: ClientId },
    Loaded { file: Arc<FileEntry>, block: BlockIdx, result: Result<Bytes, ReadError> },
}

/// What the scheduler's ids stand for, for people reading /status.
#[derive(Debug, Default)]
pub struct Labels {
    /// Each file's path, relative to the served root.
    pub paths: std::collections::HashMap<circus_core::FileId, String>,
    /// Each download's client address.
    pub peers: std::collections::HashMap<ClientId, std::net::SocketAddr>,
}

/// Cheap to clone; every method returns at once (the lock is held only
/// while the scheduler decides, never across a read or a send).
#[derive(Clone)]
pub struct DriverHandle {
    driver: Arc<Mutex<Driver>>,
    next_id: Arc<AtomicU64>,
    arena: Option<Arc<Arena>>,
    detached: Gauge,
}

impl DriverHandle {
    /// Starts a download of `file`, skipping the blocks in `have`.
    /// `connection` is cut if it stops reading while holding blocks the
    /// cache needs back.
    pub(crate) fn join(
        &self,
        file: Arc<FileEntry>,
        have: BlockSet,
        in_order: bool,
        connection: Option<Arc<Activity>>,
    ) -> (ClientId, Arc<Mailbox>) {
        let id = ClientId(self.next_id.fetch_add(1, Ordering::Relaxed));
        let mailbox = Mailbox::new(connection);
        self.send(Cmd::Join { id, file, have, in_order, mailbox: mailbox.clone() });
        (id, mailbox)
    }

    /// A connection is done with blocks that were detached from the cache.
    pub fn release_detached(&self, bytes: u64) {
        if bytes > 0 {
            self.detached.dec_by(bytes as i64);
        }
    }

    /// A parked download's connection wants blocks again.
    pub fn resume(&self, id: ClientId) {
        self.send(Cmd::Resume { id });
    }

    /// The client's socket took `blocks`: their queue slots are free. One
    /// command for a run, so the blocks that refill the queue are all
    /// delivered together and the connection can send them as one run too.
    pub fn sent(&self, id: ClientId, blocks: Range<BlockIdx>) {
        if !blocks.is_empty() {
            self.send(Cmd::Sent { id, blocks });
        }
    }

    /// The cache memory blocks live in, when sends skip the copy.
    pub fn arena(&self) -> Option<&Arc<Arena>> {
        self.arena.as_ref()
    }

    pub fn leave(&self, id: ClientId) {
        self.send(Cmd::Leave { id });
    }

    /// The scheduler's state and running totals, and what its ids stand for.
    pub async fn status(&self) -> Option<(Status, Counters, Labels)> {
        let driver = lock(&self.driver);
        let labels = Labels {
            paths: driver.files.iter().map(|(id, (file, _))| (*id, file.rel.clone())).collect(),
            peers: driver.clients.iter().filter_map(|(id, c)| Some((*id, c.mailbox.0.peer()?))).collect(),
        };
        Some((driver.sched.status(), driver.sched.counters(), labels))
    }

    fn send(&self, cmd: Cmd) {
        lock(&self.driver).handle(cmd);
    }
}

impl std::fmt::Debug for DriverHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriverHandle").field("next_id", &self.next_id).finish_non_exhaustive()
    }
}

/// Nothing panics while holding the lock (a panic there is a bug the
/// scheduler's own checks report); a poisoned lock is taken as it is rather
/// than stopping every download.
fn lock(driver: &Mutex<Driver>) -> MutexGuard<'_, Driver> {
    driver.lock().unwrap_or_else(|e| e.into_inner())
}

struct Client {
    mailbox: mailbox::Sender,
    file: FileId,
    joined: Instant,
    /// Blocks handed over and not yet reported sent (they stay pinned).
    queued: u64,
    /// When its connection last took a block, or when it last had nothing
    /// queued: since then it has been waiting on its connection.
    progress: Instant,
    /// Its blocks were taken back; it gets none until its connection asks.
    parked: bool,
}

struct Driver {
    sched: Scheduler,
    cache: FxHashMap<(FileId, BlockIdx), Bytes>,
    clients: FxHashMap<ClientId, Client>,
    /// Files with clients or cached blocks, with how many of those refer to
    /// each (the entry is dropped at zero).
    files: FxHashMap<FileId, (Arc<FileEntry>, usize)>,
    io: Arc<Semaphore>,
    /// Where read blocks are kept, when sends can skip the copy.
    arena: Option<Arc<Arena>>,
    pacer: Option<Arc<ReadPacer>>,
    /// Where reads run; they report back through `this`.
    runtime: Handle,
    this: Weak<Mutex<Driver>>,
    started: Instant,
    metrics: Arc<Metrics>,
    /// Blocks queued for all clients.
    queued: u64,
    /// Most bytes detached from the cache (held by stalled connections).
    detach_cap: u64,
    /// The scheduler's actions for the command at hand, carried out in
    /// order once it is fed in (the buffer is kept: a run of sent blocks is
    /// the hot path, one command per run rather than an allocation per block).
    actions: Vec<Action>,
}

/// How the driver reads storage.
#[derive(Debug)]
pub struct Storage {
    /// Reads in flight at once.
    pub io_threads: usize,
    /// Where read blocks are kept, when sends can skip the copy.
    pub arena: Option<Arc<Arena>>,
    /// A cap on read bandwidth.
    pub pacer: Option<Arc<ReadPacer>>,
}

/// Starts the driver; its reads and its clock run on the current runtime.
pub fn spawn(cfg: SchedConfig, storage: Storage, metrics: Arc<Metrics>) -> DriverHandle {
    let Storage { io_threads, arena, pacer } = storage;
    // Favoring storage, a holder that stops sending is let go on a Tick
    // (rule C13); nothing else needs the scheduler to see time pass.
    let sched_ticks = cfg.favor == Favor::Storage;
    debug_assert!(TICK.as_nanos() as u64 <= HOLD_STALL_NANOS / 8);
    let detach_cap = cfg.cache_bytes;
    let detached = metrics.detached_bytes.clone();
    let driver = Arc::new_cyclic(|this| {
        Mutex::new(Driver {
            sched: Scheduler::new(cfg),
            cache: FxHashMap::default(),
            clients: FxHashMap::default(),
            files: FxHashMap::default(),
            io: Arc::new(Semaphore::new(io_threads.max(1))),
            arena: arena.clone(),
            pacer,
            runtime: Handle::current(),
            this: this.clone(),
            started: Instant::now(),
            metrics,
            queued: 0,
            detach_cap,
            actions: Vec::new(),
        })
    });
    // The clock: parks stalled downloads; stops once every handle is gone.
    let clock = Arc::downgrade(&driver);
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(TICK);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let Some(driver) = clock.upgrade() else { return };
            let mut driver = lock(&driver);
            driver.park_stalled();
            if sched_ticks {
                driver.step(Event::Tick);
            }
        }
    });
    DriverHandle { driver, next_id: Arc::new(AtomicU64::new(1)), arena, detached }
}

impl Driver {
    fn now(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    fn handle(&mut self, cmd: Cmd) {
        let event = match cmd {
            Cmd::Sent { id, blocks } => {
                let layout = self.clients.get(&id).and_then(|c| self.files.get(&c.file)).map(|(f, _)| f.layout);
                if let Some(layout) = layout {
                    let bytes: u64 = blocks.clone().map(|b| u64::from(layout.block_len(b))).sum();
                    self.metrics.sent_bytes.inc_by(bytes);
                }
                if let Some(c) = self.clients.get_mut(&id) {
                    let n = (blocks.end - blocks.start) as u64;
                    let n = n.min(c.queued);
                    c.queued -= n;
                    self.queued -= n;
                    c.progress = Instant::now();
                }
                let now = self.now();
                for block in blocks {
                    self.actions.extend(self.sched.on_event(now, Event::Sent { client: id, block }));
                }
                self.carry_out();
                return;
            }
            Cmd::Join { id, file, have, in_order, mailbox } => {
                let event = Event::Join { client: id, file: file.id, len: file.size, have: Some(have), in_order };
                self.retain_file(&file);
                let now = Instant::now();
                let mailbox = mailbox::Sender(mailbox);
                let client = Client { mailbox, file: file.id, joined: now, queued: 0, progress: now, parked: false };
                self.clients.insert(id, client);
                event
            }
            Cmd::Resume { id } => {
                if let Some(c) = self.clients.get_mut(&id) {
                    c.parked = false;
                    c.progress = Instant::now();
                }
                Event::Resume { client: id }
            }
            Cmd::Leave { id } => {
                if self.clients.contains_key(&id) {
                    self.forget_client(id);
                    self.metrics.downloads_abandoned.inc();
                }
                Event::Leave { client: id }
            }
            Cmd::Loaded { file, block, result: Ok(bytes) } => {
                self.metrics.storage_read_bytes.inc_by(bytes.len() as u64);
                self.cache.insert((file.id, block), bytes);
                // Each cached block holds the file entry until it is evicted.
                self.retain_file(&file);
                Event::Loaded { file: file.id, block }
            }
            Cmd::Loaded { file, block, result: Err(e) } => {
                let fault = if e.is_changed() { ReadFault::Changed } else { ReadFault::Storage };
                if fault == ReadFault::Changed {
                    tracing::info!(file = %file.rel, block, error = %e, "file changed under its downloads");
                } else {
                    self.metrics.storage_errors.inc();
                    tracing::error!(file = %file.rel, block, error = %e, "storage read failed");
                }
                Event::ReadFailed { file: file.id, block, fault, detail: e.to_string() }
            }
        };
        self.step(event);
    }

    /// Feeds one event to the scheduler and carries out its actions.
    fn step(&mut self, event: Event) {
        let now = self.now();
        self.actions.extend(self.sched.on_event(now, event));
        self.carry_out();
    }

    /// Carries out the actions gathered, in order. None of them feeds the
    /// scheduler back (reads report later, as commands), so actions of
    /// several events may be gathered first.
    ///
    /// Reads of consecutive blocks of one file, as a read-ahead run (rules
    /// C10, C17) or a queue filled at once gives them, go to storage as one
    /// request when its source reads runs whole: the other actions never touch a block being read, so they
    /// need not wait for the run to be gathered.
    fn carry_out(&mut self) {
        let mut actions = std::mem::take(&mut self.actions);
        let mut run: Option<Run> = None;
        for action in actions.drain(..) {
            let Action::Read { file, block } = action else {
                self.act(action);
                continue;
            };
            if let Some(r) = &mut run
                && r.extends(file, block)
            {
                r.count += 1;
                continue;
            }
            let entry = self.files.get(&file).expect("the scheduler reads only files with clients").0.clone();
            if let Some(done) = run.replace(Run { entry, first: block, count: 1 }) {
                self.read(done);
            }
        }
        if let Some(done) = run {
            self.read(done);
        }
        self.actions = actions;
        self.metrics.resident_bytes.set(self.sched.used_bytes() as i64);
    }

    /// Parks every download whose connection took no block for
    /// `PARK_AFTER` while it had blocks waiting or held: they pin memory
    /// others may need. Parking costs a stalled client nothing but a pick
    /// again (its blocks stay resident until memory is needed).
    fn park_stalled(&mut self) {
        let mut stalled: Vec<ClientId> = self
            .clients
            .iter()
            .filter(|(_, c)| {
                let holding = c.mailbox.0.holds() || (!c.parked && c.mailbox.0.waiting() > 0);
                holding && c.progress.elapsed() >= PARK_AFTER
            })
            .map(|(&id, _)| id)
            .collect();
        stalled.sort_unstable();
        for id in stalled {
            let c = self.clients.get_mut(&id).expect("listed above");
            let (gauge, cap) = (&self.metrics.detached_bytes, self.detach_cap);
            // Only the driver adds to the count, so checking first is safe.
            let back = c.mailbox.0.take_back(|bytes| {
                let fits = gauge.get() as u64 + bytes <= cap;
                if fits {
                    gauge.inc_by(bytes as i64);
                }
                fits
            });
            let n = (back.returned.len() + back.detached.len()) as u64;
            let n = n.min(c.queued);
            c.queued -= n;
            self.queued -= n;
            if back.detached.is_empty() && c.mailbox.0.holds() && c.mailbox.0.cut() {
                // Over the detach cap: only closing the connection frees
                // what it holds (its Leave follows).
                tracing::debug!(client = %id, "cutting a connection that stopped reading: its blocks are needed back");
            }
            let newly = !std::mem::replace(&mut c.parked, true);
            if newly {
                self.metrics.downloads_parked.inc();
                tracing::debug!(client = %id, returned = back.returned.len(), detached = ?back.detached, "parked a download whose connection stopped reading");
                self.step(Event::Park { client: id, returned: back.returned });
            }
            // Held by the connection: as far as the scheduler knows, sent.
            let now = self.now();
            for block in back.detached {
                self.actions.extend(self.sched.on_event(now, Event::Sent { client: id, block }));
            }
            self.carry_out();
        }
    }

    /// Carries out an action other than a read.
    fn act(&mut self, action: Action) {
        match action {
            Action::Read { .. } => unreachable!("carry_out gathers reads into runs"),
            Action::Send { client, file, block } => {
                let bytes = self.cache.get(&(file, block)).expect("scheduler sends only resident blocks").clone();
                if let Some(c) = self.clients.get_mut(&client) {
                    if c.queued == 0 {
                        c.progress = Instant::now();
                    }
                    c.mailbox.0.put(block, bytes);
                    c.queued += 1;
                    self.queued += 1;
                }
            }
            Action::Evict { file, block } => {
                self.cache.remove(&(file, block));
                self.metrics.evictions.inc();
                self.release_file(file);
            }
            Action::Complete { client } => {
                if let Some(c) = self.forget_client(client) {
                    self.metrics.download_seconds.observe(c.joined.elapsed().as_secs_f64());
                    c.mailbox.0.end(End::Complete);
                }
            }
            Action::Fail { client, reason } => {
                if let Some(c) = self.forget_client(client) {
                    tracing::warn!(client = %client, %reason, "download failed");
                    c.mailbox.0.end(End::Failed(reason));
                }
            }
        }
    }

    /// Reads a run of blocks as one request and reports each block.
    fn read(&mut self, run: Run) {
        let (io, driver, pacer) = (self.io.clone(), self.this.clone(), self.pacer.clone());
        let slots: Vec<_> = (0..run.count).map(|_| self.arena.as_ref().and_then(|a| a.slot())).collect();
        self.runtime.spawn(async move {
            let Run { entry, first, count } = run;
            let _permit = io.acquire_owned().await;
            let blocks = first..first + count;
            let lens: Vec<u32> = blocks.clone().map(|b| entry.layout.block_len(b)).collect();
            if let Some(pacer) = pacer {
                let len = lens.iter().map(|&l| u64::from(l)).sum();
                tokio::time::sleep(pacer.book(std::time::Instant::now(), len)).await;
            }
            let results = entry.source.read_run(entry.layout.offset(first), lens).await;
            // The blocks of a run share its buffer, as those of a source
            // that shares buffers (a larger origin block) do: each goes into
            // the arena or is copied out, so the budget counts what is held.
            let shared = count > 1 || entry.source.shares_buffers();
            let loaded: Vec<_> = blocks
                .zip(results)
                .zip(slots)
                .map(|((block, result), slot)| {
                    let result = result.and_then(|bytes| checked(&entry, block, bytes)).map(|bytes| {
                        match slot.and_then(|s| s.fill(&bytes)) {
                            Some(kept) => kept,
                            None if shared => Bytes::copy_from_slice(&bytes),
                            None => bytes,
                        }
                    });
                    (block, result)
                })
                .collect();
            if let Some(driver) = driver.upgrade() {
                let mut driver = lock(&driver);
                for (block, result) in loaded {
                    driver.handle(Cmd::Loaded { file: entry.clone(), block, result });
                }
            }
        });
    }

    fn forget_client(&mut self, id: ClientId) -> Option<Client> {
        let c = self.clients.remove(&id)?;
        self.queued -= c.queued;
        self.release_file(c.file);
        Some(c)
    }

    fn retain_file(&mut self, file: &Arc<FileEntry>) {
        self.files.entry(file.id).or_insert_with(|| (file.clone(), 0)).1 += 1;
    }

    fn release_file(&mut self, id: FileId) {
        if let Some(f) = self.files.get_mut(&id) {
            f.1 -= 1;
            if f.1 == 0 {
                self.files.remove(&id);
            }
        }
    }
}

/// Consecutive blocks of one file read as one request.
struct Run {
    entry: Arc<FileEntry>,
    first: BlockIdx,
    count: u32,
}

impl Run {
    /// Most bytes in one request (a run of blocks past this starts another).
    const MAX_BYTES: u64 = 2 << 20;

    /// Whether a read of `block` of `file` continues this run: the next
    /// block of the same file, whose source reads runs whole, within
    /// `MAX_BYTES`.
    fn extends(&self, file: FileId, block: BlockIdx) -> bool {
        if self.entry.id != file || self.first + self.count != block || !self.entry.source.reads_runs() {
            return false;
        }
        let layout = &self.entry.layout;
        layout.offset(block) + u64::from(layout.block_len(block)) - layout.offset(self.first) <= Self::MAX_BYTES
    }
}

/// `bytes` if they are block `block` of the version the index describes
/// (or no index is known yet). A mismatch means the file changed in a way
/// its version did not show (or the index is bad): the entry is marked so
/// the next request rebuilds it, and the clients start over.
fn checked(entry: &FileEntry, block: BlockIdx, bytes: Bytes) -> Result<Bytes, ReadError> {
    match entry.index_now() {
        Some(index) if !index.verify(block, &bytes) => {
            entry.source.distrust();
            Err(ReadError::changed(format!("{} block {block} does not match its hash", entry.rel)))
        }
        _ => Ok(bytes),
    }
}

#[cfg(test)]
#[path = "driver_tests.rs"]
mod tests;
