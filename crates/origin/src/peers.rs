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
//! on its own), so no two nodes wait on each other, even while they
//! disagree about who is live. The one exception is a hot group (see
//! `hot`): an asker may go to one of its replicas, which asks the owner
//! only, so a block makes two hops at most and each node waits only on
//! one nearer the origin (`Upstream::may_wait_on`). A first answer
//! (size and validators) may take more hops, each to a member ranked
//! higher (see `OriginTier::first_answer`). Fetches asked of peers have
//! their own share of the room for fetches in flight, so the origin
//! fetches that answer peers never wait for room those fetches hold.
//!
//! Members are probed every `probe_interval` at [`PROBE_PATH`] (204 from a
//! live tier); a member that cannot be connected to, answers a probe with
//! anything else, leaves three probes in a row unanswered, or breaks off a
//! body is out of the placement, so its groups go to the next members of
//! their rankings, and back when it answers a probe again. A member that
//! answers 5xx is up: what failed is behind it, and the asker goes to the
//! origin for that fetch.
//!
//! The member list is fixed, or looked up again now and then from a
//! [`MemberSource`] (every address of a DNS name, [`DnsMembers`]): a new
//! list replaces the view whole, members that stay keep their clients and
//! liveness, and as members are named by URL, one that comes or goes moves
//! only the groups it takes or held.

use crate::{
    OriginTier, SetupError,
    client::OriginClient,
    fetch::Via,
    hot::HotGroups,
    peer_auth::{PEER_AUTH_HEADER, PeerKey},
    source::OriginResponse,
};
use circus_cluster::{MemberId, Membership, ObjectKey, ObjectPlacement, PlacementConfig};
use circus_store::ReadError;
use futures_util::future::BoxFuture;
use http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use rustc_hash::FxHashMap;
use std::{
    collections::HashMap,
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
    /// Whether the member is in the placement after this probe, given
    /// whether it was (`live`) and `slow`, the probes in a row it left
    /// unanswered before this one: only an answer brings a member back.
    fn keeps_live(self, live: bool, slow: &mut u32) -> bool {
        *slow = if self == Probe::Slow { *slow + 1 } else { 0 };
        match self {
            Probe::Up => true,
            Probe::Slow => live && *slow < SLOW_PROBES_TO_FALL,
            Probe::Refused => false,
        }
    }
}

/// A node's view of its cluster.
#[derive(Debug, Clone)]
pub struct PeerConfig {
    /// Every member's base URL (`http://host:port`), the same list on
    /// every node; members are named by these strings. With `refresh`,
    /// the list at start, looked up again from then on.
    pub members: Vec<Uri>,
    /// This node's base URL: one of `members` for a fixed list; with
    /// `refresh`, the address the others will find it at (until it is in
    /// the list, the node owns nothing and asks the members).
    pub me: Uri,
    /// Where the member list is looked up again, and how often (a DNS
    /// name's addresses); `None`: the list is fixed.
    pub refresh: Option<(Arc<dyn MemberSource>, Duration)>,
    /// Bytes per group: a multiple of the tier's block size.
    pub group_bytes: u64,
    /// Time between two probes of a member; a probe waits as long.
    pub probe_interval: Duration,
    /// Asks of one group an owner answers before it tells the askers the
    /// group is hot, so that they spread their next asks over the owner
    /// and its replicas; 0: never.
    pub hot_after: u32,
    /// The key members prove themselves with (see `peer_auth`); `None`:
    /// any request marked as a member's is taken as one.
    pub key: Option<PeerKey>,
}

impl PeerConfig {
    /// The members, this node, and where the list is looked up again;
    /// groups of 4 MiB, a probe a second, hot after 8 asks.
    pub fn new(members: Vec<Uri>, me: Uri, refresh: Option<(Arc<dyn MemberSource>, Duration)>) -> Self {
        PeerConfig {
            members,
            me,
            refresh,
            group_bytes: 4 << 20,
            probe_interval: Duration::from_secs(1),
            hot_after: 8,
            key: None,
        }
    }
}

/// Where a cluster's member list comes from when it changes: the members'
/// base URLs now.
pub trait MemberSource: Send + Sync + std::fmt::Debug {
    fn members(&self) -> BoxFuture<'_, std::io::Result<Vec<Uri>>>;
}

