//! Block fetches from the origin, one per block however many clients wait
//! (single flight). A fetch keeps the chunks it has received so far, so a
//! waiter that joins late starts from the first chunk and every waiter
//! streams bytes as they arrive. A fetch ends in exactly one of two ways:
//! all of the block's bytes, or an error that every waiter sees; a short
//! block never looks complete.

use bytes::{Bytes, BytesMut};
use circus_store::ReadError;
use std::sync::Mutex;
use tokio::sync::watch;

#[derive(Debug, Default)]
struct FetchState {
    chunks: Vec<Bytes>,
    received: usize,
    end: Option<Result<(), ReadError>>,
}

/// Whom a fetch asks: who may wait on it follows (see
/// `Upstream::may_wait_on`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// The origin (or, for a first answer, whoever gave it).
    Origin,
    /// The owner of the block's group.
    Owner,
    /// A replica of a hot group, which asks the owner in turn.
    Replica,
}

/// One block on its way from the origin.
#[derive(Debug)]
pub struct BlockFetch {
    len: usize,
    via: Via,
    state: Mutex<FetchState>,
    /// Bumped on every change; waiters sleep on it.
    tick: watch::Sender<()>,
}

impl BlockFetch {
    pub fn new(len: u32, via: Via) -> Self {
        BlockFetch { len: len as usize, via, state: Mutex::default(), tick: watch::Sender::new(()) }
    }

    pub fn via(&self) -> Via {
        self.via
    }

    pub fn subscribe(&self) -> watch::Receiver<()> {
        self.tick.subscribe()
    }

    /// Bytes of the block not received yet.
    pub fn len_left(&self) -> usize {
        self.len - self.received()
    }

    pub fn received(&self) -> usize {
        self.state.lock().expect("fetch lock").received
    }

    /// Adds the next chunk. The caller never pushes beyond the block.
    pub fn push(&self, chunk: Bytes) {
        let mut st = self.state.lock().expect("fetch lock");
        st.received += chunk.len();
        debug_assert!(st.received <= self.len, "chunk beyond the block");
        st.chunks.push(chunk);
        drop(st);
        self.tick.send_replace(());
    }

    /// The block's bytes as one buffer once all arrived (to check them
    /// before [`complete`](Self::complete)), or `None` while it is short.
    pub fn assembled(&self) -> Option<Bytes> {
        let st = self.state.lock().expect("fetch lock");
        if st.received != self.len || st.end.is_some() {
            return None;
        }
        Some(match st.chunks.as_slice() {
            [one] => one.clone(),
            chunks => {
                let mut buf = BytesMut::with_capacity(self.len);
                chunks.iter().for_each(|c| buf.extend_from_slice(c));
                buf.freeze()
            }
        })
    }

    /// Marks the block complete and returns its bytes as one buffer (for
    /// the store), or `None` if it is short, which the caller must fail.
    pub fn complete(&self) -> Option<Bytes> {
        let whole = self.assembled()?;
        let mut st = self.state.lock().expect("fetch lock");
        if st.end.is_some() {
            return None;
        }
        st.end = Some(Ok(()));
        drop(st);
        self.tick.send_replace(());
        Some(whole)
    }

    /// Fails the block for every waiter, unless it already ended.
    pub fn fail(&self, why: &ReadError) {
        let mut st = self.state.lock().expect("fetch lock");
        if st.end.is_none() {
            st.end = Some(Err(why.clone()));
        }
        drop(st);
        self.tick.send_replace(());
    }

    /// Bytes `at..at + len` of the block, copied out of its chunks once
    /// they have arrived (the rest of the block may still be on its way).
    pub async fn range(&self, at: usize, len: usize) -> Result<Bytes, ReadError> {
        let mut rx = self.subscribe();
        loop {
            rx.borrow_and_update();
            {
                let st = self.state.lock().expect("fetch lock");
                if let Some(Err(e)) = &st.end {
                    return Err(e.clone());
                }
                if st.received >= at + len {
                    let mut out = BytesMut::with_capacity(len);
                    let mut pos = 0;
                    for c in &st.chunks {
                        let (from, to) = (at.max(pos), (at + len).min(pos + c.len()));
                        if from < to {
                            out.extend_from_slice(&c[from - pos..to - pos]);
                        }
                        pos += c.len();
                    }
                    return Ok(out.freeze());
                }
                if st.end.is_some() {
                    return Err(ReadError::origin(format!(
                        "block ended at {} bytes, before byte {}",
                        st.received,
                        at + len
                    )));
                }
            }
            let _ = rx.changed().await;
        }
    }

    /// Chunk `idx`, waiting for it; `Ok(None)` once the block is complete
    /// and all its chunks were taken.
    pub async fn chunk(&self, idx: usize, rx: &mut watch::Receiver<()>) -> Result<Option<Bytes>, ReadError> {
        loop {
            // Mark seen before looking, so a push after the look wakes us.
            rx.borrow_and_update();
            {
                let st = self.state.lock().expect("fetch lock");
                if let Some(c) = st.chunks.get(idx) {
                    if let Some(Err(e)) = &st.end {
                        return Err(e.clone());
                    }
                    return Ok(Some(c.clone()));
                }
                match &st.end {
                    Some(Ok(())) => return Ok(None),
                    Some(Err(e)) => return Err(e.clone()),
                    None => {}
                }
            }
            // The sender lives in self, so this only waits.
            let _ = rx.changed().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn waiters_get_chunks_as_they_arrive_and_failure_reaches_all() {
        let f = Arc::new(BlockFetch::new(6, Via::Origin));
        let mut early = f.subscribe();
        f.push(Bytes::from_static(b"abc"));
        assert_eq!(f.chunk(0, &mut early).await.unwrap().unwrap(), "abc");
        let waiter = {
            let f = f.clone();
            tokio::spawn(async move {
                let mut rx = f.subscribe();
                f.chunk(1, &mut rx).await
            })
        };
        tokio::task::yield_now().await;
        assert!(f.complete().is_none(), "a short block is not complete");
        f.push(Bytes::from_static(b"def"));
        assert_eq!(waiter.await.unwrap().unwrap().unwrap(), "def");
        assert_eq!(f.complete().unwrap(), "abcdef");
        assert_eq!(f.chunk(2, &mut early).await, Ok(None));

        assert_eq!(f.range(2, 3).await.unwrap(), "cde", "a range across chunks");

        let g = BlockFetch::new(4, Via::Origin);
        g.push(Bytes::from_static(b"ab"));
        g.fail(&ReadError::origin("origin closed the connection"));
        let mut rx = g.subscribe();
        assert!(g.chunk(0, &mut rx).await.is_err(), "no chunk of a failed block is handed out");
        assert!(g.complete().is_none());
        assert!(g.range(0, 2).await.is_err(), "a failed block yields no range, even one that arrived");
    }
}
