//! `circus sign URL`: a signed URL for a path under a `[[private]]` prefix
//! (see the server's `private` module for the format).

use anyhow::Context;
use circus_core::Span;
use clap::Args;
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Debug, Args)]
pub struct SignArgs {
    /// The URL (or just its path) to sign.
    url: String,
    /// The signing key: env:NAME, file:PATH, or the key itself (which then
    /// shows in ps: prefer env: or file:).
    #[arg(long, default_value = "env:CIRCUS_URL_KEY")]
    key: String,
    /// How long the URL stays valid.
    #[arg(long, default_value = "1h")]
    expires_in: Span,
}

pub fn main(args: SignArgs) -> anyhow::Result<()> {
    let key = circus_server::private::secret(&args.key).with_context(|| format!("--key {}", args.key))?;
    let uri: http::Uri = args.url.parse().with_context(|| format!("{} is not a URL or a path", args.url))?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).context("the clock is before 1970")?;
    let expires = (now + args.expires_in.0).as_secs();
    let signature = circus_server::private::sign(&key, uri.path(), expires)
        .with_context(|| format!("{}: the path cannot be decoded or has ..", uri.path()))?;
    let glue = if uri.query().is_some() { '&' } else { '?' };
    println!("{}{glue}expires={expires}&signature={signature}", args.url);
    Ok(())
}
