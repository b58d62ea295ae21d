//! What the daemon stores through: [`DaemonStorage`], the engine's storage seam plus what only the
//! daemon's surfaces ask (every task, a new task's record, the evidence list and its check, the
//! store's health). Two implementations: [`SledStorage`] on one machine — the sled [`Store`] of
//! `agentd-evidence`, events published on the daemon's [`EventBus`] once stored, the ends a full
//! disk refused kept in [`Ends`] until the store heals — and the fleet's, `JetStreamStorage` of
//! `agentd-cluster` (`crate::fleet`).
//!
//! This is the one place the engine's storage calls become sled's.

use crate::bus::EventBus;
use crate::ends::Ends;
use agentd_engine::storage::End;
use agentd_engine::storage::{Storage, StorageError};
use agentd_evidence::{EvidenceError, Health, Store, StoreError};
use agentd_policies::settings::SettingKey;
use agentd_protocol::evidence::{Problem, CHECKPOINT_OBJECT};
use agentd_protocol::memory::{Author, MemoryChange, NewNote, Note, NoteEdit, NoteFilter};
use agentd_protocol::{
    Event, EventKind, EvidenceMeta, Message, NewEvidence, Page, Record, Role, Stored, TaskMeta, Unit, Window,
};
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;

/// A sled store's failure by its kind, as the engine's seam says it: the one place the store's
/// errors are read.
trait Kinded {
    fn kinded(self) -> StorageError;
}

impl Kinded for StoreError {
    fn kinded(self) -> StorageError {
        match self {
            StoreError::UnknownTask(id) => StorageError::UnknownTask(id),
            StoreError::UnknownNote(id) => StorageError::UnknownNote(id),
            StoreError::NoteChange(c) => StorageError::RefusedChange(c),
            e @ StoreError::Unavailable { .. } => StorageError::unavailable(e),
            e => StorageError::failed(e),
        }
    }
}

impl Kinded for EvidenceError {
    fn kinded(self) -> StorageError {
        match self {
            EvidenceError::UnknownEvidence(id) => StorageError::UnknownEvidence(id),
            EvidenceError::UnknownObject(id) => StorageError::UnknownObject(id),
            EvidenceError::Store(e) => e.kinded(),
            e => StorageError::failed(e),
        }
    }
}

fn kinded(e: impl Kinded) -> StorageError {
    e.kinded()
}

/// The engine's storage seam and what the daemon's surfaces add to it.
pub trait DaemonStorage: Storage {
    /// Records a new task (`task.submit`).
    fn create_task(&self, meta: &TaskMeta) -> Result<(), StorageError>;
    /// Every evidence record, or one task's.
    fn evidence_list(&self, task_id: Option<&str>) -> Result<Vec<EvidenceMeta>, StorageError>;
    /// Reads every piece of evidence back against its sha256: what is missing or altered.
    fn verify_evidence(&self) -> Result<Vec<Problem>, StorageError>;
    /// Whether the store takes writes, and since when it has not.
    fn health(&self) -> Health;
    /// Tries to make an unhealthy store take writes again; whether it does.
    fn heal(&self) -> bool;
    /// Makes every write so far durable (the daemon's last act).
    fn flush(&self) -> Result<(), StorageError>;
}

/// The engine's storage over sled.
#[derive(Clone)]
pub struct SledStorage {
    store: Store,
    bus: EventBus,
    ends: Arc<Ends>,
}

impl SledStorage {
    /// Storage in `store`, publishing events on `bus`, keeping refused ends in `ends`.
    pub fn new(store: Store, bus: EventBus, ends: Arc<Ends>) -> SledStorage {
        SledStorage { store, bus, ends }
    }
}

impl Storage for SledStorage {
    fn tasks(&self) -> Result<Vec<TaskMeta>, StorageError> {
        self.store.tasks().map_err(kinded)
    }

    fn append(&self, task_id: &str, record: &Record) -> Result<u64, StorageError> {
        self.store.append(task_id, record).map_err(kinded)
    }

    fn emit(&self, task_id: &str, role: &Role, kind: EventKind) -> Result<Event, StorageError> {
        self.bus.emit(task_id, role, kind).map_err(kinded)
    }

    fn history(&self, task_id: &str, role: &Role) -> Result<Vec<Message>, StorageError> {
        self.store.history(task_id, role).map_err(kinded)
    }

    fn records(&self, task_id: &str, after: u64, limit: usize) -> Result<Vec<(u64, Record)>, StorageError> {
        self.store.records(task_id, after, limit).map_err(kinded)
    }

    fn events(&self, task_id: &str, after: u64, limit: usize) -> Result<Vec<Event>, StorageError> {
        self.store.events(task_id, after, limit).map_err(kinded)
    }

    fn last_event_seq(&self, task_id: &str) -> Result<u64, StorageError> {
        self.store.last_event_seq(task_id).map_err(kinded)
    }

    fn task(&self, task_id: &str) -> Result<Option<TaskMeta>, StorageError> {
        self.store.task(task_id).map_err(kinded)
    }

    fn update_task(&self, task_id: &str, change: &mut dyn FnMut(&mut TaskMeta)) -> Result<(), StorageError> {
        self.store.update_task(task_id, |t| change(t)).map(|_| ()).map_err(kinded)
    }

