//! The tasks the supervisor runs here, and their lifecycle whatever the runner: a stored task checked
//! and its workspace opened, a new one recorded, a run started (with the timer that wakes it when it
//! stops to wait), a cancel answered from the record, the running ones interrupted at shutdown.
//!
//! Where a task runs — here, or on the node of a fleet that takes it — is the runner's
//! ([`super::runner`]); what is written here is the same for both.

use super::error::SupervisorError;
use super::messages::Wake;
use crate::shared::Shared;
use actix::prelude::*;
use agentd_agents::workspace::Workspace;
use agentd_engine::clock::{clock, now_rfc3339};
use agentd_engine::context::TaskCtx;
use agentd_engine::end::{close_unfinished_calls, record_end};
use agentd_engine::storage::End;
use agentd_engine::task::{launch, Start};
use agentd_protocol::task::TaskMeta;
use agentd_protocol::{Budget, EventKind, Role, TaskState, ToolName};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// A task being worked on here: run, or (with no context) its stopped history compacted.
pub(super) struct Running {
    /// Stops the run (or the compaction).
    pub(super) cancel: CancellationToken,
    /// The state the run ended in, once it has handed the task back.
    pub(super) done: watch::Receiver<Option<TaskState>>,
    /// The running task's context (`None` while a stopped task's history is being compacted). Weak:
    /// the run holds it, and an ended run's context — its workspace's descriptor, its team's
    /// histories — goes when the run does, not when the supervisor next forgets ended runs.
    pub(super) ctx: Option<Weak<TaskCtx>>,
}

/// The supervisor's tasks: the daemon's parts, what runs here, and the stop of its timers.
pub(super) struct Tasks {
    /// The daemon's parts.
    pub(super) shared: Arc<Shared>,
    /// What is being worked on here, by task id (ended runs until [`Tasks::reap`]).
    pub(super) running: HashMap<String, Running>,
    /// Stops the runner's loops and the wake-up timers at shutdown.
    pub(super) stop: CancellationToken,
    /// Where a stopped task's wake-up timer sends [`Wake`], once the actor has started.
    pub(super) wake: Option<Recipient<Wake>>,
}

/// A running task being stopped (at shutdown): its id, its cancel and its end.
pub(super) type Stopping = (String, CancellationToken, watch::Receiver<Option<TaskState>>);

impl Tasks {
    /// No task yet, over `shared`.
    pub(super) fn new(shared: Arc<Shared>) -> Tasks {
        Tasks { shared, running: HashMap::new(), stop: CancellationToken::new(), wake: None }
    }

    /// Starts `task_id`'s run here, as `start` says.
    pub(super) fn start_task(
        &mut self,
        task_id: String,
        workspace: Workspace,
        start: Start,
    ) -> Result<(), SupervisorError> {
        let cancel = CancellationToken::new();
        let (tx, rx) = watch::channel(None);
        let servers = self.shared.tool_servers(&task_id, workspace.root());
        let engine = self.shared.engine.clone();
        // The run goes on in the task's span (its trace, when traces are exported).
        let span = crate::telemetry::task_span(&task_id);
        let ctx =
            span.in_scope(|| launch(engine, task_id.clone(), workspace, start, cancel.clone(), servers, tx))?;
        self.wake_when_stopped(&task_id, rx.clone());
        self.running.insert(task_id, Running { cancel, done: rx, ctx: Some(Arc::downgrade(&ctx)) });
        Ok(())
    }

