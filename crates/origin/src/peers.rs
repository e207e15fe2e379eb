//! A cluster of tiers (`circus serve --origin ... --peers A,B,C`): every
//! node serves every URL, and each group of an object's blocks (a few MiB)
//! has one owner among the live members, placed by `circus-cluster`
//! (rendezvous hashing under a load bound), so that only the owner asks
//! the origin for it. A node missing a block of a group it does not own
//! asks the owner for it with a ranged GET, checked as an origin's answer
//! is (Content-Range, ETag, Last-Modified, Repr-Digest, then the version's
//! leaves and digest as the block completes).
//!
//! A request from a peer carries [`PEER_HEADER`]; the node answering it
//! fetches the blocks it lacks from the origin itself, never from a third
//! node (a block it has already asked another member for is fetched again
//! on its own), so a block makes at most one hop and no two nodes wait on
//! each other, even while they disagree about who is live. A first answer
//! (size and validators) may take more hops, each to a member ranked
//! higher (see `OriginTier::first_answer`). Fetches asked of peers have
//! their own share of the room for fetches in flight, so the origin
//! fetches that answer peers never wait for room those fetches hold.
//!
//! Members are probed every `probe_interval` at [`PROBE_PATH`] (204 from a
//! live tier); a member that cannot be connected to, answers a probe with
//! anything else, leaves three probes in a row unanswered, or breaks off a
//! body is out of the placement, so its groups go to the next members of
//! their rankings, and back when it answers a probe again. A member that answers 5xx is up: what failed is behind it, and
//! the asker goes to the origin for that fetch.

use crate::{OriginTier, SetupError, client::OriginClient, source::OriginResponse};
use circus_cluster::{MemberId, Membership, ObjectKey, ObjectPlacement, PlacementConfig};
use circus_store::ReadError;
use http::{HeaderMap, HeaderValue, StatusCode, Uri};
use rustc_hash::FxHashMap;
use std::{
    sync::{Arc, Mutex, RwLock, Weak},
    time::Duration,
};

/// Marks a request one node of a cluster sends another.
pub const PEER_HEADER: &str = "circus-peer";

/// Where members probe each other (answered 204, with [`PEER_HEADER`], by
/// a tier in a cluster).
pub const PROBE_PATH: &str = "/.well-known/circus/peer";

/// Groups of the placements kept (one per stored version, for the live set
/// it was computed for): about 40 bytes each.
const PLACEMENT_GROUPS_KEPT: u64 = 1 << 20;

/// Most groups one object is cut into; a larger object has larger groups
/// (a whole multiple of the configured size), so that its placement stays
/// small and quick to compute.
const MAX_GROUPS: u64 = 16_384;

/// Shortest time between two probes, and the shortest a probe may take.
const MIN_PROBE: Duration = Duration::from_millis(50);

/// Probes in a row a member may leave unanswered and stay in the
/// placement. A node whose link its clients fill answers late now and
/// then (measured: probes of busy members timed out mid-crowd, and each
/// time the placement moved groups away and back); one that refuses the
/// connection, or answers as no live tier does, is out at once.
const SLOW_PROBES_TO_FALL: u32 = 3;

/// What a probe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probe {
    /// 204 from a live tier.
    Up,
    /// No answer within the interval.
    Slow,
    /// The connection failed, or the answer was not a live tier's.
    Refused,
}

impl Probe {
    /// Whether the member stays (or comes back) in the placement, given
    /// `slow`, the probes in a row it left unanswered before this one.
    fn keeps_live(self, slow: &mut u32) -> bool {
        *slow = if self == Probe::Slow { *slow + 1 } else { 0 };
        match self {
            Probe::Up => true,
            Probe::Slow => *slow < SLOW_PROBES_TO_FALL,
            Probe::Refused => false,
        }
    }
}

/// A node's view of its cluster.
#[derive(Debug, Clone)]
pub struct PeerConfig {
    /// Every member's base URL (`http://host:port`), the same list on
    /// every node; members are named by these strings.
    pub members: Vec<Uri>,
    /// This node's place in `members`.
    pub me: usize,
    /// Bytes per group: a multiple of the tier's block size.
    pub group_bytes: u64,
    /// Time between two probes of a member; a probe waits as long.
    pub probe_interval: Duration,
}

