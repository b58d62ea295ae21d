//! The lease-bounded writer: which tasks this writer may still write, and until when. A task it
//! lost (another writer appended, or its lease was not renewed in time) is abandoned, and every
//! write of it refused here before it reaches NATS; a lease taken anew fences the log with its
//! epoch and lets the writer write again, until a sixth of the lease before the lease's end.

use super::handle::{storage_error, JetStreamStorage};
use crate::error::ClusterError;
use agentd_engine::storage::StorageError;

impl JetStreamStorage {
    /// This writer lost `task_id` (its lease lapsed, or may have): from now on every write of it —
    /// an append, a change of its record, a kept end — is refused here, before it reaches NATS.
    pub fn abandon(&self, task_id: &str) {
        self.abandoned.lock().insert(task_id.to_string());
    }

    /// Whether this writer lost `task_id` (and has not taken it anew).
    pub fn abandoned(&self, task_id: &str) -> bool {
        self.abandoned.lock().contains(task_id)
    }

    /// This writer holds `task_id` again (it took the lease anew): its writes go through.
    fn reclaim(&self, task_id: &str) {
        self.abandoned.lock().remove(task_id);
    }

    /// This writer holds `task_id` under a lease of `lease` that lapses at `until_ms` (taken or
    /// renewed): it writes the task only until a sixth of the lease before then, and gives it up
    /// past that — a node whose renewals are late (starved, cut off) must stop writing before
    /// another can take the task, not after (found by the fleet chaos run: a task finished twice,
    /// by its lapsed holder and by the node that took it over).
    pub fn hold_until(&self, task_id: &str, until_ms: u64, lease: std::time::Duration) {
        let margin = u64::try_from(lease.as_millis() / 6).unwrap_or(u64::MAX);
        self.writable_until.lock().insert(task_id.to_string(), until_ms.saturating_sub(margin));
    }

    /// This writer gave its lease on `task_id` up: what it writes of the task from now on (a resume,
    /// a cancel of a stopped task) is under no lease's deadline.
    pub fn let_go(&self, task_id: &str) {
        self.writable_until.lock().remove(task_id);
    }

    /// How long this writer may still write `task_id`: `None` without a lease deadline.
    pub(super) fn writable_for(&self, task_id: &str) -> Option<std::time::Duration> {
        let until = *self.writable_until.lock().get(task_id)?;
        Some(std::time::Duration::from_millis(until.saturating_sub(agentd_engine::clock::now_unix_ms())))
    }

    /// Refuses a write of `task_id` once this writer lost it, or once its lease no longer lets it
    /// write (which abandons the task).
    pub(super) fn refuse_abandoned(&self, task_id: &str) -> Result<(), StorageError> {
        if self.writable_for(task_id).is_some_and(|left| left.is_zero()) {
            tracing::warn!(
                task = task_id,
                "the task's lease was not renewed in time; this writer writes nothing more of it"
            );
            self.abandon(task_id);
        }
        if self.abandoned.lock().contains(task_id) {
            let epoch = self.epochs.lock().get(task_id).copied().unwrap_or(0);
            return Err(storage_error(ClusterError::LeaseLost { task_id: task_id.to_string(), epoch }));
        }
        Ok(())
    }

    /// From now on this writer appends `task_id`'s log under lease `epoch` (the lease it took): a
    /// writer with an older one can no longer append to it once this one has.
    pub fn fence(&self, task_id: &str, epoch: u64) {
        self.epochs.lock().insert(task_id.to_string(), epoch);
        // Whoever held the task before appended since this writer last looked: read the head anew.
        self.heads.lock().remove(task_id);
        self.writable_until.lock().remove(task_id);
        self.reclaim(task_id);
    }
}
