//! The MANIFEST frame: the file's geometry, identity and every leaf hash.
//!
//! Payload layout (big-endian), 82 fixed bytes then two variable parts:
//!
//! ```text
//! 0   file_size   u64
//! 8   block_size  u32
//! 12  block_count u32
//! 16  root        [32]
//! 48  sha256      [32]   all zeros when unknown
//! 80  etag_len    u16
//! 82  etag        [etag_len]  UTF-8, quotes included
//! ..  leaves      [block_count][32]
//! ```
//!
//! Shipping every leaf up front costs 32 bytes per block (0.05% at 64 KiB)
//! and lets each block be verified alone, in whatever order it arrives.

use crate::ProtoError;
use crate::frame::{Block, FrameType, put_header};
use crate::tree::{compute_root, verify_leaf};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use circus_core::BlockLayout;

/// Length of the manifest payload before the ETag and the leaves.
pub const MANIFEST_FIXED_LEN: usize = 8 + 4 + 4 + 32 + 32 + 2;

/// The largest `block_size` a manifest may declare: 64 MiB. A decoder
/// buffers a BLOCK frame whole, so this bounds what one frame can make a
/// client allocate; servers (`circus serve --block`) stay within it.
pub const MAX_BLOCK_SIZE: u32 = 64 << 20;

/// What a client learns about the file before any block: enough to place,
/// verify and resume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    pub file_size: u64,
    pub block_size: u32,
    /// Must equal `compute_root(&leaves)`; the decoder rejects it otherwise.
    pub root: [u8; 32],
    /// SHA-256 of the whole file (as in `Repr-Digest`), zeros when unknown.
    pub sha256: [u8; 32],
    /// The HTTP ETag of this version of the file, quotes included.
    pub etag: String,
    pub leaves: Vec<[u8; 32]>,
}

/// A block whose bytes matched its leaf hash and whose offset matched its
/// index: safe to write to disk. Only [`Manifest::check_block`] makes one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedBlock(Block);

impl VerifiedBlock {
    pub fn index(&self) -> u32 {
        self.0.index
    }

    pub fn offset(&self) -> u64 {
        self.0.offset
    }

    pub fn data(&self) -> &Bytes {
        &self.0.data
    }

    pub fn into_block(self) -> Block {
        self.0
    }
}

impl Manifest {
    /// A manifest for a file cut by `layout`, with the root computed here.
    ///
    /// # Panics
    /// If there is not exactly one leaf per block of `layout`.
    pub fn new(layout: BlockLayout, leaves: Vec<[u8; 32]>, sha256: [u8; 32], etag: impl Into<String>) -> Self {
        assert_eq!(leaves.len() as u64, u64::from(layout.blocks()), "one leaf hash per block");
        let root = compute_root(&leaves);
        Self { file_size: layout.len(), block_size: layout.block_size(), root, sha256, etag: etag.into(), leaves }
    }

    /// # Panics
    /// If `block_size` is zero (a decoded manifest never has that).
    pub fn layout(&self) -> BlockLayout {
        BlockLayout::new(self.file_size, self.block_size)
    }

    pub fn block_count(&self) -> u32 {
        self.leaves.len() as u32
    }

    /// Whether `data` is block `index` of this file; false for an index past
    /// the end.
    pub fn verify(&self, index: u32, data: &[u8]) -> bool {
        verify_leaf(&self.leaves, index, data)
    }

    /// Checks a received block's hash and offset. On
    /// [`ProtoError::CorruptBlock`] the client drops the bytes and asks for
    /// the block again (in the `Circus-Need` of its next request); the stream
    /// itself is still in sync and may go on.
    pub fn check_block(&self, block: Block) -> Result<VerifiedBlock, ProtoError> {
        if self.block_count() > block.index && block.offset != self.layout().offset(block.index) {
            return Err(ProtoError::BadBlock {
                reason: format!("block {} claims offset {}", block.index, block.offset),
            });
        }
        if !self.verify(block.index, &block.data) {
            return Err(ProtoError::CorruptBlock { index: block.index });
        }
        Ok(VerifiedBlock(block))
    }

    /// Length of the MANIFEST payload this manifest encodes to.
    pub fn encoded_len(&self) -> u64 {
        (MANIFEST_FIXED_LEN + self.etag.len()) as u64 + 32 * self.leaves.len() as u64
    }

