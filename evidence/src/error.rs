//! The one error type of the store.

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
    Corrupt {
        tree: &'static str,
        key: String,
        source: serde_json::Error,
    },
    /// A value that could not be encoded for storage (should not happen for the crate's own types).
    #[error("cannot encode {what} for {tree}: {source}")]
    Encode {
        tree: &'static str,
        what: String,
        source: serde_json::Error,
    },
    #[error("unknown task {0}")]
    UnknownTask(String),
}
