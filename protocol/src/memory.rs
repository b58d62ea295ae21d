//! Durable memory: notes about the user and the project that outlive a task.
//!
//! A note is written only by the model's `remember` tool, quoting the user's own words, and by the
//! user (`agentd memory …`); never by a compaction. Every change to a note — its save, an edit, a
//! deletion, an undo — is a [`MemoryChange`] of its own, with who made it and the text before and
//! after, so any change can itself be undone. The decisions over this data (what an undo does,
//! whether a quote is the user's) are `agentd-policies`' `memory`.

use crate::role::Role;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Where a note applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MemoryScope {
    /// Every task in the workspace (the project) the note was saved in. The default.
    #[default]
    Workspace,
    /// Every task of this agentd home, in any workspace: what the user is like.
    User,
}

impl MemoryScope {
    /// The scope as it is spelled on the wire and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            MemoryScope::Workspace => "workspace",
            MemoryScope::User => "user",
        }
    }

    /// The scope a word names, if any.
    pub fn parse(word: &str) -> Option<MemoryScope> {
        [MemoryScope::Workspace, MemoryScope::User].into_iter().find(|s| s.as_str() == word)
    }
}

impl fmt::Display for MemoryScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A remembered note, as it stands now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Note {
    /// The note's id (`m17`), given when it was saved.
    pub id: String,
    /// What to remember, in the model's words (or the user's, once edited).
    pub text: String,
    /// The user's own words the note rests on, verbatim from a user message of `task_id`.
    pub quote: String,
    /// Where the note applies.
    pub scope: MemoryScope,
    /// The workspace the note was saved in (an absolute path): the project of a `workspace` note.
    pub workspace: String,
    /// The task whose user message the quote is from.
    pub task_id: String,
    /// The role that saved it.
    pub role: Role,
    /// The log record (sequence number in `task_id`'s log) of the user message quoted.
    pub source_seq: u64,
    /// When it was saved, RFC 3339.
    pub created_at: String,
    /// When it last changed, RFC 3339.
    pub updated_at: String,
    /// Whether it is deleted: kept, so the deletion can be undone, but in no request and no list.
    #[serde(default)]
    pub deleted: bool,
}

/// Who changed a note.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "by", rename_all = "snake_case")]
pub enum Author {
    /// A model's `remember` call.
    Model {
        /// The task it ran in.
        task_id: String,
        /// The role that called it.
        role: Role,
    },
    /// The user, through the CLI, the socket, the HTTP API or the dashboard.
    User,
}

/// What a change did to a note.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChangeAction {
    /// The note was saved (by `remember`).
    Saved,
    /// Its text changed.
    Edited,
    /// It was deleted.
    Deleted,
    /// A deleted note came back.
    Restored,
}

impl ChangeAction {
    /// The action as it is spelled on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeAction::Saved => "saved",
            ChangeAction::Edited => "edited",
            ChangeAction::Deleted => "deleted",
            ChangeAction::Restored => "restored",
        }
    }
}

/// One change to a note, kept for ever: who, when, and the text before and after.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MemoryChange {
    /// The change's number, increasing across all notes of the home.
    pub seq: u64,
    /// The note changed.
    pub note_id: String,
    /// When, RFC 3339.
    pub at: String,
    /// Who made it.
    #[serde(flatten)]
    pub by: Author,
    /// What it did.
    pub action: ChangeAction,
    /// The note's text before; absent for a save (and a restore: it is the text after).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
    /// The note's text after; absent for a deletion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// The change this one undid (`memory undo`), if it is an undo.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undoes: Option<u64>,
}

/// A note to save: what the `remember` tool hands the store once its quote is verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewNote {
    /// What to remember.
    pub text: String,
    /// The user's words, verified verbatim.
    pub quote: String,
    /// Where it applies.
    pub scope: MemoryScope,
    /// The workspace it was saved in (absolute).
    pub workspace: String,
    /// The task of the quoted message.
    pub task_id: String,
    /// The role saving it.
    pub role: Role,
    /// The quoted message's record in the task's log.
    pub source_seq: u64,
    /// When, RFC 3339.
    pub at: String,
}

/// A change the user (or an undo) asks of a note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoteEdit {
    /// Replace its text.
    Edit(String),
    /// Delete it.
    Delete,
    /// Undo the latest change of this note.
    Undo,
}

/// Which notes a listing shows.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub struct NoteFilter {
    /// Only the `workspace` notes of this workspace (an absolute path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(crate::text::ABSOLUTE_PATH))]
    pub workspace: Option<String>,
    /// Only the `user` notes.
    #[serde(default)]
    pub user: bool,
    /// Deleted notes too.
    #[serde(default)]
    pub deleted: bool,
}

impl NoteFilter {
    /// Whether `note` is one this filter shows.
    pub fn shows(&self, note: &Note) -> bool {
        if note.deleted && !self.deleted {
            return false;
        }
        match (&self.workspace, self.user) {
            (Some(w), false) => note.scope == MemoryScope::Workspace && &note.workspace == w,
            (None, true) => note.scope == MemoryScope::User,
            (Some(w), true) => note.scope == MemoryScope::User || &note.workspace == w,
            (None, false) => true,
        }
    }

    /// The notes a task in `workspace` carries: that workspace's and the user's, not deleted.
    pub fn for_task(workspace: &str) -> NoteFilter {
        NoteFilter { workspace: Some(workspace.to_string()), user: true, deleted: false }
    }
}
