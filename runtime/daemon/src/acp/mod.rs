//! `agentd acp`: agentd as an agent of the Agent Client Protocol (ACP, JSON-RPC on stdin and
//! stdout), so that an editor — Zed, a JetBrains IDE, any ACP client — starts, follows and stops a
//! team. Like `agentd mcp` it is a thin client of the running daemon's socket and keeps nothing of
//! its own that a restart would lose: an editor's session *is* a task (its id is the task's id).
//!
//! | ACP | agentd |
//! |---|---|
//! | `initialize` | protocol v1; `loadSession` yes; no authentication methods (none is needed: the socket is the user's own) |
//! | `authenticate` | answered with nothing to do |
//! | `session/new {cwd}` | the workspace checked as `task.submit` checks one (absolute, a directory, not a system one or agentd's home); the session id is a new UUID the task will have |
//! | `session/prompt` | the first submits the task (`task.submit` with that id), each later one is a follow-up (`task.message`); the task's log is streamed as `session/update`s ([`updates`]) until the turn ends |
//! | `session/cancel` | `task.cancel`; the prompt answers `cancelled` |
//! | `session/load {sessionId}` | the task's whole log replayed as updates, the user's messages included |
//!
//! The editor's lines are read by [`lines`], not by the crate: each bounded, and one that is not
//! UTF-8 or not JSON answered with a parse error while the connection goes on.
//!
//! With `[acp] ask = ["run_command", "edit_file", …]`, a call of one of those tools waits for the
//! editor's user (`session/request_permission`: allow once or reject); a rejection is what the model
//! reads as the call's error result (`task.submit`'s `ask`, answered with `task.permit`).
//!
//! A prompt's stop reason: `end_turn` when the task finished, failed (the message says so), was
//! interrupted or waits for a usage limit; `cancelled`; `max_tokens` when a budget paused it;
//! `refusal` when the daemon refused the prompt (a workspace refused, a task that cannot take a
//! follow-up, a prompt longer than one request to the daemon may be), its reason as the agent's
//! message. The turn's token usage is the answer's `usage`
//! and `_meta.agentd` (`task_id`, `state`, `usage`, `cost_usd`, `answers`).

pub mod lines;
pub mod updates;

use agent_client_protocol::v1::schema::{
    AgentCapabilities, AuthenticateRequest, AuthenticateResponse, CancelNotification, ContentBlock,
    Implementation, InitializeRequest, InitializeResponse, LoadSessionRequest, LoadSessionResponse, Meta,
    NewSessionRequest, NewSessionResponse, PermissionOption, PermissionOptionKind, PromptRequest,
    PromptResponse, RequestPermissionOutcome, RequestPermissionRequest, SessionId, SessionNotification,
    SessionUpdate, StopReason, ToolCallUpdate, ToolCallUpdateFields, Usage,
};
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::{Agent, Client as AcpClient, Error as AcpError, ErrorCode as AcpCode, Lines};
use agentd_client::{Client, ClientError};
use agentd_protocol::event::EventKind;
use agentd_protocol::record::Record;
use agentd_protocol::rpc::{
    method, ErrorCode, LogParams, MessageParams, PermitParams, RpcMethod, SubmitParams, TaskRef,
};
use agentd_protocol::{TaskState, ToolName};
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use updates::Replay;

/// How often a running prompt reads the task's log for what is new.
const POLL_EVERY: Duration = Duration::from_millis(100);

/// The editor's options for a call that asks: run it this once, or not.
const ALLOW: &str = "allow";
const REJECT: &str = "reject";

/// How many records one read of the log takes.
const PAGE: u64 = 500;

/// Why `agentd acp` stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The async runtime could not be made.
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The connection to the editor failed.
    #[error("the ACP connection failed: {0}")]
    Connection(String),
}

/// The ACP agent: sessions that are tasks of the daemon at `socket`.
#[derive(Debug, Clone)]
pub struct AgentdAcp {
    socket: Arc<PathBuf>,
    /// The daemon's home: never a workspace.
    home: Arc<PathBuf>,
    /// The tools whose calls the editor's user approves first (`[acp] ask`).
    ask: Arc<Vec<ToolName>>,
    sessions: Arc<Mutex<HashMap<String, Session>>>,
}

