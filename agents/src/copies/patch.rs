//! [`changes`]: what a working copy changed against its base, as a [`Patch`].

use super::error::CopyError;
use super::make::{too_large, MAX_COPIED_FILE};
use super::unified::{file_section, Side, REGULAR, SYMLINK, TYPE_MASK};
use super::walk::{open_root, parts, path_text, walk, At, Scope, Visitor};
use crate::workspace::exact::{found_beneath, Found};
use crate::workspace::walk_open;
use agentd_protocol::checkpoint::{special_kind, NotHeld};
use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

/// What a copy changed against its base: the files, and the same as one git-style unified diff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Patch {
    /// The changed files, sorted by path.
    pub files: Vec<FileChange>,
    /// The whole patch as a git-style unified diff, which `git apply` reads (binary files are only
    /// named: `Binary files a/P and b/P differ`).
    pub unified: String,
    /// Lines added, over all files.
    pub lines_added: u64,
    /// Lines removed, over all files.
    pub lines_removed: u64,
    /// What the copy holds that the patch does not carry: a FIFO, a socket or a device it made, a file
    /// it wrote over [`MAX_COPIED_FILE`](super::MAX_COPIED_FILE) — each path and why. The workspace
    /// keeps what it had there; the lead is told.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<NotHeld>,
}

impl Patch {
    /// Whether the copy changed nothing (and left nothing out).
    pub fn is_empty(&self) -> bool {
        self.files.is_empty() && self.left_out.is_empty()
    }
}

/// One changed file of a [`Patch`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChange {
    /// The file's path relative to the tree (for a rename, the new one).
    pub path: String,
    /// What changed.
    pub change: Change,
    /// Whether its content is binary (a NUL byte, or not UTF-8) on either side: its lines are not
    /// diffed nor counted.
    pub binary: bool,
    /// Lines the copy added to it.
    pub lines_added: u64,
    /// Lines the copy removed from it.
    pub lines_removed: u64,
}

/// How a file changed. A mode is the file's type and permission bits as git writes them:
/// `0o100000 | perm` for a regular file (its own permission bits, e.g. `0o100644`, `0o100755`), `0o120000`
/// for a symlink, whose content is its target text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Change {
    /// A file the base did not have.
    Added {
        /// Its mode.
        mode: u32,
    },
    /// The content changed (the mode may also have; a file become a symlink, or the reverse, is
    /// this too).
    Modified {
        /// The mode in the base.
        old_mode: u32,
        /// The mode in the copy.
        new_mode: u32,
    },
    /// Only the permission bits changed.
    Mode {
        /// The mode in the base.
        old_mode: u32,
        /// The mode in the copy.
        new_mode: u32,
    },
    /// A file the copy no longer has.
    Deleted {
        /// Its mode in the base.
        mode: u32,
    },
    /// A file deleted and another added with identical bytes, kind and mode (empty files are never
    /// paired, as git does not).
    Renamed {
        /// The path it had in the base.
        from: String,
        /// Its mode.
        mode: u32,
    },
}

