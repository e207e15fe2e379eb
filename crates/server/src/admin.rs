//! The admin listener (`--admin-listen`): what operators and their
//! monitoring use, apart from the content. `GET /metrics` and `GET
//! /status`; with an origin tier, `POST /purge?target=T` or
//! `?prefix=P` (what is stored for a target, or every target under a
//! prefix, is forgotten: the next request asks the origin; in a cluster
//! with a key, on every member, each one's count in `members`) and `POST
//! /prefetch?target=T` (the object is fetched whole into the store in the
//! background: 202 at once). Answers are JSON. Bind it to loopback, or to
//! a network only operators reach: it has no authentication of its own.

use crate::{observe, side_listener, state::AppState};
use circus_http::{HttpError, ResBody, error_response, full};
use circus_origin::{Purge, PurgeReach};
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use std::sync::Arc;
use tokio::net::TcpListener;

/// Serves the admin endpoints on `listener` until `stop` turns true.
pub async fn run(listener: TcpListener, state: Arc<AppState>, stop: tokio::sync::watch::Receiver<bool>) {
    // Browsers keep the live status page's connection open.
    let limits = side_listener::Limits { name: "admin", connections: 256, lifetime: None };
    side_listener::serve(listener, limits, stop, move |req| {
        let state = state.clone();
        async move { handle(&state, req).await }
    })
    .await;
}

async fn handle<B>(state: &Arc<AppState>, req: Request<B>) -> Response<ResBody> {
    let query = req.uri().query().unwrap_or("");
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/metrics") => observe::metrics(state).await,
        (&Method::GET, "/status") if observe::wants_page(req.headers()) => observe::status_page(),
        (&Method::GET, "/status") => observe::status(state).await,
        (&Method::POST, "/purge") => purge(state, query).await.unwrap_or_else(|e| error_response(&e)),
        (&Method::POST, "/prefetch") => prefetch(state, query).unwrap_or_else(|e| error_response(&e)),
        (_, "/metrics" | "/status" | "/purge" | "/prefetch") => status_only(StatusCode::METHOD_NOT_ALLOWED),
        _ => error_response(&HttpError::NotFound),
    }
}

/// The value of `name` in a query string, percent-decoded.
fn param(query: &str, name: &str) -> Option<String> {
    form_urlencoded::parse(query.as_bytes()).find(|(k, _)| k == name).map(|(_, v)| v.into_owned())
}

fn tier(state: &AppState) -> Result<&Arc<circus_origin::OriginTier>, HttpError> {
    state.origin.as_ref().ok_or(HttpError::BadRequest("purge and prefetch apply to an origin tier (serve --origin)"))
}

/// Forgets the scope here and, in a cluster with a key, on every other
/// member: what each forgot, or why it could not (then 502: the purge did
/// not reach everywhere).
async fn purge(state: &AppState, query: &str) -> Result<Response<ResBody>, HttpError> {
    let scope = Purge::from_query(query)?;
    let (purged, reach) = tier(state)?.purge_everywhere(&scope).await?;
    let mut answer = serde_json::json!({ "purged": purged });
    let mut status = StatusCode::OK;
    match reach {
        PurgeReach::Alone => {}
        PurgeReach::NoKey => {
            answer["members"] = serde_json::Value::Null;
            answer["note"] = "other members not purged: the cluster has no --peer-key to prove the purge with".into();
        }
        PurgeReach::Members(all) => {
            let members: Vec<serde_json::Value> = all
                .into_iter()
                .map(|m| match m.outcome {
                    Ok(n) => serde_json::json!({ "member": m.member, "purged": n }),
                    Err(e) => {
                        status = StatusCode::BAD_GATEWAY;
                        serde_json::json!({ "member": m.member, "error": e.to_string() })
                    }
                })
                .collect();
            answer["members"] = members.into();
        }
    }
    Ok(json(status, answer))
}

fn prefetch(state: &AppState, query: &str) -> Result<Response<ResBody>, HttpError> {
    let target = param(query, "target").ok_or(HttpError::BadRequest("give ?target=/path"))?;
    tier(state)?.prefetch(&target)?;
    Ok(json(StatusCode::ACCEPTED, serde_json::json!({ "prefetching": target })))
}

fn json(status: StatusCode, value: serde_json::Value) -> Response<ResBody> {
    let mut res = Response::new(full(format!("{value}\n")));
    *res.status_mut() = status;
    res.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    res
}

fn status_only(status: StatusCode) -> Response<ResBody> {
    let mut res = Response::new(full(""));
    *res.status_mut() = status;
    res.headers_mut().insert(header::ALLOW, HeaderValue::from_static("GET, POST"));
    res
}
