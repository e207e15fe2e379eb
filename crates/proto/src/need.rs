//! The `Circus-Need` request header: which blocks a resuming client still
//! needs, as ascending inclusive ranges, e.g. `0-99,120,200-350`.
//!
//! Ranges of block indices, not bytes, because the client's state is a block
//! bitmap and the server's scheduler wants a block set: neither side converts
//! or rounds. A dedicated header rather than `Range` keeps `Range` meaning
//! what every HTTP cache and proxy thinks it means (a 206 of those bytes, in
//! that order).

use crate::ProtoError;
use circus_core::{BlockSet, first_in};

/// The header name (HTTP header names are case-insensitive).
pub const NEED_HEADER: &str = "circus-need";

/// The longest `Circus-Need` value a server accepts, in bytes.
pub const MAX_NEED_LEN: usize = 16 * 1024;

/// The longest `Circus-Need` value a client sends: 8 KiB, half of what a
/// server parses ([`MAX_NEED_LEN`]), so that it fits in a request head
/// together with the request line and the other fields. Clients pass it to
/// [`format_need`] as `max_len`, which merges the closest ranges to fit;
/// servers size their request-head limit from it (this much, plus room for
/// everything else a request carries).
pub const MAX_SENT_NEED_LEN: usize = 8 * 1024;

/// The blocks of `0..set.capacity()` not in `set`: a client's verified
/// blocks to the need set, or a server's need set to the scheduler's `have`.
pub fn complement(set: &BlockSet) -> BlockSet {
    let mut out = BlockSet::full(set.capacity());
    for b in set.iter() {
        out.remove(b);
    }
    out
}

/// The header value asking for every block in `need`: the exact list if it
/// fits in `max_len` bytes, otherwise the closest ranges merged (smallest gap
/// first) until it fits, since receiving a few blocks twice is harmless while
/// an oversized header is refused. Never less than one range covering the
/// whole need set, even if `max_len` is smaller than that. An empty set gives
/// an empty string.
pub fn format_need(need: &BlockSet, max_len: usize) -> String {
    let runs = runs(need);
    let mut total = runs.iter().map(|&(a, b)| item_len(a, b)).sum::<usize>() + runs.len().saturating_sub(1);
    // merged[i]: the gap between runs i and i+1 is asked for too.
    let mut merged = vec![false; runs.len().saturating_sub(1)];
    if total > max_len {
        let mut gaps: Vec<(u32, usize)> = runs.windows(2).enumerate().map(|(i, w)| (w[1].0 - w[0].1, i)).collect();
        gaps.sort_unstable();
        // The group of merged runs ending at run e starts at group_start[e];
        // the one starting at s ends at group_end[s]. Only the ends are kept
        // current, which is all a merge of two neighbouring groups needs.
        let mut group_start: Vec<usize> = (0..runs.len()).collect();
        let mut group_end = group_start.clone();
        for (_, i) in gaps {
            if total <= max_len {
                break;
            }
            let (s, e) = (group_start[i], group_end[i + 1]);
            let before = item_len(runs[s].0, runs[i].1) + 1 + item_len(runs[i + 1].0, runs[e].1);
            total = total - before + item_len(runs[s].0, runs[e].1);
            (group_end[s], group_start[e]) = (e, s);
            merged[i] = true;
        }
    }
    let mut out = String::with_capacity(total);
    let mut start = 0;
    for i in 0..runs.len() {
        if merged.get(i).copied().unwrap_or(false) {
            continue;
        }
        if !out.is_empty() {
            out.push(',');
        }
        push_item(&mut out, runs[start].0, runs[i].1);
        start = i + 1;
    }
    out
}

/// The need set of a `Circus-Need` value for a file of `block_count` blocks.
/// Items are separated by commas (spaces and tabs around them are allowed,
/// nothing else), strictly ascending and non-overlapping; an index is ASCII
/// digits only (no sign, no other script's digits); an empty value needs
/// nothing.
pub fn parse_need(value: &str, block_count: u32) -> Result<BlockSet, ProtoError> {
    let bad = |reason: String| Err(ProtoError::BadNeed { reason });
    if value.len() > MAX_NEED_LEN {
        return bad(format!("{} bytes, more than the limit of {MAX_NEED_LEN}", value.len()));
    }
    let mut need = BlockSet::new(block_count);
    if ows(value).is_empty() {
        return Ok(need);
    }
    let mut next_free = 0u64; // the lowest index the next item may start at
    for (pos, item) in value.split(',').map(ows).enumerate() {
        let pos = pos + 1;
        let (a, b) = match item.split_once('-') {
            Some((a, b)) => (number(a, item, pos)?, number(b, item, pos)?),
            None => {
                let n = number(item, item, pos)?;
                (n, n)
            }
        };
        if a > b {
            return bad(format!("range {item:?} is descending"));
        }
        if u64::from(a) < next_free {
            return bad(format!("{item:?} overlaps or comes before the item preceding it; items must ascend"));
        }
        if b >= block_count {
            return bad(format!("{item:?} is past the last block (the file has {block_count} blocks)"));
        }
        for i in a..=b {
            need.insert(i);
        }
        next_free = u64::from(b) + 1;
    }
    Ok(need)
}

