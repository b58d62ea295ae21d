//! `memory.*`: the user's hold on durable memory — list the notes, show one with its changes, edit,
//! delete and undo. `memory.list` takes a [`NoteFilter`](crate::memory::NoteFilter) as its params.

use crate::memory::{MemoryChange, Note};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Params naming one note.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NoteRef {
    /// The note's id (`m17`).
    pub id: String,
}

/// Params of `memory.edit`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NoteEditParams {
    /// The note's id.
    pub id: String,
    /// Its new text; not empty.
    #[schemars(length(min = 1), pattern(crate::text::NOT_BLANK))]
    pub text: String,
}

/// Params of `memory.undo`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct UndoParams {
    /// The note whose latest change to undo; absent: the latest change of any note (most often the
    /// note saved last).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

/// A note with every change made to it, oldest first (`memory.get`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NoteDetail {
    /// The note as it stands.
    pub note: Note,
    /// Its changes: the save, then every edit, deletion and undo.
    pub changes: Vec<MemoryChange>,
}

/// What a change did (`memory.edit`, `memory.delete`, `memory.undo`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NoteChanged {
    /// The note as it now stands.
    pub note: Note,
    /// The change just recorded.
    pub change: MemoryChange,
}
