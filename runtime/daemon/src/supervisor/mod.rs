//! The supervisor owns the tasks: it creates them, starts and resumes their teams, cancels them, and on
//! shutdown marks the running ones `interrupted` so they can be resumed. At start it marks tasks a
//! crashed daemon left active as `interrupted` too. As a node of a fleet it takes its tasks from the
//! fleet's queue and holds each under a lease ([`fleet`]).

mod fleet;

use crate::shared::Shared;
use actix::prelude::*;
use agentd_agents::workspace::Workspace;
use agentd_agents::ToolError;
use agentd_engine::clock::{clock, now_rfc3339};
use agentd_engine::context::TaskCtx;
use agentd_engine::end::{close_unfinished_calls, record_end};
use agentd_engine::error::TurnError;
use agentd_engine::fitter::Requested;
use agentd_engine::storage::End;
use agentd_engine::storage::StorageError;
use agentd_engine::task::{compact_stopped, launch, Start, TaskError};
use agentd_protocol::rpc::CompactResult;
use agentd_protocol::task::TaskMeta;
use agentd_protocol::{Budget, Role};
use agentd_protocol::{EventKind, TaskState};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

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

struct Running {
    cancel: CancellationToken,
    done: watch::Receiver<Option<TaskState>>,
    /// The running task's context (`None` while a stopped task's history is being compacted).
    ctx: Option<Arc<TaskCtx>>,
    /// In a fleet: the task's lease and queued job, held while it runs here.
    held: Option<Arc<fleet::Held>>,
}

/// The actor that owns the tasks: it creates them, starts and resumes their teams, cancels them, and on
/// shutdown marks every running one `interrupted`.
pub struct Supervisor {
    shared: Arc<Shared>,
    running: HashMap<String, Running>,
    accepting: bool,
    /// Stops the fleet's loops (pulling the queue, the heartbeat) and the wake-up timers at
    /// shutdown.
    stop: CancellationToken,
    /// This actor's address, once started: what a stopped task's wake-up timer sends [`Wake`] to.
    me: Option<Addr<Supervisor>>,
}

impl Supervisor {
    /// A supervisor over `shared`, accepting work and running no task yet.
    pub fn new(shared: Arc<Shared>) -> Supervisor {
        Supervisor {
            shared,
            running: HashMap::new(),
            accepting: true,
            stop: CancellationToken::new(),
            me: None,
        }
    }

