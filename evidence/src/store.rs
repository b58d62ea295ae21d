//! Opening, flushing and healing the database.
//!
//! The store is one sled database (its trees: `trees.rs`) under `<home>/db`, and the blob
//! directory of evidence bytes, content-addressed files (see [`crate::blobs`]): normally
//! `<home>/evidence` beside the database.
//!
//! sled takes an exclusive file lock on the database: a second process opening the same directory
//! gets [`StoreError::Open`] naming the path. The lock is an `flock` on a freshly opened file, so a
//! second [`Store::open`] of the same directory inside one process is refused the same way while the
//! first is alive; share one [`Store`] by cloning it instead (clones are cheap and share everything).
//!
//! Healing. sled 0.34 remembers the first IO error of a database (a full disk) and fails every
//! later write of that handle with it, even after the space is back; only a fresh open clears it.
//! So the handles live behind a swappable inner (`Trees`, one open of the database): a write that
//! fails with an IO error marks the store unhealthy ([`Store::health`]); while unhealthy, the next
//! write (or [`Store::heal`], which the daemon calls periodically) first checks that the directory
//! takes a write again, then drops the old handles, opens the database again and swaps it in — at
//! most once a second. Writes made while unhealthy fail with [`StoreError::Unavailable`] without
//! touching the disk. Per-task sequence counters belong to the inner and are reloaded from the
//! reopened log, so they continue from what is really on disk. Nothing acknowledged is lost: an
//! acknowledgement comes only after a flush of the same handles the write went to.

use crate::blobs::Blobs;
use crate::error::StoreError;
#[cfg(feature = "testing")]
use crate::faults::Faults;
use crate::trees::Trees;
use parking_lot::Mutex;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime};

/// The least time between two attempts to reopen an unhealthy database.
const REOPEN_EVERY: Duration = Duration::from_secs(1);
/// How much the directory must take (written, synced and removed) before a reopen is tried: a little
/// more than the sled segment a fresh open may start.
const PROBE_BYTES: usize = 1 << 20;

/// Whether the store takes writes, and if not, since when and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    /// True when the store takes writes.
    pub ok: bool,
    /// The write failure that made the store unhealthy (or the last failed attempt to heal it).
    pub error: Option<String>,
    /// When the store became unhealthy.
    pub since: Option<SystemTime>,
}

#[derive(Default)]
struct Sickness {
    /// The failure that made the store unhealthy; `None` when healthy.
    cause: Option<(sled::Error, SystemTime)>,
    /// The last failed attempt to heal, shown in [`Health::error`] after the cause.
    attempt_error: Option<String>,
    last_attempt: Option<Instant>,
}

