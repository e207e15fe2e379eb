//! One line per request (`--access-log`): the combined format that log
//! tools read, with circus's own fields after it, or JSON lines. To stderr
//! or to a file that SIGUSR1 reopens (for logrotate). Each line is one
//! `write(2)`, so lines from many connections never interleave.

use bytes::Bytes;
use circus_http::ResBody;
use http::{HeaderValue, Request, Response, Version, header};
use http_body_util::BodyExt;
use std::{
    fmt::Write as _,
    io::Write as _,
    net::SocketAddr,
    path::PathBuf,
    pin::Pin,
    sync::{Arc, Mutex},
    task::{Context, Poll},
    time::{Duration, Instant, SystemTime},
};

/// Where lines go: `off`, `stderr` or a file's path.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(from = "String")]
pub enum Target {
    #[default]
    Off,
    Stderr,
    File(PathBuf),
}

impl std::str::FromStr for Target {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "off" => Target::Off,
            "stderr" | "-" => Target::Stderr,
            path => Target::File(path.into()),
        })
    }
}

impl From<String> for Target {
    fn from(s: String) -> Self {
        match s.parse() {
            Ok(t) => t,
        }
    }
}

/// How lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// `peer - - [time] "GET /x HTTP/1.1" 200 1234 "referer" "agent"`, then
    /// `rt=` seconds, `mode=` native or plain, `tls=` 0 or 1, `cache=`, and
    /// `range=` the bytes a 206 answered (`100-199/1000`) or `-`.
    #[default]
    Combined,
    /// One JSON object per line.
    Json,
}

/// One request, as it is logged.
#[derive(Debug)]
pub struct Entry<'a> {
    pub peer: Option<SocketAddr>,
    pub method: &'a str,
    pub target: &'a str,
    pub version: &'a str,
    pub status: u16,
    /// Body bytes sent.
    pub bytes: u64,
    pub duration: Duration,
    pub native: bool,
    pub tls: bool,
    /// `hit`, `miss` or `-` (not cached: a local file on the full path).
    pub cache: &'a str,
    /// A single-range answer's Content-Range without its unit
    /// (`100-199/1000`): which part of the file the bytes were.
    pub range: Option<&'a str>,
    pub referer: Option<&'a str>,
    pub user_agent: Option<&'a str>,
}

#[derive(Debug)]
pub struct AccessLog {
    target: Target,
    format: Format,
    file: Mutex<Option<std::fs::File>>,
}

impl AccessLog {
    /// Opens the file (appending) now, so that a path that cannot be
    /// written is an error at start; `None` when the log is off.
    pub fn open(target: Target, format: Format) -> std::io::Result<Option<Self>> {
        let file = match &target {
            Target::Off => return Ok(None),
            Target::Stderr => None,
            Target::File(path) => Some(append(path)?),
        };
        Ok(Some(AccessLog { target, format, file: Mutex::new(file) }))
    }

    /// Opens the file again by its path: after logrotate moved it, lines
    /// go to the new file. On an error the old file is kept.
    pub fn reopen(&self) -> std::io::Result<()> {
        if let Target::File(path) = &self.target {
            let fresh = append(path)?;
            *self.file.lock().expect("access log lock") = Some(fresh);
        }
        Ok(())
    }

    pub fn write(&self, e: &Entry<'_>) {
        let line = match self.format {
            Format::Combined => combined(e, SystemTime::now()),
            Format::Json => json(e, SystemTime::now()),
        };
        let written = match &mut *self.file.lock().expect("access log lock") {
            Some(file) => file.write_all(line.as_bytes()),
            None => std::io::stderr().lock().write_all(line.as_bytes()),
        };
        if let Err(e) = written {
            tracing::warn!(error = %e, "access log line not written");
        }
    }
}

/// A request on the full path, waiting for its response: what its line
/// needs from the request, taken before the handler consumes it.
pub(crate) struct Pending {
    log: Arc<AccessLog>,
    started: Instant,
    peer: Option<SocketAddr>,
    tls: bool,
    method: String,
    target: String,
    version: &'static str,
    referer: Option<String>,
    user_agent: Option<String>,
}

impl Pending {
    pub fn of<B>(log: Arc<AccessLog>, req: &Request<B>, peer: Option<SocketAddr>, tls: bool) -> Self {
        let field =
            |name| req.headers().get(name).map(|v: &HeaderValue| String::from_utf8_lossy(v.as_bytes()).into_owned());
        Pending {
            log,
            started: Instant::now(),
            peer,
            tls,
            method: req.method().to_string(),
            target: req.uri().path_and_query().map_or_else(|| req.uri().to_string(), |p| p.as_str().to_owned()),
            version: match req.version() {
                Version::HTTP_09 => "HTTP/0.9",
                Version::HTTP_10 => "HTTP/1.0",
                Version::HTTP_2 => "HTTP/2.0",
                Version::HTTP_3 => "HTTP/3.0",
                _ => "HTTP/1.1",
            },
            referer: field(header::REFERER),
            user_agent: field(header::USER_AGENT),
        }
    }

    /// `res` with a body that writes the line when it ends or is dropped
    /// (a client gone mid-body is logged with the bytes it took).
    pub fn answered(self, res: Response<ResBody>) -> Response<ResBody> {
        let h = res.headers();
        let native = h.get(header::CONTENT_TYPE).is_some_and(|v| v.as_bytes() == circus_proto::CONTENT_TYPE.as_bytes());
        let cache = match h.get(circus_origin::CACHE_STATUS).map(HeaderValue::as_bytes) {
            Some(v) if v.windows(3).any(|w| w == b"hit") => "hit",
            Some(_) => "miss",
            None => "-",
        };
        let range = h
            .get(header::CONTENT_RANGE)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.strip_prefix("bytes ").unwrap_or(v).to_owned());
        let status = res.status().as_u16();
        res.map(|inner| Logged { inner, pending: Some(self), status, native, cache, range, bytes: 0 }.boxed())
    }
}

