//! Following a task's events: the one subscription loop behind the socket's `task.subscribe` and the
//! HTTP API's Server-Sent Events (`GET /api/v1/tasks/{id}/events`).
//!
//! A subscriber names the last event it has (`after`, 0 for none). [`follow`] replays the stored
//! events after it, then follows the bus, skipping what it has already sent: no gap, no repeat.
//! The stream ends after the terminal event that nothing follows (an end in the history that was
//! resumed or followed up is passed over), with a `task.end` naming it; a task whose end the store
//! could not take (a full disk) ends with the in-memory end from [`crate::ends`], `recorded: false`.
//!
//! A subscriber that asks for events at or past the end of a task that has ended (a reconnecting
//! `EventSource` after the `task.end`, or a seq beyond the last) gets that `task.end` at once: the
//! stream never waits for a resume that may not come. One past the last event of a task that is
//! still going gets nothing until the task ends, then its `task.end`.
//!
//! What the items look like on the wire is the caller's: the socket writes each [`Notification`] as
//! a JSON-RPC line, the HTTP server as an SSE message. Subscribe to the bus (`Shared::live`)
//! *before* checking that the task exists and answering, so nothing published in between is missed.

use crate::shared::Shared;
use agentd_engine::storage::{End, StorageError};
use agentd_protocol::event::EndKind;
use agentd_protocol::rpc::{Notification, TaskEnd};
use agentd_protocol::Event;
use std::future::Future;
use tokio::sync::broadcast;

/// Stored events are replayed this many at a time.
const BATCH: usize = 1000;

/// The `task.end` that follows a terminal event, when `event` is one.
pub fn task_end(event: &Event) -> Option<TaskEnd> {
    Some(TaskEnd {
        task_id: event.task_id.clone(),
        seq: event.seq,
        kind: EndKind::of(&event.kind)?,
        state: None,
        recorded: true,
        error: None,
    })
}

/// The `task.end` of a task whose end the store could not record (no terminal event in the log yet):
/// `seq` is the last event the subscriber was sent.
pub fn unrecorded_end(task_id: &str, seq: u64, end: &End) -> Option<TaskEnd> {
    Some(TaskEnd {
        task_id: task_id.to_string(),
        seq,
        kind: EndKind::of(&end.kind)?,
        state: Some(end.state),
        recorded: false,
        error: Some(end.shown_error()),
    })
}

/// The `task.end` of a task that has ended, with the newest seq in its log: its last event when that
/// is a terminal one (a resume or follow-up adds events after it), else the end the store could
/// not record. `None` for a task that can still produce events.
pub fn end_of(shared: &Shared, task_id: &str) -> Result<(u64, Option<TaskEnd>), StorageError> {
    let newest = shared.storage.last_event_seq(task_id)?;
    let last = shared.storage.events(task_id, newest.saturating_sub(1), 1)?;
    let recorded = last.iter().filter(|e| e.seq == newest && e.kind.is_terminal()).find_map(task_end);
    let end =
        recorded.or_else(|| shared.ends.get(task_id).and_then(|end| unrecorded_end(task_id, newest, &end)));
    Ok((newest, end))
}

/// Whether the stream goes on after a step.
enum Flow {
    More,
    Over,
}

