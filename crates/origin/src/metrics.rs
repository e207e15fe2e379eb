//! The origin tier's metrics: requests, origin traffic, and the bytes from
//! the origin beside the bytes served, by the size class of the object (how
//! much the tier saves the origin, per kind of object).

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};

#[derive(Debug, Default)]
pub struct OriginMetrics {
    pub hits: Counter,
    pub misses: Counter,
    pub revalidated: Counter,
    pub relayed: Counter,
    pub origin_requests: Counter,
    pub origin_bytes: Counter,
    pub origin_errors: Counter,
    /// Requests to other members of a cluster, bytes they sent, failures.
    pub peer_requests: Counter,
    pub peer_bytes: Counter,
    pub peer_errors: Counter,
    /// GETs and HEADs other members sent this node, and those of them
    /// sent to it as a hot group's replica.
    pub peer_served: Counter,
    pub replica_served: Counter,
    /// Requests marked as a member's without its proof.
    pub peer_refused: Counter,
    /// Members' bodies sent ahead of this node's clients' (members first).
    pub peer_first_bodies: Counter,
    /// Members live in this node's view, itself included.
    pub live_peers: Gauge,
    pub resident: Gauge,
    /// Body bytes from the origin, by the class of the object's size.
    fetched: Family<ClassLabel, Counter>,
    /// Body bytes sent to clients from the tier, by the same classes.
    served: Family<ClassLabel, Counter>,
}

/// An object's class by its size, in origin blocks: `small` (one: the
/// hit lane's), `medium` (up to 64), `large`; `unstored` for answers the
/// tier relays without keeping them.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClassLabel {
    class: &'static str,
}

/// The class of an object of `size` bytes stored in `block`-byte blocks.
pub fn class(size: u64, block: u32) -> &'static str {
    match size.div_ceil(u64::from(block).max(1)) {
        0 | 1 => "small",
        2..=64 => "medium",
        _ => "large",
    }
}

/// The class of answers relayed without being stored.
pub const UNSTORED: &str = "unstored";

impl OriginMetrics {
    pub fn register(r: &mut Registry) -> Self {
        let m = OriginMetrics::default();
        r.register(
            "circus_origin_hits",
            "Requests answered from a stored object without asking the origin",
            m.hits.clone(),
        );
        r.register(
            "circus_origin_misses",
            "Requests for objects not stored (or not selected by Vary)",
            m.misses.clone(),
        );
        r.register(
            "circus_origin_revalidated",
            "Stored objects confirmed by a 304 from the origin",
            m.revalidated.clone(),
        );
        r.register(
            "circus_origin_relayed",
            "Requests relayed unstored (private, no-store, credentials)",
            m.relayed.clone(),
        );
        r.register("circus_origin_requests", "Requests sent to the origin", m.origin_requests.clone());
        r.register(
            "circus_origin_fetched_bytes",
            "Body bytes received from the origin for storage",
            m.origin_bytes.clone(),
        );
        r.register("circus_origin_errors", "Origin requests that failed or were cut short", m.origin_errors.clone());
        r.register(
            "circus_peer_requests",
            "Block requests sent to the owners of their groups",
            m.peer_requests.clone(),
        );
        r.register("circus_peer_fetched_bytes", "Body bytes received from other members", m.peer_bytes.clone());
        r.register(
            "circus_peer_errors",
            "Requests to members that failed (the member is then out)",
            m.peer_errors.clone(),
        );
        r.register("circus_peer_served_requests", "Requests other members sent this node", m.peer_served.clone());
        r.register(
            "circus_peer_replica_served_requests",
            "Requests other members sent this node as a replica of a hot group",
            m.replica_served.clone(),
        );
        r.register(
            "circus_peer_first_bodies",
            "Members' bodies this node sent ahead of its own clients' (members first)",
            m.peer_first_bodies.clone(),
        );
        r.register(
            "circus_peer_unproven_requests",
            "Requests marked as a member's without the cluster key's proof, served as clients'",
            m.peer_refused.clone(),
        );
        r.register("circus_peers_live", "Members live in this node's view, itself included", m.live_peers.clone());
        r.register("circus_origin_resident_bytes", "Bytes held by the origin tier's store", m.resident.clone());
        r.register(
            "circus_origin_class_fetched_bytes",
            "Body bytes received from the origin, by object size class",
            m.fetched.clone(),
        );
        r.register(
            "circus_origin_class_served_bytes",
            "Body bytes the tier sent to clients, by object size class",
            m.served.clone(),
        );
        m
    }
}

impl OriginMetrics {
    /// `n` body bytes of an object of `class` came from the origin.
    pub fn fetched(&self, class: &'static str, n: u64) {
        self.origin_bytes.inc_by(n);
        self.fetched.get_or_create(&ClassLabel { class }).inc_by(n);
    }

    /// `n` body bytes of an object of `class` went to a client.
    pub fn served(&self, class: &'static str, n: u64) {
        self.served.get_or_create(&ClassLabel { class }).inc_by(n);
    }
}
