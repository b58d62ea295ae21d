//! What the supervisor is asked. The socket and the HTTP API send the public messages (a task
//! submitted, cancelled, resumed, followed up, compacted; how many run; the shutdown); a task's
//! wake-up timer sends [`Wake`]; a runner's loops reach the actor through [`Reach`] — asking for
//! [`Room`], and running work on its tasks with [`OnTasks`] (a fleet's node starting a task it took
//! from the queue).

use super::error::SupervisorError;
use super::tasks::Tasks;
use actix::prelude::*;
use agentd_protocol::rpc::CompactResult;
use agentd_protocol::{Budget, Role, TaskState};
use futures_util::future::BoxFuture;

/// Start a task (`task.submit`); answers with its id, a UUID v7.
#[derive(Message)]
#[rtype(result = "Result<String, SupervisorError>")]
pub struct Submit {
    /// What the team is to do; not empty.
    pub objective: String,
    /// The workspace: an absolute, existing directory that a task may use.
    pub workspace: String,
    /// The team asked for; only `default` (or none) is accepted.
    pub team: Option<String>,
    /// The task's own budget.
    pub budget: Option<Budget>,
}

/// Cancel a task (`task.cancel`); answers with the state it ended in.
#[derive(Message)]
#[rtype(result = "Result<TaskState, SupervisorError>")]
pub struct Cancel {
    /// The task to cancel.
    pub task_id: String,
}

/// Resume an interrupted, failed, waiting or paused task from its log (`task.resume`); answers
/// `running` (or, in a fleet, `queued`: whichever node takes it resumes it).
#[derive(Message)]
#[rtype(result = "Result<TaskState, SupervisorError>")]
pub struct Resume {
    /// The task to resume.
    pub task_id: String,
    /// A new budget: each figure given replaces the task's, and must be above what it spent.
    pub budget: Option<Budget>,
}

/// A stopped task's `resume_at` came (`waiting`, or `paused` on a day's budget): it goes on unless it
/// was resumed, cancelled or stopped again since.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Wake {
    /// The task.
    pub task_id: String,
    /// The `resume_at` the timer was set for.
    pub resume_at: String,
}

/// A follow-up request to a task that has stopped (finished, failed or interrupted): the lead takes
/// it as a new user message, with the team's histories as they are.
#[derive(Message)]
#[rtype(result = "Result<TaskState, SupervisorError>")]
pub struct Followup {
    /// The stopped task to follow up.
    pub task_id: String,
    /// The follow-up, which the lead takes as a new user message; not empty.
    pub text: String,
}

/// A compaction the user asks for (`task.compact`): of a running task, scheduled before the role's next
/// request (or at the end of the run); of a stopped one, made now — the task counts as running
/// meanwhile, so it is neither resumed nor followed up mid-compaction.
#[derive(Message)]
#[rtype(result = "Result<CompactResult, SupervisorError>")]
pub struct Compact {
    /// The task.
    pub task_id: String,
    /// Whose history.
    pub role: Role,
    /// What the summary is to keep in particular.
    pub focus: Option<String>,
}

/// How many tasks are running now.
#[derive(Message)]
#[rtype(result = "usize")]
pub struct RunningCount;

/// Whether a task's runner is still at work: until it has recorded the task's end (and closed what
/// the task had open), more events may come and a follow-up or resume is refused.
#[derive(Message)]
#[rtype(result = "bool")]
pub struct IsRunning {
    /// The task.
    pub task_id: String,
}

/// Stop accepting work; mark every running task `interrupted` (persisted, with its event) and stop it.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Shutdown;

/// Has this node room for another task of the fleet's (`[cluster] max_tasks`)?
#[derive(Message)]
#[rtype(result = "bool")]
pub(super) struct Room;

/// Work on the supervisor's tasks, done inside the actor (a fleet's node starting a task it took from
/// the queue); the future it returns, if any, then runs beside the actor — and stops with it.
#[derive(Message)]
#[rtype(result = "()")]
pub(super) struct OnTasks(pub(super) Work);

/// Work on the supervisor's tasks, and what it leaves to run beside the actor (a taken task's lease
/// kept while it runs).
pub(super) type Work = Box<dyn FnOnce(&mut Tasks) -> Option<BoxFuture<'static, ()>> + Send>;

/// The supervisor as a runner's loops reach it, started: one recipient per message they send.
#[derive(Clone)]
pub(super) struct Reach {
    /// Whether there is room for another task.
    pub(super) room: Recipient<Room>,
    /// Whether a task runs here.
    pub(super) is_running: Recipient<IsRunning>,
    /// How many tasks run here.
    pub(super) running_count: Recipient<RunningCount>,
    /// Cancelling a task (one this node runs, asked by another node).
    pub(super) cancel: Recipient<Cancel>,
    /// Work on the tasks, inside the actor.
    pub(super) on_tasks: Recipient<OnTasks>,
}
