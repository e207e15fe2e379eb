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

use std::{
    future::Future,
    io::{self, IoSlice},
    pin::Pin,
    sync::{Arc, Mutex, MutexGuard},
    task::{Context, Poll, ready},
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Writes of at least this many bytes are not copied.
const PASS_THROUGH: usize = 16 * 1024;
/// What is gathered is written once it would grow past this: over TLS,
/// four records of 16 KiB.
const CAPACITY: usize = 64 * 1024;

/// The stream, for hyper. See [`split`].
pub(crate) struct Gathered<S>(Arc<Mutex<Shared<S>>>);

/// Writes what a poll of the connection gathered, at the poll's end.
pub(crate) struct Gathering<S>(Arc<Mutex<Shared<S>>>);

struct Shared<S> {
    io: S,
    buf: Vec<u8>,
    /// How much of `buf` is already written.
    written: usize,
    /// A write error met at a poll's end, for the connection's next write.
    failed: Option<io::ErrorKind>,
    /// Every write is gathered, up to exactly `CAPACITY` (over rustls).
    whole_records: bool,
    /// Bytes went to `io` since its last flush.
    unflushed: bool,
}

/// The stream to hand to hyper, and what must wrap the connection's future
/// (see [`Gathering::around`]) so that gathered writes go out.
pub(crate) fn split<S>(io: S) -> (Gathered<S>, Gathering<S>) {
    split_with(io, false)
}

/// As [`split`], for a stream that rustls encrypts: large writes are
/// gathered too, into full records (see the module's text).
pub(crate) fn split_for_records<S>(io: S) -> (Gathered<S>, Gathering<S>) {
    split_with(io, true)
}

fn split_with<S>(io: S, whole_records: bool) -> (Gathered<S>, Gathering<S>) {
    let shared =
        Arc::new(Mutex::new(Shared { io, buf: Vec::new(), written: 0, failed: None, whole_records, unflushed: false }));
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
        while self.written < self.buf.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.buf[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
            self.unflushed = true;
        }
        self.buf.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
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
        if self.buf.len() >= CAPACITY {
            ready!(self.poll_drain(cx))?;
        }
        if let Some(kind) = self.failed {
            return Poll::Ready(Err(kind.into()));
        }
        if self.buf.capacity() == 0 {
            self.buf.reserve_exact(CAPACITY);
        }
        let mut taken = 0;
        for b in bufs {
            let n = b.len().min(CAPACITY - self.buf.len());
            self.buf.extend_from_slice(&b[..n]);
            taken += n;
        }
        Poll::Ready(Ok(taken))
    }

    fn poll_write_vectored(&mut self, cx: &mut Context<'_>, bufs: &[IoSlice<'_>]) -> Poll<io::Result<usize>> {
        if self.whole_records {
            return self.poll_gather_records(cx, bufs);
        }
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total >= PASS_THROUGH {
            ready!(self.poll_drain(cx))?;
            return self.poll_pass_through(cx, bufs);
        }
        if self.buf.len() + total > CAPACITY {
            ready!(self.poll_drain(cx))?;
        }
        if let Some(kind) = self.failed {
            return Poll::Ready(Err(kind.into()));
        }
        if self.buf.capacity() == 0 {
            // Once, rather than growing by doublings through a batch.
            self.buf.reserve_exact(CAPACITY);
        }
        for b in bufs {
            self.buf.extend_from_slice(b);
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
        let gathered = !shared.buf.is_empty();
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
            Poll::Ready(Ok(())) if !gathered => shared.buf = Vec::new(),
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
        let (mut stream, gathering) = split(io);
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
        let (mut stream, gathering) = split(io);
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
        let (mut stream, gathering) = split_for_records(io);
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
        let (mut stream, _gathering) = split(io);
        let (head, body) = ([1u8; 9], [2u8; PASS_THROUGH]);
        let slices = [IoSlice::new(&head), IoSlice::new(&body)];
        let n = std::future::poll_fn(|cx| Pin::new(&mut stream).poll_write_vectored(cx, &slices)).await.unwrap();
        assert_eq!(n, head.len() + body.len());
        assert_eq!(seen.lock().unwrap().writes, vec![head.to_vec(), body.to_vec()]);
    }

    #[tokio::test]
    async fn a_blocked_socket_gets_the_rest_when_it_has_room_again() {
        let (seen, io) = recorder(Some(10));
        let (mut stream, gathering) = split(io);
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
            let (mut stream, gathering) = split_with(HoldingSocket(holding.clone()), records);
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

    #[tokio::test]
    async fn shutdown_writes_what_was_gathered_first() {
        let (seen, io) = recorder(None);
        let (mut stream, _gathering) = split(io);
        // No poll end to write it: the shutdown must.
        stream.write_all(b"last words").await.unwrap();
        assert!(seen.lock().unwrap().writes.is_empty());
        stream.shutdown().await.unwrap();
        assert_eq!(seen.lock().unwrap().writes.concat(), b"last words");
    }
}
