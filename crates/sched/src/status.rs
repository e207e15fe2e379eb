//! A read-only snapshot of the scheduler for status pages and tests.

use crate::{Role, Scheduler};
use circus_core::{BlockIdx, ClientId, FileId};
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub budget_bytes: u64,
    pub used_bytes: u64,
    pub files: Vec<FileStatus>,
}

#[derive(Debug, Clone, Serialize)]
pub struct FileStatus {
    pub file: FileId,
    pub len: u64,
    pub blocks: u32,
    pub resident_blocks: u32,
    /// The file cursor: oldest block of the active region.
    pub region_start: BlockIdx,
    pub region_len: u32,
    pub frontrunner: Option<ClientId>,
    pub clients: Vec<ClientStatus>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ClientStatus {
    pub client: ClientId,
    pub role: Role,
    pub cursor: BlockIdx,
    pub received_blocks: u32,
    pub queued_blocks: u32,
    pub rate_bytes_per_sec: f64,
    /// Took under three quarters of what the region brought since it
    /// joined, so it follows in spread order (rule C1).
    pub behind_region: bool,
    /// Favoring storage, the blocks it lacks stay in memory for it and its
    /// file's region waits for it (rule C13).
    pub holds: bool,
    /// Its socket stopped taking blocks: it pins nothing and is picked
    /// nothing until it takes blocks again.
    pub parked: bool,
}

impl Scheduler {
    /// Files ordered by id, clients by join order.
    pub fn status(&self) -> Status {
        let mut files: Vec<FileStatus> = self
            .files
            .values()
            .map(|f| FileStatus {
                file: f.id,
                len: f.layout.len(),
                blocks: f.blocks(),
                resident_blocks: f.resident.len(),
                region_start: f.region.start,
                region_len: f.region.len,
                frontrunner: f.frontrunner,
                clients: f
                    .clients
                    .iter()
                    .map(|id| {
                        let c = &self.clients[id];
                        ClientStatus {
                            client: *id,
                            role: c.role,
                            cursor: c.cursor,
                            received_blocks: c.delivered,
                            queued_blocks: c.queue.len() as u32,
                            rate_bytes_per_sec: c.rate.get(),
                            behind_region: !c.in_order && c.behind_region(f.leads),
                            holds: c.holds,
                            parked: c.parked,
                        }
                    })
                    .collect(),
            })
            .collect();
        files.sort_by_key(|f| f.file);
        Status { budget_bytes: self.cache.limit, used_bytes: self.cache.used, files }
    }
}
