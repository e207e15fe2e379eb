//! HTTPS against nginx: the same certificate (ECDSA P-256) and the same
//! cipher (TLS 1.3, AES-128-GCM: the clients offer nothing else), nginx
//! with `ssl_session_cache` and sendfile, circus at its defaults with
//! `--tls-cert`. Load generators that are not ours: wrk for HTTP/1.1
//! (1 KiB and 1 MiB over keep-alive, 1 KiB with a new TLS connection per
//! request), h2load for h2 (1 KiB, 100 streams per connection), curl for N
//! concurrent downloads of a large file. Rounds alternate the servers,
//! and each ratio's spread is that of its rounds.

use crate::{
    BenchError, BenchOptions, Report,
    external::{self, ClientTls, SUITE},
    io_err, make_file,
    procs::ServerProc,
    versus::{self, Contender, Drive, Load},
};
use std::{
    path::{Path, PathBuf},
    process::Command,
};

fn loads(opts: &BenchOptions) -> Vec<Load> {
    let load = |name: &str, drive, size, target| Load { name: name.into(), drive, size, target };
    let wrk = |object, conns, close| Drive::Wrk { object, conns, close };
    vec![
        load("1KiB keep-alive (wrk, 64 conns)", wrk("1k.bin", 64, false), 1024, 1.5),
        load("1MiB keep-alive (wrk, 16 conns)", wrk("1m.bin", 16, false), 1 << 20, 1.0),
        load("1KiB new TLS conn per request (wrk, 64 conns)", wrk("1k.bin", 64, true), 1024, 1.0),
        load(
            "1KiB h2, 100 streams (h2load, 16 conns)",
            Drive::H2 { object: "1k.bin", conns: 16, streams: 100 },
            1024,
            1.0,
        ),
        load(
            "concurrent large-file downloads (curl)",
            Drive::Downloads { object: "big.bin", clients: opts.clients },
            opts.file_size,
            1.0,
        ),
    ]
}

pub async fn run(opts: &BenchOptions, log: &mut (dyn FnMut(&str) + Send)) -> Result<Report, BenchError> {
    external::require(&["wrk", "h2load", "curl", "openssl"])?;
    let root = opts.work.join("https");
    std::fs::create_dir_all(&root).map_err(io_err("creating data dir"))?;
    make_file(&root.join("1k.bin"), 1024, opts.seed)?;
    make_file(&root.join("1m.bin"), 1 << 20, opts.seed)?;
    make_file(&root.join("big.bin"), opts.file_size, opts.seed)?;
    let (cert, key) = certificate(&opts.work)?;
    let tls = ClientTls { ca: cert.clone(), openssl_conf: client_openssl_conf(&opts.work)? };
    let cache = (opts.file_size / 15 * 16 + (64 << 20)).max(opts.cache);
    let mut args = vec!["--cache".to_string(), cache.to_string()];
    args.extend(["--tls-cert".into(), path(&cert), "--tls-key".into(), path(&key)]);
    args.extend(opts.server_args.iter().cloned());
    let circus = ServerProc::circus(&opts.circus, &root, &args)?;
    let nginx = ServerProc::nginx_https(&root, &opts.work, &cert, &key)?;
    let circus = Contender::one_port(&circus, Some(&tls));
    let nginx = Contender::one_port(&nginx, Some(&tls));
    // Warm-up: every object in memory, in both.
    for c in [&circus, &nginx] {
        external::downloads(&c.h1, &c.server.name, "big.bin", 1, opts.file_size).await?;
        external::wrk(&c.h1, &c.server.name, "1k.bin", 4, 1.0, false)?;
    }
    let loads = loads(opts);
    let outcome = versus::alternate(&circus, &nginx, &loads, opts.rounds, opts.seconds, log).await?;
    let plot = opts.work.join("https.svg");
    crate::versus_plot::write(&loads, &outcome.figures, "circus vs nginx over HTTPS", &plot)?;
    log(&format!("plot: {}", plot.display()));
    Ok(Report {
        scenario: "https".into(),
        setup: format!(
            "TLS 1.3 {SUITE}, ECDSA P-256 certificate; nginx {} workers, ssl_session_cache, sendfile; circus defaults + --tls-cert; \
             wrk/h2load {} s per load, {} curl downloads of {} bytes; median of {} alternating rounds",
            crate::procs::nginx_workers(),
            opts.seconds,
            opts.clients,
            opts.file_size,
            opts.rounds,
        ),
        verdict: format!("circus / nginx: {}", outcome.verdicts.join("; ")),
        rows: outcome.rows,
    })
}

fn path(p: &Path) -> String {
    p.to_string_lossy().into_owned()
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
