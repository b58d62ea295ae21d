//! [`merge`]: a copy's changes brought into the workspace, three-way against the base.

use super::conflict::{diff_hunks, merge_hunks, Conflict, ConflictHunk, ConflictKind};
use super::error::CopyError;
use super::patch::{Change, Patch};
use super::unified::{is_text, REGULAR, SYMLINK, TYPE_MASK};
use super::walk::{open_root, text_parts};
use crate::error::WorkspaceRefusal;
use crate::workspace::exact::{found_beneath, Found, Staged};
use crate::workspace::Workspace;
use rustix::fd::{AsFd, OwnedFd};
use serde::{Deserialize, Serialize};
use similar::TextMerge;
use std::path::Path;

/// What a [`merge`] did, by path (a rename is two paths: the new one written, the old one deleted).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Merged {
    /// Files the merge wrote, deleted or changed the mode of, sorted.
    pub applied: Vec<String>,
    /// Files already as the copy has them (nothing to do: a merge repeated after a crash), sorted.
    pub already: Vec<String>,
    /// Files not merged, left exactly as they were, sorted by path.
    pub conflicts: Vec<Conflict>,
}

/// Merges the changes `patch` names (made by [`changes`](super::changes) of `copy` against `base`)
/// into `workspace`, three-way against the base. For each changed path, with B the base's file, W the
/// workspace's as it stands and C the copy's (a symlink's content is its target; "absent" is absent):
///
/// - W = C (bytes and mode, or both absent): already merged, nothing is done.
/// - W = B: the copy's version is taken (written, deleted or its mode set).
/// - Otherwise both changed it: a text file is merged line by line (the mode three-way too), and a
///   clean merge is written; overlapping (or adjacent) changes are a [`ConflictKind::BothChanged`]
///   with its hunks; a deletion against a change, an addition against another, a binary file both
///   changed are conflicts of their kinds. A conflicting file is never touched.
///
/// Every path is read and decided first, then the deletions are made (with the directories they
/// leave empty that the copy no longer has), then the writes: each file staged beside its path under
/// a temporary name, made durable, renamed into place, made durable again (`apply`: an fsync each for a
/// few files, two `syncfs` for many) — a file in its place is always whole. All of them go beneath the workspace's
/// root descriptor crossing no symlink: a symlink planted at a changed path is replaced, never
/// written through, and a symlink on a directory of the path makes the path a conflict (or, planted
/// between the read and the write, refuses the write). A written file takes the
/// copy's mode; missing directories are made. An error stops the merge where it is; what was merged
/// stays, and a merge repeated finds it `already` there.
///
/// The patch says which paths to merge; their contents are read from `base` and `copy` as they are
/// now (so the copy must not change between [`changes`](super::changes) and the merge). Two merges
/// into one workspace must not run at once: each reads, then writes.
pub fn merge(base: &Path, copy: &Path, patch: &Patch, workspace: &Workspace) -> Result<Merged, CopyError> {
    let base_fd = open_root(base)?;
    let copy_fd = open_root(copy)?;
    let mut paths: Vec<&str> = Vec::new();
    for file in &patch.files {
        paths.push(&file.path);
        if let Change::Renamed { from, .. } = &file.change {
            paths.push(from);
        }
    }
    paths.sort_unstable();
    paths.dedup();
    let mut merged = Merged { applied: Vec::new(), already: Vec::new(), conflicts: Vec::new() };
    let mut actions = Vec::new();
    for path in paths {
        let b = tree_state(&base_fd, base, path)?;
        let c = tree_state(&copy_fd, copy, path)?;
        let w = workspace_state(workspace, path)?;
        match decide(b, w, c) {
            Plan::Already => merged.already.push(path.to_string()),
            Plan::Apply(action) => actions.push((path, action)),
            Plan::Conflict(kind, hunks) => {
                merged.conflicts.push(Conflict { path: path.to_string(), kind, hunks })
            }
        }
    }
    // Deletions first: a file may give way to a directory of the same name, or the reverse.
    actions.sort_by_key(|(_, action)| !matches!(action, Action::Delete));
    let mut staged = Vec::new();
    let applied = apply(workspace, (copy, &copy_fd), actions, &mut merged.applied, &mut staged);
    for (_, left) in &staged {
        workspace.discard(left);
    }
    applied?;
    merged.applied.sort();
    Ok(merged)
}

/// Up to this many files and symlinks, a merge fsyncs each staged file and then each directory it
/// changed; past it, it syncs the filesystem twice instead (`syncfs` writes back everything dirty on
/// the filesystem — the copy just made included — which costs more than a few fsyncs, and far less
/// than thousands).
const FSYNC_EACH_UP_TO: usize = 64;

