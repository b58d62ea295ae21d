//! The evidence archive as clients see it: an item's metadata, a page of it, and what `verify` found.
//!
//! The archive itself (blobs, indexes, integrity checks) is `agentd-evidence`'s; these are the plain
//! records it stores and serves.

use crate::role::Role;
use crate::tool::ToolName;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::{Path, PathBuf};

/// What produced a piece of evidence: a tool's result, or a part of agentd archiving what it moved.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(from = "String", into = "String")]
#[schemars(with = "String")]
pub enum Producer {
    /// A tool's result, too large to keep whole in the request.
    Tool(ToolName),
    /// What a compaction moved out of a request.
    Compaction,
    /// A delegation's complete receipts list.
    Receipts,
    /// The project's instructions (`AGENTS.md`), too large to keep whole in the request.
    Instructions,
    /// The memory notes, too many to keep whole in the request.
    Memory,
    /// What a teammate changed in its working copy: its patch (a unified diff), or its version of a
    /// file the merge back could not settle.
    Patch,
}

impl Producer {
    /// The word stored and shown for it.
    pub fn as_str(&self) -> &str {
        match self {
            Producer::Tool(tool) => tool.as_str(),
            Producer::Compaction => "compaction",
            Producer::Receipts => "receipts",
            Producer::Instructions => "instructions",
            Producer::Memory => "memory",
            Producer::Patch => "patch",
        }
    }
}

impl From<String> for Producer {
    fn from(word: String) -> Producer {
        match word.as_str() {
            "compaction" => Producer::Compaction,
            "receipts" => Producer::Receipts,
            "instructions" => Producer::Instructions,
            "memory" => Producer::Memory,
            "patch" => Producer::Patch,
            _ => Producer::Tool(ToolName::from(word)),
        }
    }
}

impl From<&str> for Producer {
    fn from(word: &str) -> Producer {
        Producer::from(word.to_string())
    }
}

impl From<ToolName> for Producer {
    fn from(tool: ToolName) -> Producer {
        Producer::Tool(tool)
    }
}

impl From<Producer> for String {
    fn from(p: Producer) -> String {
        match p {
            Producer::Tool(tool) => tool.into(),
            other => other.as_str().to_string(),
        }
    }
}

impl fmt::Display for Producer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who produced a piece of evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Source {
    /// The task whose work produced the evidence.
    pub task_id: String,
    /// The role that made the call (or whose history was compacted, or whose receipts were handed over).
    pub role: Role,
    /// The tool whose result this is, or the part of agentd that archived it.
    pub tool: Producer,
    /// The tool call whose result this is, by the id the model gave it; absent for a compaction's archive and
    /// a receipts list.
    pub call_id: Option<String>,
    /// What the evidence is of, in words: the path read or the command run for a tool's result; for a
    /// compaction's archive or a receipts list, a line saying what was moved and where.
    pub detail: Option<String>,
}

/// The record of one piece of evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EvidenceMeta {
    /// `ev-` and a UUID v7: ids sort by creation.
    pub id: String,
    /// The sha256 of the bytes, lowercase hex: the blob's name.
    pub sha256: String,
    /// The blob's size in bytes.
    pub bytes: u64,
    /// The blob's media type: `text/plain` for a tool's result, `application/x-ndjson` (one JSON message or
    /// receipt a line) for a compaction's archive and a receipts list.
    pub media_type: String,
    /// Where the evidence came from: the task, the role and the tool (or part of agentd) that produced it.
    pub source: Source,
    /// False when the producer was cut off (e.g. a command killed at its timeout).
    pub complete: bool,
    /// Why the evidence is incomplete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incomplete_reason: Option<String>,
    /// RFC 3339, set by the caller.
    pub created_at: String,
    /// The number of `\n`-terminated lines, plus one for a trailing partial line.
    pub lines: u64,
}

