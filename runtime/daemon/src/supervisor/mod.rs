//! The supervisor owns the tasks: it creates them, starts and resumes their teams, cancels them, and on
//! shutdown stops the running ones so they can go on later. Where a task runs is its [`Runner`]'s,
//! chosen once when the supervisor is made: on this machine ([`local`]: a task left running by a
//! crashed daemon, or stopped by a shutdown, is `interrupted`), or as a node of a fleet ([`fleet`]:
//! tasks come from the fleet's queue and run under a lease; one that stops here goes on elsewhere).
//!
//! - [`messages`]: what the supervisor is asked.
//! - this module: the actor, and its handlers — what every request checks, and what is the same for
//!   both runners.
//! - [`tasks`]: the tasks here and their lifecycle (a run started, a cancel answered from the
//!   record, the interruption at shutdown).
//! - [`runner`]: what differs between the runners; [`local`] and [`fleet`] (with [`taking`] a job
//!   from the queue and [`holding`] its lease), the two runners.

mod error;
mod fleet;
mod holding;
mod local;
mod messages;
mod reach;
mod runner;
mod taking;
mod tasks;

pub use error::SupervisorError;
pub use messages::{
    Cancel, Compact, Followup, IsRunning, Permit, Resume, Revert, RunningCount, Shutdown, Submit, Wake,
};

use crate::shared::Shared;
use actix::prelude::*;
use agentd_engine::clock::clock;
use agentd_engine::fitter::Requested;
use agentd_engine::task::{compact_stopped, Start};
use agentd_protocol::rpc::CompactResult;
use agentd_protocol::task::TaskMeta;
use agentd_protocol::{TaskState, ToolName};
use reach::{OnTasks, Reach, Room};
use runner::{Done, NewTask, Runner};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tasks::{check_budget, runner_done, Running, Tasks};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The actor that owns the tasks: it creates them, starts and resumes their teams, cancels them, and on
/// shutdown stops every running one.
pub struct Supervisor {
    tasks: Tasks,
    /// Where tasks run: here, or on the node of the fleet that takes them.
    runner: Arc<dyn Runner>,
    accepting: bool,
}

impl Supervisor {
    /// A supervisor over `shared`, accepting work and running no task yet. Its runner is chosen here,
    /// once, by the daemon's backing: a node of a fleet runs the fleet's tasks, else every task runs
    /// here.
    pub fn new(shared: Arc<Shared>) -> Supervisor {
        let runner: Arc<dyn Runner> = match shared.fleet.clone() {
            None => Arc::new(local::Local::new(shared.clone())),
            Some(fleet) => Arc::new(fleet::FleetRunner::new(shared.clone(), fleet)),
        };
        Supervisor { tasks: Tasks::new(shared), runner, accepting: true }
    }

    /// Before the supervisor starts: what a daemon that died left active. On one machine its tasks
    /// become `interrupted`, with the event that says so (how many is answered); in a fleet nothing
    /// is marked: a task a node left running is taken over by another, or by the node itself once
    /// restarted, when its lease lapses (`crate::fleet`).
    pub fn recover(&self) -> Result<usize, SupervisorError> {
        self.runner.recover()
    }

    /// New work is refused once shutdown has begun.
    fn ensure_accepting(&self) -> Result<(), SupervisorError> {
        if !self.accepting {
            return Err(SupervisorError::ShuttingDown);
        }
        Ok(())
    }

    /// How many tasks are being run now: started, and their runner not yet done.
    pub fn running_count(&self) -> usize {
        self.tasks.running_count()
    }
}

impl Actor for Supervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let me = ctx.address();
        self.tasks.wake = Some(me.clone().recipient());
        let runner = self.runner.clone();
        match self.tasks.wake_stopped_tasks(|meta| runner.wakes(meta)) {
            Ok(0) => {}
            Ok(n) => tracing::info!(tasks = n, "waiting and paused tasks will go on at their resume_at"),
            Err(e) => tracing::error!(error = %e, "cannot read the tasks that wait to go on"),
        }
        let reach = Reach {
            room: me.clone().recipient(),
            is_running: me.clone().recipient(),
            running_count: me.clone().recipient(),
            cancel: me.clone().recipient(),
            on_tasks: me.recipient(),
        };
        self.runner.start(reach, self.tasks.stop.clone());
    }
}

