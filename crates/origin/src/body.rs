//! Response bodies for origin objects: a byte range assembled from blocks
//! that are resident (shared `Bytes`, sliced, never copied) or still
//! arriving from the origin (chunks streamed as they come). An origin
//! failure ends the body with an error, so hyper cuts the connection and a
//! client with Content-Length sees a short body, never a wrong one. Also the
//! bodies of relayed (unstored) responses.

use super::{
    BlockRef, OriginTier,
    fetch::BlockFetch,
    metrics,
    object::Object,
    peer_first::{self, Sending},
    peers::Upstream,
    source::OriginBody,
};

use bytes::Bytes;
use circus_http::{BodyError, ResBody};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use std::{
    pin::Pin,
    sync::{Arc, Mutex, PoisonError},
    task::{Context, Poll},
};
use tokio::sync::watch;

struct Pending {
    fetch: Arc<BlockFetch>,
    rx: watch::Receiver<()>,
    /// Next chunk to take, and the file offset it starts at.
    idx: usize,
    at: u64,
}

struct Cursor {
    tier: Arc<OriginTier>,
    obj: Arc<Object>,
    /// Next byte to send and the last one (inclusive).
    pos: u64,
    end: u64,
    pending: Option<Pending>,
    /// Hold the last bytes of a whole-object body until the version has
    /// matched the origin's digest (see `OriginTier::verified`).
    verify: bool,
    /// Where missing blocks come from.
    upstream: Upstream,
    /// Blocks that may still be asked again after a failed fetch (in a
    /// cluster: the member that failed is out, the next one is asked).
    retries: u32,
    /// A member's body: held while it has bytes to send, so that this
    /// node's clients wait (`peer_first`).
    sending: Option<Sending>,
    /// Whether this member's body is counted in the metrics yet.
    counted: bool,
}

/// Fetches a body of a cluster's tier asks again after one failed.
const CLUSTER_RETRIES: u32 = 2;

impl Cursor {
    /// The part of `[at, at + data.len())` still to send.
    fn clip(&mut self, at: u64, data: &Bytes) -> Option<Bytes> {
        self.clip_at_most(at, data, usize::MAX)
    }

    /// As `clip`, at most `most` bytes of it.
    fn clip_at_most(&mut self, at: u64, data: &Bytes, most: usize) -> Option<Bytes> {
        let stop = at + data.len() as u64;
        if stop <= self.pos || self.pos > self.end {
            return None;
        }
        let from = (self.pos - at) as usize;
        let to = ((stop.min(self.end + 1) - at) as usize).min(from.saturating_add(most));
        self.pos = at + to as u64;
        Some(data.slice(from..to))
    }

    async fn next(&mut self) -> Option<Result<Bytes, BodyError>> {
        let first = self.tier.peer_first.clone();
        if let Some(first) = &first
            && !self.upstream.for_member()
        {
            first.wait_turn(peer_first::MAX_WAIT).await;
        }
        let item = self.next_chunk().await;
        match (&item, &first, self.upstream) {
            // A member's body has bytes for hyper to send.
            (Some(Ok(_)), Some(first), upstream) if upstream.for_member() => match &self.sending {
                Some(sending) => sending.progressed(),
                None => {
                    if !self.counted {
                        self.counted = true;
                        self.tier.metrics.peer_first_bodies.inc();
                    }
                    self.sending = Some(first.sending());
                }
            },
            (Some(Ok(_)), ..) => {}
            _ => self.sending = None,
        }
        if let Some(Ok(bytes)) = &item {
            self.tier.metrics.served(metrics::class(self.obj.size, self.tier.block_size), bytes.len() as u64);
        }
        if self.verify && self.pos > self.end && matches!(item, Some(Ok(_))) {
            self.verify = false;
            if let Err(e) = self.tier.verified(&self.obj).await {
                return Some(Err(format!("origin object not sent whole: {e}").into()));
            }
        }
        item
    }

