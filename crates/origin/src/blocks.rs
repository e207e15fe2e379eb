//! The blocks of stored versions: resident or on their way, claimed under
//! one lock so that each has one fetch, received from the origin and
//! checked (against the version's validators, its leaves and its digest)
//! before any reader sees them whole; and [`OriginBlocks`], a version as
//! the scheduler's driver reads it.

use crate::{
    BlockRef, Object, OriginTier,
    client::content_range,
    fetch::{BlockFetch, Via},
    integrity, leaves, metrics,
    peers::{Peers, Upstream},
    source::OriginResponse,
};
use bytes::Bytes;
use circus_store::{BlockSource, FileIndex, ReadError, ReadFuture};
use futures_util::StreamExt;
use http::{HeaderName, StatusCode, header};
use std::{
    sync::Arc,
    time::{Duration, Instant},
};

/// A fetch that takes longer is logged, with where its time went.
const SLOW_FETCH: Duration = Duration::from_secs(5);

impl OriginTier {
    /// Block `b` of `obj`, resident or on its way; starts fetches for it and
    /// the `readahead` blocks after it that are neither, from `upstream`.
    pub(crate) fn block(self: &Arc<Self>, obj: &Arc<Object>, b: u32, readahead: u32, upstream: Upstream) -> BlockRef {
        let last = (b + readahead).min(obj.layout.blocks() - 1);
        if let Some(bytes) = self.store.block(obj.version, b) {
            if last > b {
                self.ensure(obj, b + 1, last, upstream);
            }
            return BlockRef::Ready(bytes);
        }
        loop {
            self.ensure(obj, b, last, upstream);
            let found = self.inflight.lock().expect("inflight lock").get(&(obj.version, b)).cloned();
            match found {
                // A member's ask waits only on fetches nearer the origin
                // than itself: had this node asked that member for the
                // block meanwhile (their views of the placement differ
                // for a moment), each would wait on the other. It fetches
                // the block on its own.
                Some(f) if !upstream.may_wait_on(f.via()) => {
                    let alone = Arc::new(BlockFetch::new(obj.layout.block_len(b), upstream.own_via()));
                    self.spawn_fetch(obj.clone(), b, vec![alone.clone()], None, upstream);
                    return BlockRef::Pending(alone);
                }
                Some(f) => return BlockRef::Pending(f),
                None => {}
            }
            // Completed between the two looks; if it was evicted at once (a
            // budget smaller than the readers' spread) the next round claims it.
            if let Some(bytes) = self.store.block(obj.version, b) {
                return BlockRef::Ready(bytes);
            }
        }
    }

    /// `len` bytes at `offset` of `obj`, within one of its blocks.
    pub(crate) async fn read(self: &Arc<Self>, obj: &Arc<Object>, offset: u64, len: u32) -> Result<Bytes, ReadError> {
        let b = obj
            .layout
            .block_of(offset)
            .ok_or_else(|| ReadError::origin(format!("{}: read past the end", obj.target)))?;
        let at = (offset - obj.layout.offset(b)) as usize;
        // The scheduler's reads are the demand: no read-ahead of our own,
        // whose blocks its out-of-order reads might never come for.
        match self.block(obj, b, 0, Upstream::Owner) {
            BlockRef::Ready(bytes) => bytes
                .get(at..at + len as usize)
                .map(|part| bytes.slice_ref(part))
                .ok_or_else(|| ReadError::origin(format!("{}: a native block crosses origin blocks", obj.target))),
            BlockRef::Pending(fetch) => fetch.range(at, len as usize).await,
        }
    }