    fn keep_end(&self, task_id: &str, end: End) {
        self.ends.insert(task_id, end);
    }

    fn setting(&self, key: &SettingKey) -> Result<Option<Value>, StorageError> {
        self.store.setting(key.as_str()).map_err(kinded)
    }

    fn set_setting(&self, key: &SettingKey, value: &Value) -> Result<(), StorageError> {
        self.store.set_setting(key.as_str(), value).map_err(kinded)
    }

    fn cache_setting(&self, key: &SettingKey, value: &Value) -> Result<(), StorageError> {
        self.store.cache_setting(key.as_str(), value).map_err(kinded)
    }

    fn window(&self, server: &str, model: &str) -> Result<Option<Window>, StorageError> {
        self.store.window(server, model).map_err(kinded)
    }

    fn set_window(&self, server: &str, model: &str, window: Window) -> Result<(), StorageError> {
        self.store.set_window(server, model, window).map_err(kinded)
    }

    fn put_evidence(&self, new: NewEvidence<'_>, fallback_dir: &Path) -> Result<Stored, StorageError> {
        self.store.put_evidence(new, fallback_dir).map_err(kinded)
    }

    fn evidence(&self, id: &str) -> Result<EvidenceMeta, StorageError> {
        self.store.evidence(id).map_err(kinded)
    }

    fn read_evidence(&self, id: &str, offset: u64, limit: u64, unit: Unit) -> Result<Page, StorageError> {
        self.store.read_evidence(id, offset, limit, unit).map_err(kinded)
    }

    fn has_object(&self, id: &str) -> Result<bool, StorageError> {
        self.store.has_object(id).map_err(kinded)
    }

    fn put_object(&self, id: &str, bytes: &[u8]) -> Result<(), StorageError> {
        self.store.put_object(id, bytes).map_err(kinded)
    }

    fn object(&self, id: &str) -> Result<Vec<u8>, StorageError> {
        self.store.object(id).map_err(kinded)
    }

    fn sync_objects(&self) -> Result<(), StorageError> {
        self.store.sync_objects().map_err(kinded)
    }

    fn save_note(&self, note: NewNote) -> Result<Note, StorageError> {
        self.store.save_note(note).map_err(kinded)
    }

    fn notes(&self, filter: &NoteFilter) -> Result<Vec<Note>, StorageError> {
        self.store.notes(filter).map_err(kinded)
    }

    fn note(&self, id: &str) -> Result<Note, StorageError> {
        self.store.note(id).map_err(kinded)
    }

    fn change_note(
        &self,
        id: &str,
        edit: &NoteEdit,
        by: Author,
        at: &str,
    ) -> Result<(Note, MemoryChange), StorageError> {
        self.store.change_note(id, edit, by, at).map_err(kinded)
    }

    fn note_changes(&self, id: Option<&str>) -> Result<Vec<MemoryChange>, StorageError> {
        self.store.note_changes(id).map_err(kinded)
    }
}

impl DaemonStorage for SledStorage {
    fn create_task(&self, meta: &TaskMeta) -> Result<(), StorageError> {
        self.store.put_task(meta).map_err(kinded)
    }

    fn evidence_list(&self, task_id: Option<&str>) -> Result<Vec<EvidenceMeta>, StorageError> {
        self.store.evidence_list(task_id).map_err(kinded)
    }

    fn verify_evidence(&self) -> Result<Vec<Problem>, StorageError> {
        let problems = self.store.verify_evidence().map_err(kinded)?;
        let objects = self.store.verify_objects().map_err(kinded)?;
        Ok(problems
            .iter()
            .map(|p| Problem {
                id: p.id.clone(),
                sha256: p.sha256.clone(),
                path: p.path.display().to_string(),
                problem: p.to_string(),
            })
            .chain(objects.into_iter().map(|p| Problem {
                problem: match &p.actual {
                    None => {
                        format!("checkpoint object {}: its blob {} is missing", p.sha256, p.path.display())
                    }
                    Some(actual) => format!(
                        "checkpoint object {} is altered on disk: sha256 {actual} ({})",
                        p.sha256,
                        p.path.display()
                    ),
                },
                id: CHECKPOINT_OBJECT.to_string(),
                sha256: p.sha256,
                path: p.path.display().to_string(),
            }))
            .collect())
    }

    fn health(&self) -> Health {
        self.store.health()
    }

    fn heal(&self) -> bool {
        self.store.heal()
    }

    fn flush(&self) -> Result<(), StorageError> {
        self.store.flush().map_err(kinded)
    }
}

/// The health check: heals an unhealthy store (rate-limited by the store) and writes the ends it
/// could not record. Called periodically and by `daemon.status`.
pub fn check_storage(storage: &dyn DaemonStorage, ends: &Ends) {
    if ends.is_empty() && storage.health().ok {
        return;
    }
    if storage.heal() {
        ends.record_pending(storage);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sled_storage_keeps_the_storage_contract() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("db")).unwrap();
        let storage = SledStorage::new(
            store.clone(),
            EventBus::new(store.clone(), EventBus::channel()),
            Arc::default(),
        );
        agentd_engine::contract::check(&storage, |meta| store.put_task(&meta).unwrap(), dir.path());
    }
}
