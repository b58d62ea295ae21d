//! The `task.*` methods: submitting, listing, reading, stopping, resuming, following up,
//! compacting and following a task. What a task does is the supervisor's; these ask it and read
//! the store.

use super::{Answer, Methods};
use crate::supervisor::{Cancel, Compact, Followup, IsRunning, Permit, Resume, Revert, Submit};
use agentd_engine::fitter::GaugeOf;
use agentd_protocol::rpc::{
    method, CompactParams, CompactResult, DiffParams, DiffResult, EventsParams, EventsResult, Handle,
    MessageParams, NoParams, PermitParams, PermitResult, ResumeParams, RevertParams, RevertResult,
    RoleStatus, RpcError, StateResult, SubmitParams, Submitted, SubscribeParams, Subscribed, TaskRef,
    TaskStatus, TaskSummary,
};
use agentd_protocol::{Role, TaskState};
use std::collections::BTreeMap;

impl Handle<method::TaskSubmit> for Methods {
    async fn handle(&self, p: SubmitParams) -> Answer<Submitted> {
        let submit = Submit {
            objective: p.objective,
            workspace: p.workspace,
            team: p.team,
            budget: p.budget,
            task_id: p.task_id,
            ask: p.ask,
        };
        let task_id = self.supervisor.send(submit).await??;
        Ok(Submitted { task_id })
    }
}

impl Handle<method::TaskList> for Methods {
    async fn handle(&self, _: NoParams) -> Answer<Vec<TaskSummary>> {
        let tasks = self.shared.storage.tasks()?;
        tasks
            .into_iter()
            .map(|t| {
                let end = self.shared.ends.get(&t.task_id);
                let engine = &self.shared.engine;
                let spent = engine.ledger().task(engine.storage().as_ref(), &t.task_id)?;
                // Only a task that runs has branches running: its log alone is read for them.
                let branches = match t.state.is_active() {
                    true => agentd_protocol::event::open_branches(&self.events(&t.task_id)?)
                        .into_iter()
                        .map(|b| b.role)
                        .collect(),
                    false => Vec::new(),
                };
                Ok(TaskSummary {
                    branches,
                    spent,
                    budget: engine.team().budgets.for_task(t.budget).any(),
                    state: match (&end, self.shared.stalls.get(&t.task_id)) {
                        (Some(e), _) => e.state,
                        // Stopped here while the fleet could not be written: waiting, not running.
                        (None, Some(s)) if t.state == TaskState::Running && t.node == s.meta.node => {
                            TaskState::Waiting
                        }
                        (None, _) => t.state,
                    },
                    recorded: end.is_none(),
                    error: end.map(|e| e.shown_error()),
                    task_id: t.task_id,
                    objective: t.objective,
                    created_at: t.created_at,
                    node: t.node,
                })
            })
            .collect::<Answer<Vec<_>>>()
    }
}

impl Handle<method::TaskStatus> for Methods {
    async fn handle(&self, p: TaskRef) -> Answer<TaskStatus> {
        let task_id = p.task_id.as_str();
        // A task this node stopped while the fleet could not be written waits: its record (which
        // still says `running`, and may not even be readable now) is read through the stall.
        let stall = self.shared.stalls.get(task_id);
        let meta = match (self.task(task_id), &stall) {
            (Ok(meta), _) => meta,
            (Err(_), Some(stall)) => stall.meta.clone(),
            (Err(e), None) => return Err(e),
        };
        let stall = stall.filter(|s| meta.state == TaskState::Running && meta.node == s.meta.node);
        let mut roles = BTreeMap::new();
        for role in self.shared.config().team.agents() {
            let gauge = self
                .shared
                .engine
                .fitter()
                .gauge_of(GaugeOf { task_id: task_id.to_string(), role: role.clone() });
            if let Some(g) = gauge {
                roles.insert(
                    role,
                    RoleStatus {
                        tokens: g.tokens,
                        estimated: g.estimated,
                        window: g.window,
                        window_source: g.window_source,
                        count_source: g.count_source,
                        calibration: g.calibration,
                        measured_by: g.measured_by,
                    },
                );
            }
        }
        let queued_because = match &self.shared.fleet {
            Some(fleet) if meta.state == TaskState::Queued => match fleet.live_nodes().await {
                Ok(live) => crate::fleet::queued_because(&meta.workspace, &live),
                Err(e) => Some(format!("the fleet's nodes cannot be read: {e}")),
            },
            _ => None,
        };
        let events = match (self.events(task_id), &stall) {
            (Ok(events), _) => events,
            (Err(_), Some(_)) => Vec::new(),
            (Err(e), None) => return Err(e),
        };
        let (spent, spent_by_role) = agentd_protocol::rpc::spent(&events);
        let mut status = TaskStatus {
            waiting_because: stall.as_ref().map(crate::fleet::Stall::waiting_because),
            budget: self.shared.engine.team().budgets.for_task(meta.budget).any(),
            resume_at: meta.resume_at,
            spent,
            spent_by_role,
            mcp_down: self.shared.mcp.down(&meta.task_id),
            branches: match meta.state.is_active() {
                true => agentd_protocol::event::open_branches(&events),
                false => Vec::new(),
            },
            stalled: match meta.state.is_active() {
                true => agentd_protocol::event::stalled_agents(&events),
                false => Vec::new(),
            },
            node: meta.node,
            queued_because,
            task_id: meta.task_id,
            state: if stall.is_some() { TaskState::Waiting } else { meta.state },
            objective: meta.objective,
            workspace: meta.workspace,
            created_at: meta.created_at,
            updated_at: meta.updated_at,
            roles,
            result: meta.result,
            error: meta.error,
            recorded: true,
            record_error: None,
        };
        // An end the store could not record yet is the truth; the store still shows the old state.
        if let Some(end) = self.shared.ends.get(task_id) {
            status.state = end.state;
            status.recorded = false;
            status.error = Some(end.shown_error());
            status.record_error = Some(end.record_error.clone());
            if let Some(r) = end.result {
                status.result = Some(r);
            }
        }
        Ok(status)
    }
}

