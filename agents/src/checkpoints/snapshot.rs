//! [`Snapshotter`]: a checkpoint of a tree, reading only the files that changed since the last one.

use super::error::CheckpointError;
use super::objects::{hex, Objects};
use super::tree::{encode, Entry, DIR};
use crate::copies::walk::{open_root, path_text, walk, At, Scope, Visitor};
use crate::copies::CopyError;
use agentd_protocol::checkpoint::{FileState, REGULAR, SYMLINK};
use rustix::fd::OwnedFd;
use rustix::fs::{self as rfs, FileType, Mode, OFlags};
use rustix::io::Errno;
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A file's `stat` identity: while it is unchanged, so are the file's bytes (a write changes the
/// modification and status-change times, which cannot be set back to what they were).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: i64,
    mtime: (i64, u64),
    ctime: (i64, u64),
    mode: u32,
}

impl Stamp {
    fn of(stat: &rfs::Stat) -> Stamp {
        Stamp {
            dev: stat.st_dev,
            ino: stat.st_ino,
            size: stat.st_size,
            mtime: (stat.st_mtime, stat.st_mtime_nsec),
            ctime: (stat.st_ctime, stat.st_ctime_nsec),
            mode: stat.st_mode,
        }
    }
}

/// Takes checkpoints of trees, remembering what it hashed: one per task is enough (a file is known
/// by its absolute path). It is a cache only: a new one (after a restart) reads every file once more,
/// and stores nothing the store already holds.
#[derive(Debug, Default)]
pub struct Snapshotter {
    known: HashMap<PathBuf, (Stamp, FileState)>,
    stored: HashSet<String>,
    /// Bytes of file content stored so far (objects the store did not hold).
    kept_bytes: u64,
}

/// What one checkpoint recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The checkpoint: the sha256 of the root directory's object.
    pub tree: String,
    /// Files (and symlinks) it holds.
    pub files: u64,
    /// Files read and hashed (the rest were known unchanged).
    pub read: u64,
    /// Objects stored that the store did not hold, and their bytes.
    pub stored: u64,
    /// Their bytes.
    pub stored_bytes: u64,
    /// Files whose bytes were not kept (the budget was reached, or they hold a secret).
    pub unkept: Vec<String>,
}

impl Snapshotter {
    /// A snapshotter that knows nothing yet.
    pub fn new() -> Snapshotter {
        Snapshotter::default()
    }

    /// Bytes of file content this snapshotter has stored.
    pub fn kept_bytes(&self) -> u64 {
        self.kept_bytes
    }

    /// Records the tree at `root` in `objects`, keeping file bytes while this snapshotter has stored
    /// fewer than `max_bytes`, and never the bytes of a file `withheld` says no to (one holding a
    /// secret): such a file is recorded by its sha256 alone. Then syncs the objects. The checkpoint's
    /// name and what it took.
    pub fn snapshot<O: Objects>(
        &mut self,
        root: &Path,
        objects: &O,
        max_bytes: u64,
        withheld: &dyn Fn(&[u8]) -> bool,
    ) -> Result<Snapshot, CheckpointError<O::Error>> {
        let root_fd = open_root(root)?;
        let mut taker = Taker {
            me: self,
            root,
            objects,
            max_bytes,
            withheld,
            levels: vec![Vec::new()],
            failed: None,
            buf: Vec::new(),
            snapshot: Snapshot {
                tree: String::new(),
                files: 0,
                read: 0,
                stored: 0,
                stored_bytes: 0,
                unkept: Vec::new(),
            },
        };
        let walked = walk(root, &root_fd, Scope::Seen, &mut taker);
        if let Some(e) = taker.failed.take() {
            return Err(e);
        }
        walked?;
        let top = taker.levels.pop().unwrap_or_default();
        let tree = taker.put_listing(top)?;
        let mut snapshot = taker.snapshot;
        snapshot.tree = tree;
        objects.sync().map_err(CheckpointError::Store)?;
        Ok(snapshot)
    }
}

/// One walk's state: a listing per directory entered, the root's first.
struct Taker<'a, O: Objects> {
    me: &'a mut Snapshotter,
    root: &'a Path,
    objects: &'a O,
    max_bytes: u64,
    withheld: &'a dyn Fn(&[u8]) -> bool,
    levels: Vec<Vec<Entry>>,
    /// The store's failure, which stops the walk.
    failed: Option<CheckpointError<O::Error>>,
    buf: Vec<u8>,
    snapshot: Snapshot,
}

/// What stops a walk when the store failed (the failure itself is kept in [`Taker::failed`]).
fn stop() -> CopyError {
    CopyError::Io { op: "store", path: PathBuf::new(), source: std::io::Error::other("the store failed") }
}

