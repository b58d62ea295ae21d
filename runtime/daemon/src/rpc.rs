//! The methods of the socket protocol (`docs/interface.md`, typed in `agentd_protocol::rpc`):
//! decoding a line into a [`Request`] with errors that name the parameter, dispatch to the
//! supervisor, the fitter and the store, and the one place domain errors become [`ErrorCode`]s.

use crate::scheduler::Jobs;
use crate::shared::Shared;
use crate::supervisor::{
    Cancel, Compact, Followup, IsRunning, Resume, RunningCount, Submit, Supervisor, SupervisorError,
};
use actix::prelude::*;
use agentd_engine::clock::now_rfc3339;
use agentd_engine::context::effective_compact_at;
use agentd_engine::error::TurnError;
use agentd_engine::fitter::{FitError, GaugeOf, WindowOf};
use agentd_engine::storage::{Settings, StorageError};
use agentd_engine::task::TaskError;
use agentd_policies::settings::{CompactAt, CompactAtOn};
use agentd_protocol::evidence::Unit;
use agentd_protocol::memory::{Author, Note, NoteEdit, NoteFilter};
use agentd_protocol::rpc::{
    ClockParams, ClockResult, CompactParams, CompactResult, ContextResult, DaemonStatus, DaySpending,
    EventsParams, EventsResult, HttpServing, LogEntry, LogParams, LogResult, Method, NoteChanged, NoteDetail,
    Notification, ProbeResult, RoleStatus, Setting, SettingParams, SettingResult, Spent, StateResult,
    StorageStatus, Submitted, Subscribed, TaskStatus, TaskSummary, Unmeasured, VerifyResult,
};
use agentd_protocol::{ErrorCode, Request, RpcError};
use agentd_protocol::{Role, TaskState};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// A request line's id and its request, or the id (null when unreadable) and the error to answer.
pub type Decoded = Result<(Value, Request), (Value, RpcError)>;

/// Reads one request line: JSON-RPC 2.0 framing, then the method's name, then its params into the
/// method's params type. Absent or `null` params read as `{}`.
pub fn decode_request(text: &[u8]) -> Decoded {
    let line: Value = match serde_json::from_slice(text) {
        Ok(v) => v,
        Err(e) => {
            return Err((Value::Null, RpcError::new(ErrorCode::ParseError, format!("parse error: {e}"))))
        }
    };
    let id = line.get("id").cloned().unwrap_or(Value::Null);
    let name = match (&line, line.get("jsonrpc"), line.get("method")) {
        (Value::Object(_), Some(Value::String(v)), Some(Value::String(m))) if v == "2.0" => m.clone(),
        _ => {
            let e = RpcError::new(
                ErrorCode::InvalidRequest,
                "invalid request: expected an object with \"jsonrpc\": \"2.0\" and a string \"method\"",
            );
            return Err((id, e));
        }
    };
    if Method::parse(&name).is_none() {
        return Err((id, RpcError::new(ErrorCode::MethodNotFound, format!("unknown method {name:?}"))));
    }
    let params = match line.get("params") {
        None | Some(Value::Null) => Value::Object(Default::default()),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(_) => return Err((id, RpcError::invalid_params("params must be an object"))),
    };
    match request_of(&name, params) {
        Ok(request) => Ok((id, request)),
        Err(e) => Err((id, e)),
    }
}

/// Reads a method's name and its params object into a [`Request`]: the one decoding of params,
/// behind the socket's lines and the HTTP API's routes alike, so both refuse bad params with the
/// same words. An unknown name is -32601; params that do not fit the method's params type are
/// -32602 naming the parameter (``param `task_id`: invalid type: integer `42`, expected a
/// string``). Params the method does not know are ignored.
pub fn request_of(name: &str, params: Value) -> Result<Request, RpcError> {
    if Method::parse(name).is_none() {
        return Err(RpcError::new(ErrorCode::MethodNotFound, format!("unknown method {name:?}")));
    }
    let wire = serde_json::json!({"method": name, "params": params});
    serde_path_to_error::deserialize::<_, Request>(wire).map_err(|e| {
        let path = e.path().to_string();
        let field = path.strip_prefix("params.").unwrap_or("");
        let message = if field.is_empty() {
            format!("invalid params for {name}: {}", e.inner())
        } else {
            format!("param `{field}`: {}", e.inner())
        };
        RpcError::invalid_params(message)
    })
}

