//! Tasks: their states, as the socket protocol and the CLI name them, and their stored metadata.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    Queued,
    Running,
    WaitingRetry,
    Finished,
    Failed,
    Cancelled,
    Interrupted,
}

impl TaskState {
    /// A terminal task never runs again; `interrupted` is not terminal: it can be resumed.
    pub fn is_terminal(self) -> bool {
        matches!(self, TaskState::Finished | TaskState::Failed | TaskState::Cancelled)
    }

    /// Whether a model turn may be under way.
    pub fn is_active(self) -> bool {
        matches!(self, TaskState::Queued | TaskState::Running | TaskState::WaitingRetry)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Queued => "queued",
            TaskState::Running => "running",
            TaskState::WaitingRetry => "waiting_retry",
            TaskState::Finished => "finished",
            TaskState::Failed => "failed",
            TaskState::Cancelled => "cancelled",
            TaskState::Interrupted => "interrupted",
        }
    }
}

impl std::fmt::Display for TaskState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
/// A task as the store keeps it.
pub struct TaskMeta {
    pub task_id: String,
    pub objective: String,
    pub workspace: String,
    pub team: Option<String>,
    pub state: TaskState,
    /// RFC 3339, set by the caller (this crate reads no clock).
    pub created_at: String,
    /// RFC 3339, set by the caller (this crate reads no clock).
    pub updated_at: String,
    pub result: Option<String>,
    pub error: Option<String>,
}
