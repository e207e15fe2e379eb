//! HTTPS against nginx: the same certificate (ECDSA P-256) and the same
//! cipher (TLS 1.3, AES-128-GCM: the clients offer nothing else), nginx
//! with `ssl_session_cache` and sendfile, circus at its defaults with
//! `--tls-cert`. Load generators that are not ours: wrk for HTTP/1.1
//! (1 KiB and 1 MiB over keep-alive, 1 KiB with a new TLS connection per
//! request), h2load for h2 (1 KiB, 100 streams per connection), curl for N
//! concurrent downloads of a large file. Rounds alternate the servers,
//! and each ratio's spread is that of its rounds.

use crate::{BenchError, BenchOptions, Report, Row, io_err, make_file, procs::ServerProc};
use std::{
    path::{Path, PathBuf},
    process::Command,
};

/// Rounds per load, alternating servers.
const ROUNDS: usize = 3;

/// The one TLS 1.3 suite both servers end up using.
const SUITE: &str = "TLS_AES_128_GCM_SHA256";

/// One measured load: what it drives and its target ratio.
struct Load {
    name: &'static str,
    /// What the ratio compares (req/s or bytes/s).
    unit: &'static str,
    target: f64,
}

const LOADS: [Load; 5] = [
    Load { name: "1KiB keep-alive (wrk, 64 conns)", unit: "req/s", target: 1.5 },
    Load { name: "1MiB keep-alive (wrk, 16 conns)", unit: "bytes/s", target: 1.0 },
    Load { name: "1KiB new TLS conn per request (wrk, 64 conns)", unit: "req/s", target: 1.0 },
    Load { name: "1KiB h2, 100 streams (h2load, 16 conns)", unit: "req/s", target: 1.0 },
    Load { name: "concurrent large-file downloads (curl)", unit: "bytes/s", target: 1.0 },
];

