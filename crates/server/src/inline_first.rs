//! hyper's executor for HTTP/2 streams, trying each stream inline first.
//!
//! hyper spawns a task for every HTTP/2 stream. A stream for a resident
//! small object is done in its first poll (the answer is ready and fits
//! the flow-control window), so spawning it costs more than serving it: a
//! task allocated and registered, often a sleeping worker woken to steal
//! it, then a wake-up of the connection's task from the other thread. Here
//! the stream is polled once where hyper hands it over, on the
//! connection's task, and spawned only if it is not finished: a stream
//! that waits (a file being read, a large body, a full window) is a task
//! of its own as before. The first poll runs with a waker that does
//! nothing, which is sound because the spawned task polls the future again
//! at once, and a future registers its waker anew on every poll.

use std::{
    future::Future,
    task::{Context, Waker},
};

#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct InlineFirst;

impl<F> hyper::rt::Executor<F> for InlineFirst
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, fut: F) {
        let mut fut = Box::pin(fut);
        if fut.as_mut().poll(&mut Context::from_waker(Waker::noop())).is_pending() {
            tokio::spawn(fut);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::rt::Executor;
    use std::sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    };

    #[tokio::test]
    async fn a_finished_stream_is_not_spawned_and_a_waiting_one_is() {
        let before = tokio::runtime::Handle::current().metrics().num_alive_tasks();
        let polls = Arc::new(AtomicUsize::new(0));
        let counted = polls.clone();
        InlineFirst.execute(async move {
            counted.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(polls.load(Ordering::SeqCst), 1, "ran inline, at once");
        assert_eq!(tokio::runtime::Handle::current().metrics().num_alive_tasks(), before);

        let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<u32>();
        InlineFirst.execute(async move {
            let got = rx.await.unwrap();
            done_tx.send(got + 1).unwrap();
        });
        assert_eq!(tokio::runtime::Handle::current().metrics().num_alive_tasks(), before + 1);
        // Woken through the spawned task's waker, not the first poll's.
        tx.send(41).unwrap();
        assert_eq!(done_rx.await.unwrap(), 42);
    }
}
