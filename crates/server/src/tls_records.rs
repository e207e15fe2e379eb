//! Full TLS records for large bodies. rustls takes new plaintext up to a
//! limit on the ciphertext it still holds, so a write made while the
//! socket is still taking the previous one is cut to whatever room is
//! left and becomes a short record, which costs both ends a record's work
//! however small it is (nginx's records are 16 KiB). Here new plaintext is
//! handed to rustls only once the ciphertext of the last write is in the
//! socket, so a 64 KiB block leaves as four full records.

use std::{
    io::{self, IoSlice},
    pin::Pin,
    task::{Context, Poll, ready},
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_rustls::server::TlsStream;

pub(crate) struct WholeRecords<S>(pub TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> WholeRecords<S> {
    /// Waits until rustls holds no ciphertext from an earlier write.
    fn poll_drained(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.0.get_ref().1.wants_write() {
            ready!(Pin::new(&mut self.0).poll_flush(cx))?;
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for WholeRecords<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for WholeRecords<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        ready!(self.poll_drained(cx))?;
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        ready!(self.poll_drained(cx))?;
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}
