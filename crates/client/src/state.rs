//! What a download knows about its own progress, and the sidecar JSON file
//! (`PATH.circus-state`) that keeps it across process restarts.
//!
//! The file is only ever written after the part file was synced (see
//! `part.rs`), and replaced atomically, so whatever it records is on disk.

use crate::digest::Sha256Digest;
use base64::Engine;
use circus_core::{BlockLayout, BlockSet};
use circus_proto::MAX_BLOCK_SIZE;
use serde::{Deserialize, Serialize};
use std::{io::Write, path::Path};

const VERSION: u32 = 1;

/// A native download: the file version it belongs to and its verified blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NativeState {
    pub etag: String,
    pub root: [u8; 32],
    /// Zeros when the server did not know the file's SHA-256.
    pub sha256: [u8; 32],
    pub layout: BlockLayout,
    /// Blocks verified against the manifest and handed to the writer.
    pub have: BlockSet,
}

impl NativeState {
    pub fn done_bytes(&self) -> u64 {
        self.have.iter().map(|b| u64::from(self.layout.block_len(b))).sum()
    }
}

/// A plain download: a prefix of the file and what identifies its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PlainState {
    /// A strong ETag or a Last-Modified date, for `If-Range`; `None` when the
    /// server sent neither, and then a broken download cannot be resumed.
    pub validator: Option<String>,
    pub total: Option<u64>,
    /// Bytes `0..done` are written.
    pub done: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Progress {
    /// Nothing received yet.
    Fresh,
    Native(NativeState),
    Plain(PlainState),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct State {
    pub url: String,
    /// From the server's `Repr-Digest`, kept because a resumed response may
    /// not repeat it.
    pub repr_sha256: Option<Sha256Digest>,
    pub progress: Progress,
}

impl State {
    pub fn fresh(url: &str) -> Self {
        Self { url: url.to_owned(), repr_sha256: None, progress: Progress::Fresh }
    }

    /// Bytes of the file already in place.
    pub fn done_bytes(&self) -> u64 {
        match &self.progress {
            Progress::Fresh => 0,
            Progress::Native(n) => n.done_bytes(),
            Progress::Plain(p) => p.done,
        }
    }

    /// The file's size, once known.
    pub fn total(&self) -> Option<u64> {
        match &self.progress {
            Progress::Fresh => None,
            Progress::Native(n) => Some(n.layout.len()),
            Progress::Plain(p) => p.total,
        }
    }

    /// Whether every byte of the file is in place (known only once the
    /// size is).
    pub fn is_complete(&self) -> bool {
        match &self.progress {
            Progress::Fresh => false,
            Progress::Native(n) => n.have.is_full(),
            Progress::Plain(p) => p.total == Some(p.done),
        }
    }

    /// The length the part file must have for this state to be believed.
    pub fn expected_part_len(&self) -> Option<u64> {
        match &self.progress {
            Progress::Fresh => None,
            Progress::Native(n) => Some(n.layout.len()),
            // Preallocated to the total when known; else written so far.
            Progress::Plain(p) => Some(p.total.unwrap_or(p.done)),
        }
    }

    pub fn to_json(&self) -> Vec<u8> {
        let progress = match &self.progress {
            Progress::Fresh => ProgressFile::Fresh,
            Progress::Native(n) => ProgressFile::Native {
                etag: n.etag.clone(),
                root: hex::encode(n.root),
                sha256: hex::encode(n.sha256),
                file_size: n.layout.len(),
                block_size: n.layout.block_size(),
                verified_count: n.have.len(),
                verified: base64::engine::general_purpose::STANDARD.encode(bitmap(&n.have)),
            },
            Progress::Plain(p) => {
                ProgressFile::Plain { validator: p.validator.clone(), total: p.total, bytes_done: p.done }
            }
        };
        let file = StateFile {
            version: VERSION,
            url: self.url.clone(),
            repr_sha256: self.repr_sha256.map(|d| d.hex()),
            progress,
        };
        serde_json::to_vec_pretty(&file).expect("state serializes")
    }

    /// Reads a state file's contents; an error says why it cannot be used.
    pub fn from_json(bytes: &[u8]) -> Result<Self, StateError> {
        let file: StateFile = serde_json::from_slice(bytes).map_err(StateError::Unreadable)?;
        if file.version != VERSION {
            return Err(StateError::Version { found: file.version });
        }
        let hash = |s: &str| -> Result<[u8; 32], StateError> {
            hex::decode(s)
                .ok()
                .and_then(|v| v.try_into().ok())
                .ok_or_else(|| StateError::BadHash { found: s.to_owned() })
        };
        let repr_sha256 = file.repr_sha256.as_deref().map(|h| hash(h).map(Sha256Digest)).transpose()?;
        let progress = match file.progress {
            ProgressFile::Fresh => Progress::Fresh,
            ProgressFile::Native { etag, root, sha256, file_size, block_size, verified_count, verified } => {
                // A manifest never declares more (the final check reads a
                // block at a time, so this bounds its buffer too).
                if block_size == 0
                    || block_size > MAX_BLOCK_SIZE
                    || file_size.div_ceil(u64::from(block_size)) > u64::from(u32::MAX)
                {
                    return Err(StateError::Geometry { file_size, block_size });
                }
                let layout = BlockLayout::new(file_size, block_size);
                let bits = base64::engine::general_purpose::STANDARD.decode(verified).map_err(StateError::Bitmap)?;
                let have = from_bitmap(&bits, layout.blocks())?;
                if have.len() != verified_count {
                    return Err(StateError::Count { found: have.len(), claimed: verified_count });
                }
                Progress::Native(NativeState { etag, root: hash(&root)?, sha256: hash(&sha256)?, layout, have })
            }
            ProgressFile::Plain { validator, total, bytes_done } => {
                if total.is_some_and(|t| bytes_done > t) {
                    return Err(StateError::PastTotal { done: bytes_done, total });
                }
                Progress::Plain(PlainState { validator, total, done: bytes_done })
            }
        };
        Ok(Self { url: file.url, repr_sha256, progress })
    }
}

/// Why a state file cannot be used. The download then starts over, so
/// these are only ever shown, but each names what was wrong.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("unreadable: {0}")]
    Unreadable(#[source] serde_json::Error),
    #[error("version {found} (this client writes {VERSION})")]
    Version { found: u32 },
    #[error("bad hash {found:?}")]
    BadHash { found: String },
    #[error("impossible geometry: {file_size} bytes in blocks of {block_size}")]
    Geometry { file_size: u64, block_size: u32 },
    #[error("bad verified bitmap: {0}")]
    Bitmap(#[source] base64::DecodeError),
    #[error("bitmap of {len} bytes for {capacity} blocks")]
    BitmapLen { len: usize, capacity: u32 },
    #[error("bitmap marks block {block} of {capacity}")]
    BitmapPastEnd { block: u64, capacity: u32 },
    #[error("bitmap has {found} blocks, header says {claimed}")]
    Count { found: u32, claimed: u32 },
    #[error("{done} bytes done of {total:?}")]
    PastTotal { done: u64, total: Option<u64> },
}

/// The state file codec as the fuzz target (`fuzz/`) sees it: [`State`]
/// stays crate-private, and this shows no more than its round trip and
/// the sums a resume relies on.
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FuzzState(State);

impl FuzzState {
    pub fn from_json(bytes: &[u8]) -> Result<Self, StateError> {
        State::from_json(bytes).map(Self)
    }

    pub fn to_json(&self) -> Vec<u8> {
        self.0.to_json()
    }

    pub fn done_bytes(&self) -> u64 {
        self.0.done_bytes()
    }

    pub fn total(&self) -> Option<u64> {
        self.0.total()
    }

    pub fn is_complete(&self) -> bool {
        self.0.is_complete()
    }
}

/// Replaces `path` with `bytes` so that a crash leaves either the old or the
/// new contents, never a torn file: write a temporary, sync it, rename.
pub(crate) fn save_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_data()?;
    std::fs::rename(&tmp, path)
}

#[derive(Debug, Serialize, Deserialize)]
struct StateFile {
    version: u32,
    url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    repr_sha256: Option<String>,
    #[serde(flatten)]
    progress: ProgressFile,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "protocol", rename_all = "lowercase")]
