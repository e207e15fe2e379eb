//! The native stream decoder (`circus_proto::Decoder`) on untrusted bytes.
//!
//! Input: `[cap, k, k × u16 BE cut, stream…]`. `cap` 0 means the default
//! manifest limit, else a limit of `64 × cap` bytes; the stream is fed whole,
//! in the pieces the cuts make, and (when at most [`BYTEWISE_MAX`] bytes)
//! a byte at a time.
//!
//! Properties: every feeding yields the same frames, the same error and the
//! same end state; the buffer never grows past what was fed plus the
//! largest frame the decoder may accept at that point (so an untrusted
//! length cannot size an allocation past the cap); an error sticks; each
//! frame is exactly the bytes it was decoded from (a manifest re-encodes to
//! them); END is what makes a stream complete.

#![no_main]

use bytes::BytesMut;
use circus_core::BlockLayout;
use circus_proto::{
    DEFAULT_MAX_MANIFEST_LEN, Decoder, FRAME_HEADER_LEN, Frame, MAX_ERROR_MESSAGE_LEN, PREAMBLE, ProtoError,
    encode_block_header, encode_end,
};
use libfuzzer_sys::fuzz_target;

/// Slack for `BytesMut`'s own growth policy (it may keep a minimum
/// capacity class around after a split).
const GROWTH_SLACK: usize = 256 * 1024;

/// The longest stream also fed a byte at a time: a decode call per byte
/// took half the target's time at 512. Longer streams are split only where
/// the fuzzer's cuts say (up to 31 places, anywhere in the stream).
const BYTEWISE_MAX: usize = 64;

#[derive(Debug, PartialEq)]
struct Outcome {
    frames: Vec<Frame>,
    error: Option<ProtoError>,
    finish: Result<(), ProtoError>,
    layout: Option<BlockLayout>,
    complete: bool,
}

fn decoder(cap: u8) -> (Decoder, u32) {
    if cap == 0 {
        (Decoder::new(), DEFAULT_MAX_MANIFEST_LEN)
    } else {
        let max = u32::from(cap) * 64;
        (Decoder::with_max_manifest_len(max), max)
    }
}

/// The longest frame payload `d` may buffer next.
fn frame_limit(d: &Decoder, max_manifest: u32) -> usize {
    let block = d.layout().map_or(0, |l| l.block_size() as usize + 12);
    (max_manifest as usize).max(block).max(2 + MAX_ERROR_MESSAGE_LEN)
}

/// Feeds `stream` in the pieces between `cuts` (sorted, within bounds).
fn feed(cap: u8, stream: &[u8], cuts: &[usize]) -> Outcome {
    let (mut d, max_manifest) = decoder(cap);
    let mut buf = BytesMut::new();
    let (mut frames, mut error) = (Vec::new(), None);
    // Where the unconsumed part of `buf` starts in `stream`.
    let mut pos = 0;
    'pieces: for piece in cuts.windows(2) {
        buf.extend_from_slice(&stream[piece[0]..piece[1]]);
        let fed = piece[1];
        loop {
            let limit = frame_limit(&d, max_manifest);
            let got = d.decode(&mut buf);
            let bound = 2 * (fed + FRAME_HEADER_LEN + limit) + GROWTH_SLACK;
            assert!(buf.capacity() <= bound, "buffer of {} bytes after {fed} fed (bound {bound})", buf.capacity());
            let consumed = &stream[pos..fed - buf.len()];
            let first = pos == 0;
            pos = fed - buf.len();
            match got {
                Ok(Some(frame)) => {
                    let body = if first { consumed.strip_prefix(&PREAMBLE[..]).expect("preamble") } else { consumed };
                    check_frame(&frame, body, &d);
                    frames.push(frame);
                }
                Ok(None) => break,
                Err(e) => {
                    // A failed decoder keeps failing, whatever comes next.
                    assert_eq!(d.decode(&mut BytesMut::from(&b"\x03\0\0\0\0"[..])), Err(e.clone()));
                    error = Some(e);
                    break 'pieces;
                }
            }
        }
    }
    let finish = d.finish();
    assert_eq!(finish.is_ok(), d.is_complete(), "only END completes a stream");
    Outcome { frames, error, finish, layout: d.layout(), complete: d.is_complete() }
}

/// `body` is what the decode call that returned `frame` took off the
/// buffer (less the preamble): the whole frame, but for an unknown one,
/// whose payload is dropped as it arrives.
fn check_frame(frame: &Frame, body: &[u8], d: &Decoder) {
    let mut expected = BytesMut::new();
    match frame {
        Frame::Manifest(m) => {
            m.encode(&mut expected).expect("a decoded manifest encodes");
            assert_eq!(Some(m.layout()), d.layout());
        }
        Frame::Block(b) => {
            let layout = d.layout().expect("blocks come after the manifest");
            assert_eq!(b.offset, layout.offset(b.index));
            assert_eq!(b.data.len(), layout.block_len(b.index) as usize);
            encode_block_header(b.index, b.offset, b.data.len() as u32, &mut expected);
            expected.extend_from_slice(&b.data);
        }
        Frame::End => {
            assert!(d.is_complete());
            encode_end(&mut expected);
        }
        Frame::Error { .. } => {
            // The message was decoded leniently, so compare the length only.
            let len = u32::from_be_bytes(body[1..5].try_into().unwrap()) as usize;
            assert!((2..=2 + MAX_ERROR_MESSAGE_LEN).contains(&len));
            assert_eq!((body[0], body.len()), (4, FRAME_HEADER_LEN + len));
            return;
        }
        Frame::Unknown { kind, len } => {
            assert!(!(1..=4).contains(kind));
            assert!(body.len() <= FRAME_HEADER_LEN + *len as usize);
            return;
        }
    }
    assert_eq!(body, &expected[..], "{frame:?} is not the bytes it came from");
}

fuzz_target!(|data: &[u8]| {
    let (&cap, rest) = data.split_first().unwrap_or((&0, &[]));
    let (&k, rest) = rest.split_first().unwrap_or((&0, &[]));
    let k = usize::from(k % 32).min(rest.len() / 2);
    let (cut_bytes, stream) = rest.split_at(2 * k);
    let mut cuts: Vec<usize> =
        cut_bytes.chunks_exact(2).map(|c| usize::from(u16::from_be_bytes([c[0], c[1]])) % (stream.len() + 1)).collect();
    cuts.extend([0, stream.len()]);
    cuts.sort_unstable();

    let whole = feed(cap, stream, &[0, stream.len()]);
    assert_eq!(feed(cap, stream, &cuts), whole, "cut at {cuts:?}");
    if stream.len() <= BYTEWISE_MAX {
        let bytewise: Vec<usize> = (0..=stream.len()).collect();
        assert_eq!(feed(cap, stream, &bytewise), whole, "fed a byte at a time");
    }
});
