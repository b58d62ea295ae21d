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
//! The files the `search` tool sees (the walk of [`crate::copies`] in its `Seen` scope): each
//! directory's `.gitignore`, `.ignore` and `.rgignore` honoured, `.git` and the evidence folder out,
//! symlinks recorded as symlinks and never followed. A name that is not UTF-8 is recorded as the
//! text of its bytes (`agentd_protocol::path_name`) and put back byte for byte. A FIFO, a socket or
//! a device is recorded by its name and kind alone (its entry's mode is its type, its content never
//! held): a diff names it, a revert removes one the task made and says it cannot make one again.
//! Bytes are kept up to a budget (`[checkpoints] max_bytes` a task); past it a file is recorded by
//! its sha256 alone, marked [`FileState::unkept`]: it can be compared, not restored, and a revert
//! that would need it says so. A file with other hard links is listed by [`survey`] (which reads
//! nothing): a command writing it writes the other names too, and a restore puts back this name
//! only.
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
mod survey;
mod sweep;
pub mod tree;

#[cfg(test)]
mod tests;

pub use compare::{compare, lines_changed, unified, Lines};
pub use error::CheckpointError;
pub use objects::{sha256_hex, Objects};
pub use restore::{current, restore, Current};
pub use snapshot::{Snapshot, Snapshotter};
pub use survey::{other_links, survey, Survey};
pub use sweep::sweep_stale_temps;