/// Where a fetch goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Upstream {
    /// The owner of the block's group (the origin when this node owns it
    /// or runs alone).
    Owner,
    /// The origin: a peer asked, and a request makes one hop at most.
    Origin,
}

impl Upstream {
    /// How the request with these headers is fetched for.
    pub(crate) fn for_request(h: &HeaderMap) -> Self {
        if h.contains_key(PEER_HEADER) { Upstream::Origin } else { Upstream::Owner }
    }
}

#[derive(Debug)]
struct Live {
    members: Membership,
    /// Bumped whenever a member goes down or comes back.
    epoch: u64,
}

#[derive(Debug)]
pub(crate) struct Peers {
    me: MemberId,
    urls: Vec<String>,
    clients: Vec<OriginClient>,
    live: RwLock<Live>,
    placement: PlacementConfig,
    /// Per version: the epoch its placement was computed at, and it.
    placements: Mutex<FxHashMap<u64, (u64, Arc<ObjectPlacement>)>>,
    probe_interval: Duration,
}

impl Peers {
    /// Clients for every member; `timeout` bounds their connects and heads.
    pub(crate) fn new(cfg: &PeerConfig, timeout: Duration, block_size: u32) -> Result<Self, SetupError> {
        if cfg.me >= cfg.members.len() {
            return Err(SetupError::NotAMember(format!("#{}", cfg.me + 1)));
        }
        if cfg.group_bytes == 0 || !cfg.group_bytes.is_multiple_of(u64::from(block_size)) {
            return Err(SetupError::PeerGroup { group: cfg.group_bytes, block: block_size });
        }
        let urls: Vec<String> = cfg.members.iter().map(|u| u.to_string().trim_end_matches('/').to_owned()).collect();
        let clients = cfg.members.iter().map(|u| OriginClient::new(u, timeout, None)).collect::<Result<_, _>>()?;
        let placement = PlacementConfig { group_bytes: cfg.group_bytes, ..PlacementConfig::default() };
        Ok(Peers {
            me: MemberId(cfg.me as u32),
            live: RwLock::new(Live { members: Membership::new(&urls), epoch: 0 }),
            urls,
            clients,
            placement,
            placements: Mutex::default(),
            probe_interval: cfg.probe_interval,
        })
    }

    /// Bytes per group of an object of `size` bytes: the configured size,
    /// or a whole multiple of it that cuts the object into at most
    /// [`MAX_GROUPS`] groups.
    pub(crate) fn group_bytes(&self, size: u64) -> u64 {
        let per = self.placement.group_bytes;
        per * size.div_ceil(per).div_ceil(MAX_GROUPS).max(1)
    }

    /// Origin blocks of `block_size` per group of an object of `size` bytes.
    pub(crate) fn group_blocks(&self, size: u64, block_size: u32) -> u32 {
        u32::try_from(self.group_bytes(size) / u64::from(block_size)).unwrap_or(u32::MAX)
    }

    /// Members in the list, live or not.
    pub(crate) fn len(&self) -> usize {
        self.urls.len()
    }

    pub(crate) fn url(&self, m: MemberId) -> &str {
        &self.urls[m.0 as usize]
    }

    pub(crate) fn client(&self, m: MemberId) -> &OriginClient {
        &self.clients[m.0 as usize]
    }

    /// The member to ask for `target`'s first answer: the owner of its
    /// first group (always the first of that group's ranking, as groups
    /// are placed in order), `None` when that is this node.
    pub(crate) fn first_owner(&self, target: &str) -> Option<MemberId> {
        let live = self.live.read().expect("peers lock");
        let owner = *live.members.ranking(ObjectKey::of(target), 0).first()?;
        (owner != self.me).then_some(owner)
    }

