//! [`GetError`] as the Python exceptions of `circus_client._errors`: one
//! class per kind, each carrying `exit_code` (as `circus get` would exit),
//! `retry_may_help` and `hint`; HTTP errors also carry `status`.

use circus_client::GetError;
use pyo3::{exceptions::PyRuntimeError, prelude::*};

/// The Python exception for `e`.
pub fn to_py(py: Python<'_>, e: &GetError) -> PyErr {
    match build(py, e) {
        Ok(err) => err,
        // The package's own Python half is missing or broken.
        Err(broken) => PyRuntimeError::new_err(format!("{e} (and circus_client._errors failed: {broken})")),
    }
}

fn build(py: Python<'_>, e: &GetError) -> PyResult<PyErr> {
    let class = match e {
        GetError::Usage(_) => "UsageError",
        GetError::Local { .. } => "LocalError",
        GetError::Network { .. } => "NetworkError",
        GetError::Integrity { .. } => "IntegrityError",
        GetError::InvalidManifest { .. } => "ProtocolError",
        GetError::Status { .. } => "HTTPStatusError",
        GetError::Cancelled => "CancelledError",
    };
    let exc = py.import("circus_client._errors")?.getattr(class)?.call1((e.to_string(),))?;
    exc.setattr("exit_code", e.exit_code())?;
    exc.setattr("retry_may_help", e.retry_may_help())?;
    exc.setattr("hint", e.hint())?;
    if let GetError::Status { status, .. } = e {
        exc.setattr("status", status.as_u16())?;
    }
    Ok(PyErr::from_value(exc))
}
