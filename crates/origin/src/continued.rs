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
        let Some(etag) = etag.filter(|_| !own_terms && size > 0) else { return Err(first) };
        let start = last_byte + 1;
        fh.insert(header::RANGE, HeaderValue::from_str(&format!("bytes={start}-")).expect("ASCII"));
        fh.insert(header::IF_MATCH, etag.clone());
        let (tier, target) = (self.clone(), target.to_owned());
        let rest = stream::once(async move {
            tier.metrics.origin_requests.inc();
            let rest = match tier.client.get(&target, &fh).await {
                Ok(res) => rest_of(res, &etag, start, size),
                Err(e) => Err(e),
            };
            rest.unwrap_or_else(|e| {
                tier.metrics.origin_errors.inc();
                tracing::warn!(%target, error = %e, "the rest of a relayed object failed");
                stream::once(async move { Err(e) }).boxed()
            })
        })
        .flatten();
        let OriginResponse { mut headers, body, .. } = first;
        headers.remove(header::CONTENT_RANGE);
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(size));
        Ok(OriginResponse { status: StatusCode::OK, headers, body: body.chain(rest).boxed() })
    }
}

/// The continuation's body if it is `start..size` of the version `etag`
/// names: a 206 of exactly that range, or a 200 of the whole version (an
/// origin that ignores Range), whose first `start` bytes are skipped.
fn rest_of(res: OriginResponse, etag: &HeaderValue, start: u64, size: u64) -> Result<OriginBody, ReadError> {
    let same_version = res.headers.get(header::ETAG) == Some(etag);
    let length = res.headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    match res.status {
        StatusCode::PARTIAL_CONTENT if same_version && content_range(&res.headers) == Some((start, size - 1, size)) => {
            Ok(res.body)
        }
        StatusCode::OK if same_version && length == Some(size) => Ok(skip(res.body, start)),
        status => Err(ReadError::changed(format!(
            "origin answered the rest of the object with another version or range ({status})"
        ))),
    }
}

/// `body` without its first `n` bytes.
fn skip(body: OriginBody, n: u64) -> OriginBody {
    body.scan(n, |left, chunk| {
        let out = chunk.map(|mut bytes| {
            let cut = (*left).min(bytes.len() as u64);
            *left -= cut;
            bytes.split_off(cut as usize)
        });
        std::future::ready(Some(out))
    })
    .filter(|chunk| std::future::ready(!matches!(chunk, Ok(b) if b.is_empty())))
    .boxed()
}
