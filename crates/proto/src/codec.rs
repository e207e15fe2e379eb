//! The stream decoder: a state machine over a receive buffer.
//!
//! The caller appends whatever bytes the socket gave it and calls
//! [`Decoder::decode`] until it returns `Ok(None)`. The decoder looks at a
//! frame's 5-byte header first and rejects a length over its limit right
//! there, so an untrusted length never sizes an allocation or makes the
//! client wait for gigabytes it would refuse anyway. A manifest's fixed
//! part is checked as soon as it arrives, for the same reason: its fields
//! fix the payload's length, and a block larger than
//! [`MAX_BLOCK_SIZE`](crate::MAX_BLOCK_SIZE) is refused, which bounds every
//! later BLOCK frame.

use crate::frame::{BLOCK_PREFIX_LEN, Block, FRAME_HEADER_LEN, Frame, FrameType, MAX_ERROR_MESSAGE_LEN, PREAMBLE};
use crate::manifest::{Fixed, MANIFEST_FIXED_LEN};
use crate::{ErrorCode, Manifest, ProtoError};
use bytes::{Buf, BytesMut};
use circus_core::BlockLayout;

/// The default limit on a MANIFEST payload (and on a skipped unknown frame):
/// 64 MiB, a file of about two million blocks (128 GiB at 64 KiB blocks).
pub const DEFAULT_MAX_MANIFEST_LEN: u32 = 64 << 20;

/// Decodes one native response body. See the crate docs for the loop.
#[derive(Debug)]
pub struct Decoder {
    state: State,
    /// Set by the manifest; block frames are checked against it.
    layout: Option<BlockLayout>,
    max_manifest: u32,
}

#[derive(Debug, Clone)]
enum State {
    Preamble,
    Frames,
    /// Inside an unknown frame: its bytes are dropped as they arrive rather
    /// than buffered, since nobody will look at them.
    Skipping {
        kind: u8,
        len: u32,
        remaining: u32,
    },
    Ended,
    Stopped,
    /// A decode error was returned; the stream position is lost for good.
    Failed(ProtoError),
}

impl Default for Decoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Decoder {
    pub fn new() -> Self {
        Self::with_max_manifest_len(DEFAULT_MAX_MANIFEST_LEN)
    }

    /// A decoder accepting manifests (and skipping unknown frames) of up to
    /// `max` payload bytes. Raise it to fetch files of more than ~2M blocks.
    pub fn with_max_manifest_len(max: u32) -> Self {
        Self { state: State::Preamble, layout: None, max_manifest: max }
    }

    /// The file's geometry, once the manifest has been decoded.
    pub fn layout(&self) -> Option<BlockLayout> {
        self.layout
    }

    /// Whether END was decoded: the server sent everything requested.
    pub fn is_complete(&self) -> bool {
        matches!(self.state, State::Ended)
    }

    /// Call when the connection closes. Only a stream that reached END is
    /// complete; anything else (a clean close included) means resume.
    pub fn finish(&self) -> Result<(), ProtoError> {
        match &self.state {
            State::Ended => Ok(()),
            State::Stopped => Err(ProtoError::Incomplete { reason: "the server sent ERROR" }),
            State::Failed(e) => Err(e.clone()),
            State::Preamble | State::Frames | State::Skipping { .. } => {
                Err(ProtoError::Incomplete { reason: "connection closed before END" })
            }
        }
    }

