//! `list_dir`: one directory, not recursive. Blocking; the dispatcher runs it on the blocking pool.
//! (`search`, the recursive one, is `super::search`; it reads directories with [`entries_of`].)
//!
//! The directory is read through a descriptor opened beneath the workspace root, and its entries'
//! types come from that descriptor (`lstat` relative to it): a symlink is never followed. `list_dir`
//! shows a symlink as `name -> target` (its target is read, not opened).

use super::outcome::ToolOutcome;
use crate::error::ToolError;
use crate::workspace::Workspace;
use agentd_policies::args::Args;
use rustix::fd::OwnedFd;
use rustix::fs::{self as rfs, AtFlags, Dir, FileType};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

/// Entries shown by `list_dir` before the rest are counted instead.
pub(crate) const MAX_ENTRIES: usize = 1000;

/// `list_dir`'s arguments.
#[derive(Debug)]
pub(crate) struct ListArgs<'a> {
    pub(crate) path: &'a str,
}

impl<'a> ListArgs<'a> {
    pub(crate) fn parse(args: &'a Args) -> Result<ListArgs<'a>, ToolError> {
        Ok(ListArgs { path: args.str("path")? })
    }
}

pub(crate) fn list_dir(ws: &Workspace, args: &Args) -> Result<ToolOutcome, ToolError> {
    let ListArgs { path } = ListArgs::parse(args)?;
    let opened = ws.open(path)?;
    if opened.kind() != FileType::Directory {
        return Err(ToolError::Failed(format!("{path} is not a directory; use read_file")));
    }
    let mut entries = Vec::new();
    for (name, kind) in entries_of(path, &opened.fd)? {
        let mut shown = name.to_string_lossy().into_owned();
        match kind {
            FileType::Directory => shown.push('/'),
            // The link itself, not followed: its target is read, never opened.
            FileType::Symlink => {
                if let Ok(target) = rfs::readlinkat(&opened.fd, name.as_os_str(), Vec::new()) {
                    shown.push_str(" -> ");
                    shown.push_str(&String::from_utf8_lossy(target.as_bytes()));
                }
            }
            _ => {}
        }
        entries.push(shown);
    }
    if entries.is_empty() {
        return Ok(ToolOutcome::ok(format!("{path} is empty")));
    }
    entries.sort();
    let more = entries.len().saturating_sub(MAX_ENTRIES);
    entries.truncate(MAX_ENTRIES);
    let mut content = entries.join("\n");
    if more > 0 {
        content.push_str(&format!("\n... {more} more entries not shown"));
    }
    Ok(ToolOutcome::ok(content))
}

/// The entries of the open directory `dir` (without `.` and `..`) and their types, not following
/// symlinks (`lstat` relative to `dir` where the directory does not say).
pub(crate) fn entries_of(path: &str, dir: &OwnedFd) -> Result<Vec<(OsString, FileType)>, ToolError> {
    entries(dir).map_err(|e| ToolError::io(path, &std::io::Error::from(e)))
}

/// [`entries_of`] with the system's error: what a working copy's walk reads a directory with too.
pub(crate) fn entries(dir: &OwnedFd) -> Result<Vec<(OsString, FileType)>, rustix::io::Errno> {
    let mut entries = Vec::new();
    for entry in Dir::read_from(dir)? {
        let entry = entry?;
        let name = OsStr::from_bytes(entry.file_name().to_bytes());
        if name == "." || name == ".." {
            continue;
        }
        let kind = match entry.file_type() {
            FileType::Unknown => match rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => FileType::from_raw_mode(st.st_mode),
                Err(_) => continue,
            },
            kind => kind,
        };
        entries.push((name.to_os_string(), kind));
    }
    Ok(entries)
}