    /// Checks the whole version against the origin's digest (when it gave
    /// one), reading the blocks the check still needs (resident, in flight
    /// or fetched); a mismatch forgets the version. `Ok` without a digest.
    /// A mismatch is a change: the version's bytes were not one version's.
    pub(crate) async fn verified(self: &Arc<Self>, obj: &Arc<Object>) -> Result<(), ReadError> {
        let Some(check) = &obj.integrity else { return Ok(()) };
        loop {
            if let Some(outcome) = check.outcome() {
                return outcome;
            }
            let Some(b) = check.next_needed() else {
                // The last block is being hashed: its outcome is a moment away.
                tokio::task::yield_now().await;
                continue;
            };
            let bytes = self.read(obj, obj.layout.offset(b), obj.layout.block_len(b)).await?;
            if let Some(Err(e)) = check.record(b, &bytes) {
                self.metrics.origin_errors.inc();
                tracing::warn!(target = %obj.target, error = %e, "origin object failed its digest");
                self.store.forget_version(&obj.target, obj.version);
                return Err(e);
            }
        }
    }

    /// Claims the blocks in `first..=last` that are neither resident nor in
    /// flight, under one lock so that no block gets two fetches, and starts
    /// one ranged request per run of them (in a cluster, per run within a
    /// group, as each group has its owner).
    pub(crate) fn ensure(self: &Arc<Self>, obj: &Arc<Object>, first: u32, last: u32, upstream: Upstream) {
        let mut runs: Vec<(u32, Upstream, Vec<Arc<BlockFetch>>)> = Vec::new();
        let group = self.peers.as_ref().map_or(u32::MAX, |p| p.group_blocks(obj.size, self.block_size)).max(1);
        // Whom block `b`'s group is asked of.
        let via = |b: u32| match (&self.peers, upstream) {
            (Some(p), Upstream::Owner | Upstream::OwnerOnly) => {
                let spread = upstream == Upstream::Owner;
                match p.source(&obj.target, obj.version, obj.size, obj.layout.offset(b), spread) {
                    Some(m) if m.replica => Via::Replica,
                    Some(_) => Via::Owner,
                    None => Via::Origin,
                }
            }
            _ => Via::Origin,
        };
        let mut group_via: Option<(u32, Via)> = None;
        {
            let mut inflight = self.inflight.lock().expect("inflight lock");
            let mut open = false;
            for b in first..=last {
                if inflight.contains_key(&(obj.version, b)) || self.store.has_block(obj.version, b) {
                    open = false;
                    continue;
                }
                if b % group == 0 {
                    open = false;
                }
                let via = match group_via {
                    Some((g, via)) if g == b / group => via,
                    _ => {
                        let via = via(b);
                        group_via = Some((b / group, via));
                        via
                    }
                };
                let fetch = Arc::new(BlockFetch::new(obj.layout.block_len(b), via));
                inflight.insert((obj.version, b), fetch.clone());
                match runs.last_mut() {
                    Some((_, _, run)) if open => run.push(fetch),
                    _ => runs.push((b, upstream.to_fetch(via), vec![fetch])),
                }
                open = true;
            }
        }
        for (start, upstream, fetches) in runs {
            self.spawn_fetch(obj.clone(), start, fetches, None, upstream);
        }
    }

    /// Registers fetches for `first..=last` of a version nobody else knows
    /// yet, coming `via` the origin or a member.
    pub(crate) fn register(&self, obj: &Object, first: u32, last: u32, via: Via) -> Vec<Arc<BlockFetch>> {
        let mut inflight = self.inflight.lock().expect("inflight lock");
        (first..=last)
            .map(|b| {
                let fetch = Arc::new(BlockFetch::new(obj.layout.block_len(b), via));
                inflight.insert((obj.version, b), fetch.clone());
                fetch
            })
            .collect()
    }

    pub(crate) fn spawn_fetch(
        self: &Arc<Self>,
        obj: Arc<Object>,
        first: u32,
        fetches: Vec<Arc<BlockFetch>>,
        res: Option<(OriginResponse, Option<Arc<str>>)>,
        upstream: Upstream,
    ) {
        let tier = self.clone();
        tokio::spawn(async move {
            let mut done = Done {
                tier: tier.clone(),
                version: obj.version,
                leaves: obj.leaves.clone(),
                integrity: obj.integrity.clone(),
                first,
                fetches,
                next: 0,
            };
            if let Err(e) = tier.pump(&obj, &mut done, res, upstream).await {
                tier.metrics.origin_errors.inc();
                tracing::warn!(target = %obj.target, block = first + done.next as u32, error = %e, "origin fetch failed");
                if e.is_changed() {
                    // The next request revalidates and fetches the new version.
                    tier.store.forget_version(&obj.target, obj.version);
                }
                done.fail(&e);
            }
        });
    }

