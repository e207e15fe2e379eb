//! `/metrics` (Prometheus text) and `/status` (JSON of active files, their
//! regions and each client's cursor, role and rate).

use crate::{metrics::RoleLabel, state::AppState};
use bytes::Bytes;
use circus_http::ResBody;
use http::{HeaderValue, Response, header};
use http_body_util::{BodyExt, Full};
use std::sync::Arc;

fn text(body: String, ctype: &'static str) -> Response<ResBody> {
    let mut res = Response::new(Full::new(Bytes::from(body)).map_err(|never| match never {}).boxed());
    res.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(ctype));
    res.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    res
}

pub async fn metrics(state: &Arc<AppState>) -> Response<ResBody> {
    if let Some((status, counters, _)) = state.driver.status().await {
        let m = &state.metrics;
        // Counters come from the scheduler's running totals.
        m.cache_hits.inc_by(counters.hits.saturating_sub(m.cache_hits.get()));
        m.cache_misses.inc_by(counters.reads.saturating_sub(m.cache_misses.get()));
        m.active_files.set(status.files.iter().filter(|f| !f.clients.is_empty()).count() as i64);
        for role in ["frontrunner", "follower", "independent"] {
            let n = status.files.iter().flat_map(|f| &f.clients).filter(|c| role_name(c.role) == role).count();
            m.active_clients.get_or_create(&RoleLabel { role: role.into() }).set(n as i64);
        }
    }
    if let Some(origin) = &state.origin {
        origin.observe();
    }
    state.metrics.small_files_bytes.set(state.small.used() as i64);
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &state.registry) {
        tracing::error!(error = %e, "encoding metrics");
    }
    text(out, "application/openmetrics-text; version=1.0.0; charset=utf-8")
}

fn role_name(r: circus_sched::Role) -> &'static str {
    match r {
        circus_sched::Role::Frontrunner => "frontrunner",
        circus_sched::Role::Follower => "follower",
        circus_sched::Role::Independent => "independent",
    }
}

/// The live page a browser gets on `/status`: it reads the JSON below
/// every second. Self-contained (no asset from elsewhere).
pub fn status_page() -> Response<ResBody> {
    let mut res = text(STATUS_PAGE.to_owned(), "text/html; charset=utf-8");
    res.headers_mut().insert(header::VARY, HeaderValue::from_static("Accept"));
    res
}

const STATUS_PAGE: &str = include_str!("status.html");

/// Whether a request to `/status` wants the page rather than JSON: Accept
/// names text/html (browsers do) and not application/json first.
pub fn wants_page(h: &http::HeaderMap) -> bool {
    let accept = h.get_all(header::ACCEPT).iter().filter_map(|v| v.to_str().ok()).collect::<Vec<_>>().join(",");
    let first = |kind: &str| accept.find(kind);
    match (first("text/html"), first("application/json")) {
        (Some(html), Some(json)) => html < json,
        (Some(_), None) => true,
        _ => false,
    }
}

/// The scheduler's snapshot with each file's path and each client's
/// address beside their ids.
fn labelled(status: &circus_sched::Status, labels: &crate::driver::Labels) -> serde_json::Value {
    let mut value = serde_json::to_value(status).expect("status serializes");
    let files = value.get_mut("files").and_then(|f| f.as_array_mut());
    for (file, json) in status.files.iter().zip(files.into_iter().flatten()) {
        if let Some(path) = labels.paths.get(&file.file) {
            json["path"] = path.as_str().into();
        }
        let clients = json.get_mut("clients").and_then(|c| c.as_array_mut());
        for (client, json) in file.clients.iter().zip(clients.into_iter().flatten()) {
            if let Some(peer) = labels.peers.get(&client.client) {
                json["peer"] = peer.to_string().into();
            }
        }
    }
    value
}

pub async fn status(state: &Arc<AppState>) -> Response<ResBody> {
    let body = match state.driver.status().await {
        Some((status, counters, labels)) => {
            let builds = state.files.builds();
            let scheduler = labelled(&status, &labels);
            serde_json::json!({
                "scheduler": scheduler,
                "counters": counters,
                "index_builds": builds,
                "memory": state.memory,
                "cache_pages": state.cache_pages,
                "small_files": state.small.usage(),
            })
            .to_string()
        }
        None => "{\"error\":\"shutting down\"}".into(),
    };
    text(body, "application/json")
}
