//! [`current`] and [`restore`]: one file of the workspace as it is now, and put back as it was.

use super::compare::object;
use super::error::CheckpointError;
use super::objects::{no_content, sha256_hex, Objects};
use crate::error::WorkspaceRefusal;
use crate::workspace::exact::Found;
use crate::Workspace;
use agentd_protocol::checkpoint::{FileState, REGULAR, SYMLINK};
use std::path::Path;

/// What stands at a path of the workspace now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Current {
    /// As a checkpoint would record it: `None` for nothing there; a special file as a checkpoint
    /// names one (its type, no content); a directory in its place is `Some` with mode 0 (no
    /// checkpoint has it, so it is never the same as a recorded state).
    pub state: Option<FileState>,
    /// How many names a regular file there has (more than one: a restore puts back this name, the
    /// others keep what they hold); 0 for nothing there, 1 for anything else.
    pub links: u64,
}

/// What stands at `path` in the workspace now ([`Current`]).
pub fn current<E>(workspace: &Workspace, path: &str) -> Result<Current, CheckpointError<E>>
where
    E: std::error::Error + Send + Sync + 'static,
{
    let found = workspace.found_exact(path).map_err(WorkspaceRefusal::of("read", path))?;
    let (state, links) = match found {
        Found::Missing => (None, 0),
        Found::File { mode, bytes, links } => {
            (Some(FileState { mode: REGULAR | mode, sha256: sha256_hex(&bytes), unkept: false }), links)
        }
        Found::Symlink(target) => {
            (Some(FileState { mode: SYMLINK, sha256: sha256_hex(&target), unkept: false }), 1)
        }
        Found::Special(mode) => (Some(FileState { mode, sha256: no_content(), unkept: true }), 1),
        Found::Dir | Found::Blocked(_) => {
            (Some(FileState { mode: 0, sha256: String::new(), unkept: false }), 1)
        }
    };
    Ok(Current { state, links })
}

/// Puts `path` back as `target` says: its bytes and mode from the object store, or removed (and its
/// directories, while they are empty) for `None` (a special file included). A special file as
/// `target` cannot be made again: [`CheckpointError::Special`]. Every write crosses no symlink: a symlink standing
/// at the path is replaced, never written through.
pub fn restore<O: Objects>(
    workspace: &Workspace,
    objects: &O,
    path: &str,
    target: Option<&FileState>,
) -> Result<(), CheckpointError<O::Error>> {
    let refused = |op: &'static str| {
        let refusal = WorkspaceRefusal::of(op, path);
        move |source| CheckpointError::Workspace(refusal(source))
    };
    let Some(target) = target else {
        workspace.remove(path).map_err(refused("remove"))?;
        let mut dir = Path::new(path).parent();
        while let Some(d) = dir.filter(|d| !d.as_os_str().is_empty()) {
            if !workspace
                .remove_empty_dir(&d.to_string_lossy())
                .map_err(refused("remove the directory of"))?
            {
                break;
            }
            dir = d.parent();
        }
        return Ok(());
    };
    if let Some(what) = target.special() {
        return Err(CheckpointError::Special { path: path.to_string(), what });
    }
    if target.unkept {
        return Err(CheckpointError::NotKept { path: path.to_string() });
    }
    let bytes = object(objects, &target.sha256)?;
    if target.is_symlink() {
        workspace.symlink_exact(path, &bytes).map_err(refused("make the symlink"))
    } else {
        workspace.write_exact(path, &bytes, target.mode & 0o7777).map_err(refused("write"))
    }
}