pub async fn run(opts: &BenchOptions, log: &mut (dyn FnMut(&str) + Send)) -> Result<Report, BenchError> {
    for tool in ["wrk", "h2load", "curl", "openssl"] {
        if which(tool).is_none() {
            return Err(BenchError::Setup(format!(
                "{tool} is not installed (apt-get install wrk nghttp2-client curl openssl)"
            )));
        }
    }
    let root = opts.work.join("https");
    std::fs::create_dir_all(&root).map_err(io_err("creating data dir"))?;
    make_file(&root.join("1k.bin"), 1024, opts.seed)?;
    make_file(&root.join("1m.bin"), 1 << 20, opts.seed)?;
    make_file(&root.join("big.bin"), opts.file_size, opts.seed)?;
    let (cert, key) = certificate(&opts.work)?;
    let client_conf = client_openssl_conf(&opts.work)?;
    let cache = (opts.file_size / 15 * 16 + (64 << 20)).max(opts.cache);
    let mut args = vec!["--cache".to_string(), cache.to_string()];
    args.extend(["--tls-cert".into(), path(&cert), "--tls-key".into(), path(&key)]);
    args.extend(opts.server_args.iter().cloned());
    let circus = ServerProc::circus(&opts.circus, &root, &args)?;
    let nginx = ServerProc::nginx_https(&root, &opts.work, &cert, &key)?;
    let servers = [&circus, &nginx];
    let seconds = opts.seconds;
    // Warm-up: every object in memory, in both.
    for server in servers {
        downloads(server, &cert, 1, opts.file_size).await?;
        wrk(server, "1k.bin", 4, 1.0, false, &client_conf)?;
    }
    // rates[load][server][round], cpu[load][server]
    let mut rates = vec![[Vec::new(), Vec::new()]; LOADS.len()];
    let mut cpu = vec![[0.0; 2]; LOADS.len()];
    let mut bytes = vec![[0.0; 2]; LOADS.len()];
    for round in 1..=ROUNDS {
        for (l, load) in LOADS.iter().enumerate() {
            for (s, server) in servers.iter().enumerate() {
                let before = server.cpu_seconds();
                let (rate, body) = match l {
                    0 => wrk(server, "1k.bin", 64, seconds, false, &client_conf).map(|r| (r, r * 1024.0))?,
                    1 => wrk(server, "1m.bin", 16, seconds, false, &client_conf)
                        .map(|r| (r * f64::from(1u32 << 20), r * f64::from(1u32 << 20)))?,
                    2 => wrk(server, "1k.bin", 64, seconds, true, &client_conf).map(|r| (r, r * 1024.0))?,
                    3 => h2load(server, seconds).map(|r| (r, r * 1024.0))?,
                    _ => downloads(server, &cert, opts.clients, opts.file_size).await.map(|r| (r, r))?,
                };
                let spent = server.cpu_seconds() - before;
                cpu[l][s] += spent;
                // Body bytes served in this measurement (rate x its length).
                let length = if l == 4 { opts.clients as f64 * opts.file_size as f64 / rate } else { seconds };
                bytes[l][s] += body * length;
                log(&format!("round {round}/{ROUNDS}: {}: {}: {rate:.0} {}", load.name, server.name, load.unit));
                rates[l][s].push(rate);
            }
        }
    }
    let mut rows = Vec::new();
    let mut verdicts = Vec::new();
    for (l, load) in LOADS.iter().enumerate() {
        for (s, server) in servers.iter().enumerate() {
            let r = &rates[l][s];
            rows.push(
                Row::new(format!("{} | {}", server.name, load.name))
                    .with(&format!("median_{}", load.unit.replace('/', "_per_")), median(r))
                    .with("min", r.iter().copied().fold(f64::MAX, f64::min))
                    .with("max", r.iter().copied().fold(0.0, f64::max))
                    .with("cpu_s_per_gb", cpu[l][s] / (bytes[l][s] / 1e9)),
            );
        }
        let ratios: Vec<f64> = rates[l][0].iter().zip(&rates[l][1]).map(|(c, n)| c / n).collect();
        let (ratio, low, high) = (
            median(&ratios),
            ratios.iter().copied().fold(f64::MAX, f64::min),
            ratios.iter().copied().fold(0.0, f64::max),
        );
        rows.push(
            Row::new(format!("ratio | {}", load.name))
                .with("circus_over_nginx", ratio)
                .with("min", low)
                .with("max", high)
                .with("target", load.target),
        );
        verdicts.push(format!(
            "{}: {ratio:.2} (target {:.1}: {})",
            load.name,
            load.target,
            if ratio >= load.target { "met" } else { "NOT met" }
        ));
    }
    Ok(Report {
        scenario: "https".into(),
        setup: format!(
            "TLS 1.3 {SUITE}, ECDSA P-256 certificate; nginx {} workers, ssl_session_cache, sendfile; circus defaults + --tls-cert; \
             wrk/h2load {seconds} s per load, {} curl downloads of {} bytes; median of {ROUNDS} alternating rounds",
            nginx_workers(),
            opts.clients,
            opts.file_size
        ),
        verdict: format!("circus / nginx: {}", verdicts.join("; ")),
        rows,
    })
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn path(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn which(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join(tool)).find(|p| p.exists())
}

fn nginx_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// An ECDSA P-256 end-entity certificate for 127.0.0.1 and localhost.
fn certificate(work: &Path) -> Result<(PathBuf, PathBuf), BenchError> {
    let (cert, key) = (work.join("https-cert.pem"), work.join("https-key.pem"));
    let out = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"])
        .args(["-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .map_err(io_err("running openssl"))?;
    if !out.status.success() {
        return Err(BenchError::Setup(format!("openssl req: {}", String::from_utf8_lossy(&out.stderr))));
    }
    Ok((cert, key))
}

/// An OpenSSL configuration that makes a client (wrk) offer TLS 1.3 with
/// AES-128-GCM only, so both servers negotiate the same suite.
fn client_openssl_conf(work: &Path) -> Result<PathBuf, BenchError> {
    let conf = work.join("openssl-client.cnf");
    let text = format!(
        "openssl_conf = default_conf\n[default_conf]\nssl_conf = ssl_sect\n[ssl_sect]\nsystem_default = tls\n\
         [tls]\nMinProtocol = TLSv1.3\nCiphersuites = {SUITE}\n"
    );
    std::fs::write(&conf, text).map_err(io_err("writing the client's OpenSSL configuration"))?;
    Ok(conf)
}

/// wrk against `object` over HTTPS: requests per second. Any socket error
/// or non-2xx answer fails the measurement.
fn wrk(
    server: &ServerProc,
    object: &str,
    conns: usize,
    seconds: f64,
    close: bool,
    conf: &Path,
) -> Result<f64, BenchError> {
    let url = format!("https://{}/{object}", server.addr);
    let mut cmd = Command::new("wrk");
    cmd.args(["-t2", &format!("-c{conns}"), &format!("-d{}s", seconds.ceil() as u64), "--timeout", "10s"]);
    if close {
        cmd.args(["-H", "Connection: close"]);
    }
    let out = cmd.arg(&url).env("OPENSSL_CONF", conf).output().map_err(io_err("running wrk"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let failed = |why: &str| BenchError::Client(format!("wrk {url} against {}: {why}\n{text}", server.name));
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

/// h2load: 16 connections, 100 streams each, over h2: requests per second.
fn h2load(server: &ServerProc, seconds: f64) -> Result<f64, BenchError> {
    let url = format!("https://{}/1k.bin", server.addr);
    let out = Command::new("h2load")
        .args(["-c16", "-m100", "-t2", &format!("-D{}", seconds.ceil() as u64), "--tls13-ciphers", SUITE])
        .arg(&url)
        .output()
        .map_err(io_err("running h2load"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let failed = |why: &str| BenchError::Client(format!("h2load {url} against {}: {why}\n{text}", server.name));
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
    if !text.contains("Application protocol: h2") {
        return Err(failed("not h2"));
    }
    // "finished in 5.00s, 12345.67 req/s, ..."
    text.lines()
        .find(|l| l.starts_with("finished in"))
        .and_then(|l| l.split(',').nth(1)?.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| failed("no req/s"))
}

/// `clients` concurrent curl downloads of big.bin: aggregate bytes per
/// second; each must get every byte.
async fn downloads(server: &ServerProc, ca: &Path, clients: usize, size: u64) -> Result<f64, BenchError> {
    let url = format!("https://{}/big.bin", server.addr);
    let started = std::time::Instant::now();
    let mut children = Vec::new();
    for _ in 0..clients {
        let child = tokio::process::Command::new("curl")
            .args(["-sSf", "--max-time", "600", "--tls13-ciphers", SUITE, "--cacert"])
            .arg(ca)
            .args(["-o", "/dev/null", "-w", "%{size_download}", &url])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .map_err(io_err("starting curl"))?;
        children.push(child);
    }
    for child in children {
        let out = child.wait_with_output().await.map_err(io_err("waiting for curl"))?;
        let got: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(0);
        if !out.status.success() || got != size {
            return Err(BenchError::Client(format!("curl got {got} of {size} bytes from {}", server.name)));
        }
    }
    Ok(clients as f64 * size as f64 / started.elapsed().as_secs_f64())
}