/// Makes the merge's changes: the deletions, then every file and symlink staged beside its path,
/// made durable, each renamed into place and each mode set, made durable again — by an fsync each for
/// a few files ([`FSYNC_EACH_UP_TO`]), by two `syncfs` for many. A file in its place is always whole.
/// What is applied is pushed on `applied`; what was staged and not renamed is left in `staged` for the
/// caller to discard.
fn apply<'p>(
    workspace: &Workspace,
    (copy, copy_fd): (&Path, &OwnedFd),
    actions: Vec<(&'p str, Action)>,
    applied: &mut Vec<String>,
    staged: &mut Vec<(&'p str, Staged)>,
) -> Result<(), CopyError> {
    let mut chmods = Vec::new();
    let each = actions.len() <= FSYNC_EACH_UP_TO;
    for (path, action) in actions {
        match action {
            Action::Delete => {
                workspace.remove_unsynced(path).map_err(WorkspaceRefusal::of("remove", path))?;
                remove_emptied_dirs(workspace, copy_fd, path)?;
                applied.push(path.to_string());
            }
            Action::Write { mode, content } => {
                let bytes = match content {
                    Content::Bytes(bytes) => bytes,
                    Content::Copy => match tree_state(copy_fd, copy, path)? {
                        State::Present { bytes, .. } => bytes,
                        _ => {
                            return Err(CopyError::Io {
                                op: "read",
                                path: copy.join(path),
                                source: std::io::Error::other("it changed in the copy during the merge"),
                            })
                        }
                    },
                };
                let file = workspace
                    .stage_exact(path, &bytes, mode, each)
                    .map_err(WorkspaceRefusal::of("write", path))?;
                staged.push((path, file));
            }
            Action::Link(target) => {
                let link = workspace
                    .stage_symlink_exact(path, &target)
                    .map_err(WorkspaceRefusal::of("make the symlink", path))?;
                staged.push((path, link));
            }
            Action::Chmod(mode) => chmods.push((path, mode)),
        }
    }
    if !each {
        workspace.sync().map_err(WorkspaceRefusal::of("sync", "."))?;
    }
    let mut placing = std::mem::take(staged).into_iter();
    while let Some((path, file)) = placing.next() {
        if let Err(e) = workspace.commit(&file) {
            staged.extend(placing);
            return Err(WorkspaceRefusal::of("write", path)(e).into());
        }
        applied.push(path.to_string());
    }
    for (path, mode) in chmods {
        workspace.set_mode(path, mode).map_err(WorkspaceRefusal::of("set the mode of", path))?;
        applied.push(path.to_string());
    }
    if each {
        // Each directory a rename or a removal changed, once (by one of the paths in it).
        let mut dirs: Vec<(&str, &str)> =
            applied.iter().map(|p| (p.rsplit_once('/').map_or("", |(dir, _)| dir), p.as_str())).collect();
        dirs.sort_unstable();
        dirs.dedup_by(|a, b| a.0 == b.0);
        for (_, path) in dirs {
            workspace.sync_parent(path).map_err(WorkspaceRefusal::of("sync the directory of", path))?;
        }
    } else {
        workspace.sync().map_err(WorkspaceRefusal::of("sync", "."))?;
    }
    Ok(())
}

/// A path's state in one of the three trees. A symlink is `Present` with mode [`SYMLINK`] and its
/// target as bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Absent,
    Present {
        mode: u32,
        bytes: Vec<u8>,
    },
    /// In the workspace only: something no file may be merged over (a directory, a special file, a
    /// hard-linked file, a symlink or a file where a directory of the path should be).
    Other,
}

impl State {
    /// The text of a regular text file; `None` for anything else.
    fn text(&self) -> Option<&str> {
        match self {
            State::Present { mode, bytes } if mode & TYPE_MASK == REGULAR && is_text(bytes) => {
                std::str::from_utf8(bytes).ok()
            }
            _ => None,
        }
    }

    /// Whether this is a regular file holding binary content.
    fn binary(&self) -> bool {
        matches!(self, State::Present { mode, bytes } if mode & TYPE_MASK == REGULAR && !is_text(bytes))
    }
}

/// What to do with a path.
enum Plan {
    Already,
    Apply(Action),
    Conflict(ConflictKind, Vec<ConflictHunk>),
}

/// A change to make in the workspace.
enum Action {
    Delete,
    Write { mode: u32, content: Content },
    Link(Vec<u8>),
    Chmod(u32),
}

/// What a file is written with: the copy's file, read again when it is written (so a merge holds no
/// more than one such file in memory), or bytes the merge made.
enum Content {
    Copy,
    Bytes(Vec<u8>),
}

/// The path's state in a base or a copy: a directory, or anything but a file or a symlink, there is
/// no file.
fn tree_state(root: &OwnedFd, dir: &Path, path: &str) -> Result<State, CopyError> {
    let found =
        found_beneath(root.as_fd(), &text_parts(path)).map_err(CopyError::io("read", &dir.join(path)))?;
    Ok(match found {
        Found::File { mode, bytes, .. } => State::Present { mode: REGULAR | mode, bytes },
        Found::Symlink(target) => State::Present { mode: SYMLINK, bytes: target },
        Found::Missing | Found::Dir | Found::Special(_) | Found::Blocked(_) => State::Absent,
    })
}

