//! Writes the small seed corpus of every fuzz target to `corpus/<target>/`
//! (relative to the current directory; run it from `fuzz/`). Each target's
//! input layout is documented at the top of its file in `fuzz_targets/`.

use bytes::{BufMut, BytesMut};
use circus_core::BlockLayout;
use circus_proto::{
    ErrorCode, HashTree, Manifest, compute_root, encode_block, encode_end, encode_error, encode_preamble,
};
use std::{fs, io, path::Path};

/// A native stream for `file` cut in `bs`-byte blocks, sending `order`,
/// with an unknown frame after the first block when `unknown`, ending in
/// END or (when `!end`) ERROR.
fn stream(file: &[u8], bs: u32, order: &[u32], unknown: bool, end: bool) -> Vec<u8> {
    let layout = BlockLayout::new(file.len() as u64, bs);
    let leaves = file.chunks(bs as usize).map(HashTree::leaf_hash).collect();
    let manifest = Manifest::new(layout, leaves, [0x5a; 32], "\"v1\"");
    let mut wire = BytesMut::new();
    encode_preamble(&mut wire);
    manifest.encode(&mut wire).expect("a valid manifest");
    for (i, &b) in order.iter().enumerate() {
        let (off, len) = (layout.offset(b) as usize, layout.block_len(b) as usize);
        encode_block(b, off as u64, &file[off..off + len], &mut wire);
        if unknown && i == 0 {
            wire.put_u8(9);
            wire.put_u32(3);
            wire.put_slice(b"new");
        }
    }
    if end {
        encode_end(&mut wire);
    } else {
        encode_error(ErrorCode::SHUTTING_DOWN, "bye", &mut wire);
    }
    wire.to_vec()
}

/// `frame_decoder` input: manifest cap, cut points, then the stream.
fn decoder_input(cap: u8, cuts: &[u16], stream: &[u8]) -> Vec<u8> {
    let mut v = vec![cap, cuts.len() as u8];
    cuts.iter().for_each(|c| v.extend_from_slice(&c.to_be_bytes()));
    v.extend_from_slice(stream);
    v
}

/// A stored index in the `CIDX0003` layout, for a file of `data`.
fn index(data: &[u8], block_size: u32) -> Vec<u8> {
    let leaves: Vec<[u8; 32]> = data.chunks(block_size as usize).map(HashTree::leaf_hash).collect();
    let mut v = b"CIDX0003".to_vec();
    v.extend_from_slice(&(data.len() as u64).to_le_bytes());
    for (secs, nanos) in [(1_700_000_000i64, 5u32), (1_700_000_001, 6)] {
        v.extend_from_slice(&secs.to_le_bytes());
        v.extend_from_slice(&nanos.to_le_bytes());
    }
    v.extend_from_slice(&2049u64.to_le_bytes()); // device
    v.extend_from_slice(&131_077u64.to_le_bytes()); // inode
    v.extend_from_slice(&block_size.to_le_bytes());
    v.extend_from_slice(&(leaves.len() as u32).to_le_bytes());
    v.extend_from_slice(&[0x33; 32]); // SHA-256
    v.extend_from_slice(&compute_root(&leaves));
    leaves.iter().for_each(|l| v.extend_from_slice(l));
    let checksum = blake3::hash(&v);
    v.extend_from_slice(checksum.as_bytes());
    v
}

fn prefixed(prefix: &[u8], text: &str) -> Vec<u8> {
    [prefix, text.as_bytes()].concat()
}

fn need(capacity: u32, max_len: u16, text: &str) -> Vec<u8> {
    prefixed(&[&capacity.to_le_bytes()[..], &max_len.to_le_bytes()].concat(), text)
}

fn range(size: u64, lines: &str) -> Vec<u8> {
    prefixed(&size.to_le_bytes(), lines)
}

fn main() -> io::Result<()> {
    let file = b"helloworld, a file of a few blocks";
    let hex = |b: u8| format!("{b:02x}").repeat(32);
    let seeds: Vec<(&str, Vec<Vec<u8>>)> = vec![
        (
            "frame_decoder",
            vec![
                decoder_input(0, &[], &stream(file, 4, &[2, 0, 1, 8], false, true)),
                decoder_input(8, &[3, 40, 41, 200], &stream(file, 8, &[4, 1], true, false)),
                decoder_input(2, &[10], &stream(b"", 4, &[], false, true)),
                decoder_input(2, &[], &stream(b"x", 64, &[0], false, true)),
                decoder_input(0, &[], &{
                    let mut w = BytesMut::from(&b"CRC1"[..]);
                    encode_error(ErrorCode::STORAGE, "disk", &mut w);
                    w.to_vec()
                }),
            ],
        ),
        // Any bytes are a valid `arbitrary` input; these only give the
        // fuzzer something of a useful size to start from.
        ("manifest", vec![vec![], (0..=255u8).collect(), (0..96u8).map(|i| i.wrapping_mul(37)).collect()]),
        (
            "circus_need",
            vec![
                need(400, 100, "0-99,120,200-350"),
                need(10, 3, " 1-3 ,5,\t7"),
                need(1000, 8192, "0,2,4,6,8,10-20,999"),
                need(5, 0, ""),
                need(100, 14, "\x00\x03\x01\x02\x01\x0b\x01\x02\x02"),
            ],
        ),
        (
            "range_header",
            vec![
                range(100, "bytes=0-9,20-29,-5"),
                range(100, "bytes=50-59,0-9,5-19\n\"v1\"\n*\n\"x\", W/\"v1\""),
                range(0, "bytes=0-\nMon, 12 Jan 1970 13:46:40 GMT\n\n\nMon, 12 Jan 1970 13:46:40 GMT"),
                range(1 << 40, "bytes=1099511627775-,0-0\nW/\"v1\"\n\"v1\"\n\n\nSun, 11 Jan 1970 13:46:39 GMT"),
            ],
        ),
        (
            "hitlane_head",
            vec![
                b"GET /hit HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\nHEAD /a HTTP/1.1\r\nhost: [::1]:80\r\n\r\nGET /b"
                    .to_vec(),
                b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /miss HTTP/1.1\r\nHost: x\r\n\r\nGET /a HTTP/1.1\r\nHost: x\r\n\r\n"
                    .to_vec(),
                b"GET /a HTTP/1.1\r\nHost: x\r\nRange: bytes=0-0\r\n\r\n".to_vec(),
                b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n".to_vec(),
                b"GET /a HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n".to_vec(),
            ],
        ),
        (
            "state_file",
            vec![
                format!(
                    r#"{{"version":1,"url":"http://h/f","repr_sha256":"{}","protocol":"native","etag":"\"v1\"","root":"{}","sha256":"{}","file_size":10,"block_size":4,"verified_count":2,"verified":"BQ=="}}"#,
                    hex(7),
                    hex(1),
                    hex(2)
                )
                .into_bytes(),
                br#"{"version":1,"url":"http://h/f","protocol":"plain","validator":"\"e\"","total":9,"bytes_done":4}"#
                    .to_vec(),
                br#"{"version":1,"url":"http://h/f","protocol":"fresh"}"#.to_vec(),
            ],
        ),
        ("index_file", vec![index(&[7; 10_000], 4096), index(b"", 4096), index(b"one block", 65536)]),
    ];
    for (target, inputs) in seeds {
        let dir = Path::new("corpus").join(target);
        fs::create_dir_all(&dir)?;
        for (i, input) in inputs.iter().enumerate() {
            fs::write(dir.join(format!("seed-{i}")), input)?;
        }
    }
    Ok(())
}
