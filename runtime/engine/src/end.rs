//! How a task's end is recorded: its state, result and error on the task's record, an end for
//! every tool call left open, and the terminal event — once, even when a write that seemed to fail
//! reached the disk after all. An end the storage cannot take is kept by it ([`Storage::keep_end`])
//! and recorded again with [`record_end`] once it heals.

use crate::clock::{now_rfc3339, rfc3339};
use crate::halt::Halt;
use crate::storage::{End, Storage, StorageError};
use agentd_protocol::event::EndKind;
use agentd_protocol::{EventKind, Role, TaskState, ToolName};
use std::time::SystemTime;

/// Writes one end: the task's state, result and error, an end for every call left open, and the
/// terminal event — unless a write that failed reached the disk after all and the log already ends
/// with it.
pub fn record_end(storage: &dyn Storage, task_id: &str, end: &End) -> Result<(), StorageError> {
    storage.update_task(task_id, &mut |t| {
        t.state = end.state;
        t.resume_at = None;
        t.updated_at = now_rfc3339();
        t.result = end.result.clone();
        t.error = end.error.clone();
    })?;
    close_unfinished_calls(storage, task_id, false)?;
    let last = storage.last_event_seq(task_id)?;
    let already = last > 0
        && storage.events(task_id, last - 1, 1)?.first().is_some_and(|e| {
            EndKind::of(&e.kind).is_some() && EndKind::of(&e.kind) == EndKind::of(&end.kind)
        });
    if !already {
        storage.emit(task_id, &Role::Lead, end.kind.clone())?;
    }
    Ok(())
}

/// Completes an end its record holds but its log does not: a daemon that died (`kill -9`) between
/// writing a task's record (`finished`, `failed`, `cancelled`) and appending the terminal event left
/// the log without its end — and a watcher waiting for it. The event (and the end of every call left
/// open) is appended now, as [`record_end`] would have. Nothing is written when the log already ends
/// so, or the record holds no end. Whether anything was written.
pub fn complete_end(
    storage: &dyn Storage,
    meta: &agentd_protocol::task::TaskMeta,
) -> Result<bool, StorageError> {
    let kind = match meta.state {
        TaskState::Finished => EventKind::TaskFinished { summary: meta.result.clone().unwrap_or_default() },
        TaskState::Failed => EventKind::TaskFailed { error: meta.error.clone().unwrap_or_default() },
        TaskState::Cancelled => EventKind::TaskCancelled {},
        _ => return Ok(false),
    };
    let last = storage.last_event_seq(&meta.task_id)?;
    let ends_so = last > 0
        && storage
            .events(&meta.task_id, last - 1, 1)?
            .first()
            .is_some_and(|e| EndKind::of(&e.kind).is_some() && EndKind::of(&e.kind) == EndKind::of(&kind));
    if ends_so || last == 0 {
        return Ok(false);
    }
    close_unfinished_calls(storage, &meta.task_id, false)?;
    storage.emit(&meta.task_id, &Role::Lead, kind)?;
    Ok(true)
}

/// Records a halt: the task `waiting` for a usage limit or `paused` on a budget, when it goes on by
/// itself (`resume_at` on its record), its open calls closed as a resume expects, and the event
/// that says why (`usage_limit_wait`, `budget_reached`) from the role that stopped. The state it is
/// in now.
pub fn record_halt(storage: &dyn Storage, task_id: &str, halt: &Halt) -> Result<TaskState, StorageError> {
    let at = |t: SystemTime| rfc3339(t);
    let (state, resume_at, role, kind) = match halt {
        Halt::UsageLimit { role, resume_at, source, capped, reason, message } => (
            TaskState::Waiting,
            Some(at(*resume_at)),
            role,
            EventKind::UsageLimitWait {
                resume_at: at(*resume_at),
                source: source.clone(),
                capped: *capped,
                reason: reason.clone(),
                message: message.clone(),
            },
        ),
        Halt::Budget { role, ceiling, request, resume_at } => (
            TaskState::Paused,
            resume_at.map(at),
            role,
            EventKind::BudgetReached {
                scope: ceiling.scope,
                budget: ceiling.budget,
                spent: ceiling.spent,
                in_flight: ceiling.in_flight,
                request: *request,
                resume_at: resume_at.map(at),
            },
        ),
    };
    storage.update_task(task_id, &mut |t| {
        t.state = state;
        t.resume_at = resume_at.clone();
        t.error = None;
        t.updated_at = now_rfc3339();
    })?;
    close_unfinished_calls(storage, task_id, true)?;
    storage.emit(task_id, role, kind)?;
    Ok(state)
}

/// Every tool call of the task that was called and never finished (the task stopped while it ran:
/// a crash, a shutdown, a cancel) gets its `tool_finished`, marked interrupted — its effect on the
/// workspace is unknown — so the event history never holds a call without its end. Returns how
/// many were closed.
///
/// `resumable`: the task is interrupted, not over. A `delegate` call then stays open: a resume
/// continues the delegation, and its summary becomes the call's end.
pub fn close_unfinished_calls(
    storage: &dyn Storage,
    task_id: &str,
    resumable: bool,
) -> Result<usize, StorageError> {
    let mut events = Vec::new();
    let mut after = 0;
    loop {
        let page = storage.events(task_id, after, 10_000)?;
        let Some(last) = page.last() else { break };
        after = last.seq;
        events.extend(page);
    }
    let mut open = agentd_protocol::event::unfinished_calls(&events);
    if resumable {
        open.retain(|(_, tool, _)| *tool != ToolName::Delegate);
    }
    for (role, tool, call_id) in &open {
        storage.emit(task_id, role, EventKind::tool_ended(tool, call_id, false, true))?;
    }
    Ok(open.len())
}