/// What `copy` changed against `base` (both made by [`make_copy`](super::make_copy); the copy then
/// worked in by tools and commands). Both trees are walked whole, as `make_copy` copies them: every
/// path of the copy, what git ignores included (a build output the branch wrote is a change like any
/// other), `.git` and the evidence folder left out. Nothing is followed: a symlink is a file whose
/// content is its target. Directories are not changes: an empty one added or removed is not in the
/// patch. A path is named by the text of its bytes (`agentd_protocol::path_name`), so a name that is
/// not UTF-8 is carried too. What cannot be carried — a FIFO, a socket or a device the copy holds, a
/// file it wrote over [`MAX_COPIED_FILE`](super::MAX_COPIED_FILE) — is in [`Patch::left_out`].
pub fn changes(base: &Path, copy: &Path) -> Result<Patch, CopyError> {
    let base_tree = Tree::open(base)?;
    let copy_tree = Tree::open(copy)?;
    let (olds, _) = base_tree.listing()?;
    let (mut news, specials) = copy_tree.listing()?;
    let mut left_out: Vec<NotHeld> = specials
        .into_iter()
        .map(|(rel, why)| NotHeld { path: path_text(&rel), why: why.to_string() })
        .collect();
    let mut large: BTreeSet<PathBuf> = BTreeSet::new();
    news.retain(|rel, meta| match meta {
        Meta::File { size, .. } if *size > MAX_COPIED_FILE => {
            left_out.push(NotHeld { path: path_text(rel), why: too_large(*size) });
            large.insert(rel.clone());
            false
        }
        _ => true,
    });
    left_out.sort_by(|a, b| a.path.cmp(&b.path));
    let paths: BTreeSet<&PathBuf> = olds.keys().chain(news.keys()).collect();
    // First what changed, by metadata and a comparison that stops at the first difference; the
    // bytes are loaded afterwards, one file at a time, as each section of the diff is written.
    let mut added: Vec<(PathBuf, Meta)> = Vec::new();
    let mut deleted: Vec<Option<(PathBuf, Meta)>> = Vec::new();
    let mut entries: Vec<Entry> = Vec::new();
    let mut buffers = Buffers::default();
    for rel in paths {
        let old = match olds.get(rel) {
            Some(meta) => Some(meta.clone()),
            None => base_tree.look(rel)?,
        };
        let new = match news.get(rel) {
            Some(meta) => Some(meta.clone()),
            // Left out (too large to carry): not a deletion either.
            None if large.contains(rel) => continue,
            None => copy_tree.look(rel)?,
        };
        match (old, new) {
            (None, None) => {}
            (None, Some(new)) => added.push((rel.clone(), new)),
            (Some(old), None) => deleted.push(Some((rel.clone(), old))),
            (Some(old), Some(new)) => {
                if !same(&base_tree, rel, &old, &copy_tree, rel, &new, &mut buffers)? {
                    entries.push(Entry { path: rel.clone(), old: Some((rel.clone(), old)), new: Some(new) });
                }
            }
        }
    }
    // An added file with the bytes, kind and mode of a deleted one (not empty) is a rename of it.
    for (rel, meta) in added {
        let mut twin = None;
        for slot in deleted.iter_mut() {
            let Some((from, old)) = slot.as_ref() else { continue };
            let candidate = match (old, &meta) {
                (Meta::File { perm: p1, size: s1 }, Meta::File { perm: p2, size: s2 }) => {
                    p1 == p2 && s1 == s2 && *s1 > 0
                }
                (Meta::Link(t1), Meta::Link(t2)) => t1 == t2,
                _ => false,
            };
            if candidate && same(&base_tree, from, old, &copy_tree, &rel, &meta, &mut buffers)? {
                twin = slot.take();
                break;
            }
        }
        entries.push(Entry { path: rel, old: twin, new: Some(meta) });
    }
    for (rel, meta) in deleted.into_iter().flatten() {
        entries.push(Entry { path: rel.clone(), old: Some((rel, meta)), new: None });
    }
    let mut patch = assemble(&base_tree, &copy_tree, entries)?;
    patch.left_out = left_out;
    Ok(patch)
}

/// A file of a tree as its walk saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Meta {
    /// A regular file: its permission bits and size.
    File { perm: u32, size: u64 },
    /// A symlink: its target.
    Link(Vec<u8>),
}

/// A tree's files by path.
type Files = BTreeMap<PathBuf, Meta>;
/// A tree's special files (FIFOs, sockets, devices), each with what it is in words.
type Specials = Vec<(PathBuf, &'static str)>;

/// A file's mode and content, loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Blob {
    mode: u32,
    bytes: Vec<u8>,
}

impl Blob {
    fn side(&self) -> Side<'_> {
        Side { mode: self.mode, bytes: &self.bytes }
    }
}

/// One of the two trees, open.
struct Tree<'a> {
    root: &'a Path,
    fd: OwnedFd,
}

