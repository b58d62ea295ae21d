//! Tasks: their states, as the socket protocol and the CLI name them, and their stored metadata.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where a task is in its life. `finished`, `failed` and `cancelled` are ends; `interrupted`, `waiting`
/// and `paused` are stops a `task.resume` continues from (the last two also by themselves, at their
/// `resume_at`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    /// Accepted and recorded; its team has not started working yet.
    Queued,
    /// A model turn or a tool call is under way.
    Running,
    /// A model request failed in a way worth retrying, and the task is waiting out the delay
    /// (`retry_scheduled` says how long).
    WaitingRetry,
    /// The lead called `finish`: the task's `result` holds its summary.
    Finished,
    /// The task stopped on an error (`error` says which); `task.resume` can continue it.
    Failed,
    /// Stopped by `task.cancel`; it never runs again.
    Cancelled,
    /// The daemon shut down or crashed while the task ran; `task.resume` continues it from its log.
    Interrupted,
    /// A provider's usage limit resets later than the retry policy's longest wait: the task waits for
    /// it without running (`usage_limit_wait` says until when, `resume_at` on its record), through
    /// daemon restarts, and goes on by itself then; `task.resume` goes on now, `task.cancel` stops it.
    Waiting,
    /// The task reached a budget (`budget_reached` says which): its next request was not sent.
    /// `task.resume` with a higher `budget` goes on; a day's budget goes on by itself when the day
    /// turns (`resume_at`).
    Paused,
}

impl TaskState {
    /// A terminal task never runs again; `interrupted`, `waiting` and `paused` are not terminal: they
    /// can be resumed.
    pub fn is_terminal(self) -> bool {
        matches!(self, TaskState::Finished | TaskState::Failed | TaskState::Cancelled)
    }

    /// Whether a model turn may be under way.
    pub fn is_active(self) -> bool {
        matches!(self, TaskState::Queued | TaskState::Running | TaskState::WaitingRetry)
    }

    /// The state's name on the wire and in the CLI (`waiting_retry`).
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Queued => "queued",
            TaskState::Running => "running",
            TaskState::WaitingRetry => "waiting_retry",
            TaskState::Finished => "finished",
            TaskState::Failed => "failed",
            TaskState::Cancelled => "cancelled",
            TaskState::Interrupted => "interrupted",
            TaskState::Waiting => "waiting",
            TaskState::Paused => "paused",
        }
    }
}

impl std::fmt::Display for TaskState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
/// The folder in a task's workspace ([`TaskMeta::workspace`]) that takes evidence whole when the
/// daemon's store cannot: `<workspace>/.agentd-evidence/<id>.<ext>`. A tool result or a handoff that
/// could not be archived names its file there, for the model to read back with `read_file`. The name
/// is part of the user-visible interface (`docs/interface.md`); this is its one spelling.
pub const EVIDENCE_FOLDER: &str = ".agentd-evidence";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
/// A task as the store keeps it.
pub struct TaskMeta {
    /// The task's id: a UUID v7, so ids sort by creation.
    pub task_id: String,
    /// What the team is to do, as submitted.
    pub objective: String,
    /// The absolute workspace directory the tools are confined to, as submitted.
    pub workspace: String,
    /// The team name given at submission, if any (this daemon runs one team, `default`).
    pub team: Option<String>,
    /// Where the task is in its life, as last recorded.
    pub state: TaskState,
    /// RFC 3339, set by the caller (this crate reads no clock).
    pub created_at: String,
    /// RFC 3339, set by the caller (this crate reads no clock).
    pub updated_at: String,
    /// The lead's `finish` summary, once the task finished.
    pub result: Option<String>,
    /// What made the task fail, while it is `failed`.
    pub error: Option<String>,
    /// In a fleet: the node running the task, or that last ran it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The task's own budget (`task.submit`'s, raised by `task.resume`'s), over `[budgets]`'s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::budget::Budget>,
    /// While `waiting`, or `paused` on a day's budget: when it goes on by itself, RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_at: Option<String>,
    /// The tools whose calls wait for the client's answer before they run (`task.submit`'s `ask`):
    /// each such call is a `permission_asked` event, answered with `task.permit`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ask: Vec<crate::tool::ToolName>,
}
