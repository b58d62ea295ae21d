//! [`Storage`] on NATS JetStream: each call of the engine's seam, made of the storage's parts —
//! the history, the buckets, evidence and memory. A task's record is changed by compare-and-set on
//! its revision, tried again while other writers keep changing it.

use super::evidence::hex_sha256;
use super::handle::{encode, storage_error, JetStreamStorage};
use super::memory::MemoryEntry;
use crate::error::ClusterError;
use crate::names::token;
use crate::passing::retrying;
use agentd_engine::clock::now_rfc3339;
use agentd_engine::storage::{lines_of, page_of, End, Storage, StorageError};
use agentd_policies::history::history_of;
use agentd_policies::memory::{apply, saved};
use agentd_policies::settings::SettingKey;
use agentd_protocol::memory::{Author, MemoryChange, NewNote, Note, NoteEdit, NoteFilter};
use agentd_protocol::{
    Event, EventKind, EvidenceMeta, Message, NewEvidence, Page, Record, Role, Stored, TaskMeta, Unit, Window,
};
use async_nats::jetstream::kv::{self, UpdateErrorKind};
use serde_json::Value;
use std::path::Path;

/// How many times a compare-and-set update of a task's record is tried when others keep changing it.
const CAS_ATTEMPTS: usize = 16;

impl Storage for JetStreamStorage {
    fn tasks(&self) -> Result<Vec<TaskMeta>, StorageError> {
        let mut tasks = JetStreamStorage::tasks(self)?;
        // Task ids are UUID v7: their order is their age, as sled lists them.
        tasks.sort_by(|a, b| a.task_id.cmp(&b.task_id));
        Ok(tasks)
    }

    fn append(&self, task_id: &str, record: &Record) -> Result<u64, StorageError> {
        Ok(self.append_with(task_id, |_| (record.clone(), ()))?.0.records)
    }

    fn emit(&self, task_id: &str, role: &Role, kind: EventKind) -> Result<Event, StorageError> {
        let (_, event) = self.append_with(task_id, |head| {
            let event = Event {
                seq: head.events + 1,
                task_id: task_id.to_string(),
                role: role.clone(),
                at: now_rfc3339(),
                kind,
            };
            (Record::Event { event: event.clone() }, event)
        })?;
        Ok(event)
    }

    fn history(&self, task_id: &str, role: &Role) -> Result<Vec<Message>, StorageError> {
        let records: Vec<Record> = self.all_records(task_id)?.into_iter().map(|(_, r)| r).collect();
        Ok(history_of(role, &records))
    }

    fn records(&self, task_id: &str, after: u64, limit: usize) -> Result<Vec<(u64, Record)>, StorageError> {
        Ok(self.all_records(task_id)?.into_iter().filter(|(n, _)| *n > after).take(limit).collect())
    }

    fn events(&self, task_id: &str, after: u64, limit: usize) -> Result<Vec<Event>, StorageError> {
        Ok(self
            .all_records(task_id)?
            .into_iter()
            .filter_map(|(_, r)| match r {
                Record::Event { event } if event.seq > after => Some(event),
                _ => None,
            })
            .take(limit)
            .collect())
    }

    fn last_event_seq(&self, task_id: &str) -> Result<u64, StorageError> {
        Ok(self.head_of(task_id)?.events)
    }

    fn task(&self, task_id: &str) -> Result<Option<TaskMeta>, StorageError> {
        self.kv_get(&self.handles.tasks, token(task_id), format!("task {task_id}"))
    }

    fn update_task(&self, task_id: &str, change: &mut dyn FnMut(&mut TaskMeta)) -> Result<(), StorageError> {
        self.refuse_abandoned(task_id)?;
        let tasks = self.handles.tasks.clone();
        for _ in 0..CAS_ATTEMPTS {
            let (store, key) = (tasks.clone(), token(task_id));
            let entry = self.run(retrying(move || {
                let (store, key) = (store.clone(), key.clone());
                async move { store.entry(key).await.map_err(|e| ClusterError::js("reading a task", e)) }
            }))?;
            let Some(entry) = entry.filter(|e| e.operation == kv::Operation::Put) else {
                return Err(StorageError::UnknownTask(task_id.to_string()));
            };
            let mut meta: TaskMeta = serde_json::from_slice(&entry.value).map_err(|source| {
                storage_error(ClusterError::Corrupt { what: format!("task {task_id}"), source })
            })?;
            change(&mut meta);
            let value = encode(&format!("task {task_id}"), &meta).map_err(storage_error)?;
            let (store, key, revision) = (tasks.clone(), token(task_id), entry.revision);
            let updated = self.run(async move {
                match store.update(key, value.into(), revision).await {
                    Ok(_) => Ok(true),
                    Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision => Ok(false),
                    Err(e) => Err(ClusterError::js("updating a task", e)),
                }
            })?;
            if updated {
                return Ok(());
            }
        }
        Err(storage_error(ClusterError::js(
            format!("updating task {task_id}"),
            "it kept changing under other writers",
        )))
    }

    fn keep_end(&self, task_id: &str, end: End) {
        // A task this writer lost goes on elsewhere: its end here is no end of the task.
        if self.abandoned.lock().contains(task_id) {
            return;
        }
        self.ends.lock().insert(task_id.to_string(), end);
    }

    fn setting(&self, key: &SettingKey) -> Result<Option<Value>, StorageError> {
        self.kv_get(&self.handles.settings, token(key.as_str()), format!("setting {key}"))
    }

