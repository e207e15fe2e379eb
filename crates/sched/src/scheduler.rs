//! The scheduler: a deterministic state machine. Events in, actions out.

use crate::{
    cache::Cache,
    client::ClientState,
    config::{Favor, IN_ORDER_RUN_BYTES, PolicyKind, SchedConfig},
    event::{Action, Event, FailReason, Nanos, ReadFault},
    file::FileState,
    foresight::REFRESH_SENDS,
    policy::{Circus, Pick, PickCtx, Policy, Sequential},
};
use circus_core::{BlockIdx, BlockLayout, BlockSet, ClientId, FileId};
use rustc_hash::FxHashMap;
use std::collections::VecDeque;

mod pacing;

/// Running totals, for metrics and the simulator.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counters {
    /// Storage reads issued (blocks).
    pub reads: u64,
    /// Bytes of those reads.
    pub read_bytes: u64,
    /// Storage reads by cause: a frontrunner advancing a region, a client
    /// reading on its own account, or read-ahead.
    pub lead_reads: u64,
    pub private_reads: u64,
    pub readahead_reads: u64,
    /// Picks served by a block already resident.
    pub hits: u64,
    /// Picks that joined a read already in flight.
    pub joined_reads: u64,
    pub evictions: u64,
    pub completed: u64,
    pub failed: u64,
    /// Clients whose queued blocks were taken back because their sockets
    /// stopped taking them.
    pub parked: u64,
}

#[derive(Debug)]
pub struct Scheduler {
    pub(crate) cfg: SchedConfig,
    policy: Box<dyn Policy>,
    pub(crate) files: FxHashMap<FileId, FileState>,
    pub(crate) clients: FxHashMap<ClientId, ClientState>,
    pub(crate) cache: Cache,
    /// Reads waiting for memory, oldest first.
    deferred: VecDeque<(FileId, BlockIdx)>,
    /// Files with at least one client; they share the memory for regions.
    active_files: u32,
    /// In-order (plain) clients; they share the memory for read-ahead runs (C17).
    in_order_clients: u32,
    out: Vec<Action>,
    scratch: Vec<BlockIdx>,
    /// Files with gated clients (C13), checked after every event.
    gating: Vec<FileId>,
    pub(crate) now: Nanos,
    counters: Counters,
}

impl Scheduler {
    /// # Panics
    /// If the configuration is invalid; call [`SchedConfig::validate`] first
    /// to report the problem to a user.
    pub fn new(cfg: SchedConfig) -> Self {
        if let Err(e) = cfg.validate() {
            panic!("invalid scheduler configuration: {e}");
        }
        let policy: Box<dyn Policy> = match cfg.policy {
            PolicyKind::Circus => Box::new(Circus),
            PolicyKind::Sequential => Box::new(Sequential),
        };
        Self {
            cache: Cache::new(cfg.cache_bytes),
            cfg,
            policy,
            files: FxHashMap::default(),
            clients: FxHashMap::default(),
            deferred: VecDeque::new(),
            active_files: 0,
            in_order_clients: 0,
            out: Vec::new(),
            scratch: Vec::new(),
            gating: Vec::new(),
            now: 0,
            counters: Counters::default(),
        }
    }

    pub fn config(&self) -> &SchedConfig {
        &self.cfg
    }

    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Bytes resident or being read; never above the budget.
    pub fn used_bytes(&self) -> u64 {
        self.cache.used
    }

    pub fn active_clients(&self) -> usize {
        self.clients.len()
    }

