//! What the supervisor is asked. The socket and the HTTP API send the public messages (a task
//! submitted, cancelled, resumed, followed up, compacted; how many run; the shutdown); a task's
//! wake-up timer sends [`Wake`]. How a runner's own loops reach the actor is `reach`'s.

use super::error::SupervisorError;
use actix::prelude::*;
use agentd_protocol::rpc::CompactResult;
use agentd_protocol::{Budget, Role, TaskState, ToolName};

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
    /// The id the client chose for it (a UUID), or none: the daemon makes one.
    pub task_id: Option<String>,
    /// The tools whose calls wait for the client's answer.
    pub ask: Vec<ToolName>,
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

/// The answer to a call waiting for its client's approval (`task.permit`).
#[derive(Message)]
#[rtype(result = "Result<(), SupervisorError>")]
pub struct Permit {
    /// The running task.
    pub task_id: String,
    /// The call waiting.
    pub call_id: String,
    /// It may run, or why not.
    pub answer: agentd_engine::permissions::Answer,
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

/// A revert of a stopped task's changes (`task.revert`): made now, with the task held (it counts as
/// running meanwhile, so it is neither resumed nor followed up mid-revert).
#[derive(Message)]
#[rtype(result = "Result<agentd_protocol::rpc::RevertResult, SupervisorError>")]
pub struct Revert {
    /// What to revert, and in which task.
    pub params: agentd_protocol::rpc::RevertParams,
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
