//! Task states, as the socket protocol and the CLI name them.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
