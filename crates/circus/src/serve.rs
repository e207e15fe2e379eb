//! `circus serve DIR`: flags and an optional TOML file to a `ServeConfig`.

use anyhow::Context;
use circus_core::ByteSize;
use circus_sched::{Favor, PolicyKind};
use circus_server::{FileConfig, ServeConfig, Server};
use clap::Args;
use std::{net::SocketAddr, path::PathBuf};

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Directory whose files are served (omit it with --origin).
    dir: Option<PathBuf>,
    /// Serve this origin through the caching tier instead of a directory:
    /// an HTTP server (http://host:port/ or https://host/) or an S3 bucket
    /// (s3://BUCKET[/PREFIX]); --cache is then the tier's memory budget.
    #[arg(long)]
    origin: Option<String>,
    /// S3-compatible endpoint (e.g. http://127.0.0.1:9000) instead of AWS;
    /// buckets are addressed path style. Credentials come from
    /// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or the config file.
    #[arg(long)]
    s3_endpoint: Option<String>,
    /// S3 region (default: AWS_REGION, else us-east-1).
    #[arg(long)]
    s3_region: Option<String>,
    /// Allow plain HTTP to the S3 endpoint (implied by an http:// endpoint).
    #[arg(long)]
    s3_allow_http: Option<bool>,
    /// Seconds S3 objects without a Cache-Control of their own stay fresh
    /// (default: heuristic, a tenth of their age, at most a day).
    #[arg(long)]
    s3_max_age: Option<u64>,
    /// Unit of origin fetches and storage (default 1MiB).
    #[arg(long)]
    origin_block: Option<ByteSize>,
    /// Seconds to wait for the origin's response head or next chunk (default 30).
    #[arg(long)]
    origin_timeout: Option<u64>,
    /// CA certificates (PEM) for an https origin, which must chain to them
    /// instead of the system's roots; for an S3 endpoint, trusted beside them.
    #[arg(long)]
    origin_ca: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Address of the admin listener: /metrics, /status, POST /purge and
    /// POST /prefetch (off unless given; keep it on loopback).
    #[arg(long)]
    admin_listen: Option<SocketAddr>,
    /// Certificate chain (PEM) to serve HTTPS with; repeat for several
    /// names (chosen by SNI; the first is the default).
    #[arg(long)]
    tls_cert: Vec<PathBuf>,
    /// Private key (PEM) of the --tls-cert at the same place.
    #[arg(long)]
    tls_key: Vec<PathBuf>,
    /// TOML file with settings (flags given on the command line win).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Memory for cached blocks: a hard budget (default 256MiB).
    #[arg(long)]
    cache: Option<ByteSize>,
    /// circus (reorder blocks to share reads) or sequential.
    #[arg(long)]
    policy: Option<PolicyKind>,
    /// Block size, the unit of reads and sends (default 64KiB).
    #[arg(long)]
    block: Option<ByteSize>,
    /// Blocks queued per client (default 5).
    #[arg(long)]
    queue: Option<u32>,
    /// Active region length per file (default 16MiB).
    #[arg(long)]
    active: Option<ByteSize>,
    #[arg(long)]
    leapfront: Option<f64>,
    #[arg(long)]
    threshold: Option<f64>,
    #[arg(long)]
    readahead: Option<u32>,
    /// What the circus policy favours when a file's native clients differ in
    /// speed: speed (default: each at its own pace; blocks a slower client
    /// missed are read again) or storage (each block read once for all of
    /// them; the region waits for the slowest, so faster clients slow down).
    #[arg(long)]
    favor: Option<Favor>,
    /// Connections served at once (default 10000).
    #[arg(long)]
    max_connections: Option<usize>,
    /// Seconds to wait for downloads in progress on SIGTERM (default 30).
    #[arg(long)]
    drain_timeout: Option<u64>,
    /// Unsent bytes per connection kept in the kernel (default 128KiB; 0 =
    /// system default). Small values let the scheduler see clients' real pace.
    #[arg(long)]
    send_lowat: Option<ByteSize>,
    /// Send cached blocks with sendfile(2) from a memfd instead of copying
    /// them into each socket (default true).
    #[arg(long)]
    zero_copy: Option<bool>,
    /// Keep the zero-copy cache in an unlinked file in DIR instead of a
    /// memfd: on a tmpfs mounted with huge=always (mount -t tmpfs -o
    /// huge=always tmpfs DIR) sends walk huge pages, not 4 KiB ones.
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Cap on storage reads, bytes per second (e.g. 50MiB; default none).
    /// Downloads wait rather than read faster.
    #[arg(long)]
    read_rate: Option<ByteSize>,
    /// Keep hash indexes in DIR instead of DIR/.circus/index beside the data
    /// (for a read-only tree; `circus index` builds them ahead).
    #[arg(long, value_name = "DIR")]
    index_dir: Option<PathBuf>,
    /// Seconds a native request waits for its file's hash index to be built
    /// before it is served the plain stream instead (default 2; the build
    /// goes on, and later requests are native).
    #[arg(long, value_name = "SECONDS")]
    index_wait: Option<u64>,
    /// Serve files and directories whose names start with a dot (.git/,
    /// .env); by default they are answered 404.
    #[arg(long)]
    dotfiles: Option<bool>,
    /// Answer a directory without an index.html with a listing of its
    /// files (default true; false answers 403).
    #[arg(long)]
    listing: Option<bool>,
    /// Seconds a response may make no progress (the client takes no byte)
    /// before its connection is closed; idle HTTP/2 connections are closed
    /// after it too (default 60).
    #[arg(long, value_name = "SECS")]
    send_timeout: Option<u64>,
    /// Connections one client address may hold at once (default 0: no cap;
    /// behind a NAT many users share one address).
    #[arg(long)]
    max_connections_per_ip: Option<usize>,
    /// Streams one HTTP/2 connection may have open at once (default 100).
    #[arg(long)]
    max_streams: Option<u32>,
}

