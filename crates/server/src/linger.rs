//! Closing a connection in stages (RFC 9112 §9.6, nginx's
//! `lingering_close`).
//!
//! A socket closed with bytes the client sent still unread makes the
//! kernel reset the connection at once, throwing away what of the last
//! response it had not sent yet: an HTTP/1.0 client that pipelined more
//! requests, or one that said `Connection: close` and kept sending, got a
//! 256 KiB file cut at 128,000 bytes. So a connection holds a second
//! handle on its socket from the start; when serving ends, the connection's
//! own handle is dropped without closing the socket, and this one looks:
//! nothing unread (or the client already closed), it closes at once, as
//! before; otherwise it stops sending (the FIN follows the last response),
//! reads and discards what the client still sends until it closes, for
//! [`LINGER_FOR`] and [`LINGER_BYTES`] at most, then closes.
//!
//! Where the kernel decrypts TLS records, a pending record that is not
//! data (an alert) reads as an error: such a connection closes at once,
//! as before. Bytes that arrive after the look are not waited for.

use std::{
    cell::RefCell,
    io,
    mem::MaybeUninit,
    net::Shutdown,
    os::fd::{AsFd, OwnedFd},
    time::Duration,
};

/// Longest a closing connection keeps reading what its client still sends.
pub(crate) const LINGER_FOR: Duration = Duration::from_secs(2);

/// Most bytes read and discarded while closing.
pub(crate) const LINGER_BYTES: usize = 4 << 20;

thread_local! {
    /// What lingering connections read lands here, one read at a time: a
    /// connection waiting to close holds no buffer of its own.
    static SCRATCH: RefCell<Vec<u8>> = RefCell::new(vec![0; 16 << 10]);
}

/// A second handle on a connection's socket, for its last step.
#[derive(Debug)]
pub(crate) struct Closing(OwnedFd);

impl Closing {
    /// Holds `socket` open past its own handle; `None` when the process is
    /// out of descriptors (the connection then closes abruptly, as a drop
    /// does).
    pub fn hold(socket: &impl AsFd) -> Option<Closing> {
        socket.as_fd().try_clone_to_owned().ok().map(Closing)
    }

    /// Ends the connection once serving it is over (its own handle
    /// dropped): at once when nothing the client sent is unread, else in
    /// stages (see the module's doc).
    pub async fn close(self) {
        if !self.unread() {
            return;
        }
        let socket = socket2::SockRef::from(&self.0);
        if socket.shutdown(Shutdown::Write).is_err() {
            return;
        }
        // The descriptor is non-blocking already: the flag belongs to the
        // socket, which the connection's handle set so.
        let Ok(stream) = tokio::net::TcpStream::from_std(std::net::TcpStream::from(self.0)) else { return };
        let discard = async {
            let mut read = 0;
            while read < LINGER_BYTES {
                if stream.readable().await.is_err() {
                    break;
                }
                match SCRATCH.with_borrow_mut(|buf| stream.try_read(buf)) {
                    Ok(0) => break,
                    Ok(n) => read += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(_) => break,
                }
            }
        };
        let _ = tokio::time::timeout(LINGER_FOR, discard).await;
    }

    /// Whether bytes the client sent wait unread (end of stream and errors
    /// are not).
    fn unread(&self) -> bool {
        let mut one = [MaybeUninit::<u8>::uninit()];
        socket2::SockRef::from(&self.0).peek(&mut one).is_ok_and(|n| n > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A connected pair: the server's end and the client's.
    async fn pair() -> (tokio::net::TcpStream, tokio::net::TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap());
        let (client, accepted) = tokio::join!(client, listener.accept());
        (accepted.unwrap().0, client.unwrap())
    }

    #[tokio::test]
    async fn with_bytes_unread_the_last_answer_arrives_whole_then_the_end() {
        let (mut server, mut client) = pair().await;
        let closing = Closing::hold(&server).unwrap();
        client.write_all(b"GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\n").await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        // The server reads only the first request, answers it and is done.
        let mut first = [0u8; 19];
        server.read_exact(&mut first).await.unwrap();
        let answer = vec![7u8; 1 << 20];
        let writing = tokio::spawn(async move {
            server.write_all(&answer).await.unwrap();
            drop(server);
            closing.close().await;
        });
        // The client reads only once the server has closed its handle.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.expect("no reset");
        assert_eq!(got.len(), 1 << 20);
        drop(client);
        writing.await.unwrap();
    }

    #[tokio::test]
    async fn with_nothing_unread_it_closes_at_once() {
        let (server, mut client) = pair().await;
        let closing = Closing::hold(&server).unwrap();
        drop(server);
        // Returns without waiting for the client, which has not closed.
        tokio::time::timeout(Duration::from_millis(500), closing.close()).await.expect("closed at once");
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.unwrap();
        assert!(got.is_empty());
    }

    #[tokio::test]
    async fn a_client_that_keeps_sending_is_cut_after_the_linger_time() {
        let (server, mut client) = pair().await;
        let closing = Closing::hold(&server).unwrap();
        client.write_all(b"more").await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(server);
        let feeding = tokio::spawn(async move {
            // A byte every 100 ms, never closing.
            while client.write_all(b"x").await.is_ok() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        let started = std::time::Instant::now();
        closing.close().await;
        let took = started.elapsed();
        assert!(took >= LINGER_FOR && took < LINGER_FOR + Duration::from_secs(1), "{took:?}");
        feeding.await.unwrap();
    }
}
