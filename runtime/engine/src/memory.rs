//! [`MemoryStorage`]: the storage seam held in memory, for tests and benchmarks — the engine's own
//! unit tests run whole turns over it, and other crates enable it with the `testing` feature.
//!
//! It keeps the seam's contract as far as memory can: records and events numbered from 1 without
//! gaps, an event appended to the log as a record too, a role's history rebuilt from its latest
//! checkpoint, evidence read back by page. Nothing survives the process, and its "sha256" is
//! computed like the disk store's so ids and records look the same. A test can make it refuse
//! writes ([`MemoryStorage::fail_writes`]) to see what the engine does with a storage that cannot
//! take a record.

use crate::storage::End;
use crate::storage::{lines_of, page_of, Storage, StorageError};
use agentd_policies::history::history_of;
use agentd_policies::memory::{apply, saved};
use agentd_policies::settings::SettingKey;
use agentd_protocol::memory::{Author, MemoryChange, NewNote, Note, NoteEdit, NoteFilter};
use agentd_protocol::{
    Event, EventKind, EvidenceMeta, Message, NewEvidence, Page, Record, Role, Stored, TaskMeta, Unit, Window,
};
use parking_lot::{Mutex, MutexGuard};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

/// Why the in-memory storage refused a call.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// [`MemoryStorage::fail_writes`] is on.
    #[error("the storage refuses writes (a test asked it to)")]
    Refused,
}

#[derive(Default)]
struct Log {
    records: Vec<Record>,
    events: Vec<Event>,
}

#[derive(Default)]
struct Inner {
    logs: HashMap<String, Log>,
    tasks: HashMap<String, TaskMeta>,
    ends: HashMap<String, End>,
    settings: HashMap<String, Value>,
    windows: HashMap<(String, String), Window>,
    evidence: HashMap<String, (EvidenceMeta, Vec<u8>)>,
    objects: HashMap<String, Vec<u8>>,
    notes: Vec<Note>,
    changes: Vec<MemoryChange>,
}

/// The storage seam in memory. Cheap to share behind an `Arc`.
#[derive(Default)]
pub struct MemoryStorage {
    inner: Mutex<Inner>,
    refuse: AtomicBool,
}

impl MemoryStorage {
    /// An empty storage.
    pub fn new() -> MemoryStorage {
        MemoryStorage::default()
    }

    fn writing(&self) -> Result<MutexGuard<'_, Inner>, StorageError> {
        if self.refuse.load(Ordering::SeqCst) {
            return Err(StorageError::unavailable(MemoryError::Refused));
        }
        Ok(self.inner.lock())
    }

    /// From now on every write fails (`true`) or succeeds again (`false`); reads keep working.
    pub fn fail_writes(&self, refuse: bool) {
        self.refuse.store(refuse, Ordering::SeqCst);
    }

    /// Records a task, as the daemon does when a task is submitted.
    pub fn put_task(&self, meta: TaskMeta) {
        self.inner.lock().tasks.insert(meta.task_id.clone(), meta);
    }

    /// The end kept for a task whose end could not be recorded.
    pub fn kept_end(&self, task_id: &str) -> Option<End> {
        self.inner.lock().ends.get(task_id).cloned()
    }

    /// Every record of a task's log, in order.
    pub fn all_records(&self, task_id: &str) -> Vec<Record> {
        self.inner.lock().logs.get(task_id).map(|l| l.records.clone()).unwrap_or_default()
    }

    /// Every event of a task, in order.
    pub fn all_events(&self, task_id: &str) -> Vec<Event> {
        self.inner.lock().logs.get(task_id).map(|l| l.events.clone()).unwrap_or_default()
    }
}

impl Storage for MemoryStorage {
    fn tasks(&self) -> Result<Vec<TaskMeta>, StorageError> {
        let mut tasks: Vec<TaskMeta> = self.inner.lock().tasks.values().cloned().collect();
        tasks.sort_by(|a, b| a.task_id.cmp(&b.task_id));
        Ok(tasks)
    }

