//! Errors that end a request, and the one place that maps them to statuses.

use circus_core::Fault;
use circus_store::ReadError;
use http::StatusCode;

#[derive(Debug, Clone, thiserror::Error)]
pub enum HttpError {
    #[error("bad request: {0}")]
    BadRequest(&'static str),
    #[error("forbidden: {0}")]
    Forbidden(&'static str),
    #[error("not found")]
    NotFound,
    #[error("method not allowed: use GET or HEAD")]
    MethodNotAllowed,
    #[error("bad Circus-Need header: {0}")]
    BadNeed(String),
    #[error("storage error: {0}")]
    Storage(String),
    #[error("the file changed while being served; retry")]
    Changed,
    #[error("server is at its connection limit; retry later")]
    Busy,
    #[error("origin unavailable: {0}; retry later")]
    Origin(String),
    #[error("not stored, and the request asked for nothing else (only-if-cached)")]
    NotStored,
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<ReadError> for HttpError {
    fn from(e: ReadError) -> Self {
        match e.fault() {
            Fault::Changed => HttpError::Changed,
            Fault::Origin => HttpError::Origin(e.to_string()),
            Fault::Storage => HttpError::Storage(e.to_string()),
            Fault::Client | Fault::Busy | Fault::Internal => HttpError::Internal(e.to_string()),
        }
    }
}

impl HttpError {
    /// Who is at fault.
    pub fn fault(&self) -> Fault {
        match self {
            HttpError::BadRequest(_)
            | HttpError::Forbidden(_)
            | HttpError::NotFound
            | HttpError::MethodNotAllowed
            | HttpError::BadNeed(_)
            | HttpError::NotStored => Fault::Client,
            HttpError::Storage(_) => Fault::Storage,
            HttpError::Changed => Fault::Changed,
            HttpError::Busy => Fault::Busy,
            HttpError::Origin(_) => Fault::Origin,
            HttpError::Internal(_) => Fault::Internal,
        }
    }

    /// Seconds after which a retry may succeed, for `Retry-After`.
    pub fn retry_after(&self) -> Option<u32> {
        match self.fault() {
            Fault::Changed | Fault::Busy => Some(1),
            Fault::Origin => Some(5),
            Fault::Storage | Fault::Client | Fault::Internal => None,
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            HttpError::BadRequest(_) | HttpError::BadNeed(_) => StatusCode::BAD_REQUEST,
            HttpError::Forbidden(_) => StatusCode::FORBIDDEN,
            HttpError::NotFound => StatusCode::NOT_FOUND,
            HttpError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            HttpError::Storage(_) | HttpError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            HttpError::Changed | HttpError::Busy => StatusCode::SERVICE_UNAVAILABLE,
            HttpError::Origin(_) => StatusCode::BAD_GATEWAY,
            HttpError::NotStored => StatusCode::GATEWAY_TIMEOUT,
        }
    }
}
