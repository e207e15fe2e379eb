//! Small writes of an HTTP/2 connection gathered into one system call.
//!
//! The h2 crate writes and flushes each DATA frame of more than 256 bytes
//! on its own, so a connection answering a hundred 1 KiB streams made a
//! hundred writes (over TLS a hundred records), each of which woke the
//! client; nginx answers them with one. Here the small writes made during
//! one poll of the connection's task are copied into a buffer, and the
//! buffer is written when that poll ends ([`Gathering::around`]) or sooner
//! when it is full. A large write (a 16 KiB DATA frame of a big file)
//! passes straight through once what was gathered before it is out, so
//! bodies are not copied twice.
//!
//! A frame whose payload lies in a body lent by the response (a kept small
//! file, `lent`) is gathered too, its payload by reference: the frames of
//! many streams' bodies go out in one vectored write of up to
//! `MOST_GATHERED` bytes at the poll's end, not one write per 16 KiB
//! frame. A 100 KiB body took seven system calls and woke the client seven
//! times; h2load over 16 connections of 100 streams then got about 1.7
//! times the responses per second. Bodies in the block cache keep the
//! frame-by-frame path, whose payloads `sendfile` sends.
//!
//! A flush asked for inside the poll is put off to the poll's end, which
//! is a few microseconds later on the same task, and is then passed on to
//! the stream underneath; a shutdown writes what is gathered first.
//!
//! Over rustls ([`split_for_records`]) every write is gathered, large ones
//! too, and the buffer is written whenever it holds exactly four full TLS
//! records' worth. The h2 crate writes a 16 KiB DATA frame as its 9-byte
//! header and 16 KiB of data; handed to rustls as such, each frame became
//! a full record and a 9-byte one in a write of its own, and the client
//! woke for every record. Copying the frames costs less than the records,
//! system calls and wake-ups it saves, and there is no `sendfile` to keep
//! when user space encrypts.

