//! The checkpoints of a task run and the objects they are made of, kept through the storage seam.

use crate::storage::{Storage, StorageError};
use agentd_agents::checkpoints::{self as cp, CheckpointError, Objects, Snapshot, Snapshotter};
use agentd_policies::redact::Redactor;
use agentd_protocol::checkpoint::Change;
use parking_lot::Mutex;
use std::path::Path;
use std::sync::Arc;

/// `[checkpoints] max_bytes` when the config says nothing: the file bytes one task's checkpoints keep.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;

/// A checkpoint failure, with the storage's error where it was the store's.
pub type Failure = CheckpointError<StorageError>;

/// The objects of checkpoints, kept through the storage seam.
pub struct StoredObjects<'a>(pub &'a dyn Storage);

impl Objects for StoredObjects<'_> {
    type Error = StorageError;

    fn has(&self, id: &str) -> Result<bool, StorageError> {
        self.0.has_object(id)
    }

    fn put(&self, id: &str, bytes: &[u8]) -> Result<(), StorageError> {
        self.0.put_object(id, bytes)
    }

    fn get(&self, id: &str) -> Result<Vec<u8>, StorageError> {
        self.0.object(id)
    }

    fn sync(&self) -> Result<(), StorageError> {
        self.0.sync_objects()
    }
}

/// A task run's checkpoints: what its snapshotter knows, and its byte budget.
pub struct Checkpoints {
    snapshotter: Mutex<Snapshotter>,
    max_bytes: u64,
    /// The secrets: a file holding one is recorded by its sha256 alone, never copied into the store.
    secrets: Redactor,
}

impl Checkpoints {
    /// Checkpoints keeping up to `max_bytes` of file bytes (0: none are taken), and never the bytes of
    /// a file holding one of `secrets`.
    pub fn new(max_bytes: u64, secrets: Redactor) -> Checkpoints {
        Checkpoints { snapshotter: Mutex::new(Snapshotter::new()), max_bytes, secrets }
    }

    /// Whether checkpoints are taken.
    pub fn enabled(&self) -> bool {
        self.max_bytes > 0
    }

    /// A checkpoint of the tree at `root`, its objects stored and synced. Blocking: file reads and
    /// storage writes (see [`take`] for an async caller).
    pub fn take_blocking(&self, storage: &dyn Storage, root: &Path) -> Result<Snapshot, Failure> {
        let withheld = |bytes: &[u8]| self.secrets.held_in(bytes).is_some();
        self.snapshotter.lock().snapshot(root, &StoredObjects(storage), self.max_bytes, &withheld)
    }
}

/// [`Checkpoints::take_blocking`] off the async workers.
pub async fn take(
    checkpoints: Arc<Checkpoints>,
    storage: Arc<dyn Storage>,
    root: std::path::PathBuf,
) -> Result<Snapshot, Failure> {
    let joined =
        tokio::task::spawn_blocking(move || checkpoints.take_blocking(storage.as_ref(), &root)).await;
    match joined {
        Ok(taken) => taken,
        Err(e) => Err(CheckpointError::Walk(agentd_agents::copies::CopyError::Io {
            op: "take a checkpoint of",
            path: Default::default(),
            source: std::io::Error::other(e.to_string()),
        })),
    }
}

/// What differs between checkpoints `before` and `after`, with the lines added and removed.
pub fn change(storage: &dyn Storage, before: &str, after: &str) -> Result<Change, Failure> {
    let objects = StoredObjects(storage);
    let files = cp::compare(&objects, Some(before), after)?;
    let (mut lines_added, mut lines_removed) = (0, 0);
    for delta in &files {
        let lines = cp::lines_changed(&objects, delta)?;
        lines_added += lines.added;
        lines_removed += lines.removed;
    }
    Ok(Change { before: before.to_string(), after: after.to_string(), files, lines_added, lines_removed })
}
