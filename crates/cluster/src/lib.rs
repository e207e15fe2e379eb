//! Where each block group of an object lives in a circus cluster.
//!
//! Every node serves every URL. An object is cut into groups of a few MiB
//! so that a huge file spreads over all nodes, and each group has one
//! owner: the only node that fetches it from the origin. A node missing a
//! group fetches it from the owner. Owners are chosen by rendezvous
//! (highest random weight) hashing over the live members, as Kraken,
//! Varnish's shard director and groupcache place content: each member
//! scores each group, the best live score wins, and when a member leaves
//! its groups move, each to the member that ranked next (with the load
//! bound below, a few others move too).
//!
//! Plain rendezvous hashing leaves the owners of one object's groups
//! unevenly loaded (2,560 groups over 100 members: the fullest owns about
//! 1.6 times the mean). [`ObjectPlacement`] bounds it as consistent
//! hashing with bounded loads does (Mirrokni, Thorup and Zadimoghaddam,
//! 2018; HAProxy's `hash-balance-factor`): groups are placed in order,
//! each with the first member of its ranking that holds fewer than
//! `load_factor` times the mean. The table depends only on the object,
//! its number of groups and the live set, so every node computes the same
//! one without talking to the others.
//!
//! A group wanted by many nodes at once is hot: it is also served by the
//! next members of its ranking ([`ObjectPlacement::source_for`]), which
//! fetch it from the owner, so no owner carries a crowd alone.
//!
//! Pure and deterministic: the server and the simulator place with this
//! same code.
//!
//! ```
//! use circus_cluster::{MemberId, Membership, ObjectKey, ObjectPlacement, PlacementConfig};
//! let mut members = Membership::new(&["10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080"]);
//! let cfg = PlacementConfig::default();
//! let object = ObjectKey::of("/images/debian.iso");
//! let groups = cfg.groups(1 << 30); // 256 groups of 4 MiB
//! let before = ObjectPlacement::new(&members, object, groups, &cfg).unwrap();
//! members.set_live(MemberId(1), false);
//! let after = ObjectPlacement::new(&members, object, groups, &cfg).unwrap();
//! assert!((0..groups).all(|g| after.owner(g) != MemberId(1)));
//! assert_eq!(before.owned_by(MemberId(1)) + before.owned_by(MemberId(0)) + before.owned_by(MemberId(2)), groups);
//! ```

mod membership;
mod placement;

pub use membership::{MemberId, Membership, ObjectKey};
pub use placement::{ObjectPlacement, PlacementConfig};
