//! Checkpoints of a task's workspace: what a file was at one moment, and what a call changed.
//!
//! Before each writing tool call (`write_file`, `edit_file`, `run_command`, an MCP tool marked as
//! writing) the daemon records the workspace as a *checkpoint*: a tree of content-addressed objects
//! (sha256 of each file's bytes, of each directory's listing), named by the sha256 of its root. After
//! the call it records another; what differs between the two is the call's change, a list of
//! [`FileDelta`]s carried by its `files_changed` event. `agentd diff` and `agentd revert` read those
//! events; the objects hold the bytes.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A file's mode as git writes it: a regular file's type bits and permissions.
pub const REGULAR: u32 = 0o100000;
/// A symlink's mode; its content is its target text.
pub const SYMLINK: u32 = 0o120000;
/// The type bits of a mode.
pub const TYPE_MASK: u32 = 0o170000;
/// A FIFO's mode (a named pipe): recorded by name, never held.
pub const FIFO: u32 = 0o010000;
/// A character device's mode: recorded by name, never held.
pub const CHAR_DEVICE: u32 = 0o020000;
/// A block device's mode: recorded by name, never held.
pub const BLOCK_DEVICE: u32 = 0o060000;
/// A Unix socket's mode: recorded by name, never held.
pub const SOCKET: u32 = 0o140000;

/// What a special file is, in words (`a FIFO`), from its mode's type bits; `None` for a regular file,
/// a symlink or a directory.
pub fn special_kind(mode: u32) -> Option<&'static str> {
    match mode & TYPE_MASK {
        FIFO => Some("a FIFO"),
        CHAR_DEVICE => Some("a character device"),
        BLOCK_DEVICE => Some("a block device"),
        SOCKET => Some("a socket"),
        _ => None,
    }
}

impl NotHeld {
    /// The first `max` of `all` as one line, each `PATH (why)`, then how many more (`text::listed`).
    pub fn listed(all: &[NotHeld], max: usize) -> String {
        crate::text::listed(all, max, |n| format!("{} ({})", n.path, n.why))
    }
}

/// A path a checkpoint or a working copy could not hold — a FIFO, a socket, a device, a file past a
/// size — or a revert could not put back, and why, in words. Said wherever it applies (`agentd
/// diff`, a revert's result, a delegation's events and result), never passed over in silence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NotHeld {
    /// The path, relative to the workspace (or the working copy).
    pub path: String,
    /// Why, in words: `a FIFO`, `a socket`, `a character device`, `a block device`, `over the
    /// 256 MiB a working copy carries (1.2 GiB)`, `it has 2 other hard links, which keep the
    /// changed content`…
    pub why: String,
}

/// One file as a checkpoint recorded it. Its path (in a [`FileDelta`], a diff or a revert) is the text
/// of its name's bytes (`crate::path_name`): a name that is not UTF-8 is recorded too.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct FileState {
    /// Its mode as git writes it: `0o100000 | perm` for a regular file (`0o100644`, `0o100755`),
    /// `0o120000` for a symlink; for a special file ([`special_kind`]: a FIFO, a socket, a device),
    /// its type bits alone, its bytes never held (`unkept`).
    pub mode: u32,
    /// The sha256 of its bytes (a symlink's: of its target), lowercase hex.
    pub sha256: String,
    /// Set when its bytes were not kept (`[checkpoints] max_bytes` reached): it can be named and
    /// compared, not restored.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unkept: bool,
}

impl FileState {
    /// Whether this is the same file as `other`: mode and bytes (whether kept or not).
    pub fn same(&self, other: &FileState) -> bool {
        self.mode == other.mode && self.sha256 == other.sha256
    }

    /// Whether it is a symlink.
    pub fn is_symlink(&self) -> bool {
        self.mode & TYPE_MASK == SYMLINK
    }

    /// What it is when it is a special file (a FIFO, a socket, a device), in words.
    pub fn special(&self) -> Option<&'static str> {
        special_kind(self.mode)
    }
}

/// How one file changed between two checkpoints: absent before (added), absent after (deleted), or
/// other bytes or mode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FileDelta {
    /// The file, relative to the workspace.
    pub path: String,
    /// The file before; absent when it did not exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<FileState>,
    /// The file after; absent when it no longer exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<FileState>,
}

impl FileDelta {
    /// How it changed, in one word: `added`, `deleted`, `mode` (the permission bits only) or
    /// `modified`.
    pub fn change(&self) -> &'static str {
        match (&self.before, &self.after) {
            (None, _) => "added",
            (_, None) => "deleted",
            (Some(b), Some(a)) if b.sha256 == a.sha256 => "mode",
            _ => "modified",
        }
    }
}

/// Two checkpoints of one tree and what differs between them.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub struct Change {
    /// The checkpoint before (the sha256 of its root tree).
    pub before: String,
    /// The checkpoint after.
    pub after: String,
    /// The files that differ, sorted by path.
    pub files: Vec<FileDelta>,
    /// Lines added over the text files.
    #[serde(default)]
    pub lines_added: u64,
    /// Lines removed over the text files.
    #[serde(default)]
    pub lines_removed: u64,
}