    /// Appends the MANIFEST frame. Fails, writing nothing, when the manifest
    /// cannot be represented or no decoder would accept it: a block size of
    /// zero or over [`MAX_BLOCK_SIZE`], a leaf count that does not
    /// match the geometry, an ETag over 65535 bytes or a payload over 4 GiB.
    /// (Decoders accept 64 MiB by default; see `docs/protocol.md`, Limits.)
    pub fn encode(&self, buf: &mut BytesMut) -> Result<(), ProtoError> {
        let bad = |reason: String| Err(ProtoError::BadManifest { reason });
        if let Err(reason) = check_block_size(self.block_size) {
            return bad(reason);
        }
        let blocks = self.file_size.div_ceil(u64::from(self.block_size));
        if blocks != self.leaves.len() as u64 {
            return bad(format!("{} leaves for {blocks} blocks", self.leaves.len()));
        }
        let Ok(etag_len) = u16::try_from(self.etag.len()) else {
            return bad(format!("ETag of {} bytes is longer than 65535", self.etag.len()));
        };
        let Ok(len) = u32::try_from(self.encoded_len()) else {
            return bad(format!("{}-byte manifest does not fit in one frame", self.encoded_len()));
        };
        buf.reserve(crate::FRAME_HEADER_LEN + len as usize);
        put_header(FrameType::Manifest, len, buf);
        buf.put_u64(self.file_size);
        buf.put_u32(self.block_size);
        buf.put_u32(blocks as u32);
        buf.put_slice(&self.root);
        buf.put_slice(&self.sha256);
        buf.put_u16(etag_len);
        buf.put_slice(self.etag.as_bytes());
        for leaf in &self.leaves {
            buf.put_slice(leaf);
        }
        Ok(())
    }

    /// Parses and validates a whole MANIFEST payload. Every count is checked
    /// against the bytes actually present before anything is allocated.
    pub(crate) fn decode(payload: &[u8]) -> Result<Self, ProtoError> {
        let bad = |reason: String| Err(ProtoError::BadManifest { reason });
        let Some(fixed) = payload.get(..MANIFEST_FIXED_LEN) else {
            return bad(format!("{} bytes, shorter than the {MANIFEST_FIXED_LEN}-byte fixed part", payload.len()));
        };
        let Fixed { file_size, block_size, root, sha256, etag_len } = Fixed::check(fixed, payload.len() as u64)?;
        let (etag, leaves) = payload[MANIFEST_FIXED_LEN..].split_at(usize::from(etag_len));
        let Ok(etag) = std::str::from_utf8(etag) else {
            return bad("ETag is not UTF-8".into());
        };
        let leaves: Vec<[u8; 32]> = leaves.chunks_exact(32).map(|c| c.try_into().unwrap()).collect();
        if compute_root(&leaves) != root {
            return bad("root does not match the leaf hashes".into());
        }
        Ok(Self { file_size, block_size, root, sha256, etag: etag.to_owned(), leaves })
    }
}

/// The fixed part of a MANIFEST payload, checked on its own: the decoder
/// looks at it as soon as it arrives, so a manifest whose fields are absurd
/// or disagree with its frame length fails before the rest (up to the
/// manifest limit) is waited for or buffered.
pub(crate) struct Fixed {
    file_size: u64,
    block_size: u32,
    root: [u8; 32],
    sha256: [u8; 32],
    etag_len: u16,
}

impl Fixed {
    /// `fixed` is the first [`MANIFEST_FIXED_LEN`] bytes of a payload whose
    /// frame says it is `payload_len` bytes long.
    pub(crate) fn check(fixed: &[u8], payload_len: u64) -> Result<Self, ProtoError> {
        let bad = |reason: String| Err(ProtoError::BadManifest { reason });
        let mut p = fixed;
        let file_size = p.get_u64();
        let block_size = p.get_u32();
        let block_count = p.get_u32();
        let root: [u8; 32] = take32(&mut p);
        let sha256: [u8; 32] = take32(&mut p);
        let etag_len = p.get_u16();
        check_block_size(block_size).map_err(|reason| ProtoError::BadManifest { reason })?;
        let blocks = file_size.div_ceil(u64::from(block_size));
        if blocks != u64::from(block_count) {
            return bad(format!(
                "block_count {block_count} but a {file_size}-byte file has {blocks} blocks of {block_size}"
            ));
        }
        let expected = (MANIFEST_FIXED_LEN + usize::from(etag_len)) as u64 + 32 * u64::from(block_count);
        if expected != payload_len {
            return bad(format!("payload is {payload_len} bytes but its fields describe {expected}"));
        }
        Ok(Self { file_size, block_size, root, sha256, etag_len })
    }
}

/// Why `block_size` cannot be a manifest's, if it cannot. Both ends hold a
/// whole block in memory, so the limit bounds what a peer can make the
/// other allocate for one frame.
fn check_block_size(block_size: u32) -> Result<(), String> {
    if block_size == 0 {
        Err("block size is zero".into())
    } else if block_size > MAX_BLOCK_SIZE {
        Err(format!("block size {block_size} is over the limit of {MAX_BLOCK_SIZE} bytes (64 MiB)"))
    } else {
        Ok(())
    }
}

