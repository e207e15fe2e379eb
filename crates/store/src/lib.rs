//! Storage for the circus server: reading blocks of local files past the page
//! cache, and the per-file hash index kept beside the data.
//!
//! - [`BlockReader`] reads one block at a time with `O_DIRECT` into an
//!   aligned buffer (falling back to ordinary reads where the file system
//!   refuses direct I/O), so the server's own block cache is the only cache
//!   and its budget is the whole story.
//! - [`FileIndex`] holds a file version's BLAKE3 hash tree and SHA-256, built
//!   in one pass and stored under `ROOT/.circus/index/`, rebuilt when the
//!   file's version changes.
//! - [`FileVersion`] is what identifies a version (device, inode, size,
//!   mtime, ctime); every block read is checked to still belong to it.
//!
//! ```no_run
//! use circus_store::{BlockReader, FileIndex, FileVersion, default_index_dir};
//! let root = std::path::Path::new("/srv/files");
//! let path = root.join("images/os.iso");
//! let version = FileVersion::of(&std::fs::metadata(&path).unwrap());
//! let indexes = default_index_dir(root);
//! let index = FileIndex::load_or_build(&indexes, root, "images/os.iso", version, 64 * 1024, &mut |_| {}).unwrap();
//! let reader = BlockReader::open(&path, version).unwrap();
//! let first = reader.read_block(0, index.layout().block_len(0)).unwrap();
//! assert!(index.verify(0, &first));
//! ```

mod direct;
mod error;
mod index;
mod version;

pub use direct::BlockReader;
pub use error::StoreError;
pub use index::{FileIndex, INDEX_DIR, default_index_dir};
pub use version::{FileVersion, SETTLE, Stamp};
