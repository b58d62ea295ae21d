//! What a fleet's node holds of a task it runs — the task's lease and its queued job ([`Held`]) —
//! and how it keeps them while the run lasts ([`keep`]): the lease renewed and the job's
//! acknowledgement extended every third of a lease. A renewal refused (the lease changed hands) or
//! failing until a third of the lease is left stops the task here ([`lose`]): this node writes
//! nothing of it again, and once the lease lapses JetStream hands the job to another node. At the
//! run's end both are let go — unless a shutdown hands the task back to the queue
//! ([`Held::hand_back`]), or another node took it over meanwhile.

use agentd_cluster::fleet::Fleet;
use agentd_cluster::lease::{now_ms, Lease};
use agentd_cluster::queue::Taken;
use agentd_cluster::ClusterError;
use agentd_engine::clock::clock;
use agentd_protocol::task::TaskMeta;
use agentd_protocol::TaskState;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// What this node holds of a task it runs: the lease and the queued job.
pub(super) struct Held {
    /// The task's lease, as last renewed.
    pub(super) lease: Mutex<Lease>,
    /// Its job, unacknowledged while the task runs here.
    pub(super) taken: Taken,
    /// Set at shutdown: the task's end here is no end of it; the shutdown hands it back.
    handover: AtomicBool,
}

impl Held {
    /// Holds `lease` and `taken`.
    pub(super) fn new(lease: Lease, taken: Taken) -> Held {
        Held { lease: Mutex::new(lease), taken, handover: AtomicBool::new(false) }
    }

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

/// What this node holds, by task: from a task's start here until its run ends (or, for a task
/// this node lost, until the next task is taken).
#[derive(Default)]
pub(super) struct Holds {
    held: Mutex<HashMap<String, Arc<Held>>>,
}

impl Holds {
    /// `task_id` runs here, holding `held`.
    pub(super) fn hold(&self, task_id: &str, held: Arc<Held>) {
        self.held.lock().insert(task_id.to_string(), held);
    }

    /// `task_id`'s run ended: its hold is no longer this node's to hand back (unless a newer hold of
    /// the task has taken its place).
    pub(super) fn let_go(&self, task_id: &str, held: &Arc<Held>) {
        let mut holds = self.held.lock();
        if holds.get(task_id).is_some_and(|h| Arc::ptr_eq(h, held)) {
            holds.remove(task_id);
        }
    }

    /// Forgets the holds of tasks `running` says no longer run here.
    pub(super) fn prune(&self, running: impl Fn(&str) -> bool) {
        self.held.lock().retain(|task_id, _| running(task_id));
    }

    /// The holds of `task_ids`, those this node holds.
    pub(super) fn of<'a>(&self, task_ids: impl IntoIterator<Item = &'a str>) -> Vec<Arc<Held>> {
        let holds = self.held.lock();
        task_ids.into_iter().filter_map(|id| holds.get(id).cloned()).collect()
    }
}

/// Keeps the lease of a task this node runs, and the job's acknowledgement, until the task's runner
/// is done; then lets both go. A lease that cannot be kept stops the task here.
pub(super) async fn keep(
    fleet: Arc<Fleet>,
    holds: Arc<Holds>,
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
    holds.let_go(&task_id, &held);
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