    /// Receives the blocks of `done` from the origin (or the owner of their
    /// group) into their fetches.
    async fn pump(
        &self,
        obj: &Object,
        done: &mut Done,
        res: Option<(OriginResponse, Option<Arc<str>>)>,
        upstream: Upstream,
    ) -> Result<(), ReadError> {
        let layout = obj.layout;
        let last = done.first + done.fetches.len() as u32 - 1;
        let (start, end) = (layout.offset(done.first), layout.offset(last) + u64::from(layout.block_len(last)) - 1);
        // An origin that ignores Range sends a whole object in one fetch:
        // it takes the whole share rather than wait for more than exists.
        // Fetches asked of peers draw on their own share: a peer's request
        // is served by fetches from the origin, which must never wait for
        // room that fetches waiting on peers hold.
        let pool = match done.fetches.first().map(|f| f.via()) {
            Some(Via::Owner) => &self.peer_pool,
            Some(Via::Replica) => &self.replica_pool,
            _ => &self.origin_pool,
        };
        let kib = u32::try_from((end - start + 1).div_ceil(1024)).unwrap_or(u32::MAX).min(pool.kib_total);
        let began = Instant::now();
        let _bytes = pool.kib.acquire_many(kib).await.map_err(|e| ReadError::origin(e.to_string()))?;
        let _slot = pool.slots.acquire().await.map_err(|e| ReadError::origin(e.to_string()))?;
        let room = began.elapsed();
        let (res, peer) = match res {
            Some(answered) => answered,
            None => self.fetch_part(obj, start, end, upstream).await?,
        };
        let head = began.elapsed();
        let mut body = res.body;
        let wait = self.client.timeout();
        // A peer that stops sending is out of the placement at once, so the
        // block is asked of the next member when a reader comes back for it.
        let peer_failed = |e: ReadError| {
            if let (Some(m), Some(peers)) = (&peer, &self.peers)
                && peers.set_live(m, false)
            {
                tracing::warn!(peer = &**m, error = %e, "peer failed mid-body: out of the placement");
            }
            e
        };
        while let Some(chunk) = tokio::time::timeout(wait, body.next())
            .await
            // A stall may be the member's origin: the probes judge it.
            .map_err(|_| ReadError::origin(format!("origin sent nothing for {wait:?}")))?
        {
            let mut data = chunk.map_err(peer_failed)?;
            match peer {
                Some(_) => {
                    self.metrics.peer_bytes.inc_by(data.len() as u64);
                }
                None => self.metrics.fetched(metrics::class(obj.size, self.block_size), data.len() as u64),
            }
            while !data.is_empty() {
                let Some(fetch) = done.fetches.get(done.next) else {
                    return Err(ReadError::changed(
                        "origin sent more bytes than its range or length: the object is not what it said",
                    ));
                };
                let want = fetch.len_left();
                let piece = if data.len() > want { data.split_to(want) } else { std::mem::take(&mut data) };
                fetch.push(piece);
                if fetch.len_left() == 0 {
                    done.complete_next()?;
                }
            }
        }
        if done.next < done.fetches.len() {
            let got = done.fetches[done.next].received();
            return Err(peer_failed(ReadError::origin(format!(
                "origin closed the body early (block {} has {got} bytes)",
                done.first as usize + done.next
            ))));
        }
        // Readers wait on a slow fetch: say where its time went.
        if began.elapsed() > SLOW_FETCH {
            let from = peer.as_deref().unwrap_or("the origin");
            tracing::warn!(
                target = %obj.target, bytes = end - start + 1, from, room = ?room, head = ?head, all = ?began.elapsed(),
                "slow fetch (room: waiting for room for fetches; head: until the answer's head came; all: until its last byte)"
            );
        }
        Ok(())
    }

