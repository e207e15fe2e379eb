//! The cleartext listener beside HTTPS (`--redirect-listen`): every
//! request is answered 308 to the same target on the HTTPS listener, so
//! that `http://` links and typed addresses reach the TLS port. Nothing
//! is served in the clear.

use crate::side_listener;
use circus_http::{HttpError, ResBody, error_response, full};
use http::{HeaderValue, Request, Response, StatusCode, header};
use std::time::Duration;
use tokio::net::TcpListener;

/// Serves redirects to HTTPS on port `https_port` until `stop` turns true.
pub async fn run(listener: TcpListener, https_port: u16, stop: tokio::sync::watch::Receiver<bool>) {
    // A bounded number at once, for a bounded time: this listener is open
    // to anyone.
    let limits = side_listener::Limits { name: "redirect", connections: 1024, lifetime: Some(Duration::from_secs(60)) };
    side_listener::serve(listener, limits, stop, move |req| async move { redirect(&req, https_port) }).await;
}

/// 308 to `https://HOST[:PORT]TARGET`, the port left out when it is 443.
fn redirect<B>(req: &Request<B>, https_port: u16) -> Response<ResBody> {
    let host = req.headers().get(header::HOST).and_then(|h| h.to_str().ok()).and_then(host_name);
    let Some(host) = host else {
        return error_response(&HttpError::BadRequest(
            "a Host field naming this server is needed to redirect to https",
        ));
    };
    let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let port = if https_port == 443 { String::new() } else { format!(":{https_port}") };
    let Ok(location) = HeaderValue::from_str(&format!("https://{host}{port}{target}")) else {
        return error_response(&HttpError::BadRequest("the target cannot be redirected"));
    };
    let mut res = Response::new(full(""));
    *res.status_mut() = StatusCode::PERMANENT_REDIRECT;
    res.headers_mut().insert(header::LOCATION, location);
    res
}

/// The host of a Host field without its port: a name or an IPv4 address
/// (letters, digits, `.`, `-`), or a bracketed IPv6 address; `None` for
/// anything else, so no Location can be forged from it.
fn host_name(field: &str) -> Option<&str> {
    let host = if field.starts_with('[') { &field[..=field.find(']')?] } else { field.split(':').next()? };
    let ok = !host.is_empty()
        && host.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'[' | b']' | b':'));
    ok.then_some(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn location(host: Option<&str>, target: &str, port: u16) -> (u16, Option<String>) {
        let mut req = Request::get(target);
        if let Some(h) = host {
            req = req.header(header::HOST, h);
        }
        let res = redirect(&req.body(()).unwrap(), port);
        let loc = res.headers().get(header::LOCATION).map(|v| v.to_str().unwrap().to_owned());
        (res.status().as_u16(), loc)
    }

    #[test]
    fn requests_go_to_the_same_target_over_https() {
        assert_eq!(location(Some("example.org"), "/a/b?c=1", 443), (308, Some("https://example.org/a/b?c=1".into())));
        assert_eq!(location(Some("example.org:80"), "/", 8443), (308, Some("https://example.org:8443/".into())));
        assert_eq!(location(Some("[::1]:80"), "/x", 443), (308, Some("https://[::1]/x".into())));
        assert_eq!(location(None, "/x", 443).0, 400);
        assert_eq!(location(Some("evil.test/@x"), "/x", 443).0, 400);
        assert_eq!(location(Some("a b"), "/x", 443).0, 400);
    }
}
