//! [`make_copy`]: a working copy of a tree, made file by file beside it.

use super::error::CopyError;
use super::walk::{open_root, path_text, walk, At, Scope, Visitor};
use crate::workspace::open_entry;
use agentd_protocol::checkpoint::{special_kind, NotHeld};
use rustix::fd::OwnedFd;
use rustix::fs::{self as rfs, FileType, Mode, OFlags};
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The largest file a working copy carries: 256 MiB. A bigger one is neither copied into a branch's
/// copy nor brought back from it — it is named instead (in [`Made::left_out`] and
/// [`Patch::left_out`](super::Patch)), to the branch and to the lead. A copy's patch holds the
/// files it changed in memory and archives them as a diff; past this size that would cost more than
/// the file is worth to a branch (datasets, disk images, model weights are read in the workspace).
pub const MAX_COPIED_FILE: u64 = 256 << 20;

/// What [`make_copy`] copied, and what it could not.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Made {
    /// Regular files and symlinks copied.
    pub files: u64,
    /// Bytes of the regular files copied.
    pub bytes: u64,
    /// What stands in the tree and is not in the copy: FIFOs, sockets, devices, files over
    /// [`MAX_COPIED_FILE`] — each path (as `agentd_protocol::path_name` writes it) and why.
    pub left_out: Vec<NotHeld>,
}

/// Why a file over [`MAX_COPIED_FILE`] is left out, in words.
pub(crate) fn too_large(bytes: u64) -> String {
    format!("{bytes} bytes, over the {} MiB a working copy carries", MAX_COPIED_FILE >> 20)
}

/// Copies the whole tree `from` into `to`, which must not exist (it is created, parents included):
/// every file, what git ignores included (a branch needs the `.env`, the `node_modules` and the build
/// outputs the workspace has), hidden ones too; `.git` and the evidence folder
/// ([`agentd_protocol::task::EVIDENCE_FOLDER`]) left out. A name that is not UTF-8 is copied as it is.
///
/// Never follows a symlink: a symlink is copied as a symlink (the same target text), and every entry
/// is opened relative to its directory's descriptor with `O_NOFOLLOW`. A regular file keeps its
/// permission bits; its bytes are copied by `std::io::copy` between the two open files, which on Linux
/// is the `copy_file_range` path `std::fs::copy` takes (the filesystem shares extents where it can:
/// a reflink on btrfs or XFS). Directories keep their permission bits (set once their entries are
/// copied), empty ones included. FIFOs, sockets, devices and files over [`MAX_COPIED_FILE`] are not
/// copied: they are named in [`Made::left_out`].
///
/// On failure, whatever was made of `to` is removed again.
pub fn make_copy(from: &Path, to: &Path) -> Result<Made, CopyError> {
    let src = open_root(from)?;
    if let Some(parent) = to.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent).map_err(CopyError::io("create the directories above", to))?;
    }
    fs::create_dir(to).map_err(CopyError::io("create the copy's directory", to))?;
    let made = (|| {
        let dst = open_root(to)?;
        let root = rfs::fstat(&dst).map_err(CopyError::errno("look at", to))?;
        let root_mode = rfs::fstat(&src).map_err(CopyError::errno("look at", from))?.st_mode;
        // `st_dev` and `st_ino` are `u64` on x86_64 and narrower elsewhere.
        #[allow(clippy::useless_conversion)]
        let root = (u64::from(root.st_dev), u64::from(root.st_ino));
        let mut copier = Copier { to, root, dirs: vec![(dst, root_mode)], made: Made::default() };
        walk(from, &src, Scope::Whole, &mut copier)?;
        copier.left(Path::new(""))?;
        Ok(copier.made)
    })();
    if made.is_err() {
        let _ = remove_copy(to);
    }
    made
}

/// Removes a copy (or a base) that [`make_copy`] made, and all that was made in it since: as
/// `std::fs::remove_dir_all`, but a directory its owner may not write (a copied read-only one) is
/// made writable first, so it can be emptied. Symlinks are removed, never followed.
pub fn remove_copy(dir: &Path) -> Result<(), CopyError> {
    match fs::remove_dir_all(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            let root = open_root(dir)?;
            let _ = rfs::fchmod(&root, Mode::from_raw_mode(0o700));
            let mut todo = vec![(root, dir.to_path_buf())];
            while let Some((fd, path)) = todo.pop() {
                let read = |e| CopyError::errno("read the directory", &path)(e);
                for entry in rfs::Dir::read_from(&fd).map_err(read)? {
                    let entry = entry.map_err(read)?;
                    let name = entry.file_name();
                    if entry.file_type() == FileType::Symlink || [&b"."[..], b".."].contains(&name.to_bytes())
                    {
                        continue;
                    }
                    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                    // Not a directory (or gone): nothing to make writable.
                    let Ok(child) = rfs::openat(&fd, name, flags, Mode::empty()) else { continue };
                    let stat = rfs::fstat(&child).map_err(CopyError::errno("look at", &path))?;
                    let _ = rfs::fchmod(&child, Mode::from_raw_mode((stat.st_mode & 0o7777) | 0o700));
                    let child_path = path.join(std::ffi::OsStr::from_bytes(name.to_bytes()));
                    todo.push((child, child_path));
                }
            }
            fs::remove_dir_all(dir).map_err(CopyError::io("remove", dir))
        }
        other => other.map_err(CopyError::io("remove", dir)),
    }
}

