//! Checkpoints of a workspace: its state recorded before and after each writing call, cheaply, so
//! that what any call changed — a `sed -i` over forty files included — can be shown and taken back.
//!
//! # Objects
//!
//! A checkpoint is a tree of content-addressed objects, as git keeps a commit's tree, but in an
//! object store of agentd's own ([`Objects`], the engine's storage seam: sled and blob files on one
//! machine, the object store in a fleet) — never the user's `.git`: no commit, stash or index change.
//!
//! - a file's object is its bytes (a symlink's: its target text), named by their sha256;
//! - a directory's object is its listing ([`tree`]): for each entry, in name order, its mode (as
//!   git writes it: `100644`, `100755`, `120000`, `40000` for a directory), its object's sha256, and
//!   its name; named by the sha256 of the listing;
//! - the checkpoint is the sha256 of the root directory's object.
//!
//! Identical content is one object, so a checkpoint stores only what changed since the last one: the
//! changed files' objects and the listings of the directories above them.
//!
//! # Cost
//!
//! [`Snapshotter`] remembers, for each file it hashed, the file's `stat` identity (device, inode,
//! size, modification and status-change times, mode): a file whose identity is unchanged is not read
//! again (git's index does the same). A checkpoint after a call that changed one file reads one
//! file, `stat`s the rest, and writes that file's object and a few listings. The first checkpoint of a
//! task reads every file and stores what the store does not hold yet; the objects are synced once per
//! checkpoint ([`Objects::sync`]), not once per file.
//!
//! # Which files
//!
//! The files the `search` tool and a working copy see (the walk of [`crate::copies`]): each
//! directory's `.gitignore`, `.ignore` and `.rgignore` honoured, `.git` and the evidence folder out,
//! symlinks recorded as symlinks and never followed. A file whose name is not UTF-8 is passed over (a
//! diff names files as text). Bytes are kept up to a budget (`[checkpoints] max_bytes` a task); past
//! it a file is recorded by its sha256 alone, marked [`FileState::unkept`]: it can be compared, not
//! restored, and a revert that would need it says so.
//!
//! # Comparing and restoring
//!
//! [`compare`] walks two checkpoints' trees together, passing over every directory whose object is
//! the same on both sides, and yields the files that differ ([`FileDelta`]). [`restore`] puts one
//! file back beneath the workspace's root descriptor, crossing no symlink (the writes of
//! [`crate::copies`]' merge), and [`current`] reads what a path holds now, to tell whether the user
//! changed it since.

mod compare;
mod error;
mod objects;
mod restore;
mod snapshot;
pub mod tree;

#[cfg(test)]
mod tests;

pub use compare::{compare, lines_changed, unified, Lines};
pub use error::CheckpointError;
pub use objects::{sha256_hex, Objects};
pub use restore::{current, restore};
pub use snapshot::{Snapshot, Snapshotter};
