//! A model driver for tests: it carries out the scheduler's actions the way
//! the real server must, and checks every action against its own books.
#![allow(dead_code)] // each test binary uses a different subset

use circus_core::{BlockLayout, BlockSet, ClientId, FileId, first_in};
use circus_sched::{Action, Event, FailReason, ReadFault, SchedConfig, Scheduler};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug)]
pub struct Driver {
    pub s: Scheduler,
    pub now: u64,
    block: u32,
    budget: u64,
    /// Blocks whose bytes the driver holds.
    pub resident: BTreeSet<(FileId, u32)>,
    pub pending_reads: Vec<(FileId, u32)>,
    pub pending_sends: Vec<(ClientId, FileId, u32)>,
    pub lens: BTreeMap<FileId, u64>,
    pub client_file: BTreeMap<ClientId, FileId>,
    /// Blocks each client held at join (resume) plus those sent since.
    pub got: BTreeMap<ClientId, BlockSet>,
    pub completed: BTreeSet<ClientId>,
    pub failed: BTreeMap<ClientId, FailReason>,
    pub left: BTreeSet<ClientId>,
    /// Every action, for determinism checks.
    pub log: Vec<Action>,
    pub reads: u64,
    pub sends: u64,
    /// Joins from now on ask for in-order delivery.
    pub in_order_joins: bool,
    /// Clients that joined in order: like a plain HTTP body, they can put
    /// a block on the wire only once every block before it went out.
    in_order: BTreeSet<ClientId>,
    /// Clients parked (their socket stopped taking blocks) and not resumed.
    pub parked: BTreeSet<ClientId>,
}

impl Driver {
    pub fn new(cfg: SchedConfig) -> Self {
        Self {
            block: cfg.block_size,
            budget: cfg.cache_bytes,
            s: Scheduler::new(cfg),
            now: 0,
            resident: BTreeSet::new(),
            pending_reads: vec![],
            pending_sends: vec![],
            lens: BTreeMap::new(),
            client_file: BTreeMap::new(),
            got: BTreeMap::new(),
            completed: BTreeSet::new(),
            failed: BTreeMap::new(),
            left: BTreeSet::new(),
            log: vec![],
            reads: 0,
            sends: 0,
            in_order_joins: false,
            in_order: BTreeSet::new(),
            parked: BTreeSet::new(),
        }
    }

    fn layout(&self, f: FileId) -> BlockLayout {
        BlockLayout::new(self.lens[&f], self.block)
    }

