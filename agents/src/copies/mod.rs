//! Working copies: each parallel writer of a team works in its own copy of the task's workspace, and
//! its changes come back as a patch merged three-way.
//!
//! # Why copies
//!
//! Two agents editing one directory at once see each other's half-made changes: a build started by
//! one runs over the other's half-written file, and two edits of one file race. So each writer gets
//! a directory of its own, a copy of the workspace, made when its work starts; what it changed is
//! brought back when it finishes, and a change that meets another writer's is reported, never
//! silently lost or overwritten.
//!
//! # The life of a copy
//!
//! 1. [`make_copy`]`(workspace, base)` and [`make_copy`]`(workspace, copy)` (or of the base): two
//!    copies of the same moment. The base stays untouched: it is what the copy started from, the
//!    common ancestor of the three-way merge. The writer's tools and commands run in the copy.
//! 2. [`changes`]`(base, copy)`: what the copy changed, as a [`Patch`]: the files
//!    ([`FileChange`]: added, modified, mode changed, deleted, renamed) and the same as a git-style
//!    unified diff (`git apply` reads it), with its line counts. It is what the lead reviews.
//! 3. [`merge`]`(base, copy, &patch, &workspace)`: each changed file is brought into the workspace,
//!    three-way: with B the base's version, W the workspace's as it stands now (other writers may have
//!    merged since) and C the copy's — W = C is already done, W = B takes C, and when both changed it
//!    a text file is merged line by line (`similar`'s three-way merge). What cannot merge is a
//!    [`Conflict`], with the workspace's and the copy's lines of each clashing hunk and the line in the
//!    workspace's file; its file is left untouched. [`Merged`] lists what was applied, what was
//!    already there, and the conflicts.
//! 4. The copy and its base are removed ([`remove_copy`]: `std::fs::remove_dir_all`, read-only
//!    directories made writable first).
//!
//! A merge repeated (after a crash in the middle of one) finds what was merged already there and
//! does the rest: no journal is needed.
//!
//! # Which files
//!
//! A copy holds what the workspace holds, what git ignores included: the `.env`, the `node_modules`,
//! the build outputs a branch's build and tests need are there, and whatever the branch writes — at
//! an ignored path too — comes back in its patch, as it would for a writer alone in the workspace.
//! `.git` stays out (a copy is not a checkout: the writer's commits would have nowhere to go), and so
//! does the evidence folder ([`agentd_protocol::task::EVIDENCE_FOLDER`]). Directories are copied,
//! empty ones included, but are not changes of their own. A name that is not UTF-8 is copied and
//! carried back byte for byte (named by `agentd_protocol::path_name`'s text).
//!
//! What a copy cannot carry is named, never passed over: a FIFO, a socket or a device (in the
//! workspace: [`Made::left_out`], said to the branch; made by the branch: [`Patch::left_out`], said to
//! the lead), and a file over [`MAX_COPIED_FILE`] either way.
//!
//! # Cost
//!
//! A file is copied with `copy_file_range`, which on btrfs or XFS shares the extents (a reflink: no
//! data is written) and elsewhere copies in the kernel. A branch's copy is made twice (the base it
//! started from, and the copy it works in), so on a filesystem without reflinks it costs twice the
//! workspace's bytes, ignored ones included — a large `node_modules` or `target/` with them.
//! `changes` reads both trees' directories and compares only files whose size and mode match byte by
//! byte, stopping at the first difference. `examples/bench_copies.rs` measures all of it against `git
//! worktree add`.
//!
//! # Symlinks and confinement
//!
//! Nothing here follows a symlink. A symlink is copied as a symlink, and is a file whose content is
//! its target text (mode `120000` in the diff, as git has it). Every directory is opened relative to
//! its parent's descriptor with `O_NOFOLLOW`. In the workspace, every read, write, deletion and mode
//! change of a merge goes beneath the [`Workspace`](crate::Workspace)'s root descriptor crossing no
//! symlink: a symlink planted at a changed path, or on a directory of it, makes that path a conflict
//! (what stands there is neither the base's file nor the copy's); one planted between the merge's
//! read and its write makes the write fail. In no case is anything written through it.

mod conflict;
mod error;
mod make;
mod merge;
mod patch;
pub(crate) mod unified;
pub(crate) mod walk;

#[cfg(test)]
mod tests;

pub use conflict::{Conflict, ConflictHunk, ConflictKind};
pub use error::CopyError;
pub use make::{make_copy, remove_copy, Made, MAX_COPIED_FILE};
pub use merge::{merge, Merged};
pub use patch::{changes, Change, FileChange, Patch, MAX_PATCH_TEXT};