impl Handle<method::TaskCancel> for Methods {
    async fn handle(&self, p: TaskRef) -> Answer<StateResult> {
        self.ask(Cancel { task_id: p.task_id }).await
    }
}

impl Handle<method::TaskResume> for Methods {
    async fn handle(&self, p: ResumeParams) -> Answer<StateResult> {
        self.ask(Resume { task_id: p.task_id, budget: p.budget }).await
    }
}

impl Handle<method::TaskMessage> for Methods {
    async fn handle(&self, p: MessageParams) -> Answer<StateResult> {
        self.ask(Followup { task_id: p.task_id, text: p.text }).await
    }
}

/// `task.permit`: the answer handed to the call that waits for it.
impl Handle<method::TaskPermit> for Methods {
    async fn handle(&self, p: PermitParams) -> Answer<PermitResult> {
        let answer = match p.allow {
            true => Ok(()),
            false => Err(p
                .reason
                .filter(|r| !r.trim().is_empty())
                .unwrap_or_else(|| agentd_engine::permissions::REJECTED.to_string())),
        };
        let permit = Permit { task_id: p.task_id, call_id: p.call_id.clone(), answer };
        self.supervisor.send(permit).await??;
        Ok(PermitResult { call_id: p.call_id, allowed: p.allow })
    }
}

/// `task.diff`: read from the task's log and its checkpoints, running or not.
impl Handle<method::TaskDiff> for Methods {
    async fn handle(&self, p: DiffParams) -> Answer<DiffResult> {
        let storage = self.shared.storage.clone();
        let diffed = tokio::task::spawn_blocking(move || {
            let storage: &dyn agentd_engine::storage::Storage = storage.as_ref();
            agentd_engine::checkpoints::diff(storage, &p)
        })
        .await
        .map_err(RpcError::internal)?;
        Ok(diffed?)
    }
}

/// `task.revert`: a stopped task's files put back, with the task held.
impl Handle<method::TaskRevert> for Methods {
    async fn handle(&self, params: RevertParams) -> Answer<RevertResult> {
        Ok(self.supervisor.send(Revert { params }).await??)
    }
}

/// `task.compact`: the lead's history unless a role is named.
impl Handle<method::TaskCompact> for Methods {
    async fn handle(&self, p: CompactParams) -> Answer<CompactResult> {
        self.task(&p.task_id)?;
        let msg = Compact { task_id: p.task_id, role: p.role.unwrap_or(Role::Lead), focus: p.focus };
        Ok(self.supervisor.send(msg).await??)
    }
}

/// Answered once the task is known; the connection then follows its events.
impl Handle<method::TaskSubscribe> for Methods {
    async fn handle(&self, p: SubscribeParams) -> Answer<Subscribed> {
        self.task(&p.task_id)?;
        Ok(Subscribed { subscribed: true })
    }
}

/// A page of the task's events after `after_seq`, with its state (an end held in memory wins) and whether its runner is still at work. Asked first: once it is not, every event is stored.
impl Handle<method::TaskEvents> for Methods {
    async fn handle(&self, p: EventsParams) -> Answer<EventsResult> {
        let running = self.supervisor.send(IsRunning { task_id: p.task_id.clone() }).await?;
        let meta = self.task(&p.task_id)?;
        let limit = p.limit.unwrap_or(100).clamp(1, 1_000) as usize;
        let events = self.shared.storage.events(&p.task_id, p.after_seq.unwrap_or(0), limit)?;
        let last_seq = self.shared.storage.last_event_seq(&p.task_id)?;
        let state = self.shared.ends.get(&p.task_id).map_or(meta.state, |end| end.state);
        Ok(EventsResult { events, state, last_seq, running })
    }
}

impl Methods {
    /// Every event of the task (every page of them): what it spent and its open branches are read
    /// from them.
    fn events(&self, task_id: &str) -> Answer<Vec<agentd_protocol::Event>> {
        const PAGE: usize = 10_000;
        let mut events = Vec::new();
        loop {
            let after = events.last().map_or(0, |e: &agentd_protocol::Event| e.seq);
            let page = self.shared.storage.events(task_id, after, PAGE)?;
            let full = page.len() == PAGE;
            events.extend(page);
            if !full {
                break;
            }
        }
        Ok(events)
    }
}
