//! Frame types, what the decoder yields, and the encoders for every frame but
//! the manifest (see `manifest.rs`).
//!
//! A frame is `type: u8`, `len: u32` (big-endian payload length), `payload`.
//! The length comes first so a decoder can skip a type it does not know, which
//! is how later versions add frames without breaking old clients.

use crate::{Manifest, ProtoError};
use bytes::{BufMut, Bytes, BytesMut};
use circus_core::BlockLayout;
use std::fmt;

/// The media type that selects the native protocol (in `Accept`) and marks a
/// native response (in `Content-Type`).
pub const CONTENT_TYPE: &str = "application/vnd.circus.blocks";

/// The first four bytes of every stream: "CRC" and the protocol version.
pub const PREAMBLE: [u8; 4] = *b"CRC1";

/// `type` (1 byte) + `len` (4 bytes).
pub const FRAME_HEADER_LEN: usize = 5;

/// Index (4 bytes) + offset (8 bytes) at the start of a BLOCK payload.
pub(crate) const BLOCK_PREFIX_LEN: u32 = 12;

/// The longest ERROR message, in bytes; [`encode_error`] truncates to it.
/// An error is a short diagnosis, not a payload, so the decoder can afford
/// to hold a whole ERROR frame in memory.
pub const MAX_ERROR_MESSAGE_LEN: usize = 4096;

/// The frame types of protocol version 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameType {
    Manifest = 1,
    Block = 2,
    End = 3,
    Error = 4,
}

impl FrameType {
    pub fn from_u8(kind: u8) -> Option<Self> {
        Some(match kind {
            1 => Self::Manifest,
            2 => Self::Block,
            3 => Self::End,
            4 => Self::Error,
            _ => return None,
        })
    }
}

/// One decoded frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// Always the first frame (unless the first is `Error`).
    Manifest(Manifest),
    /// Geometry already checked against the manifest; the hash is not (see
    /// [`Manifest::check_block`]).
    Block(Block),
    /// Every requested block has been sent: the stream is complete.
    End,
    /// The server gave up; nothing follows.
    Error { code: ErrorCode, message: String },
    /// A frame type this version does not know, already skipped. `len` is
    /// its payload length.
    Unknown { kind: u8, len: u32 },
}

/// A block as received: where it goes and its bytes. `data` is a zero-copy
/// slice of the receive buffer and keeps that allocation alive while held;
/// write it out (or copy it) rather than keeping many blocks for long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    pub index: u32,
    pub offset: u64,
    pub data: Bytes,
}

impl Block {
    /// A block frame must say where its block is and be exactly that long;
    /// its hash is checked separately ([`Manifest::check_block`]).
    pub(crate) fn check_geometry(&self, layout: BlockLayout) -> Result<(), ProtoError> {
        let (index, offset, len) = (self.index, self.offset, self.data.len());
        let bad = |reason| Err(ProtoError::BadBlock { reason });
        if index >= layout.blocks() {
            return bad(format!("index {index} but the file has {} blocks", layout.blocks()));
        }
        if offset != layout.offset(index) {
            return bad(format!("block {index} at offset {offset}, expected {}", layout.offset(index)));
        }
        if len != layout.block_len(index) as usize {
            return bad(format!("block {index} has {len} bytes, expected {}", layout.block_len(index)));
        }
        Ok(())
    }
}

/// Why the server gave up mid-stream. Unknown codes are kept as they are;
/// treat them like [`ErrorCode::STORAGE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ErrorCode(pub u16);

impl ErrorCode {
    /// Storage failed; retrying later (with `Circus-Need`) may help.
    pub const STORAGE: Self = Self(1);
    /// The file changed under the server; start over from a fresh manifest.
    pub const FILE_CHANGED: Self = Self(2);
    /// The server is shutting down; retry (with `Circus-Need`).
    pub const SHUTTING_DOWN: Self = Self(3);

