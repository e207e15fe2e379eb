//! How `--cache` is divided among the server's caches: decided once at
//! start, in one place, and shown on `/status`.
//!
//! - Serving a directory, whole small files for the hit lane get a
//!   sixteenth (leaving the scheduler at least two blocks) and the
//!   scheduler's block cache the rest.
//! - In front of an origin, the scheduler gets a quarter (at least two
//!   blocks) for native downloads of origin objects, whose blocks are
//!   copies of the tier's; of the rest, fetches in flight get an eighth
//!   (at least one read-ahead window, as their buffers are held outside
//!   the store) and the tier's store keeps what is left.

use circus_origin::OriginConfig;

/// The byte budget of each cache; the parts add up to `total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct MemoryPlan {
    pub total: u64,
    /// The scheduler's block cache.
    pub scheduler: u64,
    /// Whole small local files, answered by the hit lane.
    pub small_files: u64,
    /// The origin tier's stored blocks and object descriptions.
    pub origin_store: u64,
    /// The origin tier's fetches in flight.
    pub origin_fetches: u64,
}

/// What the block cache's memory is, chosen at start and shown on
/// `/status`: `sendfile` from it costs a page-cache lookup and a pipe
/// buffer per page, so 4 KiB pages cost more per byte sent than huge ones.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CachePages {
    /// `private huge tmpfs` (the default where user namespaces are
    /// allowed), `memfd`, `file in DIR` (`--cache-dir`), or `heap` (no
    /// zero-copy cache: blocks go out with ordinary writes).
    pub backing: String,
    /// The largest page the memory may be made of: 4096 for a memfd while
    /// the kernel's shmem huge pages are off, the huge page size for a
    /// tmpfs or where shmem may use them. 0 for `heap`.
    pub largest_page_bytes: u64,
}

impl CachePages {
    pub(crate) fn new(arena: Option<&crate::arena::Arena>) -> Self {
        CachePages {
            backing: arena.map_or("heap", |a| a.backing()).to_owned(),
            largest_page_bytes: arena.map_or(0, |a| a.page_bytes() as u64),
        }
    }
}

/// A budget too small for the origin settings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a cache of {total} bytes is too small for origin blocks of {origin_block} bytes with {readahead} of read-ahead: give --cache {need} or more, or a smaller --origin-block"
)]
pub struct PlanError {
    total: u64,
    origin_block: u32,
    readahead: u32,
    need: u64,
}

impl MemoryPlan {
    /// Divides `total` for a scheduler of blocks of `block` bytes, in front
    /// of `origin` if given. `total` is at least two blocks (the
    /// scheduler's own check).
    pub fn new(total: u64, block: u32, origin: Option<&OriginConfig>) -> Result<Self, PlanError> {
        let two_blocks = 2 * u64::from(block);
        let Some(o) = origin else {
            let small_files = (total / 16).min(total.saturating_sub(two_blocks));
            return Ok(MemoryPlan {
                total,
                scheduler: total - small_files,
                small_files,
                origin_store: 0,
                origin_fetches: 0,
            });
        };
        let scheduler = (total / 4).max(two_blocks).min(total);
        let tier = total - scheduler;
        let window = u64::from(o.readahead + 1) * u64::from(o.block_size);
        if tier < 2 * window {
            // The smallest total whose tier share holds two windows.
            let need = ((2 * window).div_ceil(3) * 4).max(2 * window + two_blocks);
            return Err(PlanError { total, origin_block: o.block_size, readahead: o.readahead, need });
        }
        let origin_fetches = (tier / 8).max(window);
        Ok(MemoryPlan { total, scheduler, small_files: 0, origin_store: tier - origin_fetches, origin_fetches })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use circus_origin::OriginSource;

    const MIB: u64 = 1 << 20;

    fn origin(block: u32, readahead: u32) -> OriginConfig {
        let mut o = OriginConfig::new(OriginSource::Http("http://127.0.0.1:1/".parse().unwrap()));
        o.block_size = block;
        o.readahead = readahead;
        o
    }

    #[test]
    fn the_parts_add_up_and_each_cache_gets_its_share() {
        let local = MemoryPlan::new(1024 * MIB, 256 * 1024, None).unwrap();
        assert_eq!((local.scheduler, local.small_files), (960 * MIB, 64 * MIB));
        // Two blocks: the scheduler keeps both.
        let tiny = MemoryPlan::new(2 * 64 * 1024, 64 * 1024, None).unwrap();
        assert_eq!((tiny.scheduler, tiny.small_files), (2 * 64 * 1024, 0));
        let o = origin(1 << 20, 4);
        let tier = MemoryPlan::new(1024 * MIB, 256 * 1024, Some(&o)).unwrap();
        assert_eq!(tier.scheduler, 256 * MIB);
        assert_eq!(tier.origin_fetches, 96 * MIB);
        assert_eq!(tier.origin_store, 672 * MIB);
        for p in [local, tiny, tier] {
            assert_eq!(p.scheduler + p.small_files + p.origin_store + p.origin_fetches, p.total);
        }
    }

    #[test]
    fn a_budget_too_small_for_the_origin_says_how_much_is_needed() {
        let o = origin(1 << 20, 4);
        let e = MemoryPlan::new(8 * MIB, 256 * 1024, Some(&o)).unwrap_err();
        // The tier needs two windows of five 1 MiB blocks, 3/4 of the whole.
        let need = e.need;
        assert!(need >= 10 * MIB * 4 / 3, "{e}");
        assert!(MemoryPlan::new(need, 256 * 1024, Some(&o)).is_ok(), "{e}");
        assert!(MemoryPlan::new(need - 1024 * 1024, 256 * 1024, Some(&o)).is_err());
        // Scheduler blocks as large as origin blocks: its two-block floor,
        // not its quarter, decides what is left for the tier.
        let o = origin(1 << 20, 0);
        let need = MemoryPlan::new(3 * MIB, 1 << 20, Some(&o)).unwrap_err().need;
        assert!(MemoryPlan::new(need, 1 << 20, Some(&o)).is_ok(), "{need}");
        assert!(MemoryPlan::new(need - MIB, 1 << 20, Some(&o)).is_err(), "{need}");
    }
}
