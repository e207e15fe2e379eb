//! Block-selection policies: given one client with a free queue slot, which
//! block does it get next? Policies decide; the scheduler acts (pins, reads,
//! sends, evicts). The rules are numbered as in docs/scheduler.md.

use crate::{cache::IdleOrder, client::ClientState, client::Role, file::FileState};
use circus_core::{BlockIdx, best_spread_in_circular, first_in_circular};

/// Where the chosen block comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pick {
    /// A block of the active region already resident or loading (rule C1).
    Shared(BlockIdx),
    /// The next block past the region: reading it advances the region (C2).
    Lead(BlockIdx),
    /// A block taken on the client's own account, outside the region (C3, S1).
    Private(BlockIdx),
}

impl Pick {
    pub fn block(self) -> BlockIdx {
        match self {
            Pick::Shared(b) | Pick::Lead(b) | Pick::Private(b) => b,
        }
    }
}

/// What a policy may look at.
#[derive(Debug)]
pub(crate) struct PickCtx<'a> {
    pub file: &'a FileState,
    pub client: &'a ClientState,
    /// How far past the file cursor a frontrunner may read, in blocks.
    pub leap_cap: u32,
    /// Blocks a client must hold before it turns independent.
    pub independent_at: u32,
    /// The client holds its file's region (C13) and the region cannot slide:
    /// leading must wait.
    pub gate_closed: bool,
}

pub(crate) trait Policy: std::fmt::Debug + Send {
    /// The next block for the client, or `None` to pick nothing now: it has
    /// picked every block, or it is better off waiting for the next chance
    /// (its own next `Sent`) while its queue still holds work.
    fn pick(&self, ctx: &PickCtx<'_>) -> Option<(Pick, Role)>;
    /// How idle blocks outside any region are ordered for eviction.
    fn idle_order(&self) -> IdleOrder;
}

/// First block at or after `from` (circularly) that the client lacks.
fn next_missing(ctx: &PickCtx<'_>, from: BlockIdx) -> Option<BlockIdx> {
    let n = ctx.file.blocks();
    first_in_circular(n, from, n, |w| ctx.client.have.missing_word(w))
}

/// S1: every client reads its file in order from where it started, sharing
/// only what an LRU cache happens to hold.
#[derive(Debug)]
pub(crate) struct Sequential;

impl Policy for Sequential {
    fn pick(&self, ctx: &PickCtx<'_>) -> Option<(Pick, Role)> {
        next_missing(ctx, ctx.client.cursor).map(|b| (Pick::Private(b), Role::Independent))
    }

    fn idle_order(&self) -> IdleOrder {
        IdleOrder::Lru
    }
}

/// The Circus rules C1–C3 (see docs/scheduler.md for the reasons).
#[derive(Debug)]
pub(crate) struct Circus;

impl Policy for Circus {
    fn pick(&self, ctx: &PickCtx<'_>) -> Option<(Pick, Role)> {
        let (file, client) = (ctx.file, ctx.client);
        let region = &file.region;
        let independent = client.have.len() >= ctx.independent_at;
        let role = if independent { Role::Independent } else { Role::Follower };
        // C1: a region block in memory that the client lacks. A client that
        // keeps up takes the oldest: earliest deadline first, it is the next
        // to leave the region, so the client loses none. One that has fallen
        // behind will lose blocks whatever it picks, so it takes the highest
        // in the spread order (`spread_rank`): slow clients then hold nested
        // subsets, and the blocks they still lack are the same for all of
        // them and are shared when read again.
        let lacking = |w| file.available_word(w) & client.have.missing_word(w);
        // A holder (C13) always takes the oldest: the region waits for it to
        // take that block before it slides.
        let shared = if client.behind_region(file.leads) && !client.holds {
            best_spread_in_circular(file.blocks(), region.start, region.len, lacking)
        } else {
            first_in_circular(file.blocks(), region.start, region.len, lacking)
        };
        if let Some(b) = shared {
            return Some((Pick::Shared(b), role));
        }
        if client.holds {
            // C13: a block that just slid out of the region (a leap slides
            // several at once) is still free; and while the region cannot
            // slide, wait rather than read. Blocks in memory past the head
            // are left to leading, which takes them without a read and
            // moves the region over them.
            let n = file.blocks();
            let behind =
                ((u64::from(region.start) + u64::from(n) - u64::from(region.len)) % u64::from(n.max(1))) as u32;
            if let Some(b) = first_in_circular(n, behind, region.len.min(n), lacking) {
                return Some((Pick::Shared(b), role));
            }
            if ctx.gate_closed {
                return None;
            }
        }
        // C16: plain downloads of the file read in order on their own
        // account, outside the region; what they bring is free for a client
        // that takes blocks in any order, before it reads anything. Not for
        // a holder (C13): blocks past the head are its region's to take by
        // leading, or it strands itself ahead of the region.
        if !client.holds
            && !file.foresight.is_empty()
            && let Some(b) = first_in_circular(file.blocks(), region.head(), file.blocks(), lacking)
        {
            return Some((Pick::Shared(b), role));
        }
        // C2: nothing left in the region: lead. A follower may leap over
        // blocks it already holds, up to the leapfront distance from the file
        // cursor; an independent client leads only where it needs the very
        // next block, so its reads still extend the region without a gap.
        let head = region.head();
        let head_next = next_missing(ctx, head)?;
        // Measured against the region as it stands: when more files share
        // memory the cap shrinks below the current length, and extending
        // then trims the region rather than counting as a leap. A short skip
        // (a sixteenth of the region) is no leap: a follower that kept a
        // spread subset (C1) holds every other block or so, and must still
        // be able to lead the next pass over the blocks it lacks.
        let slack = region.len / 16;
        let within_leap =
            region.len == 0 || region.dist(region.start, head_next) <= ctx.leap_cap.max(region.len) + slack;
        if within_leap && (!independent || head_next == head) {
            return Some((Pick::Lead(head_next), Role::Frontrunner));
        }
        // C3: read on its own account, but only when the client is about to
        // run dry: while its queue still holds work, the region may yet bring
        // it a block for free. Then take the block the region will reach
        // last, half a file from its head, so the region and the private read
        // do not fetch the same block twice; a block still in memory first.
        if ctx.client.queue.len() > 1 {
            return None;
        }
        let n = file.blocks();
        let opposite = ((u64::from(head) + u64::from(n / 2)) % u64::from(n)) as BlockIdx;
        // Anything of the file still in memory outside the region is free.
        if let Some(b) = first_in_circular(n, opposite, n, |w| file.available_word(w) & client.have.missing_word(w)) {
            return Some((Pick::Shared(b), role));
        }
        next_missing(ctx, opposite).map(|b| (Pick::Private(b), role))
    }

    fn idle_order(&self) -> IdleOrder {
        IdleOrder::Mru
    }
}
