//! The keyword arguments of `download` as [`GetOptions`]; a value that can
//! never work is a `UsageError` before anything is fetched.

use circus_client::{GetError, GetOptions, Mode, Sha256Digest};
use std::{collections::HashMap, path::PathBuf, time::Duration};

/// `download`'s arguments, as Python passed them.
#[derive(Debug)]
pub struct Args {
    pub url: String,
    pub path: PathBuf,
    pub plain: bool,
    pub retries: u32,
    pub timeout: f64,
    pub limit_rate: Option<u64>,
    pub sha256: Option<String>,
    pub verify: bool,
    pub ca_file: Option<PathBuf>,
    pub headers: HashMap<String, String>,
}

impl Args {
    pub fn into_options(self) -> Result<GetOptions, GetError> {
        let usage = |what: &str, e: &dyn std::fmt::Display| GetError::Usage(format!("{what}: {e}"));
        let mut opts = GetOptions::new(self.url, self.path);
        opts.mode = if self.plain { Mode::Plain } else { Mode::Auto };
        opts.retries = self.retries;
        opts.timeout = Duration::try_from_secs_f64(self.timeout)
            .ok()
            .filter(|t| !t.is_zero())
            .ok_or_else(|| usage("timeout", &format!("{} is not a positive number of seconds", self.timeout)))?;
        if self.limit_rate == Some(0) {
            return Err(usage("limit_rate", &"0 bytes per second would never finish; pass None for no limit"));
        }
        opts.limit_rate = self.limit_rate;
        opts.expect_digest =
            self.sha256.as_deref().map(Sha256Digest::parse).transpose().map_err(|e| usage("sha256", &e))?;
        opts.verify_digest = self.verify;
        opts.ca_file = self.ca_file;
        for (name, value) in &self.headers {
            let name = http::HeaderName::from_bytes(name.as_bytes()).map_err(|e| usage("headers", &e))?;
            let value = http::HeaderValue::from_str(value).map_err(|e| usage("headers", &e))?;
            opts.headers.push((name, value));
        }
        Ok(opts)
    }
}
