//! The walk of a tree that the working copies and the checkpoints share, in one of two [`Scope`]s:
//!
//! - [`Scope::Whole`] (a working copy, and its patch): every entry but `.git` (a directory, or the
//!   file of a linked worktree) and [`EVIDENCE_FOLDER`] at the root — what git ignores included, so a
//!   branch has the `.env`, the `node_modules` and the build outputs the workspace has, and whatever
//!   it writes there comes back.
//! - [`Scope::Seen`] (a checkpoint): the files the `search` tool sees, hidden ones included: a
//!   directory's `.gitignore`, `.ignore` and `.rgignore` are read through its descriptor and apply to
//!   everything below it, the innermost rule deciding (the rules of `crate::tools::search`, whose
//!   matcher this reuses): no ignore file above the root, no global git excludes; `.git` and the
//!   evidence folder left out as above.
//!
//! Every directory is opened relative to its parent's descriptor with `O_NOFOLLOW`, and entries are
//! handed to the visitor as (parent descriptor, name): a symlink is reported as one, never followed,
//! and a directory swapped for a symlink while the walk runs is passed over.

use super::error::CopyError;
use crate::tools::search::{ignore_rules, Rules};
use agentd_protocol::checkpoint::{BLOCK_DEVICE, CHAR_DEVICE, FIFO, SOCKET};
use agentd_protocol::task::EVIDENCE_FOLDER;
use ignore::Match;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{self as rfs, FileType, Mode, OFlags};
use rustix::io::Errno;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// Where an entry is: its directory, open, its name in it, and its path from the root.
pub(crate) struct At<'a> {
    /// The directory holding the entry.
    pub(crate) parent: BorrowedFd<'a>,
    /// The entry's name in `parent`.
    pub(crate) name: &'a OsStr,
    /// The entry's path relative to the root.
    pub(crate) rel: &'a Path,
}

/// Which entries a walk takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Everything but `.git` and the evidence folder: what git ignores included.
    Whole,
    /// What the `search` tool sees: the tree's ignore files honoured.
    Seen,
}

