//! What the driver has handed to one download and its connection has not
//! sent yet. Unlike a channel, the driver can take blocks back: when a
//! connection stops taking them, the blocks still waiting are returned to
//! the scheduler and the download is parked, instead of pinning cache
//! memory until the client reads again or is cut. The blocks the connection
//! holds (given to hyper, not yet written to the socket) cannot be taken
//! back; they are detached instead: the scheduler counts them as sent, and
//! the connection gives their bytes back to a detached-memory count, which
//! has its own cap, when hyper is done with them. The connection resumes
//! the download the next time it asks for a block and finds none.

use crate::activity::Activity;
use bytes::Bytes;
use circus_core::BlockIdx;
use circus_sched::FailReason;
use std::{
    collections::VecDeque,
    ops::Range,
    sync::{Arc, Mutex, MutexGuard},
    task::{Context, Poll, Waker},
};

/// How a download ends.
#[derive(Debug, Clone)]
pub enum End {
    /// Every block was handed over.
    Complete,
    /// The download cannot continue; the reason says why and whose fault.
    Failed(FailReason),
    /// The driver stopped (the server is shutting down).
    Stopped,
}

/// What the connection gets next.
#[derive(Debug)]
pub enum Next {
    /// A resident block: the bytes are shared with the cache, not copied.
    Block(BlockIdx, Bytes),
    End(End),
    /// The download was parked and the connection wants blocks again: it
    /// must tell the driver, then poll again.
    Resume,
}

#[derive(Debug)]
struct Inner {
    /// In the order the driver handed them over.
    blocks: VecDeque<(BlockIdx, Bytes)>,
    end: Option<End>,
    parked: bool,
    waker: Option<Waker>,
    /// Blocks the connection took (given to hyper) and has not yet
    /// reported sent, and their length in bytes.
    held: Range<BlockIdx>,
    held_bytes: u64,
    /// Bytes of held blocks the driver detached: the connection reports
    /// them as no longer held rather than as sent.
    detached: u64,
}

/// What `take_back` took: blocks returned to the scheduler, and held
/// blocks detached (counted sent).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct TakenBack {
    pub returned: Vec<BlockIdx>,
    pub detached: Range<BlockIdx>,
}

/// What the connection reports once hyper asks for more: the held blocks
/// went to the socket (`sent`), or were detached and `detached` bytes are
/// no longer held.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Released {
    pub sent: Range<BlockIdx>,
    pub detached: u64,
}

/// Shared by the driver (which puts) and the connection (which takes).
#[derive(Debug)]
pub struct Mailbox {
    inner: Mutex<Inner>,
    /// The connection, to cut when it stops reading while holding blocks
    /// that cannot be detached.
    connection: Option<Arc<Activity>>,
}

impl Mailbox {
    /// The address of the client whose download this is, when known.
    pub(crate) fn peer(&self) -> Option<std::net::SocketAddr> {
        self.connection.as_ref().and_then(|c| c.peer())
    }