impl<'a> Tree<'a> {
    fn open(root: &'a Path) -> Result<Tree<'a>, CopyError> {
        Ok(Tree { root, fd: open_root(root)? })
    }

    /// Every file the walk takes, by path; and the special files, with what each is.
    fn listing(&self) -> Result<(Files, Specials), CopyError> {
        let mut lister = Lister { root: self.root, files: BTreeMap::new(), specials: Vec::new() };
        walk(self.root, &self.fd, Scope::Whole, &mut lister)?;
        Ok((lister.files, lister.specials))
    }

    /// The file at `rel`, which the walk did not take (ignored here, or absent): found no-follow.
    /// A directory, a special file or nothing there is no file.
    fn look(&self, rel: &Path) -> Result<Option<Meta>, CopyError> {
        let found = found_beneath(self.fd.as_fd(), &parts(rel))
            .map_err(CopyError::io("look at", &self.root.join(rel)))?;
        Ok(match found {
            Found::File { mode, bytes, .. } => Some(Meta::File { perm: mode, size: bytes.len() as u64 }),
            Found::Symlink(target) => Some(Meta::Link(target)),
            Found::Missing | Found::Dir | Found::Special(_) | Found::Blocked(_) => None,
        })
    }

    /// The regular file at `rel`, opened no-follow.
    fn open_file(&self, rel: &Path) -> Result<fs::File, CopyError> {
        let path = self.root.join(rel);
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY;
        let fd = walk_open(self.fd.as_fd(), &parts(rel), flags, Mode::empty())
            .map_err(CopyError::errno("open", &path))?;
        let stat = rfs::fstat(&fd).map_err(CopyError::errno("look at", &path))?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return Err(CopyError::Io {
                op: "read",
                path,
                source: std::io::Error::other("it is no longer a regular file"),
            });
        }
        Ok(fs::File::from(fd))
    }

    /// The mode and content of the file at `rel` the walk saw as `meta`.
    fn load(&self, rel: &Path, meta: &Meta) -> Result<Blob, CopyError> {
        match meta {
            Meta::Link(target) => Ok(Blob { mode: SYMLINK, bytes: target.clone() }),
            Meta::File { perm, size } => {
                let mut bytes = Vec::with_capacity(usize::try_from(*size).unwrap_or(0));
                self.open_file(rel)?
                    .read_to_end(&mut bytes)
                    .map_err(CopyError::io("read", &self.root.join(rel)))?;
                Ok(Blob { mode: REGULAR | perm, bytes })
            }
        }
    }
}

/// Two buffers for comparing files, made once for all of them.
struct Buffers([Vec<u8>; 2]);

impl Default for Buffers {
    fn default() -> Buffers {
        Buffers([vec![0; COMPARE_CHUNK], vec![0; COMPARE_CHUNK]])
    }
}

/// Bytes of each file read at a time while two are compared.
const COMPARE_CHUNK: usize = 64 << 10;

/// Whether the file at `old_rel` in `base` (seen as `old`) and the one at `new_rel` in `copy` (seen
/// as `new`) are the same: kind, mode and bytes (compared as they are read, stopping at the first
/// difference).
fn same(
    base: &Tree<'_>,
    old_rel: &Path,
    old: &Meta,
    copy: &Tree<'_>,
    new_rel: &Path,
    new: &Meta,
    buffers: &mut Buffers,
) -> Result<bool, CopyError> {
    match (old, new) {
        (Meta::File { perm: p1, size: s1 }, Meta::File { perm: p2, size: s2 }) => {
            if p1 != p2 || s1 != s2 {
                return Ok(false);
            }
            let (mut a, mut b) = (base.open_file(old_rel)?, copy.open_file(new_rel)?);
            let [abuf, bbuf] = &mut buffers.0;
            loop {
                let n = read_full(&mut a, abuf).map_err(CopyError::io("read", &base.root.join(old_rel)))?;
                let m = read_full(&mut b, bbuf).map_err(CopyError::io("read", &copy.root.join(new_rel)))?;
                if abuf[..n] != bbuf[..m] {
                    return Ok(false);
                }
                if n == 0 {
                    return Ok(true);
                }
            }
        }
        (Meta::Link(t1), Meta::Link(t2)) => Ok(t1 == t2),
        _ => Ok(false),
    }
}

/// Reads until `buf` is full or the file ends; the bytes read.
fn read_full(file: &mut fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// Collects what a tree's walk takes.
struct Lister<'a> {
    root: &'a Path,
    files: Files,
    specials: Specials,
}