/// Makes the copy as the walk goes: one open directory of the copy per level being walked, each
/// with the mode to give it once its entries are in.
struct Copier<'a> {
    to: &'a Path,
    /// The copy's root (device, inode).
    root: (u64, u64),
    dirs: Vec<(OwnedFd, u32)>,
    made: Made,
}

impl Copier<'_> {
    /// The copy's directory the current entries go into.
    fn here(&self, rel: &Path) -> Result<&OwnedFd, CopyError> {
        self.dirs.last().map(|(fd, _)| fd).ok_or_else(|| CopyError::Io {
            op: "copy",
            path: self.to.join(rel),
            source: std::io::Error::other("the walk left the root"),
        })
    }
}

impl Visitor for Copier<'_> {
    fn entered(&mut self, at: &At<'_>, dir: &OwnedFd) -> Result<bool, CopyError> {
        let dst = self.to.join(at.rel);
        let stat = rfs::fstat(dir).map_err(CopyError::errno("look at", &dst))?;
        // A copy made inside the tree it copies is not copied into itself.
        // `st_dev` and `st_ino` are `u64` on x86_64 and narrower elsewhere.
        #[allow(clippy::useless_conversion)]
        let id = (u64::from(stat.st_dev), u64::from(stat.st_ino));
        if id == self.root {
            return Ok(false);
        }
        let mode = stat.st_mode;
        let here = self.here(at.rel)?;
        // Owner-only until its entries are in, then its own mode (a read-only directory included).
        rfs::mkdirat(here, at.name, Mode::from_raw_mode(0o700))
            .map_err(CopyError::errno("create the directory", &dst))?;
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rfs::openat(here, at.name, flags, Mode::empty())
            .map_err(CopyError::errno("open the directory", &dst))?;
        self.dirs.push((fd, mode));
        Ok(true)
    }

    fn left(&mut self, rel: &Path) -> Result<(), CopyError> {
        if let Some((fd, mode)) = self.dirs.pop() {
            rfs::fchmod(&fd, Mode::from_raw_mode(mode & 0o7777))
                .map_err(CopyError::errno("set the mode of", &self.to.join(rel)))?;
        }
        Ok(())
    }

    fn file(&mut self, at: &At<'_>) -> Result<(), CopyError> {
        let dst = self.to.join(at.rel);
        let (src, stat) = match open_entry(at.parent, at.name) {
            Ok(opened) => opened,
            // Swapped for a symlink, or gone, since the directory was listed: not a file to copy.
            Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOENT) => return Ok(()),
            Err(e) => return Err(CopyError::errno("open", &dst)(e)),
        };
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return Ok(());
        }
        let size = u64::try_from(stat.st_size).unwrap_or(0);
        if size > MAX_COPIED_FILE {
            self.made.left_out.push(NotHeld { path: path_text(at.rel), why: too_large(size) });
            return Ok(());
        }
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let out = rfs::openat(self.here(at.rel)?, at.name, flags, Mode::from_raw_mode(0o600))
            .map_err(CopyError::errno("create", &dst))?;
        let mut out = fs::File::from(out);
        let bytes = std::io::copy(&mut fs::File::from(src), &mut out).map_err(CopyError::io("copy", &dst))?;
        rfs::fchmod(&out, Mode::from_raw_mode(stat.st_mode & 0o7777))
            .map_err(CopyError::errno("set the mode of", &dst))?;
        self.made.files += 1;
        self.made.bytes += bytes;
        Ok(())
    }

    fn symlink(&mut self, at: &At<'_>) -> Result<(), CopyError> {
        let dst = self.to.join(at.rel);
        let target = match rfs::readlinkat(at.parent, at.name, Vec::new()) {
            Ok(target) => target,
            Err(rustix::io::Errno::NOENT | rustix::io::Errno::INVAL) => return Ok(()),
            Err(e) => return Err(CopyError::errno("read the symlink", &dst)(e)),
        };
        rfs::symlinkat(target.as_c_str(), self.here(at.rel)?, at.name)
            .map_err(CopyError::errno("create the symlink", &dst))?;
        self.made.files += 1;
        Ok(())
    }

    fn special(&mut self, at: &At<'_>, mode: u32) -> Result<(), CopyError> {
        let why = special_kind(mode).unwrap_or("a special file").to_string();
        self.made.left_out.push(NotHeld { path: path_text(at.rel), why });
        Ok(())
    }
}