    fn append(&self, task_id: &str, record: &Record) -> Result<u64, StorageError> {
        let mut inner = self.writing()?;
        let log = inner.logs.entry(task_id.to_string()).or_default();
        log.records.push(record.clone());
        Ok(log.records.len() as u64)
    }

    fn emit(&self, task_id: &str, role: &Role, kind: EventKind) -> Result<Event, StorageError> {
        let mut inner = self.writing()?;
        let log = inner.logs.entry(task_id.to_string()).or_default();
        let event = Event {
            seq: log.events.len() as u64 + 1,
            task_id: task_id.to_string(),
            role: role.clone(),
            at: crate::clock::now_rfc3339(),
            kind,
        };
        log.events.push(event.clone());
        log.records.push(Record::Event { event: event.clone() });
        Ok(event)
    }

    fn history(&self, task_id: &str, role: &Role) -> Result<Vec<Message>, StorageError> {
        let inner = self.inner.lock();
        Ok(inner.logs.get(task_id).map(|l| history_of(role, &l.records)).unwrap_or_default())
    }

    fn records(&self, task_id: &str, after: u64, limit: usize) -> Result<Vec<(u64, Record)>, StorageError> {
        let inner = self.inner.lock();
        let Some(log) = inner.logs.get(task_id) else { return Ok(Vec::new()) };
        Ok((after as usize..log.records.len())
            .take(limit)
            .map(|i| (i as u64 + 1, log.records[i].clone()))
            .collect())
    }

    fn events(&self, task_id: &str, after: u64, limit: usize) -> Result<Vec<Event>, StorageError> {
        let inner = self.inner.lock();
        let Some(log) = inner.logs.get(task_id) else { return Ok(Vec::new()) };
        Ok(log.events.iter().skip(after as usize).take(limit).cloned().collect())
    }

    fn last_event_seq(&self, task_id: &str) -> Result<u64, StorageError> {
        Ok(self.inner.lock().logs.get(task_id).map_or(0, |l| l.events.len() as u64))
    }

    fn task(&self, task_id: &str) -> Result<Option<TaskMeta>, StorageError> {
        Ok(self.inner.lock().tasks.get(task_id).cloned())
    }

    fn update_task(&self, task_id: &str, change: &mut dyn FnMut(&mut TaskMeta)) -> Result<(), StorageError> {
        let mut inner = self.writing()?;
        let meta =
            inner.tasks.get_mut(task_id).ok_or_else(|| StorageError::UnknownTask(task_id.to_string()))?;
        change(meta);
        Ok(())
    }

    fn keep_end(&self, task_id: &str, end: End) {
        self.inner.lock().ends.insert(task_id.to_string(), end);
    }

    fn setting(&self, key: &SettingKey) -> Result<Option<Value>, StorageError> {
        Ok(self.inner.lock().settings.get(key.as_str()).cloned())
    }

    fn set_setting(&self, key: &SettingKey, value: &Value) -> Result<(), StorageError> {
        self.writing()?.settings.insert(key.to_string(), value.clone());
        Ok(())
    }

    fn cache_setting(&self, key: &SettingKey, value: &Value) -> Result<(), StorageError> {
        self.set_setting(key, value)
    }

    fn window(&self, server: &str, model: &str) -> Result<Option<Window>, StorageError> {
        Ok(self.inner.lock().windows.get(&(server.to_string(), model.to_string())).copied())
    }

    fn set_window(&self, server: &str, model: &str, window: Window) -> Result<(), StorageError> {
        self.writing()?.windows.insert((server.to_string(), model.to_string()), window);
        Ok(())
    }

    fn put_evidence(&self, new: NewEvidence<'_>, _fallback_dir: &Path) -> Result<Stored, StorageError> {
        let mut inner = self.writing()?;
        let id = format!("ev-{:04}", inner.evidence.len() + 1);
        let sha256 = Sha256::digest(new.data).iter().map(|b| format!("{b:02x}")).collect::<String>();
        let meta = new.meta(id.clone(), sha256, lines_of(new.data).len() as u64);
        inner.evidence.insert(id, (meta.clone(), new.data.to_vec()));
        Ok(Stored::InStore(meta))
    }

