//! How a fleet's node takes its tasks from the fleet's one queue ([`pull`]): while it has room, a
//! job whose workspace it reaches is taken ([`take`]) — the lease first (its epoch fences the log
//! from then on), then the task's record decides what to do: a queued task starts as the job says;
//! one that was running or interrupted is resumed as after a crash (`task_resumed` names this node,
//! and says why in `after`); an ended one is a stale job, dropped once its log has its end
//! (`complete_end`). The task then starts in the supervisor ([`adopt`]) and runs under its lease
//! (`super::holding`).

use super::error::SupervisorError;
use super::holding::{keep, Held, Holds};
use super::messages::IsRunning;
use super::reach::{OnTasks, Reach, Room};
use super::tasks::Tasks;
use crate::fleet::reaches;
use crate::shared::Shared;
use agentd_cluster::fleet::Fleet;
use agentd_cluster::lease::now_ms;
use agentd_cluster::queue::Taken;
use agentd_cluster::ClusterError;
use agentd_engine::clock::{clock, now_rfc3339};
use agentd_engine::end::{close_unfinished_calls, record_end};
use agentd_engine::storage::End;
use agentd_engine::task::Start;
use agentd_protocol::task::TaskMeta;
use agentd_protocol::{EventKind, Role, TaskState};
use futures_util::future::BoxFuture;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// What the queue's puller works with: the supervisor, the daemon's parts, the fleet, and what this
/// node holds.
#[derive(Clone)]
pub(super) struct Node {
    /// The supervisor, started.
    pub(super) supervisor: Reach,
    /// The daemon's parts.
    pub(super) shared: Arc<Shared>,
    /// The fleet.
    pub(super) fleet: Arc<Fleet>,
    /// What this node holds of the tasks it runs.
    pub(super) holds: Arc<Holds>,
}