/// What this process knows of one editor session.
#[derive(Debug, Clone)]
struct Session {
    workspace: PathBuf,
    /// Whether its task exists (a first prompt submitted it, or it was loaded).
    submitted: bool,
    /// The last log record shown: a follow-up is read from after it.
    shown: u64,
}

impl AgentdAcp {
    /// The agent for the daemon at `socket`, whose home is `home`; calls of `ask` wait for the
    /// editor's user.
    pub fn new(socket: PathBuf, home: PathBuf, ask: Vec<ToolName>) -> AgentdAcp {
        AgentdAcp {
            socket: Arc::new(socket),
            home: Arc::new(home),
            ask: Arc::new(ask),
            sessions: Arc::default(),
        }
    }

    /// One request to the daemon, on a blocking thread (the socket client is blocking).
    async fn ask<M: RpcMethod>(&self, params: M::Params) -> Result<M::Result, ClientError> {
        let socket = self.socket.clone();
        match tokio::task::spawn_blocking(move || Client::connect(&socket)?.call::<M>(params)).await {
            Ok(answer) => answer,
            Err(e) => Err(ClientError::Protocol(format!("the request stopped: {e}"))),
        }
    }

    /// `cwd` as a workspace: absolute, an existing directory, and one a task may write in.
    fn workspace(&self, cwd: &Path) -> Result<PathBuf, String> {
        if !cwd.is_absolute() {
            return Err(format!("workspace must be an absolute path: {}", cwd.display()));
        }
        let root = std::fs::canonicalize(cwd).map_err(|e| format!("workspace {}: {e}", cwd.display()))?;
        if !root.is_dir() {
            return Err(format!("workspace {}: not a directory", cwd.display()));
        }
        let home = std::fs::canonicalize(self.home.as_path()).unwrap_or_else(|_| self.home.to_path_buf());
        match agentd_policies::workspace::refusal(&root, &home) {
            Some(why) => Err(format!("workspace {} is refused: {why}", cwd.display())),
            None => Ok(root),
        }
    }

    fn new_session(&self, request: NewSessionRequest) -> Result<NewSessionResponse, AcpError> {
        let workspace = self.workspace(&request.cwd).map_err(invalid_params)?;
        let id = uuid::Uuid::now_v7().to_string();
        self.sessions.lock().insert(id.clone(), Session { workspace, submitted: false, shown: 0 });
        Ok(NewSessionResponse::new(SessionId::new(id)))
    }

    /// `session/load`: the task's log replayed as updates; answered once they are all sent.
    async fn load(&self, request: LoadSessionRequest, cx: &ConnectionTo<AcpClient>) -> Result<(), AcpError> {
        let task_id = request.session_id.0.to_string();
        let status = match self.ask::<method::TaskStatus>(TaskRef { task_id: task_id.clone() }).await {
            Ok(status) => status,
            Err(ClientError::Rpc { code, message }) if code == ErrorCode::UnknownTask.code() => {
                return Err(AcpError::new(
                    AcpCode::RESOURCE_NOT_FOUND,
                    format!("no session {task_id}: {message}"),
                ))
            }
            Err(e) => return Err(daemon_error(e)),
        };
        let workspace = PathBuf::from(&status.workspace);
        let mut replay = Replay::new(&workspace, true);
        let shown = self.replay(&task_id, &mut replay, 0, Some((cx, &request.session_id))).await?;
        self.sessions.lock().insert(task_id, Session { workspace, submitted: true, shown });
        Ok(())
    }

