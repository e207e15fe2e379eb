//! The hit lane's answers on their way out, in order: the bytes the lane
//! makes itself (heads, and bodies small enough to copy beside them) and
//! the bodies it shares with the store, written with vectored writes. A
//! body leaves from the store's own bytes, copied once, by the kernel; a
//! slow client holds a reference to it, never a copy of its own.

use crate::activity::Activity;
use bytes::{Buf, Bytes, BytesMut};
use circus_http::HitSource;
use std::{collections::VecDeque, io, io::IoSlice};
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// Bodies shorter than this are copied beside their head: one slice fewer
/// for a copy that costs less than the slice.
const COPY_BELOW: usize = 4096;

/// Most slices handed to one vectored write.
const MAX_SLICES: usize = 64;

/// What the access log needs of an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rendered {
    pub status: u16,
    /// Body bytes sent (none for HEAD).
    pub body: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Answers {
    /// Made by the lane since the last piece was sealed.
    made: BytesMut,
    /// Sealed pieces, the next to write first.
    pieces: VecDeque<Bytes>,
    /// Bytes queued in all.
    len: usize,
    /// The head being rendered, reused from answer to answer.
    head: Vec<u8>,
}

impl Answers {
    /// Bytes queued and not yet written.
    pub fn len(&self) -> usize {
        self.len
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Queues `source`'s whole response for `target`, saying
    /// `connection: close` when `close`; `None`, with nothing queued, when
    /// the source does not hold it.
    pub fn render(
        &mut self,
        source: &dyn HitSource,
        target: &str,
        method_head: bool,
        headers: &[httparse::Header<'_>],
        close: bool,
    ) -> Option<Rendered> {
        self.head.clear();
        let body = source.render(target, method_head, headers, &mut self.head)?;
        if close {
            self.head.extend_from_slice(b"connection: close\r\n");
        }
        self.head.extend_from_slice(b"\r\n");
        let status = self.head.get(9..12).and_then(|s| std::str::from_utf8(s).ok()?.parse().ok()).unwrap_or(0);
        self.made.extend_from_slice(&self.head);
        self.len += self.head.len();
        let rendered = Rendered { status, body: body.len() as u64 };
        self.share(body);
        Some(rendered)
    }

    /// Queues `body` after what is queued: copied when short, else shared.
    fn share(&mut self, body: Bytes) {
        self.len += body.len();
        if body.len() < COPY_BELOW {
            self.made.extend_from_slice(&body);
        } else {
            self.seal();
            self.pieces.push_back(body);
        }
    }

    /// Makes what the lane made so far a piece of its own (no copy: the
    /// buffer's front is split off; its storage is reused once written).
    fn seal(&mut self) {
        if !self.made.is_empty() {
            self.pieces.push_back(self.made.split().freeze());
        }
    }

    /// Writes everything queued to `stream`, then flushes it (over TLS,
    /// the records leave now); each write that moves bytes is progress in
    /// `activity`.
    pub async fn write_to<S: AsyncWrite + Unpin>(&mut self, stream: &mut S, activity: &Activity) -> io::Result<()> {
        self.seal();
        while !self.pieces.is_empty() {
            let mut slices = [IoSlice::new(&[]); MAX_SLICES];
            let count = self.pieces.len().min(MAX_SLICES);
            for (slice, piece) in slices.iter_mut().zip(&self.pieces) {
                *slice = IoSlice::new(piece);
            }
            let mut wrote = stream.write_vectored(&slices[..count]).await?;
            if wrote == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            activity.wrote();
            self.len -= wrote;
            while wrote > 0 {
                let front = self.pieces.front_mut().expect("wrote no more than was queued");
                let taken = wrote.min(front.len());
                front.advance(taken);
                wrote -= taken;
                if front.is_empty() {
                    self.pieces.pop_front();
                }
            }
        }
        stream.flush().await
    }

    /// Drops everything queued.
    pub fn clear(&mut self) {
        self.made.clear();
        self.pieces.clear();
        self.len = 0;
    }

    /// Everything queued, in order, copied.
    #[cfg(test)]
    pub fn to_vec(&self) -> Vec<u8> {
        let mut all: Vec<u8> = self.pieces.iter().flat_map(|p| p.iter().copied()).collect();
        all.extend_from_slice(&self.made);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/big` has a body long enough to be shared, `/small` one short
    /// enough to be copied.
    struct TwoObjects(Bytes);

    impl HitSource for TwoObjects {
        fn render(
            &self,
            target: &str,
            method_head: bool,
            _: &[httparse::Header<'_>],
            head: &mut Vec<u8>,
        ) -> Option<Bytes> {
            let body = match target {
                "/big" => self.0.clone(),
                "/small" => Bytes::from_static(b"tiny"),
                _ => return None,
            };
            head.extend_from_slice(format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n", body.len()).as_bytes());
            Some(if method_head { Bytes::new() } else { body })
        }
    }

    /// A writer that takes at most `step` bytes per write.
    struct Trickle {
        got: Vec<u8>,
        step: usize,
    }

    impl AsyncWrite for Trickle {
        fn poll_write(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<io::Result<usize>> {
            let n = buf.len().min(self.step);
            self.got.extend_from_slice(&buf[..n]);
            std::task::Poll::Ready(Ok(n))
        }
        fn poll_write_vectored(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> std::task::Poll<io::Result<usize>> {
            let mut room = self.step;
            for b in bufs {
                let n = b.len().min(room);
                self.got.extend_from_slice(&b[..n]);
                room -= n;
            }
            std::task::Poll::Ready(Ok(self.step - room))
        }
        fn is_write_vectored(&self) -> bool {
            true
        }
        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn shared_and_copied_bodies_leave_whole_and_in_order_whatever_each_write_takes() {
        let big = Bytes::from((0..100_000u32).map(|i| (i % 251) as u8).collect::<Vec<u8>>());
        let source = TwoObjects(big.clone());
        let mut answers = Answers::default();
        let plan = [("/big", false, false), ("/small", false, false), ("/big", true, false), ("/big", false, true)];
        let mut expected = Vec::new();
        for (target, method_head, close) in plan {
            let rendered = answers.render(&source, target, method_head, &[], close).unwrap();
            let body: &[u8] = match (target, method_head) {
                (_, true) => b"",
                ("/big", _) => &big,
                _ => b"tiny",
            };
            assert_eq!(rendered, Rendered { status: 200, body: body.len() as u64 });
            let len = if target == "/big" { big.len() } else { 4 };
            let close = if close { "connection: close\r\n" } else { "" };
            expected.extend_from_slice(format!("HTTP/1.1 200 OK\r\ncontent-length: {len}\r\n{close}\r\n").as_bytes());
            expected.extend_from_slice(body);
        }
        assert!(answers.render(&source, "/miss", false, &[], false).is_none());
        assert_eq!(answers.len(), expected.len());
        assert_eq!(answers.to_vec(), expected);
        let shared = answers.pieces.iter().filter(|p| p.as_ptr() == big.as_ptr()).count();
        assert_eq!(shared, 2, "the two bodies of /big are shared, not copied");
        for step in [1, 7, 4096, 1 << 20] {
            let mut copy = Answers::default();
            for (target, method_head, close) in plan {
                copy.render(&source, target, method_head, &[], close).unwrap();
            }
            let mut out = Trickle { got: Vec::new(), step };
            // Each write is progress: a connection quiet for 30 ms before
            // the answers left is not quiet for 20 ms after.
            let activity = Activity::new(None);
            std::thread::sleep(std::time::Duration::from_millis(30));
            copy.write_to(&mut out, &activity).await.unwrap();
            let quiet = std::time::Duration::from_millis(20);
            assert_eq!(activity.verdict(quiet), crate::activity::Verdict::Keep, "written {step} at a time");
            assert!(out.got == expected, "written {step} bytes at a time");
            assert!(copy.is_empty() && copy.pieces.is_empty());
        }
    }
}
