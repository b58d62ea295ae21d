//! The runner of a node of a fleet (`[cluster]`): tasks arrive from the fleet's one queue, each
//! runs under a lease this node renews, and one that stops here — lost, or handed over at shutdown —
//! goes on on another node.
//!
//! - **Submitting** records the task and its `task_started`, then queues a job; `task.resume` and
//!   `task.message` queue one too. Whichever node has room and reaches the workspace takes it
//!   (`super::taking`).
//! - **Keeping it**: the lease is renewed, and the job's acknowledgement extended, while the task
//!   runs here; a lease that cannot be kept stops the task here (`super::holding`).
//! - **Its end**: the lease is released and the job acknowledged — or, at shutdown, handed back to
//!   the queue at once, so another node resumes the task ([`Runner::interrupt`]).
//! - **Cancelling** a task another node runs asks that node ([`cancel_elsewhere`]); a task nobody
//!   runs is cancelled here, under its lease.
//! - **Compacting** a stopped task's history is done under its lease, as a run is.
//! - **At start** nothing is marked: a task a node left running is taken over by another, or by the
//!   node itself once restarted, when its lease lapses.

use super::error::SupervisorError;
use super::holding::Holds;
use super::messages::{Cancel, IsRunning, RunningCount};
use super::reach::Reach;
use super::runner::{Done, Held, NewTask, Runner};
use super::taking::{pull, Node};
use super::tasks::{interrupt, Stopping, Tasks};
use crate::fleet::roots;
use crate::shared::Shared;
use agentd_cluster::control::CancelAnswer;
use agentd_cluster::fleet::Fleet;
use agentd_cluster::lease::{now_ms, LeaseRecord};
use agentd_cluster::queue::Job;
use agentd_cluster::ClusterError;
use agentd_engine::clock::{clock, now_rfc3339};
use agentd_engine::end::record_end;
use agentd_engine::storage::End;
use agentd_engine::task::Start;
use agentd_protocol::task::TaskMeta;
use agentd_protocol::TaskState;
use futures_util::future::BoxFuture;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Runs this node's share of the fleet's tasks.
pub(super) struct FleetRunner {
    shared: Arc<Shared>,
    fleet: Arc<Fleet>,
    /// What this node holds of the tasks it runs: their leases and jobs.
    holds: Arc<Holds>,
}

impl FleetRunner {
    /// The runner of the node over `shared`, in `fleet`.
    pub(super) fn new(shared: Arc<Shared>, fleet: Arc<Fleet>) -> FleetRunner {
        FleetRunner { shared, fleet, holds: Default::default() }
    }
}

impl Runner for FleetRunner {
    /// Nothing is marked: a task a node left running is taken over by another, or by the node itself
    /// once restarted, when its lease lapses.
    fn recover(&self) -> Result<usize, SupervisorError> {
        Ok(0)
    }

    /// Pulls the queue, beats this node's heartbeat, and answers the other nodes' cancels.
    fn start(&self, reach: Reach, stop: CancellationToken) {
        let (shared, fleet, holds) = (self.shared.clone(), self.fleet.clone(), self.holds.clone());
        let node = Node { supervisor: reach.clone(), shared: shared.clone(), fleet: fleet.clone(), holds };
        tokio::spawn(pull(node, stop.clone()));
        tokio::spawn(beat(reach.clone(), shared, fleet.clone(), stop));
        tokio::spawn(serve_cancels(reach, fleet));
    }

    /// Those this node ran last.
    fn wakes(&self, meta: &TaskMeta) -> bool {
        meta.node.as_deref() == Some(self.fleet.node())
    }

    /// `task.submit` in a fleet: recorded and queued; whichever node reaches the workspace runs it.
    fn place(&self, tasks: &mut Tasks, task: NewTask) -> Result<String, SupervisorError> {
        let NewTask { objective, workspace, team, budget, task_id, ask } = task;
        // A workspace this node reaches is checked here, as on one machine; another is checked by
        // the node that takes the task.
        let workspace = match std::path::Path::new(&workspace).is_dir() {
            true => tasks.workspace(&workspace)?.root().display().to_string(),
            false => workspace,
        };
        let task_id = tasks.record_new(task_id, &objective, workspace.clone(), team, budget, ask)?;
        queue(&self.fleet, Job { task_id: task_id.clone(), workspace, start: Start::Fresh { objective } })?;
        Ok(task_id)
    }

