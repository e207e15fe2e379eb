//! The stored hash index (`CIDX0002`, `circus_store::FileIndex::decode`)
//! on untrusted bytes.
//!
//! Each input is decoded as it is, then again "repaired": the magic put
//! back and the root replaced by the root of the leaves that follow the
//! header, so that the fuzzer reaches the checks behind the hash.
//!
//! Properties: decoding never panics; an accepted index has a consistent
//! geometry and re-encodes to exactly the input; a repaired input is
//! accepted exactly when its block size is not zero, its block count is
//! what the size and block size give, and its length is the header plus
//! one leaf per block.

#![no_main]

use circus_store::FileIndex;
use libfuzzer_sys::fuzz_target;

const MAGIC: &[u8; 8] = b"CIDX0002";
const HEADER: usize = 128;
const ROOT_AT: usize = 96;

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

    if data.len() < HEADER {
        assert!(!accepted, "{} bytes is shorter than the header", data.len());
        return;
    }
    let mut repaired = data.to_vec();
    repaired[..8].copy_from_slice(MAGIC);
    let leaves: Vec<[u8; 32]> = repaired[HEADER..].chunks_exact(32).map(|c| c.try_into().unwrap()).collect();
    repaired[ROOT_AT..ROOT_AT + 32].copy_from_slice(&circus_proto::compute_root(&leaves));
    let u64_at = |i: usize| u64::from_le_bytes(repaired[i..i + 8].try_into().unwrap());
    let u32_at = |i: usize| u32::from_le_bytes(repaired[i..i + 4].try_into().unwrap());
    let (size, block_size, count) = (u64_at(8), u32_at(56), u32_at(60));
    let consistent = block_size != 0
        && u64::from(count) == size.div_ceil(u64::from(block_size))
        && repaired.len() == HEADER + 32 * count as usize;
    assert_eq!(check_accepted(&repaired), consistent, "size {size}, block size {block_size}, count {count}");
});
