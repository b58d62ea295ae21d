//! The storage seam: everything the engine keeps, through one narrow trait.
//!
//! A team's turn writes its messages, receipts, settings snapshots and checkpoints to the task's
//! append-only log, emits events (persisted, then published), keeps windows, calibrations and
//! gauges, stores large results and archives as evidence and reads them back by page, keeps the
//! objects of workspace checkpoints, and records how the task ended. [`Storage`] is all of that and nothing more: the engine never sees the
//! database behind it.
//!
//! Implementations: the daemon's over sled (`agentd_daemon::storage`), the in-memory one of the
//! engine's tests ([`crate::memory`]). A replicated log (the fleet's) is one more implementation of
//! this trait, in a module of its own; nothing in the engine changes for it.
//!
//! The contract every implementation keeps:
//!
//! - **Durable before acknowledged.** A call that returns `Ok` has made its write durable (sled:
//!   flushed; a replicated log: acknowledged by the quorum). The engine publishes, answers or moves
//!   on only after that.
//! - **Numbered without gaps.** Records and events of a task are numbered from 1 in the order they
//!   were appended; [`Storage::emit`] publishes an event to live subscribers only once it is stored.
//! - **Never lost silently.** An end the storage cannot take ([`Storage::keep_end`]) is kept and
//!   written once the storage can take it again.
//!
//! The calls are synchronous: the engine calls them from its tasks, and an implementation over a
//! network log blocks in place on its acknowledgement.

use agentd_policies::settings::{Setting, SettingKey};
use agentd_protocol::memory::{Author, MemoryChange, NewNote, Note, NoteEdit, NoteFilter};
use agentd_protocol::{
    Event, EventKind, EvidenceMeta, Message, NewEvidence, Page, Record, Role, Stored, TaskMeta, TaskState,
    Unit, Window,
};
use serde_json::Value;
use std::error::Error;
use std::path::Path;

/// A backend's own error, kept as the source of a [`StorageError`].
pub type Cause = Box<dyn Error + Send + Sync + 'static>;

/// A storage call that failed, by what kind of failure it is — what its callers answer differently
/// (the socket's error codes, a fleet writer that lost its task) — with the backend's own error kept
/// as its source where there is one. Each backend sets the kind; nobody downcasts.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// No task with this id is recorded.
    #[error("unknown task {0}")]
    UnknownTask(String),
    /// No evidence with this id is recorded.
    #[error("unknown evidence {0}")]
    UnknownEvidence(String),
    /// No checkpoint object with this name is stored.
    #[error("unknown checkpoint object {0}")]
    UnknownObject(String),
    /// No memory note with this id is recorded.
    #[error("unknown memory note {0:?}; `agentd memory list` shows the notes")]
    UnknownNote(String),
    /// A change to a note that the note's state refuses; nothing was written.
    #[error(transparent)]
    RefusedChange(#[from] agentd_policies::memory::ChangeError),
    /// Another writer appended to the task's log since this one last read it: nothing was appended.
    #[error(transparent)]
    Conflict(Cause),
    /// This writer no longer holds the task (another took it under a newer lease, or its own lease
    /// ran out): it writes nothing of it until it takes it anew.
    #[error(transparent)]
    Fenced(Cause),
    /// The store cannot take writes (or answer) now — a full disk, a cluster without a quorum — and
    /// may again later; nothing acknowledged is lost.
    #[error(transparent)]
    Unavailable(Cause),
    /// Anything else: a corrupt record, an encoding or IO error.
    #[error(transparent)]
    Failed(Cause),
}

impl StorageError {
    /// A failure of no other kind, with the backend's error.
    pub fn failed(cause: impl Error + Send + Sync + 'static) -> StorageError {
        StorageError::Failed(Box::new(cause))
    }

    /// The store cannot take writes now ([`StorageError::Unavailable`]).
    pub fn unavailable(cause: impl Error + Send + Sync + 'static) -> StorageError {
        StorageError::Unavailable(Box::new(cause))
    }

    /// Another writer appended first ([`StorageError::Conflict`]).
    pub fn conflict(cause: impl Error + Send + Sync + 'static) -> StorageError {
        StorageError::Conflict(Box::new(cause))
    }

    /// This writer no longer holds the task ([`StorageError::Fenced`]).
    pub fn fenced(cause: impl Error + Send + Sync + 'static) -> StorageError {
        StorageError::Fenced(Box::new(cause))
    }

    /// Whether this writer lost the task it wrote ([`StorageError::Conflict`] or
    /// [`StorageError::Fenced`]): another goes on with it.
    pub fn is_lost(&self) -> bool {
        matches!(self, StorageError::Conflict(_) | StorageError::Fenced(_))
    }
}