    pub fn active(&self) -> impl Iterator<Item = ClientId> + '_ {
        self.client_file
            .keys()
            .copied()
            .filter(|c| !self.completed.contains(c) && !self.failed.contains_key(c) && !self.left.contains(c))
    }

    pub fn join(&mut self, c: u64, f: u64, len: u64, have: Option<BlockSet>) {
        let (c, f) = (ClientId(c), FileId(f));
        self.lens.entry(f).or_insert(len);
        self.client_file.insert(c, f);
        let n = BlockLayout::new(len, self.block).blocks();
        let got = have.clone().filter(|h| h.capacity() == n).unwrap_or_else(|| BlockSet::new(n));
        self.got.insert(c, got);
        if self.in_order_joins {
            self.in_order.insert(c);
        }
        self.event(Event::Join { client: c, file: f, len, have, in_order: self.in_order_joins });
    }

    pub fn leave(&mut self, c: ClientId) {
        self.left.insert(c);
        self.pending_sends.retain(|s| s.0 != c);
        self.event(Event::Leave { client: c });
    }

    /// Parks `c` as the server does when its socket stops taking blocks:
    /// the socket keeps up to `keep` of the blocks handed to it (an
    /// in-order client's only in file order), the rest are taken back.
    pub fn park(&mut self, c: ClientId, keep: usize) {
        let mut kept = 0;
        let mut returned = Vec::new();
        let mut i = 0;
        while i < self.pending_sends.len() {
            if self.pending_sends[i].0 != c {
                i += 1;
            } else if kept < keep && self.can_send(i) && !self.in_order.contains(&c) {
                kept += 1;
                i += 1;
            } else {
                returned.push(self.pending_sends.remove(i).2);
            }
        }
        if self.in_order.contains(&c) && keep > 0 {
            // An in-order socket took the next block in order, if it had it.
            if let Some(&b) = returned.iter().min().filter(|&&b| {
                let got = &self.got[&c];
                first_in(0, got.capacity(), |w| got.missing_word(w)) == Some(b)
            }) {
                returned.retain(|&r| r != b);
                self.pending_sends.push((c, self.client_file[&c], b));
            }
        }
        self.parked.insert(c);
        self.event(Event::Park { client: c, returned });
    }

    pub fn resume(&mut self, c: ClientId) {
        self.parked.remove(&c);
        self.event(Event::Resume { client: c });
    }

    pub fn event(&mut self, ev: Event) {
        let actions: Vec<Action> = self.s.on_event(self.now, ev).collect();
        for a in actions {
            self.check(&a);
            self.log.push(a);
        }
        assert!(self.s.used_bytes() <= self.budget, "scheduler over budget");
        let held: u64 = self
            .resident
            .iter()
            .chain(self.pending_reads.iter())
            .map(|&(f, b)| u64::from(self.layout(f).block_len(b)))
            .sum();
        assert!(held <= self.budget, "driver holds {held} bytes, budget {}", self.budget);
    }

    fn check(&mut self, a: &Action) {
        match *a {
            Action::Read { file, block } => {
                assert!(!self.resident.contains(&(file, block)), "read of resident {file}/{block}");
                assert!(!self.pending_reads.contains(&(file, block)), "second read of {file}/{block} in flight");
                self.pending_reads.push((file, block));
                self.reads += 1;
            }
            Action::Send { client, file, block } => {
                assert!(self.resident.contains(&(file, block)), "send of non-resident {file}/{block}");
                assert_eq!(self.client_file.get(&client), Some(&file), "send to {client} of another file");
                assert!(!self.got[&client].contains(block), "{client} sent block {block} twice");
                assert!(!self.pending_sends.contains(&(client, file, block)), "duplicate send");
                self.pending_sends.push((client, file, block));
            }
            Action::Evict { file, block } => {
                assert!(self.resident.remove(&(file, block)), "evict of non-resident {file}/{block}");
                assert!(
                    !self.pending_sends.iter().any(|&(_, f, b)| (f, b) == (file, block)),
                    "evicted {file}/{block} while a send of it is queued"
                );
            }
            Action::Complete { client } => {
                let got = &self.got[&client];
                assert!(got.is_full(), "{client} complete with {} of {} blocks", got.len(), got.capacity());
                assert!(self.completed.insert(client), "{client} completed twice");
            }
            Action::Fail { client, ref reason } => {
                assert!(self.failed.insert(client, reason.clone()).is_none(), "{client} failed twice");
                self.pending_sends.retain(|s| s.0 != client);
            }
        }
    }

    /// Fails pending read `i` with `fault`.
    #[allow(dead_code, reason = "each test binary compiles this module; only the rules test injects changes")]
    pub fn fail_read(&mut self, i: usize, fault: ReadFault) {
        let (file, block) = self.pending_reads.remove(i);
        self.event(Event::ReadFailed { file, block, fault, detail: "injected".into() });
    }

    /// Finishes pending read `i` (successfully, or failing it as storage
    /// would).
    pub fn finish_read(&mut self, i: usize, fail: bool) {
        if fail {
            self.fail_read(i, ReadFault::Storage);
            return;
        }
        let (file, block) = self.pending_reads.remove(i);
        {
            self.resident.insert((file, block));
            self.event(Event::Loaded { file, block });
        }
    }

    /// Whether pending send `i` can go on the wire now: an in-order
    /// client's block waits for every block before it.
    pub fn can_send(&self, i: usize) -> bool {
        let (client, _, block) = self.pending_sends[i];
        let got = &self.got[&client];
        !self.in_order.contains(&client) || first_in(0, got.capacity(), |w| got.missing_word(w)) == Some(block)
    }

    /// Indexes of the pending sends that can go on the wire now.
    pub fn sendable(&self) -> Vec<usize> {
        (0..self.pending_sends.len()).filter(|&i| self.can_send(i)).collect()
    }

    /// Finishes pending send `i`.
    pub fn finish_send(&mut self, i: usize) {
        assert!(self.can_send(i), "in-order send out of order: {:?}", self.pending_sends[i]);
        let (client, _, block) = self.pending_sends.remove(i);
        self.sends += 1;
        assert!(self.got.get_mut(&client).unwrap().insert(block));
        self.event(Event::Sent { client, block });
    }

    /// Completes every pending operation, oldest first, until none remain.
    pub fn drain(&mut self) {
        for c in std::mem::take(&mut self.parked) {
            self.resume(c);
        }
        while !self.pending_reads.is_empty() || !self.pending_sends.is_empty() {
            self.assert_no_starvation();
            if !self.pending_reads.is_empty() {
                self.finish_read(0, false);
            } else {
                self.finish_send(self.sendable()[0]);
            }
        }
    }

    /// No client can be stuck: with no read in flight and no send that can
    /// go on the wire, nobody is active. (An in-order client holding blocks
    /// it cannot send yet while its next block waits for memory is stuck.)
    pub fn assert_no_starvation(&self) {
        if self.pending_reads.is_empty() && !(0..self.pending_sends.len()).any(|i| self.can_send(i)) {
            let stuck: Vec<_> = self.active().filter(|c| !self.parked.contains(c)).collect();
            assert!(stuck.is_empty(), "clients {stuck:?} active with nothing that can progress");
        }
    }
}

pub fn cfg(policy: circus_sched::PolicyKind) -> SchedConfig {
    SchedConfig {
        policy,
        block_size: 1024,
        queue_len: 3,
        cache_bytes: 16 * 1024,
        active_len: 8 * 1024,
        ..Default::default()
    }
}
