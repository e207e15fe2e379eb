//! The Python module `circus_client._native`: [`circus_client`]'s download
//! as one blocking Python function.
//!
//! `download(url, path, ...)` runs the same code as `circus get`: native
//! blocks verified as they arrive, plain HTTP from other servers, resume
//! from `PATH.circus-part`, the whole file checked before it is renamed into
//! place. It releases the GIL while the download runs on a runtime of its
//! own, and wakes every `run::POLL` on the calling thread to report
//! progress and to take Ctrl-C: a `KeyboardInterrupt`, or an exception from
//! the progress callback, cancels the download, saves what arrived and is
//! raised to the caller. Errors are the exceptions of
//! `circus_client._errors` (crates/py/python), one per [`GetError`] kind.
//!
//! [`GetError`]: circus_client::GetError

mod errors;
mod options;
mod report;
mod run;

use pyo3::prelude::*;

#[pymodule]
#[pyo3(name = "_native")]
fn native_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(run::download, m)?)?;
    m.add_class::<report::Report>()?;
    Ok(())
}