    /// Tasks left active by a daemon that died become `interrupted`, with the event that says so.
    /// In a fleet nothing is marked: a task a node left running is taken over by another, or by the
    /// node itself once restarted, when its lease lapses (`crate::fleet`).
    pub fn recover(shared: &Shared) -> Result<usize, SupervisorError> {
        if shared.fleet.is_some() {
            return Ok(0);
        }
        let mut n = 0;
        for meta in shared.storage.tasks()? {
            // A crash between an end's record and its event: the log gets its end.
            if agentd_engine::end::complete_end(shared.storage.as_ref(), &meta)? {
                tracing::info!(task = %meta.task_id, state = %meta.state, "the log of an ended task gets the end its record holds");
            }
            if meta.state.is_active() {
                shared.storage.update_task(&meta.task_id, &mut |t| {
                    t.state = TaskState::Interrupted;
                    t.updated_at = now_rfc3339();
                })?;
                close_unfinished_calls(shared.storage.as_ref(), &meta.task_id, true)?;
                shared.storage.emit(&meta.task_id, &Role::Lead, EventKind::TaskInterrupted {})?;
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
        let servers = self.shared.tool_servers(&task_id, workspace.root());
        let engine = self.shared.engine.clone();
        let ctx = launch(engine, task_id.clone(), workspace, start, cancel.clone(), servers, tx)?;
        self.wake_when_stopped(&task_id, rx.clone());
        self.running.insert(task_id, Running { cancel, done: rx, ctx: Some(ctx), held: None });
        Ok(())
    }

    /// When the run ends `waiting` (a usage limit) or `paused` on a day's budget, the task is woken
    /// at its `resume_at`.
    fn wake_when_stopped(&self, task_id: &str, mut done: watch::Receiver<Option<TaskState>>) {
        let (me, storage, stop, task_id) =
            (self.me.clone(), self.shared.storage.clone(), self.stop.clone(), task_id.to_string());
        let Some(me) = me else { return };
        tokio::spawn(async move {
            let state = tokio::select! {
                state = done.wait_for(|s| s.is_some()) => state.ok().and_then(|s| *s),
                _ = stop.cancelled() => None,
            };
            if !matches!(state, Some(TaskState::Waiting | TaskState::Paused)) {
                return;
            }
            if let Ok(Some(TaskMeta { resume_at: Some(at), .. })) = storage.task(&task_id) {
                wake_at(me, stop, task_id, at).await;
            }
        });
    }

    /// Every task this daemon left `waiting` or `paused` with a `resume_at` (in a fleet: those it
    /// ran last) is woken then: a wait survives a restart.
    fn wake_stopped_tasks(&self) -> Result<usize, SupervisorError> {
        let Some(me) = self.me.clone() else { return Ok(0) };
        let node = self.shared.fleet.as_ref().map(|f| f.node().to_string());
        let mut n = 0;
        for meta in self.shared.storage.tasks()? {
            let stopped = matches!(meta.state, TaskState::Waiting | TaskState::Paused);
            let ours = node.is_none() || meta.node == node;
            if let (true, true, Some(at)) = (stopped, ours, meta.resume_at) {
                tokio::spawn(wake_at(me.clone(), self.stop.clone(), meta.task_id, at));
                n += 1;
            }
        }
        Ok(n)
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
        let meta = self.stored(task_id, check)?;
        let workspace = self.workspace(&meta.workspace)?;
        Ok((meta, workspace))
    }

    /// A stored task's meta, once `check` accepts it (it sees whether the task is running here).
    fn stored(
        &mut self,
        task_id: &str,
        check: impl FnOnce(&TaskMeta, bool) -> Result<(), SupervisorError>,
    ) -> Result<TaskMeta, SupervisorError> {
        self.reap();
        let meta = self
            .shared
            .storage
            .task(task_id)?
            .ok_or_else(|| SupervisorError::UnknownTask(task_id.to_string()))?;
        check(&meta, self.running.contains_key(task_id))?;
        Ok(meta)
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

    /// How many tasks are being run now: started, and their runner not yet done.
    pub fn running_count(&self) -> usize {
        self.running.values().filter(|r| r.ctx.is_some() && r.done.borrow().is_none()).count()
    }
}

impl Actor for Supervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.me = Some(ctx.address());
        match self.wake_stopped_tasks() {
            Ok(0) => {}
            Ok(n) => tracing::info!(tasks = n, "waiting and paused tasks will go on at their resume_at"),
            Err(e) => tracing::error!(error = %e, "cannot read the tasks that wait to go on"),
        }
        if let Some(fleet) = self.shared.fleet.clone() {
            let (me, shared, stop) = (ctx.address(), self.shared.clone(), self.stop.clone());
            tokio::spawn(fleet::pull(me.clone(), shared.clone(), fleet.clone(), stop.clone()));
            tokio::spawn(fleet::beat(me.clone(), shared, fleet.clone(), stop));
            tokio::spawn(fleet::serve_cancels(me, fleet));
        }
    }
}

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
        if let Some(b) = &msg.budget {
            check_budget(b)?;
        }
        if let Some(fleet) = self.shared.fleet.clone() {
            return self.submit_to_fleet(&fleet, msg.objective, msg.workspace, msg.team, msg.budget);
        }
        let workspace = self.workspace(&msg.workspace)?;
        let root = workspace.root().display().to_string();
        let task_id = self.record_new(&msg.objective, root, msg.team, msg.budget)?;
        self.start_task(task_id.clone(), workspace, Start::Fresh { objective: msg.objective })?;
        Ok(task_id)
    }
}

