//! Plain HTTP downloads, for servers that do not speak circus: the body is
//! the file, resumed with `Range: bytes=N-` and `If-Range`.

use crate::{
    fetch::{self, BodyReader, Failure, Stop},
    native::is_native,
    session::Job,
    state::{PlainState, Progress},
};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use hyper::body::Incoming;

pub(crate) async fn attempt(job: &mut Job<'_>) -> Result<(), Stop> {
    let mut headers = job.request_headers();
    headers.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
    let mut from = 0;
    if let Progress::Plain(PlainState { validator: Some(v), done, .. }) = &job.state.progress
        && *done > 0
        && let Ok(v) = HeaderValue::from_str(v)
    {
        // If-Range makes the server send the whole file (200) rather than a
        // range of a different version.
        headers.insert(header::RANGE, HeaderValue::from_str(&format!("bytes={done}-")).expect("ASCII"));
        headers.insert(header::IF_RANGE, v);
        from = *done;
    }
    let res =
        fetch::get(job.client, &job.uri, &headers, job.opts.timeout, &[StatusCode::RANGE_NOT_SATISFIABLE]).await?;
    if res.status() == StatusCode::RANGE_NOT_SATISFIABLE {
        let f = Failure {
            start_over: true,
            ..Failure::new(format!("the server has no bytes from {from} on (the file shrank?)"))
        };
        return Err(Stop::Retry(f));
    }
    if is_native(res.headers()) {
        return Err(Stop::Retry(Failure::new("the server answered a plain request with a native stream")));
    }
    receive(job, res, from).await
}

/// Takes a plain response to a request for bytes `from..`: a 206 continues
/// the download, a 200 starts it over from byte 0.
pub(crate) async fn receive(job: &mut Job<'_>, res: http::Response<Incoming>, from: u64) -> Result<(), Stop> {
    let headers = res.headers();
    let repr = Job::repr_digest(headers);
    let mut offset = match res.status() {
        StatusCode::PARTIAL_CONTENT => {
            let Progress::Plain(p) = &job.state.progress else {
                return Err(Stop::Retry(Failure::new("206 to a request without Range")));
            };
            let (start, end, total) = match content_range(headers) {
                Some(cr) => cr,
                None => return Err(Stop::Retry(start_over("a 206 without a usable Content-Range"))),
            };
            let etag = headers.get(header::ETAG).and_then(|v| v.to_str().ok());
            let saved_etag = p.validator.as_deref().filter(|v| v.starts_with('"'));
            if start != from || total.is_some_and(|t| end + 1 != t) || (p.total.is_some() && total != p.total) {
                return Err(Stop::Retry(start_over(&format!(
                    "asked for bytes {from}- of {:?}, got {start}-{end}/{total:?}",
                    p.total
                ))));
            }
            if let (Some(now), Some(saved)) = (etag, saved_etag)
                && now != saved
            {
                return Err(Stop::Retry(start_over("the file changed on the server")));
            }
            if repr.is_some() {
                job.state.repr_sha256 = repr;
            }
            job.report.protocol = crate::Protocol::Plain;
            start
        }
        StatusCode::OK => {
            let total = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
            if from > 0 {
                job.report.restarts += 1;
                job.note("the server sent the whole file again (it changed, or ignores ranges); starting over");
            }
            let validator = validator(headers);
            job.report.protocol = crate::Protocol::Plain;
            job.begin(Progress::Plain(PlainState { validator, total, done: 0 }), total.unwrap_or(0), repr).await?;
            0
        }
        other => return Err(Stop::Retry(Failure::new(format!("unexpected status {other}")))),
    };
    let start = offset;
    let mut body = BodyReader::new(res.into_body(), job.opts.timeout);
    let failed =
        |offset: u64, reason: String| Stop::Retry(Failure { progressed: offset > start, ..Failure::new(reason) });
    loop {
        let data = match body.next(&mut job.throttle).await {
            Ok(Some(data)) => data,
            Ok(None) => break,
            Err(reason) => return Err(failed(offset, reason)),
        };
        let Progress::Plain(p) = &mut job.state.progress else { unreachable!("set above") };
        let len = data.len() as u64;
        if p.total.is_some_and(|t| offset + len > t) {
            return Err(Stop::Retry(start_over("the server sent more bytes than it announced")));
        }
        job.report.received_bytes += len;
        job.writer.write(offset, data).await?;
        offset += len;
        p.done = offset;
        job.written(0, len).await?;
    }
    let Progress::Plain(p) = &mut job.state.progress else { unreachable!("set above") };
    match p.total {
        Some(t) if offset < t => Err(failed(offset, format!("the body ended after {offset} of {t} bytes"))),
        // Without a length, a body that ended properly (chunked encoding's
        // last chunk; hyper reports a cut as an error) is the whole file.
        _ => {
            p.total = Some(offset);
            Ok(())
        }
    }
}

fn start_over(reason: &str) -> Failure {
    Failure { start_over: true, ..Failure::new(reason) }
}

/// What `If-Range` may carry: a strong ETag, else Last-Modified (weak ETags
/// are not allowed there).
fn validator(headers: &HeaderMap) -> Option<String> {
    let get = |name| headers.get(name).and_then(|v: &HeaderValue| v.to_str().ok());
    get(header::ETAG).filter(|e| e.starts_with('"')).or_else(|| get(header::LAST_MODIFIED)).map(str::to_owned)
}

/// `Content-Range: bytes a-b/total` (total may be `*`).
fn content_range(headers: &HeaderMap) -> Option<(u64, u64, Option<u64>)> {
    let v = headers.get(header::CONTENT_RANGE)?.to_str().ok()?;
    let (range, total) = v.trim().strip_prefix("bytes ")?.split_once('/')?;
    let (a, b) = range.split_once('-')?;
    let (a, b): (u64, u64) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
    let total = match total.trim() {
        "*" => None,
        t => Some(t.parse().ok()?),
    };
    (a <= b).then_some((a, b, total))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(header::HeaderName, &'static str)]) -> HeaderMap {
        pairs.iter().map(|(k, v)| (k.clone(), HeaderValue::from_static(v))).collect()
    }

    #[test]
    fn content_range_forms() {
        let cr = |v| content_range(&headers(&[(header::CONTENT_RANGE, v)]));
        assert_eq!(cr("bytes 10-19/20"), Some((10, 19, Some(20))));
        assert_eq!(cr("bytes 10-19/*"), Some((10, 19, None)));
        assert_eq!(cr("bytes 19-10/20"), None);
        assert_eq!(cr("bytes */20"), None);
        assert_eq!(cr("items 1-2/3"), None);
    }

    #[test]
    fn if_range_validator_prefers_a_strong_etag() {
        let lm = "Tue, 01 Jul 2025 12:00:00 GMT";
        assert_eq!(validator(&headers(&[(header::ETAG, "\"v1\""), (header::LAST_MODIFIED, lm)])).unwrap(), "\"v1\"");
        assert_eq!(validator(&headers(&[(header::ETAG, "W/\"v1\""), (header::LAST_MODIFIED, lm)])).unwrap(), lm);
        assert_eq!(validator(&HeaderMap::new()), None);
    }
}
