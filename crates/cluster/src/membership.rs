//! The members of a cluster, which of them are live, and how they rank for
//! a group (rendezvous hashing).

/// A member's index in the member list every node is given, in the same
/// order everywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemberId(pub u32);

/// An object's name reduced to the 64 bits its groups are scored with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ObjectKey(pub u64);

impl ObjectKey {
    /// The key of an object named `name` (its path or URL).
    pub fn of(name: &str) -> Self {
        ObjectKey(first_u64(blake3::hash(name.as_bytes()).as_bytes()))
    }
}

/// The member list and which members are live.
#[derive(Debug, Clone)]
pub struct Membership {
    /// Each member's name hashed: its scores depend on its name, not on
    /// its place in the list, so a member added or removed moves no other
    /// member's groups.
    seeds: Vec<u64>,
    live: Vec<bool>,
}

impl Membership {
    /// Every member live. Names are what identifies a member across nodes
    /// (`host:port`, say).
    pub fn new<S: AsRef<str>>(names: &[S]) -> Self {
        let seeds = names.iter().map(|n| first_u64(blake3::hash(n.as_ref().as_bytes()).as_bytes())).collect();
        Membership { seeds, live: vec![true; names.len()] }
    }

    pub fn len(&self) -> usize {
        self.seeds.len()
    }

    pub fn is_empty(&self) -> bool {
        self.seeds.is_empty()
    }

    pub fn live_count(&self) -> usize {
        self.live.iter().filter(|&&l| l).count()
    }

    pub fn is_live(&self, m: MemberId) -> bool {
        self.live[m.0 as usize]
    }

    /// Marks a member live (it answers its health checks) or not.
    pub fn set_live(&mut self, m: MemberId, live: bool) {
        self.live[m.0 as usize] = live;
    }

    /// The live members, best first, for `group` of `object`.
    pub fn ranking(&self, object: ObjectKey, group: u64) -> Vec<MemberId> {
        let point = mix(object.0 ^ mix(group.wrapping_add(GOLDEN)));
        let mut scored: Vec<(u64, MemberId)> = self
            .seeds
            .iter()
            .enumerate()
            .filter(|&(i, _)| self.live[i])
            .map(|(i, &seed)| (mix(point ^ seed), MemberId(i as u32)))
            .collect();
        // Highest score first; ties (never seen with 64-bit scores) by index.
        scored.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        scored.into_iter().map(|(_, m)| m).collect()
    }
}

const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64's finalizer: a bijection whose output bits each depend on
/// every input bit, which is what rendezvous scores need to be independent
/// across members.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(GOLDEN);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn first_u64(bytes: &[u8; 32]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[..8]);
    u64::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("10.0.0.{i}:8080")).collect()
    }

    #[test]
    fn each_member_owns_about_its_share_of_groups() {
        let m = Membership::new(&names(10));
        let mut owned = [0u32; 10];
        for g in 0..10_000 {
            owned[m.ranking(ObjectKey::of("/big.iso"), g)[0].0 as usize] += 1;
        }
        // 1,000 expected each; a binomial's spread is about 30.
        assert!(owned.iter().all(|&n| (850..1150).contains(&n)), "{owned:?}");
    }

    #[test]
    fn a_member_leaving_moves_only_its_groups_to_the_next_ranked() {
        let mut m = Membership::new(&names(8));
        let obj = ObjectKey::of("/layer.tar");
        let before: Vec<Vec<MemberId>> = (0..2000).map(|g| m.ranking(obj, g)).collect();
        m.set_live(MemberId(3), false);
        for (g, rank) in before.iter().enumerate() {
            let now = m.ranking(obj, g as u64);
            let expected: Vec<MemberId> = rank.iter().copied().filter(|&x| x != MemberId(3)).collect();
            assert_eq!(now, expected, "group {g}");
        }
    }

    #[test]
    fn scores_depend_on_names_not_on_list_order() {
        let a = Membership::new(&["a", "b", "c"]);
        let b = Membership::new(&["c", "a", "b"]);
        let name = |list: &[&str], m: MemberId| list[m.0 as usize].to_owned();
        for g in 0..100 {
            let ra: Vec<String> = a.ranking(ObjectKey(7), g).into_iter().map(|m| name(&["a", "b", "c"], m)).collect();
            let rb: Vec<String> = b.ranking(ObjectKey(7), g).into_iter().map(|m| name(&["c", "a", "b"], m)).collect();
            assert_eq!(ra, rb);
        }
    }
}
