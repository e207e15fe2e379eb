//! Where origin objects come from: an HTTP server or an S3 bucket, behind
//! one `get` that speaks HTTP semantics either way (a status, the headers
//! the tier reads, a body stream). The tier's logic (single flight per
//! block, read-ahead, versions keyed by ETag, If-Match on later blocks) is
//! written once against this and knows nothing of either protocol.

use super::{
    client::{OriginClient, OutBody},
    s3::S3Origin,
};
use crate::SetupError;
use bytes::Bytes;
use circus_store::ReadError;
use futures_util::{StreamExt, stream::BoxStream};
use http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use http_body_util::BodyExt;
use std::{fmt, path::Path, time::Duration};

/// Settings of an S3 origin (`s3://BUCKET[/PREFIX]`). Fields left `None`
/// come from the usual AWS environment variables (`AWS_ACCESS_KEY_ID`,
/// `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT`, ...).
#[derive(Clone, Default)]
pub struct S3Config {
    pub bucket: String,
    /// Key prefix without slashes at either end ("" for none); a request
    /// for `/a/b` reads the key `PREFIX/a/b`.
    pub prefix: String,
    /// `http://127.0.0.1:9000` for an S3-compatible server; requests then
    /// use path style (`ENDPOINT/BUCKET/KEY`).
    pub endpoint: Option<String>,
    pub region: Option<String>,
    /// Plain HTTP to the endpoint; by default allowed when the endpoint is
    /// an http:// URL.
    pub allow_http: Option<bool>,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    /// Freshness lifetime given to objects that carry no Cache-Control of
    /// their own (sent as `Cache-Control: max-age=N`); `None` leaves the
    /// heuristic freshness any HTTP response with Last-Modified gets.
    pub max_age: Option<Duration>,
}

// By hand so that the secret key never reaches a log line.
impl fmt::Debug for S3Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Config")
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("allow_http", &self.allow_http)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &self.secret_access_key.as_ref().map(|_| "(set)"))
            .field("max_age", &self.max_age)
            .finish()
    }
}

/// Which origin the tier serves.
#[derive(Debug, Clone)]
pub enum OriginSource {
    /// `http://host:port/prefix` or `https://...`; request paths are appended.
    Http(Uri),
    S3(S3Config),
}

impl fmt::Display for OriginSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OriginSource::Http(uri) => write!(f, "{uri}"),
            OriginSource::S3(s) if s.prefix.is_empty() => write!(f, "s3://{}", s.bucket),
            OriginSource::S3(s) => write!(f, "s3://{}/{}", s.bucket, s.prefix),
        }
    }
}

/// Body bytes of an origin response; an `Err` item ends it early.
pub type OriginBody = BoxStream<'static, Result<Bytes, ReadError>>;

/// An origin's answer as the tier reads it. An S3 answer is given the
/// headers an HTTP server would have sent: Content-Range on a part,
/// Content-Length, ETag, Last-Modified, Content-Type, Date.
pub struct OriginResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: OriginBody,
}

impl OriginResponse {
    /// An HTTP server's answer, its body streamed.
    pub fn from_http(res: http::Response<hyper::body::Incoming>) -> Result<Self, ReadError> {
        let (parts, body) = res.into_parts();
        // Both framings at once may be an attempt at response splitting,
        // and is handled as an error (RFC 9112 §6.3).
        if parts.headers.contains_key(header::TRANSFER_ENCODING) && parts.headers.contains_key(header::CONTENT_LENGTH) {
            return Err(ReadError::origin("origin framed its response with both Transfer-Encoding and Content-Length"));
        }
        let body =
            body.into_data_stream().map(|r| r.map_err(|e| ReadError::origin(format!("origin body: {e}")))).boxed();
        Ok(OriginResponse { status: parts.status, headers: parts.headers, body })
    }
}

impl fmt::Debug for OriginResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OriginResponse").field("status", &self.status).field("headers", &self.headers).finish()
    }
}