impl ServeArgs {
    /// Defaults, then the TOML file, then the flags given.
    fn config(&self) -> anyhow::Result<ServeConfig> {
        let root = match (&self.dir, &self.origin) {
            (Some(_), Some(_)) => anyhow::bail!("give either DIR or --origin, not both"),
            (Some(dir), None) if !dir.is_dir() => {
                anyhow::bail!("{} is not a directory: give the directory whose files to serve", dir.display())
            }
            (Some(dir), None) => dir.clone(),
            // The directory table is built but never consulted with an
            // origin (from --origin or the config file: checked below).
            (None, _) => std::env::temp_dir(),
        };
        let mut cfg = ServeConfig::new(root);
        if let Some(path) = &self.config {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            FileConfig::parse(&text)
                .and_then(|f| f.apply(&mut cfg))
                .with_context(|| format!("in {}", path.display()))?;
        }
        let flags = FileConfig {
            listen: self.listen,
            admin_listen: self.admin_listen,
            tls_cert: Some(self.tls_cert.clone()).filter(|c| !c.is_empty()),
            tls_key: Some(self.tls_key.clone()).filter(|k| !k.is_empty()),
            cache: self.cache,
            policy: self.policy,
            block: self.block,
            queue: self.queue,
            active: self.active,
            leapfront: self.leapfront,
            threshold: self.threshold,
            readahead: self.readahead,
            favor: self.favor,
            max_connections: self.max_connections,
            drain_timeout_secs: self.drain_timeout,
            send_lowat: self.send_lowat,
            zero_copy: self.zero_copy,
            cache_dir: self.cache_dir.clone(),
            index_dir: self.index_dir.clone(),
            read_rate: self.read_rate,
            origin: self.origin.clone(),
            origin_block: self.origin_block,
            origin_timeout_secs: self.origin_timeout,
            origin_ca: self.origin_ca.clone(),
            s3_endpoint: self.s3_endpoint.clone(),
            s3_region: self.s3_region.clone(),
            s3_allow_http: self.s3_allow_http,
            s3_max_age_secs: self.s3_max_age,
            dotfiles: self.dotfiles,
            listing: self.listing,
            send_timeout_secs: self.send_timeout,
            index_wait_secs: self.index_wait,
            max_connections_per_ip: self.max_connections_per_ip,
            max_streams: self.max_streams,
            ..FileConfig::default()
        };
        flags.apply(&mut cfg).context("invalid settings")?;
        match (&self.dir, &cfg.origin) {
            (Some(_), Some(_)) => anyhow::bail!("give either DIR or an origin (in the config file), not both"),
            (None, None) => {
                anyhow::bail!("nothing to serve: give a directory, or --origin http://host:port/ or s3://BUCKET")
            }
            _ => Ok(cfg),
        }
    }
}

pub fn main(args: ServeArgs) -> anyhow::Result<()> {
    let cfg = args.config()?;
    raise_open_file_limit();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        let server = Server::bind(cfg.clone()).await.with_context(|| format!("cannot listen on {}", cfg.listen))?;
        // Tests and scripts read this line to find the port when given :0.
        let scheme = if cfg.tls.is_empty() { "http" } else { "https" };
        println!("circus listening on {scheme}://{}", server.local_addr());
        if let Some(certs) = server.certificates() {
            tokio::spawn(reload_on_hangup(certs));
        }
        if let Some(admin) = server.admin_addr() {
            println!("circus admin on http://{admin}");
        }
        tracing::info!(root = %cfg.root.display(), origin = ?cfg.origin.as_ref().map(|o| o.source.to_string()), cache = %ByteSize(cfg.sched.cache_bytes), policy = ?cfg.sched.policy, "serving");
        server.run(shutdown_signal()).await?;
        Ok(())
    })
}

/// Reloads the certificates on each SIGHUP; open connections are kept.
async fn reload_on_hangup(certs: std::sync::Arc<circus_server::tls::Certificates>) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut hangups) = signal(SignalKind::hangup()) else { return };
    while hangups.recv().await.is_some() {
        match certs.reload() {
            Ok(()) => tracing::info!("certificates reloaded"),
            Err(e) => tracing::error!(error = %e, "certificates not reloaded; the ones in use stay"),
        }
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term.recv() => {},
    }
}

/// Each connection and each open file version takes a descriptor; the usual
/// soft limit (1024) would cap the server far below `--max-connections`.
/// Raise it to the hard limit, as nginx's `worker_rlimit_nofile` would.
fn raise_open_file_limit() {
    match rlimit::Resource::NOFILE.get() {
        Ok((soft, hard)) if soft < hard => {
            if let Err(e) = rlimit::Resource::NOFILE.set(hard, hard) {
                tracing::warn!(error = %e, soft, "cannot raise the open-file limit");
            }
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "cannot read the open-file limit"),
    }
}