impl Supervisor {
    /// Records a new task, `queued`, with its `task_started`; its id, a UUID v7.
    fn record_new(
        &self,
        objective: &str,
        workspace: String,
        team: Option<String>,
        budget: Option<Budget>,
    ) -> Result<String, SupervisorError> {
        let task_id = uuid::Uuid::now_v7().to_string();
        let now = now_rfc3339();
        let meta = TaskMeta {
            task_id: task_id.clone(),
            objective: objective.to_string(),
            workspace,
            team,
            state: TaskState::Queued,
            created_at: now.clone(),
            updated_at: now,
            result: None,
            error: None,
            node: None,
            budget,
            resume_at: None,
        };
        self.shared.storage.create_task(&meta)?;
        self.shared.storage.emit(
            &task_id,
            &Role::Lead,
            EventKind::TaskStarted { objective: objective.to_string() },
        )?;
        Ok(task_id)
    }
}

/// Cancel a task (`task.cancel`); answers with the state it ended in.
#[derive(Message)]
#[rtype(result = "Result<TaskState, SupervisorError>")]
pub struct Cancel {
    /// The task to cancel.
    pub task_id: String,
}

impl Handler<Cancel> for Supervisor {
    type Result = ResponseFuture<Result<TaskState, SupervisorError>>;

    fn handle(&mut self, msg: Cancel, _: &mut Context<Self>) -> Self::Result {
        let shared = self.shared.clone();
        // A stopped task being compacted is not running: cancelling it is answered from its record.
        let running = self
            .running
            .get(&msg.task_id)
            .filter(|r| r.ctx.is_some())
            .map(|r| (r.cancel.clone(), r.done.clone()));
        if let (None, Some(fleet)) = (&running, shared.fleet.clone()) {
            return Box::pin(fleet::cancel_elsewhere(shared, fleet, msg.task_id));
        }
        Box::pin(async move {
            let store = &shared.storage;
            // A running task is cancelled in memory first: its runner records the end when it can
            // (else keeps it in `ends`), so a cancel works while the disk is full.
            if let Some((cancel, mut done)) = running {
                if done.borrow().is_none() {
                    cancel.cancel();
                    let waited =
                        clock().timeout(Duration::from_secs(30), done.wait_for(|s| s.is_some())).await;
                    match waited {
                        Ok(Ok(state)) if *state == Some(TaskState::Cancelled) => {
                            return Ok(TaskState::Cancelled)
                        }
                        // It ended on its own as the cancel came (failed, finished, stopped to
                        // wait): answered from its record below, as a task that had ended.
                        Ok(Ok(state)) if state.is_some() => {}
                        _ => return Err(SupervisorError::CancelTimedOut),
                    }
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
                    let end = End::cancelled();
                    if let Err(e) = record_end(shared.storage.as_ref(), &msg.task_id, &end) {
                        tracing::error!(task = %msg.task_id, error = %e, "could not record the cancel; kept in memory");
                        shared.ends.insert(&msg.task_id, End { record_error: e.to_string(), ..end });
                    }
                    Ok(TaskState::Cancelled)
                }
            }
        })
    }
}

/// Resume an interrupted, failed, waiting or paused task from its log (`task.resume`); answers
/// `running`.
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

impl Handler<Wake> for Supervisor {
    type Result = ();

    fn handle(&mut self, msg: Wake, _: &mut Context<Self>) {
        let due = matches!(
            self.shared.storage.task(&msg.task_id),
            Ok(Some(TaskMeta { state: TaskState::Waiting | TaskState::Paused, resume_at: Some(at), .. }))
                if at == msg.resume_at
        );
        if !due {
            return;
        }
        tracing::info!(task = %msg.task_id, "resume_at reached: the task goes on");
        if let Err(e) = self.resume(Resume { task_id: msg.task_id.clone(), budget: None }) {
            tracing::error!(task = %msg.task_id, error = %e, "the task could not go on at its resume_at");
        }
    }
}

