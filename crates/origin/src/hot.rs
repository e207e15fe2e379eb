//! Which groups are hot: asked of their owner so often that its replicas
//! (the next members of the group's ranking) serve them too. An owner
//! counts the asks it answers for each group it owns and, from the
//! threshold on, says in its answers ([`HOT_HEADER`]) that the group is
//! hot; a member that reads this spreads its next asks for the group over
//! the owner and the replicas (`ObjectPlacement::source_for`), and a
//! replica asks the owner once for what it then serves to many.
//!
//! Both tables are bounded and start again empty when full: a group
//! forgotten is asked of its owner again, which says again that it is hot.

use rustc_hash::{FxHashMap, FxHashSet};
use std::sync::Mutex;

/// Set by an owner on its answer to an ask of a hot group.
pub const HOT_HEADER: &str = "circus-hot";

/// Groups each table holds (a few MB at most).
const MOST_GROUPS: usize = 1 << 16;

/// A group: the version it belongs to and its index.
type Group = (u64, u64);

#[derive(Debug)]
pub(crate) struct HotGroups {
    /// Asks an owner answers before a group is hot; 0: never.
    after: u32,
    /// Asks answered per group this node owns.
    asks: Mutex<FxHashMap<Group, u32>>,
    /// Groups an owner said are hot.
    known: Mutex<FxHashSet<Group>>,
}

impl HotGroups {
    pub(crate) fn new(after: u32) -> Self {
        HotGroups { after, asks: Mutex::default(), known: Mutex::default() }
    }

    /// Counts an ask this node answered as the owner of group `group` of
    /// `version`; whether the group is hot now.
    pub(crate) fn asked(&self, version: u64, group: u64) -> bool {
        if self.after == 0 {
            return false;
        }
        let mut asks = self.asks.lock().expect("hot lock");
        if asks.len() >= MOST_GROUPS && !asks.contains_key(&(version, group)) {
            asks.clear();
        }
        let n = asks.entry((version, group)).or_default();
        *n = n.saturating_add(1);
        *n >= self.after
    }

    /// Keeps an owner's word that group `group` of `version` is hot.
    pub(crate) fn learn(&self, version: u64, group: u64) {
        let mut known = self.known.lock().expect("hot lock");
        if known.len() >= MOST_GROUPS {
            known.clear();
        }
        known.insert((version, group));
    }

    pub(crate) fn is_hot(&self, version: u64, group: u64) -> bool {
        self.known.lock().expect("hot lock").contains(&(version, group))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_is_hot_from_the_threshold_on_and_never_with_zero() {
        let hot = HotGroups::new(3);
        assert_eq!([1, 1, 1, 1].map(|_| hot.asked(7, 2)), [false, false, true, true]);
        assert!(!hot.asked(7, 3), "counted per group");
        assert!(!hot.asked(8, 2), "and per version");
        let never = HotGroups::new(0);
        assert!((0..100).all(|_| !never.asked(7, 2)));
    }

    #[test]
    fn what_an_owner_said_is_kept_within_the_bound() {
        let hot = HotGroups::new(8);
        assert!(!hot.is_hot(1, 0));
        hot.learn(1, 0);
        assert!(hot.is_hot(1, 0) && !hot.is_hot(1, 1) && !hot.is_hot(2, 0));
        for g in 1..=MOST_GROUPS as u64 {
            hot.learn(2, g);
        }
        assert!(hot.known.lock().unwrap().len() <= MOST_GROUPS, "bounded");
        assert!(hot.is_hot(2, MOST_GROUPS as u64), "the newest is kept");
    }
}
