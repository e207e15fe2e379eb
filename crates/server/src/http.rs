//! Request handling: plain HTTP for every client, the native block stream
//! for clients that ask for it on the same URL.

use crate::{
    body::{NativeBody, Part, PlainBody},
    driver::DriverHandle,
    files::Resolved,
    lent::Lender,
    private::Access,
    state::AppState,
};
use base64::Engine;
use bytes::Bytes;
use circus_core::BlockSet;
pub use circus_http::error_response;
use circus_http::{
    HttpError, ResBody, full,
    rfc9110::{self, Conditionals, Precondition, Ranges, Validators},
};
use circus_origin::{Answer, MemberClaim, PEER_AUTH_HEADER, PEER_HEADER, PROBE_PATH, PURGE_PATH};
use circus_proto::{CONTENT_TYPE as NATIVE_TYPE, NEED_HEADER};
use circus_store::{FileEntry, FileIndex};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Version, header};
use http_body_util::BodyExt;
use std::sync::Arc;

fn header_str(h: &HeaderMap, name: impl header::AsHeaderName) -> Option<&str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

pub async fn handle<B>(state: Arc<AppState>, mut req: Request<B>) -> Response<ResBody>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let now = std::time::SystemTime::now();
    let claim = match &state.origin {
        Some(tier) => {
            tier.member_claim(req.method(), req.uri().path_and_query().map_or("/", |p| p.as_str()), req.headers())
        }
        None if req.headers().contains_key(PEER_HEADER) => MemberClaim::Impostor,
        None => MemberClaim::Client,
    };
    if claim == MemberClaim::Impostor {
        req.headers_mut().remove(PEER_HEADER);
        req.headers_mut().remove(PEER_AUTH_HEADER);
    }
    if let Some(tier) = &state.origin
        && req.uri().path() == PURGE_PATH
    {
        let res = tier.purge_for_member(claim, req.method(), req.uri().query().unwrap_or(""));
        state.metrics.count_response(res.status().as_u16());
        return res;
    }
    // A member proved by the cluster's key asks for what its own client
    // proved its right to (private prefixes need a key in a cluster); a
    // member's probe is answered whatever the prefixes, as it says nothing
    // but that this node is live.
    let reads = matches!(*req.method(), Method::GET | Method::HEAD);
    let probe = claim != MemberClaim::Client && claim != MemberClaim::Impostor && req.uri().path() == PROBE_PATH;
    let checked = if (claim == MemberClaim::Proven && reads) || probe {
        Ok(Access::Public)
    } else {
        state.private.check(req.uri().path(), req.uri().query(), req.headers(), now)
    };
    let private = match checked {
        Ok(Access::Public) => false,
        Ok(Access::Granted { by_token }) => {
            admitted(&mut req, by_token);
            true
        }
        Err(reason) => {
            let res = error_response(&HttpError::Forbidden(reason));
            state.metrics.count_response(403);
            return res;
        }
    };
    let mut res = serve(&state, req, private).await;
    if private {
        mark_private(res.headers_mut());
    }
    state.metrics.count_response(res.status().as_u16());
    res
}

/// A private request that proved its right: the signature's parameters and
/// circus's own bearer token are taken out, so that the origin sees neither
/// and every reader of the object shares one stored copy.
fn admitted<B>(req: &mut Request<B>, by_token: bool) {
    if by_token {
        req.headers_mut().remove(header::AUTHORIZATION);
    }
    if let Some(query) = req.uri().query() {
        let kept = crate::private::without_signature(query);
        let target = if kept.is_empty() { req.uri().path().to_owned() } else { format!("{}?{kept}", req.uri().path()) };
        let mut parts = req.uri().clone().into_parts();
        parts.path_and_query = target.parse().ok();
        if let Ok(uri) = http::Uri::from_parts(parts) {
            *req.uri_mut() = uri;
        }
    }
}