use crate::lent::Lender;
use bytes::{Buf, Bytes, BytesMut};
use std::{
    collections::VecDeque,
    future::Future,
    io::{self, IoSlice},
    pin::Pin,
    sync::{Arc, Mutex, MutexGuard},
    task::{Context, Poll, ready},
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Writes of at least this many bytes are not copied.
const PASS_THROUGH: usize = 16 * 1024;
/// Copies gathered are written once they would grow past this: over TLS,
/// four records of 16 KiB.
const CAPACITY: usize = 64 * 1024;
/// What is gathered, lent bytes included, is written once it would grow
/// past this.
const MOST_GATHERED: usize = 256 * 1024;
/// Slices shorter than this are copied without looking for a lent body
/// holding them (frame headers, small frames).
const LOOKED_UP_FROM: usize = 512;
/// Slices per vectored write.
const SLICES: usize = 64;

/// The stream, for hyper. See [`split`].
pub(crate) struct Gathered<S>(Arc<Mutex<Shared<S>>>);

/// Writes what a poll of the connection gathered, at the poll's end.
pub(crate) struct Gathering<S>(Arc<Mutex<Shared<S>>>);

struct Shared<S> {
    io: S,
    /// What is gathered and not yet written, in order, before `copying`:
    /// copies already closed, and lent bytes.
    pieces: VecDeque<Bytes>,
    /// Copies gathered after the last piece.
    copying: BytesMut,
    /// Bytes in `pieces` and `copying`.
    pending: usize,
    /// A write error met at a poll's end, for the connection's next write.
    failed: Option<io::ErrorKind>,
    /// Every write is gathered, up to exactly `CAPACITY` (over rustls).
    whole_records: bool,
    /// Bodies whose bytes are kept by reference instead of copied.
    lender: Option<Lender>,
    /// Bytes went to `io` since its last flush.
    unflushed: bool,
}

/// The stream to hand to hyper, and what must wrap the connection's future
/// (see [`Gathering::around`]) so that gathered writes go out. Payloads
/// found in a body lent to `lender` are gathered by reference (`lent`).
pub(crate) fn split<S>(io: S, lender: Option<Lender>) -> (Gathered<S>, Gathering<S>) {
    split_with(io, false, lender)
}

/// As [`split`], for a stream that rustls encrypts: large writes are
/// gathered too, into full records (see the module's text).
pub(crate) fn split_for_records<S>(io: S, _: Option<Lender>) -> (Gathered<S>, Gathering<S>) {
    split_with(io, true, None)
}

fn split_with<S>(io: S, whole_records: bool, lender: Option<Lender>) -> (Gathered<S>, Gathering<S>) {
    let shared = Arc::new(Mutex::new(Shared {
        io,
        pieces: VecDeque::new(),
        copying: BytesMut::new(),
        pending: 0,
        failed: None,
        whole_records,
        lender,
        unflushed: false,
    }));
    (Gathered(shared.clone()), Gathering(shared))
}

fn lock<S>(shared: &Mutex<Shared<S>>) -> MutexGuard<'_, Shared<S>> {
    // Only the connection's own task takes the lock; a panic while holding
    // it ends the connection, and nothing is left half done that matters.
    shared.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl<S: AsyncWrite + Unpin> Shared<S> {
    /// Writes what is gathered: ready once all of it is in `io`.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(kind) = self.failed {
            return Poll::Ready(Err(kind.into()));
        }
        while self.pending > 0 {
            let mut slices = [IoSlice::new(&[]); SLICES];
            let mut count = 0;
            let pieces = self.pieces.iter().map(|p| &p[..]).chain(std::iter::once(&self.copying[..]));
            for piece in pieces.filter(|p| !p.is_empty()) {
                if count == SLICES {
                    break;
                }
                slices[count] = IoSlice::new(piece);
                count += 1;
            }
            let io = Pin::new(&mut self.io);
            // One slice as a plain write: rustls makes a record of each
            // slice of a vectored one.
            let n = ready!(match count {
                1 => io.poll_write(cx, &slices[0]),
                _ => io.poll_write_vectored(cx, &slices[..count]),
            })?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.consume(n);
            self.unflushed = true;
        }
        Poll::Ready(Ok(()))
    }

    /// Drops the first `n` gathered bytes, written.
    fn consume(&mut self, mut n: usize) {
        self.pending -= n;
        while n > 0 {
            match self.pieces.front_mut() {
                Some(piece) => {
                    let taken = n.min(piece.len());
                    piece.advance(taken);
                    n -= taken;
                    if piece.is_empty() {
                        self.pieces.pop_front();
                    }
                }
                None => {
                    self.copying.advance(n);
                    n = 0;
                }
            }
        }
    }

    /// Room left in the copy buffer's allocation.
    fn room(&self) -> usize {
        self.copying.capacity() - self.copying.len()
    }

    /// Writes what is gathered first when `wanted` more bytes to copy would
    /// not fit in the copy buffer (or, with `pending`, past `limit`), so
    /// that the buffer is never reallocated larger: a buffer half written
    /// at a poll's end and topped up after would otherwise grow. Once all is
    /// written, the buffer is reused from its start.
    fn poll_room(&mut self, cx: &mut Context<'_>, wanted: usize, limit: usize) -> Poll<io::Result<()>> {
        if self.pending > 0 && (self.room() < wanted || self.pending + wanted > limit) {
            ready!(self.poll_drain(cx))?;
        }
        if let Some(kind) = self.failed {
            return Poll::Ready(Err(kind.into()));
        }
        if self.pending == 0 && self.copying.capacity() < CAPACITY.max(wanted) {
            // Nothing else holds the buffer now: this takes its room back
            // (or makes it, once, rather than growing by doublings).
            self.copying.reserve(CAPACITY.max(wanted));
        }
        Poll::Ready(Ok(()))
    }

    fn copy(&mut self, bytes: &[u8]) {
        self.copying.extend_from_slice(bytes);
        self.pending += bytes.len();
    }

    /// Lent bytes, after what was copied before them.
    fn keep(&mut self, lent: Bytes) {
        if !self.copying.is_empty() {
            self.pieces.push_back(self.copying.split().freeze());
        }
        self.pending += lent.len();
        self.pieces.push_back(lent);
    }

    /// A large write, straight to `io`, until all of it is taken or `io`
    /// would block. A socket may take one slice per call (a frame's header,
    /// then its body with `sendfile`): returning after the header would
    /// bring the body back as a write of its own, small enough to copy.
    fn poll_pass_through(&mut self, cx: &mut Context<'_>, bufs: &[IoSlice<'_>]) -> Poll<io::Result<usize>> {
        let mut done = 0;
        let (mut slice, mut offset) = (0, 0);
        while slice < bufs.len() {
            let first = IoSlice::new(&bufs[slice][offset..]);
            let rest = &bufs[slice + 1..];
            let written = match rest {
                [] => Pin::new(&mut self.io).poll_write(cx, &first),
                _ if offset == 0 => Pin::new(&mut self.io).poll_write_vectored(cx, &bufs[slice..]),
                _ => Pin::new(&mut self.io).poll_write(cx, &first),
            };
            let n = match written {
                Poll::Ready(Ok(n)) if n > 0 => n,
                // What was taken is reported; the rest waits for the next call.
                _ if done > 0 => return Poll::Ready(Ok(done)),
                other => return other,
            };
            done += n;
            self.unflushed = true;
            // Past the `n` bytes taken, slice by slice.
            offset += n;
            while slice < bufs.len() && offset >= bufs[slice].len() {
                offset -= bufs[slice].len();
                slice += 1;
            }
        }
        Poll::Ready(Ok(done))
    }

    /// Over rustls: takes what fits in the buffer up to `CAPACITY`, having
    /// written a full buffer first.
    fn poll_gather_records(&mut self, cx: &mut Context<'_>, bufs: &[IoSlice<'_>]) -> Poll<io::Result<usize>> {
        // A buffer with no room left is full, written in part or not.
        ready!(self.poll_room(cx, 1, CAPACITY))?;
        let mut taken = 0;
        for b in bufs {
            let n = b.len().min(self.room()).min(CAPACITY - self.pending);
            self.copy(&b[..n]);
            taken += n;
        }
        Poll::Ready(Ok(taken))
    }

    /// Whether some slice of `bufs` may lie in a lent body.
    fn may_be_lent(&self, bufs: &[IoSlice<'_>]) -> bool {
        self.lender.is_some() && bufs.iter().any(|b| b.len() >= LOOKED_UP_FROM)
    }

    /// A write holding lent bytes: those kept by reference, the rest
    /// copied, all of it taken. `None` when none of it was lent.
    fn poll_gather_lent(&mut self, cx: &mut Context<'_>, bufs: &[IoSlice<'_>]) -> Poll<Option<io::Result<usize>>> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        // What may be copied: the slices too short to look up, and any
        // longer one not found (then written before the lookup's effects,
        // which cannot be undone by a `Pending`).
        if let Err(e) = ready!(self.poll_room(cx, total, MOST_GATHERED)) {
            return Poll::Ready(Some(Err(e)));
        }
        let lender = self.lender.clone().expect("may_be_lent");
        let found: Vec<Option<Bytes>> =
            bufs.iter().map(|b| if b.len() >= LOOKED_UP_FROM { lender.find(b) } else { None }).collect();
        if found.iter().all(Option::is_none) {
            return Poll::Ready(None);
        }
        for (b, lent) in bufs.iter().zip(found) {
            match lent {
                Some(lent) => self.keep(lent),
                None => self.copy(b),
            }
        }
        Poll::Ready(Some(Ok(total)))
    }

    fn poll_write_vectored(&mut self, cx: &mut Context<'_>, bufs: &[IoSlice<'_>]) -> Poll<io::Result<usize>> {
        if self.whole_records {
            return self.poll_gather_records(cx, bufs);
        }
        if self.may_be_lent(bufs)
            && let Some(taken) = ready!(self.poll_gather_lent(cx, bufs))
        {
            return Poll::Ready(taken);
        }
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total >= PASS_THROUGH {
            ready!(self.poll_drain(cx))?;
            return self.poll_pass_through(cx, bufs);
        }
        ready!(self.poll_room(cx, total, MOST_GATHERED))?;
        for b in bufs {
            self.copy(b);
        }
        Poll::Ready(Ok(total))
    }
}

