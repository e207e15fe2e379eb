//! The one error type of a download, sorted by who is at fault, and the
//! process exit codes that go with it.

use http::StatusCode;
use std::{io, path::PathBuf};

/// The exit codes of `circus get`, as printed by `circus get --help`.
pub const EXIT_CODES: &str = "\
Exit codes:
  0  success: the file is complete, verified and in place
  1  local or usage error (bad URL or flag value, cannot write the output); fix it and run again
  2  network or server failure after the retries; run the same command later, it resumes
  3  integrity failure: the data did not match its digest, or blocks failed verification on every try
  4  the server answered an HTTP error status (4xx/5xx); the message has the status and the server's reason
  5  the server broke the circus protocol (an invalid manifest); retrying does not help, --plain may
130  interrupted (Ctrl-C): what arrived is kept; run the same command again, it resumes";

/// Why a download failed. Each variant says whose fault it is and whether
/// running the same download again may succeed ([`GetError::retry_may_help`]).
#[derive(Debug, thiserror::Error)]
pub enum GetError {
    /// The caller's fault: a URL or option that can never work. Retrying
    /// the same request does not help.
    #[error("{0}")]
    Usage(String),
    /// The local machine's fault: the output or its sidecar files cannot be
    /// created, written, synced or renamed. Retrying helps once the cause
    /// (a missing directory, a full disk, permissions) is fixed.
    #[error("cannot {action} {}: {source}", path.display())]
    Local {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The network or the server failed on every try (connection refused or
    /// cut, timeouts, a malformed stream, a server-side ERROR frame).
    /// Verified progress is kept in the state file; retrying later resumes.
    #[error("download failed after {attempts} {}: {reason}", if *attempts == 1 { "try" } else { "tries" })]
    Network { attempts: u32, reason: String },
    /// The data is wrong: the whole-file digest did not match (the part
    /// file is then discarded), or blocks failed their hash check on every
    /// try (verified blocks are kept). The server, something between, or a
    /// wrong `--expect-digest` is at fault; retrying only helps if the cause
    /// was transient.
    #[error("integrity check failed: {reason}")]
    Integrity { reason: String },
    /// The server sent a manifest that breaks the protocol or its limits (a
    /// block over 64 MiB, a length its fields do not describe, leaves that
    /// do not hash to its root). The server is at fault and sends the same
    /// again, so the download stops at once; retrying does not help, but
    /// `--plain` may.
    #[error("the server sent an invalid manifest: {source}")]
    InvalidManifest {
        #[source]
        source: circus_proto::ProtoError,
    },
    /// The server refused the request with an HTTP error status. `message`
    /// is the first line of its response body. A 4xx is the request's fault
    /// (retrying does not help); a 5xx the server's (retrying later may).
    #[error("the server answered {status}{}", if message.is_empty() { String::new() } else { format!(": {message}") })]
    Status { status: StatusCode, message: String },
    /// The caller cancelled the download ([`crate::download_until`]: Ctrl-C,
    /// an exception in a Python progress callback). What was verified is
    /// kept for the next run.
    #[error("the download was interrupted")]
    Cancelled,
}

impl GetError {
    pub(crate) fn local(action: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        GetError::Local { action, path: path.into(), source }
    }

    /// The process exit code for this error (see [`EXIT_CODES`]).
    pub fn exit_code(&self) -> i32 {
        match self {
            GetError::Usage(_) | GetError::Local { .. } => 1,
            GetError::Network { .. } => 2,
            GetError::Integrity { .. } => 3,
            GetError::Status { .. } => 4,
            GetError::InvalidManifest { .. } => 5,
            GetError::Cancelled => 130,
        }
    }

    /// Whether running the same download again, unchanged, may succeed.
    pub fn retry_may_help(&self) -> bool {
        match self {
            GetError::Usage(_) | GetError::InvalidManifest { .. } => false,
            GetError::Local { .. } | GetError::Network { .. } | GetError::Integrity { .. } | GetError::Cancelled => {
                true
            }
            GetError::Status { status, .. } => status.is_server_error() || *status == StatusCode::TOO_MANY_REQUESTS,
        }
    }

    /// What a person can do about it, for the one line the binary prints.
    pub fn hint(&self) -> &'static str {
        match self {
            GetError::Usage(_) => "check the URL and the options",
            GetError::Local { .. } => {
                "check that the directory exists, is writable and has room, then run the same command again"
            }
            GetError::Network { .. } => "run the same command again later: it resumes where it stopped",
            GetError::Integrity { .. } => {
                "check the expected digest; if it is right, the server or the network corrupts data: tell the server's operator"
            }
            GetError::InvalidManifest { .. } => {
                "the server is not speaking the circus protocol correctly: tell its operator, or download in plain mode"
            }
            GetError::Status { status, .. } if *status == StatusCode::NOT_FOUND => "check the URL",
            GetError::Status { status, .. } if status.is_server_error() => "the server failed; try again later",
            GetError::Status { .. } => "check the URL, or ask the server's operator",
            GetError::Cancelled => "run the same command again: it resumes where it stopped",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_match_the_help_text() {
        let cases = [
            (GetError::Usage("bad".into()), 1),
            (GetError::local("write", "/x", io::Error::other("full")), 1),
            (GetError::Network { attempts: 6, reason: "refused".into() }, 2),
            (GetError::Integrity { reason: "digest".into() }, 3),
            (GetError::Status { status: StatusCode::NOT_FOUND, message: "not found".into() }, 4),
            (
                GetError::InvalidManifest {
                    source: circus_proto::ProtoError::BadManifest { reason: "block size 0".into() },
                },
                5,
            ),
            (GetError::Cancelled, 130),
        ];
        for (e, code) in cases {
            assert_eq!(e.exit_code(), code, "{e}");
            assert!(EXIT_CODES.contains(&format!("{code:>3}  ")), "{code} undocumented");
        }
    }

    #[test]
    fn status_message_names_status_and_reason() {
        let e = GetError::Status { status: StatusCode::NOT_FOUND, message: "not found".into() };
        assert_eq!(e.to_string(), "the server answered 404 Not Found: not found");
        assert!(!e.retry_may_help());
        let e = GetError::Status { status: StatusCode::SERVICE_UNAVAILABLE, message: String::new() };
        assert_eq!(e.to_string(), "the server answered 503 Service Unavailable");
        assert!(e.retry_may_help());
    }
}
