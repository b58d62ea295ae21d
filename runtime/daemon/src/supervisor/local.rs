//! The runner of a daemon alone on its machine: every task runs here. A new or restarted task starts
//! at once; a task that stops without ending (a shutdown, a crash) is `interrupted` and waits for a
//! `task.resume`.

use super::error::SupervisorError;
use super::reach::Reach;
use super::runner::{Done, Held, NewTask, Runner};
use super::tasks::{cancel_from_record, interrupt, Stopping, Tasks};
use crate::shared::Shared;
use agentd_engine::clock::now_rfc3339;
use agentd_engine::end::close_unfinished_calls;
use agentd_engine::task::Start;
use agentd_protocol::task::TaskMeta;
use agentd_protocol::{EventKind, Role, TaskState};
use futures_util::future::BoxFuture;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Runs every task on this machine.
pub(super) struct Local {
    shared: Arc<Shared>,
}

impl Local {
    /// The runner of the daemon over `shared`.
    pub(super) fn new(shared: Arc<Shared>) -> Local {
        Local { shared }
    }
}

impl Runner for Local {
    /// Tasks left active by a daemon that died become `interrupted`, with the event that says so.
    fn recover(&self) -> Result<usize, SupervisorError> {
        let shared = &self.shared;
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

    fn start(&self, _: Reach, _: CancellationToken) {}

    fn wakes(&self, _: &TaskMeta) -> bool {
        true
    }

    fn place(&self, tasks: &mut Tasks, task: NewTask) -> Result<String, SupervisorError> {
        let workspace = tasks.workspace(&task.workspace)?;
        let root = workspace.root().display().to_string();
        let task_id =
            tasks.record_new(task.task_id, &task.objective, root, task.team, task.budget, task.ask)?;
        tasks.start_task(task_id.clone(), workspace, Start::Fresh { objective: task.objective })?;
        Ok(task_id)
    }

    fn cancel_not_here(&self, task_id: String) -> BoxFuture<'static, Result<TaskState, SupervisorError>> {
        let shared = self.shared.clone();
        Box::pin(async move { cancel_from_record(&shared, task_id) })
    }

    fn restart(&self, tasks: &mut Tasks, meta: TaskMeta, start: Start) -> Result<TaskState, SupervisorError> {
        let (storage, task_id) = (tasks.shared.storage.clone(), meta.task_id);
        let workspace = tasks.workspace(&meta.workspace)?;
        match &start {
            Start::Resume => {
                // Its resume_at goes with its state, when the run starts (a status read meanwhile
                // sees the task as it was).
                storage.update_task(&task_id, &mut |t| {
                    t.error = None;
                    t.updated_at = now_rfc3339();
                })?;
                storage.emit(&task_id, &Role::Lead, EventKind::TaskResumed { node: None, after: None })?;
            }
            Start::Followup { text } => {
                storage.update_task(&task_id, &mut |t| {
                    t.state = TaskState::Queued;
                    t.error = None;
                    t.result = None;
                    t.updated_at = now_rfc3339();
                })?;
                storage.emit(&task_id, &Role::Lead, EventKind::TaskMessage { text: text.clone() })?;
            }
            Start::Fresh { .. } => {}
        }
        tasks.start_task(task_id, workspace, start)?;
        Ok(TaskState::Running)
    }

    fn exclusively(&self, _: String, work: Held) -> BoxFuture<'static, Result<Done, SupervisorError>> {
        Box::pin(async move { Ok(work.await) })
    }

    /// The tasks are over here for good: each ends its log with `task_interrupted`.
    fn interrupt(&self, running: Vec<Stopping>) -> BoxFuture<'static, ()> {
        let shared = self.shared.clone();
        Box::pin(async move { interrupt(&shared, running, true).await })
    }
}