impl<S> Gathering<S> {
    /// `connection`, with what each of its polls gathered written at the
    /// end of that poll.
    pub(crate) fn around<F: Future>(self, connection: F) -> Flushed<S, F> {
        Flushed { gathering: self, connection: Box::pin(connection) }
    }
}

/// See [`Gathering::around`].
pub(crate) struct Flushed<S, F> {
    gathering: Gathering<S>,
    connection: Pin<Box<F>>,
}

impl<S: AsyncWrite + Unpin, F: Future> Future for Flushed<S, F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let out = self.connection.as_mut().poll(cx);
        let mut shared = lock(&self.gathering.0);
        let gathered = shared.pending > 0;
        // The flushes put off during the poll reach `io` here: rustls may
        // still hold the ciphertext of what it took.
        let drained = match shared.poll_drain(cx) {
            Poll::Ready(Ok(())) if shared.unflushed => {
                let flushed = Pin::new(&mut shared.io).poll_flush(cx);
                if let Poll::Ready(Ok(())) = flushed {
                    shared.unflushed = false;
                }
                flushed
            }
            other => other,
        };
        match drained {
            // A poll that sent nothing: the connection is idle, and an idle
            // connection keeps no buffer.
            Poll::Ready(Ok(())) if !gathered => {
                shared.copying = BytesMut::new();
                shared.pieces = VecDeque::new();
                if let Some(lender) = &shared.lender {
                    lender.forget_unheld();
                }
            }
            Poll::Ready(Ok(())) | Poll::Pending => {}
            Poll::Ready(Err(e)) => {
                // The connection's next write reports it; wake it to make one.
                shared.failed = Some(e.kind());
                cx.waker().wake_by_ref();
            }
        }
        out
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Gathered<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut lock(&self.0).io).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Gathered<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        lock(&self.0).poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        lock(&self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    /// Put off to the end of the poll (see the module's text).
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        match lock(&self.0).failed {
            Some(kind) => Poll::Ready(Err(kind.into())),
            None => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut shared = lock(&self.0);
        ready!(shared.poll_drain(cx))?;
        ready!(Pin::new(&mut shared.io).poll_flush(cx))?;
        Pin::new(&mut shared.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// Records each write it takes; takes at most `room` bytes in all
    /// before it says it would block.
    #[derive(Default)]
    struct Recorder {
        writes: Vec<Vec<u8>>,
        room: Option<usize>,
        waiting: Option<std::task::Waker>,
        /// Takes vectored writes whole, and records where each slice was.
        vectored: bool,
        slices: Vec<Vec<(usize, usize)>>,
    }

    struct Socket(Arc<Mutex<Recorder>>);

    impl AsyncWrite for Socket {
        fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
            let mut r = self.0.lock().unwrap();
            let n = match r.room {
                Some(0) => {
                    r.waiting = Some(cx.waker().clone());
                    return Poll::Pending;
                }
                Some(room) => room.min(buf.len()),
                None => buf.len(),
            };
            if let Some(room) = &mut r.room {
                *room -= n;
            }
            r.writes.push(buf[..n].to_vec());
            Poll::Ready(Ok(n))
        }
        fn poll_write_vectored(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            let mut r = self.0.lock().unwrap();
            if !r.vectored {
                drop(r);
                let first = bufs.iter().find(|b| !b.is_empty()).map_or(&[][..], |b| &b[..]);
                return self.poll_write(cx, first);
            }
            let total: usize = bufs.iter().map(|b| b.len()).sum();
            let n = match r.room {
                Some(0) => {
                    r.waiting = Some(cx.waker().clone());
                    return Poll::Pending;
                }
                Some(room) => room.min(total),
                None => total,
            };
            if let Some(room) = &mut r.room {
                *room -= n;
            }
            r.slices.push(bufs.iter().map(|b| (b.as_ptr() as usize, b.len())).collect());
            r.writes.push(bufs.iter().flat_map(|b| b.iter().copied()).take(n).collect());
            Poll::Ready(Ok(n))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn recorder(room: Option<usize>) -> (Arc<Mutex<Recorder>>, Socket) {
        let r = Arc::new(Mutex::new(Recorder { room, ..Default::default() }));
        (r.clone(), Socket(r))
    }

    #[tokio::test]
    async fn small_writes_and_flushes_of_one_poll_are_one_write() {
        let (seen, io) = recorder(None);
        let (mut stream, gathering) = split(io, None);
        gathering
            .around(async {
                for i in 0..100u8 {
                    stream.write_all(&[i; 1033]).await.unwrap();
                    stream.flush().await.unwrap();
                }
            })
            .await;
        let writes = &seen.lock().unwrap().writes;
        let expected: Vec<u8> = (0..100u8).flat_map(|i| [i; 1033]).collect();
        // 100 x 1,033 bytes: one write each time 64 KiB would be passed.
        assert_eq!(writes.len(), expected.len().div_ceil(CAPACITY), "writes made: {}", writes.len());
        assert_eq!(writes.concat(), expected);
    }

    #[tokio::test]
    async fn a_large_write_follows_what_was_gathered_uncopied() {
        let (seen, io) = recorder(None);
        let (mut stream, gathering) = split(io, None);
        gathering
            .around(async {
                stream.write_all(b"head").await.unwrap();
                stream.write_all(&[7; PASS_THROUGH]).await.unwrap();
                stream.write_all(b"tail").await.unwrap();
            })
            .await;
        let writes = seen.lock().unwrap().writes.clone();
        assert_eq!(writes, vec![b"head".to_vec(), vec![7; PASS_THROUGH], b"tail".to_vec()]);
    }

    /// Over rustls, h2's DATA frames (a 9-byte header, then 16 KiB) reach
    /// the stream in writes of four full records each: no short record
    /// per frame. Only the poll's end writes a part of one.
    #[tokio::test]
    async fn over_rustls_frames_are_gathered_into_full_records() {
        let (seen, io) = recorder(None);
        let (mut stream, gathering) = split_for_records(io, None);
        let frames = 10;
        gathering
            .around(async {
                for i in 0..frames {
                    let (head, body) = ([i as u8; 9], [0xA0 | i as u8; 16 * 1024]);
                    let mut slices = [&head[..], &body[..]];
                    while slices.iter().any(|s| !s.is_empty()) {
                        let io: Vec<IoSlice> = slices.iter().map(|s| IoSlice::new(s)).collect();
                        let mut n = std::future::poll_fn(|cx| Pin::new(&mut stream).poll_write_vectored(cx, &io))
                            .await
                            .unwrap();
                        for s in &mut slices {
                            let take = n.min(s.len());
                            *s = &s[take..];
                            n -= take;
                        }
                    }
                    stream.flush().await.unwrap();
                }
            })
            .await;
        let writes = seen.lock().unwrap().writes.clone();
        let sizes: Vec<usize> = writes.iter().map(Vec::len).collect();
        let total = frames * (9 + 16 * 1024);
        let mut want = vec![CAPACITY; total / CAPACITY];
        want.push(total % CAPACITY);
        assert_eq!(sizes, want);
        let expected: Vec<u8> =
            (0..frames).flat_map(|i| [vec![i as u8; 9], vec![0xA0 | i as u8; 16 * 1024]].concat()).collect();
        assert!(writes.concat() == expected, "bytes differ");
    }

    #[tokio::test]
    async fn a_large_write_the_socket_takes_in_parts_goes_through_whole() {
        // A frame's header and its cached body in one vectored write; the
        // socket (like `SendfileStream`) takes one slice per call. The body
        // must not come back as a small write and be copied.
        let (seen, io) = recorder(None);
        let (mut stream, _gathering) = split(io, None);
        let (head, body) = ([1u8; 9], [2u8; PASS_THROUGH]);
        let slices = [IoSlice::new(&head), IoSlice::new(&body)];
        let n = std::future::poll_fn(|cx| Pin::new(&mut stream).poll_write_vectored(cx, &slices)).await.unwrap();
        assert_eq!(n, head.len() + body.len());
        assert_eq!(seen.lock().unwrap().writes, vec![head.to_vec(), body.to_vec()]);
    }

    #[tokio::test]
    async fn a_blocked_socket_gets_the_rest_when_it_has_room_again() {
        let (seen, io) = recorder(Some(10));
        let (mut stream, gathering) = split(io, None);
        let task = tokio::spawn(gathering.around(async move {
            stream.write_all(&[1; 100]).await.unwrap();
            stream.flush().await.unwrap();
            // The connection then waits for its peer, its writes unfinished.
            std::future::pending::<()>().await;
        }));
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert_eq!(seen.lock().unwrap().writes.concat().len(), 10);
        let waker = {
            let mut r = seen.lock().unwrap();
            r.room = None;
            r.waiting.take().expect("the gathered rest waits for room")
        };
        waker.wake();
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert_eq!(seen.lock().unwrap().writes.concat(), vec![1; 100]);
        task.abort();
    }

    /// Takes every write but sends only on a flush, as rustls does when
    /// the socket under it would block: the ciphertext stays queued.
    #[derive(Default)]
    struct Holding {
        held: Vec<u8>,
        sent: Vec<u8>,
    }

    struct HoldingSocket(Arc<Mutex<Holding>>);

    impl AsyncWrite for HoldingSocket {
        fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
            self.0.lock().unwrap().held.extend_from_slice(buf);
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            let mut h = self.0.lock().unwrap();
            let held = std::mem::take(&mut h.held);
            h.sent.extend_from_slice(&held);
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// The h2 crate flushes after its writes, and the flush is put off to
    /// the poll's end: there it must reach the stream underneath, or the
    /// end of a response queued in rustls waits for a write that may never
    /// come.
    #[tokio::test]
    async fn the_end_of_a_poll_flushes_the_stream_underneath() {
        for records in [false, true] {
            let holding = Arc::new(Mutex::new(Holding::default()));
            let (mut stream, gathering) = split_with(HoldingSocket(holding.clone()), records, None);
            let task = tokio::spawn(gathering.around(async move {
                stream.write_all(b"small").await.unwrap();
                stream.write_all(&[3; 100 * 1024]).await.unwrap();
                stream.flush().await.unwrap();
                // The connection then waits for its peer.
                std::future::pending::<()>().await;
            }));
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            let h = holding.lock().unwrap();
            assert_eq!(h.sent.len(), 5 + 100 * 1024, "whole records: {records}, still held: {}", h.held.len());
            task.abort();
        }
    }

    /// Writes `body` as h2 (0.4) does: DATA frames of at most 16 KiB, each
    /// a 9-byte header with the frame's first 247 bytes copied beside it
    /// (256 in all), then the rest of the frame's slice of the body, in one
    /// vectored write.
    async fn write_frames(stream: &mut Gathered<Socket>, body: &[u8], id: u8) {
        for chunk in body.chunks(16 * 1024) {
            let copied = chunk.len().min(247);
            let head = [&[id; 9][..], &chunk[..copied]].concat();
            let (mut head_left, mut chunk_left) = (&head[..], &chunk[copied..]);
            while !head_left.is_empty() || !chunk_left.is_empty() {
                let io = [IoSlice::new(head_left), IoSlice::new(chunk_left)];
                let mut n =
                    std::future::poll_fn(|cx| Pin::new(&mut *stream).poll_write_vectored(cx, &io)).await.unwrap();
                let take = n.min(head_left.len());
                head_left = &head_left[take..];
                n -= take;
                chunk_left = &chunk_left[n..];
            }
        }
    }

    /// The frames of lent bodies written in one poll go out in one write,
    /// each payload the body's own memory (not a copy) between the copied
    /// frame headers.
    #[tokio::test]
    async fn frames_of_lent_bodies_are_gathered_uncopied() {
        let (seen, io) = recorder(None);
        seen.lock().unwrap().vectored = true;
        let lender = Lender::default();
        let bodies: Vec<Bytes> = (0..2u8).map(|i| Bytes::from(vec![0xB0 | i; 100 * 1024])).collect();
        for b in &bodies {
            lender.lend(b);
        }
        let (mut stream, gathering) = split(io, Some(lender.clone()));
        gathering
            .around(async {
                for (i, b) in bodies.iter().enumerate() {
                    write_frames(&mut stream, b, i as u8).await;
                }
            })
            .await;
        let r = seen.lock().unwrap();
        assert_eq!(
            r.writes.len(),
            1,
            "one write, not one per frame: {:?}",
            r.writes.iter().map(Vec::len).collect::<Vec<_>>()
        );
        let expected: Vec<u8> = bodies.iter().enumerate().flat_map(|(i, b)| framed(b, i as u8)).collect();
        assert!(r.writes[0] == expected, "bytes differ");
        let inside = |at: usize, len: usize| {
            bodies.iter().any(|b| b.as_ptr() as usize <= at && at + len <= b.as_ptr() as usize + b.len())
        };
        let uncopied: usize = r.slices[0].iter().filter(|&&(at, len)| inside(at, len)).map(|&(_, len)| len).sum();
        assert_eq!(uncopied, 2 * (100 * 1024 - 7 * 247), "every payload byte past h2's copy sent from its body");
        assert_eq!(lender.len(), 0, "bodies sent to their end are forgotten");
    }

    /// Bodies not lent keep the old path: a full frame goes through on its
    /// own, uncopied, as it did before lending existed.
    #[tokio::test]
    async fn frames_of_bodies_not_lent_pass_through() {
        let (seen, io) = recorder(None);
        seen.lock().unwrap().vectored = true;
        let (mut stream, gathering) = split(io, Some(Lender::default()));
        let body = vec![3u8; 32 * 1024];
        gathering.around(write_frames(&mut stream, &body, 1)).await;
        assert_eq!(seen.lock().unwrap().writes.len(), 2, "a write per full frame");
    }

    /// More than a gathered write's worth of lent frames goes out in
    /// writes of at most `MOST_GATHERED`.
    #[tokio::test]
    async fn lent_frames_are_written_in_bounded_batches() {
        let (seen, io) = recorder(None);
        seen.lock().unwrap().vectored = true;
        let lender = Lender::default();
        let body = Bytes::from((0..1 << 20).map(|i: u32| (i % 253) as u8).collect::<Vec<u8>>());
        lender.lend(&body);
        let (mut stream, gathering) = split(io, Some(lender));
        gathering.around(write_frames(&mut stream, &body, 9)).await;
        let r = seen.lock().unwrap();
        assert!(
            r.writes.iter().all(|w| w.len() <= MOST_GATHERED),
            "{:?}",
            r.writes.iter().map(Vec::len).collect::<Vec<_>>()
        );
        assert!(r.writes.len() >= (1 << 20) / MOST_GATHERED);
        assert!(r.writes.concat() == framed(&body, 9), "bytes differ");
    }

    /// The frames `write_frames` writes, as the peer reads them.
    fn framed(body: &[u8], id: u8) -> Vec<u8> {
        body.chunks(16 * 1024).flat_map(|c| [vec![id; 9], c.to_vec()].concat()).collect()
    }

    /// A socket taking a few kilobytes at a time gets every gathered byte,
    /// copied and lent, once and in order; and bodies whose last frame is
    /// too short to be looked up are forgotten all the same.
    #[tokio::test]
    async fn lent_frames_survive_partial_writes_and_short_last_frames() {
        let (seen, io) = recorder(Some(3000));
        seen.lock().unwrap().vectored = true;
        let lender = Lender::default();
        let bodies: Vec<Bytes> = (0..3u32)
            .map(|i| {
                Bytes::from(
                    (0..16_384 * 3 + 100 * (i as usize + 1)).map(|j| ((j as u32 % 251) ^ i) as u8).collect::<Vec<u8>>(),
                )
            })
            .collect();
        for b in &bodies {
            lender.lend(b);
        }
        let (mut stream, gathering) = split(io, Some(lender.clone()));
        let bodies_written = bodies.clone();
        let task = tokio::spawn(gathering.around(async move {
            for (i, b) in bodies_written.iter().enumerate() {
                write_frames(&mut stream, b, i as u8).await;
            }
            // As hyper ends a connection: what is gathered goes out first.
            stream.shutdown().await.unwrap();
        }));
        // The socket takes 3,000 bytes per wake-up until all is out.
        let expected: Vec<u8> = bodies.iter().enumerate().flat_map(|(i, b)| framed(b, i as u8)).collect();
        for _ in 0..1000 {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            let waker = {
                let mut r = seen.lock().unwrap();
                r.room = Some(3000);
                r.waiting.take()
            };
            if let Some(w) = waker {
                w.wake();
            }
            if task.is_finished() && seen.lock().unwrap().writes.concat().len() == expected.len() {
                break;
            }
        }
        task.await.unwrap();
        let got = seen.lock().unwrap().writes.concat();
        assert!(got == expected, "bytes differ ({} written, {} expected)", got.len(), expected.len());
        assert_eq!(lender.len(), 0, "every body forgotten, short last frames too");
    }

    /// A buffer written in part at a poll's end is not topped up past its
    /// allocation: more writes wait for the rest to go out.
    #[tokio::test]
    async fn a_buffer_written_in_part_does_not_grow() {
        for records in [false, true] {
            let (seen, io) = recorder(Some(10_000));
            let (mut stream, gathering) = split_with(io, records, None);
            let mut gathered = gathering.around(async {
                for _ in 0..64 {
                    stream.write_all(&[1; 1000]).await.unwrap();
                }
            });
            let mut cx = Context::from_waker(std::task::Waker::noop());
            assert!(Pin::new(&mut gathered).poll(&mut cx).is_ready());
            drop(gathered);
            assert_eq!(seen.lock().unwrap().writes.concat().len(), 10_000);
            // The next poll's small writes: taken only while they fit.
            for _ in 0..64 {
                let _ = Pin::new(&mut stream).poll_write(&mut cx, &[2; 1000]);
            }
            let shared = lock(&stream.0);
            // The allocation: what is written (left behind by `advance`),
            // what is pending in it, and the room after.
            let allocation = 10_000 + shared.copying.capacity();
            assert!(allocation <= CAPACITY, "records {records}: the buffer grew to {allocation}");
            assert_eq!(shared.pending, shared.copying.len());
        }
    }

    #[tokio::test]
    async fn shutdown_writes_what_was_gathered_first() {
        let (seen, io) = recorder(None);
        let (mut stream, _gathering) = split(io, None);
        // No poll end to write it: the shutdown must.
        stream.write_all(b"last words").await.unwrap();
        assert!(seen.lock().unwrap().writes.is_empty());
        stream.shutdown().await.unwrap();
        assert_eq!(seen.lock().unwrap().writes.concat(), b"last words");
    }
}