/// What the engine keeps, and where it reads it back. See the module documentation for the
/// contract.
pub trait Storage: Send + Sync + 'static {
    /// Appends `record` to the task's log; its number in the log.
    fn append(&self, task_id: &str, record: &Record) -> Result<u64, StorageError>;
    /// Appends an event of `role` (timestamped now, by the daemon's clock) to the task's log, then
    /// publishes it to live subscribers; the event with its number.
    fn emit(&self, task_id: &str, role: &Role, kind: EventKind) -> Result<Event, StorageError>;
    /// The active history of a role: its latest checkpoint and every message after it.
    fn history(&self, task_id: &str, role: &Role) -> Result<Vec<Message>, StorageError>;
    /// Up to `limit` records of the task's log after number `after`, with their numbers.
    fn records(&self, task_id: &str, after: u64, limit: usize) -> Result<Vec<(u64, Record)>, StorageError>;
    /// Up to `limit` events of the task after number `after`.
    fn events(&self, task_id: &str, after: u64, limit: usize) -> Result<Vec<Event>, StorageError>;
    /// The number of the task's last event; 0 when it has none.
    fn last_event_seq(&self, task_id: &str) -> Result<u64, StorageError>;

    /// The task's record, if there is one.
    fn task(&self, task_id: &str) -> Result<Option<TaskMeta>, StorageError>;
    /// Every task recorded, oldest first (ids are UUID v7: their order is their age).
    fn tasks(&self) -> Result<Vec<TaskMeta>, StorageError>;
    /// Changes the task's record (an unknown task is an error).
    fn update_task(&self, task_id: &str, change: &mut dyn FnMut(&mut TaskMeta)) -> Result<(), StorageError>;
    /// Keeps an end the storage could not record (see [`crate::end::record_end`]): it is shown
    /// from memory and written once the storage heals.
    fn keep_end(&self, task_id: &str, end: End);

    /// The stored JSON of a setting, if there is one under `key`. Read settings through
    /// [`Settings::get`], which gives the setting's own type.
    fn setting(&self, key: &SettingKey) -> Result<Option<Value>, StorageError>;
    /// Stores a setting's JSON, durably before it returns. Write through [`Settings::put`].
    fn set_setting(&self, key: &SettingKey, value: &Value) -> Result<(), StorageError>;
    /// Stores a value that is only a cache (a calibration, a gauge): losing the last one in a
    /// crash costs a recount, so it need not be flushed at once. Write through [`Settings::cache`].
    fn cache_setting(&self, key: &SettingKey, value: &Value) -> Result<(), StorageError>;
    /// The window learned for a server's model, if one is.
    fn window(&self, server: &str, model: &str) -> Result<Option<Window>, StorageError>;
    /// Keeps the window of a server's model.
    fn set_window(&self, server: &str, model: &str, window: Window) -> Result<(), StorageError>;

    /// Stores evidence whole; when the storage cannot take it, the bytes go whole to a file in
    /// `fallback_dir` (the workspace's evidence folder) and [`Stored::Fallback`] names it.
    fn put_evidence(&self, new: NewEvidence<'_>, fallback_dir: &Path) -> Result<Stored, StorageError>;
    /// The record of one piece of evidence.
    fn evidence(&self, id: &str) -> Result<EvidenceMeta, StorageError>;
    /// One page of evidence: `limit` lines (or bytes) from `offset`.
    fn read_evidence(&self, id: &str, offset: u64, limit: u64, unit: Unit) -> Result<Page, StorageError>;

    /// Whether checkpoint object `id` (a sha256, see `agentd_agents::checkpoints`) is stored.
    fn has_object(&self, id: &str) -> Result<bool, StorageError>;
    /// Stores `bytes` as checkpoint object `id`, their sha256. It is durable once
    /// [`Storage::sync_objects`] returns (a checkpoint stores many, then syncs once).
    fn put_object(&self, id: &str, bytes: &[u8]) -> Result<(), StorageError>;
    /// The bytes of checkpoint object `id`, checked against it.
    fn object(&self, id: &str) -> Result<Vec<u8>, StorageError>;
    /// Makes every checkpoint object put so far durable.
    fn sync_objects(&self) -> Result<(), StorageError>;

    /// Saves a memory note with its `saved` change, durably; the note gets its id.
    fn save_note(&self, note: NewNote) -> Result<Note, StorageError>;
    /// The memory notes `filter` shows, in the order they were saved.
    fn notes(&self, filter: &NoteFilter) -> Result<Vec<Note>, StorageError>;
    /// One memory note, deleted or not; an error naming it when there is none.
    fn note(&self, id: &str) -> Result<Note, StorageError>;
    /// Applies `edit` to note `id` as `by` at `at` (decided by `agentd_policies::memory::apply`),
    /// recording the change durably: the note as it becomes and the change.
    fn change_note(
        &self,
        id: &str,
        edit: &NoteEdit,
        by: Author,
        at: &str,
    ) -> Result<(Note, MemoryChange), StorageError>;
    /// The changes of note `id` (of every note for `None`), oldest first.
    fn note_changes(&self, id: Option<&str>) -> Result<Vec<MemoryChange>, StorageError>;
}