#[derive(Debug)]
pub enum Source {
    // Boxed: the pooled client is several times the size of the S3 one.
    Http(Box<OriginClient>),
    S3(S3Origin),
}

impl Source {
    /// A client for `source`; fails on settings that cannot work (an S3
    /// endpoint that is no URL, say), before any request is made.
    pub fn new(source: &OriginSource, timeout: Duration, ca_file: Option<&Path>) -> Result<Self, SetupError> {
        Ok(match source {
            OriginSource::Http(uri) => Source::Http(Box::new(OriginClient::new(uri, timeout, ca_file)?)),
            OriginSource::S3(cfg) => Source::S3(S3Origin::new(cfg, timeout, ca_file)?),
        })
    }

    /// A bucket, whose single-part ETags are MD5s of the objects.
    pub fn is_s3(&self) -> bool {
        matches!(self, Source::S3(_))
    }

    /// Time allowed for a response head, and between two body chunks.
    pub fn timeout(&self) -> Duration {
        match self {
            Source::Http(c) => c.timeout(),
            Source::S3(s) => s.timeout(),
        }
    }

    /// `GET target` with the request `headers` that matter to an origin:
    /// Range and the conditionals, and for HTTP the rest as they are.
    /// `Err` is a failure to get any answer (502 to the client).
    pub async fn get(&self, target: &str, headers: &HeaderMap) -> Result<OriginResponse, ReadError> {
        let headers = &*for_origin(headers);
        match self {
            Source::Http(c) => OriginResponse::from_http(c.get(target, headers).await?),
            Source::S3(s) => s.get(target, headers).await,
        }
    }

    /// `HEAD target`, relayed for a client's HEAD that is not answered
    /// from the store (a bucket is asked for the object, whose body the
    /// relay drops).
    pub async fn head(&self, target: &str, headers: &HeaderMap) -> Result<OriginResponse, ReadError> {
        let headers = &*for_origin(headers);
        match self {
            Source::Http(c) => {
                let (parts, _) = c.head(target, headers).await?.into_parts();
                let body = futures_util::stream::empty().boxed();
                Ok(OriginResponse { status: parts.status, headers: parts.headers, body })
            }
            Source::S3(s) => s.get(target, headers).await,
        }
    }

    /// Any other method, forwarded with its body. A bucket takes no
    /// writes through the tier: it answers 405.
    pub async fn send(
        &self,
        method: Method,
        target: &str,
        headers: HeaderMap,
        body: OutBody,
    ) -> Result<OriginResponse, ReadError> {
        match self {
            Source::Http(c) => {
                let headers = for_origin(&headers).into_owned();
                let (parts, body) = c.send(method, target, headers, body).await?.into_parts();
                let body = body
                    .into_data_stream()
                    .map(|r| r.map_err(|e| ReadError::origin(format!("origin body: {e}"))))
                    .boxed();
                Ok(OriginResponse { status: parts.status, headers: parts.headers, body })
            }
            Source::S3(_) => {
                let mut headers = HeaderMap::new();
                headers.insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
                let body = futures_util::stream::empty().boxed();
                Ok(OriginResponse { status: StatusCode::METHOD_NOT_ALLOWED, headers, body })
            }
        }
    }
}

/// `headers` without the fields members send each other: an origin has no
/// business with them, and a member's proof must not reach anyone who
/// could repeat it.
fn for_origin(headers: &HeaderMap) -> std::borrow::Cow<'_, HeaderMap> {
    let cluster = [crate::PEER_HEADER, crate::PEER_AUTH_HEADER];
    if cluster.iter().all(|name| !headers.contains_key(*name)) {
        return std::borrow::Cow::Borrowed(headers);
    }
    let mut h = headers.clone();
    for name in cluster {
        h.remove(name);
    }
    std::borrow::Cow::Owned(h)
}