/// Streams the events of `task_id` after `after` to `send` — stored ones first, then live ones from
/// `live` (subscribed before the caller checked the task) — until the end nothing follows, until
/// `send` answers false (the subscriber went away), or until `gone` resolves (the caller knows the
/// subscriber left even though nothing is being sent).
pub async fn follow<F, Fut>(
    shared: &Shared,
    task_id: &str,
    after: u64,
    mut live: broadcast::Receiver<Event>,
    mut send: F,
    gone: impl Future<Output = ()>,
) where
    F: FnMut(Notification) -> Fut,
    Fut: Future<Output = bool>,
{
    // Subscribed before the first look, so an end added meanwhile is seen.
    let mut ended = shared.ends.subscribe();
    let mut last = after;
    if let Flow::Over = replay(shared, task_id, &mut last, &mut send).await {
        return;
    }
    // Asked for at or past the end of a task that has ended: its end, at once.
    if let Flow::Over = end_passed(shared, task_id, last, &mut send).await {
        return;
    }
    let mut gone = std::pin::pin!(gone);
    let mut signal_open = true;
    loop {
        if let Some(end) = shared.ends.get(task_id) {
            // Everything the store holds was sent; the end it could not take comes from memory.
            if let Flow::Over = replay(shared, task_id, &mut last, &mut send).await {
                return;
            }
            if let Some(end) = unrecorded_end(task_id, last, &end) {
                send(Notification::TaskEnd(end)).await;
            }
            return;
        }
        let received = tokio::select! {
            r = live.recv() => r,
            changed = ended.changed(), if signal_open => {
                signal_open = changed.is_ok();
                continue;
            }
            () = &mut gone => return,
        };
        match received {
            Ok(e) if e.task_id == task_id && e.seq > last => {
                if e.seq > last + 1 {
                    // Something was published before this subscriber saw it: take it from the store.
                    if let Flow::Over = replay(shared, task_id, &mut last, &mut send).await {
                        return;
                    }
                    continue;
                }
                last = e.seq;
                let terminal = e.kind.is_terminal();
                if let Flow::Over = deliver(&mut send, e, terminal).await {
                    return;
                }
            }
            // The end came, at or before where this subscriber asked to start.
            Ok(e) if e.task_id == task_id && e.kind.is_terminal() => {
                if let Flow::Over = end_passed(shared, task_id, last, &mut send).await {
                    return;
                }
            }
            Ok(_) => {}
            Err(broadcast::error::RecvError::Lagged(_)) => {
                if let Flow::Over = replay(shared, task_id, &mut last, &mut send).await {
                    return;
                }
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// Over, with the `task.end` sent, when the task has ended (its newest event is a terminal one) at or
/// before `last`: a subscriber that started there would wait for nothing.
async fn end_passed<F, Fut>(shared: &Shared, task_id: &str, last: u64, send: &mut F) -> Flow
where
    F: FnMut(Notification) -> Fut,
    Fut: Future<Output = bool>,
{
    match end_of(shared, task_id) {
        Ok((newest, Some(end))) if end.recorded && last >= newest => {
            send(Notification::TaskEnd(end)).await;
            Flow::Over
        }
        _ => Flow::More,
    }
}

/// Sends one event, and the `task.end` after it when it `ends` the stream.
async fn deliver<F, Fut>(send: &mut F, event: Event, ends: bool) -> Flow
where
    F: FnMut(Notification) -> Fut,
    Fut: Future<Output = bool>,
{
    let end = if ends { task_end(&event) } else { None };
    if !send(Notification::TaskEvent(Box::new(event))).await {
        return Flow::Over;
    }
    if !ends {
        return Flow::More;
    }
    if let Some(end) = end {
        send(Notification::TaskEnd(end)).await;
    }
    Flow::Over
}

/// Sends the stored events after `last`, moving it on. Over when the stream ended: a terminal event
/// nothing follows was sent, the subscriber left, or the store failed (then the unrecorded end, if
/// the daemon holds one, was sent).
async fn replay<F, Fut>(shared: &Shared, task_id: &str, last: &mut u64, send: &mut F) -> Flow
where
    F: FnMut(Notification) -> Fut,
    Fut: Future<Output = bool>,
{
    loop {
        // The batch first, then the newest seq: the newest is never older than the batch.
        let batch = shared.storage.events(task_id, *last, BATCH);
        let newest = shared.storage.last_event_seq(task_id);
        let (Ok(batch), Ok(newest)) = (batch, newest) else {
            if let Some(end) = shared.ends.get(task_id).and_then(|end| unrecorded_end(task_id, *last, &end)) {
                send(Notification::TaskEnd(end)).await;
            }
            return Flow::Over;
        };
        let n = batch.len();
        for e in batch {
            *last = e.seq;
            // A terminal event ends the stream only if nothing followed it (a resume would).
            let ends = e.kind.is_terminal() && e.seq == newest;
            if let Flow::Over = deliver(send, e, ends).await {
                return Flow::Over;
            }
        }
        if n < BATCH {
            return Flow::More;
        }
    }
}
