//! A TCP stream that sends cache-arena and kept-file bytes with `sendfile(2)`.
//!
//! hyper and the hit lane write response bodies as the very
//! [`bytes::Bytes`] the body yielded, through vectored writes. This wrapper
//! looks at each slice they pass: when it lies in [`Sendable`] memory (the
//! block cache's [`Arena`], or the pages of a kept file's body), the same
//! bytes go out with `sendfile` from that memory's memfd (no copy into the
//! socket buffer); anything else (response heads, frame headers, heap
//! blocks) goes out with an ordinary `writev`. The bytes on the wire are
//! identical either way.
//!
//! It replays the request bytes the hit lane read before it handed the
//! connection over (`with_unread`), and gives hyper one extra wake-up after a flush when request bytes
//! are waiting, which keeps pipelined connections from stalling (see
//! `poll_flush`). It keeps the socket's send mark, and its cork, where the
//! connection's response asks (`send_mark`).

use crate::{
    arena::Arena,
    kept_memory::KeptMemory,
    send_mark::{self, Mark},
};
use bytes::Bytes;
use std::{
    io::{self, IoSlice},
    os::fd::BorrowedFd,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll, ready},
};
use tokio::{
    io::{AsyncRead, AsyncWrite, Interest, ReadBuf},
    net::TcpStream,
};

/// The memory whose bytes go out with `sendfile`; without any, every
/// write is an ordinary one.
#[derive(Debug, Clone, Default)]
pub struct Sendable {
    /// The block cache's.
    pub blocks: Option<Arc<Arena>>,
    /// Kept files' bodies (see `kept_memory`).
    pub kept: Option<Arc<KeptMemory>>,
}

impl Sendable {
    /// The memfd `bytes` lie in and where, when they are sendable memory.
    fn locate(&self, bytes: &[u8]) -> Option<(BorrowedFd<'_>, u64)> {
        if let Some(blocks) = &self.blocks
            && let Some(at) = blocks.locate(bytes)
        {
            return Some((blocks.memfd(), at));
        }
        let kept = self.kept.as_ref()?;
        Some((kept.memfd(), kept.locate(bytes)?))
    }
}

#[derive(Debug)]
pub struct SendfileStream {
    inner: TcpStream,
    memory: Sendable,
    /// Bytes went out since the last flush (see `poll_flush`).
    wrote: bool,
    /// Read from the socket by the hit lane, not yet by hyper.
    unread: Bytes,
    /// Stamped on every byte read or written, for the watchdog.
    activity: Option<Arc<crate::activity::Activity>>,
    /// The send mark last asked for (see `send_mark`).
    mark: Mark,
    /// The TCP_NOTSENT_LOWAT the socket has; 0, the system default, until
    /// a mark is asked for.
    applied: u32,
    /// Whether the socket is corked (see `send_mark`).
    corked: bool,
    /// Writes since a paced mark was last brought up to date.
    writes: u32,
    /// The delivery rate a paced mark follows.
    rate: send_mark::HeldRate,
}

/// A paced mark is brought up to date with the connection's delivery rate
/// once every this many writes (one `getsockopt` each time).
const PACE_EVERY_WRITES: u32 = 8;

impl SendfileStream {
    pub fn new(inner: TcpStream, memory: Sendable) -> Self {
        SendfileStream {
            inner,
            memory,
            wrote: false,
            unread: Bytes::new(),
            activity: None,
            mark: Mark::default(),
            applied: 0,
            corked: false,
            writes: 0,
            rate: send_mark::HeldRate::default(),
        }
    }

    /// Stamps `activity` on every byte read or written, and follows the
    /// send mark it asks for from the next write on.
    pub fn with_activity(self, activity: Arc<crate::activity::Activity>) -> Self {
        SendfileStream { activity: Some(activity), ..self }
    }

    /// Reads yield `unread` before anything from the socket.
    pub fn with_unread(self, unread: Bytes) -> Self {
        SendfileStream { unread, ..self }
    }

    /// Sets the mark `wanted` asks for when it changes, and while it is
    /// paced raises it as its pace asks ([`send_mark::paced`]) every
    /// [`PACE_EVERY_WRITES`] write attempts (changes under an eighth are
    /// not worth a system call).
    fn follow_mark(&mut self, wanted: Mark) {
        let wanted = wanted.corked(false);
        let target = if wanted != self.mark {
            self.mark = wanted;
            self.writes = 0;
            self.rate = send_mark::HeldRate::default();
            wanted.floor
        } else if wanted.is_paced() {
            self.writes += 1;
            if self.writes < PACE_EVERY_WRITES {
                return;
            }
            self.writes = 0;
            let Some(mut sample) = send_mark::pace_sample(&self.inner) else { return };
            sample.delivery_rate = self.rate.sample(sample.delivery_rate, std::time::Instant::now());
            let target = send_mark::paced(wanted.floor, wanted.pace, sample);
            if target.abs_diff(self.applied) <= self.applied / 8 {
                return;
            }
            target
        } else {
            return;
        };
        if target != self.applied && send_mark::apply(&self.inner, target) {
            self.applied = target;
        }
    }

