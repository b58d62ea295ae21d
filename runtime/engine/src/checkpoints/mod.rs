//! Workspace checkpoints in the engine: taken around each writing call, kept behind the storage
//! seam, read back by `task.diff` and `task.revert`.
//!
//! The mechanics (a tree of content-addressed objects, what changed between two, a file put back)
//! are `agentd_agents::checkpoints`; the decisions over the recorded changes (what a diff composes,
//! what a revert puts back) are `agentd_policies::changes`. Here they meet the task:
//!
//! - [`Checkpoints`], one per task run: the snapshotter (which remembers what it hashed) and the
//!   task's byte budget (`[checkpoints] max_bytes`). An agent takes a checkpoint of its workspace
//!   (or its working copy) before a writing call — named on the call's `tool_called` — and after it;
//!   what differs is the call's `files_changed` (`crate::agent`'s `checkpoints` module).
//! - [`StoredObjects`]: the objects, through [`Storage`] (sled and blob files, or the fleet's object
//!   store), so a checkpoint is as durable as the log that names it: objects are synced before the
//!   event that names them is appended.
//! - [`diff`], [`revert`] and [`reconcile`] (after a stop, the change of a call that was cut short).

mod diff;
mod error;
mod reconcile;
mod revert;

pub use diff::diff;
pub use error::ChangesError;
pub use reconcile::reconcile;
pub use revert::revert;

use crate::storage::{Storage, StorageError};
use agentd_agents::checkpoints::{self as cp, CheckpointError, Objects, Snapshot, Snapshotter};
use agentd_policies::changes::Step;
use agentd_protocol::checkpoint::Change;
use agentd_protocol::{Event, EventKind};
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
}

impl Checkpoints {
    /// Checkpoints keeping up to `max_bytes` of file bytes; 0: none are taken.
    pub fn new(max_bytes: u64) -> Checkpoints {
        Checkpoints { snapshotter: Mutex::new(Snapshotter::new()), max_bytes }
    }

    /// Whether checkpoints are taken.
    pub fn enabled(&self) -> bool {
        self.max_bytes > 0
    }

    /// A checkpoint of the tree at `root`, its objects stored and synced. Blocking: file reads and
    /// storage writes (see [`take`] for an async caller).
    pub fn take_blocking(&self, storage: &dyn Storage, root: &Path) -> Result<Snapshot, Failure> {
        self.snapshotter.lock().snapshot(root, &StoredObjects(storage), self.max_bytes)
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
        let (added, removed, _) = cp::lines_changed(&objects, delta)?;
        lines_added += added;
        lines_removed += removed;
    }
    Ok(Change { before: before.to_string(), after: after.to_string(), files, lines_added, lines_removed })
}

/// The recorded change an event is, if it is one: a call's (or a merge's) `files_changed`, or a
/// `reverted` (known by its own seq).
pub fn step_of(event: &Event) -> Option<Step> {
    match &event.kind {
        EventKind::FilesChanged { call_seq, change, working_copy, .. } => Some(Step {
            call_seq: *call_seq,
            role: event.role.clone(),
            files: change.files.clone(),
            in_copy: working_copy.is_some(),
        }),
        EventKind::Reverted { change, .. } => Some(Step {
            call_seq: event.seq,
            role: event.role.clone(),
            files: change.files.clone(),
            in_copy: false,
        }),
        _ => None,
    }
}

/// Every event of a task, a page at a time.
pub(crate) fn all_events(storage: &dyn Storage, task_id: &str) -> Result<Vec<Event>, StorageError> {
    const PAGE: usize = 10_000;
    let mut events: Vec<Event> = Vec::new();
    loop {
        let after = events.last().map_or(0, |e| e.seq);
        let page = storage.events(task_id, after, PAGE)?;
        let full = page.len() == PAGE;
        events.extend(page);
        if !full {
            return Ok(events);
        }
    }
}
