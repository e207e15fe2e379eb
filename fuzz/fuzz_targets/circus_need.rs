//! The `Circus-Need` header: `parse_need` on untrusted text, and
//! `format_need` against its documented contract.
//!
//! Input: `[block_count: u32 LE, max_len: u16 LE, rest…]`. `rest` is parsed
//! as a header value (for a file of `block_count % (MAX_BLOCKS + 1)`
//! blocks), and also read as `(gap, run)` byte pairs that build a need set
//! to format.
//!
//! Block counts stop at [`MAX_BLOCKS`] (17 words): `parse_need` and
//! `need_set` insert a block at a time, and with counts up to 2^16 that
//! held the target near 1,500 runs a second. 1,088 blocks still reach the
//! word boundaries, indices of one to four digits (so the length
//! arithmetic meets 9/10, 99/100 and 999/1000) and, with `max_len` below
//! the exact list's length, every merging path of `format_need`. The checks
//! go a word at a time for the same reason.
//!
//! Properties: parsing never panics, an accepted value gives a set of
//! exactly `block_count` capacity that formats back to a value parsing to
//! the same set; `format_need(set, max_len)` is the exact list when that
//! fits, else at most `max_len` bytes (or the one range over the whole set
//! when even that is longer), and parses to a superset of `set` within
//! `set`'s first and last block, which formats back to that same value.

#![no_main]

use circus_core::BlockSet;
use circus_proto::{MAX_NEED_LEN, format_need, parse_need};
use libfuzzer_sys::fuzz_target;

/// The largest block count tried.
const MAX_BLOCKS: u32 = 17 * 64;

fn digits(n: u32) -> usize {
    n.to_string().len()
}

fn item_len(a: u32, b: u32) -> usize {
    if a == b { digits(a) } else { digits(a) + 1 + digits(b) }
}

fn need_set(capacity: u32, pairs: &[u8]) -> BlockSet {
    let mut set = BlockSet::new(capacity);
    let mut at = 0u32;
    for pair in pairs.chunks_exact(2) {
        at = at.saturating_add(u32::from(pair[0]));
        for _ in 0..pair[1] {
            if at >= capacity {
                return set;
            }
            set.insert(at);
            at += 1;
        }
    }
    set
}

/// The bitmap words of `set`, with their index.
fn words(set: &BlockSet) -> impl DoubleEndedIterator<Item = (u32, u64)> + '_ {
    (0..set.capacity().div_ceil(64)).map(|w| (w, set.word(w as usize)))
}

/// The lowest and highest member, if any.
fn hull(set: &BlockSet) -> Option<(u32, u32)> {
    let first = words(set).find(|&(_, w)| w != 0).map(|(i, w)| 64 * i + w.trailing_zeros())?;
    let last = words(set).rev().find(|&(_, w)| w != 0).map(|(i, w)| 64 * i + 63 - w.leading_zeros())?;
    Some((first, last))
}

fn is_subset(a: &BlockSet, b: &BlockSet) -> bool {
    words(a).all(|(i, w)| w & !b.word(i as usize) == 0)
}

fn check_format(set: &BlockSet, max_len: usize) {
    let exact = format_need(set, usize::MAX);
    let value = format_need(set, max_len);
    assert!(value.bytes().all(|b| b.is_ascii_digit() || b == b',' || b == b'-'), "{value:?}");
    let Some((first, last)) = hull(set) else {
        assert_eq!((&exact[..], &value[..]), ("", ""));
        return;
    };
    if exact.len() <= max_len {
        assert_eq!(value, exact, "the exact list fits in {max_len}");
    } else {
        assert!(value.len() <= max_len.max(item_len(first, last)), "{} bytes for a limit of {max_len}", value.len());
    }
    if value.len() > MAX_NEED_LEN {
        // Longer than any server parses: the caller asked for it.
        return;
    }
    let got = parse_need(&value, set.capacity()).unwrap_or_else(|e| panic!("{value:?} does not parse: {e}"));
    assert_eq!(got.capacity(), set.capacity());
    assert!(is_subset(set, &got), "{value:?} lost blocks");
    assert_eq!(hull(&got), Some((first, last)), "{value:?} asks for blocks outside the need");
    if value == exact {
        assert_eq!(&got, set);
    } else {
        // Merged ranges stay apart, so the coarser set's exact list is the value.
        assert_eq!(format_need(&got, usize::MAX), value);
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((head, rest)) = data.split_first_chunk::<6>() else { return };
    let capacity = u32::from_le_bytes(head[..4].try_into().unwrap()) % (MAX_BLOCKS + 1);
    let max_len = usize::from(u16::from_le_bytes([head[4], head[5]]));

    let text = String::from_utf8_lossy(rest);
    match parse_need(&text, capacity) {
        Ok(set) => {
            assert_eq!(set.capacity(), capacity);
            assert!(text.len() <= MAX_NEED_LEN);
            let exact = format_need(&set, usize::MAX);
            // Parsing the text again when it is already the exact list would
            // only repeat the work.
            if exact.len() <= MAX_NEED_LEN && exact != text {
                assert_eq!(parse_need(&exact, capacity).as_ref(), Ok(&set), "{text:?} -> {exact:?}");
            }
        }
        Err(circus_proto::ProtoError::BadNeed { .. }) => {}
        Err(other) => panic!("parse_need failed with {other:?}"),
    }

    check_format(&need_set(capacity, rest), max_len);
});