    /// Corks the socket when the response asks for it and it is not.
    fn cork_if_asked(&mut self, wanted: Mark) {
        if wanted.cork && !self.corked && send_mark::apply_cork(&self.inner, true) {
            self.corked = true;
        }
    }

    /// Uncorks the socket, sending what the cork held, when the response
    /// no longer asks for it. Called on flush: hyper flushes only once all
    /// it queued is written, so the body's last frame has gone out whole
    /// under the cork (a last frame can be a run of megabytes, written in
    /// many calls). Also before a read, as a response is over by the time
    /// hyper reads the next request. While a corked body waits for its
    /// next block, the last one's remainder (less than a segment) waits
    /// with it, at most the kernel's 200 ms.
    fn uncork_unless_asked(&mut self) {
        let wanted = self.activity.as_ref().is_some_and(|a| a.send_mark().cork);
        if self.corked && !wanted {
            // A failure leaves it corked: the kernel sends what it holds
            // within 200 ms anyway.
            self.corked = !send_mark::apply_cork(&self.inner, false);
        }
    }

    /// Runs `send` (a system call on the socket) once the socket has room,
    /// again after each `EAGAIN`.
    pub(crate) fn poll_write_io<R>(
        &self,
        cx: &mut Context<'_>,
        mut send: impl FnMut() -> io::Result<R>,
    ) -> Poll<io::Result<R>> {
        loop {
            ready!(self.inner.poll_write_ready(cx))?;
            match self.inner.try_io(Interest::WRITABLE, &mut send) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                other => return Poll::Ready(other),
            }
        }
    }

    fn poll_sendfile(
        &self,
        cx: &mut Context<'_>,
        memfd: BorrowedFd<'_>,
        mut offset: u64,
        len: usize,
    ) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.inner.poll_write_ready(cx))?;
            let sent = self
                .inner
                .try_io(Interest::WRITABLE, || Ok(rustix::fs::sendfile(&self.inner, memfd, Some(&mut offset), len)?));
            match sent {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                other => return Poll::Ready(other),
            }
        }
    }

    /// Heap bytes that sendable bytes follow (a response head before its
    /// body): sent with `MSG_MORE`, so the kernel holds them until the
    /// `sendfile` right after joins them in one segment, as nginx's
    /// `tcp_nopush` does. A head sent alone costs a packet of its own, and
    /// on loopback a receive path too.
    fn poll_send_more(&self, cx: &mut Context<'_>, bufs: &[IoSlice<'_>]) -> Poll<io::Result<usize>> {
        use rustix::net::{SendAncillaryBuffer, SendFlags, sendmsg};
        loop {
            ready!(self.inner.poll_write_ready(cx))?;
            let sent = self.inner.try_io(Interest::WRITABLE, || {
                let flags = SendFlags::MORE | SendFlags::NOSIGNAL;
                Ok(sendmsg(&self.inner, bufs, &mut SendAncillaryBuffer::default(), flags)?)
            });
            match sent {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                other => return Poll::Ready(other),
            }
        }
    }

    /// One write: a `sendfile` of the first slice when it is sendable
    /// memory, else the heap slices up to the next sendable slice (see
    /// [`Self::poll_send_more`]), or all of them with `writev`.
    fn write_vectored(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[IoSlice<'_>]) -> Poll<io::Result<usize>> {
        let bufs = &bufs[bufs.iter().take_while(|b| b.is_empty()).count()..];
        let this = &*self;
        if let Some(first) = bufs.first() {
            if let Some((memfd, offset)) = this.memory.locate(first) {
                return this.poll_sendfile(cx, memfd, offset, first.len());
            }
            // Heads and other heap bytes up to the next sendable slice.
            let plain = bufs.iter().take_while(|b| this.memory.locate(b).is_none()).count();
            if plain < bufs.len() {
                return this.poll_send_more(cx, &bufs[..plain]);
            }
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
}

impl AsyncRead for SendfileStream {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if !self.unread.is_empty() {
            let n = self.unread.len().min(buf.remaining());
            buf.put_slice(&self.unread.split_to(n));
            if self.unread.is_empty() {
                // An empty slice would still hold the lane's whole buffer.
                self.unread = Bytes::new();
            }
            return Poll::Ready(Ok(()));
        }
        // hyper may go on to the next request without a flush (after
        // reading a request body late): a response that ended has let go of
        // the cork by then, and what it held must not wait for the next one.
        self.uncork_unless_asked();
        let before = buf.filled().len();
        let read = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before
            && let Some(a) = &self.activity
        {
            a.read();
        }
        read
    }
}

/// The socket, for setting up kernel TLS on it (see `ktls_stream`).
impl std::os::fd::AsRawFd for SendfileStream {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.inner.as_raw_fd()
    }
}

/// What the `ktls` crate's record-aligned reads wait on during a handshake.
impl ktls::AsyncReadReady for SendfileStream {
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.unread.is_empty() {
            return Poll::Ready(Ok(()));
        }
        self.inner.poll_read_ready(cx)
    }
}