    /// Reads every record after `after` through `replay`, to the log's end, showing the updates to
    /// `to` (none: read past, unshown); the last record read.
    async fn replay(
        &self,
        task_id: &str,
        replay: &mut Replay,
        mut after: u64,
        to: Option<(&ConnectionTo<AcpClient>, &SessionId)>,
    ) -> Result<u64, AcpError> {
        loop {
            let page = self.page(task_id, after).await.map_err(daemon_error)?;
            let Some(last) = page.last().map(|e| e.seq) else { return Ok(after) };
            for entry in &page {
                let updates = replay.record(&entry.record);
                if let Some((cx, session)) = to {
                    for update in updates {
                        notify(cx, session, update)?;
                    }
                }
                if replay.turn().stop.is_some() {
                    replay.next_turn();
                }
            }
            after = last;
        }
    }

    async fn page(
        &self,
        task_id: &str,
        after: u64,
    ) -> Result<Vec<agentd_protocol::rpc::LogEntry>, ClientError> {
        let params =
            LogParams { task_id: task_id.to_string(), role: None, after_seq: Some(after), limit: Some(PAGE) };
        Ok(self.ask::<method::LogGet>(params).await?.records)
    }

    /// `session/prompt`: the task submitted or given the follow-up, then followed to the turn's end.
    async fn prompt(
        &self,
        request: PromptRequest,
        cx: &ConnectionTo<AcpClient>,
    ) -> Result<PromptResponse, AcpError> {
        let session_id = request.session_id.clone();
        let task_id = session_id.0.to_string();
        let Some(session) = self.sessions.lock().get(&task_id).cloned() else {
            return Err(AcpError::new(
                AcpCode::RESOURCE_NOT_FOUND,
                format!("no session {task_id} here: start one with session/new or session/load"),
            ));
        };
        let text = prompt_text(&request.prompt);
        if text.trim().is_empty() {
            return Err(invalid_params("the prompt has no text".to_string()));
        }
        let mut replay = Replay::new(&session.workspace, false);
        let mut after = session.shown;
        let asked = if session.submitted {
            // What happened since this process last looked (another client's follow-up, a resume)
            // is not this turn's: read past it, unshown.
            after = self.replay(&task_id, &mut Replay::new(&session.workspace, false), after, None).await?;
            self.ask::<method::TaskMessage>(MessageParams { task_id: task_id.clone(), text })
                .await
                .map(|_| ())
        } else {
            let params = SubmitParams {
                objective: text,
                workspace: session.workspace.display().to_string(),
                team: None,
                budget: None,
                task_id: Some(task_id.clone()),
                ask: self.ask.to_vec(),
            };
            self.ask::<method::TaskSubmit>(params).await.map(|_| ())
        };
        let refused = match asked {
            Ok(()) => None,
            Err(ClientError::Rpc { message, .. }) => Some(message),
            // Over what the daemon takes in one request: refused here, before it is sent.
            Err(e @ ClientError::RequestTooLong { .. }) => Some(format!("the prompt is too long: {e}")),
            Err(e) => return Err(daemon_error(e)),
        };
        if let Some(why) = refused {
            notify(cx, &session_id, updates::message(format!("[agentd] refused: {why}")))?;
            return Ok(PromptResponse::new(StopReason::Refusal));
        }
        if let Some(s) = self.sessions.lock().get_mut(&task_id) {
            s.submitted = true;
        }
        let stop = self.follow(&task_id, &mut replay, &mut after, cx, &session_id).await?;
        if let Some(s) = self.sessions.lock().get_mut(&task_id) {
            s.shown = after;
        }
        let state =
            self.ask::<method::TaskStatus>(TaskRef { task_id: task_id.clone() }).await.ok().map(|s| s.state);
        Ok(answer(stop, &task_id, state, &replay.next_turn()))
    }