/// No shared cache downstream may keep what only some may read.
fn mark_private(h: &mut HeaderMap) {
    let no_store = h.get_all(header::CACHE_CONTROL).iter().any(|v| v.as_bytes().windows(8).any(|w| w == b"no-store"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(if no_store { "private, no-store" } else { "private" }));
}

async fn serve<B>(state: &Arc<AppState>, req: Request<B>, private: bool) -> Response<ResBody>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let path = || req.uri().path().to_owned();
    match state.origin.as_ref().filter(|_| forwarded_to_origin(req.method())) {
        Some(origin) if host_field_ok(&req) => {
            let path = path();
            Box::pin(origin.forward(req)).await.unwrap_or_else(|e| failed(&path, &e))
        }
        _ => match route(state, &req, private).await {
            Ok(res) => res,
            Err(e) => failed(req.uri().path(), &e),
        },
    }
}

/// Methods other than GET and HEAD, which the tier forwards to its origin
/// (with their bodies); CONNECT and TRACE are refused.
fn forwarded_to_origin(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::CONNECT | Method::TRACE)
}

fn failed(path: &str, e: &HttpError) -> Response<ResBody> {
    if e.status().is_server_error() {
        tracing::error!(path, error = %e, "request failed");
    }
    error_response(e)
}

async fn route<B>(state: &Arc<AppState>, req: &Request<B>, private: bool) -> Result<Response<ResBody>, HttpError> {
    if !host_field_ok(req) {
        return Err(HttpError::BadRequest("an HTTP/1.1 request needs exactly one valid Host field"));
    }
    let head = match *req.method() {
        Method::GET => false,
        Method::HEAD => true,
        _ => return Err(HttpError::MethodNotAllowed),
    };
    // HTTP/2 streams share their socket, which keeps its base mark. An
    // HTTP/1.x response starts from it too (not from the mark of the
    // response before it on the connection); a file's own comes below.
    let connection = if req.version() < Version::HTTP_2 { crate::activity::current() } else { None };
    if let Some(connection) = &connection {
        connection.want_send_mark(state.send_marks.base());
    }
    if let Some(origin) = &state.origin {
        // The longer paths here are boxed (the origin's, a file looked up,
        // read or indexed): an async fn is as large as its largest await,
        // and a kept file's answer, the common case, awaits none of them.
        return match Box::pin(origin.handle(req, head)).await? {
            Answer::Response(res) => Ok(res),
            Answer::Native { file, headers } => {
                if let Some(connection) = &connection {
                    connection.want_send_mark(state.send_marks.native());
                }
                let index = Box::pin(file.index()).await?;
                let own = connection.is_some();
                let mut res = native_response(&state.driver, &file, &index, req.headers(), head, own)?;
                res.headers_mut().extend(headers);
                Ok(res)
            }
        };
    }
    // A kept small file names its version itself: no lookup in the file
    // table, and a plain whole GET is answered from what was kept.
    let kept = state.small.kept(&state.files, req.uri().path()).and_then(|k| Some((k.entry()?, k)));
    let (file, kept) = match kept {
        Some((file, kept)) => (file, Some(kept)),
        None => match Box::pin(resolve(state, req.uri().path())).await? {
            Resolved::File(file) => (file, None),
            Resolved::AddSlash => return Ok(add_slash(req.uri())),
            Resolved::Directory(dir) if state.files.listing() => {
                let table = state.clone();
                let listing = tokio::task::spawn_blocking(move || table.files.list(&dir))
                    .await
                    .map_err(|e| HttpError::Internal(e.to_string()))?
                    .map_err(|_| HttpError::NotFound)?;
                return Ok(crate::listing::response(req.uri().path(), &listing, req.headers(), head));
            }
            Resolved::Directory(_) => return Err(HttpError::Forbidden("directory listing is off")),
        },
    };
    if let Some(connection) = &connection {
        let marks = &state.send_marks;
        let native = circus_http::accept::wants_native(req.headers());
        connection.want_send_mark(if native { marks.native() } else { marks.for_file(file.size) });
    }
    if let Some(res) = kept.and_then(|kept| kept_whole(&kept, req, head)) {
        return Ok(res);
    }
    let h = req.headers();
    let v = Validators { etag: &file.etag, last_modified: file.modified };
    let cond = Conditionals {
        if_match: header_str(h, header::IF_MATCH),
        if_none_match: header_str(h, header::IF_NONE_MATCH),
        if_modified_since: header_str(h, header::IF_MODIFIED_SINCE),
        if_unmodified_since: header_str(h, header::IF_UNMODIFIED_SINCE),
    };
    let mut res = match rfc9110::evaluate(&cond, &v) {
        Precondition::NotModified => status_only(StatusCode::NOT_MODIFIED),
        Precondition::Failed => status_only(StatusCode::PRECONDITION_FAILED),
        Precondition::Proceed if circus_http::accept::wants_native(h) => {
            Box::pin(native(state, req.uri().path(), &file, h, head, connection.is_some())).await?
        }
        Precondition::Proceed => {
            // Plain clients neither wait for nor start an index build (a
            // HEAD must not read the whole file), except that keeping a
            // file for the lane (up to 1 MiB) builds its index; their
            // responses carry Repr-Digest once one was built.
            let lender = req.extensions().get();
            let res = Box::pin(plain(state, req.uri().path(), &file, h, head, lender, connection.is_some())).await;
            // What only some may read is never kept for the hit lane.
            if !head && !private && res.status() == StatusCode::OK && state.small.wants(&file) {
                let read = state.metrics.storage_read_bytes.clone();
                state.small.admit(read, file.clone(), req.uri().path());
            }
            res
        }
    };
    let rh = res.headers_mut();
    rh.insert(header::ETAG, HeaderValue::from_str(&file.etag).expect("etag is ASCII"));
    rh.insert(header::LAST_MODIFIED, HeaderValue::from_str(&httpdate::fmt_http_date(file.modified)).expect("date"));
    rh.insert(header::VARY, HeaderValue::from_static("Accept"));
    if let Some(index) = file.index_now() {
        let digest = format!("sha-256=:{}:", base64::engine::general_purpose::STANDARD.encode(index.sha256));
        rh.insert("repr-digest", HeaderValue::from_str(&digest).expect("base64 is ASCII"));
    }
    Ok(res)
}

