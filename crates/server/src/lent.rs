//! Bodies an HTTP/2 connection's responses share with its writer, so that
//! their frames can wait for one gathered write without being copied.
//!
//! The h2 crate hands each DATA frame's payload to the stream as a borrowed
//! slice, and flushes frame by frame: a 100 KiB body became seven system
//! calls, each waking the client. The writer (`gather`) can hold what it
//! takes until the connection's poll ends only if it owns it. A response
//! whose body is shared memory (a small file kept whole) lends that body
//! here before hyper sees it; the writer then finds each payload slice in
//! a lent body by its address and keeps a reference to those bytes instead
//! of a copy. A slice found inside a lent body is those very bytes, so the
//! lookup cannot send anything else.
//!
//! A body is forgotten once a slice reaching near its end is found (h2
//! copies the first bytes of a frame beside its header, and the writer
//! copies short slices without looking them up, so the last frame's slice
//! may never be looked up), and whenever no one but this registry holds it
//! any more: the store evicted it and h2 sent or dropped it (a stream reset
//! midway). So a connection never keeps a heap body alive by itself for
//! longer than until its next lend or idle moment, and at most
//! [`MOST_LENT`] bodies and [`MOST_LENT_BYTES`] are remembered at once. A
//! body pushed out or forgotten early is still sent, only not gathered.
//!
//! A body in kept-file memory (`kept_memory`) never looks unheld: `bytes`
//! cannot tell whether others hold a `Bytes` made over an owner. Such a
//! body is forgotten when found to its end, pushed out by later ones, or
//! with its connection; what connections hold of bodies the store has
//! evicted is bounded by that memory's size (twice the store's budget),
//! and once it is full, new bodies are kept on the heap.

use bytes::Bytes;
use std::{
    collections::VecDeque,
    sync::{Arc, Mutex, MutexGuard},
};

/// Bodies remembered at once per connection: above the streams a
/// connection may have open by default (`--max-streams`, 100), so that a
/// connection answering all of them at once finds each.
pub(crate) const MOST_LENT: usize = 128;

/// A body is forgotten once a found slice ends this close to its end: past
/// it, what is left is one frame whose slice may be too short to be looked
/// up (see the module's text).
const FORGET_WITHIN: usize = 1024;

/// Bytes of lent bodies remembered at once per connection.
pub(crate) const MOST_LENT_BYTES: usize = 16 << 20;

/// Bodies smaller than this are not lent: copying a few kilobytes into the
/// gathered buffer costs less than a slice of their own in the write.
pub(crate) const LENT_FROM: usize = 16 * 1024;

/// One connection's lent bodies, shared by its requests' handlers (which
/// lend) and its writer (which finds). Cloning shares them.
#[derive(Clone, Default)]
pub(crate) struct Lender(Arc<Mutex<Lent>>);

#[derive(Default)]
struct Lent {
    bodies: VecDeque<Bytes>,
    /// Their lengths' sum.
    bytes: usize,
}

impl Lent {
    fn forget(&mut self, i: usize) {
        if let Some(body) = self.bodies.remove(i) {
            self.bytes -= body.len();
        }
    }

    /// Forgets the bodies only this registry still holds.
    fn forget_unheld(&mut self) {
        let before = self.bodies.len();
        self.bodies.retain(|b| !b.is_unique());
        if self.bodies.len() != before {
            self.bytes = self.bodies.iter().map(Bytes::len).sum();
        }
        if self.bodies.is_empty() {
            self.bodies = VecDeque::new();
        }
    }
}

impl Lender {
    fn lent(&self) -> MutexGuard<'_, Lent> {
        // A panic while holding the lock leaves a list of references,
        // whole at every step: nothing to repair.
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Lends `body` for its frames to be found; too small a body is not.
    pub(crate) fn lend(&self, body: &Bytes) {
        if !(LENT_FROM..=MOST_LENT_BYTES).contains(&body.len()) {
            return;
        }
        let mut lent = self.lent();
        lent.forget_unheld();
        while lent.bodies.len() == MOST_LENT || lent.bytes + body.len() > MOST_LENT_BYTES {
            lent.forget(0);
        }
        lent.bytes += body.len();
        lent.bodies.push_back(body.clone());
    }

    /// The bytes of `slice` as a reference to the lent body holding them,
    /// if one does; a body is forgotten once its last byte is found.
    pub(crate) fn find(&self, slice: &[u8]) -> Option<Bytes> {
        if slice.is_empty() {
            return None;
        }
        let (start, end) = (slice.as_ptr() as usize, slice.as_ptr() as usize + slice.len());
        let mut lent = self.lent();
        let i = lent.bodies.iter().position(|b| {
            let at = b.as_ptr() as usize;
            at <= start && end <= at + b.len()
        })?;
        let body = &lent.bodies[i];
        let found = body.slice_ref(slice);
        if end + FORGET_WITHIN >= body.as_ptr() as usize + body.len() {
            lent.forget(i);
        }
        Some(found)
    }

