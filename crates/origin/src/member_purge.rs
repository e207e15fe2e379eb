//! Purges that reach every member: a purge on one node's admin listener
//! forgets the target there, then asks each other member, with the
//! cluster key's proof (see `peer_auth`), to forget it too: `POST`
//! [`PURGE_PATH`]`?target=T` (or `?prefix=P`). A member's purge is not
//! passed on. Without a key a node cannot tell a member's purge from
//! anyone's, so purges then stay on the node they reach.

use crate::{MemberClaim, OriginTier, PEER_HEADER, Purge, client::no_body, target};
use circus_http::{HttpError, ResBody, full};
use circus_store::ReadError;
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode, header};
use std::time::Duration;

/// Where members send each other purges.
pub const PURGE_PATH: &str = "/.well-known/circus/purge";

/// How many targets a member forgot, on its answer to a member's purge.
const PURGED_HEADER: &str = "circus-purged";

/// What one other member did with a purge.
#[derive(Debug)]
pub struct MemberPurged {
    /// The member's base URL.
    pub member: String,
    /// How many targets it forgot.
    pub outcome: Result<usize, ReadError>,
}

/// Where a purge went besides this node.
#[derive(Debug)]
pub enum PurgeReach {
    /// Nowhere: this node is no member of a cluster.
    Alone,
    /// Nowhere: the cluster has no key to prove the purge with.
    NoKey,
    /// To every other member, each with its answer.
    Members(Vec<MemberPurged>),
}

/// How long a member has to answer a purge.
const PURGE_WAIT: Duration = Duration::from_secs(5);

impl Purge {
    /// The scope a query names: `target=T` or `prefix=P`, one of them.
    pub fn from_query(query: &str) -> Result<Purge, HttpError> {
        let param =
            |name: &str| form_urlencoded::parse(query.as_bytes()).find(|(k, _)| k == name).map(|(_, v)| v.into_owned());
        match (param("target"), param("prefix")) {
            (Some(t), None) => Ok(Purge::Target(t)),
            (None, Some(p)) => Ok(Purge::Prefix(p)),
            _ => Err(HttpError::BadRequest("give ?target=/path or ?prefix=/path/")),
        }
    }

    fn query(&self) -> String {
        let (name, value) = match self {
            Purge::Target(t) => ("target", t),
            Purge::Prefix(p) => ("prefix", p),
        };
        form_urlencoded::Serializer::new(String::new()).append_pair(name, value).finish()
    }
}

impl OriginTier {
    /// Forgets `scope` here, then on every other member when the cluster
    /// has a key, then here again (a member not purged yet may have
    /// answered an ask meanwhile): how many targets this node forgot, and
    /// where else the purge went. A member down in this node's view is not
    /// asked; each other has `PURGE_WAIT` to answer.
    pub async fn purge_everywhere(&self, scope: &Purge) -> Result<(usize, PurgeReach), HttpError> {
        let here = self.purge(scope)?;
        let Some(peers) = &self.peers else { return Ok((here, PurgeReach::Alone)) };
        if !peers.has_key() {
            return Ok((here, PurgeReach::NoKey));
        }
        let path = target::normalize(&format!("{PURGE_PATH}?{}", scope.query()))?;
        let asks = peers.others().into_iter().map(|m| {
            let path = &path;
            async move {
                if !peers.is_live(&m.url) {
                    let outcome = Err(ReadError::origin("down in this node's view: not asked"));
                    return MemberPurged { member: m.url.to_string(), outcome };
                }
                let mut h = HeaderMap::new();
                h.insert(PEER_HEADER, HeaderValue::from_static("purge"));
                peers.prove(&Method::POST, path, &mut h);
                let asked = tokio::time::timeout(PURGE_WAIT, m.client.send(Method::POST, path, h, no_body()));
                let outcome = match asked.await {
                    Ok(Ok(res)) if res.status() == StatusCode::OK => res
                        .headers()
                        .get(PURGED_HEADER)
                        .and_then(|v| v.to_str().ok()?.parse().ok())
                        .ok_or_else(|| ReadError::origin("the member's answer does not say what it purged")),
                    Ok(Ok(res)) => Err(ReadError::origin(format!("the member answered {}", res.status()))),
                    Ok(Err(e)) => Err(e),
                    Err(_) => Err(ReadError::origin(format!("no answer within {PURGE_WAIT:?}"))),
                };
                MemberPurged { member: m.url.to_string(), outcome }
            }
        });
        let members = futures_util::future::join_all(asks).await;
        self.purge(scope)?;
        Ok((here, PurgeReach::Members(members)))
    }

    /// Answers a request for [`PURGE_PATH`]: a proven member's `POST`
    /// forgets the scope its query names here (and goes no further);
    /// anyone else is refused.
    pub fn purge_for_member(&self, claim: MemberClaim, method: &Method, query: &str) -> Response<ResBody> {
        let outcome = match (claim, method) {
            (MemberClaim::Proven, &Method::POST) => Purge::from_query(query).and_then(|scope| self.purge(&scope)),
            (MemberClaim::Proven, _) => Err(HttpError::MethodNotAllowed),
            _ => Err(HttpError::Forbidden("purges between members need the cluster's key (--peer-key)")),
        };
        match outcome {
            Ok(purged) => {
                let mut res = Response::new(full(format!("{{\"purged\":{purged}}}\n")));
                res.headers_mut().insert(PURGED_HEADER, HeaderValue::from(purged));
                res.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
                res
            }
            Err(e) => circus_http::error_response(&e),
        }
    }
}