/// Every address a DNS name has, on one port: a member `http://ADDR:PORT`
/// each (a headless service, a round-robin name), sorted.
#[derive(Debug, Clone)]
pub struct DnsMembers {
    pub name: String,
    pub port: u16,
}

impl DnsMembers {
    /// The members now, resolved on this thread (for a node's start).
    pub fn resolve_blocking(&self) -> std::io::Result<Vec<Uri>> {
        use std::net::ToSocketAddrs;
        dns_members((self.name.as_str(), self.port).to_socket_addrs()?)
    }
}

impl MemberSource for DnsMembers {
    fn members(&self) -> BoxFuture<'_, std::io::Result<Vec<Uri>>> {
        Box::pin(async move { dns_members(tokio::net::lookup_host((self.name.as_str(), self.port)).await?) })
    }
}

fn dns_members(addrs: impl Iterator<Item = std::net::SocketAddr>) -> std::io::Result<Vec<Uri>> {
    let mut addrs: Vec<std::net::SocketAddr> = addrs.collect();
    addrs.sort();
    addrs.dedup();
    addrs
        .into_iter()
        .map(|a| {
            format!("http://{a}").parse::<Uri>().map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
        })
        .collect()
}

/// Where the blocks a body lacks are fetched from: who asked decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Upstream {
    /// A client asked: a group's owner (the origin when this node owns it
    /// or runs alone), or for a hot group any member serving it.
    Owner,
    /// A member asked this node as a hot group's replica: the group's
    /// owner only.
    OwnerOnly,
    /// A member asked this node as the owner: the origin. An ask makes one
    /// hop, or two through a replica, and the last is always to a node
    /// that asks the origin.
    Origin,
}

/// Whether a request comes from a member of the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberClaim {
    /// Not marked as a member's.
    Client,
    /// Marked, in a cluster without a key: taken at its word.
    Trusted,
    /// Marked, with the proof of the cluster's key.
    Proven,
    /// Marked, without the proof the cluster's key asks for (or without a
    /// cluster): served as a client's.
    Impostor,
}

/// [`PEER_HEADER`]'s value on an ask of a group's owner.
const ASK_OWNER: &str = "1";

/// [`PEER_HEADER`]'s value on an ask of a hot group's replica.
const ASK_REPLICA: &str = "replica";

impl Upstream {
    /// How the request with these headers is fetched for.
    pub(crate) fn for_request(h: &HeaderMap) -> Self {
        match h.get(PEER_HEADER) {
            None => Upstream::Owner,
            Some(v) if v == ASK_REPLICA => Upstream::OwnerOnly,
            Some(_) => Upstream::Origin,
        }
    }

    /// Whether a member asked (this node sends its body first, and reads
    /// ahead only within what it asked for).
    pub(crate) fn for_member(self) -> bool {
        self != Upstream::Owner
    }

    /// Whether a body fetched for this may wait on a fetch in flight via
    /// `via`: a member's ask waits only on fetches nearer the origin than
    /// the one it is answering, so no two nodes ever wait on each other.
    pub(crate) fn may_wait_on(self, via: Via) -> bool {
        match self {
            Upstream::Owner => true,
            Upstream::OwnerOnly => via != Via::Replica,
            Upstream::Origin => via == Via::Origin,
        }
    }

    /// Whom a fetch this body starts on its own asks.
    pub(crate) fn own_via(self) -> Via {
        match self {
            Upstream::Origin => Via::Origin,
            Upstream::Owner | Upstream::OwnerOnly => Via::Owner,
        }
    }

    /// Where a fetch labelled `via` for a body fetched for this goes: where
    /// its label says, even if the view changes before it is sent (who
    /// waits on it was decided by the label), and only a fetch meant for a
    /// replica may go to one.
    pub(crate) fn to_fetch(self, via: Via) -> Upstream {
        match (self, via) {
            (Upstream::Origin, _) | (_, Via::Origin) => Upstream::Origin,
            (Upstream::Owner, Via::Replica) => Upstream::Owner,
            _ => Upstream::OwnerOnly,
        }
    }
}

/// A member as a request to it needs it: its name (base URL) and client,
/// and whether it is asked as a hot group's replica.
#[derive(Debug, Clone)]
pub(crate) struct Member {
    pub(crate) url: Arc<str>,
    pub(crate) client: OriginClient,
    pub(crate) replica: bool,
}

