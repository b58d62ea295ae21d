//! Ends of tasks that the store could not record (a full disk): kept in memory, reported by
//! `task.status` / `task.list` (`recorded: false`), delivered to subscribers, and written to the store
//! by [`check_storage`] once it is healthy again.

use crate::bus::EventBus;
use crate::task::close_unfinished_calls;
use agentd_evidence::{Store, StoreError};
use agentd_policies::{EventKind, TaskState};
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use tokio::sync::watch;

/// A task's end that is not (yet) in the store.
#[derive(Debug, Clone, PartialEq)]
pub struct End {
    /// The state the task ended in, which `task.status` and `task.list` show while the store still holds the
    /// one before.
    pub state: TaskState,
    /// The terminal event to record.
    pub kind: EventKind,
    /// The lead's `finish` summary, when the task finished.
    pub result: Option<String>,
    /// The task's own error (a failed task), if any.
    pub error: Option<String>,
    /// Why the end could not be recorded.
    pub record_error: String,
}

impl End {
    /// What to show as the task's error: its own, else why its end is not recorded.
    pub fn shown_error(&self) -> String {
        match &self.error {
            Some(e) => format!("{e} (not recorded: {})", self.record_error),
            None => format!("the end could not be recorded: {}", self.record_error),
        }
    }
}

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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Ends {
    /// Keeps `end` for `task_id` (replacing an earlier one) and signals subscribers.
    pub fn insert(&self, task_id: &str, end: End) {
        lock(&self.map).insert(task_id.to_string(), end);
        self.signal.send_modify(|n| *n += 1);
    }

    /// The end kept for `task_id`, if its end is not recorded.
    pub fn get(&self, task_id: &str) -> Option<End> {
        lock(&self.map).get(task_id).cloned()
    }

    /// How many ends are waiting to be recorded (`daemon.status`'s `storage.unrecorded_ends`).
    pub fn len(&self) -> usize {
        lock(&self.map).len()
    }

    /// Whether every end is recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Changes whenever an end is added; subscribe before looking, then look after each change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.signal.subscribe()
    }
}

/// Writes one end: the task's state, result and error, an end for every call left open, and the
/// terminal event — unless a write that failed reached the disk after all and the log already ends
/// with it.
pub fn record_end(store: &Store, bus: &EventBus, task_id: &str, end: &End) -> Result<(), StoreError> {
    store.update_task(task_id, |t| {
        t.state = end.state;
        t.updated_at = crate::clock::now_rfc3339();
        t.result = end.result.clone();
        t.error = end.error.clone();
    })?;
    close_unfinished_calls(store, bus, task_id, false)?;
    let last = store.last_event_seq(task_id)?;
    let already = last > 0
        && store.events(task_id, last - 1, 1)?.first().is_some_and(|e| {
            let end_kind = agentd_protocol::event::EndKind::of;
            end_kind(&e.kind).is_some() && end_kind(&e.kind) == end_kind(&end.kind)
        });
    if !already {
        bus.emit(task_id, &agentd_protocol::Role::Lead, end.kind.clone())?;
    }
    Ok(())
}

/// The health check: heals an unhealthy store (rate-limited by the store) and writes the ends it
/// could not record. Called periodically and by `daemon.status`.
pub fn check_storage(store: &Store, bus: &EventBus, ends: &Ends) {
    if ends.is_empty() && store.health().ok {
        return;
    }
    if !store.heal() {
        return;
    }
    let Ok(_recording) = ends.recording.try_lock() else {
        return;
    };
    let pending: Vec<(String, End)> = lock(&ends.map).iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    for (task_id, end) in pending {
        match record_end(store, bus, &task_id, &end) {
            Ok(()) => {
                tracing::info!(task = %task_id, state = %end.state, "recorded the end the full store had refused");
                lock(&ends.map).remove(&task_id);
            }
            Err(e) => {
                tracing::warn!(task = %task_id, error = %e, "the end of the task is still not recorded");
                return;
            }
        }
    }
}