/// `s` without the optional whitespace (RFC 9110 OWS: spaces and tabs
/// only) around it. Not `str::trim`, which also strips Unicode spaces and
/// line breaks: those are errors, not padding.
fn ows(s: &str) -> &str {
    s.trim_matches([' ', '\t'])
}

fn need_err(reason: String) -> ProtoError {
    ProtoError::BadNeed { reason }
}

/// Only plain decimal digits: `u32::from_str` would also take `+7`.
fn number(s: &str, item: &str, pos: usize) -> Result<u32, ProtoError> {
    if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
        return Err(need_err(format!("item {pos} ({item:?}) is not a block index or a range a-b")));
    }
    s.parse().map_err(|_| need_err(format!("item {pos} ({item:?}) is too large for a block index")))
}

/// Maximal runs of consecutive members, found a 64-block word at a time.
fn runs(set: &BlockSet) -> Vec<(u32, u32)> {
    let (cap, mut from, mut out) = (set.capacity(), 0, Vec::new());
    while let Some(start) = first_in(from, cap, |w| set.word(w)) {
        let end = first_in(start, cap, |w| set.missing_word(w)).unwrap_or(cap);
        out.push((start, end - 1));
        from = end;
    }
    out
}

fn digits(n: u32) -> usize {
    n.checked_ilog10().unwrap_or(0) as usize + 1
}

fn item_len(a: u32, b: u32) -> usize {
    if a == b { digits(a) } else { digits(a) + 1 + digits(b) }
}

