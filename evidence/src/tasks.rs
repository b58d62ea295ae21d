//! Task metadata: tree `tasks`, keyed by task id.

use crate::codec::{decode, encode, show_key};
use crate::error::StoreError;
use crate::store::Store;
use crate::trees::TASKS;

use agentd_protocol::task::TaskMeta;

impl Store {
    /// Inserts or replaces a task's metadata; flushed before returning.
    pub fn put_task(&self, meta: &TaskMeta) -> Result<(), StoreError> {
        let bytes = encode(TASKS, || meta.task_id.clone(), meta)?;
        let trees = self.writing()?;
        self.room(&trees, bytes.len())?;
        {
            let _guard = self.task_writes.lock();
            let inserted = trees.tasks.insert(meta.task_id.as_bytes(), bytes).map_err(StoreError::from);
            self.noted(&trees, inserted)?;
        }
        self.flush_on(&trees)
    }

    /// The task recorded under `task_id`, `None` when there is none.
    pub fn task(&self, task_id: &str) -> Result<Option<TaskMeta>, StoreError> {
        match self.trees()?.tasks.get(task_id.as_bytes())? {
            Some(bytes) => Ok(Some(decode(TASKS, || task_id.to_string(), &bytes)?)),
            None => Ok(None),
        }
    }

    /// Every task, ordered by id (UUID v7 ids sort by creation time).
    pub fn tasks(&self) -> Result<Vec<TaskMeta>, StoreError> {
        self.trees()?
            .tasks
            .iter()
            .map(|entry| {
                let (key, bytes) = entry?;
                decode(TASKS, || show_key(&key), &bytes)
            })
            .collect()
    }

    /// Read-modify-write of a task's metadata, serialised against other writers of this store, then
    /// flushed. Returns the new metadata. The id is the key: a change of `task_id` by `f` is undone.
    /// The caller sets `updated_at`. [`StoreError::UnknownTask`] if the task does not exist.
    pub fn update_task(&self, task_id: &str, f: impl FnOnce(&mut TaskMeta)) -> Result<TaskMeta, StoreError> {
        let trees = self.writing()?;
        let meta = {
            let _guard = self.task_writes.lock();
            let mut meta = self.task(task_id)?.ok_or_else(|| StoreError::UnknownTask(task_id.to_string()))?;
            f(&mut meta);
            meta.task_id = task_id.to_string();
            let bytes = encode(TASKS, || task_id.to_string(), &meta)?;
            self.room(&trees, bytes.len())?;
            let inserted = trees.tasks.insert(task_id.as_bytes(), bytes).map_err(StoreError::from);
            self.noted(&trees, inserted)?;
            meta
        };
        self.flush_on(&trees)?;
        Ok(meta)
    }
}
