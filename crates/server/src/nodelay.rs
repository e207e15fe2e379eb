//! Small answers leave at once: Nagle's algorithm is off on every client
//! connection. On Linux an accepted socket inherits TCP_NODELAY from its
//! listener, so it is set once there and a new connection costs no
//! `setsockopt` for it (nginx's per-request path makes none either);
//! elsewhere each accepted socket is set.

use tokio::net::{TcpListener, TcpStream};

/// Sets TCP_NODELAY where accepted sockets will inherit it.
pub(crate) fn on_listener(listener: &TcpListener) {
    if cfg!(target_os = "linux") {
        // No failure is known for a bound TCP socket; one would leave
        // Nagle on (small answers delayed, not lost), so it is logged.
        if let Err(e) = socket2::SockRef::from(listener).set_tcp_nodelay(true) {
            tracing::warn!(error = %e, "TCP_NODELAY on the listener failed: small answers may wait for ACKs");
        }
    }
}

/// Sets TCP_NODELAY on `stream` unless its listener already gave it.
pub(crate) fn on_accepted(stream: &TcpStream) {
    if !cfg!(target_os = "linux") {
        let _ = stream.set_nodelay(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn accepted_connections_have_nagle_off() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        on_listener(&listener);
        let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        on_accepted(&accepted);
        assert!(accepted.nodelay().unwrap(), "an accepted socket must not wait to coalesce small writes");
        drop(client);
    }
}