/// The path's state in the workspace, read beneath its root with no symlink crossed.
fn workspace_state(workspace: &Workspace, path: &str) -> Result<State, CopyError> {
    let found = workspace.found_exact(path).map_err(WorkspaceRefusal::of("read", path))?;
    Ok(match found {
        Found::Missing => State::Absent,
        Found::File { links, .. } if links > 1 => State::Other,
        Found::File { mode, bytes, .. } => State::Present { mode: REGULAR | mode, bytes },
        Found::Symlink(target) => State::Present { mode: SYMLINK, bytes: target },
        Found::Dir | Found::Special(_) | Found::Blocked(_) => State::Other,
    })
}

/// The merge rules of one path (see [`merge`]).
fn decide(b: State, w: State, c: State) -> Plan {
    if w == c {
        return Plan::Already;
    }
    if w == b {
        return Plan::Apply(take(&w, c, true));
    }
    match (&b, &w, &c) {
        // Neither the base nor the copy has it: the copy has nothing to say.
        (State::Absent, _, State::Absent) => Plan::Already,
        // Something no file is merged over stands where the copy has a file.
        (_, State::Other, State::Present { .. }) => Plan::Conflict(ConflictKind::BothChanged, Vec::new()),
        (State::Absent, _, _) => {
            let hunks = match (w.text(), c.text()) {
                (Some(w), Some(c)) => diff_hunks(w, c, true),
                _ => Vec::new(),
            };
            Plan::Conflict(ConflictKind::BothAdded, hunks)
        }
        (_, _, State::Absent) => {
            let hunks = match (w.text(), b.text()) {
                (Some(w), Some(b)) => diff_hunks(w, b, false),
                _ => Vec::new(),
            };
            Plan::Conflict(ConflictKind::ChangedHereDeletedThere, hunks)
        }
        (_, State::Absent, _) => Plan::Conflict(ConflictKind::DeletedHereChangedThere, Vec::new()),
        (
            State::Present { mode: bm, bytes: bb },
            State::Present { mode: wm, bytes: wb },
            State::Present { mode: cm, bytes: cb },
        ) => {
            let (bytes, copys) = if wb == bb {
                (cb.clone(), true)
            } else if cb == bb || cb == wb {
                (wb.clone(), false)
            } else if let (Some(bt), Some(wt), Some(ct)) = (b.text(), w.text(), c.text()) {
                let lines = TextMerge::from_lines(bt, wt, ct);
                if lines.is_conflicted() {
                    return Plan::Conflict(ConflictKind::BothChanged, merge_hunks(&lines));
                }
                (lines.to_string().into_bytes(), false)
            } else if b.binary() || w.binary() || c.binary() {
                return Plan::Conflict(ConflictKind::Binary, Vec::new());
            } else {
                return Plan::Conflict(ConflictKind::BothChanged, Vec::new());
            };
            let mode = if wm == bm {
                *cm
            } else if cm == bm || cm == wm {
                *wm
            } else {
                return Plan::Conflict(ConflictKind::BothChanged, Vec::new());
            };
            let result = State::Present { mode, bytes };
            if result == w {
                Plan::Already
            } else {
                Plan::Apply(take(&w, result, copys))
            }
        }
        // Unreachable after the arms above; a conflict, should it ever be reached.
        _ => Plan::Conflict(ConflictKind::BothChanged, Vec::new()),
    }
}

/// The action that makes the workspace's `w` into `to` (whose bytes are the copy's file's when
/// `copys`).
fn take(w: &State, to: State, copys: bool) -> Action {
    match to {
        State::Absent | State::Other => Action::Delete,
        State::Present { mode, bytes } if mode & TYPE_MASK == SYMLINK => Action::Link(bytes),
        State::Present { mode, bytes } => match w {
            State::Present { mode: wm, bytes: wb } if wm & TYPE_MASK == REGULAR && *wb == bytes => {
                Action::Chmod(mode & 0o7777)
            }
            _ => {
                let content = if copys { Content::Copy } else { Content::Bytes(bytes) };
                Action::Write { mode: mode & 0o7777, content }
            }
        },
    }
}

/// After `path` was deleted: removes its directories, deepest first, while they are empty and the
/// copy has no directory of that path.
fn remove_emptied_dirs(workspace: &Workspace, copy: &OwnedFd, path: &str) -> Result<(), CopyError> {
    let mut dir = Path::new(path).parent();
    while let Some(d) = dir.filter(|d| !d.as_os_str().is_empty()) {
        let in_copy = found_beneath(copy.as_fd(), &text_parts(&d.to_string_lossy()))
            .map_err(CopyError::io("look at", d))?;
        if in_copy == Found::Dir {
            break;
        }
        let rel = d.to_string_lossy();
        if !workspace.remove_empty_dir(&rel).map_err(WorkspaceRefusal::of("remove the directory", &rel))? {
            break;
        }
        dir = d.parent();
    }
    Ok(())
}