    /// Shows the task's new records until one ends the turn, or the task stops without one.
    async fn follow(
        &self,
        task_id: &str,
        replay: &mut Replay,
        after: &mut u64,
        cx: &ConnectionTo<AcpClient>,
        session: &SessionId,
    ) -> Result<StopReason, AcpError> {
        let clock = agentd_engine::clock::clock();
        let mut idle = 0u32;
        loop {
            let page = self.page(task_id, *after).await.map_err(daemon_error)?;
            for entry in &page {
                *after = entry.seq;
                for update in replay.record(&entry.record) {
                    notify(cx, session, update)?;
                }
                if let Record::Event { event } = &entry.record {
                    if let EventKind::PermissionAsked { call_id, tool } = &event.kind {
                        let shown = replay.shown_call(&event.role, call_id);
                        self.ask_user(cx, session, task_id, call_id, tool, shown)?;
                    }
                }
                if let Some(stop) = replay.turn().stop {
                    return Ok(stop);
                }
            }
            if page.is_empty() {
                idle += 1;
                // Every second of quiet, the task's state: one that stopped without a record that
                // ends a turn (it cannot, but a log read from elsewhere might) ends it here.
                if idle.is_multiple_of(10) {
                    let status =
                        self.ask::<method::TaskStatus>(TaskRef { task_id: task_id.to_string() }).await;
                    if let Ok(status) = status {
                        if !status.state.is_active() {
                            return Ok(StopReason::EndTurn);
                        }
                    }
                }
                clock.sleep(POLL_EVERY).await;
            } else {
                idle = 0;
            }
        }
    }

    /// Asks the editor's user whether the call may run, and hands the daemon the answer — beside
    /// the prompt's reading of the log, which goes on meanwhile (other calls run in parallel).
    fn ask_user(
        &self,
        cx: &ConnectionTo<AcpClient>,
        session: &SessionId,
        task_id: &str,
        call_id: &str,
        tool: &ToolName,
        shown: Option<String>,
    ) -> Result<(), AcpError> {
        let fields = ToolCallUpdateFields::new().title(format!("{} (asks for approval)", tool.as_str()));
        let question = RequestPermissionRequest::new(
            session.clone(),
            ToolCallUpdate::new(shown.unwrap_or_else(|| call_id.to_string()), fields),
            vec![
                PermissionOption::new(ALLOW, "Allow", PermissionOptionKind::AllowOnce),
                PermissionOption::new(REJECT, "Reject", PermissionOptionKind::RejectOnce),
            ],
        );
        let (agent, cx2, task_id, call_id) =
            (self.clone(), cx.clone(), task_id.to_string(), call_id.to_string());
        cx.spawn(async move {
            let answer = cx2.send_request(question).block_task().await;
            let (allow, reason) = match answer.map(|a| a.outcome) {
                Ok(RequestPermissionOutcome::Selected(chosen)) if &*chosen.option_id.0 == ALLOW => (true, None),
                Ok(RequestPermissionOutcome::Selected(_)) => (false, None),
                Ok(RequestPermissionOutcome::Cancelled) => (false, Some("the prompt was cancelled".to_string())),
                Ok(_) => (false, Some("the editor gave an answer agentd does not know".to_string())),
                Err(e) => (false, Some(format!("the editor did not answer: {e}"))),
            };
            let permit = PermitParams { task_id: task_id.clone(), call_id: call_id.clone(), allow, reason };
            if let Err(e) = agent.ask::<method::TaskPermit>(permit).await {
                // A cancel or the wait's end got there first: the call is answered already.
                tracing::warn!(task = %task_id, call = %call_id, error = %e, "the editor's answer was not taken");
            }
            Ok(())
        })
    }

    async fn cancel(&self, notification: CancelNotification) {
        let task_id = notification.session_id.0.to_string();
        if let Err(e) = self.ask::<method::TaskCancel>(TaskRef { task_id: task_id.clone() }).await {
            tracing::warn!(task = %task_id, error = %e, "session/cancel: the task was not cancelled");
        }
    }
}

/// The prompt's words: its text, the resources it links (by URI) and the text of those it embeds.
fn prompt_text(blocks: &[ContentBlock]) -> String {
    let mut parts = Vec::new();
    for block in blocks {
        match block {
            ContentBlock::Text(t) => parts.push(t.text.clone()),
            ContentBlock::ResourceLink(link) => parts.push(format!("@{}", link.uri)),
            ContentBlock::Resource(embedded) => {
                let value = serde_json::to_value(embedded).unwrap_or(Value::Null);
                let uri = value.pointer("/resource/uri").and_then(Value::as_str).unwrap_or("");
                if let Some(text) = value.pointer("/resource/text").and_then(Value::as_str) {
                    parts.push(format!("{uri}:\n{text}"));
                }
            }
            _ => {}
        }
    }
    parts.join("\n")
}

