//! The supervisor owns the tasks: it creates them, starts and resumes their teams, cancels them, and on
//! shutdown marks the running ones `interrupted` so they can be resumed. At start it marks tasks a
//! crashed daemon left active as `interrupted` too.

use crate::clock::now_rfc3339;
use crate::ends::{record_end, End};
use crate::task::{close_unfinished_calls, launch, Shared, Start, TaskError};
use actix::prelude::*;
use agentd_agents::workspace::Workspace;
use agentd_agents::ToolError;
use agentd_evidence::StoreError;
use agentd_evidence::TaskMeta;
use agentd_policies::{EventKind, TaskState};
use agentd_protocol::Role;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Why the supervisor refused or failed a request. The socket layer maps each to its `ErrorCode`.
#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    #[error("the daemon is shutting down")]
    ShuttingDown,
    #[error("objective must not be empty")]
    EmptyObjective,
    #[error("text must not be empty")]
    EmptyText,
    #[error("unknown team {0:?}; this daemon runs one team, \"default\"")]
    UnknownTeam(String),
    #[error("unknown task {0}")]
    UnknownTask(String),
    #[error("workspace must be an absolute path: {0}")]
    RelativeWorkspace(String),
    #[error("workspace {path}: {source}")]
    Workspace { path: String, source: ToolError },
    #[error("workspace {path} is refused: {why}")]
    RefusedWorkspace { path: String, why: String },
    #[error("task {0} is already running")]
    AlreadyRunning(String),
    #[error("task {task_id} is {state}; only interrupted or failed tasks can be resumed")]
    NotResumable { task_id: String, state: TaskState },
    #[error("task {task_id} is {state}; wait for it to stop")]
    StillActive { task_id: String, state: TaskState },
    #[error("task {0} was cancelled")]
    WasCancelled(String),
    #[error("task {task_id} is already {state}")]
    AlreadyEnded { task_id: String, state: TaskState },
    #[error("task {task_id} is already {state} (its end is not recorded yet: {why})")]
    EndNotRecorded { task_id: String, state: TaskState, why: String },
    #[error("the task did not stop within 30s of being cancelled")]
    CancelTimedOut,
    #[error("storage: {0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Task(#[from] TaskError),
}

struct Running {
    cancel: CancellationToken,
    done: watch::Receiver<Option<TaskState>>,
}

pub struct Supervisor {
    shared: Arc<Shared>,
    running: HashMap<String, Running>,
    accepting: bool,
}

impl Supervisor {
    pub fn new(shared: Arc<Shared>) -> Supervisor {
        Supervisor { shared, running: HashMap::new(), accepting: true }
    }

    /// Tasks left active by a daemon that died become `interrupted`, with the event that says so.
    pub fn recover(shared: &Shared) -> Result<usize, agentd_evidence::StoreError> {
        let mut n = 0;
        for meta in shared.store.tasks()? {
            if meta.state.is_active() {
                shared.store.update_task(&meta.task_id, |t| {
                    t.state = TaskState::Interrupted;
                    t.updated_at = now_rfc3339();
                })?;
                close_unfinished_calls(&shared.store, &shared.bus, &meta.task_id, true)?;
                shared.bus.emit(&meta.task_id, &Role::Lead, EventKind::TaskInterrupted {})?;
                n += 1;
            }
        }
        Ok(n)
    }

    fn start_task(
        &mut self,
        task_id: String,
        workspace: Workspace,
        start: Start,
    ) -> Result<(), SupervisorError> {
        let cancel = CancellationToken::new();
        let (tx, rx) = watch::channel(None);
        launch(self.shared.clone(), task_id.clone(), workspace, start, cancel.clone(), tx)?;
        self.running.insert(task_id, Running { cancel, done: rx });
        Ok(())
    }

    fn reap(&mut self) {
        self.running.retain(|_, r| r.done.borrow().is_none());
    }

    /// New work is refused once shutdown has begun.
    fn ensure_accepting(&self) -> Result<(), SupervisorError> {
        if !self.accepting {
            return Err(SupervisorError::ShuttingDown);
        }
        Ok(())
    }

    /// A stored task about to be started again (resumed, or given a follow-up): its meta and its
    /// re-opened workspace. `check` sees the meta and whether the task is running now, and refuses
    /// what the caller cannot restart; it runs before the workspace is opened.
    fn restartable(
        &mut self,
        task_id: &str,
        check: impl FnOnce(&TaskMeta, bool) -> Result<(), SupervisorError>,
    ) -> Result<(TaskMeta, Workspace), SupervisorError> {
        self.reap();
        let meta = self
            .shared
            .store
            .task(task_id)?
            .ok_or_else(|| SupervisorError::UnknownTask(task_id.to_string()))?;
        check(&meta, self.running.contains_key(task_id))?;
        let workspace = self.workspace(&meta.workspace)?;
        Ok((meta, workspace))
    }