fn take32(p: &mut &[u8]) -> [u8; 32] {
    let mut out = [0; 32];
    p.copy_to_slice(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FRAME_HEADER_LEN, HashTree};
    use proptest::prelude::*;

    fn sample(len: usize, block_size: u32) -> Manifest {
        let data: Vec<u8> = (0..len).map(|i| i as u8).collect();
        let leaves = data.chunks(block_size as usize).map(HashTree::leaf_hash).collect();
        Manifest::new(BlockLayout::new(len as u64, block_size), leaves, [7; 32], "\"abc\"")
    }

    fn payload(m: &Manifest) -> BytesMut {
        let mut buf = BytesMut::new();
        m.encode(&mut buf).unwrap();
        buf.split_off(FRAME_HEADER_LEN)
    }

    fn reason(r: Result<Manifest, ProtoError>) -> String {
        match r {
            Err(ProtoError::BadManifest { reason }) => reason,
            other => panic!("expected BadManifest, got {other:?}"),
        }
    }

    #[test]
    fn validation_names_the_problem() {
        let m = sample(10, 4);
        let good = payload(&m);
        assert_eq!(Manifest::decode(&good).unwrap(), m);

        let mut p = good.clone();
        p[8..12].copy_from_slice(&0u32.to_be_bytes());
        assert!(reason(Manifest::decode(&p)).contains("block size is zero"));

        let mut p = good.clone();
        p[12..16].copy_from_slice(&4u32.to_be_bytes());
        assert!(reason(Manifest::decode(&p)).contains("has 3 blocks"));

        let mut p = good.clone();
        p[16] ^= 1;
        assert!(reason(Manifest::decode(&p)).contains("root"));

        let mut p = good.clone();
        p[82] = 0xff; // inside the ETag
        assert!(reason(Manifest::decode(&p)).contains("UTF-8"));

        assert!(reason(Manifest::decode(&good[..good.len() - 1])).contains("fields describe"));
        assert!(reason(Manifest::decode(&good[..40])).contains("fixed part"));
    }

    #[test]
    fn huge_counts_are_checked_against_the_bytes_present() {
        // A 4-billion-block claim in an 82-byte payload must fail on the
        // length check, not try to allocate 128 GiB of leaves.
        let mut p = payload(&sample(0, 1));
        p[0..8].copy_from_slice(&u64::from(u32::MAX).to_be_bytes());
        p[12..16].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(reason(Manifest::decode(&p)).contains("fields describe"));
    }

    #[test]
    fn encode_refuses_unrepresentable_manifests() {
        let mut buf = BytesMut::new();
        let mut m = sample(10, 4);
        m.leaves.pop();
        assert!(m.encode(&mut buf).is_err());
        let mut m = sample(10, 4);
        m.etag = "x".repeat(70_000);
        assert!(m.encode(&mut buf).is_err());
        // A block no decoder would buffer.
        let leaf = HashTree::leaf_hash(b"x");
        let m = Manifest::new(BlockLayout::new(1, MAX_BLOCK_SIZE + 1), vec![leaf], [0; 32], "\"e\"");
        assert!(reason(m.encode(&mut buf).map(|()| m.clone())).contains("over the limit"));
        assert!(buf.is_empty());
    }

    #[test]
    fn check_block_rejects_wrong_bytes_and_offsets() {
        let m = sample(10, 4);
        let block = |index, offset, data: &'static [u8]| Block { index, offset, data: Bytes::from_static(data) };
        let ok = m.check_block(block(2, 8, &[8, 9])).unwrap();
        assert_eq!((ok.index(), ok.offset(), &ok.data()[..]), (2, 8, &[8u8, 9][..]));
        assert_eq!(m.check_block(block(2, 8, &[8, 8])), Err(ProtoError::CorruptBlock { index: 2 }));
        assert!(matches!(m.check_block(block(2, 4, &[8, 9])), Err(ProtoError::BadBlock { .. })));
        assert_eq!(m.check_block(block(3, 12, &[])), Err(ProtoError::CorruptBlock { index: 3 }));
    }

    proptest! {
        #[test]
        fn payload_round_trip(len in 0usize..3000, bs in 1u32..600, etag in ".{0,40}", sha in any::<[u8; 32]>()) {
            let mut m = sample(len, bs);
            m.etag = etag;
            m.sha256 = sha;
            let p = payload(&m);
            prop_assert_eq!(p.len() as u64, m.encoded_len());
            prop_assert_eq!(Manifest::decode(&p).unwrap(), m);
        }
    }
}
