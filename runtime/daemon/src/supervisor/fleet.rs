//! The supervisor as a node of a fleet (`[cluster]`): tasks arrive from the fleet's one queue, each
//! runs under a lease this node renews, and one that stops here — lost, or handed over at shutdown —
//! goes on on another node.
//!
//! - **Submitting** records the task and its `task_started`, then queues a job; `task.resume` and
//!   `task.message` queue one too. Whichever node has room and reaches the workspace takes it
//!   ([`pull`]).
//! - **Taking a job** ([`take`]): the lease first (its epoch fences the log from then on), then the
//!   task's record decides what to do — a queued task starts as the job says; one that was running
//!   or interrupted is resumed as after a crash (`task_resumed` names this node); an ended one is a
//!   stale job, dropped.
//! - **Keeping it** ([`keep`]): the lease is renewed, and the job's acknowledgement extended, every
//!   third of a lease. A renewal refused (the lease changed hands) or failing until a third of the
//!   lease is left stops the task here: this node writes nothing of it again, and once the lease
//!   lapses JetStream hands the job to another node.
//! - **Its end**: the lease is released and the job acknowledged — or, at shutdown, handed back to
//!   the queue at once, so another node resumes the task.
//! - **Cancelling** a task another node runs asks that node ([`cancel_elsewhere`]); a task nobody
//!   runs is cancelled here, under its lease.

use super::{Running, Supervisor, SupervisorError};
use crate::fleet::{reaches, roots};
use crate::shared::Shared;
use actix::prelude::*;
use agentd_cluster::control::CancelAnswer;
use agentd_cluster::fleet::Fleet;
use agentd_cluster::lease::{now_ms, Lease, LeaseRecord};
use agentd_cluster::queue::{Job, Taken};
use agentd_cluster::ClusterError;
use agentd_engine::clock::{clock, now_rfc3339};
use agentd_engine::end::{close_unfinished_calls, record_end};
use agentd_engine::storage::End;
use agentd_engine::task::Start;
use agentd_protocol::task::TaskMeta;
use agentd_protocol::Budget;
use agentd_protocol::{EventKind, Role, TaskState};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// What this node holds of a task it runs: the lease and the queued job.
pub(super) struct Held {
    lease: Mutex<Lease>,
    taken: Taken,
    /// Set at shutdown: the task's end here is no end of it; the shutdown hands it back.
    handover: AtomicBool,
}

impl Held {
    /// Hands the task back to the fleet: the lease released, the job queued again at once.
    pub(super) async fn hand_back(&self, fleet: &Fleet) {
        let lease = self.lease.lock().clone();
        if let Err(e) = fleet.release(&lease).await {
            tracing::warn!(task = %lease.task_id, error = %e, "could not release the lease; it lapses by itself");
        }
        if let Err(e) = self.taken.later(Duration::ZERO).await {
            tracing::warn!(task = %lease.task_id, error = %e, "could not hand the job back; JetStream redelivers it");
        }
    }

    /// Marks the task as handed over at shutdown.
    pub(super) fn hand_over(&self) {
        self.handover.store(true, Ordering::SeqCst);
    }
}

/// Runs `future` (NATS calls) to its end from synchronous code, on the fleet client's runtime.
pub(super) fn block<T: Send + 'static>(
    fleet: &Arc<Fleet>,
    future: impl std::future::Future<Output = Result<T, ClusterError>> + Send + 'static,
) -> Result<T, ClusterError> {
    fleet.storage.block_on(future)
}

/// Has this node room for another task?
#[derive(Message)]
#[rtype(result = "bool")]
pub(super) struct Room;

impl Handler<Room> for Supervisor {
    type Result = bool;

    fn handle(&mut self, _: Room, _: &mut Context<Self>) -> bool {
        self.reap();
        let max = self.shared.config.cluster.as_ref().map_or(0, |c| c.max_tasks);
        self.accepting && self.running_count() < max
    }
}

/// Start a task this node took from the queue, under `lease`.
#[derive(Message)]
#[rtype(result = "()")]
pub(super) struct Adopt {
    taken: Taken,
    lease: Lease,
    meta: TaskMeta,
    start: Start,
}

impl Handler<Adopt> for Supervisor {
    type Result = ();

