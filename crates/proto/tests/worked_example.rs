//! The worked example of `docs/protocol.md`, section 8, rebuilt with the
//! codec and compared byte for byte, so that neither the document nor the
//! code can drift from the other unnoticed.

use circus_core::BlockLayout;
use circus_proto::{
    BytesMut, Decoder, Frame, HashTree, Manifest, compute_root, encode_block, encode_end, encode_preamble,
};

/// The example body, copied from the document's hex dump.
const EXAMPLE_HEX: &str = concat!(
    "43524331",
    "01000000b6",
    "000000000000000a",
    "00000004",
    "00000003",
    "ab4e87b519f671576f30de2f9e5a67915702035b4884d875f2330bcc270b501e",
    "936a185caaa266bb9cbe981e9e05cb78cd732b0b3280eb944412bb6f8f8f07af",
    "0004",
    "22763122",
    "edfe6cb7c2af1eeba46bb302ba764edaee45de616772437c588ea1cd2478a47d",
    "2940350c12155583428ae52e88c1ef239aae0e0e243b56abe252901920a87a2c",
    "883c27c1222076fcc73fd0cc86fb5e86f80827f5d67c88631990536042a504df",
    "020000000e",
    "00000002",
    "0000000000000008",
    "6c64",
    "0200000010000000000000000000000000",
    "68656c6c",
    "0200000010000000010000000000000004",
    "6f776f72",
    "0300000000",
);

const FILE: &[u8] = b"helloworld";
const SHA256: &str = "936a185caaa266bb9cbe981e9e05cb78cd732b0b3280eb944412bb6f8f8f07af";

fn example() -> (Manifest, BytesMut) {
    let layout = BlockLayout::new(FILE.len() as u64, 4);
    let leaves = FILE.chunks(4).map(HashTree::leaf_hash).collect();
    let sha256 = hex::decode(SHA256).unwrap().try_into().unwrap();
    let manifest = Manifest::new(layout, leaves, sha256, "\"v1\"");
    let mut wire = BytesMut::new();
    encode_preamble(&mut wire);
    manifest.encode(&mut wire).unwrap();
    for b in [2, 0, 1] {
        let (off, len) = (layout.offset(b), layout.block_len(b) as usize);
        encode_block(b, off, &FILE[off as usize..][..len], &mut wire);
    }
    encode_end(&mut wire);
    (manifest, wire)
}

/// `hexdump -C` style, as pasted in the document.
fn dump(bytes: &[u8]) -> String {
    let mut out = String::new();
    for (i, line) in bytes.chunks(16).enumerate() {
        let hex: Vec<String> = line.iter().map(|b| format!("{b:02x}")).collect();
        let (left, right) = hex.split_at(hex.len().min(8));
        let ascii: String =
            line.iter().map(|&c| if c.is_ascii_graphic() || c == b' ' { c as char } else { '.' }).collect();
        out += &format!("{:04x}  {:<23}  {:<23}  |{ascii}|\n", i * 16, left.join(" "), right.join(" "));
    }
    out
}

#[test]
fn codec_reproduces_the_example_bytes() {
    let (_, wire) = example();
    assert_eq!(hex::encode(&wire), EXAMPLE_HEX);
    assert_eq!(wire.len(), 257);
}

#[test]
fn example_decodes_and_verifies() {
    let (manifest, mut wire) = example();
    let mut decoder = Decoder::new();
    let mut file = vec![0u8; FILE.len()];
    let mut order = vec![];
    while let Some(frame) = decoder.decode(&mut wire).unwrap() {
        match frame {
            Frame::Manifest(m) => assert_eq!(m, manifest),
            Frame::Block(block) => {
                let block = manifest.check_block(block).unwrap();
                order.push(block.index());
                let off = block.offset() as usize;
                file[off..off + block.data().len()].copy_from_slice(block.data());
            }
            Frame::End => {}
            other => panic!("unexpected frame {other:?}"),
        }
    }
    decoder.finish().unwrap();
    assert_eq!((order, &file[..]), (vec![2, 0, 1], FILE));
}

#[test]
fn document_matches_the_code() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/protocol.md");
    let doc = std::fs::read_to_string(path).expect("docs/protocol.md");
    let (manifest, wire) = example();
    assert!(doc.contains(&dump(&wire)), "hex dump in section 8 differs from the codec's output:\n{}", dump(&wire));

    let leaves = manifest.leaves.clone();
    // (first cell of the row in section 5, value)
    let vectors = [
        ("`root([])`", compute_root(&[])),
        ("`leaf(\"hell\")`", leaves[0]),
        ("`leaf(\"owor\")`", leaves[1]),
        ("`leaf(\"ld\")`", leaves[2]),
        ("`node(leaf0, leaf1)`", compute_root(&leaves[..2])),
        ("root = `node(node(leaf0, leaf1), leaf2)`", manifest.root),
    ];
    for (name, hash) in vectors {
        let row = format!("| {name} | `{}` |", hex::encode(hash));
        assert!(doc.contains(&row), "test vector row missing or wrong in section 5: {row}");
    }
}