    /// When the run ends `waiting` (a usage limit) or `paused` on a day's budget, the task is woken
    /// at its `resume_at`.
    fn wake_when_stopped(&self, task_id: &str, mut done: watch::Receiver<Option<TaskState>>) {
        let (me, storage, stop, task_id) =
            (self.wake.clone(), self.shared.storage.clone(), self.stop.clone(), task_id.to_string());
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

    /// Every task `ours` says this daemon wakes (in a fleet: those it ran last) that is `waiting` or
    /// `paused` with a `resume_at` is woken then: a wait survives a restart.
    pub(super) fn wake_stopped_tasks(
        &self,
        ours: impl Fn(&TaskMeta) -> bool,
    ) -> Result<usize, SupervisorError> {
        let Some(me) = self.wake.clone() else { return Ok(0) };
        let mut n = 0;
        for meta in self.shared.storage.tasks()? {
            let stopped = matches!(meta.state, TaskState::Waiting | TaskState::Paused);
            if let (true, true, Some(at)) = (stopped, ours(&meta), meta.resume_at) {
                tokio::spawn(wake_at(me.clone(), self.stop.clone(), meta.task_id, at));
                n += 1;
            }
        }
        Ok(n)
    }

    /// Forgets the runs that have ended.
    pub(super) fn reap(&mut self) {
        self.running.retain(|_, r| r.done.borrow().is_none());
    }

    /// How many tasks are being run now: started, and their runner not yet done.
    pub(super) fn running_count(&self) -> usize {
        self.running.values().filter(|r| r.ctx.is_some() && r.done.borrow().is_none()).count()
    }

    /// A stored task about to be worked on again: its meta and its re-opened workspace. `check`
    /// sees the meta and whether the task is running now, and refuses what the caller cannot do; it
    /// runs before the workspace is opened.
    pub(super) fn restartable(
        &mut self,
        task_id: &str,
        check: impl FnOnce(&TaskMeta, bool) -> Result<(), SupervisorError>,
    ) -> Result<(TaskMeta, Workspace), SupervisorError> {
        let meta = self.stored(task_id, check)?;
        let workspace = self.workspace(&meta.workspace)?;
        Ok((meta, workspace))
    }

    /// A stored task's meta, once `check` accepts it (it sees whether the task is running here).
    pub(super) fn stored(
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
    pub(super) fn workspace(&self, path: &str) -> Result<Workspace, SupervisorError> {
        let workspace = Workspace::new(Path::new(path))
            .map_err(|source| SupervisorError::Workspace { path: path.to_string(), source })?;
        if let Some(why) = agentd_policies::workspace::refusal(workspace.root(), &self.shared.home) {
            return Err(SupervisorError::RefusedWorkspace { path: path.to_string(), why: why.to_string() });
        }
        Ok(workspace)
    }

    /// Records a new task, `queued`, with its `task_started`; its id: the one its client chose (a
    /// UUID no task has yet), else a new UUID v7.
    pub(super) fn record_new(
        &self,
        chosen: Option<String>,
        objective: &str,
        workspace: String,
        team: Option<String>,
        budget: Option<Budget>,
        ask: Vec<ToolName>,
    ) -> Result<String, SupervisorError> {
        let task_id = match chosen {
            Some(id) if self.shared.storage.task(&id)?.is_some() => {
                return Err(SupervisorError::TaskIdTaken(id))
            }
            Some(id) => id,
            None => uuid::Uuid::now_v7().to_string(),
        };
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
            ask,
        };
        self.shared.storage.create_task(&meta)?;
        self.shared.storage.emit(
            &task_id,
            &Role::Lead,
            EventKind::TaskStarted { objective: objective.to_string() },
        )?;
        Ok(task_id)
    }

    /// The runner of a task whose end is already recorded but which has not yet handed it back (its
    /// last moments: closing calls, MCP servers): a resume or a follow-up waits for it rather than
    /// being refused as "already running" a moment after the user saw the task end.
    pub(super) fn finishing(&mut self, task_id: &str) -> Option<watch::Receiver<Option<TaskState>>> {
        self.reap();
        let running = self.running.get(task_id).filter(|r| r.ctx.is_some())?;
        let ended = self.shared.storage.task(task_id).ok().flatten().is_some_and(|m| !m.state.is_active());
        ended.then(|| running.done.clone())
    }

    /// Gives the task a new budget (`task.resume`'s): each figure given replaces the task's, and
    /// must be above what the task spent — else the resume would pause again at once.
    pub(super) fn raise_budget(&mut self, task_id: &str, budget: Budget) -> Result<(), SupervisorError> {
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
}

/// Sleeps on the daemon's clock until `at` (RFC 3339), then wakes the task — unless the daemon
/// stops first.
async fn wake_at(me: Recipient<Wake>, stop: CancellationToken, task_id: String, at: String) {
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
pub(super) fn check_budget(b: &Budget) -> Result<(), SupervisorError> {
    b.check().map_err(|e| SupervisorError::InvalidBudget(e.to_string()))
}

/// Waits (at most 10 s, on the daemon's clock) for a finishing runner to hand its task back.
pub(super) async fn runner_done(finishing: Option<watch::Receiver<Option<TaskState>>>) {
    if let Some(mut done) = finishing {
        let _ = clock().timeout(Duration::from_secs(10), done.wait_for(|s| s.is_some())).await;
    }
}

/// Cancels a task no run of which is at work here, from its record: an end held in memory or
/// recorded is said; a task that has not ended is recorded `cancelled` (kept in memory when the
/// store refuses, so a cancel works while the disk is full).
pub(super) fn cancel_from_record(shared: &Shared, task_id: String) -> Result<TaskState, SupervisorError> {
    if let Some(end) = shared.ends.get(&task_id) {
        return Err(SupervisorError::EndNotRecorded { task_id, state: end.state, why: end.record_error });
    }
    let meta = shared.storage.task(&task_id)?.ok_or_else(|| SupervisorError::UnknownTask(task_id.clone()))?;
    match meta.state {
        state if state.is_terminal() => Err(SupervisorError::AlreadyEnded { task_id, state }),
        _ => {
            let end = End::cancelled();
            if let Err(e) = record_end(shared.storage.as_ref(), &task_id, &end) {
                tracing::error!(task = %task_id, error = %e, "could not record the cancel; kept in memory");
                shared.ends.insert(&task_id, End { record_error: e.to_string(), ..end });
            }
            Ok(TaskState::Cancelled)
        }
    }
}

/// Interrupts `running` (at shutdown): each marked `interrupted` first (so the runner's own end does
/// not record a cancel), then stopped; once stopped, the calls it cut short are closed and — when
/// `announce`, the task being over here for good — its `task_interrupted` comes last.
pub(super) async fn interrupt(shared: &Shared, running: Vec<Stopping>, announce: bool) {
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
        let ended =
            close_unfinished_calls(shared.storage.as_ref(), &task_id, true).and_then(|_| match announce {
                false => Ok(()),
                true => shared.storage.emit(&task_id, &Role::Lead, EventKind::TaskInterrupted {}).map(drop),
            });
        if let Err(e) = ended {
            tracing::error!(task = %task_id, error = %e, "could not record the interruption");
        }
    }
}
