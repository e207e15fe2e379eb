//! The response body type every handler returns, and the one place an
//! error becomes a response.

use crate::HttpError;
use bytes::Bytes;
use http::{HeaderValue, Response, header};
use http_body_util::{BodyExt, Empty, Full, combinators::BoxBody};

/// Why a response body stopped: hyper then cuts the connection, so a
/// client with Content-Length sees a short body, never a wrong one.
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;

/// Every response body.
pub type ResBody = BoxBody<Bytes, BodyError>;

/// A body of these bytes.
pub fn full(bytes: impl Into<Bytes>) -> ResBody {
    Full::new(bytes.into()).map_err(|never| match never {}).boxed()
}

/// No body.
pub fn empty() -> ResBody {
    Empty::new().map_err(|never| match never {}).boxed()
}

/// The response for `e`: its status, a one-line reason, `Allow` for a
/// method not allowed, and `Retry-After` when a retry may succeed.
pub fn error_response(e: &HttpError) -> Response<ResBody> {
    let mut res = Response::new(full(format!("{e}\n")));
    *res.status_mut() = e.status();
    res.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    if matches!(e, HttpError::MethodNotAllowed) {
        res.headers_mut().insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
    }
    if let Some(secs) = e.retry_after() {
        res.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    res
}