impl Visitor for Lister<'_> {
    fn file(&mut self, at: &At<'_>) -> Result<(), CopyError> {
        let stat = match rfs::statat(at.parent, at.name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            Err(rustix::io::Errno::NOENT) => return Ok(()),
            Err(e) => return Err(CopyError::errno("look at", &self.root.join(at.rel))(e)),
        };
        if FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile {
            let size = u64::try_from(stat.st_size).unwrap_or(0);
            self.files.insert(at.rel.to_path_buf(), Meta::File { perm: stat.st_mode & 0o7777, size });
        }
        Ok(())
    }

    fn symlink(&mut self, at: &At<'_>) -> Result<(), CopyError> {
        match rfs::readlinkat(at.parent, at.name, Vec::new()) {
            Ok(target) => {
                self.files.insert(at.rel.to_path_buf(), Meta::Link(target.into_bytes()));
                Ok(())
            }
            Err(rustix::io::Errno::NOENT | rustix::io::Errno::INVAL) => Ok(()),
            Err(e) => Err(CopyError::errno("read the symlink", &self.root.join(at.rel))(e)),
        }
    }

    fn special(&mut self, at: &At<'_>, mode: u32) -> Result<(), CopyError> {
        self.specials.push((at.rel.to_path_buf(), special_kind(mode).unwrap_or("a special file")));
        Ok(())
    }
}

/// One file of the patch before it is written: its path in the copy, its base side (with the base's
/// path, another for a rename) and its copy side, as the walks saw them.
struct Entry {
    path: PathBuf,
    old: Option<(PathBuf, Meta)>,
    new: Option<Meta>,
}

/// The most text of a patch's unified diff: 64 MiB. Past it, a file's section says its lines are not
/// shown (the file is in the patch and merged all the same, and its lines counted): a branch that ran
/// `npm install` changes tens of thousands of files, and its patch's text is archived and redacted in
/// memory.
pub const MAX_PATCH_TEXT: usize = 64 << 20;

/// The patch of `entries`, in path order: each file's bytes loaded from its tree when its section is
/// written, and let go before the next.
fn assemble(base: &Tree<'_>, copy: &Tree<'_>, mut entries: Vec<Entry>) -> Result<Patch, CopyError> {
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    let mut patch = Patch {
        files: Vec::new(),
        unified: String::new(),
        lines_added: 0,
        lines_removed: 0,
        left_out: Vec::new(),
    };
    let mut scratch = String::new();
    for Entry { path, old, new } in entries {
        let old = match old {
            Some((from, meta)) => Some((path_text(&from), base.load(&from, &meta)?)),
            None => None,
        };
        let new = match new {
            Some(meta) => Some(copy.load(&path, &meta)?),
            None => None,
        };
        let path = path_text(&path);
        let old_path = old.as_ref().map_or(path.as_str(), |(p, _)| p.as_str()).to_string();
        let old = old.map(|(_, blob)| blob);
        let shown = patch.unified.len() < MAX_PATCH_TEXT;
        let out = if shown { &mut patch.unified } else { &mut scratch };
        let counted =
            file_section(out, &old_path, &path, old.as_ref().map(Blob::side), new.as_ref().map(Blob::side));
        if !shown {
            scratch.clear();
            patch.unified.push_str(&format!(
                "diff --git a/{old_path} b/{path}\n(not shown: the patch's text passed {} MiB; the file is carried all the same)\n",
                MAX_PATCH_TEXT >> 20
            ));
        }
        let change = match (old, new) {
            (Some(_), Some(n)) if old_path != path => Change::Renamed { from: old_path, mode: n.mode },
            (Some(o), Some(n)) if o.bytes == n.bytes && o.mode & TYPE_MASK == n.mode & TYPE_MASK => {
                Change::Mode { old_mode: o.mode, new_mode: n.mode }
            }
            (Some(o), Some(n)) => Change::Modified { old_mode: o.mode, new_mode: n.mode },
            (Some(o), None) => Change::Deleted { mode: o.mode },
            (None, Some(n)) => Change::Added { mode: n.mode },
            (None, None) => continue,
        };
        patch.lines_added += counted.added;
        patch.lines_removed += counted.removed;
        patch.files.push(FileChange {
            path,
            change,
            binary: counted.binary,
            lines_added: counted.added,
            lines_removed: counted.removed,
        });
    }
    Ok(patch)
}