/// The member list as this node sees it now.
#[derive(Debug)]
struct View {
    urls: Vec<Arc<str>>,
    clients: Vec<OriginClient>,
    members: Membership,
    /// This node's place in the list, if it is in it.
    me: Option<MemberId>,
    /// Bumped whenever the list changes or a member goes down or comes
    /// back.
    epoch: u64,
}

impl View {
    fn member(&self, m: MemberId) -> Member {
        Member { url: self.urls[m.0 as usize].clone(), client: self.clients[m.0 as usize].clone(), replica: false }
    }

    fn find(&self, url: &str) -> Option<MemberId> {
        self.urls.iter().position(|u| &**u == url).map(|i| MemberId(i as u32))
    }
}

#[derive(Debug)]
pub(crate) struct Peers {
    me: Arc<str>,
    view: RwLock<View>,
    placement: PlacementConfig,
    /// Per version: the epoch its placement was computed at, and it.
    placements: Mutex<FxHashMap<u64, (u64, Arc<ObjectPlacement>)>>,
    probe_interval: Duration,
    /// For clients of members that join.
    timeout: Duration,
    refresh: Option<(Arc<dyn MemberSource>, Duration)>,
    hot: HotGroups,
    key: Option<PeerKey>,
}

/// A member's name: its base URL without the trailing slash.
fn member_name(u: &Uri) -> Arc<str> {
    u.to_string().trim_end_matches('/').into()
}

impl Peers {
    /// Clients for every member; `timeout` bounds their connects and heads.
    pub(crate) fn new(cfg: &PeerConfig, timeout: Duration, block_size: u32) -> Result<Self, SetupError> {
        let me = member_name(&cfg.me);
        if cfg.refresh.is_none() && !cfg.members.iter().any(|u| member_name(u) == me) {
            return Err(SetupError::NotAMember(me.to_string()));
        }
        if cfg.group_bytes == 0 || !cfg.group_bytes.is_multiple_of(u64::from(block_size)) {
            return Err(SetupError::PeerGroup { group: cfg.group_bytes, block: block_size });
        }
        let placement = PlacementConfig { group_bytes: cfg.group_bytes, ..PlacementConfig::default() };
        let peers = Peers {
            view: RwLock::new(View {
                urls: Vec::new(),
                clients: Vec::new(),
                members: Membership::new::<&str>(&[]),
                me: None,
                epoch: 0,
            }),
            me,
            placement,
            placements: Mutex::default(),
            probe_interval: cfg.probe_interval,
            timeout,
            refresh: cfg.refresh.clone(),
            hot: HotGroups::new(cfg.hot_after),
            key: cfg.key.clone(),
        };
        peers.replace(&cfg.members)?;
        if peers.view.read().expect("peers lock").me.is_none() {
            tracing::warn!(me = &*peers.me, "this node is not in the member list (yet): it owns nothing until it is");
        }
        Ok(peers)
    }

    /// Makes `members` the member list; says whether it changed. Members
    /// that stay keep their client (and its connections) and whether they
    /// are live; new ones start live, until a probe says otherwise.
    fn replace(&self, members: &[Uri]) -> Result<bool, SetupError> {
        let mut urls: Vec<Arc<str>> = members.iter().map(member_name).collect();
        urls.sort();
        urls.dedup();
        let mut view = self.view.write().expect("peers lock");
        if urls == view.urls {
            return Ok(false);
        }
        let mut clients = Vec::with_capacity(urls.len());
        let mut members = Membership::new(&urls);
        for (i, url) in urls.iter().enumerate() {
            match view.find(url) {
                Some(old) => {
                    clients.push(view.clients[old.0 as usize].clone());
                    members.set_live(MemberId(i as u32), view.members.is_live(old));
                }
                None => clients.push(OriginClient::new(&url.parse().expect("a member's URL"), self.timeout, None)?),
            }
        }
        let me = urls.iter().position(|u| *u == self.me).map(|i| MemberId(i as u32));
        *view = View { urls, clients, members, me, epoch: view.epoch + 1 };
        Ok(true)
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
        self.view.read().expect("peers lock").urls.len()
    }

    /// The member to ask for `target`'s first answer: the owner of its
    /// first group (always the first of that group's ranking, as groups
    /// are placed in order), `None` when that is this node, or when this
    /// node is not in its own list: first answers are forwarded only to a
    /// member that scores higher than the asker, which a node can tell
    /// only of itself as a member (one not listed that asked a member
    /// listing it first would be asked back, and the two lookups would
    /// wait on each other).
    pub(crate) fn first_owner(&self, target: &str) -> Option<Member> {
        let view = self.view.read().expect("peers lock");
        view.me?;
        let owner = *view.members.ranking(ObjectKey::of(target), 0).first()?;
        (Some(owner) != view.me).then(|| view.member(owner))
    }

