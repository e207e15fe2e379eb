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
//! - [`BlockSource`] is the seam the server's scheduler reads blocks
//!   through: [`LocalFile`] here, the origin tier's objects in
//!   `circus-origin`, and the doubles in [`testing`]. A [`FileEntry`] is a
//!   version as the scheduler serves it, whatever its source.
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
mod entry;
mod error;
mod index;
mod local;
mod read_error;
mod source;
pub mod testing;
mod version;

pub use direct::BlockReader;
pub use entry::{Description, FileEntry};
pub use error::StoreError;
pub use index::{FileIndex, INDEX_DIR, default_index_dir};
pub use local::{LocalFile, LocalPlace};
pub use read_error::ReadError;
pub use source::{BlockSource, ReadFuture, RunFuture, read_each, split_run};
pub use version::{FileVersion, SETTLE, Stamp};
