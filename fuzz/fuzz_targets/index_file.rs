//! The stored hash index (`CIDX0003`, `circus_store::FileIndex::decode`)
//! on untrusted bytes.
//!
//! Each input is decoded as it is, then again "repaired": the magic put
//! back, the root replaced by the root of the leaves that follow the
//! header, and the last 32 bytes by the BLAKE3 checksum of the bytes before
//! them, so that the fuzzer reaches the checks behind the hashes. The bytes
//! the repair overwrites in the checksum choose a bit to flip.
//!
//! Properties: decoding never panics; an accepted index has a consistent
//! geometry and re-encodes to exactly the input; a repaired input is
//! accepted exactly when its block size is not zero, its block count is
//! what the size and block size give, and its length is the header plus
//! one leaf per block plus the checksum; an accepted index with any one bit
//! flipped (SHA-256, version and size included) is refused.

#![no_main]

use circus_store::FileIndex;
use libfuzzer_sys::fuzz_target;

const MAGIC: &[u8; 8] = b"CIDX0003";
const HEADER: usize = 128;
const ROOT_AT: usize = 96;
const CHECKSUM: usize = 32;

fn check_accepted(bytes: &[u8]) -> bool {
    let Some(index) = FileIndex::decode(bytes) else { return false };
    assert_eq!(index.encode().as_deref(), Some(bytes), "accepted bytes re-encode differently");
    assert_eq!(index.leaves.len() as u64, index.size.div_ceil(u64::from(index.block_size)));
    assert_eq!(index.layout().blocks() as usize, index.leaves.len());
    assert_eq!(index.root, circus_proto::compute_root(&index.leaves));
    assert_eq!(index.version.map(|v| v.size), Some(index.size));
    true
}

fuzz_target!(|data: &[u8]| {
    let accepted = check_accepted(data);
    assert!(!accepted || data.starts_with(MAGIC));

    if data.len() < HEADER + CHECKSUM {
        assert!(!accepted, "{} bytes is shorter than the header and checksum", data.len());
        return;
    }
    let mut repaired = data.to_vec();
    let body = repaired.len() - CHECKSUM;
    repaired[..8].copy_from_slice(MAGIC);
    let leaves: Vec<[u8; 32]> = repaired[HEADER..body].chunks_exact(32).map(|c| c.try_into().unwrap()).collect();
    repaired[ROOT_AT..ROOT_AT + 32].copy_from_slice(&circus_proto::compute_root(&leaves));
    let checksum = blake3::hash(&repaired[..body]);
    repaired[body..].copy_from_slice(checksum.as_bytes());
    let u64_at = |i: usize| u64::from_le_bytes(repaired[i..i + 8].try_into().unwrap());
    let u32_at = |i: usize| u32::from_le_bytes(repaired[i..i + 4].try_into().unwrap());
    let (size, block_size, count) = (u64_at(8), u32_at(56), u32_at(60));
    let consistent = block_size != 0
        && u64::from(count) == size.div_ceil(u64::from(block_size))
        && repaired.len() == HEADER + 32 * count as usize + CHECKSUM;
    assert_eq!(check_accepted(&repaired), consistent, "size {size}, block size {block_size}, count {count}");

    if consistent {
        let bit = u32::from_le_bytes(data[body..body + 4].try_into().unwrap()) as usize % (8 * repaired.len());
        repaired[bit / 8] ^= 1 << (bit % 8);
        assert!(FileIndex::decode(&repaired).is_none(), "accepted with bit {bit} flipped");
    }
});