    /// The member to ask for the group holding byte `offset` of version
    /// `version` of `target` (`size` bytes), `None` when this node owns it.
    pub(crate) fn owner(&self, target: &str, version: u64, size: u64, offset: u64) -> Option<MemberId> {
        let table = {
            let live = self.live.read().expect("peers lock");
            let mut placements = self.placements.lock().expect("placements lock");
            match placements.get(&version) {
                Some((epoch, table)) if *epoch == live.epoch => table.clone(),
                _ => {
                    let groups = size.div_ceil(self.group_bytes(size));
                    let table =
                        Arc::new(ObjectPlacement::new(&live.members, ObjectKey::of(target), groups, &self.placement)?);
                    let kept: u64 = placements.values().map(|(_, t)| t.groups()).sum();
                    if kept + groups > PLACEMENT_GROUPS_KEPT {
                        placements.clear();
                    }
                    placements.insert(version, (live.epoch, table.clone()));
                    table
                }
            }
        };
        let owner = table.owner((offset / self.group_bytes(size)).min(table.groups().saturating_sub(1)));
        (owner != self.me).then_some(owner)
    }

    /// Marks `m` live or not; says whether that changed anything.
    pub(crate) fn set_live(&self, m: MemberId, up: bool) -> bool {
        if m == self.me {
            return false;
        }
        let mut live = self.live.write().expect("peers lock");
        if live.members.is_live(m) == up {
            return false;
        }
        live.members.set_live(m, up);
        live.epoch += 1;
        true
    }

    /// Members live in this node's view, itself included.
    pub(crate) fn live_count(&self) -> usize {
        self.live.read().expect("peers lock").members.live_count()
    }

    /// Probes every other member now and then, for as long as the tier
    /// holding `peers` lives.
    pub(crate) fn spawn_probes(peers: &Arc<Peers>) {
        let weak: Weak<Peers> = Arc::downgrade(peers);
        tokio::spawn(async move {
            // Probes in a row each member left unanswered.
            let mut slow = vec![0u32; weak.upgrade().map_or(0, |p| p.urls.len())];
            let mut tick = tokio::time::interval(peers_interval(&weak));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(peers) = weak.upgrade() else { return };
                let probes = (0..peers.urls.len() as u32).map(MemberId).filter(|&m| m != peers.me).map(|m| {
                    let peers = &peers;
                    async move { (m, peers.probe(m).await) }
                });
                for (m, probe) in futures_util::future::join_all(probes).await {
                    let up = probe.keeps_live(&mut slow[m.0 as usize]);
                    if peers.set_live(m, up) {
                        if up {
                            tracing::info!(peer = peers.url(m), "peer answers again: back in the placement");
                        } else {
                            tracing::warn!(peer = peers.url(m), "peer does not answer its probe: out of the placement");
                        }
                    }
                }
            }
        });
    }

    /// How `m` answers its probe within the interval.
    async fn probe(&self, m: MemberId) -> Probe {
        let mut h = HeaderMap::new();
        h.insert(PEER_HEADER, HeaderValue::from_static("probe"));
        let ask = self.client(m).head(PROBE_PATH, &h);
        let wait = self.probe_interval.max(MIN_PROBE);
        match tokio::time::timeout(wait, ask).await {
            Ok(Ok(res)) if res.status() == StatusCode::NO_CONTENT => Probe::Up,
            Ok(_) => Probe::Refused,
            Err(_) => Probe::Slow,
        }
    }
}

impl OriginTier {
    /// Asks the member `owner` names for `target` with `headers` (marked as
    /// a peer's), again after each member that cannot be reached (it is
    /// then out of the placement, and `owner` names the next). `None` when
    /// this node is the owner, when there is no cluster, or when a member
    /// answered 5xx: the member is up, what failed is behind it (its
    /// origin), and the caller asks the origin itself.
    pub(crate) async fn ask_owner(
        &self,
        target: &str,
        mut headers: HeaderMap,
        owner: impl Fn(&Peers) -> Option<MemberId>,
    ) -> Result<Option<(OriginResponse, MemberId)>, ReadError> {
        let Some(peers) = &self.peers else { return Ok(None) };
        headers.insert(PEER_HEADER, HeaderValue::from_static("1"));
        // Each failure takes a member out: at most one try per member.
        for _ in 0..peers.len() {
            let Some(m) = owner(peers) else { return Ok(None) };
            self.metrics.peer_requests.inc();
            match peers.client(m).get(target, &headers).await {
                Ok(res) if res.status().is_server_error() => {
                    self.metrics.peer_errors.inc();
                    tracing::info!(peer = peers.url(m), status = res.status().as_u16(), %target, "peer failed to fetch: asking the origin");
                    return Ok(None);
                }
                Ok(res) => return Ok(Some((OriginResponse::from_http(res)?, m))),
                Err(e) => {
                    self.metrics.peer_errors.inc();
                    if peers.set_live(m, false) {
                        tracing::warn!(peer = peers.url(m), error = %e, "peer cannot be reached: out of the placement");
                    }
                }
            }
        }
        Ok(None)
    }
}

