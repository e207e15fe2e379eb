//! HTTP plumbing shared by both modes: the client, one GET (following
//! redirects), status handling and reading a body with an idle timeout and
//! the rate limit.

use crate::{GetError, throttle::Throttle};
use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode, Uri, header};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector},
    rt::{TokioExecutor, TokioTimer},
};
use std::{
    path::Path,
    time::{Duration, SystemTime},
};
use tokio::time::timeout;

/// The HTTP client downloads use: `http://` and `https://`, HTTP/1.1,
/// pooled. Clone it freely; clones share the pool.
pub type HttpClient = Client<HttpsConnector<HttpConnector>, Empty<Bytes>>;

/// Redirects followed before giving up, as browsers and curl do.
const MAX_REDIRECTS: usize = 10;

/// A client whose connection attempts give up after `connect_timeout`,
/// trusting the system's roots for `https://`.
pub fn http_client(connect_timeout: Duration) -> HttpClient {
    https_client(connect_timeout, None).expect("the system roots need no file")
}

/// [`http_client`] trusting only `ca_file`'s certificates (PEM) for
/// `https://` when one is given.
pub fn https_client(connect_timeout: Duration, ca_file: Option<&Path>) -> Result<HttpClient, GetError> {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(connect_timeout));
    connector.set_nodelay(true);
    connector.enforce_http(false);
    let tls = crate::tls::client_config(ca_file)?;
    let https =
        HttpsConnectorBuilder::new().with_tls_config(tls).https_or_http().enable_http1().wrap_connector(connector);
    Ok(Client::builder(TokioExecutor::new()).pool_timer(TokioTimer::new()).build(https))
}

/// Why an attempt stopped short of the whole file.
#[derive(Debug, Default)]
pub(crate) struct Failure {
    pub reason: String,
    /// New data reached the part file during the attempt.
    pub progressed: bool,
    /// Blocks that failed verification during the attempt.
    pub corrupt: u32,
    /// Progress so far is void (the file changed): start from scratch.
    pub start_over: bool,
    /// A status worth retrying (503 and the like), reported if retries run out.
    pub status: Option<(StatusCode, String)>,
    /// How long the server asked us to wait (`Retry-After`), if it did.
    pub retry_after: Option<Duration>,
}

impl Failure {
    pub fn new(reason: impl Into<String>) -> Self {
        Self { reason: reason.into(), ..Self::default() }
    }
}

/// How an attempt ends when it does not complete: try again, or give up.
#[derive(Debug)]
pub(crate) enum Stop {
    Retry(Failure),
    Fatal(GetError),
}

impl From<GetError> for Stop {
    fn from(e: GetError) -> Self {
        Stop::Fatal(e)
    }
}

/// Parses a download URL: `http://` or `https://`.
pub(crate) fn parse_url(url: &str) -> Result<Uri, GetError> {
    let uri: Uri = url.parse().map_err(|e| GetError::Usage(format!("{url:?} is not a valid URL: {e}")))?;
    match uri.scheme_str() {
        Some("http" | "https") if uri.authority().is_some() => Ok(uri),
        _ => Err(GetError::Usage(format!("{url:?} is not an http:// or https:// URL"))),
    }
}

