//! Opening and flushing the database.
//!
//! One sled database holds the trees `tasks` (task metadata by id), `log` (every task's records and
//! events), `settings` (JSON values by key), `windows` (learned context windows per server/model) and
//! the evidence trees `evidence` (metadata by id), `evidence_by_task` (task id, NUL, evidence id) and
//! `evidence_lines` (a sparse line index per blob sha256). Evidence bytes live outside the database,
//! as content-addressed files in the blob directory (see [`crate::blobs`]): normally `<home>/evidence`
//! beside the database in `<home>/db`.
//!
//! sled takes an exclusive file lock on the database: a second process opening the same directory
//! gets [`StoreError::Open`] naming the path. The lock is an `flock` on a freshly opened file, so a
//! second [`Store::open`] of the same directory inside one process is refused the same way while the
//! first is alive; share one [`Store`] by cloning it instead (clones are cheap and share everything).

use crate::blobs::Blobs;
use crate::error::StoreError;
use crate::log::SeqTable;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

pub(crate) const TASKS: &str = "tasks";
pub(crate) const LOG: &str = "log";
pub(crate) const SETTINGS: &str = "settings";
pub(crate) const WINDOWS: &str = "windows";
pub(crate) const EVIDENCE: &str = "evidence";
pub(crate) const EVIDENCE_BY_TASK: &str = "evidence_by_task";
pub(crate) const EVIDENCE_LINES: &str = "evidence_lines";

#[derive(Clone)]
pub struct Store {
    pub(crate) db: sled::Db,
    pub(crate) tasks: sled::Tree,
    pub(crate) log: sled::Tree,
    pub(crate) settings: sled::Tree,
    pub(crate) windows: sled::Tree,
    pub(crate) evidence: sled::Tree,
    pub(crate) evidence_by_task: sled::Tree,
    pub(crate) evidence_lines: sled::Tree,
    /// The blob directory and the in-memory record of blobs verified by this process.
    pub(crate) blobs: Arc<Blobs>,
    /// Fault injection: while set, evidence metadata inserts fail as if the database refused them.
    pub(crate) fail_evidence_inserts: Arc<AtomicBool>,
    /// Per-task sequence counters, loaded lazily from the log's last keys.
    pub(crate) seqs: SeqTable,
    /// Serialises read-modify-write of task metadata.
    pub(crate) task_writes: Arc<Mutex<()>>,
    path: Arc<PathBuf>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.path)
            .field("blob_dir", &self.blobs.dir())
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
        let open_err = |source| StoreError::Open { path: dir.to_path_buf(), source };
        let db = open_db(dir).map_err(open_err)?;
        let tree = |name: &str| db.open_tree(name).map_err(open_err);
        Ok(Store {
            tasks: tree(TASKS)?,
            log: tree(LOG)?,
            settings: tree(SETTINGS)?,
            windows: tree(WINDOWS)?,
            evidence: tree(EVIDENCE)?,
            evidence_by_task: tree(EVIDENCE_BY_TASK)?,
            evidence_lines: tree(EVIDENCE_LINES)?,
            blobs: Arc::new(Blobs::new(blob_dir.to_path_buf())),
            fail_evidence_inserts: Arc::new(AtomicBool::new(false)),
            db,
            seqs: SeqTable::default(),
            task_writes: Arc::new(Mutex::new(())),
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
        self.db.flush()?;
        Ok(())
    }
}

/// Locks a mutex, recovering from poisoning: every critical section in this crate leaves its data
/// consistent at each step (counters advance only after a successful write).
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Opens the database, waiting up to two seconds for a lock that the same process is still releasing
/// (sled's background flusher outlives a dropped handle briefly). Another process's lock is still an
/// error after the wait.
fn open_db(dir: &Path) -> Result<sled::Db, sled::Error> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        match sled::Config::new().path(dir).open() {
            Err(sled::Error::Io(e)) if is_lock_held(&e) && std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => return other,
        }
    }
}

/// sled reports a held lock as `Other` with the OS error in its text.
fn is_lock_held(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::WouldBlock || e.to_string().contains("could not acquire lock")
}
