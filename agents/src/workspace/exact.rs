//! One exact path beneath the root, crossing no symlink at all: what a merge of a working copy
//! ([`crate::copies`]) reads and changes in the workspace.
//!
//! The file tools resolve a symlink that stays inside the workspace; these do not. A merge names the
//! paths a copy changed, and those are real files of the copy: in the workspace the same path must be
//! the same kind of thing, or the merge stops at it. So every directory on the path is opened with no
//! symlink crossed (`openat2` with `RESOLVE_NO_SYMLINKS`, or the no-follow walk), the last component
//! is looked at with `AT_SYMLINK_NOFOLLOW`, and every change is made relative to the parent's
//! descriptor: a file is replaced by `renameat` (so a symlink there is replaced, never written
//! through), removed by `unlinkat`, its mode set on a no-follow descriptor of it.

use super::{errno, exact_components, walk_open, Workspace, RACE_RETRIES};
use crate::error::ToolError;
use rustix::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;

/// A file or symlink written beside its path under a temporary name, waiting to be renamed into
/// place ([`Workspace::stage_exact`]).
#[derive(Debug)]
pub(crate) struct Staged {
    rel: String,
    temp: String,
}

/// What stands at one exact path (its last component's own kind: a symlink is not followed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Found {
    /// Nothing: the path, or a directory on it, does not exist.
    Missing,
    /// A regular file.
    File {
        /// Its permission bits (`st_mode & 0o7777`).
        mode: u32,
        /// How many names it has (more than one: it may also be reachable from elsewhere).
        links: u64,
        /// Its content.
        bytes: Vec<u8>,
    },
    /// A symlink, with the text it points to.
    Symlink(Vec<u8>),
    /// A directory.
    Dir,
    /// A FIFO, a socket or a device: its mode's type bits (`agentd_protocol::checkpoint::FIFO`…).
    Special(u32),
    /// Something no file can be read from or merged over, in words: a file or a symlink where a
    /// directory of the path should be, or a file that changed while it was read.
    Blocked(&'static str),
}

/// What stands at `parts` beneath the directory `root` (a plain directory, not a workspace: a copy
/// or its base), reached with no symlink crossed.
pub(crate) fn found_beneath(root: BorrowedFd<'_>, parts: &[OsString]) -> io::Result<Found> {
    let Some((name, dirs)) = parts.split_last() else { return Ok(Found::Dir) };
    match walk_open(root, dirs, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()) {
        Ok(parent) => found_in(&parent, name),
        Err(e) => parent_missing(root, dirs, e),
    }
}

/// How a parent directory (`dirs` beneath `root`) that could not be opened leaves the path.
fn parent_missing(root: BorrowedFd<'_>, dirs: &[OsString], e: Errno) -> io::Result<Found> {
    match e {
        Errno::NOENT => Ok(Found::Missing),
        // The kernel says ENOTDIR for a symlink as the last directory, ELOOP for one before it.
        Errno::NOTDIR | Errno::LOOP => Ok(Found::Blocked(blocker(root, dirs))),
        e => Err(e.into()),
    }
}

