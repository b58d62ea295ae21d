//! Where a task runs, chosen once, when the supervisor is made — as the storage is chosen when the
//! daemon starts (`crate::shared::Backing`): on this machine ([`super::local`]), or on whichever node
//! of the fleet takes it from the queue ([`super::fleet`]).
//!
//! The supervisor's handlers do what is the same everywhere — checking a request, cancelling a run
//! that is here, compacting a history, stopping what runs at shutdown ([`super::tasks`]) — and ask
//! the [`Runner`] for what differs:
//!
//! - [`Runner::place`] a new task: local, recorded and run here; fleet, recorded and queued, and the
//!   node that takes it runs it.
//! - [`Runner::cancel_not_here`]: local, answered from the record; fleet, the node holding the task's
//!   lease is asked, and a task nobody runs is cancelled under its lease.
//! - [`Runner::restart`] a stopped task (resumed, followed up): local, run here again; fleet, queued.
//! - [`Runner::exclusively`] (a stopped task's compaction): local, as it is; fleet, under its lease.
//! - [`Runner::interrupt`] at shutdown: local, `interrupted` for good; fleet, handed back to the
//!   queue and resumed on another node.
//! - [`Runner::recover`] at start: local, what was left running becomes `interrupted`; fleet,
//!   nothing — the leases lapse and the tasks are taken over.
//! - [`Runner::start`] beside the actor: local, nothing; fleet, pulling the queue, the heartbeat,
//!   answering other nodes' cancels.

use super::error::SupervisorError;
use super::reach::Reach;
use super::tasks::{Stopping, Tasks};
use agentd_engine::error::TurnError;
use agentd_engine::fitter::RequestedDone;
use agentd_engine::task::Start;
use agentd_protocol::task::TaskMeta;
use agentd_protocol::{Budget, TaskState};
use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;

/// A new task, its request checked (`task.submit`), not recorded yet.
pub(super) struct NewTask {
    /// What the team is to do.
    pub(super) objective: String,
    /// Its workspace: an absolute path.
    pub(super) workspace: String,
    /// The team asked for (`default`).
    pub(super) team: Option<String>,
    /// Its own budget, checked.
    pub(super) budget: Option<Budget>,
    /// The id its client chose, checked to be a UUID (and, when recorded, no task's yet).
    pub(super) task_id: Option<String>,
    /// The tools whose calls wait for its client's answer.
    pub(super) ask: Vec<agentd_protocol::ToolName>,
}

/// Work on a stopped task that writes its log, to run with the task held: a compaction of a history,
/// or a revert of its changes.
pub(super) type Held = BoxFuture<'static, Done>;

/// What work done with a task held came to.
pub(super) enum Done {
    /// A compaction of a stopped task's history.
    Compacted(Result<RequestedDone, TurnError>),
    /// A revert of a stopped task's changes.
    Reverted(Result<agentd_protocol::rpc::RevertResult, agentd_engine::checkpoints::ChangesError>),
}

/// What differs between running tasks on this machine and as a node of a fleet.
pub(super) trait Runner: Send + Sync {
    /// At start, before the actor runs: what to do with the tasks a daemon that died left active.
    /// How many were marked.
    fn recover(&self) -> Result<usize, SupervisorError>;

    /// Starts the loops the runner needs beside the actor (reached through `reach`), until `stop`.
    fn start(&self, reach: Reach, stop: CancellationToken);

    /// Whether this daemon wakes `meta`'s stopped task at its `resume_at`.
    fn wakes(&self, meta: &TaskMeta) -> bool;

    /// Places a new task: records it and runs it here, or queues it. Its id.
    fn place(&self, tasks: &mut Tasks, task: NewTask) -> Result<String, SupervisorError>;

    /// Cancels a task that no run here is at work on; answers with the state it ended in.
    fn cancel_not_here(&self, task_id: String) -> BoxFuture<'static, Result<TaskState, SupervisorError>>;

    /// Starts a stopped task again, as `start` says (resumed, or followed up): `meta` is its record,
    /// which the caller checked. Answers with the state it is in now.
    fn restart(&self, tasks: &mut Tasks, meta: TaskMeta, start: Start) -> Result<TaskState, SupervisorError>;

    /// Runs `work` on the stopped task `task_id` with the task held, so nothing else writes its log
    /// meanwhile.
    fn exclusively(&self, task_id: String, work: Held) -> BoxFuture<'static, Result<Done, SupervisorError>>;

    /// Stops `running` at shutdown, each marked `interrupted`, and does with them what this runner
    /// does with a task that stops without ending. What must happen before the stops is done before
    /// this returns; the future does the rest.
    fn interrupt(&self, running: Vec<Stopping>) -> BoxFuture<'static, ()>;
}