/// Sends one GET with `headers` and returns a 2xx response, following
/// redirects. A network failure or a retryable status (429, 502, 503, 504)
/// is [`Stop::Retry`]; any other error status is fatal
/// ([`GetError::Status`]), except those listed in `pass`, returned as they
/// are for the caller to interpret.
pub(crate) async fn get(
    client: &HttpClient,
    url: &Uri,
    headers: &HeaderMap,
    idle: Duration,
    pass: &[StatusCode],
) -> Result<Response<Incoming>, Stop> {
    let mut uri = url.clone();
    for _ in 0..=MAX_REDIRECTS {
        let mut req = Request::get(uri.clone()).body(Empty::new()).expect("valid request");
        *req.headers_mut() = headers.clone();
        let res = match timeout(idle, client.request(req)).await {
            Err(_) => return Err(Stop::Retry(Failure::new(format!("no response from {url} within {idle:?}")))),
            Ok(Err(e)) if e.is_connect() => {
                let authority = uri.authority().map_or("", |a| a.as_str());
                let why = format!("cannot connect to {authority}: {}", root_cause(&e));
                return Err(Stop::Retry(Failure::new(why)));
            }
            Ok(Err(e)) => return Err(Stop::Retry(Failure::new(describe(&e)))),
            Ok(Ok(res)) => res,
        };
        let status = res.status();
        if status.is_redirection() && status != StatusCode::NOT_MODIFIED {
            uri = redirect_target(&uri, res.status(), res.headers())?;
            tracing::debug!(%status, to = %uri, "following redirect");
            continue;
        }
        if status.is_success() || pass.contains(&status) {
            return Ok(res);
        }
        let retry_after = retry_after(res.headers(), SystemTime::now());
        let message = reason_line(res.into_body(), idle).await;
        let retryable = matches!(
            status,
            StatusCode::TOO_MANY_REQUESTS
                | StatusCode::BAD_GATEWAY
                | StatusCode::SERVICE_UNAVAILABLE
                | StatusCode::GATEWAY_TIMEOUT
        );
        if retryable {
            let mut f = Failure::new(format!("the server answered {status}: {message}"));
            (f.status, f.retry_after) = (Some((status, message)), retry_after);
            return Err(Stop::Retry(f));
        }
        return Err(Stop::Fatal(GetError::Status { status, message }));
    }
    Err(Stop::Fatal(GetError::Usage(format!("{url}: more than {MAX_REDIRECTS} redirects"))))
}

fn redirect_target(base: &Uri, status: StatusCode, headers: &HeaderMap) -> Result<Uri, GetError> {
    let location = headers
        .get(header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| GetError::Status { status, message: "redirect without a Location".into() })?;
    let scheme = base.scheme_str().unwrap_or("http");
    let authority = base.authority().expect("a download URL has an authority");
    let target = if location.contains("://") {
        location.to_owned()
    } else if location.starts_with("//") {
        format!("{scheme}:{location}")
    } else if location.starts_with('/') {
        format!("{scheme}://{authority}{location}")
    } else {
        // Relative to the directory of the current path.
        let path = base.path();
        let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
        format!("{scheme}://{authority}{dir}{location}")
    };
    let uri = parse_url(&target).map_err(|e| GetError::Usage(format!("redirected to {target}: {e}")))?;
    // What was asked for over TLS is never fetched in the clear.
    if scheme == "https" && uri.scheme_str() != Some("https") {
        return Err(GetError::Usage(format!("{base} redirected to {target}: refusing to leave https")));
    }
    Ok(uri)
}

/// The wait a `Retry-After` asks for: delay-seconds, or an HTTP date
/// (past dates mean now). `None` when absent or unreadable: then the usual
/// backoff applies. The caller caps it.
fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let v = headers.get(header::RETRY_AFTER)?.to_str().ok()?.trim();
    if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        // Too many digits for a u64 is "a very long time".
        return Some(Duration::from_secs(v.parse().unwrap_or(u64::MAX)));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The first non-empty line of an error body (at most 200 characters), so
/// the user sees the server's reason, not a page of HTML.
async fn reason_line(mut body: Incoming, idle: Duration) -> String {
    let mut got = Vec::new();
    while got.len() < 4096 {
        match timeout(idle, body.frame()).await {
            Ok(Some(Ok(frame))) => {
                if let Some(d) = frame.data_ref() {
                    got.extend_from_slice(d);
                }
            }
            _ => break,
        }
    }
    let text = String::from_utf8_lossy(&got);
    let line = text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
    line.chars().take(200).collect()
}

/// hyper's errors say little at the top level ("client error (Connect)"):
/// include the causes.
fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

