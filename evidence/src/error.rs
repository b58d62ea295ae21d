//! The store's error types: [`StoreError`] for the database, [`EvidenceError`] for evidence (which
//! also touches blob files).

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database could not be opened, e.g. another process holds its lock.
    #[error("database at {path}: {source}")]
    Open { path: PathBuf, source: sled::Error },
    #[error("database: {0}")]
    Db(#[from] sled::Error),
    /// A stored value that does not decode.
    #[error("corrupt record {key} in {tree}: {source}")]
    Corrupt { tree: &'static str, key: String, source: serde_json::Error },
    /// A value that could not be encoded for storage (should not happen for the crate's own types).
    #[error("cannot encode {what} for {tree}: {source}")]
    Encode { tree: &'static str, what: String, source: serde_json::Error },
    /// The store is unhealthy: a write failed with an IO error (e.g. the disk is full) and the
    /// database could not be reopened yet. Nothing was written.
    #[error(
        "storage at {path} is unavailable since a write failed: {source}{}",
        attempt.as_ref().map(|a| format!("; reopening failed: {a}")).unwrap_or_default()
    )]
    Unavailable { path: PathBuf, attempt: Option<String>, source: sled::Error },
    #[error("unknown task {0}")]
    UnknownTask(String),
}

/// An evidence operation that failed. Nothing here is a silent drop: every variant names the
/// evidence or file concerned.
#[derive(Debug, thiserror::Error)]
pub enum EvidenceError {
    /// No evidence with this id is recorded.
    #[error("unknown evidence {0}")]
    UnknownEvidence(String),
    /// The blob's bytes no longer hash to the recorded sha256: no data is served from it.
    #[error("evidence {id} is altered on disk: sha256 {actual}, recorded {expected}")]
    Integrity { id: String, expected: String, actual: String },
    /// The blob file of recorded evidence is gone.
    #[error("evidence {id}: its blob {path} is missing")]
    Missing { id: String, path: PathBuf },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Neither the store nor the fallback file could take the evidence.
    #[error("evidence {id} could not be stored ({store}) nor written to {path}: {source}")]
    NotStored {
        id: String,
        /// Why the store refused it.
        store: Box<EvidenceError>,
        /// The fallback file (or its directory) that could not be written.
        path: PathBuf,
        source: std::io::Error,
    },
}
