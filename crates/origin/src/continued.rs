//! A large answer the tier does not store (private, no-store, a cookie),
//! relayed from the first part it already asked for: its bytes go out at
//! once, and the rest comes from one more ranged request that must name
//! the same version. No byte is fetched twice, and bytes of another
//! version never follow (the continuation carries If-Match and must answer
//! with the same validators and length, or the body is cut).

use crate::{
    OriginTier,
    client::content_range,
    source::{OriginBody, OriginResponse},
};
use circus_store::ReadError;
use futures_util::{StreamExt, stream};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use std::sync::Arc;

impl OriginTier {
    /// `first` (the part `0..=last_byte` of `size` bytes, answered to the
    /// forwarded request `fh`) followed by the rest, as a 200 of the whole
    /// object. `None` when the part names no strong validator to hold the
    /// rest to, or the client asked for a part or a condition of its own:
    /// then the request is relayed as it is.
    pub(crate) fn continued(
        self: &Arc<Self>,
        target: &str,
        request: &HeaderMap,
        mut fh: HeaderMap,
        first: OriginResponse,
        (last_byte, size): (u64, u64),
    ) -> Result<OriginResponse, OriginResponse> {
        let own_terms = [header::RANGE, header::IF_RANGE, header::IF_MATCH, header::IF_NONE_MATCH]
            .iter()
            .chain(&[header::IF_MODIFIED_SINCE, header::IF_UNMODIFIED_SINCE])
            .any(|name| request.contains_key(name));
        let etag = first.headers.get(header::ETAG).filter(|e| !e.as_bytes().starts_with(b"W/")).cloned();
        let Some(etag) = etag.filter(|_| !own_terms) else { return Err(first) };
        let start = last_byte + 1;
        fh.insert(header::RANGE, HeaderValue::from_str(&format!("bytes={start}-")).expect("ASCII"));
        fh.insert(header::IF_MATCH, etag.clone());
        let (tier, target) = (self.clone(), target.to_owned());
        let rest = stream::once(async move {
            tier.metrics.origin_requests.inc();
            match tier.client.get(&target, &fh).await {
                Ok(res) => rest_of(res, &etag, start, size),
                Err(e) => stream::once(async move { Err(e) }).boxed(),
            }
        })
        .flatten();
        let OriginResponse { mut headers, body, .. } = first;
        headers.remove(header::CONTENT_RANGE);
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(size));
        Ok(OriginResponse { status: StatusCode::OK, headers, body: body.chain(rest).boxed() })
    }
}

/// The continuation's body if it is `start..size` of the version `etag`
/// names, else a body that fails at once.
fn rest_of(res: OriginResponse, etag: &HeaderValue, start: u64, size: u64) -> OriginBody {
    let same = res.status == StatusCode::PARTIAL_CONTENT
        && content_range(&res.headers) == Some((start, size - 1, size))
        && res.headers.get(header::ETAG) == Some(etag);
    if same {
        return res.body;
    }
    let why = format!("origin answered the rest of the object with another version or range ({})", res.status);
    stream::once(async move { Err(ReadError::changed(why)) }).boxed()
}
