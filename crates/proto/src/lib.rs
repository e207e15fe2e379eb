//! The circus native download protocol: the block stream a server sends and
//! the `Circus-Need` header a resuming client sends. The wire format is
//! specified in `docs/protocol.md`; this crate is its reference codec.
//!
//! A native response body is a 4-byte preamble followed by frames: one
//! `MANIFEST` (file geometry and the BLAKE3 hash of every block), then `BLOCK`
//! frames in whatever order suits the server, each carrying its index and
//! offset, and finally `END` (or `ERROR` if the server gave up). Every block
//! can be verified on its own against the manifest, so a client may write it
//! to disk at once and resume later by asking only for what it still needs.
//!
//! Everything here is sans-I/O: the encoder appends to a [`BytesMut`], and the
//! [`Decoder`] consumes from one, returning `Ok(None)` when it needs more bytes.
//!
//! ```
//! use bytes::BytesMut;
//! use circus_core::BlockLayout;
//! use circus_proto::{Decoder, Frame, HashTree, Manifest, encode_block, encode_end, encode_preamble};
//!
//! // Server: hash the blocks while reading them, then stream them in any order.
//! let file = b"helloworld";
//! let layout = BlockLayout::new(file.len() as u64, 4);
//! let leaves = file.chunks(4).map(HashTree::leaf_hash).collect();
//! let manifest = Manifest::new(layout, leaves, [0; 32], "\"v1\"");
//! let mut wire = BytesMut::new();
//! encode_preamble(&mut wire);
//! manifest.encode(&mut wire).unwrap();
//! for b in [2, 0, 1] {
//!     let (off, len) = (layout.offset(b) as usize, layout.block_len(b) as usize);
//!     encode_block(b, off as u64, &file[off..off + len], &mut wire);
//! }
//! encode_end(&mut wire);
//!
//! // Client: decode frames as bytes arrive, verify each block, place it by offset.
//! let mut decoder = Decoder::new();
//! let (mut got, mut manifest) = (vec![0u8; 10], None);
//! while let Some(frame) = decoder.decode(&mut wire).unwrap() {
//!     match frame {
//!         Frame::Manifest(m) => manifest = Some(m),
//!         Frame::Block(block) => {
//!             let block = manifest.as_ref().unwrap().check_block(block).unwrap();
//!             let off = block.offset() as usize;
//!             got[off..off + block.data().len()].copy_from_slice(block.data());
//!         }
//!         Frame::End => break,
//!         other => panic!("unexpected {other:?}"),
//!     }
//! }
//! decoder.finish().unwrap(); // END was seen: the download is complete
//! assert_eq!(got, file);
//! ```

mod codec;
mod frame;
mod manifest;
mod need;
mod tree;

pub use bytes::{Bytes, BytesMut};
pub use codec::{DEFAULT_MAX_MANIFEST_LEN, Decoder};
pub use frame::{
    Block, CONTENT_TYPE, ErrorCode, FRAME_HEADER_LEN, Frame, FrameType, MAX_ERROR_MESSAGE_LEN, PREAMBLE, encode_block,
    encode_block_header, encode_end, encode_error, encode_preamble,
};
pub use manifest::{MANIFEST_FIXED_LEN, MAX_BLOCK_SIZE, Manifest, VerifiedBlock};
pub use need::{MAX_NEED_LEN, MAX_SENT_NEED_LEN, NEED_HEADER, complement, format_need, parse_need};
pub use tree::{HashTree, RootBuilder, compute_root};

/// Everything that can go wrong reading the protocol. A decoder that returned
/// an error has lost its place in the stream; the connection should be dropped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    #[error("not a circus block stream: expected preamble \"CRC1\", got {found:02x?}")]
    BadPreamble { found: [u8; 4] },
    #[error("frame of type {kind} is {len} bytes long, more than the limit of {max} bytes")]
    FrameTooLarge { kind: u8, len: u32, max: u64 },
    #[error("frame of type {kind} out of order: {reason}")]
    Unexpected { kind: u8, reason: &'static str },
    #[error("malformed frame of type {kind}: {reason}")]
    BadFrame { kind: u8, reason: String },
    #[error("bad manifest: {reason}")]
    BadManifest { reason: String },
    #[error("bad block frame: {reason}")]
    BadBlock { reason: String },
    #[error("block {index} does not match its hash in the manifest")]
    CorruptBlock { index: u32 },
    #[error("stream ended before the END frame ({reason}); the download is incomplete")]
    Incomplete { reason: &'static str },
    #[error("bad Circus-Need header: {reason}")]
    BadNeed { reason: String },
}