    /// Whether the member named `url` is live in this node's view.
    pub(crate) fn is_live(&self, url: &str) -> bool {
        let view = self.view.read().expect("peers lock");
        view.find(url).is_some_and(|m| view.members.is_live(m))
    }

    /// The placement of version `version` of `target` (`size` bytes) over
    /// the live members of `view`, and the group holding byte `offset`.
    fn placed(
        &self,
        view: &View,
        target: &str,
        version: u64,
        size: u64,
        offset: u64,
    ) -> Option<(Arc<ObjectPlacement>, u64)> {
        let table = {
            let mut placements = self.placements.lock().expect("placements lock");
            match placements.get(&version) {
                Some((epoch, table)) if *epoch == view.epoch => table.clone(),
                _ => {
                    let groups = size.div_ceil(self.group_bytes(size));
                    let table =
                        Arc::new(ObjectPlacement::new(&view.members, ObjectKey::of(target), groups, &self.placement)?);
                    let kept: u64 = placements.values().map(|(_, t)| t.groups()).sum();
                    if kept + groups > PLACEMENT_GROUPS_KEPT {
                        placements.clear();
                    }
                    placements.insert(version, (view.epoch, table.clone()));
                    table
                }
            }
        };
        let group = (offset / self.group_bytes(size)).min(table.groups().saturating_sub(1));
        Some((table, group))
    }

    /// The member to ask for the group holding byte `offset` of version
    /// `version` of `target` (`size` bytes), `None` when this node owns
    /// it: its owner, or with `spread`, when the group is known to be hot
    /// and this node is not among its servers, the server this node's
    /// asks go to (the owner or one of its replicas).
    pub(crate) fn source(&self, target: &str, version: u64, size: u64, offset: u64, spread: bool) -> Option<Member> {
        let view = self.view.read().expect("peers lock");
        let (table, group) = self.placed(&view, target, version, size, offset)?;
        let owner = table.owner(group);
        let from = match view.me {
            Some(me) if spread && self.hot.is_hot(version, group) => table.source_for(group, me, true),
            _ => owner,
        };
        (Some(from) != view.me).then(|| Member { replica: from != owner, ..view.member(from) })
    }

    /// The owner of the group holding byte `offset` (see [`Peers::source`]).
    #[cfg(test)]
    fn owner(&self, target: &str, version: u64, size: u64, offset: u64) -> Option<Member> {
        self.source(target, version, size, offset, false)
    }

    /// Counts a member's ask this node answers from byte `offset` on, when
    /// it owns the group holding it and the ask starts the group (a member
    /// reading a group asks for it a few blocks at a time: one pass, one
    /// count); whether the group is hot now.
    pub(crate) fn answered_ask(&self, target: &str, version: u64, size: u64, offset: u64) -> bool {
        if !offset.is_multiple_of(self.group_bytes(size)) {
            return false;
        }
        let view = self.view.read().expect("peers lock");
        let Some((table, group)) = self.placed(&view, target, version, size, offset) else { return false };
        view.me == Some(table.owner(group)) && self.hot.asked(version, group)
    }

    /// Keeps an owner's word that the group holding byte `offset` of
    /// version `version` (`size` bytes) is hot.
    pub(crate) fn learn_hot(&self, version: u64, size: u64, offset: u64) {
        self.hot.learn(version, offset / self.group_bytes(size));
    }

    /// Marks the member named `url` live or not; says whether that changed
    /// anything (not for this node, nor a member no longer in the list).
    pub(crate) fn set_live(&self, url: &str, up: bool) -> bool {
        let mut view = self.view.write().expect("peers lock");
        let Some(m) = view.find(url).filter(|&m| Some(m) != view.me) else { return false };
        if view.members.is_live(m) == up {
            return false;
        }
        view.members.set_live(m, up);
        view.epoch += 1;
        true
    }

    /// Members live in this node's view (itself included when listed).
    pub(crate) fn live_count(&self) -> usize {
        self.view.read().expect("peers lock").members.live_count()
    }

