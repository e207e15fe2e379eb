//! The load generators that are not ours: wrk for HTTP/1.1 requests, h2load
//! for h2 streams, curl for whole downloads. Each run is bounded in time
//! (wrk and h2load by their duration, curl by `--max-time`), and any socket
//! error, non-2xx answer or short body fails the measurement instead of
//! being averaged in.

use crate::{BenchError, io_err};
use std::{
    path::{Path, PathBuf},
    process::Command,
};

/// The one TLS 1.3 suite clients offer, so both servers use the same.
pub(crate) const SUITE: &str = "TLS_AES_128_GCM_SHA256";

/// How clients reach a server: its base URL (`http://host:port` or
/// `https://host:port`) and, over TLS, what they trust and offer.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    pub base: String,
    pub tls: Option<ClientTls>,
}

#[derive(Debug, Clone)]
pub(crate) struct ClientTls {
    /// The server's certificate, trusted by curl.
    pub ca: PathBuf,
    /// An OpenSSL configuration limiting wrk to TLS 1.3 with [`SUITE`].
    pub openssl_conf: PathBuf,
}

/// Fails unless every tool is on the PATH, naming the packages.
pub(crate) fn require(tools: &[&str]) -> Result<(), BenchError> {
    for tool in tools {
        if which(tool).is_none() {
            return Err(BenchError::Setup(format!(
                "{tool} is not installed (apt-get install wrk nghttp2-client curl openssl)"
            )));
        }
    }
    Ok(())
}

fn which(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join(tool)).find(|p| p.exists())
}

/// wrk (2 threads, `conns` connections, no pipelining) requesting `object`
/// for `seconds`: requests per second. With `close`, every request asks
/// for a new connection.
pub(crate) fn wrk(
    to: &Endpoint,
    who: &str,
    object: &str,
    conns: usize,
    seconds: f64,
    close: bool,
) -> Result<f64, BenchError> {
    let url = format!("{}/{object}", to.base);
    let mut cmd = Command::new("wrk");
    cmd.args(["-t2", &format!("-c{conns}"), &format!("-d{}s", seconds.ceil() as u64), "--timeout", "10s"]);
    if close {
        cmd.args(["-H", "Connection: close"]);
    }
    if let Some(tls) = &to.tls {
        cmd.env("OPENSSL_CONF", &tls.openssl_conf);
    }
    let out = cmd.arg(&url).output().map_err(io_err("running wrk"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let failed = |why: &str| BenchError::Client(format!("wrk {url} against {who}: {why}\n{text}"));
    if !out.status.success() {
        return Err(failed("exit status"));
    }
    if text.contains("Non-2xx") {
        return Err(failed("answers other than 2xx"));
    }
    // With a new connection per request, wrk counts the server's close
    // after each answer as a read error; other socket errors fail.
    if let Some(line) = text.lines().find(|l| l.contains("Socket errors")) {
        let count = |name: &str| {
            line.split(',')
                .find(|f| f.trim_start().starts_with(name))
                .and_then(|f| f.split_whitespace().last()?.parse().ok())
        };
        let (connect, write, timeout) = (count("Socket errors: connect"), count("write"), count("timeout"));
        if [connect, write, timeout].iter().any(|c: &Option<u64>| c.unwrap_or(0) > 0) {
            return Err(failed("socket errors"));
        }
    }
    text.lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| failed("no Requests/sec"))
}

/// h2load (2 threads, `conns` connections, `streams` concurrent streams on
/// each) requesting `object` over h2 for `seconds`: requests per second.
/// In clear it speaks h2 with prior knowledge.
pub(crate) fn h2load(
    to: &Endpoint,
    who: &str,
    object: &str,
    conns: usize,
    streams: usize,
    seconds: f64,
) -> Result<f64, BenchError> {
    let url = format!("{}/{object}", to.base);
    let mut cmd = Command::new("h2load");
    cmd.args([&format!("-c{conns}"), &format!("-m{streams}"), "-t2", &format!("-D{}", seconds.ceil() as u64)]);
    if to.tls.is_some() {
        cmd.args(["--tls13-ciphers", SUITE]);
    }
    let out = cmd.arg(&url).output().map_err(io_err("running h2load"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let failed = |why: &str| BenchError::Client(format!("h2load {url} against {who}: {why}\n{text}"));
    if !out.status.success() {
        return Err(failed("exit status"));
    }
    // "requests: N total, N started, N done, N succeeded, F failed, E errored, ..."
    let requests = text.lines().find(|l| l.starts_with("requests:")).ok_or_else(|| failed("no request counts"))?;
    let field = |name: &str| -> Option<u64> {
        requests.split(',').find(|f| f.trim_end().ends_with(name))?.split_whitespace().rev().nth(1)?.parse().ok()
    };
    if field("failed").unwrap_or(1) > 0 || field("errored").unwrap_or(1) > 0 {
        return Err(failed("failed or errored requests"));
    }
    // "status codes: N 2xx, 0 3xx, 0 4xx, 0 5xx"
    let codes = text.lines().find(|l| l.starts_with("status codes:")).ok_or_else(|| failed("no status codes"))?;
    if codes.split(',').skip(1).any(|f| f.split_whitespace().next() != Some("0")) {
        return Err(failed("answers other than 2xx"));
    }
    if to.tls.is_some() && !text.contains("Application protocol: h2") {
        return Err(failed("not h2"));
    }
    // "finished in 5.00s, 12345.67 req/s, ..."
    text.lines()
        .find(|l| l.starts_with("finished in"))
        .and_then(|l| l.split(',').nth(1)?.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| failed("no req/s"))
}

/// `clients` concurrent curl downloads of `object`, `size` bytes each:
/// aggregate bytes per second; each must get every byte.
pub(crate) async fn downloads(
    to: &Endpoint,
    who: &str,
    object: &str,
    clients: usize,
    size: u64,
) -> Result<f64, BenchError> {
    let url = format!("{}/{object}", to.base);
    let started = std::time::Instant::now();
    let mut children = Vec::new();
    for _ in 0..clients {
        let mut cmd = tokio::process::Command::new("curl");
        cmd.args(["-sSf", "--max-time", "600"]);
        if let Some(tls) = &to.tls {
            cmd.args(["--tls13-ciphers", SUITE, "--cacert"]).arg(&tls.ca);
        }
        let child = cmd
            .args(["-o", "/dev/null", "-w", "%{size_download}", &url])
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(io_err("starting curl"))?;
        children.push(child);
    }
    for child in children {
        let out = child.wait_with_output().await.map_err(io_err("waiting for curl"))?;
        let got: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(0);
        if !out.status.success() || got != size {
            return Err(BenchError::Client(format!("curl {url} got {got} of {size} bytes from {who}")));
        }
    }
    Ok(clients as f64 * size as f64 / started.elapsed().as_secs_f64())
}