/// What stands in the way of `dirs` beneath `root`, in words: the first component that is not a
/// directory.
fn blocker(root: BorrowedFd<'_>, dirs: &[OsString]) -> &'static str {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut cur: Option<OwnedFd> = None;
    for part in dirs {
        let at = cur.as_ref().map_or(root, |fd| fd.as_fd());
        match rfs::statat(at, part.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => {
                return "a directory of its path is a symlink"
            }
            Ok(st) if FileType::from_raw_mode(st.st_mode) != FileType::Directory => {
                return "a directory of its path is a file"
            }
            _ => {}
        }
        match rfs::openat(at, part.as_os_str(), flags, Mode::empty()) {
            Ok(fd) => cur = Some(fd),
            Err(_) => break,
        }
    }
    "a directory of its path changed while being read"
}

/// What stands at `name` in the open directory `parent`.
fn found_in(parent: &OwnedFd, name: &OsStr) -> io::Result<Found> {
    let stat = match rfs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => stat,
        Err(Errno::NOENT) => return Ok(Found::Missing),
        Err(e) => return Err(e.into()),
    };
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::Directory => Ok(Found::Dir),
        FileType::Symlink => Ok(Found::Symlink(rfs::readlinkat(parent, name, Vec::new())?.into_bytes())),
        FileType::RegularFile => {
            let (fd, stat) = match super::open_entry(parent.as_fd(), name) {
                Ok(opened) => opened,
                // Swapped for a symlink since the look.
                Err(Errno::LOOP) => return Ok(Found::Blocked("it changed while being read")),
                Err(e) => return Err(e.into()),
            };
            if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
                return Ok(Found::Blocked("it changed while being read"));
            }
            let mut bytes = Vec::with_capacity(usize::try_from(stat.st_size).unwrap_or(0));
            fs::File::from(fd).read_to_end(&mut bytes)?;
            // `st_nlink` is `u64` on x86_64 and narrower elsewhere.
            #[allow(clippy::useless_conversion)]
            let links = u64::from(stat.st_nlink);
            Ok(Found::File { mode: stat.st_mode & 0o7777, links, bytes })
        }
        _ => Ok(Found::Special(stat.st_mode & agentd_protocol::checkpoint::TYPE_MASK)),
    }
}

impl Workspace {
    /// What stands at `rel` in the workspace, with no symlink crossed or followed.
    pub(crate) fn found_exact(&self, rel: &str) -> Result<Found, ToolError> {
        let parts = exact_components(rel)?;
        let Some((name, dirs)) = parts.split_last() else { return Ok(Found::Dir) };
        match self.open_parts(dirs, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()) {
            Ok(parent) => found_in(&parent, name),
            Err(e) => parent_missing(self.dir.as_fd(), dirs, e),
        }
        .map_err(|e| ToolError::io(rel, &e))
    }

    /// Replaces (or creates) the file at exactly `rel` with `content` and permission bits `mode`,
    /// atomically, as [`Workspace::write_atomic`] does, but crossing no symlink: whatever stands at
    /// `rel` (a symlink included) is replaced by the rename, never written through. Missing parent
    /// directories are created. A directory at `rel` is refused.
    pub(crate) fn write_exact(&self, rel: &str, content: &[u8], mode: u32) -> Result<(), ToolError> {
        let (parent, name) = self.exact_parent(rel, true)?;
        refuse_dir(rel, &parent, &name)?;
        self.replace(&parent, &name, content, mode).map_err(|e| ToolError::io(rel, &e))
    }

    /// Makes `rel` a symlink to `target`, replacing whatever file or symlink stands there: the link is
    /// made under a temporary name in the same directory, renamed over `rel`, the directory fsynced.
    pub(crate) fn symlink_exact(&self, rel: &str, target: &[u8]) -> Result<(), ToolError> {
        let staged = self.stage_symlink_exact(rel, target)?;
        self.commit(&staged)?;
        self.sync_parent(rel)
    }

    /// A symlink to `target` made beside exactly `rel` under a temporary name, not yet renamed into
    /// place: staged as [`Workspace::stage_exact`] stages a file (a symlink has no bytes to sync).
    pub(crate) fn stage_symlink_exact(&self, rel: &str, target: &[u8]) -> Result<Staged, ToolError> {
        let (parent, name) = self.exact_parent(rel, true)?;
        refuse_dir(rel, &parent, &name)?;
        let target = OsStr::from_bytes(target);
        let mut attempt = 0;
        loop {
            let temp = super::temp_name(super::Temp::Link);
            match rfs::symlinkat(target, &parent, temp.as_str()) {
                Ok(()) => return Ok(Staged { rel: rel.to_string(), temp }),
                Err(Errno::EXIST) if attempt < 8 => attempt += 1,
                Err(e) => return Err(errno(rel, e)),
            }
        }
    }