    /// Forgets the bodies no one else holds any more (see the module's
    /// text): at a connection's idle moments.
    pub(crate) fn forget_unheld(&self) {
        self.lent().forget_unheld();
    }

    /// Bodies remembered now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lent().bodies.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slice_of_a_lent_body_is_found_as_those_bytes() {
        let lender = Lender::default();
        let body = Bytes::from(vec![5u8; 100 << 10]);
        lender.lend(&body);
        let middle = &body[16 << 10..32 << 10];
        let found = lender.find(middle).expect("inside the lent body");
        assert_eq!(found.as_ptr(), middle.as_ptr());
        assert_eq!(found.len(), middle.len());
        assert_eq!(lender.len(), 1, "not its end: still lent");
        // A copy of the same bytes is other memory: not found.
        let copy = middle.to_vec();
        assert!(lender.find(&copy).is_none());
        // Its last slice found, the body is forgotten.
        assert!(lender.find(&body[96 << 10..]).is_some());
        assert_eq!(lender.len(), 0);
    }

    /// A last frame of under 1 KiB may never be looked up: the slice before
    /// it ends the body's time in the registry.
    #[test]
    fn a_body_is_forgotten_once_a_slice_reaches_near_its_end() {
        let lender = Lender::default();
        let body = Bytes::from(vec![5u8; (32 << 10) + 300]);
        lender.lend(&body);
        assert!(lender.find(&body[247..16 << 10]).is_some());
        assert_eq!(lender.len(), 1);
        assert!(lender.find(&body[(16 << 10) + 247..32 << 10]).is_some());
        assert_eq!(lender.len(), 0, "300 bytes left: forgotten");
    }

    /// A body the store no longer keeps and h2 no longer holds (a stream
    /// reset midway) is not kept alive by the registry.
    #[test]
    fn bodies_no_one_else_holds_are_forgotten() {
        let lender = Lender::default();
        let held = Bytes::from(vec![1u8; 64 << 10]);
        lender.lend(&held);
        lender.lend(&Bytes::from(vec![2u8; 64 << 10]));
        assert_eq!(lender.len(), 2);
        lender.forget_unheld();
        assert_eq!(lender.len(), 1, "only the body held elsewhere stays");
        drop(held);
        let newer = Bytes::from(vec![3u8; 64 << 10]);
        lender.lend(&newer);
        assert_eq!(lender.len(), 1, "a lend first forgets the bodies no one else holds");
        assert!(lender.find(&newer[..1000]).is_some());
    }

    #[test]
    fn small_bodies_are_not_lent() {
        let lender = Lender::default();
        let body = Bytes::from(vec![1u8; LENT_FROM - 1]);
        lender.lend(&body);
        assert!(lender.find(&body[..]).is_none());
    }

    #[test]
    fn a_slice_reaching_past_a_body_is_not_found() {
        let lender = Lender::default();
        let whole = Bytes::from(vec![2u8; 64 << 10]);
        let first = whole.slice(..32 << 10);
        lender.lend(&first);
        assert!(lender.find(&whole[16 << 10..48 << 10]).is_none());
    }

    #[test]
    fn bodies_never_finished_are_pushed_out_by_newer_ones() {
        let lender = Lender::default();
        let bodies: Vec<Bytes> = (0..MOST_LENT + 10).map(|_| Bytes::from(vec![0u8; LENT_FROM])).collect();
        // (Held by `bodies` too, so no lend forgets them as unheld.)
        for b in &bodies {
            lender.lend(b);
        }
        assert_eq!(lender.len(), MOST_LENT);
        assert!(lender.find(&bodies[0][..10]).is_none(), "the oldest was pushed out");
        assert!(lender.find(&bodies[MOST_LENT + 9][..10]).is_some());
    }

    #[test]
    fn lent_bytes_are_bounded_too() {
        let lender = Lender::default();
        let big: Vec<Bytes> = (0..5).map(|_| Bytes::from(vec![0u8; MOST_LENT_BYTES / 4])).collect();
        for b in &big {
            lender.lend(b);
        }
        assert_eq!(lender.len(), 4);
        assert!(lender.find(&big[0][..10]).is_none(), "the oldest was pushed out");
        let too_big = Bytes::from(vec![0u8; MOST_LENT_BYTES + 1]);
        lender.lend(&too_big);
        assert!(lender.find(&too_big[..10]).is_none(), "never lent");
    }
}
