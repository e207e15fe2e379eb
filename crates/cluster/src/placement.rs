//! The owners of one object's groups under a load bound, and where a node
//! fetches a group it lacks.

use crate::{MemberId, Membership, ObjectKey};

/// How a cluster places groups.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct PlacementConfig {
    /// Bytes per group: large enough that a fetch between nodes amortises
    /// its round trip, small enough that a large object spreads over every
    /// node (4 MiB: 256 groups per GiB).
    pub group_bytes: u64,
    /// Most groups of one object a member owns, as a multiple of the mean
    /// over the live members (at least 1.0).
    pub load_factor: f64,
    /// Members besides the owner that serve a hot group.
    pub hot_replicas: u32,
}

impl Default for PlacementConfig {
    fn default() -> Self {
        PlacementConfig { group_bytes: 4 << 20, load_factor: 1.25, hot_replicas: 2 }
    }
}

impl PlacementConfig {
    /// Groups of an object of `len` bytes.
    pub fn groups(&self, len: u64) -> u64 {
        len.div_ceil(self.group_bytes)
    }
}

/// Where each group of one object lives, for one live set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectPlacement {
    /// Per group: its owner, then the members that serve it when it is hot
    /// (the next of its ranking).
    serving: Vec<Vec<MemberId>>,
    /// Groups each member owns (indexed by member).
    owned: Vec<u64>,
}

impl ObjectPlacement {
    /// Places the `groups` groups of `object`: in group order, each with the
    /// first member of its ranking that owns fewer than the bound
    /// (`load_factor` times the mean, rounded up). `None` when no member is
    /// live.
    pub fn new(members: &Membership, object: ObjectKey, groups: u64, cfg: &PlacementConfig) -> Option<Self> {
        let live = members.live_count() as u64;
        if live == 0 {
            return None;
        }
        // Over every member, not only the live: a failure then leaves the
        // bound as it was, and the groups that had to go past a full member
        // stay where they went (a bound that grew would call them back, and
        // their moves would displace others). Only when the live members
        // cannot hold every group under it does it grow.
        let all = members.len() as u64;
        let bound =
            ((cfg.load_factor.max(1.0) * groups as f64 / all as f64).ceil() as u64).max(groups.div_ceil(live)).max(1);
        let mut owned = vec![0u64; members.len()];
        let serving = (0..groups)
            .map(|g| {
                let ranking = members.ranking(object, g);
                let owner = *ranking
                    .iter()
                    .find(|m| owned[m.0 as usize] < bound)
                    .expect("the bound times the live members covers every group");
                owned[owner.0 as usize] += 1;
                let replicas = ranking.into_iter().filter(|&m| m != owner).take(cfg.hot_replicas as usize);
                std::iter::once(owner).chain(replicas).collect()
            })
            .collect();
        Some(ObjectPlacement { serving, owned })
    }

    pub fn groups(&self) -> u64 {
        self.serving.len() as u64
    }

    /// The member that fetches `group` from the origin.
    pub fn owner(&self, group: u64) -> MemberId {
        self.serving[group as usize][0]
    }

    /// Groups `m` owns.
    pub fn owned_by(&self, m: MemberId) -> u64 {
        self.owned.get(m.0 as usize).copied().unwrap_or(0)
    }

    /// The member `requester` fetches `group` from when it lacks it: the
    /// owner, or when the group is hot one of the owner and its replicas,
    /// chosen by the requester so that requesters spread over them. A
    /// replica fetches from the owner. `requester` itself means it owns the
    /// group: it fetches from the origin.
    pub fn source_for(&self, group: u64, requester: MemberId, hot: bool) -> MemberId {
        let serving = &self.serving[group as usize];
        if !hot || serving.contains(&requester) {
            return serving[0];
        }
        let pick = spread(u64::from(requester.0), group) % serving.len() as u64;
        serving[pick as usize]
    }
}