/// Sleeps on the daemon's clock until `at` (RFC 3339), then wakes the task — unless the daemon
/// stops first.
async fn wake_at(me: Addr<Supervisor>, stop: CancellationToken, task_id: String, at: String) {
    let clock = clock();
    let Some(when) = agentd_engine::clock::parse_rfc3339(&at) else {
        tracing::error!(task = %task_id, resume_at = %at, "unreadable resume_at; the task waits for a resume");
        return;
    };
    let delay = when.duration_since(clock.now()).unwrap_or(Duration::ZERO);
    tokio::select! {
        _ = clock.sleep(delay) => me.do_send(Wake { task_id, resume_at: at }),
        _ = stop.cancelled() => {}
    }
}

/// A budget's figures, by the one check ([`Budget::check`]).
fn check_budget(b: &Budget) -> Result<(), SupervisorError> {
    b.check().map_err(|e| SupervisorError::InvalidBudget(e.to_string()))
}

impl Handler<Resume> for Supervisor {
    type Result = ResponseActFuture<Self, Result<TaskState, SupervisorError>>;

    fn handle(&mut self, msg: Resume, _: &mut Context<Self>) -> Self::Result {
        let finishing = self.finishing(&msg.task_id);
        Box::pin(runner_done(finishing).into_actor(self).map(move |(), act, _| act.resume(msg)))
    }
}

impl Supervisor {
    /// The runner of a task whose end is already recorded but which has not yet handed it back (its
    /// last moments: closing calls, MCP servers): a resume or a follow-up waits for it rather than
    /// being refused as "already running" a moment after the user saw the task end.
    fn finishing(&mut self, task_id: &str) -> Option<watch::Receiver<Option<TaskState>>> {
        self.reap();
        let running = self.running.get(task_id).filter(|r| r.ctx.is_some())?;
        let ended = self.shared.storage.task(task_id).ok().flatten().is_some_and(|m| !m.state.is_active());
        ended.then(|| running.done.clone())
    }

    /// Gives the task a new budget (`task.resume`'s): each figure given replaces the task's, and
    /// must be above what the task spent — else the resume would pause again at once.
    fn raise_budget(&mut self, task_id: &str, budget: Budget) -> Result<(), SupervisorError> {
        check_budget(&budget)?;
        let engine = &self.shared.engine;
        let spent = engine.ledger().task(engine.storage().as_ref(), task_id)?;
        if let Some(tokens) = budget.tokens.filter(|t| *t <= spent.tokens) {
            return Err(SupervisorError::InvalidBudget(format!(
                "budget.tokens {tokens} is not above what task {task_id} spent ({} tokens)",
                spent.tokens
            )));
        }
        if let Some(cost) = budget.cost.filter(|c| *c <= spent.cost.unwrap_or(0.0)) {
            return Err(SupervisorError::InvalidBudget(format!(
                "budget.cost {cost} is not above what task {task_id} spent (${:.4})",
                spent.cost.unwrap_or(0.0)
            )));
        }
        self.shared.storage.update_task(task_id, &mut |t| {
            t.budget = Some(t.budget.unwrap_or_default().with(budget));
            t.updated_at = now_rfc3339();
        })?;
        Ok(())
    }

    fn resume(&mut self, msg: Resume) -> Result<TaskState, SupervisorError> {
        self.ensure_accepting()?;
        let check = |meta: &TaskMeta, running: bool| {
            if running {
                return Err(SupervisorError::AlreadyRunning(msg.task_id.clone()));
            }
            let stopped = matches!(
                meta.state,
                TaskState::Interrupted | TaskState::Failed | TaskState::Waiting | TaskState::Paused
            );
            if !stopped {
                return Err(SupervisorError::NotResumable {
                    task_id: msg.task_id.clone(),
                    state: meta.state,
                });
            }
            Ok(())
        };
        if let Some(budget) = msg.budget {
            self.raise_budget(&msg.task_id, budget)?;
        }
        if let Some(fleet) = self.shared.fleet.clone() {
            let meta = self.stored(&msg.task_id, check)?;
            return self.requeue(&fleet, &meta, Start::Resume);
        }
        let (_, workspace) = self.restartable(&msg.task_id, check)?;
        // Its resume_at goes with its state, when the run starts (a status read meanwhile sees
        // the task as it was).
        self.shared.storage.update_task(&msg.task_id, &mut |t| {
            t.error = None;
            t.updated_at = now_rfc3339();
        })?;
        self.shared.storage.emit(
            &msg.task_id,
            &Role::Lead,
            EventKind::TaskResumed { node: None, after: None },
        )?;
        self.start_task(msg.task_id, workspace, Start::Resume)?;
        Ok(TaskState::Running)
    }
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

impl Handler<Followup> for Supervisor {
    type Result = ResponseActFuture<Self, Result<TaskState, SupervisorError>>;