/// A whole 200 of a small file kept with its fields rendered (`small.rs`),
/// for a request with nothing in it that could change the answer: no
/// condition, no range, not a native client. The fields are those the
/// full path below writes; only their making is saved.
fn kept_whole<B>(kept: &crate::small::Kept, req: &Request<B>, head: bool) -> Option<Response<ResBody>> {
    let h = req.headers();
    let changing = [
        header::IF_MATCH,
        header::IF_NONE_MATCH,
        header::IF_MODIFIED_SINCE,
        header::IF_UNMODIFIED_SINCE,
        header::RANGE,
        header::IF_RANGE,
    ];
    if changing.iter().any(|name| h.contains_key(name)) || circus_http::accept::wants_native(h) {
        return None;
    }
    let (fields, body) = kept.whole();
    let mut res = Response::new(if head { full(Bytes::new()) } else { lent(req.extensions().get(), body) });
    *res.headers_mut() = fields;
    Some(res)
}

/// A body of shared bytes, lent to the connection's writer where it
/// gathers frames by reference (HTTP/2 in the clear; see `lent`).
fn lent(lender: Option<&Lender>, body: Bytes) -> ResBody {
    if let Some(lender) = lender {
        lender.lend(&body);
    }
    full(body)
}

/// What the request path names: as resolved less than a second ago when
/// the file is still that version (one `stat`, in place), or resolved now
/// off the async workers (stat and canonicalize block).
async fn resolve(state: &Arc<AppState>, path: &str) -> Result<Resolved, HttpError> {
    if let Some(file) = state.files.recent(path) {
        return Ok(Resolved::File(file));
    }
    let (table, path) = (state.clone(), path.to_owned());
    tokio::task::spawn_blocking(move || table.files.resolve(&path))
        .await
        .map_err(|e| HttpError::Internal(e.to_string()))?
}