/// A JSON-RPC result line.
pub fn result_response(id: Value, result: Value) -> String {
    serde_json::json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string()
}

/// A JSON-RPC error line.
pub fn error_response(id: Value, e: &RpcError) -> String {
    serde_json::json!({"jsonrpc": "2.0", "id": id, "error": e}).to_string()
}

/// A notification line.
pub fn notification(n: &Notification) -> String {
    let mut v = serde_json::to_value(n).unwrap_or(Value::Null);
    if let Value::Object(o) = &mut v {
        o.insert("jsonrpc".into(), Value::String("2.0".into()));
    }
    v.to_string()
}

/// The socket's answer to a supervisor's refusal or failure.
impl From<SupervisorError> for Refusal {
    fn from(e: SupervisorError) -> Refusal {
        use SupervisorError as E;
        // A storage failure is answered by its kind, wherever it surfaced.
        let storage = match &e {
            E::Storage(s)
            | E::Task(TaskError::Storage(s))
            | E::Compaction(TurnError::Storage(s) | TurnError::Fit(FitError::Storage(s))) => Some(s),
            _ => None,
        };
        if let Some(s) = storage {
            let code = storage_code(s);
            return Refusal(RpcError::new(code, e.to_string()));
        }
        let code = match &e {
            E::EmptyObjective | E::EmptyText | E::UnknownTeam(_) | E::InvalidBudget(_) => {
                ErrorCode::InvalidParams
            }
            E::UnknownRole(_) => ErrorCode::UnknownRole,
            // A compaction the user asked for that cannot be made — nothing to compact, a history that
            // cannot shrink below its destination, a summary the model would not give, a budget or
            // a usage limit in the way — is a refusal with its reason (its storage failing was
            // answered above, by its kind).
            E::Compaction(_) => ErrorCode::NotAllowed,
            E::FocusTooLong { .. } => ErrorCode::InvalidParams,
            E::UnknownTask(_) => ErrorCode::UnknownTask,
            // Not absolute: a malformed parameter. Not a directory there: -32004 (HTTP 404). A
            // directory agentd will not work in: -32007 (HTTP 403).
            E::RelativeWorkspace(_) => ErrorCode::InvalidParams,
            E::Workspace { .. } => ErrorCode::BadWorkspace,
            E::RefusedWorkspace { .. } => ErrorCode::RefusedWorkspace,
            E::ShuttingDown
            | E::AlreadyRunning(_)
            | E::NotResumable { .. }
            | E::StillActive { .. }
            | E::WasCancelled(_)
            | E::AlreadyEnded { .. }
            | E::EndNotRecorded { .. } => ErrorCode::NotAllowed,
            E::CancelTimedOut | E::Fleet(_) | E::Task(TaskError::NoLead) => ErrorCode::Internal,
            // Answered above, by the storage failure's kind.
            E::Storage(_) | E::Task(TaskError::Storage(_)) => ErrorCode::Internal,
            E::RunningElsewhere { .. } => ErrorCode::NotAllowed,
        };
        Refusal(RpcError::new(code, e.to_string()))
    }
}

/// The socket's answer to a storage failure, by its kind.
impl From<StorageError> for Refusal {
    fn from(e: StorageError) -> Refusal {
        Refusal(RpcError::new(storage_code(&e), e.to_string()))
    }
}

