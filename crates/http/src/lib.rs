//! HTTP semantics shared by the circus server and its origin tier, with no
//! I/O of their own: preconditions and ranges ([`rfc9110`]), the native
//! media type in Accept ([`accept`]), the errors that end a request and
//! their statuses ([`HttpError`], typed by [`circus_core::Fault`]), the
//! response body type, and what the hit lane asks of a holder of resident
//! responses ([`HitSource`]).

pub mod accept;
mod error;
mod hit;
mod response;
pub mod rfc9110;

pub use error::HttpError;
pub use hit::{HitSource, put_date};
pub use response::{BodyError, ResBody, empty, error_response, full};
