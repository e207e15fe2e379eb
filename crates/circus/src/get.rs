//! `circus get URL`: flags to `GetOptions`, a progress bar, and an exit code
//! that says what went wrong (see `circus get --help`).

use circus_client::{BarProgress, EXIT_CODES, GetError, GetOptions, Mode, Protocol, Report, Sha256Digest};
use circus_core::ByteSize;
use clap::Args;
use std::path::{Path, PathBuf};

#[derive(Debug, Args)]
#[command(after_help = EXIT_CODES)]
pub struct GetArgs {
    /// The file's http:// or https:// URL.
    url: String,
    /// Where to save it (default: the last part of the URL's path, in the
    /// current directory, if no such file exists and it does not start with
    /// a dot). PATH.circus-part and PATH.circus-state sit beside it until it
    /// is complete; run the same command to resume. `-` writes the file to
    /// stdout once it is complete and verified (it is kept in $TMPDIR until
    /// then, and an interrupted run starts over).
    #[arg(short, long, value_name = "PATH")]
    output: Option<PathBuf>,
    /// Without -o: replace an existing file of the URL's name, or save
    /// under a name starting with a dot.
    #[arg(long)]
    force: bool,
    /// Plain HTTP only, even from a circus server.
    #[arg(long)]
    plain: bool,
    /// Failed attempts in a row, without progress, before giving up
    /// (waiting 200 ms, then twice as long each time).
    #[arg(long, default_value_t = 5)]
    retries: u32,
    /// Cap the download rate, in bytes per second: 1MB, 512KiB, ...
    #[arg(long, value_name = "RATE")]
    limit_rate: Option<String>,
    /// Give up on a connection attempt, or a silent connection, after this long.
    #[arg(long, default_value = "30s")]
    timeout: String,
    /// The file's SHA-256 as you know it, checked before the file is kept:
    /// sha-256=:BASE64: (as in Repr-Digest), sha256:HEX or bare HEX.
    #[arg(long, value_name = "DIGEST")]
    expect_digest: Option<String>,
    /// Do not check the whole file against the digests the server sends
    /// (blocks are still verified one by one in native mode).
    #[arg(long, conflicts_with = "expect_digest")]
    no_verify_digest: bool,
    /// A request header, "Name: value" (repeatable), as curl's -H: e.g.
    /// "Authorization: Bearer TOKEN" for a private path.
    #[arg(short = 'H', long = "header", value_name = "HEADER")]
    headers: Vec<String>,
    /// For https://: trust only the CA certificates in FILE (PEM), not the
    /// system's roots.
    #[arg(long, value_name = "FILE")]
    cacert: Option<PathBuf>,
    /// No progress bar and no messages, only errors.
    #[arg(short, long)]
    quiet: bool,
}

pub fn main(args: GetArgs) -> anyhow::Result<()> {
    let quiet = args.quiet;
    let result = run(args);
    match result {
        Ok(report) => {
            if !quiet {
                eprintln!("{}", summary(&report));
            }
            Ok(())
        }
        Err(e) => {
            // One line: the problem, then what to do about it.
            eprintln!("circus get: {e}; {}", e.hint());
            std::process::exit(e.exit_code());
        }
    }
}

fn run(args: GetArgs) -> Result<Report, GetError> {
    let to_stdout = args.output.as_deref() == Some(Path::new("-"));
    let output = match args.output {
        Some(p) => p,
        None => circus_client::default_output(&args.url, args.force)?,
    };
    let mut opts = GetOptions::new(args.url, output);
    opts.mode = if args.plain { Mode::Plain } else { Mode::Auto };
    opts.retries = args.retries;
    // Values are parsed here rather than by clap so that a bad one is a
    // usage error with exit code 1, as documented, not clap's 2 (which
    // `circus get` uses for network failures).
    let usage = |flag: &str, e: &dyn std::fmt::Display| GetError::Usage(format!("--{flag}: {e}"));
    opts.limit_rate = match args.limit_rate.as_deref().map(ByteSize::parse).transpose() {
        Ok(rate) => rate.map(|r| r.0),
        Err(e) => return Err(usage("limit-rate", &e)),
    };
    opts.timeout = humantime::parse_duration(&args.timeout).map_err(|e| usage("timeout", &e))?;
    opts.expect_digest =
        args.expect_digest.as_deref().map(Sha256Digest::parse).transpose().map_err(|e| usage("expect-digest", &e))?;
    opts.verify_digest = !args.no_verify_digest;
    opts.ca_file = args.cacert;
    for h in &args.headers {
        let (name, value) = h.split_once(':').ok_or_else(|| usage("header", &"write it as \"Name: value\""))?;
        let name = http::HeaderName::from_bytes(name.trim().as_bytes()).map_err(|e| usage("header", &e))?;
        let value = http::HeaderValue::from_str(value.trim()).map_err(|e| usage("header", &e))?;
        opts.headers.push((name, value));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|source| GetError::Local { action: "start the runtime for", path: opts.output.clone(), source })?;
    let progress = BarProgress::new(args.quiet);
    runtime.block_on(async {
        if to_stdout {
            let client = circus_client::https_client(opts.timeout, opts.ca_file.as_deref())?;
            circus_client::download_to_writer(&client, &opts, &progress, std::io::stdout()).await
        } else {
            // Ctrl-C saves the progress (the part file is synced and the
            // state written) before the process exits with 130.
            let client = circus_client::https_client(opts.timeout, opts.ca_file.as_deref())?;
            let ctrl_c = async {
                if tokio::signal::ctrl_c().await.is_err() {
                    std::future::pending::<()>().await;
                }
            };
            circus_client::download_until(&client, &opts, &progress, ctrl_c).await
        }
    })
}

fn summary(r: &Report) -> String {
    let secs = r.elapsed.as_secs_f64().max(1e-3);
    let fresh = r.bytes.saturating_sub(r.resumed_bytes);
    let how = match r.protocol {
        Protocol::Native => "native",
        Protocol::Plain => "plain HTTP",
    };
    let place = if r.path == Path::new("-") { "stdout".to_owned() } else { r.path.display().to_string() };
    let verb = if r.path == Path::new("-") { "wrote to" } else { "saved" };
    let mut s =
        format!("{verb} {place} ({} bytes) in {secs:.1} s, {:.1} MB/s, {how}", r.bytes, fresh as f64 / secs / 1e6);
    if r.resumed_bytes > 0 {
        s.push_str(&format!(", resumed after {} bytes", r.resumed_bytes));
    }
    if r.reconnects > 0 {
        s.push_str(&format!(", {} reconnects", r.reconnects));
    }
    if r.blocks_corrupt > 0 {
        s.push_str(&format!(", {} corrupt blocks fetched again", r.blocks_corrupt));
    }
    if r.sha256.is_some() {
        s.push_str(", SHA-256 verified");
    }
    s
}
