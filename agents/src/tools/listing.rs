//! The finding tools: `list_dir` (one directory, not recursive) and `search` (a plain substring,
//! recursive). Blocking; the dispatcher runs them on the blocking pool.
//!
//! Both read directories through descriptors opened beneath the workspace root, and every entry is
//! opened relative to its directory's descriptor with `O_NOFOLLOW`: a symlink is never followed.
//! `list_dir` shows a symlink as `name -> target` (its target is read, not opened); `search` skips
//! symlinks and hard-linked files.

use super::args::Args;
use super::ToolOutcome;
use crate::error::ToolError;
use crate::text::truncate_chars;
use crate::workspace::{open_entry, refuse_hard_link, Opened, Workspace};
use agentd_protocol::ToolName;
use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{self as rfs, AtFlags, Dir, FileType, Stat};
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

/// Entries shown by `list_dir` before the rest are counted instead.
pub(crate) const MAX_ENTRIES: usize = 1000;
/// Matches shown by `search` before the rest are counted instead.
pub(crate) const MAX_MATCHES: usize = 200;
/// Files larger than this are not searched.
pub(crate) const MAX_SEARCH_FILE_BYTES: u64 = 2 * 1024 * 1024;
/// Characters of a matching line shown.
const MAX_LINE_CHARS: usize = 300;
/// Directories `search` does not descend into.
const SKIPPED_DIRS: &[&str] = &[".git", "target", "node_modules"];
/// A NUL byte in this many leading bytes marks a file as binary.
const BINARY_SNIFF_BYTES: usize = 8192;

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

/// `search`'s arguments, checked: `pattern` is not empty; `path` defaults to the root.
#[derive(Debug)]
pub(crate) struct SearchArgs<'a> {
    pub(crate) pattern: &'a str,
    pub(crate) path: &'a str,
}

impl<'a> SearchArgs<'a> {
    pub(crate) fn parse(args: &'a Args) -> Result<SearchArgs<'a>, ToolError> {
        let pattern = args.str("pattern")?;
        if pattern.is_empty() {
            return Err(ToolError::InvalidArguments {
                tool: ToolName::Search.into(),
                message: "`pattern` must not be empty".into(),
            });
        }
        Ok(SearchArgs { pattern, path: args.opt_str("path")?.unwrap_or(".") })
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
fn entries_of(path: &str, dir: &OwnedFd) -> Result<Vec<(OsString, FileType)>, ToolError> {
    let io = |e: rustix::io::Errno| ToolError::io(path, &std::io::Error::from(e));
    let mut entries = Vec::new();
    for entry in Dir::read_from(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
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

pub(crate) fn search(ws: &Workspace, args: &Args) -> Result<ToolOutcome, ToolError> {
    let SearchArgs { pattern, path } = SearchArgs::parse(args)?;
    let opened = ws.open(path)?;
    let mut shown = Vec::new();
    let mut total = 0usize;
    files_under(opened, &mut |rel, fd, stat| {
        let Some(text) = searchable_text(fd, stat) else {
            return;
        };
        for (i, line) in text.lines().enumerate() {
            if line.contains(pattern) {
                total += 1;
                if shown.len() < MAX_MATCHES {
                    shown.push(format!(
                        "{rel}:{}: {}",
                        i + 1,
                        truncate_chars(line.trim_end(), MAX_LINE_CHARS)
                    ));
                }
            }
        }
    });
    if total == 0 {
        return Ok(ToolOutcome::ok(format!("no matches for {pattern:?} in {path}")));
    }
    let mut content = shown.join("\n");
    if total > shown.len() {
        content.push_str(&format!("\n... {} more matches not shown", total - shown.len()));
    }
    Ok(ToolOutcome::ok(content))
}

/// A directory still to be read: its parent's descriptor (shared by its siblings), its name there,
/// and its path for display.
struct Pending {
    parent: Arc<OwnedFd>,
    name: OsString,
    shown: String,
}

/// Visits the regular files at or under `start`, in sorted order, each opened relative to its
/// directory's descriptor without following symlinks, with its `fstat` and its path for display.
/// Symlinks are skipped (no cycles, no way out), so are hard-linked files and `SKIPPED_DIRS` below
/// the start. Unreadable directories are skipped. Descriptors held open: one file at a time, and one
/// directory per level with entries still to visit.
fn files_under(start: Opened, visit: &mut dyn FnMut(&str, OwnedFd, &Stat)) {
    match start.kind() {
        FileType::RegularFile => {
            if refuse_hard_link(&start.shown, &start.stat).is_ok() {
                visit(&start.shown, start.fd, &start.stat);
            }
            return;
        }
        FileType::Directory => {}
        _ => return,
    }
    let join = |dir: &str, name: &OsStr| {
        let name = name.to_string_lossy();
        if dir == "." {
            name.into_owned()
        } else {
            format!("{dir}/{name}")
        }
    };
    let mut stack: Vec<(OwnedFd, String)> = vec![(start.fd, start.shown)];
    let mut pending: Vec<Pending> = Vec::new();
    loop {
        let (dir, shown) = match stack.pop() {
            Some(next) => next,
            None => match pending.pop() {
                Some(p) => match open_entry(p.parent.as_fd(), &p.name) {
                    Ok((fd, stat)) if FileType::from_raw_mode(stat.st_mode) == FileType::Directory => {
                        (fd, p.shown)
                    }
                    _ => continue,
                },
                None => break,
            },
        };
        let Ok(mut entries) = entries_of(&shown, &dir) else {
            continue;
        };
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        let dir = Arc::new(dir);
        let mut subdirs = Vec::new();
        for (name, kind) in entries {
            match kind {
                FileType::Directory if !SKIPPED_DIRS.iter().any(|s| name == *s) => {
                    let shown = join(&shown, &name);
                    subdirs.push(Pending { parent: Arc::clone(&dir), name, shown });
                }
                FileType::RegularFile => {
                    // Opened no-follow: an entry swapped for a symlink since the listing is skipped.
                    let Ok((fd, stat)) = open_entry(dir.as_fd(), &name) else {
                        continue;
                    };
                    if FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile
                        && refuse_hard_link("", &stat).is_ok()
                    {
                        visit(&join(&shown, &name), fd, &stat);
                    }
                }
                _ => {}
            }
        }
        // Reversed so the stack pops them in sorted order.
        pending.extend(subdirs.into_iter().rev());
    }
}

/// The file's text, or `None` when it is too large, unreadable or binary (a NUL byte near the start).
fn searchable_text(fd: OwnedFd, stat: &Stat) -> Option<String> {
    let len = u64::try_from(stat.st_size).ok()?;
    if len > MAX_SEARCH_FILE_BYTES {
        return None;
    }
    let mut bytes = Vec::with_capacity(len as usize);
    fs::File::from(fd).take(MAX_SEARCH_FILE_BYTES).read_to_end(&mut bytes).ok()?;
    if bytes[..bytes.len().min(BINARY_SNIFF_BYTES)].contains(&0) {
        return None;
    }
    Some(String::from_utf8_lossy(&bytes).into_owned())
}
