//! An HTTPS connection whose records the kernel seals and opens (kTLS).
//!
//! rustls does the handshake; [`KernelTlsStream::take_over`] then hands the
//! record keys and sequence numbers to the socket (the `ktls` crate:
//! `TCP_ULP` "tls", `TLS_TX`, `TLS_RX`), with the application data rustls
//! had already decrypted kept for the first reads. From then on the socket
//! takes and gives plaintext: the [`SendfileStream`] under it sends block
//! cache bytes with `sendfile` from the arena's memfd, as in the clear, and
//! the kernel encrypts them on their way out. No byte passes through user
//! space after the handshake.
//!
//! Records other than application data reach user space as `EIO` on a
//! plain read, then whole with their type through `recvmsg`: a
//! `close_notify` or fatal alert ends the stream (end of file), a warning
//! is skipped, and anything else (a key update the socket cannot follow, a
//! session ticket or change-cipher-spec from a client) fails the
//! connection with an error, never a panic. Shutting down sends
//! `close_notify` as a record of its own, when the socket has room.

use crate::sendfile::SendfileStream;
use bytes::Bytes;
use std::{
    io::{self, IoSlice},
    os::fd::AsRawFd,
    pin::Pin,
    task::{Context, Poll, ready},
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The handshake's stream, read record by record so that rustls holds no
/// part of a record when the kernel takes over.
pub type Handshaking = tokio_rustls::server::TlsStream<ktls::CorkStream<SendfileStream>>;

/// A connection after [`KernelTlsStream::take_over`].
#[derive(Debug)]
pub struct KernelTlsStream {
    inner: SendfileStream,
    /// A `close_notify` or fatal alert came: reads give end of file.
    read_closed: bool,
    /// `close_notify` went out: nothing more may be written.
    write_closed: bool,
}

impl KernelTlsStream {
    /// Hands the connection's record keys to the kernel. On an error the
    /// connection is lost (rustls no longer holds its keys); the caller
    /// asks for this only when the probe at start found the kernel able
    /// to take the negotiated cipher suite.
    pub async fn take_over(handshaken: Handshaking) -> Result<Self, ktls::Error> {
        let (drained, socket) = ktls::config_ktls_server(handshaken).await?.into_raw();
        let inner = match drained {
            Some(plaintext) => socket.with_unread(Bytes::from(plaintext)),
            None => socket,
        };
        Ok(KernelTlsStream { inner, read_closed: false, write_closed: false })
    }

    /// Sends `close_notify` once the socket has room for it.
    fn poll_close_notify(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.inner.poll_write_io(cx, || send_close_notify(self.inner.as_raw_fd()))
    }

    /// Reads the record waiting on the socket that a plain read could not
    /// give (the kernel said `EIO`): what it means for the stream.
    fn take_control_record(&self) -> io::Result<Control> {
        let mut payload = vec![0u8; MAX_RECORD];
        let (record_type, len) = recv_record(self.inner.as_raw_fd(), &mut payload)?;
        Control::of(record_type, &payload[..len])
    }
}

/// Whether taking over failed because the client sent something wrong or
/// left (its fault, not the kernel's).
pub fn client_gone(e: &ktls::Error) -> bool {
    match e {
        ktls::Error::DrainError(_) => true,
        ktls::Error::UlpError(e) => e.raw_os_error() == Some(libc::ENOTCONN),
        _ => false,
    }
}

/// The largest plaintext a TLS record carries.
const MAX_RECORD: usize = 16 * 1024;

/// What a record other than application data means for the reader.
#[derive(Debug, PartialEq, Eq)]
enum Control {
    /// The peer closed (close_notify) or failed (fatal alert): end of file.
    Closed,
    /// Nothing for the reader: read on.
    Skipped,
}

/// TLS record content types (RFC 8446, section 5.1).
const CHANGE_CIPHER_SPEC: u8 = 20;
const ALERT: u8 = 21;
const HANDSHAKE: u8 = 22;
/// Alert levels and the one description that is not an error.
const FATAL: u8 = 2;
const CLOSE_NOTIFY: u8 = 0;
/// Handshake message types that follow a handshake (from a server only,
/// and a key update).
const NEW_SESSION_TICKET: u8 = 4;
const KEY_UPDATE: u8 = 24;

impl Control {
    fn of(record_type: u8, payload: &[u8]) -> io::Result<Control> {
        let refused = |why: &str| Err(io::Error::new(io::ErrorKind::InvalidData, why.to_string()));
        match (record_type, payload) {
            (ALERT, [_, CLOSE_NOTIFY] | [FATAL, _]) => Ok(Control::Closed),
            (ALERT, [_, _]) => Ok(Control::Skipped),
            (ALERT, _) => refused("a malformed TLS alert"),
            (HANDSHAKE, [NEW_SESSION_TICKET, ..]) => refused("a TLS session ticket from a client"),
            (HANDSHAKE, [KEY_UPDATE, ..]) => {
                refused("the client updated its TLS keys, which the kernel's TLS cannot follow here")
            }
            (HANDSHAKE, _) => refused("a TLS handshake message after the handshake"),
            (CHANGE_CIPHER_SPEC, _) => refused("a TLS change_cipher_spec after the handshake"),
            _ => refused("a TLS record of an unknown type"),
        }
    }
}

/// One record from a kTLS socket with its content type (`recvmsg` with
/// the `TLS_GET_RECORD_TYPE` control message): its type and length.
fn recv_record(fd: std::os::fd::RawFd, payload: &mut [u8]) -> io::Result<(u8, usize)> {
    // Room for one control message carrying one byte, aligned for cmsghdr.
    let mut control = [0u64; 4];
    let mut iov = libc::iovec { iov_base: payload.as_mut_ptr().cast(), iov_len: payload.len() };
    // SAFETY: zeroed msghdr is a valid empty header; the pointers set below
    // point at `iov` and `control`, which outlive the call.
    #[allow(unsafe_code)]
    let (got, msg) = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        (libc::recvmsg(fd, &mut msg, 0), msg)
    };
    if got < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `msg` was filled by the kernel; the macros walk the control
    // buffer it described, which is still alive.
    #[allow(unsafe_code)]
    let record_type = unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null() || (*cmsg).cmsg_level != libc::SOL_TLS || (*cmsg).cmsg_type != TLS_GET_RECORD_TYPE {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "a kTLS read without its record type"));
        }
        *libc::CMSG_DATA(cmsg)
    };
    Ok((record_type, got as usize))
}