    pub(crate) fn new(connection: Option<Arc<Activity>>) -> Arc<Self> {
        let inner = Mutex::new(Inner {
            blocks: VecDeque::new(),
            end: None,
            parked: false,
            waker: None,
            held: 0..0,
            held_bytes: 0,
            detached: 0,
        });
        Arc::new(Mailbox { inner, connection })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Nothing panics while holding it; a poisoned lock still holds
        // consistent data.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Closes the connection: the blocks it holds are needed back and
    /// cannot be detached. Returns whether there was a connection to cut.
    pub fn cut(&self) -> bool {
        self.connection.as_ref().inspect(|c| c.cut()).is_some()
    }

    fn wake(mut inner: MutexGuard<'_, Inner>) {
        let waker = inner.waker.take();
        drop(inner);
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// The driver hands over a block.
    pub fn put(&self, block: BlockIdx, bytes: Bytes) {
        let mut inner = self.lock();
        inner.blocks.push_back((block, bytes));
        Self::wake(inner);
    }

    /// The driver ends the download; blocks already handed over are still
    /// taken first. The first end stands.
    pub fn end(&self, end: End) {
        let mut inner = self.lock();
        inner.end.get_or_insert(end);
        Self::wake(inner);
    }

    /// Blocks waiting to be taken.
    pub fn waiting(&self) -> usize {
        self.lock().blocks.len()
    }

    /// Whether the connection holds blocks it has not reported sent.
    pub fn holds(&self) -> bool {
        !self.lock().held.is_empty()
    }

    /// The driver takes back every block not yet taken and parks the
    /// download. The blocks the connection holds are detached if `detach`
    /// agrees to their byte count.
    pub fn take_back(&self, detach: impl FnOnce(u64) -> bool) -> TakenBack {
        let mut inner = self.lock();
        inner.parked = true;
        let returned = inner.blocks.drain(..).map(|(b, _)| b).collect();
        let mut detached = 0..0;
        if !inner.held.is_empty() && detach(inner.held_bytes) {
            detached = std::mem::replace(&mut inner.held, 0..0);
            inner.detached += std::mem::take(&mut inner.held_bytes);
        }
        TakenBack { returned, detached }
    }

    /// The connection took `blocks` (`bytes` long) to send. The blocks it
    /// held before must have been released.
    pub fn hold(&self, blocks: Range<BlockIdx>, bytes: u64) {
        let mut inner = self.lock();
        debug_assert!(inner.held.is_empty(), "held blocks not released");
        inner.held = blocks;
        inner.held_bytes = bytes;
    }

    /// The connection is done with what it held.
    pub fn release(&self) -> Released {
        let mut inner = self.lock();
        inner.held_bytes = 0;
        Released { sent: std::mem::replace(&mut inner.held, 0..0), detached: std::mem::take(&mut inner.detached) }
    }

    /// Block `want` if it is here and `accept` takes it.
    pub fn try_take(&self, want: BlockIdx, accept: impl FnOnce(&Bytes) -> bool) -> Option<Bytes> {
        let mut inner = self.lock();
        let i = inner.blocks.iter().position(|&(b, _)| b == want)?;
        if !accept(&inner.blocks[i].1) {
            return None;
        }
        inner.blocks.remove(i).map(|(_, data)| data)
    }

    /// Block `want` (or the oldest), else the end once every block is
    /// taken, else `Resume` if the download is parked, else pending.
    pub fn poll_next(&self, cx: &mut Context<'_>, want: Option<BlockIdx>) -> Poll<Next> {
        let mut inner = self.lock();
        let i = match want {
            None => (!inner.blocks.is_empty()).then_some(0),
            Some(w) => inner.blocks.iter().position(|&(b, _)| b == w),
        };
        if let Some((b, bytes)) = i.and_then(|i| inner.blocks.remove(i)) {
            // The connection is running: a put meanwhile needs no wake-up.
            inner.waker = None;
            return Poll::Ready(Next::Block(b, bytes));
        }
        // A failure ends an in-order download even with later blocks here.
        let ends_now = inner.blocks.is_empty() || matches!(inner.end, Some(End::Failed(_) | End::Stopped));
        if let Some(end) = inner.end.clone().filter(|_| ends_now) {
            return Poll::Ready(Next::End(end));
        }
        if inner.parked {
            inner.parked = false;
            return Poll::Ready(Next::Resume);
        }
        inner.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

/// The driver's side: when it drops (the download is forgotten, or the
/// driver stopped) without having ended the download, the connection sees
/// `Stopped`.
#[derive(Debug)]
pub struct Sender(pub Arc<Mailbox>);

impl Drop for Sender {
    fn drop(&mut self) {
        self.0.end(End::Stopped);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Waker;

    fn poll(m: &Mailbox, want: Option<BlockIdx>) -> Poll<Next> {
        m.poll_next(&mut Context::from_waker(Waker::noop()), want)
    }

    #[test]
    fn blocks_then_end_then_stopped_only_if_never_ended() {
        let m = Mailbox::new(None);
        let tx = Sender(m.clone());
        m.put(3, Bytes::from_static(b"c"));
        m.put(1, Bytes::from_static(b"a"));
        tx.0.end(End::Complete);
        assert!(matches!(poll(&m, Some(1)), Poll::Ready(Next::Block(1, _))));
        assert!(matches!(poll(&m, Some(2)), Poll::Pending), "the end waits for the blocks still here");
        assert!(matches!(poll(&m, None), Poll::Ready(Next::Block(3, _))));
        drop(tx);
        assert!(matches!(poll(&m, None), Poll::Ready(Next::End(End::Complete))));
        let m = Mailbox::new(None);
        drop(Sender(m.clone()));
        assert!(matches!(poll(&m, None), Poll::Ready(Next::End(End::Stopped))));
    }

    #[test]
    fn taking_back_parks_until_the_connection_asks_again() {
        let m = Mailbox::new(None);
        m.put(5, Bytes::from_static(b"e"));
        m.put(6, Bytes::from_static(b"f"));
        m.hold(3..5, 2000);
        assert_eq!(m.take_back(|_| false), TakenBack { returned: vec![5, 6], detached: 0..0 });
        assert_eq!(m.waiting(), 0);
        assert!(m.holds(), "not detached: still held");
        assert_eq!(m.take_back(|bytes| bytes == 2000), TakenBack { returned: vec![], detached: 3..5 });
        assert!(!m.holds());
        assert_eq!(m.release(), Released { sent: 0..0, detached: 2000 });
        m.hold(7..8, 10);
        assert_eq!(m.release(), Released { sent: 7..8, detached: 0 });
        assert!(matches!(poll(&m, None), Poll::Ready(Next::Resume)));
        assert!(matches!(poll(&m, None), Poll::Pending), "resumed once");
        m.put(5, Bytes::from_static(b"e"));
        assert!(m.try_take(5, |_| false).is_none());
        assert!(m.try_take(5, |_| true).is_some());
    }
}