/// A requester's choice among a hot group's servers: the same every time
/// for one requester and group, different across requesters.
fn spread(requester: u64, group: u64) -> u64 {
    let mut z = requester.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ group.rotate_left(32);
    z = (z ^ (z >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    z ^ (z >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn members(n: usize) -> Membership {
        let names: Vec<String> = (0..n).map(|i| format!("node-{i}")).collect();
        Membership::new(&names)
    }

    #[test]
    fn no_member_owns_more_than_the_bound() {
        // 10 GiB in 4 MiB groups over 100 members: 25.6 groups each on
        // average; plain rendezvous gives the fullest about 40.
        let cfg = PlacementConfig::default();
        let m = members(100);
        let p = ObjectPlacement::new(&m, ObjectKey::of("/model.safetensors"), 2560, &cfg).unwrap();
        let most = (0..100).map(|i| p.owned_by(MemberId(i))).max().unwrap();
        assert!(most <= 32, "the fullest member owns {most} groups, bound 32");
        assert_eq!((0..100).map(|i| p.owned_by(MemberId(i))).sum::<u64>(), 2560);
        let plain = (0..2560).fold(vec![0u32; 100], |mut n, g| {
            n[m.ranking(ObjectKey::of("/model.safetensors"), g)[0].0 as usize] += 1;
            n
        });
        assert!(*plain.iter().max().unwrap() > 32, "unbounded rendezvous would exceed the bound: {plain:?}");
    }

    #[test]
    fn a_hot_group_is_served_by_its_owner_and_replicas_spread_over_requesters() {
        let cfg = PlacementConfig::default();
        let p = ObjectPlacement::new(&members(20), ObjectKey(1), 64, &cfg).unwrap();
        for g in 0..64 {
            let owner = p.owner(g);
            let servers: std::collections::BTreeSet<MemberId> =
                (0..20).map(|r| p.source_for(g, MemberId(r), true)).collect();
            assert_eq!(servers.len(), 3, "group {g}: owner and two replicas serve it");
            assert!(servers.contains(&owner));
            assert_eq!(p.source_for(g, owner, true), owner, "the owner fetches from the origin");
            let cold: std::collections::BTreeSet<MemberId> =
                (0..20).map(|r| p.source_for(g, MemberId(r), false)).collect();
            assert_eq!(cold.into_iter().collect::<Vec<_>>(), vec![owner]);
        }
    }

    #[test]
    fn no_live_member_no_placement() {
        let mut m = members(2);
        m.set_live(MemberId(0), false);
        m.set_live(MemberId(1), false);
        assert!(ObjectPlacement::new(&m, ObjectKey(1), 4, &PlacementConfig::default()).is_none());
    }

    proptest! {
        /// When a member fails, its groups move, and at most twice as many
        /// others do (those displaced as its groups fill the next-ranked
        /// members up to the bound). An observed bound, not a proven one:
        /// measured while the rule was chosen, over 20 failures each, 100
        /// members and 2,560 groups moved 0.12 others per group of the
        /// failed member on average (0.25 at worst), 50 members and 200
        /// groups 0.64 (2.0). From five members up, so that the bound over
        /// all members still covers the live ones after one failure.
        #[test]
        fn a_failure_moves_the_failed_members_groups_and_at_most_twice_as_many_others(
            n in 5usize..60, per_member in 4u64..60, dead in 0usize..60, object in any::<u64>(),
        ) {
            let (dead, groups) = (MemberId((dead % n) as u32), per_member * n as u64);
            let cfg = PlacementConfig::default();
            let mut m = members(n);
            let before = ObjectPlacement::new(&m, ObjectKey(object), groups, &cfg).unwrap();
            m.set_live(dead, false);
            let after = ObjectPlacement::new(&m, ObjectKey(object), groups, &cfg).unwrap();
            let mut others_moved = 0;
            for g in 0..groups {
                prop_assert_ne!(after.owner(g), dead);
                if before.owner(g) != dead && before.owner(g) != after.owner(g) {
                    others_moved += 1;
                }
            }
            let own = before.owned_by(dead);
            prop_assert!(others_moved <= 2 * own, "{others_moved} groups of live members moved, {own} of the failed one's");
        }
    }
}