    fn evidence(&self, id: &str) -> Result<EvidenceMeta, StorageError> {
        let inner = self.inner.lock();
        let (meta, _) =
            inner.evidence.get(id).ok_or_else(|| StorageError::UnknownEvidence(id.to_string()))?;
        Ok(meta.clone())
    }

    fn read_evidence(&self, id: &str, offset: u64, limit: u64, unit: Unit) -> Result<Page, StorageError> {
        let inner = self.inner.lock();
        let (meta, data) =
            inner.evidence.get(id).ok_or_else(|| StorageError::UnknownEvidence(id.to_string()))?;
        Ok(page_of(data, meta, offset, limit, unit))
    }

    fn has_object(&self, id: &str) -> Result<bool, StorageError> {
        Ok(self.inner.lock().objects.contains_key(id))
    }

    fn put_object(&self, id: &str, bytes: &[u8]) -> Result<(), StorageError> {
        self.writing()?.objects.insert(id.to_string(), bytes.to_vec());
        Ok(())
    }

    fn object(&self, id: &str) -> Result<Vec<u8>, StorageError> {
        let inner = self.inner.lock();
        inner.objects.get(id).cloned().ok_or_else(|| StorageError::UnknownObject(id.to_string()))
    }

    fn sync_objects(&self) -> Result<(), StorageError> {
        self.writing().map(|_| ())
    }

    fn save_note(&self, new: NewNote) -> Result<Note, StorageError> {
        let mut inner = self.writing()?;
        let (note, change) = saved(new, inner.changes.len() as u64 + 1);
        inner.changes.push(change);
        inner.notes.push(note.clone());
        Ok(note)
    }

    fn notes(&self, filter: &NoteFilter) -> Result<Vec<Note>, StorageError> {
        Ok(self.inner.lock().notes.iter().filter(|n| filter.shows(n)).cloned().collect())
    }

    fn note(&self, id: &str) -> Result<Note, StorageError> {
        let inner = self.inner.lock();
        let note = inner.notes.iter().find(|n| n.id == id);
        note.cloned().ok_or_else(|| StorageError::UnknownNote(id.to_string()))
    }

    fn change_note(
        &self,
        id: &str,
        edit: &NoteEdit,
        by: Author,
        at: &str,
    ) -> Result<(Note, MemoryChange), StorageError> {
        let mut inner = self.writing()?;
        let Some(at_index) = inner.notes.iter().position(|n| n.id == id) else {
            return Err(StorageError::UnknownNote(id.to_string()));
        };
        let latest = inner.changes.iter().rev().find(|c| c.note_id == id);
        let applied = apply(&inner.notes[at_index], edit, latest, at).map_err(StorageError::RefusedChange)?;
        let change = applied.change(inner.changes.len() as u64 + 1, by, at);
        inner.changes.push(change.clone());
        inner.notes[at_index] = applied.note.clone();
        Ok((applied.note, change))
    }

    fn note_changes(&self, id: Option<&str>) -> Result<Vec<MemoryChange>, StorageError> {
        let inner = self.inner.lock();
        Ok(inner.changes.iter().filter(|c| id.is_none_or(|id| c.note_id == id)).cloned().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memory_storage_keeps_the_storage_contract() {
        let storage = MemoryStorage::new();
        let dir = tempfile::tempdir().unwrap();
        crate::contract::check(&storage, |meta| storage.put_task(meta), dir.path());
    }

    #[test]
    fn a_storage_that_refuses_writes_refuses_them_all_and_still_reads() {
        let storage = MemoryStorage::new();
        storage.emit("t", &Role::Lead, EventKind::TaskResumed { node: None, after: None }).unwrap();
        storage.fail_writes(true);
        assert!(storage.emit("t", &Role::Lead, EventKind::TaskResumed { node: None, after: None }).is_err());
        assert!(storage.set_window("s", "m", Window::assumed()).is_err());
        assert_eq!(storage.last_event_seq("t").unwrap(), 1);
        storage.fail_writes(false);
        assert_eq!(
            storage.emit("t", &Role::Lead, EventKind::TaskResumed { node: None, after: None }).unwrap().seq,
            2
        );
    }
}
