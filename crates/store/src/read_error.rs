//! Why a block (or a version's index) could not be produced, typed by who
//! is at fault so that callers choose the client's status or error code by
//! kind, never by the text.

use crate::StoreError;
use circus_core::Fault;

/// A failed read of a version's block or index.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{why}")]
pub struct ReadError {
    fault: Fault,
    why: String,
}

impl ReadError {
    /// The bytes no longer belong to the version being served.
    pub fn changed(why: impl Into<String>) -> Self {
        ReadError { fault: Fault::Changed, why: why.into() }
    }

    /// Local storage failed.
    pub fn storage(why: impl Into<String>) -> Self {
        ReadError { fault: Fault::Storage, why: why.into() }
    }

    /// The origin failed or answered wrongly.
    pub fn origin(why: impl Into<String>) -> Self {
        ReadError { fault: Fault::Origin, why: why.into() }
    }

    /// A failure inside the server (a task that died, a bad encoding).
    pub fn internal(why: impl Into<String>) -> Self {
        ReadError { fault: Fault::Internal, why: why.into() }
    }

    pub fn fault(&self) -> Fault {
        self.fault
    }

    /// The version changed (its clients start over on the new one).
    pub fn is_changed(&self) -> bool {
        self.fault == Fault::Changed
    }
}

impl From<StoreError> for ReadError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Changed { .. } => ReadError::changed(e.to_string()),
            e => ReadError::storage(e.to_string()),
        }
    }
}
