//! What the scheduler is told, and what it asks its driver to do.

use circus_core::{BlockIdx, BlockSet, ClientId, FileId};
use serde::Serialize;

/// Nanoseconds on the driver's clock (simulated or monotonic). The scheduler
/// never reads a clock of its own.
pub type Nanos = u64;

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A client starts downloading `file`, which is `len` bytes long. `have`,
    /// when given, lists the blocks it already holds (resume); it must have
    /// one bit per block of the file. An `in_order` client (a plain HTTP
    /// download) is given its blocks in file order whatever the policy; the
    /// driver still sees them become resident in any order and must reorder
    /// at most `queue_len` of them.
    Join { client: ClientId, file: FileId, len: u64, have: Option<BlockSet>, in_order: bool },
    /// The driver handed `block` to the client's socket: its queue slot is
    /// free again and the block is no longer pinned for it.
    Sent { client: ClientId, block: BlockIdx },
    /// A `Read` finished; the block's bytes are now held by the driver.
    Loaded { file: FileId, block: BlockIdx },
    /// A `Read` failed for good (the driver already retried what it could).
    ReadFailed { file: FileId, block: BlockIdx, fault: ReadFault, detail: String },
    /// The client went away (disconnect, cancel). Its queued blocks unpin.
    Leave { client: ClientId },
    /// The client's socket stopped taking blocks, so the driver took back
    /// the ones it had for it and had not yet handed to the socket
    /// (`returned`). They unpin, the blocks it waits for reads of are given
    /// up too, and it is picked nothing more until `Resume`: a client that
    /// stops reading then pins only what its socket holds. Blocks the
    /// socket took come back as `Sent` as usual.
    Park { client: ClientId, returned: Vec<BlockIdx> },
    /// A parked client's socket wants blocks again.
    Resume { client: ClientId },
    /// Time passed with nothing else to report.
    Tick,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Action {
    /// Read `block` of `file` from storage, then report `Loaded` or `ReadFailed`.
    /// Its bytes are already counted against the budget.
    Read { file: FileId, block: BlockIdx },
    /// Transmit `block` (resident) to `client`, then report `Sent`.
    Send { client: ClientId, file: FileId, block: BlockIdx },
    /// Drop `block` from memory; no send refers to it.
    Evict { file: FileId, block: BlockIdx },
    /// Every block of the client's file has been handed to its socket.
    Complete { client: ClientId },
    /// The client cannot be served; the scheduler has forgotten it.
    Fail { client: ClientId, reason: FailReason },
}

/// Why a read failed, as the clients waiting for it need to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ReadFault {
    /// The file is no longer the version being served (rewritten, replaced,
    /// or a block failed its hash): its clients start over on the new one.
    Changed,
    /// Storage could not produce the bytes (our side; a retry may help).
    Storage,
}

/// Why a client was failed. Says who is at fault, so the driver can map it
/// to a status and tell whether a retry can help.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
pub enum FailReason {
    /// Storage could not produce a block the client was waiting for (our side;
    /// a later retry may succeed).
    #[error("storage read of block {block} failed: {detail}")]
    StorageRead { block: BlockIdx, detail: String },
    /// The file changed under the download (block `block` no longer belongs
    /// to the version it started on); the client starts over on the new one.
    #[error("the file changed while it was being served (at block {block}): {detail}")]
    FileChanged { block: BlockIdx, detail: String },
    /// The client joined a file id already known with another length (the
    /// driver's bug: a changed file must get a new id).
    #[error("file {file} is {known} bytes, client asked for {asked}")]
    LengthMismatch { file: FileId, known: u64, asked: u64 },
    /// The resume set does not match the file's block count (client's fault).
    #[error("resume set has {got} bits, file has {want} blocks")]
    BadResumeSet { got: u32, want: u32 },
    /// The same client id joined twice (the driver's bug).
    #[error("client id already downloading")]
    DuplicateClient,
}
