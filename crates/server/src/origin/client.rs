//! Requests to the origin: one pooled HTTP/1.1 client, the base URL joined
//! with the request's path, hop-by-hop headers dropped both ways.

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, Uri, header};
use http_body_util::Empty;
use hyper::body::Incoming;
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector},
    rt::TokioExecutor,
};
use std::time::Duration;

/// Headers that describe one connection, not the message (RFC 9110 §7.6.1).
const HOP_BY_HOP: [&str; 8] =
    ["connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "host"];

pub fn strip_hop_by_hop(h: &mut HeaderMap) {
    for name in HOP_BY_HOP {
        h.remove(name);
    }
}

#[derive(Debug, Clone)]
pub struct OriginClient {
    client: Client<HttpConnector, Empty<Bytes>>,
    /// `http://host:port/prefix` without a trailing slash.
    base: String,
    timeout: Duration,
}

impl OriginClient {
    pub fn new(base: &Uri, timeout: Duration) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(timeout));
        let client = Client::builder(TokioExecutor::new()).pool_idle_timeout(Duration::from_secs(30)).build(connector);
        OriginClient { client, base: base.to_string().trim_end_matches('/').to_owned(), timeout }
    }

    /// Time allowed for a response head, and between two body chunks.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// `GET base + path_and_query` with `headers` (hop-by-hop ones dropped).
    pub async fn get(&self, path_and_query: &str, headers: &HeaderMap) -> Result<Response<Incoming>, String> {
        let uri: Uri = format!("{}{}", self.base, path_and_query).parse().map_err(|e| format!("origin URL: {e}"))?;
        let mut req = Request::get(uri).body(Empty::new()).map_err(|e| e.to_string())?;
        *req.headers_mut() = headers.clone();
        strip_hop_by_hop(req.headers_mut());
        // The body must not be compressed differently per block fetch.
        if !req.headers().contains_key(header::ACCEPT_ENCODING) {
            req.headers_mut().insert(header::ACCEPT_ENCODING, HeaderValue::from_static("identity"));
        }
        match tokio::time::timeout(self.timeout, self.client.request(req)).await {
            Ok(Ok(res)) => Ok(res),
            Ok(Err(e)) => Err(format!("origin request failed: {e}")),
            Err(_) => Err(format!("origin sent no response head within {:?}", self.timeout)),
        }
    }
}

/// `Content-Range: bytes A-B/SIZE` to `(A, B, SIZE)`.
pub fn content_range(h: &HeaderMap) -> Option<(u64, u64, u64)> {
    let v = h.get(header::CONTENT_RANGE)?.to_str().ok()?.strip_prefix("bytes ")?;
    let (range, size) = v.split_once('/')?;
    let (a, b) = range.split_once('-')?;
    Some((a.trim().parse().ok()?, b.trim().parse().ok()?, size.trim().parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_range_parses_and_rejects_unknown_size() {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_RANGE, HeaderValue::from_static("bytes 0-99/1000"));
        assert_eq!(content_range(&h), Some((0, 99, 1000)));
        h.insert(header::CONTENT_RANGE, HeaderValue::from_static("bytes 0-99/*"));
        assert_eq!(content_range(&h), None);
    }
}
