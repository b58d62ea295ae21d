//! A task's recorded changes, read from its events.

use crate::storage::{Storage, StorageError};
use agentd_policies::changes::Step;
use agentd_protocol::{Event, EventKind};

/// The recorded change an event is, if it is one: a call's (or a merge's) `files_changed`, or a
/// `reverted` (known by its own seq).
pub fn step_of(event: &Event) -> Option<Step> {
    match &event.kind {
        EventKind::FilesChanged { call_seq, change, working_copy, .. } => Some(Step {
            call_seq: *call_seq,
            role: event.role.clone(),
            files: change.files.clone(),
            in_copy: working_copy.is_some(),
        }),
        EventKind::Reverted { change, .. } => Some(Step {
            call_seq: event.seq,
            role: event.role.clone(),
            files: change.files.clone(),
            in_copy: false,
        }),
        _ => None,
    }
}

/// Every event of a task, a page at a time.
pub fn all_events(storage: &dyn Storage, task_id: &str) -> Result<Vec<Event>, StorageError> {
    const PAGE: usize = 10_000;
    let mut events: Vec<Event> = Vec::new();
    loop {
        let after = events.last().map_or(0, |e| e.seq);
        let page = storage.events(task_id, after, PAGE)?;
        let full = page.len() == PAGE;
        events.extend(page);
        if !full {
            return Ok(events);
        }
    }
}
