//! The `memory.*` methods: the user reads, edits, deletes and undoes the durable notes (each change
//! recorded with the user as its author).

use super::{Answer, Methods};
use agentd_engine::clock::now_rfc3339;
use agentd_protocol::memory::{Author, Note, NoteEdit, NoteFilter};
use agentd_protocol::rpc::{method, Handle, NoteChanged, NoteDetail, NoteEditParams, NoteRef, UndoParams};
use agentd_protocol::{ErrorCode, RpcError};
use std::path::Path;

/// `memory.list`: a workspace filter names the workspace as a task's notes do, by its canonical path.
impl Handle<method::MemoryList> for Methods {
    async fn handle(&self, filter: NoteFilter) -> Answer<Vec<Note>> {
        let mut filter = filter;
        if let Some(dir) = &filter.workspace {
            if !Path::new(dir).is_absolute() {
                return Err(RpcError::invalid_params(format!(
                    "param `workspace` must be an absolute path, got {dir:?}"
                ))
                .into());
            }
            if let Ok(canonical) = std::fs::canonicalize(dir) {
                filter.workspace = Some(canonical.display().to_string());
            }
        }
        Ok(self.shared.storage.notes(&filter)?)
    }
}

impl Handle<method::MemoryGet> for Methods {
    async fn handle(&self, p: NoteRef) -> Answer<NoteDetail> {
        let id = p.id.as_str();
        let note = self.shared.storage.note(id)?;
        let changes = self.shared.storage.note_changes(Some(id))?;
        Ok(NoteDetail { note, changes })
    }
}

impl Handle<method::MemoryEdit> for Methods {
    async fn handle(&self, p: NoteEditParams) -> Answer<NoteChanged> {
        self.change_note(&p.id, NoteEdit::Edit(p.text))
    }
}

impl Handle<method::MemoryDelete> for Methods {
    async fn handle(&self, p: NoteRef) -> Answer<NoteChanged> {
        self.change_note(&p.id, NoteEdit::Delete)
    }
}

/// `memory.undo`: the latest change of the note named, or of any note.
impl Handle<method::MemoryUndo> for Methods {
    async fn handle(&self, p: UndoParams) -> Answer<NoteChanged> {
        let id = p.id;
        let id = match id {
            Some(id) => id,
            None => match self.shared.storage.note_changes(None)?.pop() {
                Some(latest) => latest.note_id,
                None => {
                    return Err(
                        RpcError::new(ErrorCode::NotAllowed, "there is no memory change to undo").into()
                    )
                }
            },
        };
        self.change_note(&id, NoteEdit::Undo)
    }
}

impl Methods {
    fn change_note(&self, id: &str, edit: NoteEdit) -> Answer<NoteChanged> {
        let (note, change) = self.shared.storage.change_note(id, &edit, Author::User, &now_rfc3339())?;
        tracing::info!(note = id, action = ?change.action, "memory changed by the user");
        Ok(NoteChanged { note, change })
    }
}