impl AsyncWrite for SendfileStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if let Some(wanted) = self.activity.as_ref().map(|a| a.send_mark()) {
            self.cork_if_asked(wanted);
            self.follow_mark(wanted);
        }
        let written = self.as_mut().write_vectored(cx, bufs);
        if matches!(written, Poll::Ready(Ok(n)) if n > 0) {
            self.wrote = true;
            if let Some(a) = &self.activity {
                a.wrote();
            }
        }
        written
    }

    /// Always: hyper must hand over body bytes as they are (not flattened
    /// into its own buffer) for the sendable check to see them.
    fn is_write_vectored(&self) -> bool {
        true
    }

    /// After a flush that sent bytes, a connection with request bytes
    /// waiting is woken once more. hyper (1.12) does not read while it
    /// writes a response; when a pipelined request's bytes arrive during
    /// that time and the end of an earlier one is already buffered, the
    /// wake-up is spent and, once the response ends, nothing polls the
    /// socket again: the connection stalls with the request unread (seen
    /// with 50 connections x 8 pipelined requests for 1 KiB files). The
    /// extra wake lets hyper, now between messages, read it. Only after
    /// bytes were written, so a response waiting for its next block does
    /// not spin.
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.uncork_unless_asked();
        ready!(Pin::new(&mut self.inner).poll_flush(cx))?;
        if std::mem::take(&mut self.wrote) && self.inner.poll_read_ready(cx).is_ready() {
            cx.waker().wake_by_ref();
        }
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::send_mark::Pace;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A loopback connection, and a task that reads all it receives.
    async fn connected_to_a_reader() -> (TcpStream, tokio::task::JoinHandle<Vec<u8>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let reader = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut all = Vec::new();
            s.read_to_end(&mut all).await.unwrap();
            all
        });
        (TcpStream::connect(addr).await.unwrap(), reader)
    }

    #[tokio::test]
    async fn mixed_heap_arena_and_kept_slices_arrive_in_order() {
        let arena = Arena::new(1 << 20, 2, None).unwrap();
        let kept = KeptMemory::new(1 << 20).unwrap();
        let block: Vec<u8> = (0..(1 << 20)).map(|i| (i % 253) as u8).collect();
        let cached = arena.store(&block).unwrap();
        let body = kept.store(&block[..100_000]).unwrap();
        let (conn, reader) = connected_to_a_reader().await;
        let mut out = SendfileStream::new(conn, Sendable { blocks: Some(arena), kept: Some(kept) });
        let (head, between, tail) = (b"head:".to_vec(), b":between:".to_vec(), b":tail".to_vec());
        let run = cached.slice(100..);
        let mut parts = [&head[..], &run[..], &between[..], &body[..], &tail[..]];
        // A vectored write loop like hyper's: advance past what was taken.
        while parts.iter().any(|p| !p.is_empty()) {
            let slices: Vec<IoSlice> = parts.iter().map(|p| IoSlice::new(p)).collect();
            let mut n = std::future::poll_fn(|cx| Pin::new(&mut out).poll_write_vectored(cx, &slices)).await.unwrap();
            for p in &mut parts {
                let take = n.min(p.len());
                *p = &p[take..];
                n -= take;
            }
        }
        out.shutdown().await.unwrap();
        let got = reader.await.unwrap();
        let want = [&head[..], &block[100..], &between[..], &block[..100_000], &tail[..]].concat();
        assert_eq!(got.len(), want.len());
        assert!(got == want, "bytes differ");
    }

    #[tokio::test]
    async fn a_paced_mark_rises_to_the_slack_of_the_delivery_rate_and_a_fixed_one_stays() {
        let (conn, reader) = connected_to_a_reader().await;
        let activity = crate::activity::Activity::new(None);
        let mut out = SendfileStream::new(conn, Sendable::default()).with_activity(activity.clone());
        let mark = |out: &SendfileStream| socket2::SockRef::from(&out.inner).tcp_notsent_lowat().unwrap();
        let chunk = vec![1u8; 64 << 10];
        activity.want_send_mark(Mark { floor: 16 << 10, pace: Pace::Slack, cork: false });
        for _ in 0..4 * PACE_EVERY_WRITES {
            out.write_all(&chunk).await.unwrap();
        }
        // Loopback delivers gigabytes a second: 100 ms of that is past the
        // largest paced mark.
        assert!(mark(&out) > 16 << 10, "a paced mark stayed at {}", mark(&out));
        activity.want_send_mark(Mark { floor: 16 << 10, pace: Pace::Fixed, cork: false });
        for _ in 0..4 * PACE_EVERY_WRITES {
            out.write_all(&chunk).await.unwrap();
        }
        assert_eq!(mark(&out), 16 << 10, "a fixed mark moved");
        out.shutdown().await.unwrap();
        assert_eq!(reader.await.unwrap().len(), 8 * PACE_EVERY_WRITES as usize * chunk.len());
    }
}