/// The durable store: one sled database (tasks, every task's log and events, settings, learned windows,
/// evidence metadata and indexes) and the blob directory beside it. Cheap to clone: clones share the handles,
/// the sequence counters and the health, so one process keeps one `Store` and hands out clones. Every
/// mutating call flushes before it returns.
#[derive(Clone)]
pub struct Store {
    /// The current open of the database; `None` only after the old handles were dropped for a reopen
    /// that failed.
    inner: Arc<RwLock<Option<Arc<Trees>>>>,
    generation: Arc<AtomicU64>,
    unhealthy: Arc<AtomicBool>,
    sickness: Arc<Mutex<Sickness>>,
    /// Serialises attempts to reopen.
    reopening: Arc<Mutex<()>>,
    /// The current open cannot be dropped (see [`can_drop`]): no reopen is tried again.
    stuck: Arc<AtomicBool>,
    /// The blob directory and the in-memory record of blobs verified by this process.
    pub(crate) blobs: Arc<Blobs>,
    /// The fault switches tests turn on (only with the `testing` feature; see [`crate::faults`]).
    #[cfg(feature = "testing")]
    pub(crate) faults: Arc<Faults>,
    /// Serialises read-modify-write of task metadata.
    pub(crate) task_writes: Arc<Mutex<()>>,
    /// Serialises read-modify-write of memory notes.
    pub(crate) memory_writes: Arc<Mutex<()>>,
    path: Arc<PathBuf>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.path)
            .field("blob_dir", &self.blobs.dir())
            .field("healthy", &!self.unhealthy.load(Ordering::SeqCst))
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Opens (creating if needed) the database in `dir`, normally `<home>/db`, with its evidence blobs
    /// in the sibling directory `evidence` (`<home>/db` → `<home>/evidence`; a `dir` without a parent
    /// keeps them in `dir/evidence`). See [`Store::open_with_blobs`].
    pub fn open(dir: &Path) -> Result<Store, StoreError> {
        let blob_dir = match dir.parent() {
            Some(parent) => parent.join("evidence"),
            None => dir.join("evidence"),
        };
        Store::open_with_blobs(dir, &blob_dir)
    }

    /// Opens (creating if needed) the database in `dir`, keeping evidence blobs in `blob_dir`. The
    /// blob directory is created when the first blob is written.
    pub fn open_with_blobs(dir: &Path, blob_dir: &Path) -> Result<Store, StoreError> {
        let trees = Trees::open(dir, 1)?;
        Ok(Store {
            inner: Arc::new(RwLock::new(Some(Arc::new(trees)))),
            generation: Arc::new(AtomicU64::new(1)),
            unhealthy: Arc::new(AtomicBool::new(false)),
            sickness: Arc::new(Mutex::new(Sickness::default())),
            reopening: Arc::new(Mutex::new(())),
            stuck: Arc::new(AtomicBool::new(false)),
            blobs: Arc::new(Blobs::new(blob_dir.to_path_buf())),
            #[cfg(feature = "testing")]
            faults: Arc::default(),
            task_writes: Arc::new(Mutex::new(())),
            memory_writes: Arc::new(Mutex::new(())),
            path: Arc::new(dir.to_path_buf()),
        })
    }

    /// The directory this store was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Makes everything written so far durable. Cheap when nothing is dirty, so concurrent writers
    /// flushing after each other coalesce into one disk sync (group commit).
    pub fn flush(&self) -> Result<(), StoreError> {
        let trees = self.writing()?;
        self.flush_on(&trees)
    }

    /// Whether the store takes writes now.
    pub fn health(&self) -> Health {
        let sickness = self.sickness.lock();
        match &sickness.cause {
            None => Health { ok: true, error: None, since: None },
            Some((cause, since)) => {
                let error = match &sickness.attempt_error {
                    Some(attempt) => format!("{cause}; reopening failed: {attempt}"),
                    None => cause.to_string(),
                };
                Health { ok: false, error: Some(error), since: Some(*since) }
            }
        }
    }

    /// If the store is unhealthy, tries to heal it now (rate-limited to once a second): true when it
    /// is healthy afterwards. The daemon calls this periodically so a store heals without waiting
    /// for a write.
    pub fn heal(&self) -> bool {
        self.try_heal().is_ok()
    }

    /// Fault injection, only with the `testing` feature: the next write fails with an IO error as if
    /// the disk had refused it, marking the store unhealthy exactly as a real failure does (the
    /// database's own handles are left as they are, so a reopen is real but not strictly needed).
    #[cfg(feature = "testing")]
    pub fn inject_write_failure(&self) {
        self.faults.fail_next_write();
    }

    /// The current handles, for reading. Reads keep working on the handles of an unhealthy store
    /// (sled only refuses writes); only while a reopen has dropped them and failed is this
    /// [`StoreError::Unavailable`].
    pub(crate) fn trees(&self) -> Result<Arc<Trees>, StoreError> {
        let current = self.inner.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        match current {
            Some(trees) => Ok(trees),
            None => Err(self.unavailable()),
        }
    }

    /// The current handles, for writing: heals an unhealthy store first (or refuses with
    /// [`StoreError::Unavailable`] while it cannot be healed).
    pub(crate) fn writing(&self) -> Result<Arc<Trees>, StoreError> {
        #[cfg(feature = "testing")]
        if self.faults.take_write_failure() {
            let trees = self.trees()?;
            let injected = sled::Error::Io(std::io::Error::other("injected write failure (fault injection)"));
            return self.noted(&trees, Err(StoreError::Db(injected)));
        }
        self.try_heal()?;
        self.trees()
    }

    /// Refuses a write of `bytes` (a large value) that the disk has no room for, as the IO error a
    /// full disk gives, marking the store unhealthy — before sled could get stuck on it.
    pub(crate) fn room(&self, trees: &Trees, bytes: usize) -> Result<(), StoreError> {
        if bytes < LARGE_VALUE {
            return Ok(());
        }
        let need = (bytes as u64).saturating_mul(2) + PROBE_BYTES as u64;
        match free_bytes(&self.path) {
            Ok(free) if free < need => {
                let full = std::io::Error::new(
                    std::io::ErrorKind::StorageFull,
                    format!("{} has {free} bytes free, a write of {bytes} needs {need}", self.path.display()),
                );
                self.noted(trees, Err(StoreError::Db(sled::Error::Io(full))))
            }
            _ => Ok(()),
        }
    }

    /// Flushes the handles a write went to (never a newer open's: that would acknowledge a write the
    /// reopen dropped).
    pub(crate) fn flush_on(&self, trees: &Trees) -> Result<(), StoreError> {
        let flushed = trees.db.flush().map(|_| ()).map_err(StoreError::from);
        self.noted(trees, flushed)
    }

    /// Passes a write's result through, marking the store unhealthy when it failed with an IO error
    /// on the current open.
    pub(crate) fn noted<T>(&self, trees: &Trees, result: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Err(StoreError::Db(e @ sled::Error::Io(_))) = &result {
            if trees.generation == self.generation.load(Ordering::SeqCst) {
                let mut sickness = self.sickness.lock();
                if sickness.cause.is_none() {
                    sickness.cause = Some((e.clone(), SystemTime::now()));
                    sickness.attempt_error = None;
                    sickness.last_attempt = None;
                }
                self.unhealthy.store(true, Ordering::SeqCst);
            }
        }
        result
    }

    fn unavailable(&self) -> StoreError {
        let sickness = self.sickness.lock();
        match &sickness.cause {
            Some((cause, _)) => StoreError::Unavailable {
                path: self.path.to_path_buf(),
                attempt: sickness.attempt_error.clone(),
                source: cause.clone(),
            },
            None => StoreError::Unavailable {
                path: self.path.to_path_buf(),
                attempt: sickness.attempt_error.clone(),
                source: sled::Error::Unsupported("the database is closed".into()),
            },
        }
    }

    /// Heals an unhealthy store: Ok when healthy (already, or after a reopen now).
    fn try_heal(&self) -> Result<(), StoreError> {
        if !self.unhealthy.load(Ordering::SeqCst) {
            return Ok(());
        }
        let _reopening = self.reopening.lock();
        if !self.unhealthy.load(Ordering::SeqCst) {
            return Ok(());
        }
        {
            let mut sickness = self.sickness.lock();
            if sickness.last_attempt.is_some_and(|at| at.elapsed() < REOPEN_EVERY) {
                drop(sickness);
                return Err(self.unavailable());
            }
            sickness.last_attempt = Some(Instant::now());
        }
        let failed = |store: &Store, why: String| {
            store.sickness.lock().attempt_error = Some(why);
            Err(store.unavailable())
        };
        // Keep the old handles (reads still work on them) until the disk takes a write again.
        if let Err(e) = probe(&self.path) {
            return failed(self, format!("{} does not take writes yet: {e}", self.path.display()));
        }
        let generation = self.generation.load(Ordering::SeqCst) + 1;
        // Drop our handles; writers still holding the old open finish on it (and fail), and
        // `open_db` waits for their lock to go.
        let current = self.inner.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        if let Some(old) = current {
            if self.stuck.load(Ordering::SeqCst) || !can_drop(&old) {
                self.stuck.store(true, Ordering::SeqCst);
                return failed(
                    self,
                    "the database handle is stuck after a failed large write (sled 0.34): \
                     restart the daemon to heal it; nothing acknowledged is lost"
                        .into(),
                );
            }
        }
        let old = self.inner.write().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        drop(old);
        match Trees::open(&self.path, generation) {
            Ok(trees) => {
                self.generation.store(generation, Ordering::SeqCst);
                *self.inner.write().unwrap_or_else(std::sync::PoisonError::into_inner) =
                    Some(Arc::new(trees));
                *self.sickness.lock() = Sickness::default();
                self.unhealthy.store(false, Ordering::SeqCst);
                Ok(())
            }
            Err(e) => failed(self, e.to_string()),
        }
    }
}

