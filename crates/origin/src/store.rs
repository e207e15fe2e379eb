//! The origin tier's memory: object descriptions and block bytes in one
//! `quick_cache` (S3-FIFO-like admission: a new entry enters a small
//! probation queue and is promoted only if it is used again, so a scan of
//! one-hit objects cannot flush the popular ones). Every entry weighs its
//! bytes, so one byte budget covers small objects and large-file blocks.
//! A description in use (a body streaming the object, or the scheduler
//! serving it natively holds it) is pinned: a scan of a large object's own
//! blocks must not push out its description, or the next request would
//! fetch it anew as a new version and lose its blocks and learnt tree.

use super::object::Object;
use bytes::Bytes;
use quick_cache::{DefaultHashBuilder, Equivalent, Lifecycle, OptionsBuilder, Weighter, sync::Cache};
use std::sync::Arc;

/// Charged per object description on top of its header bytes: the
/// struct, the key and the table slot.
const META_OVERHEAD: u64 = 256;

/// Representations of one target kept at once (Vary); a new one beyond
/// these replaces the oldest.
const MAX_VARIANTS: usize = 8;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Key {
    /// The request target (path and query) its variants answer.
    Meta(String),
    /// One block of one object version.
    Block(u64, u32),
}

/// A borrowed [`Key`] with the same hash, so that a lookup by path does
/// not allocate a `String` on the hit path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyRef<'a> {
    Meta(&'a str),
    Block(u64, u32),
}

impl Equivalent<Key> for KeyRef<'_> {
    fn equivalent(&self, key: &Key) -> bool {
        match (self, key) {
            (KeyRef::Meta(a), Key::Meta(b)) => *a == b,
            (KeyRef::Block(v, b), Key::Block(v2, b2)) => (v, b) == (v2, b2),
            _ => false,
        }
    }
}

#[derive(Debug, Clone)]
pub enum Val {
    /// The stored representations of a target, oldest first; each selected
    /// by its own values of the fields its Vary names.
    Meta(Arc<[Arc<Object>]>),
    Block(Bytes),
}

#[derive(Debug, Clone)]
struct ByBytes;

impl Weighter<Key, Val> for ByBytes {
    fn weight(&self, key: &Key, val: &Val) -> u64 {
        match (key, val) {
            (Key::Meta(k), Val::Meta(vs)) => {
                k.len() as u64 + vs.iter().map(|o| META_OVERHEAD + o.header_bytes()).sum::<u64>()
            }
            // Never zero: quick_cache never evicts zero-weight entries.
            (_, Val::Block(b)) => (b.len() as u64).max(1),
            (_, Val::Meta(_)) => META_OVERHEAD,
        }
    }
}

/// Pins descriptions held outside the store; evicted entries are dropped
/// after the shard lock is released (as quick_cache's default does).
#[derive(Debug, Clone, Default)]
struct PinInUse;

impl Lifecycle<Key, Val> for PinInUse {
    type RequestState = [Option<(Key, Val)>; 2];

    fn is_pinned(&self, _key: &Key, val: &Val) -> bool {
        matches!(val, Val::Meta(vs) if vs.iter().any(|o| Arc::strong_count(o) > 1))
    }

    fn on_evict(&self, state: &mut Self::RequestState, key: Key, val: Val) {
        if let Some(slot) = state.iter_mut().find(|s| s.is_none()) {
            *slot = Some((key, val));
        }
    }
}

pub struct Store {
    cache: Cache<Key, Val, ByBytes, DefaultHashBuilder, PinInUse>,
    budget: u64,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("budget", &self.budget).field("used", &self.cache.weight()).finish()
    }
}

impl Store {
    /// `budget` bytes; `typical_entry` sizes the table; entries up to
    /// `largest` bytes (a block) must fit.
    pub fn new(budget: u64, typical_entry: u64, largest: u64) -> Self {
        let items = (budget / typical_entry.max(1)).clamp(64, 1 << 24) as usize;
        // quick_cache splits the budget into shards and silently refuses an
        // entry heavier than a shard: keep room for 16 of the largest per
        // shard, so that a small budget means fewer shards, not no caching.
        let shards = (budget / (16 * largest.max(1))).clamp(1, 32).next_power_of_two() as usize;
        let shards = if shards as u64 * 16 * largest > budget { (shards / 2).max(1) } else { shards };
        let options = OptionsBuilder::new()
            .estimated_items_capacity(items)
            .weight_capacity(budget)
            // Half for probation (2Q's split): blocks fetched ahead of a
            // reader wait there until it comes. With quick_cache's default
            // 3% a shard's probation held less than one block, read-ahead
            // was evicted before use, and a plain pass through a budget
            // smaller than the object fetched it 1.26 times (test below;
            // a quarter still lost some).
            .hot_allocation(0.5)
            .shards(shards)
            .build()
            .expect("capacity and items are set");
        let cache = Cache::with_options(options, ByBytes, DefaultHashBuilder::default(), PinInUse);
        Store { cache, budget }
    }

    /// The stored representation of `target` that `select` picks.
    pub fn object(&self, target: &str, select: impl Fn(&Object) -> bool) -> Option<Arc<Object>> {
        match self.cache.get(&KeyRef::Meta(target)) {
            Some(Val::Meta(vs)) => vs.iter().rev().find(|o| select(o)).cloned(),
            _ => None,
        }
    }