    fn handle(&mut self, msg: Adopt, ctx: &mut Context<Self>) {
        let Some(fleet) = self.shared.fleet.clone() else { return };
        let task_id = msg.meta.task_id.clone();
        let held = Arc::new(Held {
            lease: Mutex::new(msg.lease),
            taken: msg.taken,
            handover: AtomicBool::new(false),
        });
        match self.adopt(&fleet, &msg.meta, msg.start) {
            Ok(()) => {
                let Some(running) = self.running.get_mut(&task_id) else { return };
                running.held = Some(held.clone());
                let (cancel, done) = (running.cancel.clone(), running.done.clone());
                // Stopped for the fleet's trouble, the task waits here, as last read, until taken again.
                let stalled = (self.shared.stalls.clone(), msg.meta.clone());
                ctx.spawn(keep(fleet, task_id, held, cancel, done, stalled).into_actor(self));
            }
            Err(
                e @ (SupervisorError::Storage(_)
                | SupervisorError::Fleet(_)
                | SupervisorError::Task(agentd_engine::task::TaskError::Storage(_))),
            ) => {
                // The fleet's storage failed under it: another attempt (here or elsewhere) may not.
                tracing::warn!(task = %task_id, error = %e, "a task taken from the queue could not start; handed back");
                ctx.spawn(
                    async move {
                        let lease = held.lease.lock().clone();
                        let _ = fleet.release(&lease).await;
                        let _ = held.taken.later(Duration::from_secs(1)).await;
                    }
                    .into_actor(self),
                );
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
                if let Err(e) = record_end(self.shared.storage.as_ref(), &task_id, &end) {
                    tracing::error!(task = %task_id, error = %e, "could not record the failure");
                }
                ctx.spawn(
                    async move {
                        let lease = held.lease.lock().clone();
                        let _ = fleet.release(&lease).await;
                        let _ = held.taken.done().await;
                    }
                    .into_actor(self),
                );
            }
        }
    }
}

impl Supervisor {
    fn adopt(&mut self, fleet: &Fleet, meta: &TaskMeta, start: Start) -> Result<(), SupervisorError> {
        let task_id = &meta.task_id;
        let workspace = self.workspace(&meta.workspace)?;
        let storage = self.shared.storage.clone();
        let node = fleet.node().to_string();
        storage.update_task(task_id, &mut |t| {
            t.node = Some(node.clone());
            t.error = None;
            t.updated_at = now_rfc3339();
        })?;
        // Taken again: not stalled here any more. A task whose holder did not end it was taken over;
        // why is said with its resume, the first event written once the fleet can be written again.
        let stall = self.shared.stalls.clear(task_id);
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
        self.start_task(task_id.clone(), workspace, start)
    }

    /// `task.submit` in a fleet: recorded and queued; whichever node reaches the workspace runs it.
    pub(super) fn submit_to_fleet(
        &mut self,
        fleet: &Arc<Fleet>,
        objective: String,
        workspace: String,
        team: Option<String>,
        budget: Option<Budget>,
    ) -> Result<String, SupervisorError> {
        // A workspace this node reaches is checked here, as on one machine; another is checked by
        // the node that takes the task.
        let workspace = match std::path::Path::new(&workspace).is_dir() {
            true => self.workspace(&workspace)?.root().display().to_string(),
            false => workspace,
        };
        let task_id = self.record_new(&objective, workspace.clone(), team, budget)?;
        queue(fleet, Job { task_id: task_id.clone(), workspace, start: Start::Fresh { objective } })?;
        Ok(task_id)
    }

    /// `task.resume` and `task.message` in a fleet (of a stopped task: the caller checked its
    /// state): the task is queued again, and whichever node takes it resumes it (or gives it the
    /// follow-up). A node that has just ended the task may hold its lease a moment longer: the job
    /// waits for the lease, as every job does.
    pub(super) fn requeue(
        &mut self,
        fleet: &Arc<Fleet>,
        meta: &TaskMeta,
        start: Start,
    ) -> Result<TaskState, SupervisorError> {
        let task_id = meta.task_id.clone();
        let followup = matches!(start, Start::Followup { .. });
        self.shared.storage.update_task(&task_id, &mut |t| {
            t.state = TaskState::Queued;
            t.error = None;
            if followup {
                t.result = None;
            }
            t.updated_at = now_rfc3339();
        })?;
        queue(fleet, Job { task_id, workspace: meta.workspace.clone(), start })?;
        Ok(TaskState::Queued)
    }
}

/// Queues `job`, waiting for JetStream to hold it.
fn queue(fleet: &Arc<Fleet>, job: Job) -> Result<(), SupervisorError> {
    let f = fleet.clone();
    block(fleet, async move { f.push(&job).await }).map_err(SupervisorError::Fleet)
}

/// The node holding a live lease on `task_id`, when it is another one.
pub(super) fn running_elsewhere(
    fleet: &Arc<Fleet>,
    task_id: &str,
) -> Result<Option<String>, SupervisorError> {
    let (f, id) = (fleet.clone(), task_id.to_string());
    let lease = block(fleet, async move { f.lease_of(&id).await }).map_err(SupervisorError::Fleet)?;
    Ok(live_holder_elsewhere(fleet, lease))
}