/// How long a flush of an old open may take before it counts as stuck.
const FLUSH_WITHIN: Duration = Duration::from_secs(1);

/// Whether an old open can be dropped: its flush (which a drop repeats) returns. sled 0.34 can
/// leave a handle whose flush never returns — a blob write (a value over about 128 KiB) that fails
/// returns its error without releasing the log buffer it claimed — and a stuck handle also holds
/// sled's process-wide concurrency lock, so no reopen in this process could work after it.
fn can_drop(old: &Arc<Trees>) -> bool {
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let probe = old.clone();
    let flusher = std::thread::Builder::new().name("agentd-store-flush".into()).spawn(move || {
        let _ = probe.db.flush();
        let _ = done_tx.send(());
    });
    flusher.is_ok() && done_rx.recv_timeout(FLUSH_WITHIN).is_ok()
}

/// Values at least this large are checked against the free space before sled gets them: sled
/// writes them as separate blob files, and a blob write that fails leaves its handle stuck (see
/// [`can_drop`]), so a full disk must be refused before it.
pub(crate) const LARGE_VALUE: usize = 32 << 10;

/// Free bytes for an unprivileged writer on the file system of `dir`.
fn free_bytes(dir: &Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: statvfs writes into the zeroed struct we own; the path is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

/// Writes, syncs and removes a file of [`PROBE_BYTES`] in `dir`: whether the disk takes writes.
fn probe(dir: &Path) -> std::io::Result<()> {
    let path = dir.join(".agentd-space-probe");
    let written = (|| {
        let mut file = std::fs::File::create(&path)?;
        file.write_all(&vec![0u8; PROBE_BYTES])?;
        file.sync_all()
    })();
    let removed = std::fs::remove_file(&path);
    written?;
    removed
}