    fn cancel_not_here(&self, task_id: String) -> BoxFuture<'static, Result<TaskState, SupervisorError>> {
        Box::pin(cancel_elsewhere(self.shared.clone(), self.fleet.clone(), task_id))
    }

    /// `task.resume` and `task.message` in a fleet (of a stopped task: the caller checked its
    /// state): the task is queued again, and whichever node takes it resumes it (or gives it the
    /// follow-up). A node that has just ended the task may hold its lease a moment longer: the job
    /// waits for the lease, as every job does.
    fn restart(&self, tasks: &mut Tasks, meta: TaskMeta, start: Start) -> Result<TaskState, SupervisorError> {
        let task_id = meta.task_id.clone();
        let followup = matches!(start, Start::Followup { .. });
        tasks.shared.storage.update_task(&task_id, &mut |t| {
            t.state = TaskState::Queued;
            t.error = None;
            if followup {
                t.result = None;
            }
            t.updated_at = now_rfc3339();
        })?;
        queue(&self.fleet, Job { task_id, workspace: meta.workspace, start })?;
        Ok(TaskState::Queued)
    }

    /// The compaction writes the task's log under its lease, like a run — refused while another
    /// node runs the task.
    fn exclusively(&self, task_id: String, work: Held) -> BoxFuture<'static, Result<Done, SupervisorError>> {
        let fleet = self.fleet.clone();
        Box::pin(async move {
            let lease = fleet.lease_of(&task_id).await.map_err(SupervisorError::Fleet)?;
            if let Some(node) = live_holder_elsewhere(&fleet, lease) {
                return Err(SupervisorError::RunningElsewhere { task_id, node });
            }
            let lease = fleet.acquire(&task_id).await.map_err(SupervisorError::Fleet)?;
            let done = work.await;
            if let Err(e) = fleet.release(&lease).await {
                tracing::warn!(task = %task_id, error = %e, "could not release the lease; it lapses by itself");
            }
            Ok(done)
        })
    }

    /// Each task is handed back to the queue once it is interrupted here: the task is not over —
    /// another node resumes it (`task_resumed` follows), so no terminal event ends its watchers'
    /// streams.
    fn interrupt(&self, running: Vec<Stopping>) -> BoxFuture<'static, ()> {
        let holds = self.holds.of(running.iter().map(|(task_id, _, _)| task_id.as_str()));
        holds.iter().for_each(|h| h.hand_over());
        let (shared, fleet) = (self.shared.clone(), self.fleet.clone());
        Box::pin(async move {
            interrupt(&shared, running, false).await;
            for held in holds {
                held.hand_back(&fleet).await;
            }
        })
    }
}

/// Runs `future` (NATS calls) to its end from synchronous code, on the fleet client's runtime.
fn block<T: Send + 'static>(
    fleet: &Arc<Fleet>,
    future: impl std::future::Future<Output = Result<T, ClusterError>> + Send + 'static,
) -> Result<T, ClusterError> {
    fleet.storage.block_on(future)
}

/// Queues `job`, waiting for JetStream to hold it.
fn queue(fleet: &Arc<Fleet>, job: Job) -> Result<(), SupervisorError> {
    let f = fleet.clone();
    block(fleet, async move { f.push(&job).await }).map_err(SupervisorError::Fleet)
}

/// The holder of `lease` while it runs, when that is another node than this one.
fn live_holder_elsewhere(fleet: &Fleet, lease: Option<LeaseRecord>) -> Option<String> {
    lease.and_then(|l| {
        let live = l.until_ms > now_ms();
        l.holder.filter(|h| live && h != fleet.node())
    })
}

/// Writes this node's heartbeat every third of a lease, until `stop`; then removes it.
async fn beat(supervisor: Reach, shared: Arc<Shared>, fleet: Arc<Fleet>, stop: CancellationToken) {
    let Some(cluster) = shared.config().cluster.clone() else { return };
    let (period, clock) = (fleet.lease() / 3, clock());
    loop {
        let running = supervisor.running_count.send(RunningCount).await.unwrap_or(0) as u64;
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
async fn serve_cancels(supervisor: Reach, fleet: Arc<Fleet>) {
    let answered = fleet
        .serve_cancels(|task_id| {
            let supervisor = supervisor.clone();
            async move {
                let here =
                    supervisor.is_running.send(IsRunning { task_id: task_id.clone() }).await.unwrap_or(false);
                if !here {
                    return CancelAnswer::NotHere;
                }
                match supervisor.cancel.send(Cancel { task_id }).await {
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
async fn cancel_elsewhere(
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
