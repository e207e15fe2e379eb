//! Requests to the origin: one pooled HTTP/1.1 client (TLS for an https
//! origin), the base URL joined with the request's path, hop-by-hop
//! headers dropped both ways.

use crate::SetupError;
use bytes::Bytes;
use circus_store::ReadError;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, Uri, header};
use http_body_util::{BodyExt, Empty, combinators::UnsyncBoxBody};
use hyper::body::Incoming;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector},
    rt::TokioExecutor,
};
use std::{path::Path, time::Duration};

/// Headers that describe one connection, not the message (RFC 9110 §7.6.1).
const HOP_BY_HOP: [&str; 8] =
    ["connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "host"];

/// What the tier adds to `Via` both ways (RFC 9110 §7.6.3).
pub const VIA: HeaderValue = HeaderValue::from_static("1.1 circus");

/// Removes the hop-by-hop fields and every field the message's
/// `Connection` names (RFC 9110 §7.6.1), before a message is forwarded.
pub fn strip_hop_by_hop(h: &mut HeaderMap) {
    let named: Vec<HeaderName> = h
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        h.remove(name);
    }
    for name in HOP_BY_HOP {
        h.remove(name);
    }
}

/// The body of a request to the origin: none, or a client's, streamed.
pub type OutBody = UnsyncBoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

pub fn no_body() -> OutBody {
    Empty::new().map_err(|never| match never {}).boxed_unsync()
}

#[derive(Debug, Clone)]
pub struct OriginClient {
    client: Client<HttpsConnector<HttpConnector>, OutBody>,
    /// `http://host:port/prefix` without a trailing slash.
    base: String,
    timeout: Duration,
}

impl OriginClient {
    /// A client for `base` (`http://` or `https://`); `ca_file` replaces
    /// the system's roots for an https origin. Fails on a CA bundle that
    /// cannot be read.
    pub fn new(base: &Uri, timeout: Duration, ca_file: Option<&Path>) -> Result<Self, SetupError> {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(timeout));
        connector.enforce_http(false);
        let tls = super::tls::for_origin(base, ca_file)?;
        let https =
            HttpsConnectorBuilder::new().with_tls_config(tls).https_or_http().enable_http1().wrap_connector(connector);
        let client = Client::builder(TokioExecutor::new()).pool_idle_timeout(Duration::from_secs(30)).build(https);
        Ok(OriginClient { client, base: base.to_string().trim_end_matches('/').to_owned(), timeout })
    }

    /// Time allowed for a response head, and between two body chunks.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// `GET base + path_and_query` with `headers` (hop-by-hop ones dropped).
    pub async fn get(&self, path_and_query: &str, headers: &HeaderMap) -> Result<Response<Incoming>, ReadError> {
        let mut headers = headers.clone();
        // The body must not be compressed differently per block fetch.
        if !headers.contains_key(header::ACCEPT_ENCODING) {
            headers.insert(header::ACCEPT_ENCODING, HeaderValue::from_static("identity"));
        }
        self.send(Method::GET, path_and_query, headers, no_body()).await
    }

    /// `HEAD base + path_and_query` with `headers`.
    pub async fn head(&self, path_and_query: &str, headers: &HeaderMap) -> Result<Response<Incoming>, ReadError> {
        self.send(Method::HEAD, path_and_query, headers.clone(), no_body()).await
    }

    /// `method base + path_and_query` with `headers` (hop-by-hop ones
    /// dropped, Via added) and `body`, streamed as it comes.
    pub async fn send(
        &self,
        method: Method,
        path_and_query: &str,
        mut headers: HeaderMap,
        body: OutBody,
    ) -> Result<Response<Incoming>, ReadError> {
        let uri: Uri = format!("{}{}", self.base, path_and_query)
            .parse()
            .map_err(|e| ReadError::origin(format!("origin URL: {e}")))?;
        let mut req =
            Request::builder().method(method).uri(uri).body(body).map_err(|e| ReadError::origin(e.to_string()))?;
        strip_hop_by_hop(&mut headers);
        headers.append(header::VIA, VIA);
        *req.headers_mut() = headers;
        match tokio::time::timeout(self.timeout, self.client.request(req)).await {
            Ok(Ok(res)) => Ok(res),
            Ok(Err(e)) => Err(ReadError::origin(format!("origin request failed: {e}"))),
            Err(_) => Err(ReadError::origin(format!("origin sent no response head within {:?}", self.timeout))),
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
