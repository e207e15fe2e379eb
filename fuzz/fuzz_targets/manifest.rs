//! MANIFEST frames, structure-aware: a manifest described field by field
//! is encoded (`Manifest::encode`), optionally damaged, and decoded by the
//! stream decoder.
//!
//! Properties: `encode` writes a frame exactly when the manifest is
//! representable (and nothing otherwise); an undamaged frame decodes to
//! the very manifest encoded; a damaged one is refused, or waits for more
//! bytes, or decodes to a manifest that re-encodes to exactly the bytes
//! the decoder consumed.

#![no_main]

use arbitrary::Arbitrary;
use bytes::BytesMut;
use circus_proto::{Decoder, Frame, MAX_BLOCK_SIZE, Manifest, PREAMBLE, encode_end};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
struct Input {
    /// Block size before being folded into `1..=MAX_BLOCK_SIZE` (unless
    /// `raw` keeps it as it is).
    block_size: u32,
    /// Length of the last block before being folded into `1..=block_size`.
    last_block_len: u32,
    /// One per block, so these fix the file's length with the two above.
    leaves: Vec<[u8; 32]>,
    sha256: [u8; 32],
    etag: String,
    /// Use `block_size` and `file_size` as given, leaves regardless: a
    /// manifest `encode` may have to refuse.
    raw: Option<u64>,
    /// Whether END follows the manifest.
    end: bool,
    mutations: Vec<Mutation>,
}

#[derive(Debug, Arbitrary)]
enum Mutation {
    /// XOR a byte of the frame (the preamble excluded) with a mask.
    Flip { at: u32, mask: u8 },
    /// Overwrite a big-endian u32 (a length or a count, say).
    Set32 { at: u32, value: u32 },
    /// Cut the wire after this many bytes.
    Truncate { at: u32 },
    /// Insert a byte.
    Insert { at: u32, byte: u8 },
}

fn manifest(input: &Input) -> Manifest {
    let root = circus_proto::compute_root(&input.leaves);
    let mut m = Manifest {
        file_size: 0,
        block_size: input.block_size,
        root,
        sha256: input.sha256,
        etag: input.etag.clone(),
        leaves: input.leaves.clone(),
    };
    match input.raw {
        Some(file_size) => m.file_size = file_size,
        None => {
            let bs = input.block_size % MAX_BLOCK_SIZE + 1;
            let n = input.leaves.len() as u64;
            m.block_size = bs;
            m.file_size = n.saturating_sub(1) * u64::from(bs) + u64::from(input.last_block_len % bs + 1) * n.min(1);
            assert_eq!(u64::from(m.layout().blocks()), n);
            assert_eq!(Manifest::new(m.layout(), m.leaves.clone(), m.sha256, m.etag.clone()), m);
        }
    }
    m
}

fn representable(m: &Manifest) -> bool {
    (1..=MAX_BLOCK_SIZE).contains(&m.block_size)
        && m.file_size.div_ceil(u64::from(m.block_size)) == m.leaves.len() as u64
        && m.etag.len() <= usize::from(u16::MAX)
        && m.encoded_len() <= u64::from(u32::MAX)
}

/// Every frame `wire` decodes to, whole, with the bytes each consumed, and
/// the error that stopped it if one did.
fn decode(wire: &[u8]) -> (Vec<(Frame, Vec<u8>)>, Option<circus_proto::ProtoError>) {
    let mut d = Decoder::new();
    let mut buf = BytesMut::from(wire);
    let mut out = Vec::new();
    loop {
        let before = wire.len() - buf.len();
        match d.decode(&mut buf) {
            Ok(Some(frame)) => out.push((frame, wire[before..wire.len() - buf.len()].to_vec())),
            Ok(None) => return (out, None),
            Err(e) => return (out, Some(e)),
        }
    }
}

fuzz_target!(|input: Input| {
    let m = manifest(&input);
    let mut wire = BytesMut::from(&PREAMBLE[..]);
    let encoded = m.encode(&mut wire);
    assert_eq!(encoded.is_ok(), representable(&m), "{m:?}");
    let Ok(()) = encoded else {
        assert_eq!(&wire[..], &PREAMBLE[..], "a refused manifest wrote bytes");
        return;
    };
    assert_eq!(wire.len() as u64, 4 + 5 + m.encoded_len());
    let frame_len = wire.len() - 4;
    if input.end {
        encode_end(&mut wire);
    }

    if input.mutations.is_empty() {
        let (frames, error) = decode(&wire);
        assert_eq!(error, None);
        assert_eq!(frames[0].0, Frame::Manifest(m.clone()), "round trip");
        assert_eq!(frames[0].1, wire[..4 + frame_len], "the manifest frame is consumed whole");
        assert_eq!(frames.len(), 1 + usize::from(input.end));
        return;
    }

    let mut wire = wire.to_vec();
    for mutation in &input.mutations {
        // The preamble is the decoder's first check, not the manifest's.
        let len = wire.len();
        let at = |at: u32| 4 + at as usize % (len - 4 + 1);
        match *mutation {
            Mutation::Flip { at: i, mask } => {
                let i = at(i);
                if let Some(b) = wire.get_mut(i) {
                    *b ^= mask;
                }
            }
            Mutation::Set32 { at: i, value } => {
                let i = at(i);
                if let Some(slot) = wire.get_mut(i..i + 4) {
                    slot.copy_from_slice(&value.to_be_bytes());
                }
            }
            Mutation::Truncate { at: i } => wire.truncate(at(i)),
            Mutation::Insert { at: i, byte } => wire.insert(at(i), byte),
        }
    }
    let (frames, _error) = decode(&wire);
    if let Some((Frame::Manifest(got), consumed)) = frames.first() {
        let mut again = BytesMut::from(&PREAMBLE[..]);
        got.encode(&mut again).expect("a decoded manifest encodes");
        assert_eq!(&again[..], &consumed[..], "a decoded manifest is not the bytes it came from");
        assert_eq!(got.root, circus_proto::compute_root(&got.leaves));
    }
});
