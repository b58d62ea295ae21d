//! Why the supervisor refused or failed a request: one enum, whatever runner placed the task; the
//! socket layer maps each kind to its `ErrorCode`.

use agentd_agents::ToolError;
use agentd_engine::error::TurnError;
use agentd_engine::storage::StorageError;
use agentd_engine::task::TaskError;
use agentd_protocol::{Role, TaskState};

/// Why the supervisor refused or failed a request. The socket layer maps each to its `ErrorCode`.
#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    /// The daemon is stopping and takes no new work.
    #[error("the daemon is shutting down")]
    ShuttingDown,
    /// `task.submit` with an empty objective.
    #[error("objective must not be empty")]
    EmptyObjective,
    /// `task.message` with an empty text.
    #[error("text must not be empty")]
    EmptyText,
    /// A team other than `default` was asked for. Holds the name given.
    #[error("unknown team {0:?}; this daemon runs one team, \"default\"")]
    UnknownTeam(String),
    /// No task with this id is recorded. Holds the id.
    #[error("unknown task {0}")]
    UnknownTask(String),
    /// `task.permit` for a call that waits for no answer here (never asked, answered already, its
    /// wait over, or its task running on another node).
    #[error("task {task_id} has no call {call_id} waiting for an answer (never asked, answered already, or its wait is over)")]
    NoQuestion {
        /// The task.
        task_id: String,
        /// The call named.
        call_id: String,
    },
    /// `task.submit`'s `ask` names a tool no call could be of, or the team's own step. Holds it.
    #[error("ask: {0:?} is no tool whose calls can be approved (a workspace tool, remember, read_evidence or mcp__SERVER__TOOL)")]
    UnaskableTool(String),
    /// `task.submit` named an id for the task that is no UUID. Holds the id given.
    #[error("task_id {0:?} is not a UUID")]
    InvalidTaskId(String),
    /// `task.submit` named an id for the task that a task already has. Holds the id.
    #[error("task_id {0} is already a task's")]
    TaskIdTaken(String),
    /// The workspace is not an absolute path. Holds the path given.
    #[error("workspace must be an absolute path: {0}")]
    RelativeWorkspace(String),
    /// The workspace could not be opened as one (missing, not a directory).
    #[error("workspace {path}: {source}")]
    Workspace {
        /// The workspace path, as given.
        path: String,
        /// Why it could not be opened.
        source: ToolError,
    },
    /// The workspace is one no task may use: the root, a system directory, or agentd's home or a directory
    /// holding it (judged after symlinks are resolved).
    #[error("workspace {path} is refused: {why}")]
    RefusedWorkspace {
        /// The workspace path, as given.
        path: String,
        /// Which rule refuses it.
        why: String,
    },
    /// A budget figure that is no budget (0, negative, not a number), or one a resume gives that is
    /// not above what the task spent.
    #[error("{0}")]
    InvalidBudget(String),
    /// The task is already being run. Holds its id.
    #[error("task {0} is already running")]
    AlreadyRunning(String),
    /// `task.resume` of a task that is neither interrupted, failed, waiting nor paused.
    #[error("task {task_id} is {state}; only interrupted, failed, waiting or paused tasks can be resumed")]
    NotResumable {
        /// The task's id.
        task_id: String,
        /// The state it is in.
        state: TaskState,
    },
    /// `task.message` to a task that is still queued, running or waiting to retry.
    #[error("task {task_id} is {state}; wait for it to stop")]
    StillActive {
        /// The task's id.
        task_id: String,
        /// The state it is in.
        state: TaskState,
    },
    /// `task.message` to a cancelled task, which never runs again. Holds its id.
    #[error("task {0} was cancelled")]
    WasCancelled(String),
    /// `task.cancel` of a task that has already ended.
    #[error("task {task_id} is already {state}")]
    AlreadyEnded {
        /// The task's id.
        task_id: String,
        /// The end it reached.
        state: TaskState,
    },
    /// The task has already ended, but the store could not record the end yet (it is held in memory).
    #[error("task {task_id} is already {state} (its end is not recorded yet: {why})")]
    EndNotRecorded {
        /// The task's id.
        task_id: String,
        /// The end it reached.
        state: TaskState,
        /// Why the store refused the end.
        why: String,
    },
    /// `task.compact` names a role the team does not have.
    #[error("no role {:?} in the team", .0.name())]
    UnknownRole(Role),
    /// The requested compaction could not be made (nothing to compact, a failed summary, the store).
    #[error("{0}")]
    Compaction(#[source] TurnError),
    /// A compaction's focus longer than [`agentd_protocol::rpc::MAX_FOCUS_CHARS`].
    #[error("focus is {chars} characters; a compaction's focus holds at most {max}")]
    FocusTooLong {
        /// How long the focus given is.
        chars: usize,
        /// The most it may be.
        max: usize,
    },
    /// A revert of a task that is running: its team would go on changing the files.
    #[error("task {task_id} is {state}; a revert puts back the files of a stopped task: cancel it, or wait for it to stop")]
    RevertWhileActive {
        /// The task.
        task_id: String,
        /// Its state.
        state: TaskState,
    },
    /// A diff or a revert that could not be made.
    #[error("{0}")]
    Changes(#[source] agentd_engine::checkpoints::ChangesError),
    /// A running task did not stop within 30 s of being cancelled.
    #[error("the task did not stop within 30s of being cancelled")]
    CancelTimedOut,
    /// The engine's storage failed (the store behind it; the cause says how).
    #[error("storage: {0}")]
    Storage(#[from] StorageError),
    /// The task's team could not be formed.
    #[error("{0}")]
    Task(#[from] TaskError),
    /// The fleet could not be reached or refused (NATS, the queue, a lease).
    #[error("fleet: {0}")]
    Fleet(#[source] agentd_cluster::ClusterError),
    /// Another node of the fleet runs the task.
    #[error("task {task_id} is running on node {node}")]
    RunningElsewhere {
        /// The task's id.
        task_id: String,
        /// The node holding its lease.
        node: String,
    },
}