    /// Asks for bytes `start..=end` of `obj` (whole blocks of one group):
    /// from the member `upstream` names for the group when it is another
    /// live member (the owner, or for a client's fetch of a hot group one
    /// of the members serving it), else from the origin. A member that
    /// cannot be reached or fails is out of the placement, and the next is
    /// asked. The answer is checked to be that range of that version; an
    /// owner's word that the group is hot is kept.
    async fn fetch_part(
        &self,
        obj: &Object,
        start: u64,
        end: u64,
        upstream: Upstream,
    ) -> Result<(OriginResponse, Option<Arc<str>>), ReadError> {
        let headers = obj.fetch_headers(start, end);
        // A client's fetch may go to a hot group's replica; when that fails
        // behind the replica, the owner is asked before the origin.
        let tries: &[bool] = match upstream {
            Upstream::Owner => &[true, false],
            Upstream::OwnerOnly => &[false],
            Upstream::Origin => &[],
        };
        for &spread in tries {
            let source = |p: &Peers| p.source(&obj.target, obj.version, obj.size, start, spread);
            let to_replica = self.peers.as_deref().and_then(source).is_some_and(|m| m.replica);
            if let Some((res, m)) = self.ask_member(&obj.target, headers.clone(), source).await? {
                let hot = res.headers.contains_key(crate::hot::HOT_HEADER);
                let res = check_part(obj, res, start, end)?;
                if hot && let Some(p) = &self.peers {
                    p.learn_hot(obj.version, obj.size, start);
                }
                return Ok((res, Some(m)));
            }
            if !to_replica {
                break;
            }
        }
        self.metrics.origin_requests.inc();
        let res = self.client.get(&obj.target, &headers).await?;
        Ok((check_part(obj, res, start, end)?, None))
    }

    /// Every block of `obj` through the store, in order, fetched as a
    /// reader would fetch them (runs of the read-ahead window, within the
    /// share for fetches in flight), and its digest checked when the
    /// origin gave one. An object larger than the store streams through it.
    pub(crate) async fn fetch_whole(self: &Arc<Self>, obj: &Arc<Object>) -> Result<(), ReadError> {
        let layout = obj.layout;
        if layout.blocks() == 0 || obj.status != StatusCode::OK {
            return Ok(());
        }
        for b in 0..layout.blocks() {
            match self.block(obj, b, self.readahead, Upstream::Owner) {
                BlockRef::Ready(_) => {}
                BlockRef::Pending(fetch) => {
                    fetch.range(0, layout.block_len(b) as usize).await?;
                }
            }
        }
        self.verified(obj).await
    }
}

/// `res` if it is bytes `start..=end` of the version `obj` describes: a 206
/// of that range (or the 200 of a whole object asked for whole) whose
/// validators are the version's. A 412 or other validators mean the
/// object changed.
fn check_part(obj: &Object, res: OriginResponse, start: u64, end: u64) -> Result<OriginResponse, ReadError> {
    let ok = match res.status {
        StatusCode::PARTIAL_CONTENT => content_range(&res.headers) == Some((start, end, obj.size)),
        StatusCode::OK => (start, end + 1) == (0, obj.size),
        StatusCode::PRECONDITION_FAILED => {
            return Err(ReadError::changed(format!("origin object changed (412 to bytes={start}-{end})")));
        }
        s => return Err(ReadError::origin(format!("origin answered {} to bytes={start}-{end}", s.as_u16()))),
    };
    if !ok {
        return Err(ReadError::origin(format!("origin answered a different range than bytes={start}-{end}")));
    }
    // An origin that ignores If-Match (some S3-compatible servers do)
    // still names the version it sent.
    let etag = res.headers.get(header::ETAG).and_then(|v| v.to_str().ok());
    if let (Some(got), Some(want)) = (etag, obj.etag.as_deref())
        && got != want
    {
        return Err(ReadError::changed(format!("origin object changed (ETag {got}, stored {want})")));
    }
    // What else the origin says about the version must agree too.
    for name in [header::LAST_MODIFIED, HeaderName::from_static("repr-digest")] {
        if let (Some(got), Some(want)) = (res.headers.get(&name), obj.headers.get(&name))
            && got != want
        {
            return Err(ReadError::changed(format!("origin object changed ({name} {got:?}, stored {want:?})")));
        }
    }
    Ok(res)
}