impl Handler<Submit> for Supervisor {
    type Result = Result<String, SupervisorError>;

    fn handle(&mut self, msg: Submit, _: &mut Context<Self>) -> Self::Result {
        self.ensure_accepting()?;
        self.tasks.reap();
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
        if let Some(id) = &msg.task_id {
            if !agentd_protocol::text::is_uuid(id) {
                return Err(SupervisorError::InvalidTaskId(id.clone()));
            }
        }
        if let Some(tool) =
            msg.ask.iter().find(|t| matches!(t, ToolName::Other(_) | ToolName::Delegate | ToolName::Finish))
        {
            return Err(SupervisorError::UnaskableTool(tool.as_str().to_string()));
        }
        let task = NewTask {
            objective: msg.objective,
            workspace: msg.workspace,
            team: msg.team,
            budget: msg.budget,
            task_id: msg.task_id,
            ask: msg.ask,
        };
        self.runner.clone().place(&mut self.tasks, task)
    }
}

impl Handler<Cancel> for Supervisor {
    type Result = ResponseFuture<Result<TaskState, SupervisorError>>;

    fn handle(&mut self, msg: Cancel, _: &mut Context<Self>) -> Self::Result {
        // A stopped task being compacted is not running: cancelling it is answered from its record.
        let running = self
            .tasks
            .running
            .get(&msg.task_id)
            .filter(|r| r.ctx.is_some())
            .map(|r| (r.cancel.clone(), r.done.clone()));
        let Some((cancel, mut done)) = running else { return self.runner.cancel_not_here(msg.task_id) };
        let shared = self.tasks.shared.clone();
        Box::pin(async move {
            // A running task is cancelled in memory first: its runner records the end when it can
            // (else keeps it in `ends`), so a cancel works while the disk is full.
            if done.borrow().is_none() {
                cancel.cancel();
                let waited = clock().timeout(Duration::from_secs(30), done.wait_for(|s| s.is_some())).await;
                match waited {
                    Ok(Ok(state)) if *state == Some(TaskState::Cancelled) => return Ok(TaskState::Cancelled),
                    // It ended on its own as the cancel came (failed, finished, stopped to
                    // wait): answered from its record below, as a task that had ended.
                    Ok(Ok(state)) if state.is_some() => {}
                    _ => return Err(SupervisorError::CancelTimedOut),
                }
            }
            tasks::cancel_from_record(&shared, msg.task_id)
        })
    }
}

impl Handler<Wake> for Supervisor {
    type Result = ();

    fn handle(&mut self, msg: Wake, _: &mut Context<Self>) {
        let due = matches!(
            self.tasks.shared.storage.task(&msg.task_id),
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

impl Handler<Resume> for Supervisor {
    type Result = ResponseActFuture<Self, Result<TaskState, SupervisorError>>;

    fn handle(&mut self, msg: Resume, _: &mut Context<Self>) -> Self::Result {
        let finishing = self.tasks.finishing(&msg.task_id);
        Box::pin(runner_done(finishing).into_actor(self).map(move |(), act, _| act.resume(msg)))
    }
}

impl Supervisor {
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
            self.tasks.raise_budget(&msg.task_id, budget)?;
        }
        let meta = self.tasks.stored(&msg.task_id, check)?;
        self.runner.clone().restart(&mut self.tasks, meta, Start::Resume)
    }
}

impl Handler<Permit> for Supervisor {
    type Result = Result<(), SupervisorError>;