/// The code of a storage failure, by its kind: the one `match` from kinds to codes.
fn storage_code(e: &StorageError) -> ErrorCode {
    use agentd_policies::memory::ChangeError as C;
    match e {
        StorageError::UnknownTask(_) => ErrorCode::UnknownTask,
        StorageError::UnknownEvidence(_) => ErrorCode::UnknownEvidence,
        StorageError::UnknownNote(_) => ErrorCode::UnknownNote,
        StorageError::RefusedChange(C::EmptyText | C::Unchanged(_)) => ErrorCode::InvalidParams,
        StorageError::RefusedChange(C::Deleted(_) | C::NothingToUndo(_)) => ErrorCode::NotAllowed,
        // Another node holds the task now: not this daemon's to change from here.
        StorageError::Conflict(_) | StorageError::Fenced(_) => ErrorCode::NotAllowed,
        StorageError::Unavailable(_) | StorageError::Failed(_) => ErrorCode::Internal,
    }
}

impl From<MailboxError> for Refusal {
    fn from(e: MailboxError) -> Refusal {
        Refusal(RpcError::internal(e))
    }
}

impl From<RpcError> for Refusal {
    fn from(e: RpcError) -> Refusal {
        Refusal(e)
    }
}

/// An error on its way to the socket: every domain error converts into one with its code, so the
/// methods below can use `?` on anything.
#[derive(Debug)]
pub struct Refusal(pub RpcError);

type Answer<T> = Result<T, Refusal>;

/// Everything a method needs.
pub struct Methods {
    /// The state every task shares: store, bus, configuration, actors and provider clients.
    pub shared: Arc<Shared>,
    /// The supervisor, which owns the tasks.
    pub supervisor: Addr<Supervisor>,
    /// When the daemon started (`daemon.status`'s `uptime_s`).
    pub started: Instant,
    /// Where the HTTP server listens, for `daemon.status` (`None`: it is off).
    pub http: Option<std::net::SocketAddr>,
}

fn to_json<T: Serialize>(answer: Answer<T>) -> Result<Value, RpcError> {
    let value = answer.map_err(|r| r.0)?;
    serde_json::to_value(value).map_err(RpcError::internal)
}

impl Methods {
    /// Runs one request. `task.subscribe` is answered here and followed by the connection.
    pub async fn call(&self, request: Request) -> Result<Value, RpcError> {
        match request {
            Request::TaskSubmit(p) => to_json(
                self.supervisor
                    .send(Submit {
                        objective: p.objective,
                        workspace: p.workspace,
                        team: p.team,
                        budget: p.budget,
                    })
                    .await
                    .map_err(Refusal::from)
                    .and_then(|r| r.map_err(Refusal::from))
                    .map(|task_id| Submitted { task_id }),
            ),
            Request::TaskList(_) => to_json(self.list()),
            Request::TaskStatus(p) => to_json(self.status(&p.task_id).await),
            Request::TaskCancel(p) => to_json(self.ask(Cancel { task_id: p.task_id }).await),
            Request::TaskResume(p) => {
                to_json(self.ask(Resume { task_id: p.task_id, budget: p.budget }).await)
            }
            Request::TaskMessage(p) => to_json(self.ask(Followup { task_id: p.task_id, text: p.text }).await),
            Request::TaskCompact(p) => to_json(self.compact(p).await),
            Request::TaskSubscribe(p) => {
                to_json(self.task(&p.task_id).map(|_| Subscribed { subscribed: true }))
            }
            Request::TaskEvents(p) => to_json(self.events(p).await),
            Request::ContextGet(p) => to_json(self.context(&p.task_id, &p.role.unwrap_or(Role::Lead)).await),
            Request::LogGet(p) => to_json(self.log(p)),
            Request::EvidenceList(p) => {
                to_json(self.shared.storage.evidence_list(p.task_id.as_deref()).map_err(Refusal::from))
            }
            Request::EvidenceGet(p) => to_json(self.shared.storage.evidence(&p.id).map_err(Refusal::from)),
            Request::EvidenceRead(p) => {
                let offset = p.offset.unwrap_or(0);
                let limit = p.limit.unwrap_or(64 << 10).min(4 << 20);
                let unit = p.unit.unwrap_or(Unit::Bytes);
                to_json(self.shared.storage.read_evidence(&p.id, offset, limit, unit).map_err(Refusal::from))
            }
            Request::EvidenceVerify(_) => to_json(self.verify()),
            Request::MemoryList(filter) => to_json(self.notes(filter)),
            Request::MemoryGet(p) => to_json(self.note(&p.id)),
            Request::MemoryEdit(p) => to_json(self.change_note(&p.id, NoteEdit::Edit(p.text))),
            Request::MemoryDelete(p) => to_json(self.change_note(&p.id, NoteEdit::Delete)),
            Request::MemoryUndo(p) => to_json(self.undo(p.id)),
            Request::SettingsGet(p) => to_json(self.settings(false, p)),
            Request::SettingsSet(p) => to_json(self.settings(true, p)),
            Request::ModelsProbe(p) => to_json(self.probe(p.role).await),
            Request::DaemonStatus(_) => to_json(self.daemon_status().await),
            Request::ClockAdvance(ClockParams { ms }) => to_json(Self::advance(ms)),
        }
    }

