//! One open of the database: its trees, by name, and the counters that go with them.
//!
//! One sled database holds the trees `tasks` (task metadata by id), `log` (every task's records and
//! events), `settings` (JSON values by key), `windows` (learned context windows per server/model) and
//! the evidence trees `evidence` (metadata by id), `evidence_by_task` (task id, NUL, evidence id) and
//! `evidence_lines` (a sparse line index per blob sha256), and the memory trees `memory_notes` (each
//! note as it stands, by id) and `memory_changes` (every change to a note, by number), and `objects` (the checkpoint objects, sha256 → size). The names below are the one place each
//! tree is spelled; the modules that read and write a tree name it in their errors with them.
//!
//! A [`Trees`] is what one open of the database gives: its handles and the per-task sequence counters
//! ([`crate::seqs`]) loaded from it. The store keeps the current one behind a swappable pointer and
//! replaces it whole when it heals (see [`crate::store`]); nothing here knows about health.

use crate::error::StoreError;
use crate::seqs::SeqTable;
use std::path::Path;
use std::time::{Duration, Instant};

pub(crate) const TASKS: &str = "tasks";
pub(crate) const LOG: &str = "log";
pub(crate) const SETTINGS: &str = "settings";
pub(crate) const WINDOWS: &str = "windows";
pub(crate) const EVIDENCE: &str = "evidence";
pub(crate) const EVIDENCE_BY_TASK: &str = "evidence_by_task";
pub(crate) const EVIDENCE_LINES: &str = "evidence_lines";
pub(crate) const MEMORY_NOTES: &str = "memory_notes";
pub(crate) const MEMORY_CHANGES: &str = "memory_changes";
pub(crate) const OBJECTS: &str = "objects";

/// One open of the database: its handles and the counters that go with them.
pub(crate) struct Trees {
    /// Which open this is (1 for the first): a failure seen on an older open does not mark a newer
    /// one unhealthy.
    pub(crate) generation: u64,
    pub(crate) db: sled::Db,
    pub(crate) tasks: sled::Tree,
    pub(crate) log: sled::Tree,
    pub(crate) settings: sled::Tree,
    pub(crate) windows: sled::Tree,
    pub(crate) evidence: sled::Tree,
    pub(crate) evidence_by_task: sled::Tree,
    pub(crate) evidence_lines: sled::Tree,
    pub(crate) memory_notes: sled::Tree,
    pub(crate) memory_changes: sled::Tree,
    pub(crate) objects: sled::Tree,
    /// Per-task sequence counters, loaded lazily from this open's log.
    pub(crate) seqs: SeqTable,
}

impl Trees {
    /// Opens the database in `dir` (creating it if needed) as open number `generation`.
    pub(crate) fn open(dir: &Path, generation: u64) -> Result<Trees, StoreError> {
        let open_err = |source| StoreError::Open { path: dir.to_path_buf(), source };
        let db = open_db(dir).map_err(open_err)?;
        let tree = |name: &str| db.open_tree(name).map_err(open_err);
        Ok(Trees {
            generation,
            tasks: tree(TASKS)?,
            log: tree(LOG)?,
            settings: tree(SETTINGS)?,
            windows: tree(WINDOWS)?,
            evidence: tree(EVIDENCE)?,
            evidence_by_task: tree(EVIDENCE_BY_TASK)?,
            evidence_lines: tree(EVIDENCE_LINES)?,
            memory_notes: tree(MEMORY_NOTES)?,
            memory_changes: tree(MEMORY_CHANGES)?,
            objects: tree(OBJECTS)?,
            db,
            seqs: SeqTable::default(),
        })
    }
}

/// Opens the database, waiting up to two seconds for a lock that the same process is still releasing
/// (sled's background flusher outlives a dropped handle briefly). Another process's lock is still an
/// error after the wait.
fn open_db(dir: &Path) -> Result<sled::Db, sled::Error> {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        match sled::Config::new().path(dir).open() {
            Err(sled::Error::Io(e)) if is_lock_held(&e) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            other => return other,
        }
    }
}

/// sled reports a held lock as `Other` with the OS error in its text.
fn is_lock_held(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::WouldBlock || e.to_string().contains("could not acquire lock")
}
