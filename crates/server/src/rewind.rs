//! A stream that first gives back bytes already read from it: what the hit
//! lane read over TLS but did not answer is replayed to hyper, so hyper
//! sees exactly what the client sent. (In clear, `SendfileStream` does the
//! same below the TLS layer's place.)

use bytes::{Buf, Bytes};
use std::{
    io::{self, IoSlice},
    pin::Pin,
    task::{Context, Poll},
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

pub(crate) struct Rewind<S> {
    unread: Bytes,
    inner: S,
}

impl<S> Rewind<S> {
    pub(crate) fn new(inner: S, unread: Bytes) -> Self {
        Rewind { unread, inner }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewind<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if !self.unread.is_empty() {
            let n = self.unread.len().min(buf.remaining());
            buf.put_slice(&self.unread[..n]);
            self.unread.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewind<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn the_unread_bytes_come_first_then_the_stream_and_writes_pass_through() {
        let (near, mut far) = tokio::io::duplex(64);
        let mut rewound = Rewind::new(near, Bytes::from_static(b"GET / HT"));
        far.write_all(b"TP/1.1\r\n").await.unwrap();
        let mut got = vec![0; 16];
        rewound.read_exact(&mut got).await.unwrap();
        assert_eq!(got, b"GET / HTTP/1.1\r\n");
        rewound.write_all(b"ok").await.unwrap();
        let mut back = [0; 2];
        far.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"ok");
    }
}
