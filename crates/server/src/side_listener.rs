//! The listeners beside the content listener (admin, redirect): plain
//! HTTP/1.1 through hyper, a bounded number of connections at once, each
//! with a header timeout and an optional lifetime, until shutdown.

use circus_http::ResBody;
use http::{Request, Response};
use hyper::{body::Incoming, service::service_fn};
use hyper_util::rt::TokioIo;
use std::{future::Future, sync::Arc, time::Duration};
use tokio::net::TcpListener;

/// How a side listener treats its connections.
pub(crate) struct Limits {
    /// Named in the log.
    pub name: &'static str,
    /// Connections served at once; more are closed on arrival.
    pub connections: usize,
    /// Longest a connection lives (`None`: as long as the client keeps it).
    pub lifetime: Option<Duration>,
}

/// Answers every request on `listener` with `answer` until `stop` turns
/// true.
pub(crate) async fn serve<F, Fut>(
    listener: TcpListener,
    limits: Limits,
    mut stop: tokio::sync::watch::Receiver<bool>,
    answer: F,
) where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<ResBody>> + Send + 'static,
{
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.connections));
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(listener = limits.name, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            // (The guard `wait_for` returns is dropped inside: it is not Send.)
            _ = async { stop.wait_for(|s| *s).await.map(|_| ()) } => return,
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else { continue };
        let answer = answer.clone();
        let lifetime = limits.lifetime;
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let answer = answer.clone();
                async move { Ok::<_, std::convert::Infallible>(answer(req).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), service);
            match lifetime {
                Some(limit) => drop(tokio::time::timeout(limit, conn).await),
                None => drop(conn.await),
            }
            drop(slot);
        });
    }
}