    async fn ask<M>(&self, msg: M) -> Answer<StateResult>
    where
        M: actix::Message<Result = Result<agentd_protocol::TaskState, SupervisorError>> + Send + 'static,
        Supervisor: Handler<M>,
    {
        let state = self.supervisor.send(msg).await??;
        Ok(StateResult { state })
    }

    /// `task.compact`: the lead's history unless a role is named.
    async fn compact(&self, p: CompactParams) -> Answer<CompactResult> {
        self.task(&p.task_id)?;
        let msg = Compact { task_id: p.task_id, role: p.role.unwrap_or(Role::Lead), focus: p.focus };
        Ok(self.supervisor.send(msg).await??)
    }

    fn task(&self, task_id: &str) -> Answer<agentd_protocol::task::TaskMeta> {
        self.shared
            .storage
            .task(task_id)?
            .ok_or_else(|| Refusal(RpcError::new(ErrorCode::UnknownTask, format!("unknown task {task_id}"))))
    }

    fn list(&self) -> Answer<Vec<TaskSummary>> {
        let tasks = self.shared.storage.tasks()?;
        tasks
            .into_iter()
            .map(|t| {
                let end = self.shared.ends.get(&t.task_id);
                let engine = &self.shared.engine;
                let spent = engine.ledger().task(engine.storage().as_ref(), &t.task_id)?;
                Ok(TaskSummary {
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

    async fn status(&self, task_id: &str) -> Answer<TaskStatus> {
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
        for role in self.shared.config.team.roles() {
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
        let (spent, spent_by_role) = match (self.spent(task_id), &stall) {
            (Ok(spent), _) => spent,
            (Err(_), Some(_)) => Default::default(),
            (Err(e), None) => return Err(e),
        };
        let mut status = TaskStatus {
            waiting_because: stall.as_ref().map(crate::fleet::Stall::waiting_because),
            budget: self.shared.engine.team().budgets.for_task(meta.budget).any(),
            resume_at: meta.resume_at,
            spent,
            spent_by_role,
            mcp_down: self.shared.mcp.down(&meta.task_id),
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

    /// What the task spent, from its events (every page of them).
    fn spent(&self, task_id: &str) -> Answer<(Spent, BTreeMap<Role, Spent>)> {
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
        Ok(agentd_protocol::rpc::spent(&events))
    }

    fn known_role(&self, role: &Role) -> Answer<&agentd_engine::team::RoleConfig> {
        self.shared.config.team.role(role).ok_or_else(|| {
            Refusal(RpcError::new(ErrorCode::UnknownRole, format!("no role {:?} in the team", role.name())))
        })
    }

    async fn context(&self, task_id: &str, role: &Role) -> Answer<ContextResult> {
        self.task(task_id)?;
        self.known_role(role)?;
        let gauge = self
            .shared
            .engine
            .fitter()
            .gauge_of(GaugeOf { task_id: task_id.to_string(), role: role.clone() });
        Ok(match gauge {
            Some(g) => ContextResult::Measured(Box::new(g)),
            None => ContextResult::Unmeasured(Unmeasured {
                role: role.clone(),
                measured: false,
                note: "this role has not made a request since the daemon started".into(),
            }),
        })
    }

    /// A page of the task's events after `after_seq`, with its state (an end held in memory wins)
    /// and whether its runner is still at work. Asked first: once it is not, every event is stored.
    async fn events(&self, p: EventsParams) -> Answer<EventsResult> {
        let running = self.supervisor.send(IsRunning { task_id: p.task_id.clone() }).await?;
        let meta = self.task(&p.task_id)?;
        let limit = p.limit.unwrap_or(100).clamp(1, 1_000) as usize;
        let events = self.shared.storage.events(&p.task_id, p.after_seq.unwrap_or(0), limit)?;
        let last_seq = self.shared.storage.last_event_seq(&p.task_id)?;
        let state = self.shared.ends.get(&p.task_id).map_or(meta.state, |end| end.state);
        Ok(EventsResult { events, state, last_seq, running })
    }

    fn log(&self, p: LogParams) -> Answer<LogResult> {
        let limit = p.limit.unwrap_or(10_000).min(100_000) as usize;
        self.task(&p.task_id)?;
        // Scan page by page so a role filter still returns up to `limit` records.
        let mut records = Vec::new();
        let mut cursor = p.after_seq.unwrap_or(0);
        while records.len() < limit {
            let page = self.shared.storage.records(&p.task_id, cursor, 1000)?;
            let Some((last, _)) = page.last() else { break };
            cursor = *last;
            for (seq, record) in page {
                if records.len() < limit && p.role.as_ref().is_none_or(|want| record.role() == want) {
                    records.push(LogEntry { seq, record });
                }
            }
        }
        Ok(LogResult { records })
    }

    /// `memory.list`: a workspace filter names the workspace as a task's notes do, by its canonical
    /// path.
    fn notes(&self, mut filter: NoteFilter) -> Answer<Vec<Note>> {
        if let Some(dir) = &filter.workspace {
            if !Path::new(dir).is_absolute() {
                return Err(RpcError::invalid_params(format!(
                    "param `workspace` must be an absolute path, got {dir:?}"
                ))
                .into());
            }
            if let Ok(canonical) = std::fs::canonicalize(dir) {
                filter.workspace = Some(canonical.display().to_string());
            }
        }
        Ok(self.shared.storage.notes(&filter)?)
    }

    fn note(&self, id: &str) -> Answer<NoteDetail> {
        let note = self.shared.storage.note(id)?;
        let changes = self.shared.storage.note_changes(Some(id))?;
        Ok(NoteDetail { note, changes })
    }

    fn change_note(&self, id: &str, edit: NoteEdit) -> Answer<NoteChanged> {
        let (note, change) = self.shared.storage.change_note(id, &edit, Author::User, &now_rfc3339())?;
        tracing::info!(note = id, action = ?change.action, "memory changed by the user");
        Ok(NoteChanged { note, change })
    }

    /// `memory.undo`: the latest change of the note named, or of any note.
    fn undo(&self, id: Option<String>) -> Answer<NoteChanged> {
        let id = match id {
            Some(id) => id,
            None => match self.shared.storage.note_changes(None)?.pop() {
                Some(latest) => latest.note_id,
                None => {
                    return Err(
                        RpcError::new(ErrorCode::NotAllowed, "there is no memory change to undo").into()
                    )
                }
            },
        };
        self.change_note(&id, NoteEdit::Undo)
    }

    fn verify(&self) -> Answer<VerifyResult> {
        let problems = self.shared.storage.verify_evidence()?;
        let checked = self.shared.storage.evidence_list(None)?.len() as u64;
        Ok(VerifyResult { checked, problems })
    }

    fn settings(&self, set: bool, p: SettingParams) -> Answer<SettingResult> {
        let rc = self.known_role(&p.role)?;
        let server = &self.shared.config.provider_of(rc).base_url;
        let role = &p.role;
        match p.key {
            Setting::CompactAt => {
                if set {
                    let value = match &p.value {
                        Some(v) => v.as_u64().filter(|v| (1..=100).contains(v)).ok_or_else(|| {
                            RpcError::invalid_params(
                                "param `value` must be an integer percentage from 1 to 100",
                            )
                        })?,
                        None => return Err(RpcError::invalid_params("missing param `value`").into()),
                    };
                    let model = rc.model.as_str();
                    self.shared.storage.put(&CompactAt { role }, &value)?;
                    self.shared.storage.put(&CompactAtOn { role, server, model }, &value)?;
                }
                let value = effective_compact_at(&self.shared.engine, role, server, &rc.model)?;
                Ok(SettingResult {
                    role: role.clone(),
                    key: p.key,
                    value,
                    server: server.clone(),
                    model: rc.model.clone(),
                })
            }
        }
    }

    async fn probe(&self, role: Role) -> Answer<ProbeResult> {
        let rc = self.known_role(&role)?;
        let client = self
            .shared
            .engine
            .model(&rc.provider)
            .ok_or_else(|| RpcError::internal(format!("no client for provider {}", rc.provider)))?;
        let window = self
            .shared
            .engine
            .fitter()
            .window_of(WindowOf { client: client.clone(), model: rc.model.clone(), fresh: true })
            .await
            .map_err(RpcError::internal)?;
        Ok(ProbeResult {
            role,
            server: client.server().to_string(),
            model: rc.model.clone(),
            window: window.tokens,
            window_source: window.source,
        })
    }

    async fn daemon_status(&self) -> Answer<DaemonStatus> {
        let running = self.supervisor.send(RunningCount).await?;
        let jobs = self.shared.scheduler.send(Jobs).await?;
        // A status is a health check too: heal the store and record what it refused.
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || {
            crate::storage::check_storage(shared.storage.as_ref(), &shared.ends)
        })
        .await
        .map_err(RpcError::internal)?;
        let health = self.shared.storage.health();
        Ok(DaemonStatus {
            version: env!("CARGO_PKG_VERSION").to_string(),
            uptime_s: self.started.elapsed().as_secs(),
            tasks_running: running as u64,
            jobs,
            clock: agentd_engine::clock::now_rfc3339(),
            tz: self.shared.config.tz.describe(agentd_engine::clock::clock().now()),
            storage: StorageStatus {
                ok: health.ok,
                error: health.error,
                since: health.since.map(agentd_engine::clock::rfc3339),
                unrecorded_ends: self.shared.ends.len() as u64,
            },
            http: self.http.map(|addr| HttpServing { listen: addr.to_string() }),
            cluster: match &self.shared.fleet {
                Some(fleet) => Some(crate::fleet::status(fleet).await),
                None => None,
            },
            mcp: self.shared.mcp.servers(&self.shared.config),
            today: self.today()?,
        })
    }

    /// What every task spent today, and the day's budget.
    fn today(&self) -> Answer<DaySpending> {
        let engine = &self.shared.engine;
        let (day, spent) = engine.ledger().today(engine.storage().as_ref())?;
        let budget = engine.team().budgets.day;
        Ok(DaySpending {
            day: day.key,
            spent,
            budget: budget.any(),
            next_day_at: agentd_engine::clock::rfc3339_seconds(day.next),
        })
    }

    fn advance(ms: u64) -> Answer<ClockResult> {
        let clock = agentd_engine::clock::clock();
        if !clock.advance(std::time::Duration::from_millis(ms)) {
            return Err(RpcError::new(
                ErrorCode::NotAllowed,
                "the clock can only be advanced when the daemon runs with AGENTD_CLOCK=manual",
            )
            .into());
        }
        Ok(ClockResult { now: agentd_engine::clock::now_rfc3339() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentd_protocol::TaskState;

    fn code(e: SupervisorError) -> ErrorCode {
        Refusal::from(e).0.code
    }

    #[test]
    fn only_the_socket_layer_turns_domain_errors_into_codes() {
        assert_eq!(code(SupervisorError::EmptyObjective), ErrorCode::InvalidParams);
        assert_eq!(code(SupervisorError::UnknownTask("t".into())), ErrorCode::UnknownTask);
        assert_eq!(code(SupervisorError::RelativeWorkspace("w".into())), ErrorCode::InvalidParams);
        let refused = SupervisorError::RefusedWorkspace { path: "/".into(), why: "the root".into() };
        assert_eq!(code(refused), ErrorCode::RefusedWorkspace);
        let cannot = FitError::Compaction("compacted request is 2429 tokens; destination 829".into());
        assert_eq!(code(SupervisorError::Compaction(TurnError::Fit(cannot))), ErrorCode::NotAllowed);
        assert_eq!(
            code(SupervisorError::FocusTooLong { chars: 9_000, max: 2_000 }),
            ErrorCode::InvalidParams
        );
        let ended = SupervisorError::AlreadyEnded { task_id: "t".into(), state: TaskState::Finished };
        assert_eq!(code(ended), ErrorCode::NotAllowed);
        assert_eq!(code(SupervisorError::CancelTimedOut), ErrorCode::Internal);
        let unknown = Refusal::from(StorageError::UnknownEvidence("ev-1".into())).0;
        assert_eq!(
            (unknown.code, unknown.message.as_str()),
            (ErrorCode::UnknownEvidence, "unknown evidence ev-1")
        );
        // Every kind of storage failure has its code, whichever backend said it.
        use agentd_policies::memory::ChangeError;
        let kinds = [
            (StorageError::UnknownTask("t".into()), ErrorCode::UnknownTask),
            (StorageError::UnknownNote("m1".into()), ErrorCode::UnknownNote),
            (StorageError::RefusedChange(ChangeError::EmptyText), ErrorCode::InvalidParams),
            (StorageError::RefusedChange(ChangeError::Deleted("m1".into())), ErrorCode::NotAllowed),
            (StorageError::conflict(std::fmt::Error), ErrorCode::NotAllowed),
            (StorageError::fenced(std::fmt::Error), ErrorCode::NotAllowed),
            (StorageError::unavailable(std::fmt::Error), ErrorCode::Internal),
            (StorageError::failed(std::fmt::Error), ErrorCode::Internal),
        ];
        for (e, code) in kinds {
            assert_eq!(Refusal::from(e).0.code, code);
        }
    }

    #[test]
    fn a_bad_param_is_named_with_what_was_expected() {
        let line = br#"{"jsonrpc":"2.0","id":3,"method":"task.status","params":{"task_id":42}}"#;
        let (id, e) = decode_request(line).unwrap_err();
        assert_eq!((id, e.code), (serde_json::json!(3), ErrorCode::InvalidParams));
        assert!(
            e.message.starts_with("param `task_id`: invalid type: integer `42`, expected a string"),
            "{e}"
        );
        let line = br#"{"jsonrpc":"2.0","id":4,"method":"task.status"}"#;
        let (_, e) = decode_request(line).unwrap_err();
        assert!(e.message.contains("missing field `task_id`"), "{e}");
        let line = br#"{"jsonrpc":"2.0","id":5,"method":"task.explode","params":{}}"#;
        let (_, e) = decode_request(line).unwrap_err();
        assert_eq!(e.code, ErrorCode::MethodNotFound);
        let (_, request) =
            decode_request(br#"{"jsonrpc":"2.0","id":6,"method":"task.list","params":null}"#).unwrap();
        assert_eq!(request.method(), agentd_protocol::Method::TaskList);
    }
}
