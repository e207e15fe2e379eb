use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("cannot write index {path}: {source}")]
    WriteIndex { path: PathBuf, source: std::io::Error },
    #[error("{path} changed while it was being read; try again")]
    Changed { path: PathBuf },
    #[error("{path} is not a regular file")]
    NotAFile { path: PathBuf },
}

impl StoreError {
    /// A retry may succeed (the file changed under us, or a transient I/O error).
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Changed { .. })
    }
}
