//! `circus serve DIR`: flags and an optional TOML file to a `ServeConfig`.

use anyhow::Context;
use circus_core::ByteSize;
use circus_server::{ServeConfig, Server, Settings};
use clap::Args;
use std::{path::PathBuf, sync::Arc};
use tokio::signal::unix::{SignalKind, signal};

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// TOML file with settings: the keys are the flags' names with
    /// underscores (drain_timeout = "10s"); flags given here win.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(flatten)]
    settings: Settings,
}

impl ServeArgs {
    /// Defaults, then the TOML file, then the flags given.
    fn config(&self) -> anyhow::Result<ServeConfig> {
        // With an origin the directory table is built but never consulted.
        let mut cfg = ServeConfig::new(std::env::temp_dir());
        let mut from_file = Settings::default();
        if let Some(path) = &self.config {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            from_file = Settings::parse(&text).with_context(|| format!("in {}", path.display()))?;
            from_file.apply(&mut cfg).with_context(|| format!("in {}", path.display()))?;
        }
        let flags = &self.settings;
        if flags.root.is_some() && flags.origin.is_some() {
            anyhow::bail!("give either DIR or --origin, not both");
        }
        flags.apply(&mut cfg).context("invalid settings")?;
        circus_server::settings::check_layers(&cfg).context("invalid settings")?;
        let root = flags.root.as_ref().or(from_file.root.as_ref());
        match (root, &cfg.origin) {
            (Some(_), Some(_)) => anyhow::bail!("give either a directory (DIR, root) or an origin, not both"),
            (None, None) => {
                anyhow::bail!("nothing to serve: give a directory, or --origin http://host:port/ or s3://BUCKET")
            }
            (Some(dir), None) if !dir.is_dir() => {
                anyhow::bail!("{} is not a directory: give the directory whose files to serve", dir.display())
            }
            _ => Ok(cfg),
        }
    }
}

pub fn main(args: ServeArgs) -> anyhow::Result<()> {
    let cfg = args.config()?;
    raise_open_file_limit(cfg.max_connections);
    warn_if_cache_exceeds_memory(cfg.sched.cache_bytes);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        // From here on SIGHUP reloads instead of ending the process.
        let hangups = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;
        // Before the listening lines, which scripts wait for before they
        // signal.
        let stop = shutdown_signal()?;
        let server = Server::bind(cfg.clone()).await?;
        let usr1 = match server.access_log() {
            Some(_) => Some(signal(SignalKind::user_defined1()).context("installing the SIGUSR1 handler")?),
            None => None,
        };
        // Tests and scripts read these lines to find the ports when given :0.
        let scheme = if server.certificates().is_none() { "http" } else { "https" };
        for addr in server.local_addrs() {
            println!("circus listening on {scheme}://{addr}");
        }
        if let Some(admin) = server.admin_addr() {
            println!("circus admin on http://{admin}");
        }
        if let Some(redirect) = server.redirect_addr() {
            println!("circus redirecting http://{redirect} to https");
        }
        tokio::spawn(reload_on_hangup(hangups, args, cfg.clone(), server.certificates()));
        if let (Some(log), Some(usr1)) = (server.access_log(), usr1) {
            tokio::spawn(reopen_on_usr1(usr1, log));
        }
        tracing::info!(root = %cfg.root.display(), origin = ?cfg.origin.as_ref().map(|o| o.source.to_string()), cache = %ByteSize(cfg.sched.cache_bytes), policy = ?cfg.sched.policy, "serving");
        // On a worker thread (see `Server::run`).
        tokio::spawn(server.run(stop)).await.context("the server's task")??;
        Ok(())
    })
}

/// On each SIGHUP the config file is read again, with the flags over it:
/// the certificates are loaded again (from new paths if they changed), and
/// settings that change only on a restart are named in the log. Open
/// connections and downloads are not touched; a file with an error changes
/// nothing.
async fn reload_on_hangup(
    mut hangups: tokio::signal::unix::Signal,
    args: ServeArgs,
    mut running: ServeConfig,
    certs: Option<Arc<circus_server::tls::Certificates>>,
) {
    while hangups.recv().await.is_some() {
        let fresh = match tokio::task::spawn_blocking({
            let args = args.clone();
            move || args.config()
        })
        .await
        {
            Ok(Ok(fresh)) => fresh,
            Ok(Err(e)) => {
                tracing::error!("configuration not reloaded, the settings in use stay: {e:#}");
                continue;
            }
            Err(e) => {
                tracing::error!(error = %e, "configuration not reloaded");
                continue;
            }
        };
        if let Some(certs) = certs.as_ref().filter(|_| !fresh.tls.is_empty()) {
            match certs.replace(&fresh.tls) {
                Ok(()) => {
                    running.tls.clone_from(&fresh.tls);
                    tracing::info!("certificates reloaded");
                }
                Err(e) => tracing::error!(error = %e, "certificates not reloaded; the ones in use stay"),
            }
        }
        match running.differing(&fresh) {
            pending if pending.is_empty() => tracing::info!("configuration reloaded"),
            pending => tracing::warn!(
                settings = %pending.join(", "),
                "configuration reloaded; these settings change only when the server is restarted"
            ),
        }
    }
}

/// SIGUSR1 reopens the access log file by its path (logrotate's
/// `postrotate`), as nginx does.
async fn reopen_on_usr1(mut usr1: tokio::signal::unix::Signal, log: Arc<circus_server::access_log::AccessLog>) {
    while usr1.recv().await.is_some() {
        match log.reopen() {
            Ok(()) => tracing::info!("access log reopened"),
            Err(e) => tracing::error!(error = %e, "access log not reopened; lines go to the file already open"),
        }
    }
}

/// Resolves at the first SIGTERM or SIGINT; both are caught from the call.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()> + Send> {
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => {},
            _ = term.recv() => {},
        }
    })
}

/// A cache larger than the machine's memory is swapped or killed by the
/// OOM killer long before it fills: say so at start.
fn warn_if_cache_exceeds_memory(cache: u64) {
    let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        let kib = m.lines().find_map(|l| l.strip_prefix("MemTotal:"))?.trim().trim_end_matches("kB").trim();
        kib.parse::<u64>().ok().map(|k| k * 1024)
    });
    if let Some(total) = total.filter(|&t| cache > t) {
        tracing::warn!(
            cache = %ByteSize(cache),
            memory = %ByteSize(total),
            "--cache is larger than this machine's memory: give a smaller --cache"
        );
    }
}

/// Each connection takes two descriptors (its socket, and a second handle
/// for closing it in stages) and each open file version one; the usual
/// soft limit (1024) would cap the server far below `--max-connections`.
/// Raise it to the hard limit, as nginx's `worker_rlimit_nofile` would, and
/// say so when even that is short of `max_connections`.
fn raise_open_file_limit(max_connections: usize) {
    let limit = match rlimit::Resource::NOFILE.get() {
        Ok((soft, hard)) if soft < hard => match rlimit::Resource::NOFILE.set(hard, hard) {
            Ok(()) => hard,
            Err(e) => {
                tracing::warn!(error = %e, soft, "cannot raise the open-file limit");
                soft
            }
        },
        Ok((soft, _)) => soft,
        Err(e) => return tracing::warn!(error = %e, "cannot read the open-file limit"),
    };
    // Room for the open files and listeners beside the connections.
    let needed = 2 * max_connections as u64 + 1024;
    if limit < needed {
        tracing::warn!(
            limit,
            needed,
            "the open-file limit is below what --max-connections takes: raise it (LimitNOFILE= under systemd) or lower --max-connections"
        );
    }
}