impl<O: Objects> Taker<'_, O> {
    /// Stores `bytes` as an object unless it is known stored; whether it was new.
    fn put(&mut self, id: &str, bytes: &[u8]) -> Result<bool, CheckpointError<O::Error>> {
        if self.me.stored.contains(id) {
            return Ok(false);
        }
        let new = !self.objects.has(id).map_err(CheckpointError::Store)?;
        if new {
            self.objects.put(id, bytes).map_err(CheckpointError::Store)?;
            self.snapshot.stored += 1;
            self.snapshot.stored_bytes += bytes.len() as u64;
        }
        self.me.stored.insert(id.to_string());
        Ok(new)
    }

    /// Stores a directory's listing; its name.
    /// Sorted by name as text first: the walk goes in the order of the names' bytes, which a name
    /// that is not UTF-8 (escaped in its text) may not keep, and a comparison reads listings in text
    /// order.
    fn put_listing(&mut self, mut entries: Vec<Entry>) -> Result<String, CheckpointError<O::Error>> {
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        let bytes = encode(&entries);
        let id = super::objects::sha256_hex(&bytes);
        self.put(&id, &bytes)?;
        Ok(id)
    }

    /// Keeps a store failure and stops the walk.
    fn fail(&mut self, e: CheckpointError<O::Error>) -> CopyError {
        self.failed = Some(e);
        stop()
    }

    fn add(&mut self, name: String, state: FileState) {
        if let Some(level) = self.levels.last_mut() {
            level.push(Entry { name, state });
        }
    }

    /// The regular file at `at`, hashed unless its stamp is known; its state.
    fn file_state(&mut self, at: &At<'_>) -> Result<Option<FileState>, CopyError> {
        let abs = self.root.join(at.rel);
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        let fd: OwnedFd = match rfs::openat(at.parent, at.name, flags, Mode::empty()) {
            Ok(fd) => fd,
            // Gone, or swapped for a symlink, since the directory was listed; unreadable: passed over.
            Err(Errno::NOENT | Errno::LOOP | Errno::ACCESS | Errno::PERM) => return Ok(None),
            Err(e) => return Err(CopyError::errno("open", &abs)(e)),
        };
        let stat = rfs::fstat(&fd).map_err(CopyError::errno("look at", &abs))?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return Ok(None);
        }
        let stamp = Stamp::of(&stat);
        if let Some((known, state)) = self.me.known.get(&abs) {
            if *known == stamp {
                return Ok(Some(state.clone()));
            }
        }
        let size = u64::try_from(stat.st_size).unwrap_or(0);
        let keep = self.me.kept_bytes.saturating_add(size) <= self.max_bytes;
        let mut file = File::from(fd);
        let mode = REGULAR | (stat.st_mode & 0o7777);
        self.snapshot.read += 1;
        let state = if keep {
            self.buf.clear();
            file.read_to_end(&mut self.buf).map_err(CopyError::io("read", &abs))?;
            let sha256 = super::objects::sha256_hex(&self.buf);
            if (self.withheld)(&self.buf) {
                self.snapshot.unkept.push(path_text(at.rel));
                let state = FileState { mode, sha256, unkept: true };
                self.me.known.insert(abs, (stamp, state.clone()));
                return Ok(Some(state));
            }
            let bytes = std::mem::take(&mut self.buf);
            let new = self.put(&sha256, &bytes);
            self.buf = bytes;
            match new {
                Ok(true) => self.me.kept_bytes += size,
                Ok(false) => {}
                Err(e) => return Err(self.fail(e)),
            }
            FileState { mode, sha256, unkept: false }
        } else {
            let mut hasher = Sha256::new();
            let mut chunk = vec![0u8; 1 << 20];
            loop {
                match file.read(&mut chunk) {
                    Ok(0) => break,
                    Ok(n) => hasher.update(&chunk[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(CopyError::io("read", &abs)(e)),
                }
            }
            let sha256 = hex(&hasher.finalize());
            // Already stored (an earlier checkpoint kept these bytes): kept after all.
            let stored = match self.objects.has(&sha256) {
                Ok(stored) => stored,
                Err(e) => return Err(self.fail(CheckpointError::Store(e))),
            };
            if !stored {
                self.snapshot.unkept.push(path_text(at.rel));
            }
            FileState { mode, sha256, unkept: !stored }
        };
        self.me.known.insert(abs, (stamp, state.clone()));
        Ok(Some(state))
    }
}

/// An entry's name as text, whatever its bytes (`agentd_protocol::path_name`).
fn text_name(at: &At<'_>) -> String {
    agentd_protocol::path_name::encode(at.name.as_bytes())
}

impl<O: Objects> Visitor for Taker<'_, O> {
    fn entered(&mut self, _: &At<'_>, _: &OwnedFd) -> Result<bool, CopyError> {
        self.levels.push(Vec::new());
        Ok(true)
    }

    fn left(&mut self, rel: &Path) -> Result<(), CopyError> {
        let entries = self.levels.pop().unwrap_or_default();
        let id = match self.put_listing(entries) {
            Ok(id) => id,
            Err(e) => return Err(self.fail(e)),
        };
        let name = agentd_protocol::path_name::encode(rel.file_name().unwrap_or_default().as_bytes());
        self.add(name, FileState { mode: DIR, sha256: id, unkept: false });
        Ok(())
    }

    fn file(&mut self, at: &At<'_>) -> Result<(), CopyError> {
        let name = text_name(at);
        let Some(state) = self.file_state(at)? else { return Ok(()) };
        self.snapshot.files += 1;
        self.add(name, state);
        Ok(())
    }

    fn symlink(&mut self, at: &At<'_>) -> Result<(), CopyError> {
        let name = text_name(at);
        let target = match rfs::readlinkat(at.parent, at.name, Vec::new()) {
            Ok(target) => target.into_bytes(),
            Err(Errno::NOENT | Errno::INVAL) => return Ok(()),
            Err(e) => return Err(CopyError::errno("read the symlink", &self.root.join(at.rel))(e)),
        };
        let sha256 = super::objects::sha256_hex(&target);
        if let Err(e) = self.put(&sha256, &target) {
            return Err(self.fail(e));
        }
        self.snapshot.files += 1;
        self.add(name, FileState { mode: SYMLINK, sha256, unkept: false });
        Ok(())
    }

    fn special(&mut self, at: &At<'_>, mode: u32) -> Result<(), CopyError> {
        self.snapshot.files += 1;
        self.add(text_name(at), FileState { mode, sha256: super::objects::no_content(), unkept: true });
        Ok(())
    }
}
