//! Private content: path prefixes that only requests with a valid signed
//! URL or bearer token may read, as nginx's `secure_link` and CDNs' signed
//! URLs. Configured in the TOML file:
//!
//! ```toml
//! [[private]]
//! prefix = "/models/"
//! signing_keys = ["env:CIRCUS_URL_KEY", "env:CIRCUS_URL_KEY_OLD"]  # rotation: any may sign
//! tokens = ["env:CIRCUS_TOKEN"]                                     # Authorization: Bearer ...
//! ```
//!
//! A secret is `env:NAME` (read from the environment at start and on
//! reload), `file:PATH` (the file's first line) or the text itself. A
//! signed URL carries `?expires=UNIX_SECONDS&signature=SIG`, where SIG is
//! the unpadded base64url HMAC-SHA256 of `PATH\nEXPIRES` under one of the
//! keys, PATH being the request path percent-decoded with `.` and empty
//! segments removed (`circus sign` makes them). Prefixes are matched on
//! that same decoded path segment by segment, so `/%6Dodels/x` and
//! `//models/x` are as private as `/models/x`. A refusal is 403 with the
//! reason; answers under a private prefix carry `Cache-Control: private`
//! so that no shared cache downstream keeps them, and the hit lane never
//! answers them.

use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use http::{HeaderMap, header};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::time::{SystemTime, UNIX_EPOCH};

/// One `[[private]]` table as written.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrivateConfig {
    pub prefix: String,
    #[serde(default)]
    pub signing_keys: Vec<String>,
    #[serde(default)]
    pub tokens: Vec<String>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PrivateError {
    #[error("private prefix {0:?}: give signing_keys or tokens, or both")]
    NoSecret(String),
    #[error("private prefix {0:?} must start with / and may not contain ..")]
    BadPrefix(String),
    #[error("secret {0}: the environment variable is not set or empty")]
    MissingEnv(String),
    #[error("secret {0}: {1}")]
    File(String, String),
    #[error("a secret is empty")]
    Empty,
}

/// The prefixes with their secrets read.
#[derive(Clone, Default)]
pub struct PrivateRules {
    prefixes: Vec<Prefix>,
}

#[derive(Clone)]
struct Prefix {
    segments: Vec<String>,
    keys: Vec<Vec<u8>>,
    /// SHA-256 of each token: compared in constant time, whatever its length.
    tokens: Vec<[u8; 32]>,
}

impl std::fmt::Debug for PrivateRules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let prefixes: Vec<String> = self.prefixes.iter().map(|p| format!("/{}/", p.segments.join("/"))).collect();
        f.debug_struct("PrivateRules").field("prefixes", &prefixes).finish_non_exhaustive()
    }
}

/// How a request may proceed.
#[derive(Debug, PartialEq, Eq)]
pub enum Access {
    /// No private prefix covers it.
    Public,
    /// Private, and the request proved it may read it; `by_token`: with the
    /// Authorization field, which is circus's and not forwarded.
    Granted { by_token: bool },
}

impl PrivateRules {
    pub fn new(tables: &[PrivateConfig]) -> Result<Self, PrivateError> {
        let mut prefixes = Vec::new();
        for t in tables {
            if t.signing_keys.is_empty() && t.tokens.is_empty() {
                return Err(PrivateError::NoSecret(t.prefix.clone()));
            }
            let segments = match canonical(&t.prefix) {
                Some(s) if t.prefix.starts_with('/') => s,
                _ => return Err(PrivateError::BadPrefix(t.prefix.clone())),
            };
            let keys = t.signing_keys.iter().map(|k| secret(k)).collect::<Result<_, _>>()?;
            let tokens = t.tokens.iter().map(|k| secret(k).map(|s| sha256(&s))).collect::<Result<_, _>>()?;
            prefixes.push(Prefix { segments, keys, tokens });
        }
        // The longest prefix decides.
        prefixes.sort_by_key(|p| std::cmp::Reverse(p.segments.len()));
        Ok(PrivateRules { prefixes })
    }

    pub fn is_empty(&self) -> bool {
        self.prefixes.is_empty()
    }