/// 301 to the directory's path with its trailing slash, query kept. The
/// path starts with exactly one slash, so that `//host` cannot become a
/// redirect to another site.
fn add_slash(uri: &http::Uri) -> Response<ResBody> {
    let path = format!("/{}/", uri.path().trim_start_matches('/'));
    let location = match uri.query() {
        Some(q) => format!("{path}?{q}"),
        None => path,
    };
    let mut res = status_only(StatusCode::MOVED_PERMANENTLY);
    if let Ok(v) = HeaderValue::from_str(&location) {
        res.headers_mut().insert(header::LOCATION, v);
    }
    res
}

/// RFC 9112 §3.2 for HTTP/1.x: one valid Host (HTTP/1.0 may omit it).
/// HTTP/2 names the authority in `:authority` instead.
fn host_field_ok<B>(req: &Request<B>) -> bool {
    let hosts = req.headers().get_all(header::HOST);
    match req.version() {
        Version::HTTP_11 => rfc9110::host_ok(hosts.iter().map(HeaderValue::as_bytes)),
        Version::HTTP_10 | Version::HTTP_09 => {
            hosts.iter().next().is_none() || rfc9110::host_ok(hosts.iter().map(HeaderValue::as_bytes))
        }
        _ => true,
    }
}

fn status_only(status: StatusCode) -> Response<ResBody> {
    let mut res = Response::new(full(Bytes::new()));
    *res.status_mut() = status;
    res
}

async fn native(
    state: &Arc<AppState>,
    path: &str,
    file: &Arc<FileEntry>,
    h: &HeaderMap,
    head: bool,
    own_connection: bool,
) -> Result<Response<ResBody>, HttpError> {
    match file.index_within(state.files.index_wait()).await? {
        Some(index) => native_response(&state.driver, file, &index, h, head, own_connection),
        None => {
            // A large file's first native request: its blocks cannot be
            // verified before the whole file is hashed. It gets the plain
            // stream now (circus get takes it as a plain download), and
            // says how far the build is.
            let mut res = plain(state, path, file, h, head, None, own_connection).await;
            let hashed = file.build_progress().unwrap_or(0);
            let note = format!("building; hashed={hashed}; size={}", file.size);
            res.headers_mut().insert(INDEX_HEADER, HeaderValue::from_str(&note).expect("ASCII"));
            Ok(res)
        }
    }
}

/// Tells a native client that the file's index is still being built.
pub(crate) const INDEX_HEADER: &str = "circus-index";

/// The native stream of `file` (a local file or an origin object) from the
/// scheduler, honouring a resume's `Circus-Need` when `If-Range` allows;
/// `own_connection` as for [`plain`].
fn native_response(
    driver: &DriverHandle,
    file: &Arc<FileEntry>,
    index: &FileIndex,
    h: &HeaderMap,
    head: bool,
    own_connection: bool,
) -> Result<Response<ResBody>, HttpError> {
    let blocks = file.layout.blocks();
    // A resume (Circus-Need) only applies to the version the client has.
    let same_version = rfc9110::if_range_allows(
        header_str(h, header::IF_RANGE),
        &Validators { etag: &file.etag, last_modified: file.modified },
    );
    if h.get_all(NEED_HEADER).iter().nth(1).is_some() {
        return Err(HttpError::BadNeed("Circus-Need given more than once".into()));
    }
    if h.get(NEED_HEADER).is_some_and(|v| v.to_str().is_err()) {
        return Err(HttpError::BadNeed("Circus-Need is not ASCII".into()));
    }
    let have = match header_str(h, NEED_HEADER).filter(|_| same_version) {
        Some(need) => circus_proto::complement(
            &circus_proto::parse_need(need, blocks).map_err(|e| HttpError::BadNeed(e.to_string()))?,
        ),
        None => BlockSet::new(blocks),
    };
    let preface = file.preface(index)?;
    let body = if head {
        full(Bytes::new())
    } else {
        NativeBody::new(driver, file.clone(), preface, have).corking(own_connection).boxed()
    };
    let mut res = Response::new(body);
    res.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(NATIVE_TYPE));
    res.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(res)
}

