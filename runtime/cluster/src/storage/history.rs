//! A task's history as this storage writes and reads it: records appended one at a time under the
//! writer's lease epoch, each expecting the log's head where this writer last saw it (tried again
//! only while the lease lets it write), and the log read back up to the stream's head.

use super::handle::{storage_error, JetStreamStorage};
use crate::error::ClusterError;
use crate::log::{self, Head};
use crate::passing::retrying;
use agentd_engine::storage::StorageError;
use agentd_protocol::Record;

impl JetStreamStorage {
    /// Every record of a task, numbered.
    pub(super) fn all_records(&self, task_id: &str) -> Result<Vec<(u64, Record)>, StorageError> {
        // Read up to the stream's head, not only this writer's: another daemon may have appended.
        let (stream, id) = (self.handles.log.clone(), task_id.to_string());
        self.run(retrying(move || {
            let (stream, id) = (stream.clone(), id.clone());
            async move {
                let head = log::head(&stream, &id).await?;
                log::read(&stream, &id, head).await
            }
        }))
    }

    /// The head of a task's log as the stream holds it.
    pub(super) fn head_of(&self, task_id: &str) -> Result<Head, StorageError> {
        let (stream, id) = (self.handles.log.clone(), task_id.to_string());
        self.run(retrying(move || {
            let (stream, id) = (stream.clone(), id.clone());
            async move { log::head(&stream, &id).await }
        }))
    }

    /// Appends the record `make` builds from the log's head (an event takes its number from it),
    /// this writer's appends to the task one at a time; the new head and what `make` handed back.
    pub(super) fn append_with<T>(
        &self,
        task_id: &str,
        make: impl FnOnce(Head) -> (Record, T),
    ) -> Result<(Head, T), StorageError> {
        self.refuse_abandoned(task_id)?;
        let mut heads = self.heads.lock();
        let head = match heads.get(task_id) {
            Some(head) => *head,
            None => self.head_of(task_id)?,
        };
        let (record, made) = make(head);
        let epoch = self.epochs.lock().get(task_id).copied().unwrap_or(0);
        let (js, stream, id) = (self.handles.js.clone(), self.handles.log.clone(), task_id.to_string());
        // Tried again only while the lease (as renewed meanwhile) lets this writer write.
        let (writable, task) = (self.writable_until.clone(), task_id.to_string());
        let may_write = move || {
            writable.lock().get(&task).is_none_or(|until| agentd_engine::clock::now_unix_ms() < *until)
        };
        let appended = self
            .bridge
            .run(async move { log::append_surely(&js, &stream, &id, head, epoch, &record, may_write).await })
            .and_then(|r| r);
        match appended {
            Ok(next) => {
                heads.insert(task_id.to_string(), next);
                Ok((next, made))
            }
            // Another writer appended since this one last did, or under a newer lease: this writer
            // lost the task (its lease lapsed before it knew). It writes nothing of it again —
            // not its end on the record either, which would overwrite the new holder's — until it
            // takes the lease anew (found by the fleet chaos run: a task `failed` by its old holder
            // while its new one ran it).
            Err(e @ (ClusterError::Conflict { .. } | ClusterError::Fenced { .. })) => {
                heads.remove(task_id);
                drop(heads);
                tracing::warn!(task = task_id, error = %e, "another writer holds the task now; this one writes nothing more of it");
                self.abandon(task_id);
                Err(storage_error(e))
            }
            Err(e) => {
                // Read the head again next time: another writer may have moved it.
                heads.remove(task_id);
                drop(heads);
                // Tried until the lease no longer let it write: the task is another node's to go on
                // with once its lease lapses, not this run's to fail.
                if e.is_passing() && self.writable_for(task_id).is_some_and(|left| left.is_zero()) {
                    tracing::warn!(task = task_id, error = %e, "the fleet did not take the append before the task's lease ran out; this writer writes nothing more of it");
                    self.abandon(task_id);
                }
                Err(storage_error(e))
            }
        }
    }
}