fn push_item(out: &mut String, a: u32, b: u32) {
    use std::fmt::Write;
    let _ = if a == b { write!(out, "{a}") } else { write!(out, "{a}-{b}") };
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn set(cap: u32, members: impl IntoIterator<Item = u32>) -> BlockSet {
        let mut s = BlockSet::new(cap);
        members.into_iter().for_each(|m| _ = s.insert(m));
        s
    }

    #[test]
    fn formats_ranges_and_singles() {
        let need = set(400, (0..=99).chain([120]).chain(200..=350));
        assert_eq!(format_need(&need, MAX_NEED_LEN), "0-99,120,200-350");
        assert_eq!(parse_need("0-99,120,200-350", 400).unwrap(), need);
        assert_eq!(parse_need(" 0-99 , 120,200-350 ", 400).unwrap(), need);
        assert_eq!(format_need(&BlockSet::new(5), 10), "");
        assert!(parse_need("", 5).unwrap().is_empty());
        assert_eq!(complement(&need).len(), 400 - need.len());
    }

    #[test]
    fn merges_closest_ranges_first() {
        // Gaps: 1 block between 2 and 4, 10 between 5 and 16, 2 between 16 and 19.
        let need = set(100, [0, 1, 2, 4, 5, 16, 19, 20]);
        assert_eq!(format_need(&need, 100), "0-2,4-5,16,19-20");
        assert_eq!(format_need(&need, 14), "0-5,16,19-20");
        assert_eq!(format_need(&need, 10), "0-5,16-20");
        assert_eq!(format_need(&need, 1), "0-20");
    }

    #[test]
    fn rejects_with_a_reason() {
        let reason = |v: &str| match parse_need(v, 10) {
            Err(ProtoError::BadNeed { reason }) => reason,
            other => panic!("{v:?} gave {other:?}"),
        };
        assert!(reason("3-1").contains("descending"));
        assert!(reason("1-3,3").contains("ascend"));
        assert!(reason("5,2").contains("ascend"));
        assert!(reason("10").contains("past the last block"));
        assert!(reason("1,,2").contains("item 2"));
        assert!(reason("1,").contains("item 2"));
        assert!(reason("+1").contains("not a block index"));
        assert!(reason("1-").contains("not a block index"));
        assert!(reason("0x1").contains("not a block index"));
        assert!(reason("99999999999").contains("too large"));
        assert!(reason(&"1".repeat(MAX_NEED_LEN + 1)).contains("limit"));
    }

    #[test]
    fn only_ascii_digits_and_optional_spaces_parse() {
        struct Case {
            value: &'static str,
            /// The need set, or `None` for a parse error.
            want: Option<&'static [u32]>,
        }
        let cases = [
            Case { value: "5", want: Some(&[5]) },
            Case { value: " 5", want: Some(&[5]) },
            Case { value: "5 ", want: Some(&[5]) },
            Case { value: "\t1-2 ,\t5", want: Some(&[1, 2, 5]) },
            Case { value: "007", want: Some(&[7]) },
            Case { value: "", want: Some(&[]) },
            Case { value: " \t", want: Some(&[]) },
            // Signs and other number syntax.
            Case { value: "+5", want: None },
            Case { value: "-5", want: None },
            Case { value: "5-+6", want: None },
            Case { value: "1_0", want: None },
            Case { value: "0x5", want: None },
            // Digits that are not ASCII: Arabic-Indic, fullwidth, superscript.
            Case { value: "\u{663}", want: None },
            Case { value: "\u{ff15}", want: None },
            Case { value: "1-\u{ff19}", want: None },
            Case { value: "\u{b2}", want: None },
            // Spaces inside an item, and whitespace that is not OWS.
            Case { value: "1 2", want: None },
            Case { value: "1 -3", want: None },
            Case { value: "1- 3", want: None },
            Case { value: "\u{a0}5", want: None },
            Case { value: "5\u{3000}", want: None },
            Case { value: "1,\u{2003}2", want: None },
            Case { value: "\u{2003}", want: None },
            Case { value: "\n5", want: None },
            Case { value: "5\r", want: None },
            Case { value: "5\x0b", want: None },
            // Empty items.
            Case { value: ",5", want: None },
            Case { value: "5,", want: None },
            Case { value: " , ", want: None },
        ];
        for Case { value, want } in cases {
            let got = parse_need(value, 10);
            match want {
                Some(members) => assert_eq!(got, Ok(set(10, members.iter().copied())), "{value:?}"),
                None => assert!(matches!(got, Err(ProtoError::BadNeed { .. })), "{value:?} gave {got:?}"),
            }
        }
    }

    #[test]
    fn a_million_scattered_blocks_fit_in_16_kib() {
        let need = set(1 << 20, (0..1 << 20).step_by(3));
        let value = format_need(&need, MAX_NEED_LEN);
        assert!(value.len() <= MAX_NEED_LEN);
        let got = parse_need(&value, 1 << 20).unwrap();
        assert!(need.iter().all(|b| got.contains(b)));
    }

    #[test]
    fn a_fragmented_need_fits_what_clients_send() {
        // Every other block of 200,000 missing: about 600 KiB as an exact list.
        let need = set(200_000, (0..200_000).step_by(2));
        assert!(format_need(&need, usize::MAX).len() > MAX_NEED_LEN);
        let value = format_need(&need, MAX_SENT_NEED_LEN);
        assert!(value.len() <= MAX_SENT_NEED_LEN, "{} bytes", value.len());
        let got = parse_need(&value, 200_000).unwrap();
        assert!(need.iter().all(|b| got.contains(b)));
    }

    proptest! {
        #[test]
        fn format_then_parse_covers_the_need(
            cap in 0u32..3000,
            members in proptest::collection::vec(0u32..3000, 0..300),
            max_len in prop_oneof![1usize..200, Just(MAX_SENT_NEED_LEN), Just(MAX_NEED_LEN)],
        ) {
            let need = set(cap, members.into_iter().filter(|&m| m < cap));
            let exact = format_need(&need, usize::MAX);
            let value = format_need(&need, max_len);
            let got = parse_need(&value, cap).unwrap();
            prop_assert!(need.iter().all(|b| got.contains(b)), "{} lost blocks", value);
            if exact.len() <= max_len {
                prop_assert_eq!(&value, &exact);
                prop_assert_eq!(got, need);
            } else {
                let (first, last) = (need.iter().next().unwrap(), need.iter().last().unwrap());
                prop_assert!(value.len() <= max_len.max(item_len(first, last)), "{} > {}", value.len(), max_len);
            }
        }
    }
}