    /// Whether the blocks verified so far are still good for a resume. Only a
    /// changed file invalidates them.
    pub fn keeps_progress(self) -> bool {
        self != Self::FILE_CHANGED
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match *self {
            Self::STORAGE => "storage error",
            Self::FILE_CHANGED => "file changed",
            Self::SHUTTING_DOWN => "server shutting down",
            _ => "unknown error",
        };
        write!(f, "{name} ({})", self.0)
    }
}

pub(crate) fn put_header(kind: FrameType, len: u32, buf: &mut BytesMut) {
    buf.reserve(FRAME_HEADER_LEN);
    buf.put_u8(kind as u8);
    buf.put_u32(len);
}

/// Appends the stream preamble `CRC1`.
pub fn encode_preamble(buf: &mut BytesMut) {
    buf.extend_from_slice(&PREAMBLE);
}

/// Appends the 17-byte header of a BLOCK frame carrying `len` data bytes.
/// The caller sends the block's bytes right after it, so a block shared by
/// many clients is written to each socket without being copied.
///
/// # Panics
/// If `len` is so close to `u32::MAX` that the payload length overflows.
pub fn encode_block_header(index: u32, offset: u64, len: u32, buf: &mut BytesMut) {
    let payload = len.checked_add(BLOCK_PREFIX_LEN).expect("block too large for one frame");
    put_header(FrameType::Block, payload, buf);
    buf.put_u32(index);
    buf.put_u64(offset);
}

/// Appends a whole BLOCK frame, copying `data`: for tests and small servers.
///
/// # Panics
/// If `data` is longer than `u32::MAX - 12` bytes.
pub fn encode_block(index: u32, offset: u64, data: &[u8], buf: &mut BytesMut) {
    let len = u32::try_from(data.len()).expect("block too large for one frame");
    encode_block_header(index, offset, len, buf);
    buf.extend_from_slice(data);
}

/// Appends the END frame.
pub fn encode_end(buf: &mut BytesMut) {
    put_header(FrameType::End, 0, buf);
}

/// Appends an ERROR frame. `message` is cut to [`MAX_ERROR_MESSAGE_LEN`]
/// bytes (at a character boundary) so every decoder accepts it.
pub fn encode_error(code: ErrorCode, message: &str, buf: &mut BytesMut) {
    let mut end = message.len().min(MAX_ERROR_MESSAGE_LEN);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    let message = &message[..end];
    put_header(FrameType::Error, 2 + end as u32, buf);
    buf.put_u16(code.0);
    buf.extend_from_slice(message.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_header_is_17_bytes_then_data() {
        let mut buf = BytesMut::new();
        encode_block_header(7, 28, 4, &mut buf);
        assert_eq!(buf.len(), 17);
        assert_eq!(&buf[..], &[2, 0, 0, 0, 16, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 28]);
        let mut whole = BytesMut::new();
        encode_block(7, 28, b"abcd", &mut whole);
        buf.extend_from_slice(b"abcd");
        assert_eq!(buf, whole);
    }

    #[test]
    fn end_and_error_layouts() {
        let mut buf = BytesMut::new();
        encode_end(&mut buf);
        encode_error(ErrorCode::FILE_CHANGED, "gone", &mut buf);
        assert_eq!(&buf[..], b"\x03\0\0\0\0\x04\0\0\0\x06\0\x02gone");
    }

    #[test]
    fn long_error_message_is_cut_at_a_char_boundary() {
        let message = "é".repeat(MAX_ERROR_MESSAGE_LEN); // two bytes each
        let mut buf = BytesMut::new();
        encode_error(ErrorCode::STORAGE, &message, &mut buf);
        let text = std::str::from_utf8(&buf[FRAME_HEADER_LEN + 2..]).unwrap();
        assert_eq!(text.len(), MAX_ERROR_MESSAGE_LEN);
        assert!(ErrorCode::STORAGE.keeps_progress() && !ErrorCode::FILE_CHANGED.keeps_progress());
        assert_eq!(ErrorCode(9).to_string(), "unknown error (9)");
    }
}
