//! An S3 bucket as an origin, through `object_store`: a request target
//! becomes a key under the prefix, the Range and conditional headers become
//! `GetOptions`, and the answer is dressed as the HTTP response an HTTP
//! origin would have sent, so the tier treats both alike.
//!
//! Errors map as an HTTP origin's statuses would: NotFound -> 404,
//! NotModified -> 304, Precondition -> 412, an unsatisfiable range -> 416
//! (an empty object asked for its first block); anything else is a failed
//! origin request (502 to the client).

use super::source::{OriginResponse, S3Config};
use crate::SetupError;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use circus_store::ReadError;
use futures_util::{StreamExt, stream};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use object_store::{
    Attribute, BackoffConfig, Certificate, ClientOptions, GetOptions, GetRange, ObjectStore, RetryConfig,
    aws::{AmazonS3, AmazonS3Builder},
    path::Path,
};
use std::time::{Duration, SystemTime};

#[derive(Debug)]
pub struct S3Origin {
    store: AmazonS3,
    prefix: String,
    max_age: Option<Duration>,
    timeout: Duration,
}

impl S3Origin {
    /// Credentials and region not given in `cfg` come from the AWS
    /// environment variables.
    /// `ca_file`'s certificates (PEM) are trusted beside the system's for
    /// an https endpoint.
    pub fn new(cfg: &S3Config, timeout: Duration, ca_file: Option<&std::path::Path>) -> Result<Self, SetupError> {
        // No whole-request timeout: a block run may take long on a slow
        // link; the tier bounds the wait between two chunks instead. Set
        // first: these options also hold allow_http, set below.
        let mut client = ClientOptions::new().with_connect_timeout(timeout).with_timeout_disabled();
        if let Some(path) = ca_file {
            let ca = |why: String| SetupError::CaFile { path: path.to_owned(), why };
            let pem = std::fs::read(path).map_err(|e| ca(e.to_string()))?;
            let certs = Certificate::from_pem_bundle(&pem).map_err(|e| ca(e.to_string()))?;
            for cert in certs {
                client = client.with_root_certificate(cert);
            }
        }
        let mut b = AmazonS3Builder::from_env().with_client_options(client).with_bucket_name(&cfg.bucket);
        if let Some(endpoint) = &cfg.endpoint {
            // object_store addresses buckets path style unless told
            // otherwise, which is what S3-compatible servers expect.
            b = b.with_endpoint(endpoint).with_allow_http(endpoint.starts_with("http://"));
        }
        if let Some(allow) = cfg.allow_http {
            b = b.with_allow_http(allow);
        }
        if let Some(region) = &cfg.region {
            b = b.with_region(region);
        }
        if let Some(key) = &cfg.access_key_id {
            b = b.with_access_key_id(key);
        }
        if let Some(secret) = &cfg.secret_access_key {
            b = b.with_secret_access_key(secret);
        }
        // The tier has its own per-chunk timeout and answers 502 to a
        // failed fetch: a few quick retries, not object_store's 3 minutes.
        let retry = RetryConfig { backoff: BackoffConfig::default(), max_retries: 2, retry_timeout: timeout };
        let store = b
            .with_retry(retry)
            .build()
            .map_err(|e| SetupError::S3 { bucket: cfg.bucket.clone(), why: e.to_string() })?;
        Ok(S3Origin { store, prefix: cfg.prefix.clone(), max_age: cfg.max_age, timeout })
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The object's key for a request target: the path percent-decoded,
    /// under the prefix. The query is not part of the key.
    fn key(&self, target: &str) -> Option<Path> {
        let path = target.split('?').next().unwrap_or("").trim_start_matches('/');
        if path.is_empty() || path.ends_with('/') {
            // A "directory" is no object (and a GET of the bucket lists it).
            return None;
        }
        let key = Path::from_url_path(path).ok()?;
        if self.prefix.is_empty() {
            return Some(key);
        }
        Path::parse(format!("{}/{key}", self.prefix)).ok()
    }

    pub async fn get(&self, target: &str, h: &HeaderMap) -> Result<OriginResponse, ReadError> {
        let Some(key) = self.key(target) else {
            // A name no key can have (empty, `..`, a trailing /) is not there.
            return Ok(empty(StatusCode::NOT_FOUND));
        };
        let opts = options(h);
        let ranged = opts.range.is_some();
        let res = match tokio::time::timeout(self.timeout, self.store.get_opts(&key, opts)).await {
            Ok(res) => res,
            Err(_) => {
                return Err(ReadError::origin(format!("S3 sent no response for {key} within {:?}", self.timeout)));
            }
        };
        let got = match res {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => return Ok(empty(StatusCode::NOT_FOUND)),
            Err(object_store::Error::NotModified { .. }) => return Ok(empty(StatusCode::NOT_MODIFIED)),
            Err(object_store::Error::Precondition { .. }) => return Ok(empty(StatusCode::PRECONDITION_FAILED)),
            // object_store keeps other statuses inside a private error type;
            // its message is the only way to tell a 416 apart.
            Err(e) if ranged && e.to_string().contains("status code: 416") => {
                return Ok(empty(StatusCode::RANGE_NOT_SATISFIABLE));
            }
            Err(e) => return Err(ReadError::origin(format!("S3 GET {key}: {e}"))),
        };
        let mut headers = HeaderMap::new();
        let (range, size) = (got.range.clone(), got.meta.size);
        let status = if ranged {
            let cr = format!("bytes {}-{}/{size}", range.start, range.end.saturating_sub(1));
            headers.insert(header::CONTENT_RANGE, HeaderValue::from_str(&cr).expect("ASCII"));
            StatusCode::PARTIAL_CONTENT
        } else {
            StatusCode::OK
        };
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(range.end - range.start));
        if let Some(etag) = got.meta.e_tag.as_deref().and_then(|e| HeaderValue::from_str(e).ok()) {
            headers.insert(header::ETAG, etag);
        }
        let lm = httpdate::fmt_http_date(SystemTime::from(got.meta.last_modified));
        headers.insert(header::LAST_MODIFIED, HeaderValue::from_str(&lm).expect("ASCII"));
        headers
            .insert(header::DATE, HeaderValue::from_str(&httpdate::fmt_http_date(SystemTime::now())).expect("ASCII"));
        for (attr, name) in [
            (Attribute::ContentType, header::CONTENT_TYPE),
            (Attribute::ContentEncoding, header::CONTENT_ENCODING),
            (Attribute::ContentLanguage, header::CONTENT_LANGUAGE),
            (Attribute::ContentDisposition, header::CONTENT_DISPOSITION),
            (Attribute::CacheControl, header::CACHE_CONTROL),
        ] {
            if let Some(v) = got.attributes.get(&attr).and_then(|v| HeaderValue::from_str(v).ok()) {
                headers.insert(name, v);
            }
        }
        if let Some(age) = self.max_age.filter(|_| !headers.contains_key(header::CACHE_CONTROL)) {
            let cc = HeaderValue::from_str(&format!("max-age={}", age.as_secs())).expect("ASCII");
            headers.insert(header::CACHE_CONTROL, cc);
        }
        let body = got.into_stream().map(|r| r.map_err(|e| ReadError::origin(format!("S3 body: {e}")))).boxed();
        Ok(OriginResponse { status, headers, body })
    }
}

