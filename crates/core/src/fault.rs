//! Who a failure is down to, carried by type from the read that failed to
//! the status or error code a client sees.

use std::fmt;

/// Who is at fault for a failure, which decides what a client is told and
/// whether trying again may help.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// The request itself is wrong: the same request fails again.
    Client,
    /// The content changed while it was being served: a client that starts
    /// over gets the new version.
    Changed,
    /// Local storage could not produce the bytes.
    Storage,
    /// The origin failed, answered wrongly or could not be reached.
    Origin,
    /// The server is at one of its limits for now.
    Busy,
    /// A failure inside the server that no retry is known to cure.
    Internal,
}

impl Fault {
    /// Whether the same request, sent again later, may succeed.
    pub fn retryable(self) -> bool {
        matches!(self, Fault::Changed | Fault::Storage | Fault::Origin | Fault::Busy)
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Fault::Client => "client",
            Fault::Changed => "changed",
            Fault::Storage => "storage",
            Fault::Origin => "origin",
            Fault::Busy => "busy",
            Fault::Internal => "internal",
        })
    }
}