    /// Feeds one event; returns the actions it causes, in order. The same
    /// sequence of `(now, event)` always yields the same actions.
    pub fn on_event(&mut self, now: Nanos, event: Event) -> std::vec::Drain<'_, Action> {
        self.now = self.now.max(now);
        match event {
            Event::Join { client, file, len, have, in_order } => self.join(client, file, len, have, in_order),
            Event::Sent { client, block } => self.sent(client, block),
            Event::Loaded { file, block } => self.loaded(file, block),
            Event::ReadFailed { file, block, fault, detail } => self.read_failed(file, block, fault, detail),
            Event::Leave { client } => self.remove_client(client),
            Event::Park { client, returned } => self.park(client, &returned),
            Event::Resume { client } => self.resume(client),
            Event::Tick => {
                self.release_stalled_holders();
                self.wake_all_paced();
            }
        }
        self.wake_gated();
        self.pump_deferred();
        let files = &self.files;
        self.cache.compact(|key, f, b| files.get(&f).is_some_and(|f| f.evict_key[b as usize] == key));
        self.out.drain(..)
    }

    fn join(&mut self, id: ClientId, file_id: FileId, len: u64, have: Option<BlockSet>, in_order: bool) {
        if self.clients.contains_key(&id) {
            self.out.push(Action::Fail { client: id, reason: FailReason::DuplicateClient });
            return;
        }
        let layout = BlockLayout::new(len, self.cfg.block_size);
        let n = layout.blocks();
        let have = match have {
            Some(h) if h.capacity() != n => {
                self.fail_unknown(id, FailReason::BadResumeSet { got: h.capacity(), want: n });
                return;
            }
            Some(h) => h,
            None => BlockSet::new(n),
        };
        if let Some(f) = self.files.get(&file_id)
            && f.layout.len() != len
        {
            let reason = FailReason::LengthMismatch { file: file_id, known: f.layout.len(), asked: len };
            self.fail_unknown(id, reason);
            return;
        }
        if have.is_full() {
            // Nothing to send (an empty file, or a resume of a finished one).
            self.counters.completed += 1;
            self.out.push(Action::Complete { client: id });
            return;
        }
        let holds = self.holds_regions() && !in_order;
        let file = self.files.entry(file_id).or_insert_with(|| FileState::new(file_id, layout));
        if file.clients.is_empty() {
            self.active_files += 1;
        }
        file.clients.push(id);
        let mut state = ClientState::new(file_id, have, in_order, self.now, self.cfg.queue_len, file.leads);
        state.holds = holds;
        if state.holds {
            file.count_needs(&state.have, 1);
        }
        self.clients.insert(id, state);
        if in_order {
            self.in_order_clients += 1;
            self.refresh_foresight(file_id);
        }
        self.fill(id);
    }

    /// Rule C13 is on: the circus policy favouring storage.
    fn holds_regions(&self) -> bool {
        self.cfg.favor == Favor::Storage && self.cfg.policy == PolicyKind::Circus
    }

    fn fail_unknown(&mut self, client: ClientId, reason: FailReason) {
        self.counters.failed += 1;
        self.out.push(Action::Fail { client, reason });
    }

    /// Region length each active file may use: the configured active length,
    /// shrunk so that all regions together fit in three quarters of the
    /// cache, leaving the rest for queued sends and private reads.
    fn region_cap(&self, n: u32) -> u32 {
        let share = self.cfg.cache_blocks() * 3 / 4 / u64::from(self.active_files.max(1));
        (self.cfg.active_blocks() as u64).min(share.max(1)).min(u64::from(n)) as u32
    }

    /// Picks blocks for the client until its queue is full or it has picked
    /// every block of its file.
    fn fill(&mut self, id: ClientId) {
        loop {
            let Some(client) = self.clients.get(&id) else { return };
            let queued = client.queue.len();
            if queued >= self.cfg.max_queued() as usize || client.all_picked() || client.parked {
                return;
            }
            let file = &self.files[&client.file];
            if client.in_order && client.queue.last().is_some_and(|&b| file.deferred.contains(b)) {
                // An in-order client cannot send a block until every block
                // before it went out, so a pick behind a read that waits for
                // memory would pin memory it cannot release: with enough such
                // clients no read ever gets memory again (C11).
                return;
            }
            let region_cap = self.region_cap(file.blocks());
            let gate_closed = client.holds && file.region_gate_closed(region_cap);
            let ctx = PickCtx {
                file,
                client,
                leap_cap: (f64::from(region_cap) * self.cfg.leapfront) as u32,
                independent_at: (f64::from(file.blocks()) * self.cfg.threshold).ceil() as u32,
                gate_closed,
            };
            let policy: &dyn Policy = if client.in_order { &Sequential } else { self.policy.as_ref() };
            let Some((pick, role)) = policy.pick(&ctx) else {
                if gate_closed {
                    // Picks again once the region can slide (`wake_gated`).
                    let file_id = client.file;
                    let gated = &mut self.files.get_mut(&file_id).expect("client's file present").gated;
                    if !gated.contains(&id) {
                        gated.push(id);
                    }
                    if !self.gating.contains(&file_id) {
                        self.gating.push(file_id);
                    }
                }
                return;
            };
            if queued >= self.cfg.queue_len as usize && !self.may_extend_run(client.in_order, file, pick.block()) {
                return;
            }
            let file_id = client.file;
            if client.in_order && self.paces_plain() && self.must_pace(id, file_id, pick.block()) {
                // C15: a slower plain download of the file would lose the
                // blocks this read brings; wait for it.
                self.pace(id, file_id);
                return;
            }
            let client = self.clients.get_mut(&id).expect("client present");
            let b = pick.block();
            debug_assert!(!client.have.contains(b), "policy picked block {b} twice for {id}");
            client.role = role;
            client.have.insert(b);
            client.queue.push(b);
            client.cursor = (b + 1) % client.have.capacity();
            if client.holds {
                self.taken_by_holder(file_id, b);
            }
            let client = self.clients.get_mut(&id).expect("client present");
            let lead = matches!(pick, Pick::Lead(_));
            if matches!(pick, Pick::Lead(_) | Pick::Shared(_)) {
                client.taken += 1;
            }
            if lead {
                self.advance_region(file_id, id, b, region_cap);
            }
            if self.enqueue(id, file_id, b) {
                if lead {
                    self.counters.lead_reads += 1;
                } else {
                    self.counters.private_reads += 1;
                }
                self.read_ahead(id, file_id, b, lead.then_some(region_cap));
            }
        }
    }

    /// C12: past `queue_len`, an in-order client only takes a block already
    /// resident, while no read waits for memory and at least half the budget
    /// stays free or evictable: slow plain clients each pinning a long run
    /// must not leave later reads waiting for them to drain.
    fn may_extend_run(&self, in_order: bool, file: &FileState, b: BlockIdx) -> bool {
        let idle = self.cache.idle_blocks() * u64::from(self.cfg.block_size);
        let pinned = self.cache.used.saturating_sub(idle);
        in_order && file.resident.contains(b) && self.deferred.is_empty() && pinned <= self.cache.limit / 2
    }

    /// A holder took `b` (C13): one needer fewer. When none is left the
    /// block may be evicted once unpinned, and if it was the region's
    /// oldest block the region may slide again.
    fn taken_by_holder(&mut self, file_id: FileId, b: BlockIdx) {
        let file = self.files.get_mut(&file_id).expect("client's file present");
        let n = &mut file.needers[b as usize];
        *n -= 1;
        if *n == 0 {
            self.no_longer_held(file_id, b);
        }
    }

    /// `b`'s last needer took it or let go: if idle, it is re-keyed as an
    /// ordinary block, no longer kept before all others.
    fn no_longer_held(&mut self, file_id: FileId, b: BlockIdx) {
        let file = &self.files[&file_id];
        let i = b as usize;
        if file.resident.contains(b) && file.pins[i] == 0 && file.evict_key[i] != 0 {
            self.cache.forget_one();
            self.make_idle(file_id, b);
        }
    }

    /// A holder stops holding (it left, or stalled): the blocks it lacked
    /// lose a needer.
    fn release_holder(&mut self, id: ClientId) {
        let Some(client) = self.clients.get_mut(&id).filter(|c| c.holds) else { return };
        client.holds = false;
        let file_id = client.file;
        let have = client.have.clone();
        let file = self.files.get_mut(&file_id).expect("client's file present");
        file.count_needs(&have, -1);
        let freed: Vec<BlockIdx> =
            (0..file.blocks()).filter(|&b| !have.contains(b) && file.needers[b as usize] == 0).collect();
        for b in freed {
            self.no_longer_held(file_id, b);
        }
    }

    /// C13: a holder that has had a resident block to send for
    /// `HOLD_STALL_NANOS` without sending stops holding, so one stuck socket
    /// cannot stop every other download of its file.
    fn release_stalled_holders(&mut self) {
        let now = self.now;
        let mut stalled: Vec<ClientId> = self
            .clients
            .iter()
            .filter(|(_, c)| {
                let front = c.queue.first().is_some_and(|&b| self.files[&c.file].resident.contains(b));
                c.stalled(now, front)
            })
            .map(|(&id, _)| id)
            .collect();
        // Deterministic order whatever the map's.
        stalled.sort_unstable();
        for id in stalled {
            self.release_holder(id);
        }
    }

    /// Gated clients pick again when their file's region can slide (its
    /// oldest block was taken by its last holder, let go or evicted, or the
    /// region's cap grew), and so does a gated client that lacks the very
    /// block the region waits on: it became the oldest after that client
    /// was gated (a read-ahead or another client's lead moved the region),
    /// and only its lackers can open the gate. They may wait once more.
    fn wake_gated(&mut self) {
        while let Some((i, wake)) = self.next_to_wake() {
            let Some(file) = self.files.get_mut(&self.gating[i]) else {
                self.gating.swap_remove(i);
                continue;
            };
            file.gated.retain(|c| !wake.contains(c));
            if file.gated.is_empty() {
                self.gating.swap_remove(i);
            }
            for id in wake {
                self.fill(id);
            }
        }
    }

    /// The first gating file with clients to wake, and those clients.
    fn next_to_wake(&self) -> Option<(usize, Vec<ClientId>)> {
        self.gating.iter().enumerate().find_map(|(i, f)| {
            let Some(file) = self.files.get(f) else { return Some((i, Vec::new())) };
            if !file.region_gate_closed(self.region_cap(file.blocks())) {
                return Some((i, file.gated.clone()));
            }
            let start = file.region.start;
            let lacking: Vec<ClientId> = file
                .gated
                .iter()
                .copied()
                .filter(|c| self.clients.get(c).is_some_and(|c| !c.have.contains(start)))
                .collect();
            (!lacking.is_empty()).then_some((i, lacking))
        })
    }

    /// Blocks one storage read for client `id` brings, counting the demanded
    /// one: `readahead` (C10), and for an in-order client alone on its file
    /// at least its share of half the memory, up to `IN_ORDER_RUN_BYTES` (C17).
    fn run_len(&self, id: ClientId) -> u32 {
        let client = &self.clients[&id];
        if !client.in_order || self.files[&client.file].clients.len() > 1 {
            return self.cfg.readahead;
        }
        let share = self.cfg.cache_blocks() / 2 / u64::from(self.in_order_clients.max(1));
        let most = (IN_ORDER_RUN_BYTES / u64::from(self.cfg.block_size)).max(1);
        (share.min(most) as u32).max(self.cfg.readahead)
    }

    /// After a storage read of `b` for client `id`, reads up to
    /// `run_len - 1` following blocks the client lacks, stopping at the end
    /// of the file, at a block already in memory, or when memory is short.
    /// They are not pinned: the client picks them later as cache hits. When
    /// the read was a frontrunner's (`region_cap` given), they join the region.
    fn read_ahead(&mut self, id: ClientId, file_id: FileId, b: BlockIdx, region_cap: Option<u32>) {
        for next in (b + 1..).take(self.run_len(id) as usize - 1) {
            let file = &self.files[&file_id];
            let taken = file.resident.contains(next) || file.loading.contains(next) || file.deferred.contains(next);
            if next >= file.blocks() || taken || self.clients[&id].have.contains(next) {
                return;
            }
            let region = &file.region;
            let leap_cap = region_cap.map(|cap| (f64::from(cap) * self.cfg.leapfront) as u32);
            if leap_cap.is_some_and(|leap| region.dist(region.start, next) > leap) {
                return;
            }
            let bytes = u64::from(file.layout.block_len(next));
            if !self.reserve(bytes) {
                return;
            }
            if let Some(cap) = region_cap {
                self.advance_region(file_id, id, next, cap);
            }
            let file = self.files.get_mut(&file_id).expect("file present");
            file.loading.insert(next);
            self.counters.readahead_reads += 1;
            self.counters.reads += 1;
            self.counters.read_bytes += bytes;
            self.out.push(Action::Read { file: file_id, block: next });
        }
    }

    /// The frontrunner's pick `b` becomes the region's newest block; the
    /// oldest blocks slide out and become ordinary idle blocks.
    fn advance_region(&mut self, file_id: FileId, id: ClientId, b: BlockIdx, cap: u32) {
        let file = self.files.get_mut(&file_id).expect("file present");
        file.frontrunner = Some(id);
        file.leads += 1;
        let mut departed = std::mem::take(&mut self.scratch);
        file.region.extend_to(b, cap, |d| departed.push(d));
        file.entered[b as usize] = self.cache.next_stamp();
        for &d in &departed {
            let file = &self.files[&file_id];
            if file.evict_key[d as usize] != 0 && file.needers[d as usize] == 0 {
                // Idle and keyed as a region block: re-key as outside, by
                // when a plain download reads it (C14) or by recency.
                let key = self.plain_key(file_id, d);
                self.files.get_mut(&file_id).expect("file present").evict_key[d as usize] = key;
                self.cache.forget_one();
                self.cache.push(key, file_id, d);
            }
        }
        departed.clear();
        self.scratch = departed;
    }

    /// Pins `b` for the client and sends it, waits for its read, or reads it.
    /// Returns whether a storage read started.
    fn enqueue(&mut self, id: ClientId, file_id: FileId, b: BlockIdx) -> bool {
        let file = self.files.get_mut(&file_id).expect("file present");
        let i = b as usize;
        if file.evict_key[i] != 0 {
            file.evict_key[i] = 0;
            self.cache.forget_one();
        }
        file.pins[i] += 1;
        if file.resident.contains(b) {
            self.counters.hits += 1;
            self.out.push(Action::Send { client: id, file: file_id, block: b });
            return false;
        }
        file.waiters.entry(b).or_default().push(id);
        if file.loading.contains(b) || file.deferred.contains(b) {
            self.counters.joined_reads += 1;
            return false;
        }
        self.start_read(file_id, b)
    }

    /// Reads `b` now if memory allows, else queues it until memory frees.
    /// Returns whether the read started.
    fn start_read(&mut self, file_id: FileId, b: BlockIdx) -> bool {
        let bytes = u64::from(self.files[&file_id].layout.block_len(b));
        let reserved = self.reserve(bytes);
        let file = self.files.get_mut(&file_id).expect("a file with waiters is never dropped");
        if reserved {
            file.loading.insert(b);
            self.counters.reads += 1;
            self.counters.read_bytes += bytes;
            self.out.push(Action::Read { file: file_id, block: b });
        } else {
            file.deferred.insert(b);
            self.deferred.push_back((file_id, b));
        }
        reserved
    }

    /// Makes room for `bytes`, evicting idle blocks in key order. Returns
    /// false, evicting nothing more, when only pinned blocks remain.
    fn reserve(&mut self, bytes: u64) -> bool {
        while !self.cache.fits(bytes) {
            let files = &self.files;
            let victim = self.cache.pop(|key, f, b| files.get(&f).is_some_and(|f| f.evict_key[b as usize] == key));
            let Some((file_id, b)) = victim else { return false };
            let file = self.files.get_mut(&file_id).expect("validated above");
            file.evict_key[b as usize] = 0;
            file.resident.remove(b);
            self.cache.used -= u64::from(file.layout.block_len(b));
            self.counters.evictions += 1;
            self.out.push(Action::Evict { file: file_id, block: b });
            self.drop_file_if_idle(file_id);
        }
        self.cache.used += bytes;
        true
    }

    fn pump_deferred(&mut self) {
        while let Some(&(file_id, b)) = self.deferred.front() {
            let still_wanted = self.files.get(&file_id).is_some_and(|f| f.deferred.contains(b));
            if !still_wanted {
                self.deferred.pop_front();
                continue;
            }
            let bytes = u64::from(self.files[&file_id].layout.block_len(b));
            if !self.reserve(bytes) {
                return;
            }
            self.deferred.pop_front();
            let file = self.files.get_mut(&file_id).expect("checked above");
            file.deferred.remove(b);
            file.loading.insert(b);
            self.counters.reads += 1;
            self.counters.read_bytes += bytes;
            self.out.push(Action::Read { file: file_id, block: b });
        }
    }

    fn sent(&mut self, id: ClientId, b: BlockIdx) {
        let Some(client) = self.clients.get_mut(&id) else { return };
        let file = &self.files[&client.file];
        // Only a block we told the driver to send can come back as sent.
        let Some(pos) = client.queue.iter().position(|&q| q == b).filter(|_| file.resident.contains(b)) else {
            debug_assert!(false, "Sent for block {b} that {id} was not sent");
            return;
        };
        client.queue.remove(pos);
        client.delivered += 1;
        client.last_sent = self.now;
        client.rate.record(self.now, file.layout.block_len(b));
        let (file_id, done, in_order) = (client.file, client.delivered == file.blocks(), client.in_order);
        self.unpin(file_id, b);
        if in_order && !done {
            let file = self.files.get_mut(&file_id).expect("client's file present");
            file.foresight.sends_since += 1;
            if file.foresight.sends_since >= REFRESH_SENDS.max(file.resident.len()) {
                self.refresh_foresight(file_id);
            }
            self.wake_paced(file_id);
        }
        if done {
            self.counters.completed += 1;
            self.out.push(Action::Complete { client: id });
            self.remove_client(id);
        } else {
            self.fill(id);
        }
    }

    /// Takes back what a client whose socket stopped taking blocks had
    /// queued: the blocks the driver returned and those still waiting for a
    /// read. They count as never picked. The blocks left in its queue are
    /// in its socket and come back as `Sent`.
    fn park(&mut self, id: ClientId, returned: &[BlockIdx]) {
        if !self.clients.contains_key(&id) {
            return;
        }
        // A client that stops reading holds nothing back for others (C13).
        self.release_holder(id);
        let client = self.clients.get_mut(&id).expect("checked above");
        client.parked = true;
        let file_id = client.file;
        let file = &self.files[&file_id];
        let (dropped, kept): (Vec<BlockIdx>, Vec<BlockIdx>) =
            client.queue.iter().partition(|&&b| returned.contains(&b) || !file.resident.contains(b));
        debug_assert!(returned.iter().all(|b| dropped.contains(b)), "{id} returned blocks it was not sent");
        client.queue = kept;
        for &b in &dropped {
            client.have.remove(b);
        }
        if let Some(&first) = dropped.iter().min().filter(|_| client.in_order) {
            // An in-order client goes on from its first block given back.
            client.cursor = first;
        }
        self.counters.parked += 1;
        let in_order = client.in_order;
        self.give_up(id, file_id, &dropped);
        if in_order {
            self.refresh_foresight(file_id);
            self.wake_paced(file_id);
        }
    }

    fn resume(&mut self, id: ClientId) {
        if let Some(client) = self.clients.get_mut(&id).filter(|c| c.parked) {
            client.parked = false;
            let (file_id, in_order) = (client.file, client.in_order);
            if in_order {
                self.refresh_foresight(file_id);
            }
            self.fill(id);
        }
    }

    /// Unpins `blocks` queued for `id`, and stops waiting for their reads
    /// on its account (a read nobody waits for any more is not started).
    fn give_up(&mut self, id: ClientId, file_id: FileId, blocks: &[BlockIdx]) {
        for &b in blocks {
            let file = self.files.get_mut(&file_id).expect("client's file present");
            if let Some(ws) = file.waiters.get_mut(&b) {
                ws.retain(|&w| w != id);
                if ws.is_empty() {
                    file.waiters.remove(&b);
                    file.deferred.remove(b);
                }
            }
            self.unpin(file_id, b);
        }
    }

    fn unpin(&mut self, file_id: FileId, b: BlockIdx) {
        let file = self.files.get_mut(&file_id).expect("pinned block's file present");
        let i = b as usize;
        file.pins[i] -= 1;
        if file.pins[i] == 0 && file.resident.contains(b) {
            self.make_idle(file_id, b);
        }
    }

    fn make_idle(&mut self, file_id: FileId, b: BlockIdx) {
        let file = &self.files[&file_id];
        let key = if file.needers[b as usize] > 0 {
            // A holder still lacks it (C13): kept until it is taken, unless
            // nothing else can make room.
            self.cache.held_key()
        } else if file.region.contains(b) {
            Cache::region_key(file.entered[b as usize])
        } else {
            self.plain_key(file_id, b)
        };
        self.files.get_mut(&file_id).expect("file present").evict_key[b as usize] = key;
        self.cache.push(key, file_id, b);
    }

    /// The key of an idle block neither held nor in a region: by when an
    /// in-order client will next read it (C14), else by recency.
    fn plain_key(&mut self, file_id: FileId, b: BlockIdx) -> u64 {
        match self.next_plain_use(file_id, b) {
            Some(at) => Cache::needed_key(at),
            None => self.cache.idle_key(self.policy.idle_order()),
        }
    }

    /// When an in-order client of the file that lacks `b` will read it (C14).
    fn next_plain_use(&self, file_id: FileId, b: BlockIdx) -> Option<Nanos> {
        let clients = &self.clients;
        let lacks = |c| clients.get(&c).is_some_and(|c: &ClientState| !c.parked && !c.have.contains(b));
        self.files[&file_id].foresight.next_use(b, u64::from(self.cfg.block_size), lacks)
    }

    /// C14: snapshots the file's in-order readers and re-keys its idle
    /// blocks that are keyed by need. A block nobody needs keeps its
    /// recency key; one that was needed and is no longer gets a fresh one.
    /// Under the circus policy only: the sequential policy is the LRU
    /// baseline.
    fn refresh_foresight(&mut self, file_id: FileId) {
        if self.cfg.policy != PolicyKind::Circus {
            return;
        }
        let Some(file) = self.files.get_mut(&file_id) else { return };
        let clients = &self.clients;
        let readers = file.clients.iter().filter_map(|id| {
            clients.get(id).filter(|c| c.in_order && !c.parked).map(|c| (*id, c.cursor, c.rate.get()))
        });
        let had_readers = !file.foresight.is_empty();
        file.foresight.refresh(self.now, readers);
        if !had_readers && file.foresight.is_empty() {
            return;
        }
        let keyed: Vec<BlockIdx> =
            file.resident.iter().filter(|&b| Cache::is_refreshable(file.evict_key[b as usize])).collect();
        for b in keyed {
            let old = self.files[&file_id].evict_key[b as usize];
            let key = match self.next_plain_use(file_id, b) {
                Some(at) => Cache::needed_key(at),
                None if Cache::is_needed(old) => self.cache.idle_key(self.policy.idle_order()),
                None => continue,
            };
            if key != old {
                self.cache.forget_one();
                self.files.get_mut(&file_id).expect("file present").evict_key[b as usize] = key;
                self.cache.push(key, file_id, b);
            }
        }
    }

    fn loaded(&mut self, file_id: FileId, b: BlockIdx) {
        let Some(file) = self.files.get_mut(&file_id) else { return };
        if !file.loading.remove(b) {
            return;
        }
        file.resident.insert(b);
        for id in file.waiters.remove(&b).unwrap_or_default() {
            self.out.push(Action::Send { client: id, file: file_id, block: b });
        }
        if file.pins[b as usize] == 0 {
            self.make_idle(file_id, b);
        }
    }

    fn read_failed(&mut self, file_id: FileId, b: BlockIdx, fault: ReadFault, detail: String) {
        let Some(file) = self.files.get_mut(&file_id) else { return };
        if !file.loading.remove(b) {
            return;
        }
        self.cache.used -= u64::from(file.layout.block_len(b));
        let waiters = file.waiters.remove(&b).unwrap_or_default();
        for id in waiters {
            let reason = match fault {
                ReadFault::Changed => FailReason::FileChanged { block: b, detail: detail.clone() },
                ReadFault::Storage => FailReason::StorageRead { block: b, detail: detail.clone() },
            };
            self.counters.failed += 1;
            self.out.push(Action::Fail { client: id, reason });
            self.remove_client(id);
        }
        self.drop_file_if_idle(file_id);
    }

    /// Forgets a client (left, failed or complete) and unpins its queue.
    fn remove_client(&mut self, id: ClientId) {
        self.release_holder(id);
        let Some(client) = self.clients.remove(&id) else { return };
        let file_id = client.file;
        self.give_up(id, file_id, &client.queue);
        let file = self.files.get_mut(&file_id).expect("client's file present");
        file.clients.retain(|&c| c != id);
        file.gated.retain(|&c| c != id);
        file.paced.retain(|&c| c != id);
        if file.frontrunner == Some(id) {
            file.frontrunner = None;
        }
        if file.clients.is_empty() {
            self.active_files -= 1;
        }
        if client.in_order {
            self.in_order_clients -= 1;
            self.refresh_foresight(file_id);
            self.wake_paced(file_id);
        }
        self.drop_file_if_idle(file_id);
    }

    fn drop_file_if_idle(&mut self, file_id: FileId) {
        if self.files.get(&file_id).is_some_and(FileState::is_idle) {
            self.files.remove(&file_id);
        }
    }
}