/// The innermost cause: for a failed connect, the OS's own words.
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut e = e;
    while let Some(c) = e.source() {
        e = c;
    }
    e.to_string()
}

/// A response body read piece by piece, with an idle timeout; every piece
/// is paid for in the rate limit before it is returned.
#[derive(Debug)]
pub(crate) struct BodyReader {
    body: Incoming,
    idle: Duration,
}

impl BodyReader {
    pub fn new(body: Incoming, idle: Duration) -> Self {
        Self { body, idle }
    }

    /// The next piece, `Ok(None)` at a proper end of the body, or why the
    /// body broke off (a body shorter than its Content-Length is an error
    /// here, not an end).
    pub async fn next(&mut self, throttle: &mut Throttle) -> Result<Option<Bytes>, String> {
        loop {
            let frame = match timeout(self.idle, self.body.frame()).await {
                Err(_) => return Err(format!("no data for {:?}", self.idle)),
                Ok(None) => return Ok(None),
                Ok(Some(Err(e))) => return Err(format!("connection broke: {}", describe(&e))),
                Ok(Some(Ok(frame))) => frame,
            };
            if let Ok(data) = frame.into_data() {
                throttle.consume(data.len()).await;
                return Ok(Some(data));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirects_resolve_against_the_scheme_and_never_leave_https() {
        let to = |base: &str, location: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::LOCATION, location.parse().unwrap());
            redirect_target(&base.parse().unwrap(), StatusCode::FOUND, &h).map(|u| u.to_string())
        };
        assert_eq!(to("https://a.test/x/y", "/z").unwrap(), "https://a.test/z");
        assert_eq!(to("https://a.test/x/y", "w").unwrap(), "https://a.test/x/w");
        assert_eq!(to("https://a.test/x", "//b.test/v").unwrap(), "https://b.test/v");
        assert_eq!(to("http://a.test/x", "https://b.test/v").unwrap(), "https://b.test/v");
        let downgrade = to("https://a.test/y", "http://a.test/x").unwrap_err().to_string();
        assert!(downgrade.contains("refusing to leave https"), "{downgrade}");
    }

    #[test]
    fn only_http_urls() {
        assert!(parse_url("http://127.0.0.1:8080/f.iso").is_ok());
        assert_eq!(parse_url("https://example.invalid/f").unwrap().scheme_str(), Some("https"));
        let ftp = parse_url("ftp://example.invalid/f").unwrap_err().to_string();
        assert!(ftp.contains("not an http:// or https:// URL"), "{ftp}");
        assert!(matches!(parse_url("ftp://h/f"), Err(GetError::Usage(_))));
        assert!(matches!(parse_url("/just/a/path"), Err(GetError::Usage(_))));
        assert!(matches!(parse_url("http://exa mple/"), Err(GetError::Usage(_))));
    }

    #[test]
    fn retry_after_forms() {
        let now = httpdate::parse_http_date("Tue, 01 Jul 2025 12:00:00 GMT").unwrap();
        let ra = |v: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(header::RETRY_AFTER, http::HeaderValue::from_static(v));
            retry_after(&h, now)
        };
        assert_eq!(ra("3"), Some(Duration::from_secs(3)));
        assert_eq!(ra(" 0 "), Some(Duration::ZERO));
        assert_eq!(ra("99999999999999999999999"), Some(Duration::from_secs(u64::MAX)));
        assert_eq!(ra("Tue, 01 Jul 2025 12:00:07 GMT"), Some(Duration::from_secs(7)));
        assert_eq!(ra("Tue, 01 Jul 2025 11:00:00 GMT"), Some(Duration::ZERO));
        assert_eq!(ra("-1"), None);
        assert_eq!(ra("soon"), None);
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
    }

    #[test]
    fn failures_describe_their_causes() {
        let inner = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let outer = std::io::Error::other(inner);
        assert_eq!(describe(&outer), "refused");
        assert!(!Failure::new("x").start_over);
    }
}