    /// Reaches the call through the task's context, where it runs here; a task that runs nowhere
    /// here has no call waiting.
    fn handle(&mut self, msg: Permit, _: &mut Context<Self>) -> Self::Result {
        let waiting = self.tasks.running.get(&msg.task_id).and_then(|r| r.ctx.as_ref()?.upgrade());
        let no_question =
            || SupervisorError::NoQuestion { task_id: msg.task_id.clone(), call_id: msg.call_id.clone() };
        match waiting {
            Some(ctx) => ctx.permissions.answer(&msg.call_id, msg.answer.clone()).map_err(|_| no_question()),
            None if self.tasks.shared.storage.task(&msg.task_id)?.is_none() => {
                Err(SupervisorError::UnknownTask(msg.task_id.clone()))
            }
            None => Err(no_question()),
        }
    }
}

impl Handler<Followup> for Supervisor {
    type Result = ResponseActFuture<Self, Result<TaskState, SupervisorError>>;

    fn handle(&mut self, msg: Followup, _: &mut Context<Self>) -> Self::Result {
        let finishing = self.tasks.finishing(&msg.task_id);
        Box::pin(runner_done(finishing).into_actor(self).map(move |(), act, _| act.follow_up(msg)))
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
        let meta = self.tasks.stored(&msg.task_id, check)?;
        self.runner.clone().restart(&mut self.tasks, meta, Start::Followup { text: msg.text })
    }
}

impl Handler<Compact> for Supervisor {
    type Result = ResponseFuture<Result<CompactResult, SupervisorError>>;