/// A response body that counts its bytes and logs its request at the end.
struct Logged {
    inner: ResBody,
    pending: Option<Pending>,
    status: u16,
    native: bool,
    cache: &'static str,
    range: Option<String>,
    bytes: u64,
}

impl http_body::Body for Logged {
    type Data = Bytes;
    type Error = circus_http::BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
        {
            self.bytes += data.len() as u64;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        if let Some(p) = self.pending.take() {
            p.log.write(&Entry {
                peer: p.peer,
                method: &p.method,
                target: &p.target,
                version: p.version,
                status: self.status,
                bytes: self.bytes,
                duration: p.started.elapsed(),
                native: self.native,
                tls: p.tls,
                cache: self.cache,
                range: self.range.as_deref(),
                referer: p.referer.as_deref(),
                user_agent: p.user_agent.as_deref(),
            });
        }
    }
}

fn append(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| std::io::Error::new(e.kind(), format!("access log {}: {e}", path.display())))
}

fn combined(e: &Entry<'_>, now: SystemTime) -> String {
    let mut line = String::with_capacity(200);
    let peer = e.peer.map(|p| p.ip().to_string()).unwrap_or_else(|| "-".into());
    let _ = write!(
        line,
        "{peer} - - [{}] \"{} {} {}\" {} {} \"{}\" \"{}\" rt={:.3} mode={} tls={} cache={} range={}",
        clf_time(now),
        e.method,
        quoted(e.target),
        e.version,
        e.status,
        e.bytes,
        quoted(e.referer.unwrap_or("-")),
        quoted(e.user_agent.unwrap_or("-")),
        e.duration.as_secs_f64(),
        if e.native { "native" } else { "plain" },
        u8::from(e.tls),
        e.cache,
        quoted(e.range.unwrap_or("-")),
    );
    line.push('\n');
    line
}

fn json(e: &Entry<'_>, now: SystemTime) -> String {
    let value = serde_json::json!({
        "time": humantime::format_rfc3339_millis(now).to_string(),
        "peer": e.peer.map(|p| p.to_string()),
        "method": e.method,
        "target": e.target,
        "version": e.version,
        "status": e.status,
        "bytes": e.bytes,
        "duration_ms": e.duration.as_secs_f64() * 1000.0,
        "mode": if e.native { "native" } else { "plain" },
        "tls": e.tls,
        "cache": e.cache,
        "range": e.range,
        "referer": e.referer,
        "user_agent": e.user_agent,
    });
    format!("{value}\n")
}

/// A request's text inside double quotes: quotes, backslashes and control
/// bytes escaped, so that a hostile target or agent cannot forge a line.
fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => {
                let _ = write!(out, "\\x{:02X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// `24/Nov/2026:11:20:05 +0000` (the common log format's time, in UTC).
fn clf_time(t: SystemTime) -> String {
    let iso = humantime::format_rfc3339_seconds(t).to_string(); // 2026-11-24T11:20:05Z
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let month = iso[5..7].parse::<usize>().map_or("???", |m| MONTHS[m - 1]);
    format!("{}/{month}/{}:{} +0000", &iso[8..10], &iso[0..4], &iso[11..19])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry<'a>(target: &'a str, agent: &'a str) -> Entry<'a> {
        Entry {
            peer: Some("192.0.2.7:5000".parse().unwrap()),
            method: "GET",
            target,
            version: "HTTP/1.1",
            status: 200,
            bytes: 1234,
            duration: Duration::from_millis(12),
            native: false,
            tls: true,
            cache: "hit",
            range: None,
            referer: None,
            user_agent: Some(agent),
        }
    }

    #[test]
    fn combined_lines_are_what_log_tools_read_and_cannot_be_forged() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_000_805);
        let line = combined(&entry("/a b", "curl/8"), at);
        assert_eq!(
            line,
            "192.0.2.7 - - [18/Nov/2026:11:20:05 +0000] \"GET /a b HTTP/1.1\" 200 1234 \"-\" \"curl/8\" rt=0.012 mode=plain tls=1 cache=hit range=-\n"
        );
        let forged = combined(&entry("/x", "a\"\n1.2.3.4 - - [x] \"GET /admin"), at);
        assert_eq!(forged.lines().count(), 1, "{forged}");
        assert!(forged.contains("a\\\"\\x0A1.2.3.4"), "{forged}");
    }

    #[test]
    fn json_lines_parse() {
        let line = json(&entry("/x", "agent\n"), SystemTime::UNIX_EPOCH);
        assert_eq!(line.lines().count(), 1);
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            (v["status"].as_u64(), v["bytes"].as_u64(), v["tls"].as_bool()),
            (Some(200), Some(1234), Some(true))
        );
        assert_eq!(v["user_agent"], "agent\n");
        assert!(v["range"].is_null());
        let ranged = Entry { status: 206, range: Some("100-199/1000"), ..entry("/x", "a") };
        let v: serde_json::Value = serde_json::from_str(&json(&ranged, SystemTime::UNIX_EPOCH)).unwrap();
        assert_eq!(v["range"], "100-199/1000");
        assert!(combined(&ranged, SystemTime::UNIX_EPOCH).ends_with(" range=100-199/1000\n"));
    }
}
