//! The workspace: the one directory a task's tools may touch.
//!
//! Every path a model gives is relative to the workspace root. A path is refused when it is empty,
//! absolute, or contains a `..` component. `"."` is the root itself.
//!
//! The root is opened once, as a directory file descriptor (`O_PATH | O_DIRECTORY`), when the
//! workspace is made; every file tool opens what it touches *beneath that descriptor*, never through
//! a path string that a check looked at first:
//!
//! - Each open is `openat2(root, path, O_NOFOLLOW, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`: the kernel
//!   refuses to cross any symlink and to leave the root, in the same step that opens the file, so a
//!   path swapped for a symlink between two calls can only make the open fail, never reach outside.
//!   Where `openat2` is missing (`ENOSYS`, Linux before 5.6) the same open is a walk from the root
//!   descriptor, one component at a time, each `openat(…, O_NOFOLLOW)` relative to the directory
//!   opened before it.
//! - A symlink inside the workspace is still honoured, but resolved here, not by the kernel: its
//!   target is read (`readlinkat`), joined lexically to the link's directory (`..` may not climb above
//!   the root; an absolute target must lie under the canonical root), and the result is opened again
//!   with no-follow semantics. A symlink pointing out is refused, naming the link and its target.
//! - A regular file with more than one hard link is refused for reading and writing: its other name
//!   may be outside the workspace, and nothing here can tell. Directories are not affected.
//! - Writes are atomic: a temporary file in the target's directory (`O_EXCL | O_NOFOLLOW`, created
//!   beneath the root), written, fsynced, `renameat` over the target relative to the same directory
//!   descriptor, then the directory is fsynced. Missing parent directories are made with `mkdirat`,
//!   one no-follow component at a time.
//!
//! [`Workspace::resolve`] and [`Workspace::resolve_for_write`] give the canonical *path* a name
//! resolves to, for display and messages; nothing opens what they return.

use crate::error::ToolError;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, ResolveFlags, Stat};
use rustix::io::Errno;
use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

pub(crate) mod exact;

/// Symlinks followed while resolving one path before it is refused as a loop (the kernel's limit).
const MAX_SYMLINK_HOPS: usize = 40;
/// How often an open that met a freshly planted symlink is resolved again before it is refused.
const RACE_RETRIES: usize = 3;
/// The mode of a file `write_file` creates.
const NEW_FILE_MODE: u32 = 0o644;
/// The mode of a directory `write_file` creates (before the umask).
const NEW_DIR_MODE: u32 = 0o755;

/// What a temporary name ([`temp_name`]) is for: a file's write, or a symlink's.
#[derive(Debug, Clone, Copy)]
enum Temp {
    Write,
    Link,
}

impl Temp {
    /// The name's prefix: `.agentd-write-`, `.agentd-link-`.
    fn prefix(self) -> &'static str {
        match self {
            Temp::Write => ".agentd-write-",
            Temp::Link => ".agentd-link-",
        }
    }
}