/// The unit of a page's offset and limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Unit {
    /// Offsets and lengths count bytes of the blob.
    Bytes,
    /// Offsets and lengths count lines (`\n`-terminated, a trailing partial line counting as one), from 0.
    Lines,
}

/// One page of evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Page {
    /// The page's text (see the module documentation for how bytes that split characters or are not
    /// UTF-8 are handled).
    pub data: String,
    /// Where the page starts, in the page's unit.
    pub offset: u64,
    /// How much the page covers, in the page's unit (bytes of the blob, or lines).
    pub len: u64,
    /// The blob's size in bytes.
    pub total_bytes: u64,
    /// Whether the producer of the evidence finished (false: it was cut off).
    pub complete: bool,
    /// Where the next page starts, `None` when this page reaches the end.
    pub next_offset: Option<u64>,
}

/// One evidence item `verify` found wrong.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Problem {
    /// The evidence item's id (`ev-…`), or [`CHECKPOINT_OBJECT`] for an object of a workspace
    /// checkpoint.
    pub id: String,
    /// The recorded sha256.
    pub sha256: String,
    /// The blob file.
    pub path: String,
    /// What is wrong, in words.
    pub problem: String,
}

/// The `id` of a [`Problem`] with a checkpoint object (named by its `sha256`), not an evidence item.
pub const CHECKPOINT_OBJECT: &str = "checkpoint-object";

/// Evidence to store.
#[derive(Clone)]
pub struct NewEvidence<'a> {
    /// The bytes themselves, stored whole.
    pub data: &'a [u8],
    /// Their media type (`text/plain` for a tool's result, `application/x-ndjson` for an archive).
    pub media_type: &'a str,
    /// Who produced them: task, role, tool (or part of agentd), call and what it was of.
    pub source: Source,
    /// False when the producer was cut off (a command killed at its timeout): readers are told the evidence
    /// is incomplete.
    pub complete: bool,
    /// Why it is incomplete, shown with it; `None` when complete.
    pub incomplete_reason: Option<String>,
    /// RFC 3339, set by the caller (this crate reads no clock for timestamps).
    pub created_at: &'a str,
}

impl NewEvidence<'_> {
    /// The record of these bytes once stored under `id`, with their `sha256` (hex) and `lines`
    /// counted by the store.
    pub fn meta(&self, id: String, sha256: String, lines: u64) -> EvidenceMeta {
        EvidenceMeta {
            id,
            sha256,
            bytes: self.data.len() as u64,
            media_type: self.media_type.to_string(),
            source: self.source.clone(),
            complete: self.complete,
            incomplete_reason: self.incomplete_reason.clone(),
            created_at: self.created_at.to_string(),
            lines,
        }
    }
}

impl std::fmt::Debug for NewEvidence<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewEvidence")
            .field("bytes", &self.data.len())
            .field("media_type", &self.media_type)
            .field("source", &self.source)
            .field("complete", &self.complete)
            .field("incomplete_reason", &self.incomplete_reason)
            .field("created_at", &self.created_at)
            .finish()
    }
}

/// Where stored evidence went.
#[derive(Debug, Clone, PartialEq)]
pub enum Stored {
    /// In the archive: readable by id.
    InStore(EvidenceMeta),
    /// The db could not take the record: the bytes were written whole to this file instead. The id
    /// is not in the archive; the file is the evidence.
    Fallback {
        /// The fallback file, in the directory the caller named (for a task, its workspace's
        /// `.agentd-evidence/`).
        path: PathBuf,
        /// The metadata the record would have had.
        meta: EvidenceMeta,
    },
}

impl Stored {
    /// The evidence's metadata, wherever the bytes went.
    pub fn meta(&self) -> &EvidenceMeta {
        match self {
            Stored::InStore(meta) | Stored::Fallback { meta, .. } => meta,
        }
    }

    /// The fallback file, if the evidence went there.
    pub fn fallback_path(&self) -> Option<&Path> {
        match self {
            Stored::InStore(_) => None,
            Stored::Fallback { path, .. } => Some(path),
        }
    }
}
