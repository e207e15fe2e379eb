//! Rule C15: favoring storage, plain (in-order) downloads of a file move as
//! a group no wider than the memory can hold.
//!
//! A plain download cannot take blocks out of order, so the only way to
//! read a block once for plain downloads of different speeds is to keep
//! every block from the slowest one's position to the fastest one's in
//! memory (rule C14 keeps exactly those) and to hold the fastest back so
//! that this span never outgrows memory. A download whose next block must
//! be read from storage waits (it is *paced*) while another plain download
//! of its file that still shares with it is a window (half the memory the
//! file may use, split among the groups of downloads that began at the
//! same block, such as the ranges of a segmented downloader) or more behind
//! that block. It picks again when a download
//! of its file sends, leaves, parks or is found stalled. A download two
//! windows or more behind (it joined late, after the blocks it needs left)
//! no longer shares and paces nobody: it reads on its own, and the group
//! waits for it only once it has come closer. (The margin between one
//! window and two absorbs the runs of C12, which move a download's
//! position by up to `IN_ORDER_HIT_QUEUE` blocks at once.) A download whose
//! socket took no block for `HOLD_STALL_NANOS` while it had one to send
//! paces nobody either, so one stuck connection cannot stop the others; the
//! slowest download is never paced, so the group always moves.

use super::Scheduler;
use crate::{
    config::{Favor, HOLD_STALL_NANOS},
    file::FileState,
};
use circus_core::{BlockIdx, ClientId, FileId};

impl Scheduler {
    /// C15 is on: the circus policy favouring storage.
    pub(super) fn paces_plain(&self) -> bool {
        self.cfg.favor == Favor::Storage && self.cfg.policy == crate::config::PolicyKind::Circus
    }

    /// Half a file's share of the memory (the memory over the files with
    /// clients): what all plain downloads of a file that read the same
    /// blocks may spread over together.
    fn pacing_share(&self) -> u64 {
        self.cfg.cache_blocks() / 2 / u64::from(self.active_files.max(1))
    }

    /// Blocks one group of plain downloads of a file may spread over: half
    /// the file's share of the memory (the memory over the files with
    /// clients), split among its groups. A group is the downloads that
    /// began at the same block: every curl of a file is one group, the 16
    /// ranges of an aria2c `-s16` are 16, and their spans are all in memory
    /// at once. The other half holds queued runs (C12) and what the window
    /// overshoots.
    fn pacing_window(&self, file: &FileState) -> u64 {
        let share = self.pacing_share();
        let mut starts: Vec<BlockIdx> = file
            .clients
            .iter()
            .filter_map(|c| self.clients.get(c))
            .filter(|c| c.in_order && !c.parked && !c.all_picked())
            .map(|c| c.start)
            .collect();
        starts.sort_unstable();
        starts.dedup();
        (share / starts.len().max(1) as u64).max(1)
    }

    /// Whether plain download `id` must wait before reading block `b`: a
    /// download of its file that still shares with it is a window or more
    /// behind `b`. Sharing is measured in the file's share, not in a
    /// group's window: a range a segmented downloader opens ahead of its
    /// other connections (aria2c splits the largest gap left) is far ahead
    /// in windows when there are many groups, yet those connections will
    /// read its blocks soon; measured in windows it waited for nobody, and
    /// its blocks were evicted before they came.
    pub(super) fn must_pace(&self, id: ClientId, file_id: FileId, b: BlockIdx) -> bool {
        let file = &self.files[&file_id];
        if file.resident.contains(b) || file.loading.contains(b) || file.deferred.contains(b) {
            // No new read: taking it costs storage nothing.
            return false;
        }
        let (window, share, me) = (self.pacing_window(file), self.pacing_share(), &self.clients[&id]);
        let now = self.now;
        file.clients.iter().filter(|&&c| c != id).filter_map(|c| self.clients.get(c)).any(|other| {
            // One that has picked its last block has wrapped its cursor to
            // the start, and one that holds `b` (a resume with holes) never
            // reads it: neither is behind.
            other.in_order
                && !other.parked
                && !other.all_picked()
                && !other.have.contains(b)
                && other.cursor < me.cursor
                && u64::from(me.cursor - other.cursor) < 2 * share
                && u64::from(b - other.cursor) >= window
                && !self.stalled_plain(other, now)
        })
    }

    /// A plain download whose socket took nothing for `HOLD_STALL_NANOS`
    /// while it had a block in memory to send.
    fn stalled_plain(&self, c: &crate::client::ClientState, now: crate::event::Nanos) -> bool {
        let front = c.queue.first().is_some_and(|&b| self.files[&c.file].resident.contains(b));
        front && now.saturating_sub(c.last_sent) > HOLD_STALL_NANOS
    }

    /// Records that `id` waits (C15).
    pub(super) fn pace(&mut self, id: ClientId, file_id: FileId) {
        let paced = &mut self.files.get_mut(&file_id).expect("client's file present").paced;
        if !paced.contains(&id) {
            paced.push(id);
        }
    }

    /// Lets the paced downloads of `file_id` pick again; those still too far
    /// ahead wait once more.
    pub(super) fn wake_paced(&mut self, file_id: FileId) {
        let Some(file) = self.files.get_mut(&file_id) else { return };
        for id in std::mem::take(&mut file.paced) {
            self.fill(id);
        }
    }

    /// On a `Tick`: downloads paced behind one that has since stalled go on.
    pub(super) fn wake_all_paced(&mut self) {
        let mut files: Vec<FileId> =
            self.files.iter().filter(|(_, f)| !f.paced.is_empty()).map(|(&id, _)| id).collect();
        // Deterministic order whatever the map's.
        files.sort_unstable();
        for f in files {
            self.wake_paced(f);
        }
    }
}