/// A fresh temporary name, `.agentd-write-PID-N.tmp` or `.agentd-link-PID-N.tmp`, written under before
/// a rename puts it in place: unique within the process, the process named.
fn temp_name(kind: Temp) -> String {
    format!("{}{}-{}.tmp", kind.prefix(), std::process::id(), TEMP_COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// Whether `name` is one of the temporary names this module writes under before a rename
/// ([`temp_name`]) by a process other than this one: what a run killed in the middle of a write
/// leaves behind, swept at the resume that follows.
pub fn is_stale_temp_name(name: &[u8]) -> bool {
    let mut prefixes = [Temp::Write, Temp::Link].into_iter().map(|kind| kind.prefix().as_bytes());
    let Some(rest) = prefixes.find_map(|prefix| name.strip_prefix(prefix)) else {
        return false;
    };
    let Some(rest) = rest.strip_suffix(b".tmp") else { return false };
    let mut parts = rest.split(|b| *b == b'-');
    let (Some(pid), Some(n), None) = (parts.next(), parts.next(), parts.next()) else { return false };
    let digits = |p: &[u8]| !p.is_empty() && p.iter().all(u8::is_ascii_digit);
    digits(pid) && digits(n) && pid != std::process::id().to_string().as_bytes()
}

/// Set once `openat2` answered `ENOSYS`: every later open walks instead.
static OPENAT2_MISSING: AtomicBool = AtomicBool::new(false);
/// Makes temporary names unique within the process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A task's workspace: its root, opened once as a directory descriptor that every file tool opens beneath
/// (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, or a no-follow walk without it), so no path —
/// swapped symlinks included — ever reaches outside. Cheap to clone: clones share the descriptor.
#[derive(Debug, Clone)]
pub struct Workspace {
    /// Canonical: absolute, symlinks resolved. For display and for `run_command`'s directory.
    root: PathBuf,
    /// The root, opened once; everything the file tools touch is opened beneath it.
    dir: Arc<OwnedFd>,
    /// Never use `openat2`: always the component walk (the fallback, forced by tests).
    walk_only: bool,
    /// Test hook: a write fails after this many bytes of the temporary file.
    #[cfg(test)]
    fail_write_after: Option<usize>,
}

impl PartialEq for Workspace {
    fn eq(&self, other: &Workspace) -> bool {
        self.root == other.root
    }
}

impl Eq for Workspace {}

/// A file or directory opened beneath the root.
pub(crate) struct Opened {
    pub(crate) fd: OwnedFd,
    pub(crate) stat: Stat,
    /// The path that was opened, relative to the root, with inside symlinks resolved (`"."` for the
    /// root): for display.
    pub(crate) shown: String,
    /// The same path as symlink-free components from the root (none for the root itself).
    pub(crate) parts: Vec<OsString>,
}

impl Opened {
    pub(crate) fn kind(&self) -> FileType {
        FileType::from_raw_mode(self.stat.st_mode)
    }
}

/// A path with its symlinks resolved lexically: symlink-free components from the root, of which the
/// first `existing` exist (all of them for a path that must exist).
struct Logical {
    parts: Vec<OsString>,
    existing: usize,
}

impl Workspace {
    /// A workspace rooted at `root`, which must exist and be a directory.
    pub fn new(root: &Path) -> Result<Workspace, ToolError> {
        let bad = |reason: String| ToolError::BadWorkspace { path: root.display().to_string(), reason };
        let canonical = fs::canonicalize(root).map_err(|e| bad(e.to_string()))?;
        // The canonical path has no symlinks left, so no-follow opens exactly what was checked.
        let dir = rfs::open(
            &canonical,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            Errno::NOTDIR => bad("not a directory".into()),
            e => bad(std::io::Error::from(e).to_string()),
        })?;
        Ok(Workspace {
            root: canonical,
            dir: Arc::new(dir),
            walk_only: false,
            #[cfg(test)]
            fail_write_after: None,
        })
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// This workspace with `openat2` switched off: every open walks from the root descriptor, as on a
    /// kernel without `openat2`.
    #[cfg(test)]
    pub(crate) fn walk_only(mut self) -> Workspace {
        self.walk_only = true;
        self
    }

    /// This workspace with writes failing after `bytes` bytes of the temporary file.
    #[cfg(test)]
    pub(crate) fn failing_writes_after(mut self, bytes: usize) -> Workspace {
        self.fail_write_after = Some(bytes);
        self
    }

    /// The canonical path of an existing file or directory inside the workspace, for display. Nothing
    /// opens what this returns: the tools open beneath the root descriptor.
    pub fn resolve(&self, rel: &str) -> Result<PathBuf, ToolError> {
        let logical = self.logical(rel, components(rel)?, false)?;
        Ok(self.path_of(&logical.parts))
    }

    /// Where a file that may not exist yet would live, for display. Its nearest existing ancestor must
    /// resolve inside the workspace; the missing components are appended to it. Nothing is created.
    pub fn resolve_for_write(&self, rel: &str) -> Result<PathBuf, ToolError> {
        let logical = self.logical(rel, components(rel)?, true)?;
        Ok(self.path_of(&logical.parts))
    }

    /// `abs` relative to the root, for display (`"."` for the root itself).
    pub fn display_relative(&self, abs: &Path) -> String {
        match abs.strip_prefix(&self.root) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
            Ok(rel) => rel.display().to_string(),
            Err(_) => abs.display().to_string(),
        }
    }

    /// The text of a regular file of at most `max_bytes`, opened beneath the root (the same rules as
    /// `read_file`: no symlink out, no hard link). For the runtime's working files.
    pub fn read_text(&self, rel: &str, max_bytes: u64) -> Result<String, ToolError> {
        let opened = self.open(rel)?;
        if opened.kind() != FileType::RegularFile {
            return Err(ToolError::Failed(format!("{rel} is not a regular file")));
        }
        let size = u64::try_from(opened.stat.st_size).unwrap_or(0);
        if size > max_bytes {
            return Err(ToolError::Failed(format!("{rel} is larger than {max_bytes} bytes")));
        }
        let mut text = String::new();
        fs::File::from(opened.fd)
            .take(max_bytes)
            .read_to_string(&mut text)
            .map_err(|e| ToolError::io(rel, &e))?;
        Ok(text)
    }

    /// Opens an existing file or directory for reading, beneath the root, following only symlinks
    /// that stay inside. A regular file with more than one hard link is refused. Special files are
    /// opened non-blocking (a FIFO cannot hang the tool) and left to the caller to refuse.
    pub(crate) fn open(&self, rel: &str) -> Result<Opened, ToolError> {
        let parts = components(rel)?;
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY;
        // The common case, a path without symlinks, is one call.
        let (fd, parts) = match self.open_parts(&parts, flags, Mode::empty()) {
            Ok(fd) => (fd, parts),
            Err(Errno::LOOP) => self.open_logical(rel, parts, flags)?,
            Err(e) => return Err(errno(rel, e)),
        };
        let stat = rfs::fstat(&fd).map_err(|e| errno(rel, e))?;
        refuse_hard_link(rel, &stat)?;
        let shown = if parts.is_empty() { ".".to_string() } else { shown(&parts) };
        Ok(Opened { fd, stat, shown, parts })
    }

    /// Opens the entry at `parts` (symlink-free components from the root, as a walk beneath the root
    /// listed them) for reading, crossing no symlink at all — not even one that stays inside — so an
    /// entry swapped for a symlink between the listing and the open is refused, never followed. A
    /// regular file with more than one hard link is refused.
    pub(crate) fn open_exact(&self, parts: &[OsString]) -> Result<Opened, ToolError> {
        let shown = if parts.is_empty() { ".".to_string() } else { shown(parts) };
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY;
        let fd = self.open_parts(parts, flags, Mode::empty()).map_err(|e| errno(&shown, e))?;
        let stat = rfs::fstat(&fd).map_err(|e| errno(&shown, e))?;
        refuse_hard_link(&shown, &stat)?;
        Ok(Opened { fd, stat, shown, parts: parts.to_vec() })
    }

    /// Replaces (or, unless `must_exist`, creates) the regular file `rel` with `content`, atomically:
    /// a temporary file beside it, fsynced, renamed over it, the directory fsynced. Missing parent
    /// directories are created (unless `must_exist`). Returns whether the file existed.
    pub(crate) fn write_atomic(
        &self,
        rel: &str,
        content: &[u8],
        must_exist: bool,
    ) -> Result<bool, ToolError> {
        let parts = components(rel)?;
        for _ in 0..RACE_RETRIES {
            let logical = self.logical(rel, parts.clone(), !must_exist)?;
            let Some((name, dirs)) = logical.parts.split_last() else {
                return Err(ToolError::Failed(format!("{rel} is a directory")));
            };
            if logical.existing < dirs.len() {
                self.make_dirs(rel, dirs)?;
            }
            let parent = match self.open_parts(dirs, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()) {
                Ok(fd) => fd,
                Err(Errno::LOOP) => continue,
                Err(e) => return Err(errno(rel, e)),
            };
            let flags =
                OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let (existed, mode) = match rfs::openat(&parent, name.as_os_str(), flags, Mode::empty()) {
                Ok(fd) => {
                    let stat = rfs::fstat(&fd).map_err(|e| errno(rel, e))?;
                    match FileType::from_raw_mode(stat.st_mode) {
                        FileType::RegularFile => {}
                        FileType::Directory => {
                            return Err(ToolError::Failed(format!("{rel} is a directory")))
                        }
                        _ => return Err(ToolError::Failed(format!("{rel} is not a regular file"))),
                    }
                    refuse_hard_link(rel, &stat)?;
                    (true, stat.st_mode & 0o7777)
                }
                Err(Errno::NOENT) if must_exist => return Err(ToolError::NotFound(rel.to_string())),
                Err(Errno::NOENT) => (false, NEW_FILE_MODE),
                Err(Errno::LOOP) => continue,
                Err(e) => return Err(errno(rel, e)),
            };
            self.replace(&parent, name, content, mode).map_err(|e| ToolError::io(rel, &e))?;
            return Ok(existed);
        }
        Err(ToolError::Raced(rel.to_string()))
    }

    /// Writes `content` to a fresh temporary file in `parent`, fsyncs it and renames it over `name`,
    /// then fsyncs `parent`. On failure the temporary file is removed and `name` is untouched.
    fn replace(&self, parent: &OwnedFd, name: &OsStr, content: &[u8], mode: u32) -> std::io::Result<()> {
        let (temp, file) = self.write_temp(parent, content, mode)?;
        let placed = file.sync_all().and_then(|()| Ok(rfs::renameat(parent, temp.as_str(), parent, name)?));
        if let Err(e) = placed {
            let _ = rfs::unlinkat(parent, temp.as_str(), AtFlags::empty());
            return Err(e);
        }
        rfs::fsync(parent)?;
        Ok(())
    }

    /// Writes `content` with permission bits `mode` to a fresh temporary file in `parent` (named by
    /// [`temp_name`]), not synced: its name and the open file. On failure nothing is left.
    fn write_temp(&self, parent: &OwnedFd, content: &[u8], mode: u32) -> std::io::Result<(String, fs::File)> {
        // A name left by a crashed run (or anyone else) is never reused: O_EXCL, then the next name.
        let mut attempt = 0;
        let (temp, fd) = loop {
            let temp = temp_name(Temp::Write);
            match rfs::openat(
                parent,
                temp.as_str(),
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            ) {
                Ok(fd) => break (temp, fd),
                Err(Errno::EXIST) if attempt < 8 => attempt += 1,
                Err(e) => return Err(e.into()),
            }
        };
        let mut file = fs::File::from(fd);
        let written = rfs::fchmod(&file, Mode::from_raw_mode(mode))
            .map_err(std::io::Error::from)
            .and_then(|()| self.write_content(&mut file, content));
        if let Err(e) = written {
            let _ = rfs::unlinkat(parent, temp.as_str(), AtFlags::empty());
            return Err(e);
        }
        Ok((temp, file))
    }

    #[cfg(not(test))]
    fn write_content(&self, file: &mut fs::File, content: &[u8]) -> std::io::Result<()> {
        file.write_all(content)
    }

    #[cfg(test)]
    fn write_content(&self, file: &mut fs::File, content: &[u8]) -> std::io::Result<()> {
        match self.fail_write_after {
            Some(n) if n < content.len() => {
                file.write_all(&content[..n])?;
                Err(std::io::Error::other("injected failure in the middle of a write"))
            }
            _ => file.write_all(content),
        }
    }

    /// Creates the missing directories of `dirs` (symlink-free components from the root), each with
    /// `mkdirat` relative to its parent's descriptor; an existing component must be a directory, not
    /// a symlink.
    fn make_dirs(&self, rel: &str, dirs: &[OsString]) -> Result<(), ToolError> {
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut cur: Option<OwnedFd> = None;
        for part in dirs {
            let at = cur.as_ref().map_or(self.dir.as_fd(), |fd| fd.as_fd());
            let next = match open_dir_component(at, part, flags) {
                Err(Errno::NOENT) => {
                    match rfs::mkdirat(at, part.as_os_str(), Mode::from_raw_mode(NEW_DIR_MODE)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(errno(rel, e)),
                    }
                    open_dir_component(at, part, flags)
                }
                other => other,
            };
            cur = Some(match next {
                Ok(fd) => fd,
                Err(Errno::LOOP) => return Err(ToolError::Raced(rel.to_string())),
                Err(e) => return Err(errno(rel, e)),
            });
        }
        Ok(())
    }

    /// Resolves `parts` lexically and opens the result, again if a symlink appeared meanwhile.
    fn open_logical(
        &self,
        rel: &str,
        parts: Vec<OsString>,
        flags: OFlags,
    ) -> Result<(OwnedFd, Vec<OsString>), ToolError> {
        for _ in 0..RACE_RETRIES {
            let logical = self.logical(rel, parts.clone(), false)?;
            match self.open_parts(&logical.parts, flags, Mode::empty()) {
                Ok(fd) => return Ok((fd, logical.parts)),
                Err(Errno::LOOP) => continue,
                Err(e) => return Err(errno(rel, e)),
            }
        }
        Err(ToolError::Raced(rel.to_string()))
    }

    /// Opens symlink-free `parts` beneath the root, crossing no symlink (`ELOOP` if there is one).
    fn open_parts(&self, parts: &[OsString], flags: OFlags, mode: Mode) -> Result<OwnedFd, Errno> {
        let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        if !self.walk_only && !OPENAT2_MISSING.load(Ordering::Relaxed) {
            let path = if parts.is_empty() { PathBuf::from(".") } else { parts.iter().collect::<PathBuf>() };
            let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
            let mut tries = 0;
            loop {
                match rfs::openat2(self.dir.as_fd(), &path, flags, mode, resolve) {
                    Err(Errno::NOSYS) => {
                        OPENAT2_MISSING.store(true, Ordering::Relaxed);
                        break;
                    }
                    // The kernel saw a rename during the lookup; it asks to be called again.
                    Err(Errno::AGAIN) if tries < RACE_RETRIES => tries += 1,
                    other => return other,
                }
            }
        }
        walk_open(self.dir.as_fd(), parts, flags, mode)
    }

    /// Follows `parts` from the root, one no-follow `openat` at a time, replacing each symlink met by
    /// its target (joined lexically; it must stay under the root). Returns the symlink-free
    /// components and how many of them exist. A missing component is an error unless
    /// `allow_missing`; a missing target of a symlink always is.
    fn logical(&self, rel: &str, parts: Vec<OsString>, allow_missing: bool) -> Result<Logical, ToolError> {
        let mut todo: VecDeque<OsString> = parts.into();
        let mut done: Vec<OsString> = Vec::new();
        let mut cur: Option<OwnedFd> = None;
        let mut hops = 0;
        // The last symlink followed, and how many of the components in `todo` came from it.
        let mut via: Option<(String, String)> = None;
        let mut from_link = 0usize;
        while let Some(part) = todo.pop_front() {
            let linked = from_link > 0;
            from_link = from_link.saturating_sub(1);
            let at = cur.as_ref().map_or(self.dir.as_fd(), |fd| fd.as_fd());
            let fd = match rfs::openat(
                at,
                part.as_os_str(),
                OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            ) {
                Ok(fd) => fd,
                Err(Errno::NOENT) => {
                    if let (true, Some((link, target))) = (linked, via) {
                        return Err(ToolError::BrokenSymlink { link, target });
                    }
                    if !allow_missing {
                        return Err(ToolError::NotFound(rel.to_string()));
                    }
                    let existing = done.len();
                    done.push(part);
                    done.extend(todo);
                    return Ok(Logical { parts: done, existing });
                }
                Err(e) => return Err(errno(rel, e)),
            };
            let stat = rfs::fstat(&fd).map_err(|e| errno(rel, e))?;
            match FileType::from_raw_mode(stat.st_mode) {
                FileType::Symlink => {
                    hops += 1;
                    if hops > MAX_SYMLINK_HOPS {
                        return Err(ToolError::SymlinkLoop { path: rel.to_string(), hops: MAX_SYMLINK_HOPS });
                    }
                    let target = rfs::readlinkat(&fd, "", Vec::new()).map_err(|e| errno(rel, e))?;
                    let target = PathBuf::from(OsStr::from_bytes(target.as_bytes()));
                    let mut link_parts = done.clone();
                    link_parts.push(part);
                    let link = shown(&link_parts);
                    let shown_target = target.display().to_string();
                    let spliced = self.splice(&done, &target).ok_or_else(|| {
                        let outside = if target.is_absolute() {
                            target.clone()
                        } else {
                            self.path_of(&done).join(&target)
                        };
                        // Only the wording depends on this look (never an open): a refusal either way.
                        if fs::symlink_metadata(&outside).is_ok() {
                            ToolError::SymlinkEscape { link: link.clone(), target: shown_target.clone() }
                        } else {
                            ToolError::BrokenSymlink { link: link.clone(), target: shown_target.clone() }
                        }
                    })?;
                    from_link = spliced.len();
                    for p in spliced.into_iter().rev() {
                        todo.push_front(p);
                    }
                    done.clear();
                    cur = None;
                    via = Some((link, shown_target));
                }
                FileType::Directory => {
                    done.push(part);
                    cur = Some(fd);
                }
                _ => {
                    done.push(part);
                    if !todo.is_empty() {
                        return Err(ToolError::Io {
                            path: rel.to_string(),
                            message: format!("{} is not a directory", shown(&done)),
                        });
                    }
                }
            }
        }
        let existing = done.len();
        Ok(Logical { parts: done, existing })
    }

    /// The components from the root that a symlink in directory `dir` with `target` names, or `None`
    /// when the target leaves the root.
    fn splice(&self, dir: &[OsString], target: &Path) -> Option<Vec<OsString>> {
        let (mut base, rest) = if target.is_absolute() {
            (Vec::new(), target.strip_prefix(&self.root).ok()?)
        } else {
            (dir.to_vec(), target)
        };
        for component in rest.components() {
            match component {
                Component::Normal(p) => base.push(p.to_os_string()),
                Component::ParentDir => {
                    base.pop()?;
                }
                Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
            }
        }
        Some(base)
    }

    fn path_of(&self, parts: &[OsString]) -> PathBuf {
        let mut path = self.root.clone();
        for part in parts {
            path.push(part);
        }
        path
    }
}

/// Opens `parts` beneath `root` one component at a time, each `openat(…, O_NOFOLLOW)` relative to the
/// directory before it: the fallback for kernels without `openat2`. A symlink is `ELOOP`.
pub(crate) fn walk_open(
    root: BorrowedFd<'_>,
    parts: &[OsString],
    flags: OFlags,
    mode: Mode,
) -> Result<OwnedFd, Errno> {
    let Some((last, dirs)) = parts.split_last() else {
        return rfs::openat(root, ".", flags, mode);
    };
    let dir_flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut cur: Option<OwnedFd> = None;
    for part in dirs {
        let at = cur.as_ref().map_or(root, |fd| fd.as_fd());
        let next = open_dir_component(at, part, dir_flags)?;
        cur = Some(next);
    }
    let at = cur.as_ref().map_or(root, |fd| fd.as_fd());
    rfs::openat(at, last.as_os_str(), flags | OFlags::NOFOLLOW, mode)
}

/// One directory component, no-follow; a symlink in its place is `ELOOP` (as `openat2` says).
fn open_dir_component(at: BorrowedFd<'_>, part: &OsStr, flags: OFlags) -> Result<OwnedFd, Errno> {
    match rfs::openat(at, part, flags, Mode::empty()) {
        Err(Errno::NOTDIR) => match rfs::statat(at, part, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => Err(Errno::LOOP),
            _ => Err(Errno::NOTDIR),
        },
        other => other,
    }
}

/// Opens the entry `name` of the directory `dir` for reading, never following a symlink (`ELOOP`),
/// non-blocking. For walks that already hold the directory's descriptor.
pub(crate) fn open_entry(dir: BorrowedFd<'_>, name: &OsStr) -> Result<(OwnedFd, Stat), Errno> {
    let fd = rfs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let stat = rfs::fstat(&fd)?;
    Ok((fd, stat))
}

/// A regular file with more than one link is refused: its other names may be outside.
pub(crate) fn refuse_hard_link(rel: &str, stat: &Stat) -> Result<(), ToolError> {
    // `st_nlink` is `u64` on x86_64 and narrower elsewhere.
    #[allow(clippy::useless_conversion)]
    let links = u64::from(stat.st_nlink);
    if FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile && links > 1 {
        return Err(ToolError::HardLink { path: rel.to_string(), links });
    }
    Ok(())
}

/// An errno from opening `rel`, as a tool error naming it.
fn errno(rel: &str, e: Errno) -> ToolError {
    match e {
        Errno::XDEV => ToolError::Escapes(rel.to_string()),
        Errno::LOOP => ToolError::Raced(rel.to_string()),
        e => ToolError::io(rel, &std::io::Error::from(e)),
    }
}

/// The normal components of `rel`, after refusing empty, absolute and `..` paths.
fn components(rel: &str) -> Result<Vec<OsString>, ToolError> {
    components_of(rel, Path::new(rel))
}

/// The components of a path a checkpoint, a diff or a working copy's patch named: its text decoded to
/// the name's own bytes first (`agentd_protocol::path_name`), so a name that is not UTF-8 is the file
/// it was recorded from.
pub(crate) fn exact_components(rel: &str) -> Result<Vec<OsString>, ToolError> {
    let bytes = agentd_protocol::path_name::decode(rel);
    components_of(rel, Path::new(OsStr::from_bytes(&bytes)))
}

fn components_of(rel: &str, path: &Path) -> Result<Vec<OsString>, ToolError> {
    if rel.is_empty() {
        return Err(ToolError::EmptyPath);
    }
    let mut parts = Vec::new();
    for component in path.components() {
        match component {
            Component::Prefix(_) | Component::RootDir => return Err(ToolError::Absolute(rel.to_string())),
            Component::ParentDir => return Err(ToolError::Escapes(rel.to_string())),
            Component::CurDir => {}
            Component::Normal(part) => parts.push(part.to_os_string()),
        }
    }
    Ok(parts)
}

fn shown(parts: &[OsString]) -> String {
    parts.iter().collect::<PathBuf>().display().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn setup() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("src/inner")).unwrap();
        fs::write(dir.path().join("src/main.rs"), "fn main() {}\n").unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        (dir, ws)
    }

    #[test]
    fn new_requires_an_existing_dir() {
        let (dir, _) = setup();
        assert!(matches!(Workspace::new(&dir.path().join("missing")), Err(ToolError::BadWorkspace { .. })));
        assert!(matches!(
            Workspace::new(&dir.path().join("src/main.rs")),
            Err(ToolError::BadWorkspace { .. })
        ));
    }

    #[test]
    fn resolves_inside() {
        let (_dir, ws) = setup();
        assert_eq!(ws.resolve(".").unwrap(), ws.root());
        assert_eq!(ws.resolve("./src/main.rs").unwrap(), ws.root().join("src/main.rs"));
        assert_eq!(ws.resolve("src/").unwrap(), ws.root().join("src"));
        assert_eq!(ws.display_relative(&ws.root().join("src/main.rs")), "src/main.rs");
        assert_eq!(ws.display_relative(ws.root()), ".");
    }

    #[test]
    fn refuses_escapes() {
        let (_dir, ws) = setup();
        assert_eq!(ws.resolve("").unwrap_err(), ToolError::EmptyPath);
        let e = ws.resolve("../x").unwrap_err();
        assert_eq!(e.to_string(), "path escapes the workspace: ../x");
        assert!(matches!(ws.resolve("src/../src/main.rs"), Err(ToolError::Escapes(_))));
        assert!(matches!(ws.resolve_for_write("a/../../b"), Err(ToolError::Escapes(_))));
        let e = ws.resolve("/etc/passwd").unwrap_err();
        assert_eq!(e.to_string(), "absolute paths are not allowed: /etc/passwd");
        assert!(matches!(ws.resolve_for_write("/tmp/new"), Err(ToolError::Absolute(_))));
    }

    #[test]
    fn missing_paths() {
        let (_dir, ws) = setup();
        assert_eq!(ws.resolve("nope.txt").unwrap_err(), ToolError::NotFound("nope.txt".into()));
        assert_eq!(ws.resolve_for_write("new/dir/file.txt").unwrap(), ws.root().join("new/dir/file.txt"));
        assert_eq!(ws.resolve_for_write("src/main.rs").unwrap(), ws.root().join("src/main.rs"));
    }

    #[test]
    fn symlink_out_is_refused() {
        let (_dir, ws) = setup();
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("secret"), "s").unwrap();
        symlink(outside.path(), ws.root().join("link")).unwrap();
        let e = ws.resolve("link").unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("symlink leaves the workspace: link -> {}", outside.path().display())
        );
        assert!(matches!(ws.resolve("link/secret"), Err(ToolError::SymlinkEscape { .. })));
        assert!(matches!(ws.resolve_for_write("link/new.txt"), Err(ToolError::SymlinkEscape { .. })));
        // A link whose target goes up and out.
        symlink("../../..", ws.root().join("src/up")).unwrap();
        assert!(
            matches!(ws.resolve("src/up"), Err(ToolError::SymlinkEscape { link, .. }) if link == "src/up")
        );
    }

    #[test]
    fn dangling_symlink_is_refused_for_write() {
        let (_dir, ws) = setup();
        symlink("/nonexistent/target", ws.root().join("dangling")).unwrap();
        assert!(matches!(ws.resolve_for_write("dangling"), Err(ToolError::BrokenSymlink { .. })));
    }

    #[test]
    fn symlink_inside_is_allowed() {
        let (_dir, ws) = setup();
        symlink("src", ws.root().join("alias")).unwrap();
        assert_eq!(ws.resolve("alias/main.rs").unwrap(), ws.root().join("src/main.rs"));
        assert_eq!(ws.resolve_for_write("alias/new.rs").unwrap(), ws.root().join("src/new.rs"));
        symlink("../main.rs", ws.root().join("src/inner/m")).unwrap();
        assert_eq!(ws.resolve("src/inner/m").unwrap(), ws.root().join("src/main.rs"));
    }

    #[test]
    fn root_behind_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("real")).unwrap();
        fs::write(dir.path().join("real/a"), "a").unwrap();
        symlink(dir.path().join("real"), dir.path().join("via")).unwrap();
        let ws = Workspace::new(&dir.path().join("via")).unwrap();
        assert_eq!(ws.resolve("a").unwrap(), fs::canonicalize(dir.path().join("real/a")).unwrap());
    }
}
