//! One native attempt (docs/protocol.md section 6): ask for the blocks still
//! missing, verify each block as it arrives, write the good ones in place.

use crate::{
    GetError,
    fetch::{self, BodyReader, Failure, Stop},
    plain,
    session::Job,
    state::{NativeState, Progress},
};
use bytes::BytesMut;
use circus_core::BlockSet;
use circus_proto::{
    CONTENT_TYPE, Decoder, Frame, MAX_SENT_NEED_LEN, Manifest, NEED_HEADER, ProtoError, VerifiedBlock, complement,
    format_need,
};
use http::{HeaderMap, HeaderValue, StatusCode, header};

/// Native first, anything else (the plain file) as a fallback. The native
/// type is named explicitly: a circus server does not pick it for `*/*`.
const ACCEPT: &str = "application/vnd.circus.blocks, */*;q=0.1";

/// Whether a response carries the native stream (parameters ignored).
pub(crate) fn is_native(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case(CONTENT_TYPE))
}

pub(crate) async fn attempt(job: &mut Job<'_>) -> Result<(), Stop> {
    let mut headers = job.request_headers();
    headers.insert(header::ACCEPT, HeaderValue::from_static(ACCEPT));
    if let Progress::Native(n) = &job.state.progress {
        // An ETag that is not a valid header value cannot be sent back; the
        // request then asks for everything and the manifest decides.
        if let Ok(etag) = HeaderValue::from_str(&n.etag) {
            // A fragmented need set is sent coarser (a superset) rather than
            // in a header too long for the server's request-head limit; the
            // blocks it brings back twice are counted and dropped (`store`).
            let need = format_need(&complement(&n.have), MAX_SENT_NEED_LEN);
            headers.insert(header::IF_RANGE, etag);
            headers.insert(NEED_HEADER, HeaderValue::from_str(&need).expect("digits, commas and dashes"));
        }
    }
    let res = fetch::get(job.client, &job.uri, &headers, job.opts.timeout, &[]).await?;
    if !is_native(res.headers()) {
        if res.status() != StatusCode::OK {
            return Err(Stop::Retry(Failure::new(format!("unexpected {} to a GET without Range", res.status()))));
        }
        tracing::debug!(url = %job.uri, "not a circus server: plain download");
        return plain::receive(job, res, 0).await;
    }
    if res.status() != StatusCode::OK {
        return Err(Stop::Retry(Failure::new(format!("native stream with status {}", res.status()))));
    }
    let repr = Job::repr_digest(res.headers());
    let mut body = BodyReader::new(res.into_body(), job.opts.timeout);
    let mut decoder = Decoder::new();
    let mut buf = BytesMut::new();
    let mut manifest: Option<Manifest> = None;
    let mut fail = Failure::default();
    let retry = |mut f: Failure, reason: String| {
        f.reason = reason;
        Err(Stop::Retry(f))
    };
    loop {
        loop {
            let frame = match decoder.decode(&mut buf) {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                // The server would send the same manifest again.
                Err(e) if manifest.is_none() && is_manifest_error(&e) => {
                    return Err(Stop::Fatal(GetError::InvalidManifest { source: e }));
                }
                Err(e) => return retry(fail, format!("the server sent a malformed stream: {e}")),
            };
            match frame {
                Frame::Manifest(m) => {
                    accept_manifest(job, &m, repr).await?;
                    manifest = Some(m);
                }
                Frame::Block(block) => {
                    let m = manifest.as_ref().expect("the decoder yields blocks only after the manifest");
                    match m.check_block(block) {
                        Ok(v) => store(job, v, &mut fail).await?,
                        Err(ProtoError::CorruptBlock { index }) => {
                            // Dropped, never written: it stays missing and
                            // goes into the next request's Circus-Need.
                            tracing::debug!(url = %job.uri, index, "block failed verification");
                            fail.corrupt += 1;
                            job.report.blocks_corrupt += 1;
                        }
                        Err(e) => return retry(fail, format!("the server sent a bad block: {e}")),
                    }
                }
                Frame::End => {
                    if job.state.is_complete() {
                        return Ok(());
                    }
                    let missing = job.state.total().unwrap_or(0).saturating_sub(job.state.done_bytes());
                    let reason = if fail.corrupt > 0 {
                        format!("{} blocks failed verification", fail.corrupt)
                    } else {
                        format!("the server ended the stream with {missing} bytes still missing")
                    };
                    return retry(fail, reason);
                }
                Frame::Error { code, message } => {
                    fail.start_over = !code.keeps_progress();
                    return retry(fail, format!("the server gave up: {code}: {message}"));
                }
                Frame::Unknown { .. } => {}
            }
        }
        match body.next(&mut job.throttle).await {
            Ok(Some(data)) => {
                job.report.received_bytes += data.len() as u64;
                buf.extend_from_slice(&data);
            }
            Ok(None) => return retry(fail, "the connection closed before the END frame".into()),
            Err(reason) => return retry(fail, reason),
        }
    }
}

/// Whether a decode error is about the manifest itself (its fields, its
/// size, its leaves) rather than the stream around it.
fn is_manifest_error(e: &ProtoError) -> bool {
    matches!(e, ProtoError::BadManifest { .. } | ProtoError::FrameTooLarge { kind: 1, .. })
}

/// Keeps the progress if the manifest is the version it belongs to;
/// otherwise starts over with this version (the server then sends every
/// block, because `If-Range` did not match).
async fn accept_manifest(job: &mut Job<'_>, m: &Manifest, repr: Option<crate::Sha256Digest>) -> Result<(), GetError> {
    let layout = m.layout();
    if let Progress::Native(n) = &job.state.progress
        && (n.etag.as_str(), n.root, n.layout) == (m.etag.as_str(), m.root, layout)
    {
        job.state.repr_sha256 = repr.or(job.state.repr_sha256);
        return Ok(());
    }
    if job.state.progress != Progress::Fresh {
        job.report.restarts += 1;
        job.note("the file changed on the server; starting over");
    }
    let fresh = NativeState {
        etag: m.etag.clone(),
        root: m.root,
        sha256: m.sha256,
        layout,
        have: BlockSet::new(layout.blocks()),
    };
    job.report.protocol = crate::Protocol::Native;
    job.begin(Progress::Native(fresh), layout.len(), repr).await
}

async fn store(job: &mut Job<'_>, block: VerifiedBlock, fail: &mut Failure) -> Result<(), GetError> {
    let Progress::Native(n) = &mut job.state.progress else { unreachable!("a manifest was accepted") };
    let index = block.index();
    if n.have.contains(index) {
        job.report.blocks_duplicate += 1;
        return Ok(());
    }
    let (offset, data) = (block.offset(), block.into_block().data);
    let len = data.len() as u64;
    job.writer.write(offset, data).await?;
    // Marked once the write is queued, with no await between: the writer
    // runs commands in order, so any checkpoint that records the block comes
    // after its write, and a download cancelled while the queue was full
    // does not record a block it never wrote. If the write fails, the writer
    // is dead and no checkpoint follows.
    n.have.insert(index);
    job.report.blocks_received += 1;
    fail.progressed = true;
    job.written(1, len).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_responses_are_recognised_by_content_type() {
        let mut h = HeaderMap::new();
        assert!(!is_native(&h));
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
        assert!(!is_native(&h));
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("Application/Vnd.Circus.Blocks; v=1"));
        assert!(is_native(&h));
    }
}