    /// Stores `obj` as a representation of `target`, in place of the one
    /// the same request values selected (an older version of it).
    pub fn put_object(&self, target: &str, obj: Arc<Object>) {
        let mut vs: Vec<Arc<Object>> = match self.cache.get(&KeyRef::Meta(target)) {
            Some(Val::Meta(vs)) => vs.iter().filter(|o| !o.same_selection(&obj)).cloned().collect(),
            _ => Vec::new(),
        };
        if vs.len() >= MAX_VARIANTS {
            vs.remove(0);
        }
        vs.push(obj);
        self.cache.insert(Key::Meta(target.to_owned()), Val::Meta(vs.into()));
    }

    /// Forgets every representation of `target` (invalidation).
    pub fn forget_object(&self, target: &str) {
        self.cache.remove(&KeyRef::Meta(target));
    }

    /// Forgets every representation of the targets `purged` picks, and
    /// their blocks; returns the targets forgotten. Visits every entry:
    /// an operator's action, not a request's.
    pub fn purge(&self, purged: impl Fn(&str) -> bool) -> usize {
        let metas: Vec<(String, Arc<[Arc<Object>]>)> = self
            .cache
            .iter()
            .filter_map(|(k, v)| match (k, v) {
                (Key::Meta(t), Val::Meta(vs)) if purged(&t) => Some((t, vs)),
                _ => None,
            })
            .collect();
        for (target, versions) in &metas {
            self.forget_object(target);
            for o in versions.iter() {
                for b in 0..o.layout.blocks() {
                    self.cache.remove(&KeyRef::Block(o.version, b));
                }
            }
        }
        metas.len()
    }

    /// Forgets one version of `target` (changed at the origin), keeping
    /// its other representations.
    pub fn forget_version(&self, target: &str, version: u64) {
        let Some(Val::Meta(vs)) = self.cache.get(&KeyRef::Meta(target)) else { return };
        let kept: Vec<Arc<Object>> = vs.iter().filter(|o| o.version != version).cloned().collect();
        match kept.len() {
            0 => self.forget_object(target),
            n if n < vs.len() => self.cache.insert(Key::Meta(target.to_owned()), Val::Meta(kept.into())),
            _ => {}
        }
    }

    pub fn block(&self, version: u64, block: u32) -> Option<Bytes> {
        match self.cache.get(&KeyRef::Block(version, block)) {
            Some(Val::Block(b)) => Some(b),
            _ => None,
        }
    }

    /// Whether the block is resident, without counting a use.
    pub fn has_block(&self, version: u64, block: u32) -> bool {
        self.cache.contains_key(&KeyRef::Block(version, block))
    }

    pub fn put_block(&self, version: u64, block: u32, bytes: Bytes) {
        self.cache.insert(Key::Block(version, block), Val::Block(bytes));
    }

    /// Bytes held now (never above the budget).
    pub fn used(&self) -> u64 {
        self.cache.weight()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_stay_within_the_budget_and_borrowed_keys_find_entries() {
        let store = Store::new(1 << 20, 4096, 4096);
        for b in 0..1000 {
            store.put_block(1, b, Bytes::from(vec![0u8; 4096]));
        }
        assert!(store.used() <= 1 << 20, "{} bytes held", store.used());
        store.put_block(2, 0, Bytes::from_static(b"x"));
        assert_eq!(store.block(2, 0).unwrap(), "x");
        assert!(store.has_block(2, 0));
        assert!(store.object("/nothing", |_| true).is_none());
    }

    #[test]
    fn a_description_in_use_outlives_a_scan_of_blocks_and_an_idle_one_does_not() {
        let obj = |t: &str| {
            let h = http::HeaderMap::new();
            let now = std::time::SystemTime::now();
            Arc::new(Object::new(t, 1, 1 << 20, 4096, 4096, &h, &h, now, now))
        };
        let store = Store::new(64 << 10, 4096, 4096);
        let held = obj("/held");
        store.put_object("/held", held.clone());
        store.put_object("/idle", obj("/idle"));
        for b in 0..100 {
            store.put_block(1, b, Bytes::from(vec![0u8; 4096]));
            store.block(1, b);
        }
        assert!(store.object("/held", |_| true).is_some(), "a description in use was evicted");
        assert!(
            store.object("/idle", |_| true).is_none(),
            "an idle description survived a scan of 400 KiB through 64 KiB"
        );
        assert!(store.used() <= 64 << 10);
    }

    #[test]
    fn blocks_fetched_ahead_of_a_reader_are_still_there_when_it_comes() {
        // A reader at block b has b+1..=b+4 fetched ahead, through a store
        // a quarter of the object's size.
        let block = 1 << 20;
        let store = Store::new(64 << 20, 16 << 10, block);
        let data = Bytes::from(vec![0u8; block as usize]);
        let mut missed = 0;
        for b in 0..256u32 {
            for ahead in b..=b + 4 {
                if !store.has_block(1, ahead) {
                    store.put_block(1, ahead, data.clone());
                }
            }
            if store.block(1, b).is_none() {
                missed += 1;
            }
        }
        assert_eq!(missed, 0, "blocks fetched ahead were evicted before the reader came");
    }

    #[test]
    fn a_small_budget_still_holds_large_blocks() {
        // 4 MiB of 1 MiB blocks: with the default 4 shards per core a shard
        // would hold less than one block and nothing would be cached.
        let store = Store::new(4 << 20, 16 << 10, 1 << 20);
        store.put_block(1, 0, Bytes::from(vec![0u8; 1 << 20]));
        assert!(store.has_block(1, 0), "a block within the budget was refused");
    }
}