    /// The workspace at `path`: an existing directory, and one a task may write in — not `/`, a
    /// system directory, the daemon's home or a directory holding it
    /// (`agentd_policies::workspace::refusal`).
    fn workspace(&self, path: &str) -> Result<Workspace, SupervisorError> {
        let workspace = Workspace::new(Path::new(path))
            .map_err(|source| SupervisorError::Workspace { path: path.to_string(), source })?;
        if let Some(why) = agentd_policies::workspace::refusal(workspace.root(), &self.shared.home) {
            return Err(SupervisorError::RefusedWorkspace { path: path.to_string(), why: why.to_string() });
        }
        Ok(workspace)
    }

    pub fn running_count(&self) -> usize {
        self.running.values().filter(|r| r.done.borrow().is_none()).count()
    }
}

impl Actor for Supervisor {
    type Context = Context<Self>;
}

#[derive(Message)]
#[rtype(result = "Result<String, SupervisorError>")]
pub struct Submit {
    pub objective: String,
    pub workspace: String,
    pub team: Option<String>,
}

impl Handler<Submit> for Supervisor {
    type Result = Result<String, SupervisorError>;

    fn handle(&mut self, msg: Submit, _: &mut Context<Self>) -> Self::Result {
        self.ensure_accepting()?;
        self.reap();
        if msg.objective.trim().is_empty() {
            return Err(SupervisorError::EmptyObjective);
        }
        if let Some(team) = &msg.team {
            if team != "default" {
                return Err(SupervisorError::UnknownTeam(team.clone()));
            }
        }
        let path = Path::new(&msg.workspace);
        if !path.is_absolute() {
            return Err(SupervisorError::RelativeWorkspace(msg.workspace));
        }
        let workspace = self.workspace(&msg.workspace)?;
        let task_id = uuid::Uuid::now_v7().to_string();
        let now = now_rfc3339();
        let meta = TaskMeta {
            task_id: task_id.clone(),
            objective: msg.objective.clone(),
            workspace: workspace.root().display().to_string(),
            team: msg.team,
            state: TaskState::Queued,
            created_at: now.clone(),
            updated_at: now,
            result: None,
            error: None,
        };
        self.shared.store.put_task(&meta)?;
        self.shared.bus.emit(
            &task_id,
            &Role::Lead,
            EventKind::TaskStarted { objective: msg.objective.clone() },
        )?;
        self.start_task(task_id.clone(), workspace, Start::Fresh { objective: msg.objective })?;
        Ok(task_id)
    }
}

#[derive(Message)]
#[rtype(result = "Result<TaskState, SupervisorError>")]
pub struct Cancel {
    pub task_id: String,
}

impl Handler<Cancel> for Supervisor {
    type Result = ResponseFuture<Result<TaskState, SupervisorError>>;

    fn handle(&mut self, msg: Cancel, _: &mut Context<Self>) -> Self::Result {
        let shared = self.shared.clone();
        let running = self.running.get(&msg.task_id).map(|r| (r.cancel.clone(), r.done.clone()));
        Box::pin(async move {
            let (store, bus) = (&shared.store, &shared.bus);
            // A running task is cancelled in memory first: its runner records the end when it can
            // (else keeps it in `ends`), so a cancel works while the disk is full.
            if let Some((cancel, mut done)) = running {
                if done.borrow().is_none() {
                    cancel.cancel();
                    let waited =
                        tokio::time::timeout(Duration::from_secs(30), done.wait_for(|s| s.is_some())).await;
                    if let Ok(Ok(state)) = waited {
                        if let Some(state) = *state {
                            return Ok(state);
                        }
                    }
                    return Err(SupervisorError::CancelTimedOut);
                }
            }
            if let Some(end) = shared.ends.get(&msg.task_id) {
                return Err(SupervisorError::EndNotRecorded {
                    task_id: msg.task_id,
                    state: end.state,
                    why: end.record_error,
                });
            }
            let meta =
                store.task(&msg.task_id)?.ok_or_else(|| SupervisorError::UnknownTask(msg.task_id.clone()))?;
            match meta.state {
                state if state.is_terminal() => {
                    Err(SupervisorError::AlreadyEnded { task_id: msg.task_id, state })
                }
                _ => {
                    let end = End {
                        state: TaskState::Cancelled,
                        kind: EventKind::TaskCancelled {},
                        result: None,
                        error: None,
                        record_error: String::new(),
                    };
                    if let Err(e) = record_end(store, bus, &msg.task_id, &end) {
                        tracing::error!(task = %msg.task_id, error = %e, "could not record the cancel; kept in memory");
                        shared.ends.insert(&msg.task_id, End { record_error: e.to_string(), ..end });
                    }
                    Ok(TaskState::Cancelled)
                }
            }
        })
    }
}

#[derive(Message)]
#[rtype(result = "Result<TaskState, SupervisorError>")]
pub struct Resume {
    pub task_id: String,
}

impl Handler<Resume> for Supervisor {
    type Result = Result<TaskState, SupervisorError>;

