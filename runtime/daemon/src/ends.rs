//! Ends of tasks that the store could not record (a full disk): kept in memory, reported by
//! `task.status` / `task.list` (`recorded: false`), delivered to subscribers, and written to the store
//! by [`crate::storage::check_storage`] once it is healthy again (the engine hands them over through
//! `Storage::keep_end`; `agentd_engine::end` is how an end is recorded).

use agentd_engine::end::record_end;
use agentd_engine::storage::{End, Storage};
use parking_lot::Mutex;
use std::collections::HashMap;
use tokio::sync::watch;

/// The unrecorded ends, by task id, with a signal that changes whenever one is added.
pub struct Ends {
    map: Mutex<HashMap<String, End>>,
    /// Held while ends are written to the store, so two checks never record one end twice.
    recording: Mutex<()>,
    signal: watch::Sender<u64>,
}

impl Default for Ends {
    fn default() -> Ends {
        Ends { map: Mutex::default(), recording: Mutex::default(), signal: watch::channel(0).0 }
    }
}

impl Ends {
    /// Keeps `end` for `task_id` (replacing an earlier one) and signals subscribers.
    pub fn insert(&self, task_id: &str, end: End) {
        self.map.lock().insert(task_id.to_string(), end);
        self.signal.send_modify(|n| *n += 1);
    }

    /// The end kept for `task_id`, if its end is not recorded.
    pub fn get(&self, task_id: &str) -> Option<End> {
        self.map.lock().get(task_id).cloned()
    }

    /// How many ends are waiting to be recorded (`daemon.status`'s `storage.unrecorded_ends`).
    pub fn len(&self) -> usize {
        self.map.lock().len()
    }

    /// Whether every end is recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Changes whenever an end is added; subscribe before looking, then look after each change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.signal.subscribe()
    }

    /// Records the ends kept here, in `storage` (once it takes writes again), forgetting each once
    /// recorded; stops at the first it still refuses. One caller at a time.
    pub fn record_pending(&self, storage: &dyn Storage) {
        let Some(_recording) = self.recording.try_lock() else {
            return;
        };
        let pending: Vec<(String, End)> =
            self.map.lock().iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        for (task_id, end) in pending {
            match record_end(storage, &task_id, &end) {
                Ok(()) => {
                    tracing::info!(task = %task_id, state = %end.state, "recorded the end the full store had refused");
                    self.map.lock().remove(&task_id);
                }
                Err(e) => {
                    tracing::warn!(task = %task_id, error = %e, "the end of the task is still not recorded");
                    return;
                }
            }
        }
    }
}
