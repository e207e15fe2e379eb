//! Core vocabulary shared by every circus crate: identifiers, the block layout
//! of a file, a compact block set, and human-unit sizes and rates.
//!
//! Nothing here does I/O, reads a clock or draws random numbers, so it can sit
//! under the scheduler, the simulator and the real server alike.
//!
//! ```
//! use circus_core::{BlockLayout, ByteSize};
//! let layout = BlockLayout::new(ByteSize::parse("1MiB").unwrap().0 + 10, 64 * 1024);
//! assert_eq!(layout.blocks(), 17);
//! assert_eq!(layout.block_len(16), 10); // the short last block
//! ```

mod blockset;
mod fault;
mod ids;
mod layout;
mod units;

pub use blockset::{BlockSet, best_spread_in_circular, first_in, first_in_circular, spread_rank};
pub use fault::Fault;
pub use ids::{BlockIdx, ClientId, FileId};
pub use layout::BlockLayout;
pub use units::{BitRate, ByteSize, Span, UnitError};