    fn handle(&mut self, msg: Followup, _: &mut Context<Self>) -> Self::Result {
        let finishing = self.finishing(&msg.task_id);
        Box::pin(runner_done(finishing).into_actor(self).map(move |(), act, _| act.follow_up(msg)))
    }
}

/// Waits (at most 10 s, on the daemon's clock) for a finishing runner to hand its task back.
async fn runner_done(finishing: Option<watch::Receiver<Option<TaskState>>>) {
    if let Some(mut done) = finishing {
        let _ = clock().timeout(Duration::from_secs(10), done.wait_for(|s| s.is_some())).await;
    }
}

impl Supervisor {
    fn follow_up(&mut self, msg: Followup) -> Result<TaskState, SupervisorError> {
        self.ensure_accepting()?;
        if msg.text.trim().is_empty() {
            return Err(SupervisorError::EmptyText);
        }
        let check = |meta: &TaskMeta, running: bool| {
            if running || meta.state.is_active() {
                return Err(SupervisorError::StillActive { task_id: msg.task_id.clone(), state: meta.state });
            }
            if meta.state == TaskState::Cancelled {
                return Err(SupervisorError::WasCancelled(msg.task_id.clone()));
            }
            Ok(())
        };
        if let Some(fleet) = self.shared.fleet.clone() {
            let meta = self.stored(&msg.task_id, check)?;
            let text = msg.text.clone();
            return self.requeue(&fleet, &meta, Start::Followup { text });
        }
        let (_, workspace) = self.restartable(&msg.task_id, check)?;
        self.shared.storage.update_task(&msg.task_id, &mut |t| {
            t.state = TaskState::Queued;
            t.error = None;
            t.result = None;
            t.updated_at = now_rfc3339();
        })?;
        self.shared.storage.emit(
            &msg.task_id,
            &Role::Lead,
            EventKind::TaskMessage { text: msg.text.clone() },
        )?;
        self.start_task(msg.task_id, workspace, Start::Followup { text: msg.text })?;
        Ok(TaskState::Running)
    }
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

impl Handler<Compact> for Supervisor {
    type Result = ResponseFuture<Result<CompactResult, SupervisorError>>;