/// What the walk tells about the entries it takes, in sorted order, depth first.
pub(crate) trait Visitor {
    /// A directory, opened (read-only, no-follow). When this says yes (as it does unless a visitor
    /// says otherwise) its entries come next, then [`Visitor::left`]; when no, the walk passes over it.
    fn entered(&mut self, _at: &At<'_>, _dir: &OwnedFd) -> Result<bool, CopyError> {
        Ok(true)
    }
    /// The directory at `rel`, entered before, has no more entries.
    fn left(&mut self, _rel: &Path) -> Result<(), CopyError> {
        Ok(())
    }
    /// A regular file (as the directory listed it: the visitor opens it no-follow to be sure).
    fn file(&mut self, at: &At<'_>) -> Result<(), CopyError>;
    /// A symlink, not followed.
    fn symlink(&mut self, at: &At<'_>) -> Result<(), CopyError>;
    /// A FIFO, a socket or a device: `mode` holds its type bits (`agentd_protocol::checkpoint::FIFO`…).
    fn special(&mut self, at: &At<'_>, mode: u32) -> Result<(), CopyError>;
}

/// Opens the root of a tree: a directory (the path itself may go through symlinks: it is the
/// caller's).
pub(crate) fn open_root(root: &Path) -> Result<OwnedFd, CopyError> {
    rfs::open(root, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
        .map_err(CopyError::errno("open the directory", root))
}

/// A directory being read: its descriptor, its paths, its rules (none in [`Scope::Whole`]) and its
/// entries still to visit (sorted, last first).
struct Level {
    dir: OwnedFd,
    rel: PathBuf,
    abs: PathBuf,
    rules: Option<Rc<Rules>>,
    entries: Vec<(OsString, FileType)>,
}

/// Walks the tree at `root` (open as `root_fd`), telling `visitor` about every directory, regular
/// file, symlink and special file (a FIFO, a socket, a device) `scope` takes.
pub(crate) fn walk(
    root: &Path,
    root_fd: &OwnedFd,
    scope: Scope,
    visitor: &mut impl Visitor,
) -> Result<(), CopyError> {
    let dir = rfs::openat(root_fd, ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
        .map_err(CopyError::errno("open the directory", root))?;
    let rules =
        (scope == Scope::Seen).then(|| Rc::new(Rules { here: ignore_rules(&dir, root), parent: None }));
    let entries = sorted_entries(&dir, root)?;
    let mut stack = vec![Level { dir, rel: PathBuf::new(), abs: root.to_path_buf(), rules, entries }];
    while let Some(level) = stack.last_mut() {
        let Some((name, kind)) = level.entries.pop() else {
            if let Some(done) = stack.pop() {
                if !stack.is_empty() {
                    visitor.left(&done.rel)?;
                }
            }
            continue;
        };
        let is_dir = kind == FileType::Directory;
        let abs = level.abs.join(&name);
        if !taken(&name, &abs, is_dir, level.rules.as_deref(), level.rel.as_os_str().is_empty()) {
            continue;
        }
        let rel = level.rel.join(&name);
        let at = At { parent: level.dir.as_fd(), name: &name, rel: &rel };
        match kind {
            FileType::Directory => {
                let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                let dir = match rfs::openat(&level.dir, name.as_os_str(), flags, Mode::empty()) {
                    Ok(dir) => dir,
                    // Gone or swapped for a symlink or a file since it was listed.
                    Err(Errno::NOENT | Errno::LOOP | Errno::NOTDIR) => continue,
                    Err(e) => return Err(CopyError::errno("open the directory", &abs)(e)),
                };
                if !visitor.entered(&at, &dir)? {
                    continue;
                }
                let rules = level
                    .rules
                    .clone()
                    .map(|parent| Rc::new(Rules { here: ignore_rules(&dir, &abs), parent: Some(parent) }));
                let entries = sorted_entries(&dir, &abs)?;
                stack.push(Level { dir, rel, abs, rules, entries });
            }
            FileType::RegularFile => visitor.file(&at)?,
            FileType::Symlink => visitor.symlink(&at)?,
            FileType::Fifo => visitor.special(&at, FIFO)?,
            FileType::Socket => visitor.special(&at, SOCKET)?,
            FileType::CharacterDevice => visitor.special(&at, CHAR_DEVICE)?,
            FileType::BlockDevice => visitor.special(&at, BLOCK_DEVICE)?,
            _ => {}
        }
    }
    Ok(())
}

/// Whether the walk takes an entry: never `.git`, nor the evidence folder at the root; then the
/// ignore files decide, where there are `rules`. Hidden names are taken.
fn taken(name: &OsStr, abs: &Path, is_dir: bool, rules: Option<&Rules>, at_root: bool) -> bool {
    if name == ".git" || (at_root && name == EVIDENCE_FOLDER) {
        return false;
    }
    rules.is_none_or(|rules| !matches!(rules.matched(abs, is_dir), Match::Ignore(())))
}

/// The entries of the open directory `dir` (at `abs`) with their types (`lstat` relative to it where
/// the directory does not say), sorted by name and reversed, so popping visits them in order.
fn sorted_entries(dir: &OwnedFd, abs: &Path) -> Result<Vec<(OsString, FileType)>, CopyError> {
    let mut entries = crate::tools::dir_entries(dir).map_err(CopyError::errno("read the directory", abs))?;
    entries.sort_by(|a, b| b.0.cmp(&a.0));
    Ok(entries)
}

/// `rel`'s components, for opening beneath a root.
pub(crate) fn parts(rel: &Path) -> Vec<OsString> {
    rel.iter().map(OsStr::to_os_string).collect()
}

/// The components of a path as a patch or a checkpoint names it: its text decoded to the name's own
/// bytes first (`agentd_protocol::path_name`).
pub(crate) fn text_parts(path: &str) -> Vec<OsString> {
    let bytes = agentd_protocol::path_name::decode(path);
    parts(Path::new(OsStr::from_bytes(&bytes)))
}

/// A path relative to a tree as the protocol names it: the text of its bytes
/// (`agentd_protocol::path_name`), whatever they are.
pub(crate) fn path_text(rel: &Path) -> String {
    agentd_protocol::path_name::encode(rel.as_os_str().as_bytes())
}