/// Takes jobs from the queue while this node has room, until `stop`.
pub(super) async fn pull(node: Node, stop: CancellationToken) {
    let Node { supervisor, fleet, .. } = &node;
    let clock = clock();
    loop {
        if stop.is_cancelled() {
            return;
        }
        let room = supervisor.room.send(Room).await.unwrap_or(false);
        if !room {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = clock.sleep(Duration::from_millis(200)) => continue,
            }
        }
        let next = tokio::select! {
            _ = stop.cancelled() => return,
            next = fleet.next_job(Duration::from_secs(1)) => next,
        };
        match next {
            Ok(Some(taken)) => {
                if let Pulled::NotHere = take(&node, taken).await {
                    // Step aside for longer than the job's redelivery delay, so a node that
                    // reaches its workspace is the one waiting for it.
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = clock.sleep(3 * HAND_BACK) => {}
                    }
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "cannot pull the fleet's queue; trying again");
                clock.sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// How long a job this node cannot take waits before JetStream offers it again.
const HAND_BACK: Duration = Duration::from_millis(500);

/// What became of a pulled job.
enum Pulled {
    /// Taken, dropped, or handed back for a reason that may pass (a lease still running).
    Handled,
    /// Handed back: its workspace is not here.
    NotHere,
}

/// What to do with a job this node pulled: hand it back when the workspace is not here or another
/// node's lease runs; drop it when its task has ended; else take the lease and start the task.
async fn take(node: &Node, taken: Taken) -> Pulled {
    let config = node.shared.config();
    let Some(cluster) = config.cluster.as_ref() else { return Pulled::Handled };
    let task_id = taken.job.task_id.clone();
    if !reaches(cluster, &taken.job.workspace) {
        tracing::debug!(task = %task_id, workspace = %taken.job.workspace, "this node does not reach the workspace of a queued task; handed back");
        if let Err(e) = taken.later(HAND_BACK).await {
            tracing::warn!(task = %task_id, error = %e, "could not hand a queued job back; JetStream redelivers it");
        }
        return Pulled::NotHere;
    }
    take_here(node, taken).await;
    Pulled::Handled
}

/// Takes a job whose workspace is here: the lease, then what the task's record says to do.
async fn take_here(node: &Node, taken: Taken) {
    let Node { supervisor, shared, fleet, holds } = node;
    let task_id = taken.job.task_id.clone();
    // A run of the task this node lost may still be winding down here: taking the lease again
    // would let its last writes through, so the job waits until it is gone.
    if supervisor.is_running.send(IsRunning { task_id: task_id.clone() }).await.unwrap_or(true) {
        let _ = taken.later(Duration::from_secs(1)).await;
        return;
    }
    let lease = match fleet.acquire(&task_id).await {
        Ok(lease) => lease,
        Err(ClusterError::Held { until_ms, .. }) => {
            let wait = until_ms.saturating_sub(now_ms()) + 200;
            let _ = taken.later(Duration::from_millis(wait)).await;
            return;
        }
        Err(e) => {
            tracing::warn!(task = %task_id, error = %e, "cannot take the lease of a queued task");
            let _ = taken.later(Duration::from_secs(1)).await;
            return;
        }
    };
    let meta = match shared.storage.task(&task_id) {
        Ok(Some(meta)) => meta,
        Ok(None) => {
            tracing::error!(task = %task_id, "a queued task has no record; dropped");
            let _ = fleet.release(&lease).await;
            let _ = taken.done().await;
            return;
        }
        Err(e) => {
            tracing::warn!(task = %task_id, error = %e, "cannot read a queued task");
            let _ = fleet.release(&lease).await;
            let _ = taken.later(Duration::from_secs(1)).await;
            return;
        }
    };
    let (start, takeover) = match (meta.state, taken.job.start.clone()) {
        (TaskState::Queued, start) => (start, false),
        // It ran before (its node died or stopped): resumed from its history, as after a crash.
        (TaskState::Running | TaskState::WaitingRetry | TaskState::Interrupted, _) => (Start::Resume, true),
        (state, _) => {
            // Its node may have died between writing the end on the record and in the log: the
            // log gets its end now, under this lease, so no watcher waits for it for ever.
            match agentd_engine::end::complete_end(shared.storage.as_ref(), &meta) {
                Ok(true) => {
                    tracing::info!(task = %task_id, %state, "the log of an ended task gets the end its record holds")
                }
                Ok(false) => {
                    tracing::info!(task = %task_id, %state, "a queued job of an ended task; dropped")
                }
                Err(e) => {
                    tracing::warn!(task = %task_id, error = %e, "cannot complete the end of a task; tried again later");
                    let _ = fleet.release(&lease).await;
                    let _ = taken.later(Duration::from_secs(1)).await;
                    return;
                }
            }
            let _ = fleet.release(&lease).await;
            let _ = taken.done().await;
            return;
        }
    };
    if takeover {
        tracing::info!(task = %task_id, epoch = lease.epoch, "taking over a task another node left");
    }
    let (fleet, holds) = (fleet.clone(), holds.clone());
    let adopt = move |tasks: &mut Tasks| adopt(tasks, fleet, holds, Held::new(lease, taken), meta, start);
    let _ = supervisor.on_tasks.send(OnTasks(Box::new(adopt))).await;
}

/// Starts a task this node took from the queue, under `held` (in the actor): what it returns keeps
/// the lease while the task runs, or lets the job go when the task could not start.
fn adopt(
    tasks: &mut Tasks,
    fleet: Arc<Fleet>,
    holds: Arc<Holds>,
    held: Held,
    meta: TaskMeta,
    start: Start,
) -> Option<BoxFuture<'static, ()>> {
    let task_id = meta.task_id.clone();
    let held = Arc::new(held);
    holds.prune(|id| tasks.running.contains_key(id));
    match start_taken(tasks, &fleet, &meta, start) {
        Ok(()) => {
            let running = tasks.running.get(&task_id)?;
            holds.hold(&task_id, held.clone());
            let (cancel, done) = (running.cancel.clone(), running.done.clone());
            // Stopped for the fleet's trouble, the task waits here, as last read, until taken again.
            let stalled = (tasks.shared.stalls.clone(), meta.clone());
            Some(Box::pin(keep(fleet, holds, task_id, held, cancel, done, stalled)))
        }
        Err(
            e @ (SupervisorError::Storage(_)
            | SupervisorError::Fleet(_)
            | SupervisorError::Task(agentd_engine::task::TaskError::Storage(_))),
        ) => {
            // The fleet's storage failed under it: another attempt (here or elsewhere) may not.
            tracing::warn!(task = %task_id, error = %e, "a task taken from the queue could not start; handed back");
            Some(Box::pin(async move {
                let lease = held.lease.lock().clone();
                let _ = fleet.release(&lease).await;
                let _ = held.taken.later(Duration::from_secs(1)).await;
            }))
        }
        Err(e) => {
            // The task cannot start here (its workspace refused or missing): it fails, as it
            // would on one machine, and the job is done.
            tracing::error!(task = %task_id, error = %e, "a task taken from the queue could not start");
            let end = End {
                state: TaskState::Failed,
                kind: EventKind::TaskFailed { error: e.to_string() },
                result: None,
                error: Some(e.to_string()),
                record_error: String::new(),
            };
            if let Err(e) = record_end(tasks.shared.storage.as_ref(), &task_id, &end) {
                tracing::error!(task = %task_id, error = %e, "could not record the failure");
            }
            Some(Box::pin(async move {
                let lease = held.lease.lock().clone();
                let _ = fleet.release(&lease).await;
                let _ = held.taken.done().await;
            }))
        }
    }
}

/// A taken task's start here: the record names this node, the resume says why it was taken over,
/// and the run starts.
fn start_taken(
    tasks: &mut Tasks,
    fleet: &Fleet,
    meta: &TaskMeta,
    start: Start,
) -> Result<(), SupervisorError> {
    let task_id = &meta.task_id;
    let workspace = tasks.workspace(&meta.workspace)?;
    let storage = tasks.shared.storage.clone();
    let node = fleet.node().to_string();
    storage.update_task(task_id, &mut |t| {
        t.node = Some(node.clone());
        t.error = None;
        t.updated_at = now_rfc3339();
    })?;
    // Taken again: not stalled here any more. A task whose holder did not end it was taken over;
    // why is said with its resume, the first event written once the fleet can be written again.
    let stall = tasks.shared.stalls.clear(task_id);
    let after = match (&stall, meta.state, meta.node.as_deref()) {
        (Some(stall), _, _) => Some(format!("taken over after {}", stall.waiting_because())),
        (None, TaskState::Running, Some(other)) => Some(format!(
            "taken over from node {other}, which stopped holding it (its lease lapsed: the node died, \
                 lost NATS, or the fleet could not be written)"
        )),
        _ => None,
    };
    match &start {
        Start::Resume => {
            close_unfinished_calls(storage.as_ref(), task_id, true)?;
            let resumed = EventKind::TaskResumed { node: Some(node.clone()), after };
            storage.emit(task_id, &Role::Lead, resumed)?;
        }
        Start::Followup { text } => {
            storage.emit(task_id, &Role::Lead, EventKind::TaskMessage { text: text.clone() })?;
        }
        Start::Fresh { .. } => {}
    }
    tasks.start_task(task_id.clone(), workspace, start)
}