    /// The file `content` (permission bits `mode`) written beside exactly `rel` under a temporary
    /// name — its directories made, no symlink crossed — and not yet renamed into place:
    /// [`Workspace::commit`] does that. Synced now when `sync` (a few files: an fsync each is cheap);
    /// otherwise the caller syncs the filesystem once for every file staged ([`Workspace::sync`])
    /// before committing any — a merge of thousands of files so costs two syncs, not two per file.
    /// Either way a file renamed into place is always whole.
    pub(crate) fn stage_exact(
        &self,
        rel: &str,
        content: &[u8],
        mode: u32,
        sync: bool,
    ) -> Result<Staged, ToolError> {
        let (parent, name) = self.exact_parent(rel, true)?;
        refuse_dir(rel, &parent, &name)?;
        let (temp, file) = self.write_temp(&parent, content, mode).map_err(|e| ToolError::io(rel, &e))?;
        if sync {
            if let Err(e) = file.sync_all() {
                let _ = rfs::unlinkat(&parent, temp.as_str(), AtFlags::empty());
                return Err(ToolError::io(rel, &e));
            }
        }
        Ok(Staged { rel: rel.to_string(), temp })
    }

    /// Fsyncs the directory holding exactly `rel` (after a rename or a removal in it).
    pub(crate) fn sync_parent(&self, rel: &str) -> Result<(), ToolError> {
        match self.exact_parent(rel, false) {
            Ok((parent, _)) => rfs::fsync(&parent).map_err(|e| errno(rel, e)),
            Err(ToolError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Renames a staged file or symlink over exactly its path (replacing a file or a symlink there,
    /// never writing through one; a directory there is refused, and the staged file removed).
    pub(crate) fn commit(&self, staged: &Staged) -> Result<(), ToolError> {
        let rel = staged.rel.as_str();
        let (parent, name) = self.exact_parent(rel, false)?;
        let placed = refuse_dir(rel, &parent, &name).and_then(|()| {
            rfs::renameat(&parent, staged.temp.as_str(), &parent, name.as_os_str()).map_err(|e| errno(rel, e))
        });
        if placed.is_err() {
            let _ = rfs::unlinkat(&parent, staged.temp.as_str(), AtFlags::empty());
        }
        placed
    }

    /// Removes a staged file that will not be committed.
    pub(crate) fn discard(&self, staged: &Staged) {
        if let Ok((parent, _)) = self.exact_parent(&staged.rel, false) {
            let _ = rfs::unlinkat(&parent, staged.temp.as_str(), AtFlags::empty());
        }
    }

    /// Makes everything written in the workspace's filesystem durable (`syncfs`).
    pub(crate) fn sync(&self) -> Result<(), ToolError> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let root = rfs::openat(&*self.dir, ".", flags, Mode::empty()).map_err(|e| errno(".", e))?;
        rfs::syncfs(&root).map_err(|e| errno(".", e))
    }

    /// Removes the file or symlink at exactly `rel` (`unlinkat` in its parent), crossing no symlink;
    /// then fsyncs the directory. A directory there is refused. Returns whether anything was removed.
    pub(crate) fn remove(&self, rel: &str) -> Result<bool, ToolError> {
        self.remove_then(rel, true)
    }

    /// [`Workspace::remove`] without the fsync: for a merge, which syncs once when it is done.
    pub(crate) fn remove_unsynced(&self, rel: &str) -> Result<bool, ToolError> {
        self.remove_then(rel, false)
    }

    fn remove_then(&self, rel: &str, sync: bool) -> Result<bool, ToolError> {
        let (parent, name) = match self.exact_parent(rel, false) {
            Ok(opened) => opened,
            Err(ToolError::NotFound(_)) => return Ok(false),
            Err(e) => return Err(e),
        };
        refuse_dir(rel, &parent, &name)?;
        match rfs::unlinkat(&parent, name.as_os_str(), AtFlags::empty()) {
            Ok(()) => {}
            Err(Errno::NOENT) => return Ok(false),
            Err(e) => return Err(errno(rel, e)),
        }
        if sync {
            rfs::fsync(&parent).map_err(|e| errno(rel, e))?;
        }
        Ok(true)
    }

    /// Removes the directory at exactly `rel` if it is empty. Returns whether it was removed (false
    /// when it is missing, not empty, or not a directory).
    pub(crate) fn remove_empty_dir(&self, rel: &str) -> Result<bool, ToolError> {
        let (parent, name) = match self.exact_parent(rel, false) {
            Ok(opened) => opened,
            Err(ToolError::NotFound(_)) => return Ok(false),
            Err(e) => return Err(e),
        };
        match rfs::unlinkat(&parent, name.as_os_str(), AtFlags::REMOVEDIR) {
            Ok(()) => {}
            Err(Errno::NOENT | Errno::NOTEMPTY | Errno::EXIST | Errno::NOTDIR) => return Ok(false),
            Err(e) => return Err(errno(rel, e)),
        }
        rfs::fsync(&parent).map_err(|e| errno(rel, e))?;
        Ok(true)
    }

    /// Sets the permission bits of the regular file at exactly `rel` to `mode`, on a descriptor of the
    /// file opened with `O_NOFOLLOW` (a symlink there is refused, never followed). A file with more
    /// than one hard link is refused.
    pub(crate) fn set_mode(&self, rel: &str, mode: u32) -> Result<(), ToolError> {
        let (parent, name) = self.exact_parent(rel, false)?;
        let flags = OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        // Opened for reading where it may be (fchmod needs a real descriptor); a file its owner may
        // not read is opened as a path and changed through its /proc/self/fd link, which names that
        // very inode.
        let (fd, by_path) =
            match rfs::openat(&parent, name.as_os_str(), flags | OFlags::RDONLY, Mode::empty()) {
                Ok(fd) => (fd, false),
                Err(Errno::ACCESS) => {
                    let fd = rfs::openat(&parent, name.as_os_str(), flags | OFlags::PATH, Mode::empty())
                        .map_err(|e| errno(rel, e))?;
                    (fd, true)
                }
                Err(Errno::LOOP) => {
                    return Err(ToolError::Failed(format!("{rel} is a symlink; it has no mode")))
                }
                Err(e) => return Err(errno(rel, e)),
            };
        let stat = rfs::fstat(&fd).map_err(|e| errno(rel, e))?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return Err(ToolError::Failed(format!("{rel} is not a regular file")));
        }
        super::refuse_hard_link(rel, &stat)?;
        let mode = Mode::from_raw_mode(mode & 0o7777);
        let set = if by_path {
            rfs::chmod(format!("/proc/self/fd/{}", fd.as_raw_fd()), mode)
        } else {
            rfs::fchmod(&fd, mode)
        };
        set.map_err(|e| errno(rel, e))
    }

    /// The parent directory of exactly `rel`, opened with no symlink crossed (made first, one
    /// no-follow component at a time, when `make` and it is missing), and `rel`'s last component.
    fn exact_parent(&self, rel: &str, make: bool) -> Result<(OwnedFd, OsString), ToolError> {
        let parts = exact_components(rel)?;
        let Some((name, dirs)) = parts.split_last() else {
            return Err(ToolError::Failed(format!("{rel} is the workspace root")));
        };
        for _ in 0..RACE_RETRIES {
            match self.open_parts(dirs, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()) {
                Ok(parent) => return Ok((parent, name.clone())),
                Err(Errno::NOENT) if make => self.make_dirs(rel, dirs)?,
                Err(Errno::NOENT) => return Err(ToolError::NotFound(rel.to_string())),
                Err(Errno::LOOP | Errno::NOTDIR) => {
                    let why = blocker(self.dir.as_fd(), dirs);
                    return Err(ToolError::Failed(format!("{rel}: {why}")));
                }
                Err(e) => return Err(errno(rel, e)),
            }
        }
        Err(ToolError::Raced(rel.to_string()))
    }
}

/// Refuses a directory at `name` in `parent`: a file is never put in a directory's place.
fn refuse_dir(rel: &str, parent: &OwnedFd, name: &OsStr) -> Result<(), ToolError> {
    match rfs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::Directory => {
            Err(ToolError::Failed(format!("{rel} is a directory")))
        }
        _ => Ok(()),
    }
}