    /// Whether a private prefix covers `path` (still percent-encoded). A
    /// path that cannot be read is treated as covered.
    pub fn covers(&self, path: &str) -> bool {
        !self.prefixes.is_empty() && canonical(path).is_none_or(|segs| self.prefix_of(&segs).is_some())
    }

    fn prefix_of(&self, segments: &[String]) -> Option<&Prefix> {
        self.prefixes.iter().find(|p| segments.starts_with(&p.segments))
    }

    /// Whether the request for `path` and `query` with `headers` may go on
    /// at `now`; the reason when it may not.
    pub fn check(
        &self,
        path: &str,
        query: Option<&str>,
        headers: &HeaderMap,
        now: SystemTime,
    ) -> Result<Access, &'static str> {
        if self.prefixes.is_empty() {
            return Ok(Access::Public);
        }
        let segments = canonical(path).ok_or("the path cannot be decoded")?;
        let Some(prefix) = self.prefix_of(&segments) else { return Ok(Access::Public) };
        if let Some(token) = bearer(headers) {
            let given = sha256(token.as_bytes());
            return if prefix.tokens.iter().any(|t| constant_time_eq(t, &given)) {
                Ok(Access::Granted { by_token: true })
            } else {
                Err("the bearer token is not valid for this path")
            };
        }
        let (expires, signature) = signed_params(query);
        let (Some(expires), Some(signature)) = (expires, signature) else {
            return Err("this path is private: give a signed URL (expires, signature) or a bearer token");
        };
        let until: u64 = expires.parse().map_err(|_| "expires is not a number of seconds")?;
        let now = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if until < now {
            return Err("the signed URL has expired");
        }
        let Ok(signature) = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(signature.trim_end_matches('='))
        else {
            return Err("the signature is not base64url");
        };
        let message = signed_message(&segments, until);
        let valid = prefix.keys.iter().any(|key| {
            let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes any key length");
            mac.update(message.as_bytes());
            mac.verify_slice(&signature).is_ok()
        });
        if valid { Ok(Access::Granted { by_token: false }) } else { Err("the signature does not match this path") }
    }
}

/// The signature for `path` (still percent-encoded) valid until `expires`
/// (Unix seconds) under `key`: what `circus sign` appends.
pub fn sign(key: &[u8], path: &str, expires: u64) -> Option<String> {
    let segments = canonical(path)?;
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(signed_message(&segments, expires).as_bytes());
    Some(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes()))
}

/// Reads a secret as the config writes it: `env:NAME`, `file:PATH` or the
/// text itself.
pub fn secret(spec: &str) -> Result<Vec<u8>, PrivateError> {
    let value = if let Some(name) = spec.strip_prefix("env:") {
        std::env::var(name).ok().filter(|v| !v.is_empty()).ok_or_else(|| PrivateError::MissingEnv(spec.into()))?
    } else if let Some(path) = spec.strip_prefix("file:") {
        let text = std::fs::read_to_string(path).map_err(|e| PrivateError::File(spec.into(), e.to_string()))?;
        text.lines().next().unwrap_or("").trim().to_owned()
    } else {
        spec.to_owned()
    };
    if value.is_empty() {
        return Err(PrivateError::Empty);
    }
    Ok(value.into_bytes())
}

/// `target` without the signed URL's parameters (what the origin and the
/// store see: one stored copy for every signature).
pub fn without_signature(query: &str) -> String {
    form_urlencoded::Serializer::new(String::new())
        .extend_pairs(form_urlencoded::parse(query.as_bytes()).filter(|(k, _)| k != "expires" && k != "signature"))
        .finish()
}

fn signed_message(segments: &[String], expires: u64) -> String {
    format!("/{}\n{expires}", segments.join("/"))
}