/// The holder of `lease` while it runs, when that is another node than this one.
fn live_holder_elsewhere(fleet: &Fleet, lease: Option<LeaseRecord>) -> Option<String> {
    lease.and_then(|l| {
        let live = l.until_ms > now_ms();
        l.holder.filter(|h| live && h != fleet.node())
    })
}

/// Takes jobs from the queue while this node has room, until `stop`.
pub(super) async fn pull(
    supervisor: Addr<Supervisor>,
    shared: Arc<Shared>,
    fleet: Arc<Fleet>,
    stop: CancellationToken,
) {
    let clock = clock();
    loop {
        if stop.is_cancelled() {
            return;
        }
        let room = supervisor.send(Room).await.unwrap_or(false);
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
                if let Pulled::NotHere = take(&supervisor, &shared, &fleet, taken).await {
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
async fn take(supervisor: &Addr<Supervisor>, shared: &Shared, fleet: &Arc<Fleet>, taken: Taken) -> Pulled {
    let Some(cluster) = shared.config.cluster.as_ref() else { return Pulled::Handled };
    let task_id = taken.job.task_id.clone();
    if !reaches(cluster, &taken.job.workspace) {
        tracing::debug!(task = %task_id, workspace = %taken.job.workspace, "this node does not reach the workspace of a queued task; handed back");
        if let Err(e) = taken.later(HAND_BACK).await {
            tracing::warn!(task = %task_id, error = %e, "could not hand a queued job back; JetStream redelivers it");
        }
        return Pulled::NotHere;
    }
    take_here(supervisor, shared, fleet, taken).await;
    Pulled::Handled
}

/// Takes a job whose workspace is here: the lease, then what the task's record says to do.
async fn take_here(supervisor: &Addr<Supervisor>, shared: &Shared, fleet: &Arc<Fleet>, taken: Taken) {
    let task_id = taken.job.task_id.clone();
    // A run of the task this node lost may still be winding down here: taking the lease again
    // would let its last writes through, so the job waits until it is gone.
    if supervisor.send(super::IsRunning { task_id: task_id.clone() }).await.unwrap_or(true) {
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
    let _ = supervisor.send(Adopt { taken, lease, meta, start }).await;
}

/// Keeps the lease of a task this node runs, and the job's acknowledgement, until the task's runner
/// is done; then lets both go. A lease that cannot be kept stops the task here.
async fn keep(
    fleet: Arc<Fleet>,
    task_id: String,
    held: Arc<Held>,
    cancel: CancellationToken,
    mut done: watch::Receiver<Option<TaskState>>,
    (stalls, meta): (Arc<crate::fleet::Stalls>, TaskMeta),
) {
    let (period, clock) = (fleet.lease() / 3, clock());
    loop {
        tokio::select! {
            _ = done.wait_for(|s| s.is_some()) => break,
            _ = clock.sleep(period) => {}
        }
        let lease = held.lease.lock().clone();
        let renewed = clock.timeout(period, fleet.renew(&lease)).await;
        match renewed {
            Ok(Ok(lease)) => {
                *held.lease.lock() = lease;
                if let Err(e) = held.taken.progress().await {
                    tracing::warn!(task = %task_id, error = %e, "could not extend the task's job");
                }
            }
            Ok(Err(ClusterError::LeaseLost { .. })) => {
                return lose(&fleet, &task_id, &cancel, "the lease changed hands")
            }
            failed => {
                let why = match failed {
                    Ok(Err(e)) => e.to_string(),
                    _ => format!("no answer within {}ms", period.as_millis()),
                };
                // Stop with a third of the lease left: the next renewal would come too late.
                if now_ms() + period.as_millis() as u64 >= lease.until_ms {
                    let why = format!("its lease could not be renewed ({why})");
                    let node = fleet.node().to_string();
                    stalls.stall(TaskMeta { node: Some(node), state: TaskState::Running, ..meta }, &why);
                    return lose(&fleet, &task_id, &cancel, &why);
                }
                tracing::warn!(task = %task_id, error = %why, "could not renew the task's lease; trying again");
            }
        }
    }
    if held.handover.load(Ordering::SeqCst) {
        return;
    }
    // The run found another writer in the task's log (its lease lapsed before this node knew): the
    // lease and the job are the new holder's now, not this node's to let go.
    if fleet.storage.abandoned(&task_id) {
        tracing::warn!(task = %task_id, "the task's run ended after another node took it over; its lease and job are left to that node");
        return;
    }
    let lease = held.lease.lock().clone();
    if let Err(e) = fleet.release(&lease).await {
        tracing::warn!(task = %task_id, error = %e, "could not release the lease; it lapses by itself");
    }
    if let Err(e) = held.taken.done().await {
        tracing::warn!(task = %task_id, error = %e, "could not acknowledge the task's job");
    }
}

/// This node lost `task_id`: nothing of it is written from here again, and its run stops.
fn lose(fleet: &Fleet, task_id: &str, cancel: &CancellationToken, why: &str) {
    tracing::error!(task = %task_id, why, "stopping a task this node can no longer hold; another node continues it");
    fleet.abandon(task_id);
    cancel.cancel();
}

/// Writes this node's heartbeat every third of a lease, until `stop`; then removes it.
pub(super) async fn beat(
    supervisor: Addr<Supervisor>,
    shared: Arc<Shared>,
    fleet: Arc<Fleet>,
    stop: CancellationToken,
) {
    let Some(cluster) = shared.config.cluster.clone() else { return };
    let (period, clock) = (fleet.lease() / 3, clock());
    loop {
        let running = supervisor.send(super::RunningCount).await.unwrap_or(0) as u64;
        if let Err(e) = fleet.beat(roots(&cluster), cluster.max_tasks as u64, running).await {
            tracing::warn!(error = %e, "could not write this node's heartbeat");
        }
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = clock.sleep(period) => {}
        }
    }
    if let Err(e) = fleet.leave().await {
        tracing::warn!(error = %e, "could not remove this node's heartbeat");
    }
}

/// Answers the fleet's requests to cancel a task this node runs.
pub(super) async fn serve_cancels(supervisor: Addr<Supervisor>, fleet: Arc<Fleet>) {
    let answered = fleet
        .serve_cancels(|task_id| {
            let supervisor = supervisor.clone();
            async move {
                let here =
                    supervisor.send(super::IsRunning { task_id: task_id.clone() }).await.unwrap_or(false);
                if !here {
                    return CancelAnswer::NotHere;
                }
                match supervisor.send(super::Cancel { task_id }).await {
                    Ok(Ok(state)) => CancelAnswer::Ended(state.to_string()),
                    Ok(Err(e)) => CancelAnswer::Failed(e.to_string()),
                    Err(e) => CancelAnswer::Failed(e.to_string()),
                }
            }
        })
        .await;
    if let Err(e) = answered {
        tracing::error!(error = %e, "this node no longer answers cancel requests");
    }
}

/// Cancels a task this node does not run: the node holding its lease is asked; a task nobody runs
/// is cancelled here under its lease.
pub(super) async fn cancel_elsewhere(
    shared: Arc<Shared>,
    fleet: Arc<Fleet>,
    task_id: String,
) -> Result<TaskState, SupervisorError> {
    let lease = fleet.lease_of(&task_id).await.map_err(SupervisorError::Fleet)?;
    let holder = live_holder_elsewhere(&fleet, lease);
    if let Some(node) = holder {
        match fleet.ask_cancel(&node, &task_id, Duration::from_secs(35)).await {
            Ok(CancelAnswer::Ended(state)) => {
                return serde_json::from_value(serde_json::Value::String(state.clone())).map_err(|_| {
                    SupervisorError::Fleet(ClusterError::js(
                        "cancelling",
                        format!("node {node} answered {state:?}"),
                    ))
                });
            }
            Ok(CancelAnswer::Failed(why)) => {
                return Err(SupervisorError::Fleet(ClusterError::js(
                    format!("node {node} cancelling task {task_id}"),
                    why,
                )))
            }
            Ok(CancelAnswer::NotHere) => {}
            Err(e) => return Err(SupervisorError::Fleet(e)),
        }
    }
    let meta = shared.storage.task(&task_id)?.ok_or_else(|| SupervisorError::UnknownTask(task_id.clone()))?;
    if meta.state.is_terminal() {
        return Err(SupervisorError::AlreadyEnded { task_id, state: meta.state });
    }
    let lease = fleet.acquire(&task_id).await.map_err(|e| match e {
        ClusterError::Held { holder, .. } => {
            SupervisorError::RunningElsewhere { task_id: task_id.clone(), node: holder }
        }
        e => SupervisorError::Fleet(e),
    })?;
    let recorded = record_end(shared.storage.as_ref(), &task_id, &End::cancelled());
    if let Err(e) = fleet.release(&lease).await {
        tracing::warn!(task = %task_id, error = %e, "could not release the lease; it lapses by itself");
    }
    recorded?;
    Ok(TaskState::Cancelled)
}

/// The running tasks' holds, for a shutdown that hands them back.
pub(super) fn holds(running: &[(String, Running)]) -> Vec<Arc<Held>> {
    running.iter().filter_map(|(_, r)| r.held.clone()).collect()
}