/// A version of an origin object as the scheduler reads it: blocks come
/// from the tier's store or its single-flight fetches.
#[derive(Debug)]
pub struct OriginBlocks {
    pub(crate) tier: Arc<OriginTier>,
    pub(crate) obj: Arc<Object>,
}

impl BlockSource for OriginBlocks {
    /// `len` bytes at `offset` (one native block, within one origin block).
    fn read_block(&self, offset: u64, len: u32) -> ReadFuture<'_, Bytes> {
        Box::pin(self.tier.read(&self.obj, offset, len))
    }

    /// Reads may share the origin block's buffer.
    fn shares_buffers(&self) -> bool {
        true
    }

    fn index(&self) -> ReadFuture<'_, Arc<FileIndex>> {
        let index = self.index_now().ok_or_else(|| ReadError::internal("an origin version's tree is not known"));
        Box::pin(async move { index })
    }

    fn index_now(&self) -> Option<Arc<FileIndex>> {
        self.obj.leaves.index()
    }
}

/// The blocks of one origin request; on drop (the fetch task ended, even by
/// panic), the ones not complete fail, so no waiter waits forever.
struct Done {
    tier: Arc<OriginTier>,
    version: u64,
    leaves: Arc<leaves::Leaves>,
    integrity: Option<Arc<integrity::Integrity>>,
    first: u32,
    fetches: Vec<Arc<BlockFetch>>,
    /// Index of the block being received.
    next: usize,
}

impl Done {
    /// Checks the block being received (now whole) against what the
    /// version's other blocks and digest say, then stores it and moves to
    /// the next. Stored before it leaves `inflight`, so readers find one or
    /// the other. A block that fails the check fails the fetch before any
    /// reader sees it complete.
    fn complete_next(&mut self) -> Result<(), ReadError> {
        let b = self.first + self.next as u32;
        let fetch = &self.fetches[self.next];
        if let Some(bytes) = fetch.assembled() {
            if !self.leaves.record(b, &bytes) {
                return Err(ReadError::changed(format!(
                    "block {b} came again with other bytes: the origin changed the object under the same validators"
                )));
            }
            if let Some(Err(e)) = self.integrity.as_ref().and_then(|i| i.record(b, &bytes)) {
                return Err(e);
            }
            if let Some(bytes) = fetch.complete() {
                self.tier.store.put_block(self.version, b, bytes);
            }
        }
        self.forget(b, fetch);
        self.next += 1;
        Ok(())
    }

    fn fail(&mut self, why: &ReadError) {
        while let Some(fetch) = self.fetches.get(self.next) {
            // Out of `inflight` before its waiters wake, so that one that
            // asks again starts a new fetch rather than find this one.
            self.forget(self.first + self.next as u32, fetch);
            fetch.fail(why);
            self.next += 1;
        }
    }

    fn forget(&self, b: u32, fetch: &Arc<BlockFetch>) {
        let mut inflight = self.tier.inflight.lock().expect("inflight lock");
        if inflight.get(&(self.version, b)).is_some_and(|f| Arc::ptr_eq(f, fetch)) {
            inflight.remove(&(self.version, b));
        }
    }
}

impl Drop for Done {
    fn drop(&mut self) {
        self.fail(&ReadError::origin("origin fetch stopped"));
    }
}