/// The plain response for `file`, which `path` (percent-encoded) named;
/// `own_connection` when it is the only one on its connection (HTTP/1.x),
/// which a long body may then cork.
async fn plain(
    state: &Arc<AppState>,
    path: &str,
    file: &Arc<FileEntry>,
    h: &HeaderMap,
    head: bool,
    lender: Option<&Lender>,
    own_connection: bool,
) -> Response<ResBody> {
    let size = file.size;
    let v = Validators { etag: &file.etag, last_modified: file.modified };
    let ranges = if rfc9110::if_range_allows(header_str(h, header::IF_RANGE), &v) {
        rfc9110::resolve_ranges(header_str(h, header::RANGE), size)
    } else {
        Ranges::Whole
    };
    let ctype =
        HeaderValue::from_str(&file.content_type).unwrap_or(HeaderValue::from_static("application/octet-stream"));
    let (status, parts, len, content_type, content_range) = match ranges {
        Ranges::Unsatisfiable => {
            let mut res = status_only(StatusCode::RANGE_NOT_SATISFIABLE);
            let cr = HeaderValue::from_str(&format!("bytes */{size}")).expect("ASCII");
            res.headers_mut().insert(header::CONTENT_RANGE, cr);
            return res;
        }
        Ranges::Whole => {
            let parts = if size == 0 { vec![] } else { vec![Part::Range(0, size - 1)] };
            (StatusCode::OK, parts, size, ctype, None)
        }
        Ranges::Parts(r) if r.len() == 1 => {
            let (s, e) = r[0];
            let cr = HeaderValue::from_str(&format!("bytes {s}-{e}/{size}")).expect("ASCII");
            (StatusCode::PARTIAL_CONTENT, vec![Part::Range(s, e)], e - s + 1, ctype, Some(cr))
        }
        Ranges::Parts(r) => {
            let boundary = format!("circus-{}", &file.etag.trim_matches('"').replace(['.', '-'], ""));
            let mut parts = Vec::with_capacity(2 * r.len() + 1);
            let mut len = 0;
            for (i, &(s, e)) in r.iter().enumerate() {
                let sep = if i == 0 { "" } else { "\r\n" };
                let head = format!(
                    "{sep}--{boundary}\r\nContent-Type: {}\r\nContent-Range: bytes {s}-{e}/{size}\r\n\r\n",
                    file.content_type
                );
                len += head.len() as u64 + (e - s + 1);
                parts.push(Part::Fixed(Bytes::from(head)));
                parts.push(Part::Range(s, e));
            }
            let tail = format!("\r\n--{boundary}--\r\n");
            len += tail.len() as u64;
            parts.push(Part::Fixed(Bytes::from(tail)));
            let ct = HeaderValue::from_str(&format!("multipart/byteranges; boundary={boundary}")).expect("ASCII");
            (StatusCode::PARTIAL_CONTENT, parts, len, ct, None)
        }
    };
    // A small file kept whole needs no trip through the scheduler (h2
    // streams, ranges and closing requests come this way).
    let kept = match &parts[..] {
        [Part::Range(s, e)] if !head => state.small.body(path, file).map(|body| body.slice(*s as usize..=*e as usize)),
        _ => None,
    };
    let body = match kept {
        _ if head || parts.is_empty() => full(Bytes::new()),
        Some(bytes) => lent(lender, bytes),
        None => PlainBody::new(&state.driver, file.clone(), parts).corking(own_connection).primed().await.boxed(),
    };
    let mut res = Response::new(body);
    *res.status_mut() = status;
    let rh = res.headers_mut();
    rh.insert(header::CONTENT_TYPE, content_type);
    rh.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    rh.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    if let Some(cr) = content_range {
        rh.insert(header::CONTENT_RANGE, cr);
    }
    res
}