/// `linux/tls.h`: the control messages that carry a record's type.
const TLS_SET_RECORD_TYPE: libc::c_int = 1;
const TLS_GET_RECORD_TYPE: libc::c_int = 2;

/// Sends `close_notify` as an alert record of its own.
fn send_close_notify(fd: std::os::fd::RawFd) -> io::Result<()> {
    let mut alert = [1u8, CLOSE_NOTIFY]; // warning, close_notify
    let mut control = [0u64; 4];
    let mut iov = libc::iovec { iov_base: alert.as_mut_ptr().cast(), iov_len: alert.len() };
    // SAFETY: as in `recv_record`: every pointer points at a local that
    // outlives the call, and the control message is written inside the
    // buffer the header describes.
    #[allow(unsafe_code)]
    let sent = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(1) as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_TLS;
        (*cmsg).cmsg_type = TLS_SET_RECORD_TYPE;
        (*cmsg).cmsg_len = libc::CMSG_LEN(1) as _;
        *libc::CMSG_DATA(cmsg) = ALERT;
        libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL)
    };
    if sent < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

impl AsyncRead for KernelTlsStream {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        loop {
            if self.read_closed {
                return Poll::Ready(Ok(()));
            }
            match ready!(Pin::new(&mut self.inner).poll_read(cx, buf)) {
                Err(e) if e.raw_os_error() == Some(libc::EIO) => match self.take_control_record() {
                    Ok(Control::Closed) => self.read_closed = true,
                    Ok(Control::Skipped) => {}
                    // The socket had no record after all: wait for one.
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Poll::Ready(Err(e)),
                },
                other => return Poll::Ready(other),
            }
        }
    }
}

impl AsyncWrite for KernelTlsStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.write_closed {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    /// As the stream under it: body bytes must reach it unflattened for
    /// the arena check (and `sendfile`) to see them.
    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.write_closed {
            // After the response's last bytes, when the socket may be full.
            // A peer that is gone cannot be told; the socket closes anyway.
            if let Err(e) = ready!(self.poll_close_notify(cx)) {
                tracing::debug!(error = %e, "close_notify not sent");
            }
            self.write_closed = true;
        }
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_after_the_handshake_end_skip_or_fail_the_stream() {
        assert_eq!(Control::of(ALERT, &[1, CLOSE_NOTIFY]).unwrap(), Control::Closed);
        assert_eq!(Control::of(ALERT, &[FATAL, 40]).unwrap(), Control::Closed);
        assert_eq!(Control::of(ALERT, &[1, 90]).unwrap(), Control::Skipped); // user_canceled
        for (record_type, payload) in [
            (ALERT, &[1u8][..]),
            (ALERT, &[][..]),
            (HANDSHAKE, &[KEY_UPDATE, 0, 0, 1, 0][..]),
            (HANDSHAKE, &[NEW_SESSION_TICKET, 0, 0, 1, 0][..]),
            (HANDSHAKE, &[][..]),
            (HANDSHAKE, &[1, 0, 0, 0][..]),
            (CHANGE_CIPHER_SPEC, &[1][..]),
            (99, &[0][..]),
        ] {
            let e = Control::of(record_type, payload).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{record_type} {payload:?}");
        }
    }

    /// A socket without the kernel's TLS (this project's CI machines)
    /// gives no record type: the read is an error, not a panic or a type
    /// made up from the data.
    #[test]
    fn control_records_on_a_plain_socket_are_errors() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        std::io::Write::write_all(&mut client, b"plain").unwrap();
        let mut payload = [0u8; 64];
        let e = recv_record(server.as_raw_fd(), &mut payload).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    }
}