    fn handle(&mut self, msg: Resume, _: &mut Context<Self>) -> Self::Result {
        self.ensure_accepting()?;
        let (_, workspace) = self.restartable(&msg.task_id, |meta, running| {
            if running {
                return Err(SupervisorError::AlreadyRunning(msg.task_id.clone()));
            }
            if !matches!(meta.state, TaskState::Interrupted | TaskState::Failed) {
                return Err(SupervisorError::NotResumable {
                    task_id: msg.task_id.clone(),
                    state: meta.state,
                });
            }
            Ok(())
        })?;
        self.shared.store.update_task(&msg.task_id, |t| {
            t.error = None;
            t.updated_at = now_rfc3339();
        })?;
        self.shared.bus.emit(&msg.task_id, &Role::Lead, EventKind::TaskResumed {})?;
        self.start_task(msg.task_id, workspace, Start::Resume)?;
        Ok(TaskState::Running)
    }
}

/// A follow-up request to a task that has stopped (finished, failed or interrupted): the lead takes
/// it as a new user message, with the team's histories as they are.
#[derive(Message)]
#[rtype(result = "Result<TaskState, SupervisorError>")]
pub struct Followup {
    pub task_id: String,
    pub text: String,
}

impl Handler<Followup> for Supervisor {
    type Result = Result<TaskState, SupervisorError>;

    fn handle(&mut self, msg: Followup, _: &mut Context<Self>) -> Self::Result {
        self.ensure_accepting()?;
        if msg.text.trim().is_empty() {
            return Err(SupervisorError::EmptyText);
        }
        let (_, workspace) = self.restartable(&msg.task_id, |meta, running| {
            if running || meta.state.is_active() {
                return Err(SupervisorError::StillActive { task_id: msg.task_id.clone(), state: meta.state });
            }
            if meta.state == TaskState::Cancelled {
                return Err(SupervisorError::WasCancelled(msg.task_id.clone()));
            }
            Ok(())
        })?;
        self.shared.store.update_task(&msg.task_id, |t| {
            t.state = TaskState::Queued;
            t.error = None;
            t.result = None;
            t.updated_at = now_rfc3339();
        })?;
        self.shared.bus.emit(&msg.task_id, &Role::Lead, EventKind::TaskMessage { text: msg.text.clone() })?;
        self.start_task(msg.task_id, workspace, Start::Followup { text: msg.text })?;
        Ok(TaskState::Running)
    }
}

/// How many tasks are running now.
#[derive(Message)]
#[rtype(result = "usize")]
pub struct RunningCount;

impl Handler<RunningCount> for Supervisor {
    type Result = usize;

    fn handle(&mut self, _: RunningCount, _: &mut Context<Self>) -> usize {
        self.reap();
        self.running_count()
    }
}

/// Whether a task's runner is still at work: until it has recorded the task's end (and closed what
/// the task had open), more events may come and a follow-up or resume is refused.
#[derive(Message)]
#[rtype(result = "bool")]
pub struct IsRunning {
    /// The task.
    pub task_id: String,
}

impl Handler<IsRunning> for Supervisor {
    type Result = bool;

    fn handle(&mut self, msg: IsRunning, _: &mut Context<Self>) -> bool {
        self.reap();
        self.running.contains_key(&msg.task_id)
    }
}

/// Stop accepting work; mark every running task `interrupted` (persisted, with its event) and stop it.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Shutdown;

impl Handler<Shutdown> for Supervisor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: Shutdown, _: &mut Context<Self>) -> Self::Result {
        self.accepting = false;
        self.reap();
        let shared = self.shared.clone();
        let running: Vec<(String, CancellationToken, watch::Receiver<Option<TaskState>>)> =
            self.running.drain().map(|(id, r)| (id, r.cancel, r.done)).collect();
        Box::pin(async move {
            // Marked first (so the runner's own end does not record a cancel), then stopped; the
            // terminal event comes last, after the calls the stop cut short are closed.
            for (task_id, cancel, _) in &running {
                let marked = shared.store.update_task(task_id, |t| {
                    t.state = TaskState::Interrupted;
                    t.updated_at = now_rfc3339();
                });
                if let Err(e) = marked {
                    tracing::error!(task = %task_id, error = %e, "could not mark the task interrupted");
                }
                cancel.cancel();
            }
            for (task_id, _, mut done) in running {
                let _ = tokio::time::timeout(Duration::from_secs(10), done.wait_for(|s| s.is_some())).await;
                let ended = close_unfinished_calls(&shared.store, &shared.bus, &task_id, true)
                    .and_then(|_| shared.bus.emit(&task_id, &Role::Lead, EventKind::TaskInterrupted {}));
                if let Err(e) = ended {
                    tracing::error!(task = %task_id, error = %e, "could not record the interruption");
                }
            }
            if let Err(e) = shared.store.flush() {
                tracing::error!(error = %e, "final flush failed");
            }
        })
    }
}
