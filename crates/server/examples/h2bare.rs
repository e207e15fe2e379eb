// Temporary: the ceiling of plain hyper h2 for a 1 KiB body (not committed).
use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, service::service_fn};
use hyper_util::rt::{TokioExecutor, TokioIo};
fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let l = tokio::net::TcpListener::bind("127.0.0.1:18099").await.unwrap();
        let body = Bytes::from(vec![7u8; 1024]);
        loop {
            let (s, _) = l.accept().await.unwrap();
            s.set_nodelay(true).unwrap();
            let body = body.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |_r: Request<hyper::body::Incoming>| {
                    let body = body.clone();
                    async move {
                        let mut r = Response::new(Full::new(body));
                        let h = r.headers_mut();
                        h.insert("content-type", "application/octet-stream".parse().unwrap());
                        h.insert("content-length", "1024".parse().unwrap());
                        h.insert("accept-ranges", "bytes".parse().unwrap());
                        h.insert("etag", "\"6b0bcd03.e3022c0-400-5f32f28f\"".parse().unwrap());
                        h.insert("last-modified", "Sun, 29 Nov 2026 06:58:11 GMT".parse().unwrap());
                        h.insert("vary", "Accept".parse().unwrap());
                        h.insert(
                            "repr-digest",
                            "sha-256=:th1Nf2rrXQrXHerkPU3javbcMMN8Pm7ZbkENO1qWEOw=:".parse().unwrap(),
                        );
                        h.insert("date", "Sun, 29 Nov 2026 07:01:46 GMT".parse().unwrap());
                        Ok::<_, std::convert::Infallible>(r)
                    }
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
        }
    });
}
