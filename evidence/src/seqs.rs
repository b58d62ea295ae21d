//! The per-task sequence counters of one open of the database.
//!
//! A task's log numbers its records and its events from 1 each (the keys are [`crate::log`]'s). The
//! last number written of each kind is kept in memory, one slot per task, so an append does not scan
//! the log: a slot starts unloaded and the log fills it from the last key on disk at its first use.
//! Each slot has its own lock, so different tasks append in parallel while one task's appends are
//! numbered one at a time.
//!
//! A table belongs to one open of the database ([`crate::trees::Trees`]): when the store heals and
//! opens the database again, the new open starts with an empty table, so numbering continues from what
//! the new open really holds, never from what a failed write of the old one may have counted.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

/// The last numbers written in one task's log.
#[derive(Debug, Default)]
pub(crate) struct Seqs {
    /// Whether `record` and `event` were read from the log yet.
    pub(crate) loaded: bool,
    /// The last record seq written (0 = none).
    pub(crate) record: u64,
    /// The last event seq written (0 = none).
    pub(crate) event: u64,
}

/// Per-task counters, each behind its own lock so different tasks append in parallel.
#[derive(Clone, Default)]
pub(crate) struct SeqTable(Arc<Mutex<HashMap<String, Arc<Mutex<Seqs>>>>>);

impl SeqTable {
    /// The slot of a task's counters, created (not yet loaded) on first use.
    pub(crate) fn slot(&self, task_id: &str) -> Arc<Mutex<Seqs>> {
        self.0.lock().entry(task_id.to_string()).or_default().clone()
    }
}