fn peers_interval(weak: &Weak<Peers>) -> Duration {
    weak.upgrade().map_or(Duration::from_secs(1), |p| p.probe_interval.max(MIN_PROBE))
}

/// A live tier's answer to a member's probe.
pub(crate) fn probe_answer() -> http::Response<circus_http::ResBody> {
    let mut res = http::Response::new(circus_http::empty());
    *res.status_mut() = StatusCode::NO_CONTENT;
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peers(me: usize) -> Peers {
        let members = (1..=5).map(|i| format!("http://10.0.0.{i}:8080").parse().unwrap()).collect();
        let cfg = PeerConfig { members, me, group_bytes: 1 << 20, probe_interval: Duration::from_secs(1) };
        Peers::new(&cfg, Duration::from_secs(1), 256 << 10).unwrap()
    }

    #[test]
    fn a_busy_member_stays_in_until_three_probes_in_a_row_go_unanswered() {
        let mut slow = 0;
        let seen: Vec<bool> = [Probe::Slow, Probe::Slow, Probe::Up, Probe::Slow, Probe::Slow, Probe::Slow, Probe::Up]
            .into_iter()
            .map(|p| p.keeps_live(&mut slow))
            .collect();
        assert_eq!(seen, [true, true, true, true, true, false, true]);
        assert!(!Probe::Refused.keeps_live(&mut 0), "a refused connection is out at once");
    }

    #[test]
    fn a_member_out_of_the_placement_owns_nothing_until_it_is_back() {
        let p = peers(0);
        let (target, size) = ("/big.iso", 64u64 << 20);
        let owners =
            |p: &Peers| -> Vec<Option<MemberId>> { (0..64).map(|g| p.owner(target, 7, size, g << 20)).collect() };
        let before = owners(&p);
        assert!(before.contains(&Some(MemberId(3))) && before.contains(&None), "{before:?}");
        assert!(p.set_live(MemberId(3), false));
        assert!(!p.set_live(MemberId(3), false), "already out: no change");
        let during = owners(&p);
        assert!(!during.contains(&Some(MemberId(3))));
        assert_eq!(p.live_count(), 4);
        assert!(p.set_live(MemberId(3), true));
        assert_eq!(owners(&p), before, "back in: the same table");
        assert!(!p.set_live(MemberId(0), false), "a node never takes itself out");
    }

    #[test]
    fn the_first_answer_comes_from_the_first_of_the_first_groups_ranking() {
        let target = "/layer.tar";
        let members: Vec<String> = (1..=5).map(|i| format!("http://10.0.0.{i}:8080")).collect();
        let top = Membership::new(&members).ranking(ObjectKey::of(target), 0)[0];
        for me in 0..5 {
            let p = peers(me);
            let expected = (top.0 as usize != me).then_some(top);
            assert_eq!(p.first_owner(target), expected, "node {me}");
            // And the owner of byte 0 under the load bound is the same one.
            assert_eq!(p.owner(target, 1, 64 << 20, 0), expected, "node {me}");
        }
    }

    #[test]
    fn groups_are_whole_blocks_and_the_node_is_a_member() {
        let members: Vec<Uri> = vec!["http://a:1".parse().unwrap()];
        let cfg = PeerConfig { members, me: 0, group_bytes: 1_000_000, probe_interval: Duration::from_secs(1) };
        assert!(matches!(Peers::new(&cfg, Duration::from_secs(1), 1 << 20), Err(SetupError::PeerGroup { .. })));
        let cfg = PeerConfig { me: 1, group_bytes: 1 << 20, ..cfg };
        assert!(matches!(Peers::new(&cfg, Duration::from_secs(1), 1 << 20), Err(SetupError::NotAMember(_))));
    }
}
