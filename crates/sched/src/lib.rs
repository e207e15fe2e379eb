//! The circus block scheduler: which block each client gets next, and which
//! block is read from storage next, so that one read serves every client that
//! still needs the block while it is in memory.
//!
//! It is a pure state machine. The driver (the real server, or the simulator)
//! feeds it [`Event`]s with the current time and carries out the [`Action`]s
//! it returns. No clock, no randomness, no I/O: the same events give the same
//! actions, which is what lets the simulator check the very code the server
//! runs. Policies ([`PolicyKind`]) decide; the scheduler keeps the books
//! (pins, the memory budget, single-flight reads).
//!
//! ```
//! use circus_core::{ClientId, FileId};
//! use circus_sched::{Action, Event, SchedConfig, Scheduler};
//!
//! let mut s = Scheduler::new(SchedConfig::default());
//! let join = Event::Join { client: ClientId(1), file: FileId(7), len: 100_000, have: None, in_order: false };
//! let actions: Vec<_> = s.on_event(0, join).collect();
//! // Two 64 KiB blocks, both read from storage for the new client.
//! assert_eq!(actions.iter().filter(|a| matches!(a, Action::Read { .. })).count(), 2);
//! ```
//!
//! The rules are written out, with their reasons, in docs/scheduler.md.

mod cache;
mod client;
mod config;
mod event;
mod file;
mod foresight;
mod policy;
mod region;
mod scheduler;
mod status;

pub use client::Role;
pub use config::{
    ConfigError, Favor, HOLD_STALL_NANOS, IN_ORDER_HIT_QUEUE, IN_ORDER_RUN_BYTES, PolicyKind, SchedConfig,
};
pub use event::{Action, Event, FailReason, Nanos, ReadFault};
pub use scheduler::{Counters, Scheduler};
pub use status::{ClientStatus, FileStatus, Status};