/// The settings of a [`Storage`], each read and written as its own type ([`Setting::Value`]).
pub trait Settings {
    /// The value of `setting`, if one is stored. A stored value that no longer reads as the
    /// setting's type (written by another version) is left in place, logged and taken as unset.
    fn get<S: Setting>(&self, setting: &S) -> Result<Option<S::Value>, StorageError>;
    /// Stores `value` for `setting`, durably before it returns.
    fn put<S: Setting>(&self, setting: &S, value: &S::Value) -> Result<(), StorageError>;
    /// Stores `value` for `setting` as a cache (see [`Storage::cache_setting`]).
    fn cache<S: Setting>(&self, setting: &S, value: &S::Value) -> Result<(), StorageError>;
}

impl<T: Storage + ?Sized> Settings for T {
    fn get<S: Setting>(&self, setting: &S) -> Result<Option<S::Value>, StorageError> {
        let key = setting.key();
        let Some(stored) = self.setting(&key)? else { return Ok(None) };
        match serde_json::from_value(stored) {
            Ok(value) => Ok(Some(value)),
            Err(e) => {
                tracing::warn!(setting = %key, error = %e, "a stored setting does not read as its type; taken as unset");
                Ok(None)
            }
        }
    }

    fn put<S: Setting>(&self, setting: &S, value: &S::Value) -> Result<(), StorageError> {
        self.set_setting(&setting.key(), &encode(value)?)
    }

    fn cache<S: Setting>(&self, setting: &S, value: &S::Value) -> Result<(), StorageError> {
        self.cache_setting(&setting.key(), &encode(value)?)
    }
}

fn encode(value: &impl serde::Serialize) -> Result<Value, StorageError> {
    serde_json::to_value(value).map_err(StorageError::failed)
}

/// How many records [`each_record`] reads at a time.
const RECORDS_PAGE: usize = 10_000;

/// Hands every record of `task_id`'s log to `f` with its number, in order, reading a page at a time.
pub fn each_record(
    storage: &dyn Storage,
    task_id: &str,
    mut f: impl FnMut(u64, Record),
) -> Result<(), StorageError> {
    let mut after = 0;
    loop {
        let page = storage.records(task_id, after, RECORDS_PAGE)?;
        let Some((last, _)) = page.last() else { return Ok(()) };
        after = *last;
        for (seq, record) in page {
            f(seq, record);
        }
    }
}

/// Lines as the evidence store counts them: `\n`-terminated, a trailing partial line counting as one.
pub fn lines_of(data: &[u8]) -> Vec<&[u8]> {
    data.split_inclusive(|b| *b == b'\n').collect()
}

/// One page of evidence whose bytes are at hand whole (an implementation that keeps them so), cut
/// as the disk store cuts it: `limit` lines (or bytes) from `offset`, with where to read on.
pub fn page_of(data: &[u8], meta: &EvidenceMeta, offset: u64, limit: u64, unit: Unit) -> Page {
    let (bytes, len, total) = match unit {
        Unit::Bytes => {
            let start = (offset as usize).min(data.len());
            let end = start.saturating_add(limit as usize).min(data.len());
            (data[start..end].to_vec(), (end - start) as u64, data.len() as u64)
        }
        Unit::Lines => {
            let lines = lines_of(data);
            let start = (offset as usize).min(lines.len());
            let end = start.saturating_add(limit as usize).min(lines.len());
            (lines[start..end].concat(), (end - start) as u64, lines.len() as u64)
        }
    };
    let end = offset + len;
    Page {
        data: String::from_utf8_lossy(&bytes).into_owned(),
        offset,
        len,
        total_bytes: meta.bytes,
        complete: meta.complete,
        next_offset: (end < total).then_some(end),
    }
}

/// A task's end, as it is (or is to be) recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct End {
    /// The state the task ended in, which `task.status` and `task.list` show while the store still holds the
    /// one before.
    pub state: TaskState,
    /// The terminal event to record.
    pub kind: EventKind,
    /// The lead's `finish` summary, when the task finished.
    pub result: Option<String>,
    /// The task's own error (a failed task), if any.
    pub error: Option<String>,
    /// Why the end could not be recorded; empty until it could not.
    pub record_error: String,
}

impl End {
    /// The end `task.cancel` records.
    pub fn cancelled() -> End {
        End {
            state: TaskState::Cancelled,
            kind: EventKind::TaskCancelled {},
            result: None,
            error: None,
            record_error: String::new(),
        }
    }

    /// What to show as the task's error: its own, else why its end is not recorded.
    pub fn shown_error(&self) -> String {
        match &self.error {
            Some(e) => format!("{e} (not recorded: {})", self.record_error),
            None => format!("the end could not be recorded: {}", self.record_error),
        }
    }
}