    fn set_setting(&self, key: &SettingKey, value: &Value) -> Result<(), StorageError> {
        let bytes = encode(&format!("setting {key}"), value).map_err(storage_error)?;
        self.kv_put(&self.handles.settings, token(key.as_str()), bytes, format!("setting {key}"))
    }

    fn cache_setting(&self, key: &SettingKey, value: &Value) -> Result<(), StorageError> {
        self.set_setting(key, value)
    }

    fn window(&self, server: &str, model: &str) -> Result<Option<Window>, StorageError> {
        self.kv_get(
            &self.handles.windows,
            token(&format!("{server}\n{model}")),
            format!("the window of {model}"),
        )
    }

    fn set_window(&self, server: &str, model: &str, window: Window) -> Result<(), StorageError> {
        let bytes = encode("a window", &window).map_err(storage_error)?;
        self.kv_put(
            &self.handles.windows,
            token(&format!("{server}\n{model}")),
            bytes,
            format!("the window of {model}"),
        )
    }

    fn put_evidence(&self, new: NewEvidence<'_>, _fallback_dir: &Path) -> Result<Stored, StorageError> {
        let sha256 = hex_sha256(new.data);
        let meta =
            new.meta(format!("ev-{}", uuid::Uuid::now_v7()), sha256.clone(), lines_of(new.data).len() as u64);
        // The bytes first, then the record that names them: a record never points at nothing.
        let (blobs, data) = (self.handles.blobs.clone(), new.data.to_vec());
        let name = sha256.clone();
        self.run(async move {
            blobs
                .put(name.as_str(), &mut data.as_slice())
                .await
                .map(drop)
                .map_err(|e| ClusterError::js("storing evidence bytes", e))
        })?;
        let record = encode("an evidence record", &meta).map_err(storage_error)?;
        self.kv_put(&self.handles.evidence, token(&meta.id), record, format!("evidence {}", meta.id))?;
        Ok(Stored::InStore(meta))
    }

    fn evidence(&self, id: &str) -> Result<EvidenceMeta, StorageError> {
        self.kv_get(&self.handles.evidence, token(id), format!("evidence {id}"))?
            .ok_or_else(|| StorageError::UnknownEvidence(id.to_string()))
    }

    fn read_evidence(&self, id: &str, offset: u64, limit: u64, unit: Unit) -> Result<Page, StorageError> {
        let meta = self.evidence(id)?;
        let data = self.blob(&meta.sha256)?;
        Ok(page_of(&data, &meta, offset, limit, unit))
    }

    fn has_object(&self, id: &str) -> Result<bool, StorageError> {
        self.has_blob(id)
    }

    fn put_object(&self, id: &str, bytes: &[u8]) -> Result<(), StorageError> {
        self.put_blob(id, bytes)
    }

    fn object(&self, id: &str) -> Result<Vec<u8>, StorageError> {
        if !self.has_blob(id)? {
            return Err(StorageError::UnknownObject(id.to_string()));
        }
        let data = self.blob(id)?;
        let actual = hex_sha256(&data);
        if actual != id {
            let altered = ClusterError::Altered { what: format!("checkpoint object {id}"), actual };
            return Err(storage_error(altered));
        }
        Ok(data)
    }

    /// Each object was acknowledged by the stream when it was put.
    fn sync_objects(&self) -> Result<(), StorageError> {
        Ok(())
    }

    fn save_note(&self, new: NewNote) -> Result<Note, StorageError> {
        let _guard = self.memory_writes.lock();
        let last = self.memory_entries()?.len() as u64;
        let (note, change) = saved(new, last + 1);
        self.write_memory(&MemoryEntry { change, note: note.clone() }, last)?;
        Ok(note)
    }

    fn notes(&self, filter: &NoteFilter) -> Result<Vec<Note>, StorageError> {
        Ok(self.current_notes()?.into_iter().filter(|n| filter.shows(n)).collect())
    }

    fn note(&self, id: &str) -> Result<Note, StorageError> {
        self.current_notes()?
            .into_iter()
            .find(|n| n.id == id)
            .ok_or_else(|| StorageError::UnknownNote(id.to_string()))
    }

    fn change_note(
        &self,
        id: &str,
        edit: &NoteEdit,
        by: Author,
        at: &str,
    ) -> Result<(Note, MemoryChange), StorageError> {
        let _guard = self.memory_writes.lock();
        let entries = self.memory_entries()?;
        let note = entries
            .iter()
            .rev()
            .find(|e| e.note.id == id)
            .map(|e| e.note.clone())
            .ok_or_else(|| StorageError::UnknownNote(id.to_string()))?;
        let latest = entries.iter().rev().find(|e| e.change.note_id == id).map(|e| &e.change);
        let applied = apply(&note, edit, latest, at).map_err(StorageError::RefusedChange)?;
        let last = entries.len() as u64;
        let change = applied.change(last + 1, by, at);
        self.write_memory(&MemoryEntry { change: change.clone(), note: applied.note.clone() }, last)?;
        Ok((applied.note, change))
    }

    fn note_changes(&self, id: Option<&str>) -> Result<Vec<MemoryChange>, StorageError> {
        Ok(self
            .memory_entries()?
            .into_iter()
            .map(|e| e.change)
            .filter(|c| id.is_none_or(|id| c.note_id == id))
            .collect())
    }
}
