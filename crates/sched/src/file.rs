//! Per-file state: which blocks are in memory, who waits for them, and the
//! active region.

use crate::{foresight::Foresight, region::Region};
use circus_core::{BlockIdx, BlockLayout, BlockSet, ClientId, FileId};
use rustc_hash::FxHashMap;

#[derive(Debug, Clone)]
pub(crate) struct FileState {
    pub id: FileId,
    pub layout: BlockLayout,
    pub region: Region,
    /// Blocks whose bytes the driver holds.
    pub resident: BlockSet,
    /// Blocks being read: memory reserved, bytes not there yet.
    pub loading: BlockSet,
    /// Blocks a client queued that wait for memory before they can be read.
    pub deferred: BlockSet,
    /// Queue entries referring to each block. A pinned block is never evicted.
    pub pins: Vec<u16>,
    /// Eviction key of each idle resident block; 0 when not evictable.
    pub evict_key: Vec<u64>,
    /// When each block last entered the active region (orders region blocks
    /// for eviction under memory pressure: oldest first).
    pub entered: Vec<u64>,
    /// Clients queued on a block that is loading or deferred.
    pub waiters: FxHashMap<BlockIdx, Vec<ClientId>>,
    /// Active clients, in join order.
    pub clients: Vec<ClientId>,
    /// The client whose read last advanced the region.
    pub frontrunner: Option<ClientId>,
    /// Blocks read to advance the region since the file became active.
    pub leads: u64,
    /// Clients holding the region (C13) that lack each block. An idle block
    /// with a count is evicted only when nothing else can make room.
    pub needers: Vec<u32>,
    /// Clients that found the region unable to advance (C13) and wait for a
    /// holder to take its oldest block.
    pub gated: Vec<ClientId>,
    /// Its in-order readers as last snapshotted (C14).
    pub foresight: Foresight,
    /// Plain downloads waiting for a slower one to come closer (C15).
    pub paced: Vec<ClientId>,
}

impl FileState {
    pub fn new(id: FileId, layout: BlockLayout) -> Self {
        let n = layout.blocks();
        Self {
            id,
            layout,
            region: Region::new(n),
            resident: BlockSet::new(n),
            loading: BlockSet::new(n),
            deferred: BlockSet::new(n),
            pins: vec![0; n as usize],
            evict_key: vec![0; n as usize],
            entered: vec![0; n as usize],
            waiters: FxHashMap::default(),
            clients: Vec::new(),
            frontrunner: None,
            leads: 0,
            needers: vec![0; n as usize],
            gated: Vec::new(),
            foresight: Foresight::default(),
            paced: Vec::new(),
        }
    }

    pub fn blocks(&self) -> u32 {
        self.layout.blocks()
    }

    /// Word `w` of the blocks a pick can share without a new read.
    #[inline]
    pub fn available_word(&self, w: usize) -> u64 {
        self.resident.word(w) | self.loading.word(w)
    }

    /// A block in memory (or being read) that a holder still lacks (C13).
    pub fn held(&self, b: BlockIdx) -> bool {
        self.needers[b as usize] > 0 && (self.resident.contains(b) || self.loading.contains(b))
    }

    /// Under C13 the region may not slide its oldest block out while a
    /// holder lacks it: a frontrunner waits instead.
    pub fn region_gate_closed(&self, region_cap: u32) -> bool {
        let r = &self.region;
        r.len >= region_cap && r.len < self.blocks() && self.held(r.start)
    }

    /// Adds `delta` (+1 or -1) to the needers of every block `have` lacks.
    pub fn count_needs(&mut self, have: &BlockSet, delta: i32) {
        for b in 0..self.blocks() {
            if !have.contains(b) {
                let n = &mut self.needers[b as usize];
                *n = n.checked_add_signed(delta).expect("needers stay balanced");
            }
        }
    }

    /// Nothing left worth keeping: no client, no block in memory or wanted.
    pub fn is_idle(&self) -> bool {
        self.clients.is_empty() && self.resident.is_empty() && self.loading.is_empty() && self.deferred.is_empty()
    }
}