    fn handle(&mut self, msg: Compact, _: &mut Context<Self>) -> Self::Result {
        let chars = msg.focus.as_deref().map_or(0, |f| f.chars().count());
        if chars > agentd_protocol::rpc::MAX_FOCUS_CHARS {
            let max = agentd_protocol::rpc::MAX_FOCUS_CHARS;
            return Box::pin(async move { Err(SupervisorError::FocusTooLong { chars, max }) });
        }
        let requested = Requested { focus: msg.focus.filter(|f| !f.trim().is_empty()) };
        let role = msg.role;
        if self.shared.engine.team().role(&role).is_none() {
            return Box::pin(async move { Err(SupervisorError::UnknownRole(role)) });
        }
        self.reap();
        if let Some(running) = self.running.get(&msg.task_id) {
            return match &running.ctx {
                Some(ctx) => {
                    ctx.request_compaction(role.clone(), requested);
                    let scheduled = CompactResult {
                        role,
                        scheduled: true,
                        tokens_before: None,
                        tokens_after: None,
                        archive_id: None,
                    };
                    Box::pin(async move { Ok(scheduled) })
                }
                None => {
                    let busy = SupervisorError::AlreadyRunning(msg.task_id);
                    Box::pin(async move { Err(busy) })
                }
            };
        }
        let workspace = match self.restartable(&msg.task_id, |_, _| Ok(())) {
            Ok((_, workspace)) => workspace,
            Err(e) => return Box::pin(async move { Err(e) }),
        };
        // In a fleet the compaction writes the task's log under its lease, like a run.
        let fleet = self.shared.fleet.clone();
        if let Some(fleet) = &fleet {
            if let Err(e) = fleet::running_elsewhere(fleet, &msg.task_id).and_then(|holder| match holder {
                Some(node) => Err(SupervisorError::RunningElsewhere { task_id: msg.task_id.clone(), node }),
                None => Ok(()),
            }) {
                return Box::pin(async move { Err(e) });
            }
        }
        let (tx, rx) = watch::channel(None);
        let cancel = CancellationToken::new();
        let running = Running { cancel: cancel.clone(), done: rx, ctx: None, held: None };
        self.running.insert(msg.task_id.clone(), running);
        let engine = self.shared.engine.clone();
        Box::pin(async move {
            let lease = match &fleet {
                Some(fleet) => match fleet.acquire(&msg.task_id).await {
                    Ok(lease) => Some(lease),
                    Err(e) => {
                        let _ = tx.send(Some(TaskState::Finished));
                        return Err(SupervisorError::Fleet(e));
                    }
                },
                None => None,
            };
            let task_id = msg.task_id.clone();
            let done = compact_stopped(engine, msg.task_id, workspace, cancel, role.clone(), requested).await;
            if let (Some(fleet), Some(lease)) = (&fleet, &lease) {
                if let Err(e) = fleet.release(lease).await {
                    tracing::warn!(task = %task_id, error = %e, "could not release the lease; it lapses by itself");
                }
            }
            // The task is no longer busy, whatever happened.
            let _ = tx.send(Some(TaskState::Finished));
            let done = done.map_err(SupervisorError::Compaction)?;
            Ok(CompactResult {
                role,
                scheduled: false,
                tokens_before: Some(done.tokens_before),
                tokens_after: Some(done.tokens_after),
                archive_id: Some(done.archive_id),
            })
        })
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
        self.stop.cancel();
        self.reap();
        let shared = self.shared.clone();
        // A stopped task whose history is being compacted is not interrupted: its compaction stops.
        let (tasks, compactions): (Vec<_>, Vec<_>) = self.running.drain().partition(|(_, r)| r.ctx.is_some());
        compactions.iter().for_each(|(_, r)| r.cancel.cancel());
        // In a fleet each task is handed back to the queue once it is interrupted here.
        let holds = fleet::holds(&tasks);
        holds.iter().for_each(|h| h.hand_over());
        let running: Vec<(String, CancellationToken, watch::Receiver<Option<TaskState>>)> =
            tasks.into_iter().map(|(id, r)| (id, r.cancel, r.done)).collect();
        Box::pin(async move {
            // Marked first (so the runner's own end does not record a cancel), then stopped; the
            // terminal event comes last, after the calls the stop cut short are closed.
            for (task_id, cancel, _) in &running {
                let marked = shared.storage.update_task(task_id, &mut |t| {
                    t.state = TaskState::Interrupted;
                    t.updated_at = now_rfc3339();
                });
                if let Err(e) = marked {
                    tracing::error!(task = %task_id, error = %e, "could not mark the task interrupted");
                }
                cancel.cancel();
            }
            for (task_id, _, mut done) in running {
                let _ = clock().timeout(Duration::from_secs(10), done.wait_for(|s| s.is_some())).await;
                // In a fleet the task is not over: another node resumes it (`task_resumed` follows),
                // so no terminal event ends its watchers' streams.
                let ended =
                    close_unfinished_calls(shared.storage.as_ref(), &task_id, true).and_then(
                        |_| match shared.fleet {
                            Some(_) => Ok(()),
                            None => shared
                                .storage
                                .emit(&task_id, &Role::Lead, EventKind::TaskInterrupted {})
                                .map(drop),
                        },
                    );
                if let Err(e) = ended {
                    tracing::error!(task = %task_id, error = %e, "could not record the interruption");
                }
            }
            if let Some(fleet) = &shared.fleet {
                for held in holds {
                    held.hand_back(fleet).await;
                }
            }
            if let Err(e) = shared.storage.flush() {
                tracing::error!(error = %e, "final flush failed");
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Rig;
    use agentd_test_support::{finish, hang, sse, ScriptedServer};

    async fn supervised(steps: Vec<agentd_test_support::Step>) -> (Rig, Addr<Supervisor>) {
        let rig = Rig::start(ScriptedServer::start(steps).await, "").await;
        let supervisor = Supervisor::new(rig.shared.clone()).start();
        (rig, supervisor)
    }

    fn submit(rig: &Rig, objective: &str) -> Submit {
        Submit {
            objective: objective.into(),
            workspace: rig.workspace.path().display().to_string(),
            team: None,
            budget: None,
        }
    }

    /// Waits until the task's recorded state is terminal (or interrupted), at most 20 s.
    async fn settled(rig: &Rig, task_id: &str) -> TaskState {
        for _ in 0..2_000 {
            let state = rig.state(task_id);
            if !state.is_active() {
                return state;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        rig.state(task_id)
    }

    #[actix::test]
    async fn a_submitted_task_runs_to_its_end_and_is_recorded_as_started_first() {
        let (rig, supervisor) = supervised(vec![sse(vec![finish("done")])]).await;
        let task_id = supervisor.send(submit(&rig, "Fix the adder")).await.unwrap().unwrap();
        assert_eq!(settled(&rig, &task_id).await, TaskState::Finished);
        let kinds = rig.kinds(&task_id);
        assert_eq!(kinds.first().map(String::as_str), Some("task_started"));
        assert_eq!(kinds.last().map(String::as_str), Some("task_finished"));
        let meta = rig.shared.storage.task(&task_id).unwrap().unwrap();
        assert_eq!(meta.result.as_deref(), Some("done"));
        assert_eq!(supervisor.send(RunningCount).await.unwrap(), 0);
    }

    #[actix::test]
    async fn bad_submissions_are_refused_with_what_was_wrong_and_nothing_is_stored() {
        let (rig, supervisor) = supervised(vec![]).await;
        let refused = |msg: Submit| {
            let supervisor = supervisor.clone();
            async move { supervisor.send(msg).await.unwrap().unwrap_err() }
        };
        assert!(matches!(refused(submit(&rig, "  ")).await, SupervisorError::EmptyObjective));
        let relative = Submit { workspace: "relative/dir".into(), ..submit(&rig, "x") };
        assert!(
            matches!(refused(relative).await, SupervisorError::RelativeWorkspace(p) if p == "relative/dir")
        );
        let missing = Submit { workspace: "/no/such/dir".into(), ..submit(&rig, "x") };
        assert!(
            matches!(refused(missing).await, SupervisorError::Workspace { path, .. } if path == "/no/such/dir")
        );
        let root = Submit { workspace: "/".into(), ..submit(&rig, "x") };
        assert!(matches!(refused(root).await, SupervisorError::RefusedWorkspace { .. }));
        let team = Submit { team: Some("other".into()), ..submit(&rig, "x") };
        assert!(matches!(refused(team).await, SupervisorError::UnknownTeam(t) if t == "other"));
        assert!(rig.shared.storage.tasks().unwrap().is_empty(), "a refused task is not stored");
    }

    #[actix::test]
    async fn a_running_task_is_cancelled_at_once_and_an_ended_one_refuses() {
        let (rig, supervisor) = supervised(vec![hang()]).await;
        let task_id = supervisor.send(submit(&rig, "Wait forever")).await.unwrap().unwrap();
        while rig.server.chat_requests().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let state = supervisor.send(Cancel { task_id: task_id.clone() }).await.unwrap().unwrap();
        assert_eq!(state, TaskState::Cancelled);
        assert_eq!(rig.state(&task_id), TaskState::Cancelled);
        let again = supervisor.send(Cancel { task_id: task_id.clone() }).await.unwrap().unwrap_err();
        assert!(matches!(again, SupervisorError::AlreadyEnded { state: TaskState::Cancelled, .. }));
        let unknown = supervisor.send(Cancel { task_id: "nope".into() }).await.unwrap().unwrap_err();
        assert!(matches!(unknown, SupervisorError::UnknownTask(id) if id == "nope"));
        // A cancelled task takes no follow-up and cannot be resumed.
        let followup = Followup { task_id: task_id.clone(), text: "more".into() };
        let refused = supervisor.send(followup).await.unwrap().unwrap_err();
        assert!(matches!(refused, SupervisorError::WasCancelled(_)));
        let resumed = supervisor.send(Resume { task_id, budget: None }).await.unwrap().unwrap_err();
        assert!(matches!(resumed, SupervisorError::NotResumable { state: TaskState::Cancelled, .. }));
    }

    #[actix::test]
    async fn a_finished_task_takes_a_follow_up_and_runs_again() {
        let (rig, supervisor) =
            supervised(vec![sse(vec![finish("first")]), sse(vec![finish("second")])]).await;
        let task_id = supervisor.send(submit(&rig, "Fix it")).await.unwrap().unwrap();
        assert_eq!(settled(&rig, &task_id).await, TaskState::Finished);
        let empty = Followup { task_id: task_id.clone(), text: " ".into() };
        assert!(matches!(supervisor.send(empty).await.unwrap(), Err(SupervisorError::EmptyText)));
        let more = Followup { task_id: task_id.clone(), text: "Now add a test".into() };
        assert_eq!(supervisor.send(more).await.unwrap().unwrap(), TaskState::Running);
        assert_eq!(settled(&rig, &task_id).await, TaskState::Finished);
        let meta = rig.shared.storage.task(&task_id).unwrap().unwrap();
        assert_eq!(meta.result.as_deref(), Some("second"));
        assert!(rig.kinds(&task_id).contains(&"task_message".to_string()));
    }

    #[actix::test]
    async fn shutdown_interrupts_what_runs_and_refuses_new_work_and_recover_finds_nothing_left() {
        let (rig, supervisor) = supervised(vec![hang()]).await;
        let task_id = supervisor.send(submit(&rig, "Wait forever")).await.unwrap().unwrap();
        while rig.server.chat_requests().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        supervisor.send(Shutdown).await.unwrap();
        assert_eq!(rig.state(&task_id), TaskState::Interrupted);
        assert_eq!(rig.kinds(&task_id).last().map(String::as_str), Some("task_interrupted"));
        let late = supervisor.send(submit(&rig, "Too late")).await.unwrap().unwrap_err();
        assert!(matches!(late, SupervisorError::ShuttingDown));
        // What a restarted daemon finds: nothing active, so nothing to mark.
        assert_eq!(Supervisor::recover(&rig.shared).unwrap(), 0);
    }

    #[actix::test]
    async fn a_task_a_crashed_daemon_left_running_is_marked_interrupted_with_its_calls_closed() {
        let rig = Rig::start(ScriptedServer::start(vec![]).await, "").await;
        let task = rig.task("Left running");
        let called =
            EventKind::ToolCalled { tool: agentd_protocol::ToolName::RunCommand, call_id: "c1".into() };
        rig.shared.storage.emit(&task.task_id, &Role::Coder, called).unwrap();
        assert_eq!(Supervisor::recover(&rig.shared).unwrap(), 1);
        assert_eq!(rig.state(&task.task_id), TaskState::Interrupted);
        let events = rig.events(&task.task_id);
        let n = events.len();
        assert!(matches!(&events[n - 2].kind, EventKind::ToolFinished { interrupted: true, .. }));
        assert!(matches!(events[n - 1].kind, EventKind::TaskInterrupted {}));
    }
}
