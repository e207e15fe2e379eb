//! What a finished download did, as a read-only Python object.

use circus_client::Protocol;
use pyo3::prelude::*;
use std::path::PathBuf;

/// What a finished download did: its size, what was resumed, received and
/// retried, and the SHA-256 checked (hex), if any.
#[pyclass(frozen, get_all, module = "circus_client")]
#[derive(Debug)]
pub struct Report {
    /// The file, complete and verified.
    path: PathBuf,
    /// "native" (circus blocks, each verified) or "plain" (HTTP).
    protocol: &'static str,
    /// The file's size.
    bytes: u64,
    /// Bytes already in place from an earlier run.
    resumed_bytes: u64,
    /// Response body bytes received over every connection.
    received_bytes: u64,
    blocks_received: u32,
    blocks_corrupt: u32,
    blocks_duplicate: u32,
    /// Connections made after the first.
    reconnects: u32,
    /// Times the progress was discarded because the file changed.
    restarts: u32,
    /// The SHA-256 the whole file was checked against, in hex.
    sha256: Option<String>,
    /// Seconds from start to the file in place.
    elapsed: f64,
}

impl From<circus_client::Report> for Report {
    fn from(r: circus_client::Report) -> Self {
        Self {
            path: r.path,
            protocol: match r.protocol {
                Protocol::Native => "native",
                Protocol::Plain => "plain",
            },
            bytes: r.bytes,
            resumed_bytes: r.resumed_bytes,
            received_bytes: r.received_bytes,
            blocks_received: r.blocks_received,
            blocks_corrupt: r.blocks_corrupt,
            blocks_duplicate: r.blocks_duplicate,
            reconnects: r.reconnects,
            restarts: r.restarts,
            sha256: r.sha256.map(|d| d.hex()),
            elapsed: r.elapsed.as_secs_f64(),
        }
    }
}

#[pymethods]
impl Report {
    fn __repr__(&self) -> String {
        format!(
            "Report(path={:?}, protocol={:?}, bytes={}, resumed_bytes={}, reconnects={}, sha256={:?}, elapsed={:.3})",
            self.path, self.protocol, self.bytes, self.resumed_bytes, self.reconnects, self.sha256, self.elapsed
        )
    }
}