    /// The other members, for probes and purges.
    pub(crate) fn others(&self) -> Vec<Member> {
        let view = self.view.read().expect("peers lock");
        (0..view.urls.len() as u32).map(MemberId).filter(|&m| Some(m) != view.me).map(|m| view.member(m)).collect()
    }

    /// Probes every other member now and then, and looks the member list
    /// up again when it comes from a source, for as long as the tier
    /// holding `peers` lives.
    pub(crate) fn spawn_probes(peers: &Arc<Peers>) {
        let weak: Weak<Peers> = Arc::downgrade(peers);
        tokio::spawn(async move {
            // Probes in a row each member left unanswered.
            let mut slow: HashMap<Arc<str>, u32> = HashMap::new();
            let mut tick = tokio::time::interval(peers_interval(&weak));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(peers) = weak.upgrade() else { return };
                let others = peers.others();
                slow.retain(|url, _| others.iter().any(|m| m.url == *url));
                let probes = others.into_iter().map(|m| {
                    let peers = &peers;
                    async move { (peers.probe(&m.client).await, m.url) }
                });
                for (probe, url) in futures_util::future::join_all(probes).await {
                    let up = probe.keeps_live(peers.is_live(&url), slow.entry(url.clone()).or_default());
                    if peers.set_live(&url, up) {
                        if up {
                            tracing::info!(peer = &*url, "peer answers again: back in the placement");
                        } else {
                            tracing::warn!(
                                peer = &*url,
                                ?probe,
                                "peer does not answer its probe: out of the placement"
                            );
                        }
                    }
                }
            }
        });
        if let Some((source, every)) = peers.refresh.clone() {
            let weak: Weak<Peers> = Arc::downgrade(peers);
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(every.max(MIN_PROBE));
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    let found = source.members().await;
                    let Some(peers) = weak.upgrade() else { return };
                    peers.refreshed(found);
                }
            });
        }
    }

    /// Takes a lookup of the member list: a new list replaces the old; a
    /// failed or empty lookup keeps it (a resolver's outage must not empty
    /// the cluster).
    fn refreshed(&self, found: std::io::Result<Vec<Uri>>) {
        match found {
            Ok(members) if !members.is_empty() => match self.replace(&members) {
                Ok(true) => {
                    let names: Vec<String> = members.iter().map(|u| member_name(u).to_string()).collect();
                    tracing::info!(members = ?names, in_list = self.view.read().expect("peers lock").me.is_some(), "member list changed");
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "member list not taken: keeping the last one"),
            },
            Ok(_) => tracing::warn!("member lookup found nobody: keeping the last list"),
            Err(e) => tracing::warn!(error = %e, "member lookup failed: keeping the last list"),
        }
    }

    /// Whether the cluster has a key its members prove requests with.
    pub(crate) fn has_key(&self) -> bool {
        self.key.is_some()
    }

    /// Adds this node's proof for a `method` request of `target` to `h`
    /// (marked already), when the cluster has a key.
    pub(crate) fn prove(&self, method: &Method, target: &str, h: &mut HeaderMap) {
        if let (Some(key), Some(mark)) = (&self.key, h.get(PEER_HEADER)) {
            let proof = key.sign(method, mark, target, std::time::SystemTime::now());
            h.insert(PEER_AUTH_HEADER, proof);
        }
    }

    /// What a `method` request with headers `h` for `target` (normalised)
    /// is as far as membership goes.
    pub(crate) fn claim(&self, method: &Method, target: &str, h: &HeaderMap) -> MemberClaim {
        let Some(mark) = h.get(PEER_HEADER) else { return MemberClaim::Client };
        let proof = h.get(PEER_AUTH_HEADER);
        match (&self.key, proof) {
            (None, _) => MemberClaim::Trusted,
            // A front's health check (HAProxy's) proves nothing, and a
            // probe's answer says nothing but that this tier is live.
            (Some(_), None) if target == PROBE_PATH => MemberClaim::Trusted,
            (Some(key), Some(proof)) if key.verify(method, mark, target, proof, std::time::SystemTime::now()) => {
                MemberClaim::Proven
            }
            (Some(_), _) => MemberClaim::Impostor,
        }
    }

    /// How a member answers its probe within the interval.
    async fn probe(&self, client: &OriginClient) -> Probe {
        let mut h = HeaderMap::new();
        h.insert(PEER_HEADER, HeaderValue::from_static("probe"));
        self.prove(&Method::HEAD, PROBE_PATH, &mut h);
        let ask = client.head(PROBE_PATH, &h);
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
    /// an ask of an owner or of a replica), again after each member that
    /// cannot be reached (it is then out of the placement, and `owner`
    /// names the next). `None` when this node is the owner, when there is
    /// no cluster, or when a member
    /// answered 5xx: the member is up, what failed is behind it (its
    /// origin), and the caller asks the origin itself.
    pub(crate) async fn ask_member(
        &self,
        target: &str,
        mut headers: HeaderMap,
        owner: impl Fn(&Peers) -> Option<Member>,
    ) -> Result<Option<(OriginResponse, Arc<str>)>, ReadError> {
        let Some(peers) = &self.peers else { return Ok(None) };
        // Each failure takes a member out: at most one try per member.
        for _ in 0..peers.len() {
            let Some(m) = owner(peers) else { return Ok(None) };
            let ask = if m.replica { ASK_REPLICA } else { ASK_OWNER };
            headers.insert(PEER_HEADER, HeaderValue::from_static(ask));
            peers.prove(&Method::GET, target, &mut headers);
            self.metrics.peer_requests.inc();
            match m.client.get(target, &headers).await {
                Ok(res) if res.status().is_server_error() => {
                    self.metrics.peer_errors.inc();
                    tracing::info!(peer = &*m.url, status = res.status().as_u16(), %target, "peer failed to fetch: asking the origin");
                    return Ok(None);
                }
                // A member that took this ask for a client's (its key or
                // clock differs) and refused it: its answer is not the
                // object's.
                Ok(res) if matches!(res.status(), StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) => {
                    self.metrics.peer_errors.inc();
                    tracing::warn!(peer = &*m.url, status = res.status().as_u16(), %target, "peer refused a member's ask (do the members share --peer-key, and their clocks agree?): asking the origin");
                    return Ok(None);
                }
                Ok(res) => return Ok(Some((OriginResponse::from_http(res)?, m.url))),
                Err(e) => {
                    self.metrics.peer_errors.inc();
                    if peers.set_live(&m.url, false) {
                        tracing::warn!(peer = &*m.url, error = %e, "peer cannot be reached: out of the placement");
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

    /// Member `i` (loopback, a closed port: a probe the test starts goes
    /// nowhere else).
    fn url(i: usize) -> String {
        format!("http://127.0.0.{i}:9")
    }

    fn config(members: &[usize], me: usize) -> PeerConfig {
        PeerConfig {
            members: members.iter().map(|&i| url(i).parse().unwrap()).collect(),
            me: url(me).parse().unwrap(),
            refresh: None,
            group_bytes: 1 << 20,
            probe_interval: Duration::from_secs(1),
            hot_after: 2,
            key: None,
        }
    }

    /// Members 1 to 5; this node is `me`.
    fn peers(me: usize) -> Peers {
        Peers::new(&config(&[1, 2, 3, 4, 5], me), Duration::from_secs(1), 256 << 10).unwrap()
    }

    /// Who owns each of 64 groups of a 64 MiB object (`None`: this node).
    fn owners(p: &Peers) -> Vec<Option<String>> {
        (0..64).map(|g| p.owner("/big.iso", 7, 64 << 20, g << 20).map(|m| m.url.to_string())).collect()
    }

    #[test]
    fn a_busy_member_stays_in_until_three_probes_in_a_row_go_unanswered() {
        let mut slow = 0;
        let mut live = true;
        let seen: Vec<bool> =
            [Probe::Slow, Probe::Slow, Probe::Up, Probe::Slow, Probe::Slow, Probe::Slow, Probe::Slow, Probe::Up]
                .into_iter()
                .map(|p| {
                    live = p.keeps_live(live, &mut slow);
                    live
                })
                .collect();
        assert_eq!(seen, [true, true, true, true, true, false, false, true], "only an answer brings it back");
        assert!(!Probe::Refused.keeps_live(true, &mut 0), "a refused connection is out at once");
        assert!(!Probe::Slow.keeps_live(false, &mut 0), "a member out stays out while its probes time out");
    }

    #[test]
    fn a_member_out_of_the_placement_owns_nothing_until_it_is_back() {
        let p = peers(1);
        let before = owners(&p);
        assert!(before.contains(&Some(url(4))) && before.contains(&None), "{before:?}");
        assert!(p.set_live(&url(4), false));
        assert!(!p.set_live(&url(4), false), "already out: no change");
        assert!(!owners(&p).contains(&Some(url(4))));
        assert_eq!(p.live_count(), 4);
        assert!(p.set_live(&url(4), true));
        assert_eq!(owners(&p), before, "back in: the same table");
        assert!(!p.set_live(&url(1), false), "a node never takes itself out");
        assert!(!p.set_live(&url(9), false), "nor a member not in the list");
    }

    #[test]
    fn the_first_answer_comes_from_the_first_of_the_first_groups_ranking() {
        let target = "/layer.tar";
        let members: Vec<String> = (1..=5).map(url).collect();
        let top = Membership::new(&members).ranking(ObjectKey::of(target), 0)[0];
        let top = members[top.0 as usize].clone();
        for me in 1..=5 {
            let p = peers(me);
            let expected = (top != url(me)).then(|| top.clone());
            assert_eq!(p.first_owner(target).map(|m| m.url.to_string()), expected, "node {me}");
            // And the owner of byte 0 under the load bound is the same one.
            assert_eq!(p.owner(target, 1, 64 << 20, 0).map(|m| m.url.to_string()), expected, "node {me}");
        }
    }

    #[test]
    fn an_owner_names_a_group_hot_and_askers_then_spread_over_its_servers() {
        let (target, version, size) = ("/big.iso", 7, 64 << 20);
        let nodes: Vec<Peers> = (1..=5).map(peers).collect();
        let node = |u: &str| &nodes[(1..=5).position(|i| url(i) == u).unwrap()];
        let mut to_replicas = 0;
        for g in 0..64u64 {
            let at = g << 20;
            let owner = nodes[0].owner(target, version, size, at).map_or(url(1), |m| m.url.to_string());
            let others = || nodes.iter().filter(|n| *n.me != *owner);
            assert!(others().all(|n| !n.answered_ask(target, version, size, at)), "only the owner counts");
            let within = at + (256 << 10);
            assert!((0..5).all(|_| !node(&owner).answered_ask(target, version, size, within)), "one pass, one count");
            let hot: Vec<bool> = (0..3).map(|_| node(&owner).answered_ask(target, version, size, at)).collect();
            assert_eq!(hot, [false, true, true], "group {g}: hot from the second ask on");
            for n in others() {
                let m = n.source(target, version, size, at, true).unwrap();
                assert!(!m.replica && *m.url == *owner, "not known hot yet: the owner");
                n.learn_hot(version, size, at);
            }
            for n in others() {
                let m = n.source(target, version, size, at, true).unwrap();
                let to = n.owner(target, version, size, at).unwrap();
                assert_eq!(*to.url, *owner, "without spread, always the owner");
                if m.replica {
                    to_replicas += 1;
                    assert_ne!(*m.url, *owner);
                    // The replica itself asks the owner.
                    let from = node(&m.url).source(target, version, size, at, true).unwrap();
                    assert!(!from.replica && *from.url == *owner, "group {g}: a replica asks the owner");
                }
            }
        }
        assert!(to_replicas > 64, "asks of hot groups went to replicas {to_replicas} times of 256");
    }

    #[test]
    fn a_members_ask_waits_only_on_fetches_nearer_the_origin() {
        use Upstream::*;
        let mut h = HeaderMap::new();
        assert_eq!(Upstream::for_request(&h), Owner);
        h.insert(PEER_HEADER, HeaderValue::from_static(ASK_OWNER));
        assert_eq!(Upstream::for_request(&h), Origin);
        h.insert(PEER_HEADER, HeaderValue::from_static(ASK_REPLICA));
        assert_eq!(Upstream::for_request(&h), OwnerOnly);
        let waits = |u: Upstream| [Via::Origin, Via::Owner, Via::Replica].map(|v| u.may_wait_on(v));
        assert_eq!(waits(Owner), [true, true, true]);
        assert_eq!(waits(OwnerOnly), [true, true, false]);
        assert_eq!(waits(Origin), [true, false, false]);
        // Only a client's fetch meant for a replica may go to one.
        // A fetch goes where its label says: to the origin, an owner, or
        // (only a client's fetch meant for one) a replica.
        assert_eq!([Via::Origin, Via::Owner, Via::Replica].map(|v| Owner.to_fetch(v)), [Origin, OwnerOnly, Owner]);
        assert_eq!(
            [Via::Origin, Via::Owner, Via::Replica].map(|v| OwnerOnly.to_fetch(v)),
            [Origin, OwnerOnly, OwnerOnly]
        );
        assert_eq!([Via::Origin, Via::Owner, Via::Replica].map(|v| Origin.to_fetch(v)), [Origin; 3]);
    }

    #[test]
    fn groups_are_whole_blocks_and_a_fixed_list_names_the_node() {
        let cfg = PeerConfig { group_bytes: 1_000_000, ..config(&[1], 1) };
        assert!(matches!(Peers::new(&cfg, Duration::from_secs(1), 1 << 20), Err(SetupError::PeerGroup { .. })));
        let cfg = config(&[1, 2], 3);
        assert!(matches!(Peers::new(&cfg, Duration::from_secs(1), 1 << 20), Err(SetupError::NotAMember(_))));
    }

    /// A member source that always answers the same list.
    #[derive(Debug)]
    struct Fixed(Vec<Uri>);

    impl MemberSource for Fixed {
        fn members(&self) -> BoxFuture<'_, std::io::Result<Vec<Uri>>> {
            Box::pin(async move { Ok(self.0.clone()) })
        }
    }

    #[test]
    fn a_looked_up_list_moves_only_the_groups_of_members_that_come_or_go() {
        let source: Arc<dyn MemberSource> = Arc::new(Fixed(Vec::new()));
        let cfg = PeerConfig { refresh: Some((source, Duration::from_secs(5))), ..config(&[1, 2, 3, 4], 1) };
        let p = Peers::new(&cfg, Duration::from_secs(1), 256 << 10).unwrap();
        let four = owners(&p);
        assert!(!p.replace(&cfg.members).unwrap(), "the same list, in any order, is no change");
        let five: Vec<Uri> = (1..=5).map(|i| url(i).parse().unwrap()).collect();
        assert!(p.replace(&five).unwrap());
        let with_five = owners(&p);
        assert!(with_five.contains(&Some(url(5))), "the new member owns groups: {with_five:?}");
        // Rendezvous: groups move only to the newcomer (the load bound may
        // shift a few more).
        let moved_elsewhere = four.iter().zip(&with_five).filter(|(a, b)| a != b && **b != Some(url(5))).count();
        assert!(moved_elsewhere <= 4, "{moved_elsewhere} groups moved between old members");
        // A member out stays out when the list is looked up again.
        assert!(p.set_live(&url(3), false));
        assert!(p.replace(&five[1..]).unwrap(), "this node is no longer listed");
        assert!(!p.set_live(&url(3), false), "still out after the change");
        assert!(owners(&p).iter().all(Option::is_some), "a node not in the list owns nothing");
        assert!(p.first_owner("/big.iso").is_none(), "nor asks members for first answers");
    }

    #[test]
    fn a_failed_or_empty_lookup_keeps_the_list() {
        let p = peers(1);
        let before = owners(&p);
        p.refreshed(Err(std::io::Error::other("resolver down")));
        p.refreshed(Ok(Vec::new()));
        assert_eq!(owners(&p), before);
        assert_eq!(p.len(), 5);
        p.refreshed(Ok(vec![url(1).parse().unwrap(), url(2).parse().unwrap()]));
        assert_eq!(p.len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn the_list_is_looked_up_again_every_interval() {
        let three: Vec<Uri> = (1..=3).map(|i| url(i).parse().unwrap()).collect();
        let source: Arc<dyn MemberSource> = Arc::new(Fixed(three));
        let cfg = PeerConfig { refresh: Some((source, Duration::from_secs(5))), ..config(&[1], 1) };
        let p = Arc::new(Peers::new(&cfg, Duration::from_secs(1), 256 << 10).unwrap());
        assert_eq!(p.len(), 1);
        Peers::spawn_probes(&p);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(p.len(), 3, "looked up at once, then every interval");
    }

    #[test]
    fn dns_members_are_every_address_once_in_order() {
        let addrs = ["10.0.0.2:80", "10.0.0.1:80", "10.0.0.2:80", "[::1]:80"].map(|a| a.parse().unwrap());
        let got: Vec<String> =
            dns_members(addrs.into_iter()).unwrap().iter().map(|u| member_name(u).to_string()).collect();
        assert_eq!(got, ["http://10.0.0.1:80", "http://10.0.0.2:80", "http://[::1]:80"]);
    }
}
