//! Storage for the circus server: reading blocks of local files past the page
//! cache, and the per-file hash index kept beside the data.
//!
//! - [`BlockReader`] reads one block at a time with `O_DIRECT` into an
//!   aligned buffer (falling back to ordinary reads where the file system
//!   refuses direct I/O), so the server's own block cache is the only cache
//!   and its budget is the whole story.
//! - [`FileIndex`] holds a file version's BLAKE3 hash tree and SHA-256, built
//!   in one pass and stored under `ROOT/.circus/index/`, rebuilt when the
//!   file's size or modification time change.
//!
//! ```no_run
//! use circus_store::{BlockReader, FileIndex};
//! let root = std::path::Path::new("/srv/files");
//! let index = FileIndex::load_or_build(root, "images/os.iso", 64 * 1024).unwrap();
//! let reader = BlockReader::open(&root.join("images/os.iso")).unwrap();
//! let first = reader.read_block(0, index.layout().block_len(0)).unwrap();
//! assert!(index.verify(0, &first));
//! ```

mod direct;
mod error;
mod index;

pub use direct::BlockReader;
pub use error::StoreError;
pub use index::{FileIndex, INDEX_DIR};
