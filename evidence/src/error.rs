//! The store's error types: [`StoreError`] for the database, [`EvidenceError`] for evidence (which
//! also touches blob files).

use std::path::PathBuf;

/// A database operation that failed: each variant says what the database was doing and, where it helps,
/// which tree and key.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database could not be opened, e.g. another process holds its lock.
    #[error("database at {path}: {source}")]
    Open {
        /// The database directory (`<home>/db`).
        path: PathBuf,
        /// sled's error.
        source: sled::Error,
    },
    /// Any other sled error on a read or a write. An IO error here (a full disk) also marks the store
    /// unhealthy, so later writes get [`StoreError::Unavailable`] until it heals.
    #[error("database: {0}")]
    Db(#[from] sled::Error),
    /// A stored value that does not decode.
    #[error("corrupt record {key} in {tree}: {source}")]
    Corrupt {
        /// The tree the value was read from (`tasks`, `log`, `settings`, …).
        tree: &'static str,
        /// The value's key, as text.
        key: String,
        /// Why it does not decode.
        source: serde_json::Error,
    },
    /// A value that could not be encoded for storage (should not happen for the crate's own types).
    #[error("cannot encode {what} for {tree}: {source}")]
    Encode {
        /// The tree the value was for.
        tree: &'static str,
        /// What the value was, as text (its key).
        what: String,
        /// Why it does not encode.
        source: serde_json::Error,
    },
    /// The store is unhealthy: a write failed with an IO error (e.g. the disk is full) and the
    /// database could not be reopened yet. Nothing was written.
    #[error(
        "storage at {path} is unavailable since a write failed: {source}{}",
        attempt.as_ref().map(|a| format!("; reopening failed: {a}")).unwrap_or_default()
    )]
    Unavailable {
        /// The database directory.
        path: PathBuf,
        /// Why the last attempt to reopen the database failed, when one was made.
        attempt: Option<String>,
        /// The write failure that made the store unhealthy.
        source: sled::Error,
    },
    /// No task with this id is recorded.
    #[error("unknown task {0}")]
    UnknownTask(String),
    /// No memory note with this id is recorded.
    #[error("unknown memory note {0:?}; `agentd memory list` shows the notes")]
    UnknownNote(String),
    /// A change to a note that its state refuses (an edit of a deleted note, an empty text …).
    #[error("{0}")]
    NoteChange(#[from] agentd_policies::memory::ChangeError),
}

/// An evidence operation that failed. Nothing here is a silent drop: every variant names the
/// evidence or file concerned.
#[derive(Debug, thiserror::Error)]
pub enum EvidenceError {
    /// No evidence with this id is recorded.
    #[error("unknown evidence {0}")]
    UnknownEvidence(String),
    /// No checkpoint object with this name is stored.
    #[error("unknown checkpoint object {0}")]
    UnknownObject(String),
    /// The blob's bytes no longer hash to the recorded sha256: no data is served from it.
    #[error("evidence {id} is altered on disk: sha256 {actual}, recorded {expected}")]
    Integrity {
        /// The evidence id.
        id: String,
        /// The recorded sha256.
        expected: String,
        /// The sha256 the blob's bytes hash to now.
        actual: String,
    },
    /// The blob file of recorded evidence is gone.
    #[error("evidence {id}: its blob {path} is missing")]
    Missing {
        /// The evidence id.
        id: String,
        /// Where its blob should be.
        path: PathBuf,
    },
    /// Reading or writing a blob file (or its directory) failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory concerned.
        path: PathBuf,
        /// The IO error.
        source: std::io::Error,
    },
    /// The database failed (see [`StoreError`]).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Neither the store nor the fallback file could take the evidence.
    #[error("evidence {id} could not be stored ({store}) nor written to {path}: {source}")]
    NotStored {
        /// The evidence's id, assigned before storing was tried.
        id: String,
        /// Why the store refused it.
        store: Box<EvidenceError>,
        /// The fallback file (or its directory) that could not be written.
        path: PathBuf,
        /// Why the fallback file could not be written.
        source: std::io::Error,
    },
}