    /// Consumes the next frame from the front of `buf`. `Ok(None)` means the
    /// buffer holds no whole frame yet: read more and call again. Block data
    /// is split off `buf` without copying.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, ProtoError> {
        let result = self.step(buf);
        if let Err(e) = &result {
            self.state = State::Failed(e.clone());
        }
        result
    }

    fn step(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, ProtoError> {
        loop {
            match &mut self.state {
                State::Preamble => {
                    if buf.len() < PREAMBLE.len() {
                        return Ok(None);
                    }
                    let found: [u8; 4] = buf[..4].try_into().unwrap();
                    if found != PREAMBLE {
                        return Err(ProtoError::BadPreamble { found });
                    }
                    buf.advance(PREAMBLE.len());
                    self.state = State::Frames;
                }
                State::Frames => return self.frame(buf),
                State::Skipping { kind, len, remaining } => {
                    let n = (*remaining).min(buf.len().try_into().unwrap_or(u32::MAX));
                    buf.advance(n as usize);
                    *remaining -= n;
                    if *remaining > 0 {
                        return Ok(None);
                    }
                    let frame = Frame::Unknown { kind: *kind, len: *len };
                    self.state = State::Frames;
                    return Ok(Some(frame));
                }
                State::Ended | State::Stopped => {
                    let reason = if matches!(self.state, State::Ended) { "data after END" } else { "data after ERROR" };
                    return match buf.first() {
                        None => Ok(None),
                        Some(&kind) => Err(ProtoError::Unexpected { kind, reason }),
                    };
                }
                State::Failed(e) => return Err(e.clone()),
            }
        }
    }

    fn frame(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, ProtoError> {
        if buf.len() < FRAME_HEADER_LEN {
            return Ok(None);
        }
        let kind = buf[0];
        let len = u32::from_be_bytes(buf[1..5].try_into().unwrap());
        let ty = FrameType::from_u8(kind);
        let unexpected = |reason| Err(ProtoError::Unexpected { kind, reason });
        let max = match (ty, self.layout) {
            (Some(FrameType::Manifest), Some(_)) => return unexpected("second MANIFEST"),
            (Some(FrameType::Manifest), None) => u64::from(self.max_manifest),
            (Some(FrameType::Error), _) => 2 + MAX_ERROR_MESSAGE_LEN as u64,
            (_, None) => return unexpected("the first frame must be MANIFEST (or ERROR)"),
            (Some(FrameType::Block), Some(layout)) => u64::from(layout.block_size()) + u64::from(BLOCK_PREFIX_LEN),
            (Some(FrameType::End), Some(_)) => 0,
            (None, Some(_)) => u64::from(self.max_manifest),
        };
        if u64::from(len) > max {
            return Err(ProtoError::FrameTooLarge { kind, len, max });
        }
        match ty {
            Some(FrameType::Block) if len < BLOCK_PREFIX_LEN => {
                return Err(ProtoError::BadBlock { reason: format!("payload of {len} bytes has no index and offset") });
            }
            Some(FrameType::Error) if len < 2 => {
                return Err(ProtoError::BadFrame { kind, reason: format!("ERROR payload of {len} bytes has no code") });
            }
            None => {
                buf.advance(FRAME_HEADER_LEN);
                self.state = State::Skipping { kind, len, remaining: len };
                return self.step(buf);
            }
            Some(FrameType::Manifest) if len as usize >= MANIFEST_FIXED_LEN => {
                // The fixed part says how long the payload must be: check it
                // before waiting for (and reserving room for) the rest.
                let Some(fixed) = buf.get(FRAME_HEADER_LEN..FRAME_HEADER_LEN + MANIFEST_FIXED_LEN) else {
                    return Ok(None);
                };
                Fixed::check(fixed, u64::from(len))?;
            }
            _ => {}
        }
        let total = FRAME_HEADER_LEN + len as usize;
        if buf.len() < total {
            // `len` passed the limit above, so this reservation is bounded;
            // it saves regrowing the buffer while a big frame trickles in.
            buf.reserve(total - buf.len());
            return Ok(None);
        }
        buf.advance(FRAME_HEADER_LEN);
        let frame = match ty {
            Some(FrameType::Manifest) => {
                let manifest = Manifest::decode(&buf.split_to(len as usize))?;
                self.layout = Some(manifest.layout());
                Frame::Manifest(manifest)
            }
            Some(FrameType::Block) => {
                let index = buf.get_u32();
                let offset = buf.get_u64();
                let data = buf.split_to((len - BLOCK_PREFIX_LEN) as usize).freeze();
                let block = Block { index, offset, data };
                block.check_geometry(self.layout.expect("checked above"))?;
                Frame::Block(block)
            }
            Some(FrameType::End) => {
                self.state = State::Ended;
                Frame::End
            }
            Some(FrameType::Error) => {
                let code = ErrorCode(buf.get_u16());
                // A garbled message should not hide the code, so be lenient.
                let message = String::from_utf8_lossy(&buf.split_to(len as usize - 2)).into_owned();
                self.state = State::Stopped;
                Frame::Error { code, message }
            }
            None => unreachable!("unknown frames are skipped above"),
        };
        Ok(Some(frame))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{HashTree, encode_block, encode_end, encode_error, encode_preamble};
    use bytes::{BufMut, Bytes};
    use proptest::prelude::*;

    /// A stream over `file` sending `order`, with unknown frames spliced in
    /// before the frames at the given positions, ending in END or ERROR.
    /// Returns the bytes and the frames a decoder must yield.
    fn stream(file: &[u8], bs: u32, order: &[u32], unknown: &[(usize, u8, u8)], end: bool) -> (BytesMut, Vec<Frame>) {
        let layout = BlockLayout::new(file.len() as u64, bs);
        let manifest =
            Manifest::new(layout, file.chunks(bs as usize).map(HashTree::leaf_hash).collect(), [1; 32], "\"e\"");
        let (mut wire, mut frames) = (BytesMut::new(), vec![Frame::Manifest(manifest.clone())]);
        encode_preamble(&mut wire);
        manifest.encode(&mut wire).unwrap();
        for (i, &b) in order.iter().enumerate() {
            for &(_, kind, len) in unknown.iter().filter(|u| u.0 == i) {
                wire.put_u8(kind);
                wire.put_u32(len.into());
                wire.put_bytes(0xaa, len.into());
                frames.push(Frame::Unknown { kind, len: len.into() });
            }
            let (off, len) = (layout.offset(b), layout.block_len(b));
            let data = Bytes::copy_from_slice(&file[off as usize..][..len as usize]);
            encode_block(b, off, &data, &mut wire);
            frames.push(Frame::Block(Block { index: b, offset: off, data }));
        }
        if end {
            encode_end(&mut wire);
            frames.push(Frame::End);
        } else {
            encode_error(ErrorCode::SHUTTING_DOWN, "bye", &mut wire);
            frames.push(Frame::Error { code: ErrorCode::SHUTTING_DOWN, message: "bye".into() });
        }
        (wire, frames)
    }

    /// Feeds `wire` in pieces cut at `cuts`, collecting every frame.
    fn feed(wire: &[u8], cuts: &[usize]) -> (Decoder, Result<Vec<Frame>, ProtoError>) {
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (wire.len() + 1)).collect();
        cuts.extend([0, wire.len()]);
        cuts.sort_unstable();
        let (mut decoder, mut buf, mut frames) = (Decoder::new(), BytesMut::new(), vec![]);
        for piece in cuts.windows(2) {
            buf.extend_from_slice(&wire[piece[0]..piece[1]]);
            loop {
                match decoder.decode(&mut buf) {
                    Ok(Some(frame)) => frames.push(frame),
                    Ok(None) => break,
                    Err(e) => return (decoder, Err(e)),
                }
            }
        }
        (decoder, Ok(frames))
    }

    fn one_shot(wire: &[u8]) -> Result<Vec<Frame>, ProtoError> {
        feed(wire, &[]).1
    }

    fn header(kind: u8, len: u32) -> Vec<u8> {
        let mut v = PREAMBLE.to_vec();
        v.push(kind);
        v.extend_from_slice(&len.to_be_bytes());
        v
    }

    #[test]
    fn oversized_lengths_are_rejected_from_the_header_alone() {
        for (kind, len) in [(1, u32::MAX), (1, DEFAULT_MAX_MANIFEST_LEN + 1), (4, 2 + MAX_ERROR_MESSAGE_LEN as u32 + 1)]
        {
            let mut buf = BytesMut::from(&header(kind, len)[..]);
            let err = Decoder::new().decode(&mut buf).unwrap_err();
            assert!(matches!(err, ProtoError::FrameTooLarge { .. }), "{err}");
            assert!(buf.capacity() < 1024, "allocated {} bytes for a rejected frame", buf.capacity());
        }
        // A block frame longer than block_size + 12 is refused before its data arrives.
        let (mut wire, _) = stream(b"abcdefgh", 4, &[], &[], true);
        wire.truncate(wire.len() - FRAME_HEADER_LEN);
        wire.put_u8(2);
        wire.put_u32(17);
        assert_eq!(one_shot(&wire), Err(ProtoError::FrameTooLarge { kind: 2, len: 17, max: 16 }));
    }

    /// A MANIFEST frame written field by field, so a test can send what
    /// [`Manifest::encode`] refuses to produce.
    fn raw_manifest(file_size: u64, block_size: u32, leaves: &[[u8; 32]], claimed_len: Option<u32>) -> Vec<u8> {
        let etag = b"\"e\"";
        let len = crate::MANIFEST_FIXED_LEN + etag.len() + 32 * leaves.len();
        let mut v = PREAMBLE.to_vec();
        v.push(1);
        v.extend_from_slice(&claimed_len.unwrap_or(len as u32).to_be_bytes());
        v.extend_from_slice(&file_size.to_be_bytes());
        v.extend_from_slice(&block_size.to_be_bytes());
        v.extend_from_slice(&(leaves.len() as u32).to_be_bytes());
        v.extend_from_slice(&crate::compute_root(leaves));
        v.extend_from_slice(&[0; 32]);
        v.extend_from_slice(&(etag.len() as u16).to_be_bytes());
        v.extend_from_slice(etag);
        leaves.iter().for_each(|l| v.extend_from_slice(l));
        v
    }

    #[test]
    fn block_size_over_the_limit_is_refused_before_any_block() {
        let leaves = [HashTree::leaf_hash(b"a"), HashTree::leaf_hash(b"b")];
        for block_size in [u32::MAX, crate::MAX_BLOCK_SIZE + 1] {
            // A consistent manifest, but blocks that would each be buffered
            // whole: gigabytes on the say-so of the server.
            let wire = raw_manifest(2 * u64::from(block_size), block_size, &leaves, None);
            let err = one_shot(&wire).unwrap_err();
            assert!(
                matches!(&err, ProtoError::BadManifest { reason } if reason.contains("block size")),
                "{block_size}: {err}"
            );
        }
        // At the limit the manifest is fine, and a block frame one byte
        // longer than a block is refused from its header.
        let max = crate::MAX_BLOCK_SIZE;
        let mut wire = raw_manifest(2 * u64::from(max), max, &leaves, None);
        wire.push(2);
        wire.extend_from_slice(&(max + BLOCK_PREFIX_LEN + 1).to_be_bytes());
        let (mut d, mut buf) = (Decoder::new(), BytesMut::from(&wire[..]));
        assert!(matches!(d.decode(&mut buf), Ok(Some(Frame::Manifest(_)))));
        assert!(matches!(d.decode(&mut buf), Err(ProtoError::FrameTooLarge { kind: 2, .. })));
    }

    #[test]
    fn manifest_fields_are_checked_before_the_leaves_arrive() {
        let leaves = [HashTree::leaf_hash(b"a")];
        let cases: [(&str, u64, u32, Option<u32>); 3] = [
            // The frame claims 64 MiB of leaves, the fixed part one block.
            ("a length the fields do not describe", 1, 1, Some(DEFAULT_MAX_MANIFEST_LEN)),
            ("a count the geometry does not have", 5, 1, None),
            ("a block over the limit", 1, u32::MAX, None),
        ];
        for (what, file_size, block_size, claimed) in cases {
            let wire = raw_manifest(file_size, block_size, &leaves, claimed);
            // Only the preamble, the header and the fixed part: no leaves yet.
            let head = 4 + FRAME_HEADER_LEN + crate::MANIFEST_FIXED_LEN;
            let mut buf = BytesMut::from(&wire[..head]);
            let err = Decoder::new().decode(&mut buf);
            assert!(matches!(err, Err(ProtoError::BadManifest { .. })), "{what}: {err:?}");
            assert!(buf.capacity() < 4096, "{what}: reserved {} bytes", buf.capacity());
        }
        // A manifest that is merely incomplete waits without reserving the
        // whole claimed length before its fixed part is known to be sane.
        let wire = raw_manifest(1, 1, &leaves, None);
        let mut buf = BytesMut::from(&wire[..4 + FRAME_HEADER_LEN + 10]);
        assert_eq!(Decoder::new().decode(&mut buf), Ok(None));
    }

    #[test]
    fn order_rules() {
        let (wire, _) = stream(b"abcdefgh", 4, &[1], &[], true);
        let manifest_end = 4 + FRAME_HEADER_LEN + 82 + 3 + 64;
        let err = |e: Result<Vec<Frame>, ProtoError>| e.unwrap_err().to_string();
        assert!(err(one_shot(b"CRC2")).contains("preamble"));
        // BLOCK straight after the preamble; a second MANIFEST.
        let no_manifest = [&wire[..4], &wire[manifest_end..]].concat();
        assert!(err(one_shot(&no_manifest)).contains("must be MANIFEST"));
        let twice = [&wire[..manifest_end], &wire[4..]].concat();
        assert!(err(one_shot(&twice)).contains("second MANIFEST"));
        // Anything after END.
        let after = [&wire[..], &[3, 0, 0, 0, 0]].concat();
        assert!(err(one_shot(&after)).contains("after END"));
        // ERROR may come first: the server failed before it had a manifest.
        let mut early = BytesMut::from(&PREAMBLE[..]);
        encode_error(ErrorCode::STORAGE, "disk", &mut early);
        assert_eq!(one_shot(&early).unwrap(), vec![Frame::Error { code: ErrorCode::STORAGE, message: "disk".into() }]);
        // A failed decoder keeps failing.
        let mut d = Decoder::new();
        let mut buf = BytesMut::from(&b"XXXX"[..]);
        let first = d.decode(&mut buf).unwrap_err();
        assert_eq!(d.decode(&mut BytesMut::from(&wire[..])), Err(first.clone()));
        assert_eq!(d.finish(), Err(first));
    }

    #[test]
    fn block_geometry_is_checked() {
        let (wire, _) = stream(b"abcdefghij", 4, &[], &[], true);
        let body = &wire[..wire.len() - FRAME_HEADER_LEN];
        let with = |index, offset, data: &[u8]| {
            let mut w = BytesMut::from(body);
            encode_block(index, offset, data, &mut w);
            one_shot(&w).unwrap_err().to_string()
        };
        assert!(with(3, 12, b"").contains("has 3 blocks"));
        assert!(with(1, 5, b"efgh").contains("expected 4"));
        assert!(with(2, 8, b"ijk").contains("has 3 bytes, expected 2"));
        assert!(with(2, 8, b"").contains("has 0 bytes"));
    }

    #[test]
    fn unknown_frames_are_skipped_without_buffering() {
        let (wire, frames) = stream(b"abcdefgh", 4, &[0, 1], &[(1, 200, 0), (1, 9, 100)], true);
        assert_eq!(one_shot(&wire).unwrap(), frames);
        // Fed a byte at a time, the skipped payload never piles up in the buffer.
        let cuts: Vec<usize> = (0..wire.len()).collect();
        assert_eq!(feed(&wire, &cuts).1.unwrap(), frames);
    }

    #[test]
    fn corrupted_block_decodes_but_fails_verification() {
        let (mut wire, _) = stream(b"abcdefgh", 4, &[1], &[], true);
        let last_data_byte = wire.len() - FRAME_HEADER_LEN - 1;
        wire[last_data_byte] ^= 0x20;
        let frames = one_shot(&wire).unwrap();
        let (Frame::Manifest(m), Frame::Block(b)) = (&frames[0], &frames[1]) else { panic!("{frames:?}") };
        assert!(!m.verify(1, &b.data));
        assert_eq!(m.check_block(b.clone()), Err(ProtoError::CorruptBlock { index: 1 }));
        assert_eq!(frames[2], Frame::End, "a corrupt block does not desynchronise the stream");
    }

    #[test]
    fn empty_file_is_manifest_then_end() {
        let (wire, frames) = stream(b"", 4, &[], &[], true);
        assert_eq!(one_shot(&wire).unwrap(), frames);
        assert_eq!(wire.len(), 4 + FRAME_HEADER_LEN + 82 + 3 + FRAME_HEADER_LEN);
    }

    /// File bytes, block size, blocks sent, unknown frames, END (else ERROR).
    type Plan = (Vec<u8>, u32, Vec<u32>, Vec<(usize, u8, u8)>, bool);

    fn arb_stream() -> impl Strategy<Value = Plan> {
        (proptest::collection::vec(any::<u8>(), 0..400), 1u32..70).prop_flat_map(|(file, bs)| {
            let blocks = file.len().div_ceil(bs as usize) as u32;
            let order =
                if blocks == 0 { Just(vec![]).boxed() } else { proptest::collection::vec(0..blocks, 0..12).boxed() };
            let unknown = proptest::collection::vec((0usize..12, 5u8.., any::<u8>()), 0..3);
            (Just(file), Just(bs), order, unknown, any::<bool>())
        })
    }

    proptest! {
        #[test]
        fn any_chunking_yields_the_same_frames(
            (file, bs, order, unknown, end) in arb_stream(),
            cuts in proptest::collection::vec(any::<usize>(), 0..20),
        ) {
            let (wire, frames) = stream(&file, bs, &order, &unknown, end);
            let (decoder, got) = feed(&wire, &cuts);
            prop_assert_eq!(got.unwrap(), frames);
            prop_assert_eq!(decoder.finish().is_ok(), end);
        }

        #[test]
        fn truncated_stream_never_yields_end(
            (file, bs, order, unknown, _) in arb_stream(),
            cut in any::<usize>(),
            pieces in proptest::collection::vec(any::<usize>(), 0..8),
        ) {
            let (wire, _) = stream(&file, bs, &order, &unknown, true);
            let cut = cut % wire.len(); // strictly shorter than the whole stream
            let (decoder, got) = feed(&wire[..cut], &pieces);
            prop_assert!(!got.unwrap().contains(&Frame::End));
            prop_assert!(!decoder.is_complete());
            prop_assert!(
                matches!(decoder.finish(), Err(ProtoError::Incomplete { .. })),
                "finish must report an incomplete stream"
            );
        }
    }
}
