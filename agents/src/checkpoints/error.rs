//! Why a checkpoint, a comparison or a restore failed ([`CheckpointError`]).

use crate::copies::CopyError;
use crate::error::WorkspaceRefusal;

/// Why a checkpoint could not be taken, compared or restored; `E` is the object store's error.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError<E: std::error::Error + Send + Sync + 'static> {
    /// Reading the workspace failed (a directory or file that could not be opened or read).
    #[error(transparent)]
    Walk(#[from] CopyError),
    /// The object store failed.
    #[error("the checkpoint store: {0}")]
    Store(#[source] E),
    /// An object does not read as what it should be (a listing that does not parse, bytes that do
    /// not hash to their name).
    #[error("checkpoint object {id} is corrupt: {why}")]
    Corrupt {
        /// The object.
        id: String,
        /// What is wrong.
        why: String,
    },
    /// A file's bytes were not kept (`[checkpoints] max_bytes` was reached when it was recorded, or
    /// it held a configured secret).
    #[error(
        "{path}: its bytes were not kept (past [checkpoints] max_bytes, or it held a configured secret)"
    )]
    NotKept {
        /// The file.
        path: String,
    },
    /// A special file (a FIFO, a socket, a device): a checkpoint names it, never holds it, so it
    /// cannot be put back.
    #[error("{path}: it was {what}; a checkpoint records its name, not the thing itself")]
    Special {
        /// The file.
        path: String,
        /// What it was, in words (`a FIFO`).
        what: &'static str,
    },
    /// The workspace refused a read or a write of a restore.
    #[error(transparent)]
    Workspace(#[from] WorkspaceRefusal),
}