fn signed_params(query: Option<&str>) -> (Option<String>, Option<String>) {
    let (mut expires, mut signature) = (None, None);
    for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        match &*k {
            "expires" => expires = Some(v.into_owned()),
            "signature" => signature = Some(v.into_owned()),
            _ => {}
        }
    }
    (expires, signature)
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// The decoded segments of `path`: `.` and empty segments dropped; `None`
/// for `..`, bad percent-encoding or text that is not UTF-8.
fn canonical(path: &str) -> Option<Vec<String>> {
    let decoded = percent_encoding::percent_decode_str(path).decode_utf8().ok()?;
    let mut out = Vec::new();
    for seg in decoded.split('/') {
        match seg {
            "" | "." => {}
            ".." => return None,
            s => out.push(s.to_owned()),
        }
    }
    Some(out)
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn rules() -> PrivateRules {
        PrivateRules::new(&[PrivateConfig {
            prefix: "/models/".into(),
            signing_keys: vec!["new-key".into(), "old-key".into()],
            tokens: vec!["t0ken".into()],
        }])
        .unwrap()
    }

    fn signed(key: &str, path: &str, expires: u64) -> String {
        format!("expires={expires}&signature={}", sign(key.as_bytes(), path, expires).unwrap())
    }

    #[test]
    fn signed_urls_from_any_key_until_they_expire() {
        let r = rules();
        let now = UNIX_EPOCH + Duration::from_secs(1_000);
        let none = HeaderMap::new();
        let ok = |path: &str, q: &str| r.check(path, Some(q), &none, now);
        assert_eq!(
            ok("/models/a.bin", &signed("new-key", "/models/a.bin", 2_000)),
            Ok(Access::Granted { by_token: false })
        );
        assert_eq!(
            ok("/models/a.bin", &signed("old-key", "/models/a.bin", 2_000)),
            Ok(Access::Granted { by_token: false })
        );
        // The same signature for the encoded and the plain spelling.
        assert!(ok("/models/a%20b.bin", &signed("new-key", "/models/a b.bin", 2_000)).is_ok());
        assert_eq!(ok("/models/a.bin", &signed("new-key", "/models/a.bin", 999)), Err("the signed URL has expired"));
        assert_eq!(
            ok("/models/b.bin", &signed("new-key", "/models/a.bin", 2_000)),
            Err("the signature does not match this path")
        );
        assert_eq!(
            ok("/models/a.bin", &signed("stolen", "/models/a.bin", 2_000)),
            Err("the signature does not match this path")
        );
        assert!(ok("/models/a.bin", "").unwrap_err().contains("give a signed URL"));
        assert_eq!(ok("/public/a.bin", ""), Ok(Access::Public));
    }

    #[test]
    fn tokens_and_spellings_that_try_to_slip_past() {
        let r = rules();
        let now = UNIX_EPOCH;
        let with = |token: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, format!("Bearer {token}").parse().unwrap());
            h
        };
        assert_eq!(r.check("/models/x", None, &with("t0ken"), now), Ok(Access::Granted { by_token: true }));
        assert!(r.check("/models/x", None, &with("t0ke"), now).is_err());
        for sneaky in ["/%6Dodels/x", "//models/x", "/./models/x", "/models"] {
            assert!(r.covers(sneaky), "{sneaky}");
            assert!(r.check(sneaky, None, &HeaderMap::new(), now).is_err(), "{sneaky}");
        }
        assert!(r.covers("/models/../x"), "an undecidable path counts as covered");
        assert!(!r.covers("/modelsx/y") && !r.covers("/"));
        assert_eq!(without_signature("a=1&expires=5&signature=x&b=2"), "a=1&b=2");
    }

    #[test]
    fn configuration_mistakes_are_named() {
        let t = |prefix: &str, keys: &[&str]| {
            PrivateRules::new(&[PrivateConfig {
                prefix: prefix.into(),
                signing_keys: keys.iter().map(|k| k.to_string()).collect(),
                tokens: vec![],
            }])
            .map(|_| ())
        };
        assert_eq!(t("/a/", &[]), Err(PrivateError::NoSecret("/a/".into())));
        assert_eq!(t("a/", &["k"]), Err(PrivateError::BadPrefix("a/".into())));
        assert_eq!(
            t("/a/", &["env:CIRCUS_TEST_SURELY_UNSET"]),
            Err(PrivateError::MissingEnv("env:CIRCUS_TEST_SURELY_UNSET".into()))
        );
    }
}