    fn handle(&mut self, msg: Compact, actor: &mut Context<Self>) -> Self::Result {
        let chars = msg.focus.as_deref().map_or(0, |f| f.chars().count());
        if chars > agentd_protocol::rpc::MAX_FOCUS_CHARS {
            let max = agentd_protocol::rpc::MAX_FOCUS_CHARS;
            return Box::pin(async move { Err(SupervisorError::FocusTooLong { chars, max }) });
        }
        let requested = Requested { focus: msg.focus.filter(|f| !f.trim().is_empty()) };
        let role = msg.role;
        if self.tasks.shared.engine.team().role(&role).is_none() {
            return Box::pin(async move { Err(SupervisorError::UnknownRole(role)) });
        }
        self.tasks.reap();
        if let Some(running) = self.tasks.running.get(&msg.task_id) {
            // A runner that recorded its task's end (or let its context go) is winding down: once
            // it is done, the task is compacted as the stopped task it is, not scheduled for a
            // request that never comes.
            let live = running.ctx.as_ref().and_then(std::sync::Weak::upgrade);
            let ended = running.ctx.is_some()
                && (live.is_none()
                    || self
                        .tasks
                        .shared
                        .storage
                        .task(&msg.task_id)
                        .ok()
                        .flatten()
                        .is_some_and(|m| !m.state.is_active()));
            if ended {
                let (mut done, me) = (running.done.clone(), actor.address());
                return Box::pin(async move {
                    let _ = clock().timeout(Duration::from_secs(10), done.wait_for(|s| s.is_some())).await;
                    if done.borrow().is_none() {
                        return Err(SupervisorError::AlreadyRunning(msg.task_id));
                    }
                    me.send(Compact { task_id: msg.task_id, role, focus: requested.focus })
                        .await
                        .map_err(|_| SupervisorError::ShuttingDown)?
                });
            }
            return match live {
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
        let workspace = match self.tasks.restartable(&msg.task_id, |_, _| Ok(())) {
            Ok((_, workspace)) => workspace,
            Err(e) => return Box::pin(async move { Err(e) }),
        };
        let (tx, rx) = watch::channel(None);
        let cancel = CancellationToken::new();
        let running = Running { cancel: cancel.clone(), done: rx, ctx: None };
        self.tasks.running.insert(msg.task_id.clone(), running);
        let engine = self.tasks.shared.engine.clone();
        let work = compact_stopped(engine, msg.task_id.clone(), workspace, cancel, role.clone(), requested);
        // In a fleet the compaction writes the task's log under its lease, like a run.
        let compacted =
            self.runner.exclusively(msg.task_id, Box::pin(async move { Done::Compacted(work.await) }));
        Box::pin(async move {
            let done = compacted.await;
            // The task is no longer busy, whatever happened.
            let _ = tx.send(Some(TaskState::Finished));
            let Done::Compacted(done) = done? else { return Err(SupervisorError::ShuttingDown) };
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

impl Handler<Revert> for Supervisor {
    type Result = ResponseFuture<Result<agentd_protocol::rpc::RevertResult, SupervisorError>>;

    fn handle(&mut self, msg: Revert, _: &mut Context<Self>) -> Self::Result {
        let task_id = msg.params.task_id.clone();
        let check = |meta: &TaskMeta, running: bool| {
            if running || meta.state.is_active() {
                return Err(SupervisorError::RevertWhileActive {
                    task_id: meta.task_id.clone(),
                    state: meta.state,
                });
            }
            Ok(())
        };
        let workspace = match self.tasks.restartable(&task_id, check) {
            Ok((_, workspace)) => workspace,
            Err(e) => return Box::pin(async move { Err(e) }),
        };
        let (tx, rx) = watch::channel(None);
        let running = Running { cancel: CancellationToken::new(), done: rx, ctx: None };
        self.tasks.running.insert(task_id.clone(), running);
        let engine = self.tasks.shared.engine.clone();
        let params = msg.params;
        let work = async move {
            let reverted = tokio::task::spawn_blocking(move || {
                let redactor = engine.redactor();
                let limits = (engine.team().checkpoint_bytes, &*redactor);
                agentd_engine::checkpoints::revert(engine.storage().as_ref(), limits, &workspace, &params)
            })
            .await;
            Done::Reverted(
                reverted.unwrap_or_else(|e| Err(agentd_engine::storage::StorageError::failed(e).into())),
            )
        };
        // In a fleet the revert writes the task's log under its lease, like a run.
        let held = self.runner.exclusively(task_id, Box::pin(work));
        Box::pin(async move {
            let done = held.await;
            // The task is no longer busy, whatever happened.
            let _ = tx.send(Some(TaskState::Finished));
            let Done::Reverted(reverted) = done? else { return Err(SupervisorError::ShuttingDown) };
            reverted.map_err(SupervisorError::Changes)
        })
    }
}

impl Handler<RunningCount> for Supervisor {
    type Result = usize;

    fn handle(&mut self, _: RunningCount, _: &mut Context<Self>) -> usize {
        self.tasks.reap();
        self.running_count()
    }
}

impl Handler<IsRunning> for Supervisor {
    type Result = bool;

    fn handle(&mut self, msg: IsRunning, _: &mut Context<Self>) -> bool {
        self.tasks.reap();
        self.tasks.running.contains_key(&msg.task_id)
    }
}

impl Handler<Room> for Supervisor {
    type Result = bool;

    fn handle(&mut self, _: Room, _: &mut Context<Self>) -> bool {
        self.tasks.reap();
        let max = self.tasks.shared.config().cluster.as_ref().map_or(0, |c| c.max_tasks);
        self.accepting && self.running_count() < max
    }
}

impl Handler<OnTasks> for Supervisor {
    type Result = ();

    fn handle(&mut self, msg: OnTasks, ctx: &mut Context<Self>) {
        if let Some(beside) = (msg.0)(&mut self.tasks) {
            ctx.spawn(beside.into_actor(self));
        }
    }
}

impl Handler<Shutdown> for Supervisor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: Shutdown, _: &mut Context<Self>) -> Self::Result {
        self.accepting = false;
        self.tasks.stop.cancel();
        self.tasks.reap();
        let shared = self.tasks.shared.clone();
        // A stopped task whose history is being compacted is not interrupted: its compaction stops.
        let (running, compactions): (Vec<_>, Vec<_>) =
            self.tasks.running.drain().partition(|(_, r)| r.ctx.is_some());
        compactions.iter().for_each(|(_, r)| r.cancel.cancel());
        let running = running.into_iter().map(|(id, r)| (id, r.cancel, r.done)).collect();
        let interrupted = self.runner.interrupt(running);
        Box::pin(async move {
            interrupted.await;
            if let Err(e) = shared.storage.flush() {
                tracing::error!(error = %e, "final flush failed");
            }
        })
    }
}

#[cfg(test)]
mod contract_tests;
#[cfg(test)]
mod tests;
