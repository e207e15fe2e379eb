//! Identifiers. Plain newtypes so a client id can never be passed where a file
//! id is expected.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Index of a block within its file (block `i` covers bytes `[i*B, (i+1)*B)`).
pub type BlockIdx = u32;

/// One download in progress: a connection asking for one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ClientId(pub u64);

/// One version of one file. A changed file (new size or mtime) gets a new id,
/// so cached blocks of the old version can never be mixed with the new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FileId(pub u64);

impl fmt::Display for ClientId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "c{}", self.0)
    }
}

impl fmt::Display for FileId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "f{}", self.0)
    }
}