fn empty(status: StatusCode) -> OriginResponse {
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(0));
    OriginResponse { status, headers, body: stream::empty::<Result<Bytes, ReadError>>().boxed() }
}

/// The request headers S3 understands, as `GetOptions`. A Range that is not
/// one plain byte range is dropped: the whole object is a valid answer.
fn options(h: &HeaderMap) -> GetOptions {
    let text = |n: HeaderName| h.get(n).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let date = |n: HeaderName| text(n).and_then(|s| httpdate::parse_http_date(&s).ok()).map(DateTime::<Utc>::from);
    GetOptions {
        if_match: text(header::IF_MATCH),
        if_none_match: text(header::IF_NONE_MATCH),
        if_modified_since: date(header::IF_MODIFIED_SINCE),
        if_unmodified_since: date(header::IF_UNMODIFIED_SINCE),
        range: text(header::RANGE).and_then(|r| byte_range(&r)),
        ..GetOptions::default()
    }
}

/// `bytes=A-B`, `bytes=A-` or `bytes=-N`.
fn byte_range(v: &str) -> Option<GetRange> {
    let (a, b) = v.strip_prefix("bytes=")?.trim().split_once('-')?;
    match (a.trim(), b.trim()) {
        ("", n) => Some(GetRange::Suffix(n.parse().ok()?)),
        (a, "") => Some(GetRange::Offset(a.parse().ok()?)),
        (a, b) => {
            let (a, b): (u64, u64) = (a.parse().ok()?, b.parse().ok()?);
            (a <= b).then(|| GetRange::Bounded(a..b + 1))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_ranges_parse_and_odd_ones_mean_whole() {
        let cases: [(&str, Option<GetRange>); 6] = [
            ("bytes=0-99", Some(GetRange::Bounded(0..100))),
            ("bytes=100-", Some(GetRange::Offset(100))),
            ("bytes=-5", Some(GetRange::Suffix(5))),
            ("bytes=0-1,5-6", None),
            ("bytes=9-3", None),
            ("items=0-1", None),
        ];
        for (v, want) in cases {
            assert_eq!(byte_range(v), want, "{v}");
        }
    }

    #[test]
    fn keys_are_decoded_under_the_prefix() {
        let cfg = S3Config { bucket: "b".into(), prefix: "pre/fix".into(), ..S3Config::default() };
        let o = S3Origin::new(&cfg, Duration::from_secs(1), None).unwrap();
        assert_eq!(o.key("/a%20b/c.bin?x=1").unwrap().as_ref(), "pre/fix/a b/c.bin");
        assert!(o.key("/a/../b").is_none());
        assert!(o.key("/").is_none() && o.key("/dir/").is_none());
        let bare = S3Origin { prefix: String::new(), ..o };
        assert_eq!(bare.key("/c.bin").unwrap().as_ref(), "c.bin");
    }
}
