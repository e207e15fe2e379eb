//! A scripted HTTP/1.1 server on a raw socket, for answers no real server
//! gives: hostile manifests, streams that stall, 503s. Each connection
//! carries one request; the script sees its number (from 0) and head and
//! says what bytes to send, and whether to hold the connection open after.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpListener,
};

/// What the server sends to one request.
#[derive(Debug, Clone)]
pub struct Reply {
    pub bytes: Vec<u8>,
    /// Keep the connection open (silent) after the bytes, until the client
    /// closes it; otherwise close at once.
    pub hold: bool,
}

impl Reply {
    /// A response closed after its body: `status` (e.g. "200 OK"), header
    /// lines (each without CRLF), then the body.
    pub fn close(status: &str, headers: &[&str], body: &[u8]) -> Reply {
        Reply { bytes: response(status, headers, body), hold: false }
    }

    /// A response that stops after `body` and stays open without a word.
    pub fn stall(status: &str, headers: &[&str], body: &[u8]) -> Reply {
        Reply { bytes: response(status, headers, body), hold: true }
    }
}

fn response(status: &str, headers: &[&str], body: &[u8]) -> Vec<u8> {
    let mut head = format!("HTTP/1.1 {status}\r\nconnection: close\r\n");
    for h in headers {
        head += h;
        head += "\r\n";
    }
    let mut bytes = format!("{head}\r\n").into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// The request heads a [`serve`] server received, in order.
pub type Requests = Arc<Mutex<Vec<String>>>;

/// Answers request `n` with `script(n, head)`.
pub async fn serve(script: impl Fn(usize, &str) -> Reply + Send + Sync + 'static) -> (SocketAddr, Requests) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let requests: Requests = Arc::default();
    let seen = requests.clone();
    let script = Arc::new(script);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let (seen, script) = (seen.clone(), script.clone());
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.ends_with(b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(n @ 1..) => head.extend_from_slice(&buf[..n]),
                        _ => return,
                    }
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let n = {
                    let mut seen = seen.lock().unwrap();
                    seen.push(head.clone());
                    seen.len() - 1
                };
                let reply = script(n, &head);
                if stream.write_all(&reply.bytes).await.is_err() || !reply.hold {
                    return;
                }
                // Silent until the client gives up and closes.
                while let Ok(1..) = stream.read(&mut buf).await {}
            });
        }
    });
    (addr, requests)
}