    async fn next_chunk(&mut self) -> Option<Result<Bytes, BodyError>> {
        loop {
            if let Some(p) = self.pending.as_mut() {
                let chunk = {
                    let arriving = p.fetch.chunk(p.idx, &mut p.rx);
                    tokio::pin!(arriving);
                    match futures_util::poll!(arriving.as_mut()) {
                        Poll::Ready(chunk) => chunk,
                        Poll::Pending => {
                            // A member's body waiting on the origin holds
                            // no client up.
                            self.sending = None;
                            arriving.await
                        }
                    }
                };
                match chunk {
                    Ok(Some(chunk)) => {
                        let at = p.at;
                        p.idx += 1;
                        p.at += chunk.len() as u64;
                        if let Some(out) = self.clip(at, &chunk) {
                            return Some(Ok(out));
                        }
                    }
                    Ok(None) => self.pending = None,
                    // What was sent stays sent: `clip` skips it when the
                    // block comes again.
                    Err(e) if self.retries > 0 && !e.is_changed() => {
                        self.retries -= 1;
                        tracing::info!(target = %self.obj.target, error = %e, "block fetch failed: asked again");
                        self.pending = None;
                    }
                    Err(e) => {
                        self.pos = self.end + 1;
                        return Some(Err(format!("origin fetch failed: {e}").into()));
                    }
                }
                continue;
            }
            if self.pos > self.end {
                return None;
            }
            let layout = self.obj.layout;
            let b = layout.block_of(self.pos).expect("range within the object");
            let at = layout.offset(b);
            // A peer's request reads ahead only within what it asked for:
            // the next group is another member's.
            let readahead = if self.upstream.for_member() {
                layout.block_of(self.end).map_or(0, |last| last - b).min(self.tier.readahead)
            } else {
                self.tier.readahead
            };
            match self.tier.block(&self.obj, b, readahead, self.upstream) {
                BlockRef::Ready(bytes) => {
                    // In a cluster a body goes a slice at a time: a client's
                    // so that members' bodies wait behind little of it, a
                    // member's so that it shows progress as its connection
                    // takes it (see `peer_first`).
                    let most = match &self.tier.peer_first {
                        Some(_) if !self.upstream.for_member() => peer_first::CLIENT_SLICE,
                        Some(_) => peer_first::MEMBER_SLICE,
                        None => usize::MAX,
                    };
                    if let Some(out) = self.clip_at_most(at, &bytes, most) {
                        return Some(Ok(out));
                    }
                    // A resident block of the wrong length would loop here.
                    return Some(Err("internal: resident block shorter than its layout".into()));
                }
                BlockRef::Pending(fetch) => {
                    let rx = fetch.subscribe();
                    self.pending = Some(Pending { fetch, rx, idx: 0, at });
                }
            }
        }
    }
}

/// Bytes `start..=end` of `obj`, its missing blocks fetched from `upstream`.
pub(crate) fn range(tier: Arc<OriginTier>, obj: Arc<Object>, start: u64, end: u64, upstream: Upstream) -> ResBody {
    let verify = (start, end + 1) == (0, obj.size) && !obj.trusted();
    // A block asked again must be the same version's: only with a strong
    // ETag (sent as If-Match) or a digest to hold it to.
    let strong = obj.etag.as_deref().is_some_and(|e| !e.starts_with("W/")) || obj.integrity.is_some();
    let retries = if tier.peers.is_some() && strong { CLUSTER_RETRIES } else { 0 };
    let cursor =
        Cursor { tier, obj, pos: start, end, pending: None, verify, upstream, retries, sending: None, counted: false };
    let stream = futures_util::stream::unfold(cursor, |mut c| async move {
        let item = c.next().await?;
        Some((item.map(Frame::data), c))
    });
    StreamBody::new(stream).boxed()
}

/// An origin's body relayed as it comes (responses the tier does not
/// store), its bytes counted as served.
pub fn relayed(body: OriginBody, served: impl Fn(u64) + Send + 'static) -> ResBody {
    let counted = futures_util::StreamExt::inspect(body, move |chunk| {
        if let Ok(bytes) = chunk {
            served(bytes.len() as u64);
        }
    });
    Relayed(Mutex::new(futures_util::StreamExt::boxed(counted))).boxed()
}

/// Response bodies must be `Sync` and origin streams (object_store's) are
/// only `Send`: a Mutex makes the pair `Sync`, and `get_mut` reaches the
/// stream without ever locking, as the body is polled through `&mut`.
struct Relayed(Mutex<OriginBody>);

impl http_body::Body for Relayed {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let stream = self.get_mut().0.get_mut().unwrap_or_else(PoisonError::into_inner);
        futures_util::StreamExt::poll_next_unpin(stream, cx)
            .map(|item| item.map(|r| r.map(Frame::data).map_err(BodyError::from)))
    }
}
