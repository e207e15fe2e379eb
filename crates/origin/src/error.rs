//! Why an origin's settings cannot work, found before any request is made.

use std::path::PathBuf;

/// An origin that cannot be set up as given.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("--origin-ca {}: {why}", path.display())]
    CaFile { path: PathBuf, why: String },
    #[error("no system CA certificates found for an https origin: give --origin-ca")]
    NoSystemRoots,
    #[error("TLS: {0}")]
    Tls(String),
    #[error("S3 origin s3://{bucket}: {why}")]
    S3 { bucket: String, why: String },
    #[error("--peer-self {0} is not one of --peers")]
    NotAMember(String),
    #[error("--peer-group ({group} bytes) must be a whole number of origin blocks ({block} bytes)")]
    PeerGroup { group: u64, block: u32 },
}