enum ProgressFile {
    Fresh,
    Native {
        etag: String,
        root: String,
        sha256: String,
        file_size: u64,
        block_size: u32,
        verified_count: u32,
        /// Bit `i` (byte `i / 8`, bit `i % 8`) set: block `i` is on disk.
        /// A bitmap, not a range list, so its size is bounded by the file's
        /// block count whatever order the blocks came in.
        verified: String,
    },
    Plain {
        validator: Option<String>,
        total: Option<u64>,
        bytes_done: u64,
    },
}

fn bitmap(set: &BlockSet) -> Vec<u8> {
    let bytes = (set.capacity() as usize).div_ceil(8);
    let mut out: Vec<u8> = (0..bytes.div_ceil(8)).flat_map(|w| set.word(w).to_le_bytes()).collect();
    out.truncate(bytes);
    out
}

fn from_bitmap(bits: &[u8], capacity: u32) -> Result<BlockSet, StateError> {
    if bits.len() != (capacity as usize).div_ceil(8) {
        return Err(StateError::BitmapLen { len: bits.len(), capacity });
    }
    let mut set = BlockSet::new(capacity);
    for (i, &byte) in bits.iter().enumerate() {
        for bit in 0..8 {
            if byte & (1 << bit) != 0 {
                let b = i as u64 * 8 + bit;
                if b >= u64::from(capacity) {
                    return Err(StateError::BitmapPastEnd { block: b, capacity });
                }
                set.insert(b as u32);
            }
        }
    }
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn native(capacity_bytes: u64, members: &[u32]) -> State {
        let layout = BlockLayout::new(capacity_bytes, 4);
        let mut have = BlockSet::new(layout.blocks());
        members.iter().for_each(|&b| {
            have.insert(b);
        });
        State {
            url: "http://h/f".into(),
            repr_sha256: Some(Sha256Digest([7; 32])),
            progress: Progress::Native(NativeState {
                etag: "\"v1\"".into(),
                root: [1; 32],
                sha256: [2; 32],
                layout,
                have,
            }),
        }
    }

    #[test]
    fn native_state_round_trips() {
        for (len, members) in [(0, vec![]), (10, vec![0, 2]), (4 * 130 - 1, vec![0, 63, 64, 127, 129])] {
            let s = native(len, &members);
            let back = State::from_json(&s.to_json()).unwrap();
            assert_eq!(back, s);
        }
        let s = native(10, &[0, 2]);
        assert_eq!(s.done_bytes(), 4 + 2);
        assert!(!s.is_complete() && native(10, &[0, 1, 2]).is_complete());
    }

    #[test]
    fn plain_and_fresh_round_trip() {
        let mut s = State::fresh("http://h/f");
        assert_eq!(State::from_json(&s.to_json()).unwrap(), s);
        s.progress = Progress::Plain(PlainState { validator: Some("\"e\"".into()), total: Some(9), done: 4 });
        assert_eq!(State::from_json(&s.to_json()).unwrap(), s);
        let text = String::from_utf8(s.to_json()).unwrap();
        assert!(text.contains("\"protocol\": \"plain\"") && text.contains("\"bytes_done\": 4"), "{text}");
    }

    #[test]
    fn damaged_files_are_refused() {
        let good = String::from_utf8(native(10, &[1]).to_json()).unwrap();
        for (from, to) in [("\"verified_count\": 1", "\"verified_count\": 2"), ("\"version\": 1", "\"version\": 9")] {
            assert!(State::from_json(good.replace(from, to).as_bytes()).is_err(), "{to}");
        }
        // Block 3 of a 3-block file set in the bitmap.
        let bad = good.replace("\"verified\": \"Ag==\"", "\"verified\": \"Cg==\"");
        assert_ne!(bad, good);
        assert!(matches!(State::from_json(bad.as_bytes()), Err(StateError::BitmapPastEnd { block: 3, capacity: 3 })));
        assert!(State::from_json(b"{").is_err());
        // Blocks bigger than any manifest may declare.
        let empty = String::from_utf8(native(0, &[]).to_json()).unwrap();
        assert!(State::from_json(empty.as_bytes()).is_ok());
        let huge = empty.replace("\"block_size\": 4", "\"block_size\": 4294967295");
        assert!(matches!(State::from_json(huge.as_bytes()), Err(StateError::Geometry { block_size: u32::MAX, .. })));
    }

    #[test]
    fn atomic_save_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s");
        save_atomic(&p, b"one").unwrap();
        save_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
