//! `circus sim`: a discrete-event simulator of a content server, its disk and
//! its clients' links, driving the very scheduler (`circus-sched`) that the
//! real server runs. It reproduces the Circus paper's experiments in seconds.
//!
//! ```
//! use circus_sim::{SimConfig, run};
//! let mut cfg = SimConfig::default();
//! cfg.file_size = 8 << 20;
//! cfg.load = 0.05;
//! let report = run(&cfg, &mut |_| {}).unwrap();
//! assert!(report.net_bytes_per_s > 0.0);
//! ```
//!
//! Parts: [`link`] (client classes and the TCP model), [`disk`] (one arm,
//! positioning cost, media rate), the event loop, [`report`], [`bound`]
//! (the fewest reads any cache could serve in-order readers with), and
//! [`figures`] (the paper's Figures 7–17 as sweeps, CSV and SVG), and
//! [`cluster`] (a cluster of nodes under a flash crowd, counted in bytes).

pub mod bound;
pub mod cluster;
mod config;
pub mod disk;
mod engine;
pub mod figures;
pub mod link;
pub mod report;

pub use config::{SimConfig, SimConfigError};
pub use engine::{Progress, run};
pub use report::SimReport;