/// The prompt's answer: its stop reason and the turn's usage.
fn answer(stop: StopReason, task_id: &str, state: Option<TaskState>, turn: &updates::Turn) -> PromptResponse {
    let u = &turn.usage;
    let usage =
        Usage::new(u.prompt_tokens.saturating_add(u.completion_tokens), u.prompt_tokens, u.completion_tokens)
            .cached_read_tokens(u.cache_read_tokens)
            .cached_write_tokens(u.cache_write_tokens);
    let mut meta = Meta::new();
    meta.insert(
        "agentd".into(),
        json!({
            "task_id": task_id,
            "state": state,
            "usage": u,
            "cost_usd": turn.cost_usd,
            "answers": turn.answers,
        }),
    );
    PromptResponse::new(stop).usage(usage).meta(meta)
}

fn notify(cx: &ConnectionTo<AcpClient>, session: &SessionId, update: SessionUpdate) -> Result<(), AcpError> {
    cx.send_notification(SessionNotification::new(session.clone(), update))
}

fn invalid_params(message: String) -> AcpError {
    AcpError::new(AcpCode::INVALID_PARAMS, message)
}

fn daemon_error(e: ClientError) -> AcpError {
    let hint = match &e {
        ClientError::Connect { .. } => "; is `agentd serve` running?",
        _ => "",
    };
    AcpError::new(AcpCode::INTERNAL_ERROR, format!("{e}{hint}"))
}

/// Serves ACP on stdin and stdout until the editor closes it, on a runtime of its own: what
/// `agentd acp` runs.
pub fn run_stdio(agent: AgentdAcp) -> Result<(), ServeError> {
    crate::mcp::server::stdio_runtime().map_err(ServeError::Runtime)?.block_on(serve(agent))
}

/// Serves ACP on stdin and stdout until the editor closes it.
pub async fn serve(agent: AgentdAcp) -> Result<(), ServeError> {
    let (for_new, for_load, for_prompt, for_cancel) = (agent.clone(), agent.clone(), agent.clone(), agent);
    Agent
        .v1()
        .name("agentd")
        .on_receive_request(
            async move |request: InitializeRequest, responder, _cx| {
                let _ = request;
                responder.respond(
                    InitializeResponse::new(agent_client_protocol::schema::ProtocolVersion::V1)
                        .agent_capabilities(AgentCapabilities::new().load_session(true))
                        .agent_info(Implementation::new("agentd", env!("CARGO_PKG_VERSION"))),
                )
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |_request: AuthenticateRequest, responder, _cx| {
                // The daemon's socket is the user's own: there is nothing to authenticate.
                responder.respond(AuthenticateResponse::new())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: NewSessionRequest, responder, _cx| {
                responder.respond_with_result(for_new.new_session(request))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: LoadSessionRequest, responder, cx: ConnectionTo<AcpClient>| {
                let agent = for_load.clone();
                cx.clone().spawn(async move {
                    let loaded = agent.load(request, &cx).await.map(|()| LoadSessionResponse::new());
                    responder.respond_with_result(loaded)
                })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: PromptRequest, responder, cx: ConnectionTo<AcpClient>| {
                let agent = for_prompt.clone();
                // The prompt runs outside the dispatch loop, so that a cancel is read while it runs.
                cx.clone()
                    .spawn(async move { responder.respond_with_result(agent.prompt(request, &cx).await) })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |notification: CancelNotification, _cx| {
                for_cancel.cancel(notification).await;
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        // stdin read line by line, each bounded, before the crate sees it ([`lines`]).
        .connect_to(Lines::new(lines::outgoing(), lines::incoming(std::io::stdin())))
        .await
        .map_err(|e| ServeError::Connection(e.to_string()))
}
