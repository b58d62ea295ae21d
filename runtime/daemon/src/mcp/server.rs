//! `agentd mcp`: agentd as an MCP server on stdin and stdout, so that another agent (Claude Code,
//! Codex, any MCP client) can hand work to an agentd team and follow it.
//!
//! Every tool is one request to the running daemon over its socket, with the typed client
//! ([`Client::request`]); `agentd mcp` keeps no state of its own and needs no daemon to start (a
//! daemon that is not running makes each call an error result naming the socket). Results are the
//! socket's result types as JSON, both as text and as structured content; a refusal of the daemon
//! (an unknown task, a state that does not allow it, a bad workspace) is an error result carrying
//! its message and code.
//!
//! | tool | arguments | answers (socket method) |
//! |---|---|---|
//! | `submit_task` | `objective`, `workspace`? (absolute; default: the directory `agentd mcp` runs in), `team`?, `budget`? (`{tokens?, cost?}`) | `{task_id}` (`task.submit`) |
//! | `task_status` | `task_id` | state, objective, roles' context, result or error (`task.status`) |
//! | `task_events` | `task_id`, `after_seq`? (0), `limit`? (100), `wait_s`? (0, at most 120) | `{events, state, last_seq, running}` (`task.events`); with `wait_s`, an empty page of a running task waits that long for the next event |
//! | `task_message` | `task_id`, `text` | `{state}` (`task.message`): a follow-up for a stopped task |
//! | `cancel_task` | `task_id` | `{state}` (`task.cancel`) |
//! | `read_evidence` | `id`, `offset`? (0), `limit`? (64 KiB or 400 lines), `lines`? (false) | a page (`evidence.read`) |

use agentd_client::{Client, ClientError};
use agentd_protocol::rpc::{
    method, EventsParams, EventsResult, EvidenceReadParams, MessageParams, RpcMethod, SubmitParams, TaskRef,
};
use agentd_protocol::{Budget, Unit};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ServerHandler, ServiceExt};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The longest `wait_s` a `task_events` call may ask for.
pub const MAX_WAIT_S: u64 = 120;

/// How often a waiting `task_events` asks the daemon again.
const POLL_EVERY: Duration = Duration::from_millis(100);

/// What the tools tell the calling agent about agentd, in the `initialize` answer.
const INSTRUCTIONS: &str = "agentd runs a team of LLM agents (a lead that plans and delegates, a coder \
that edits files and runs commands, configured specialists) on a task in a workspace directory. \
submit_task starts one and answers its task_id. Follow it with task_events (pass after_seq = the last \
seq you have, and wait_s to wait for news instead of polling) until running is false and a page comes \
back empty; task_status shows the result. task_message sends \
a follow-up to a task that has stopped; cancel_task stops a running one; read_evidence reads the large \
outputs and compacted history a task stored whole (ids appear in events as evidence_id).";

/// Why `agentd mcp` stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The MCP client did not complete the handshake.
    #[error("the MCP client did not initialize: {0}")]
    Initialize(#[source] Box<rmcp::service::ServerInitializeError>),
    /// The async runtime could not be made.
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The session's task ended abnormally.
    #[error("the MCP session failed: {0}")]
    Session(#[source] tokio::task::JoinError),
}

/// The MCP server: tools that are requests to the daemon at `socket`.
#[derive(Debug, Clone)]
pub struct AgentdMcp {
    socket: Arc<PathBuf>,
    /// Where `submit_task` runs a task that names no workspace.
    default_workspace: Arc<PathBuf>,
}

impl AgentdMcp {
    /// The server for the daemon at `socket`; `default_workspace` is `submit_task`'s default.
    pub fn new(socket: PathBuf, default_workspace: PathBuf) -> AgentdMcp {
        AgentdMcp { socket: Arc::new(socket), default_workspace: Arc::new(default_workspace) }
    }
}

/// Serves MCP on stdin and stdout until the client closes the session, on a runtime of its own:
/// what `agentd mcp` runs.
pub fn run_stdio(server: AgentdMcp) -> Result<(), ServeError> {
    stdio_runtime().map_err(ServeError::Runtime)?.block_on(serve_stdio(server))
}

/// The runtime a protocol served on stdin and stdout runs on (`agentd mcp`, `agentd acp`): two
/// workers, for the protocol's loop and the socket requests beside it.
pub fn stdio_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()
}

/// Serves MCP on stdin and stdout until the client closes the session.
pub async fn serve_stdio(server: AgentdMcp) -> Result<(), ServeError> {
    let running = server
        .serve((tokio::io::stdin(), tokio::io::stdout()))
        .await
        .map_err(|e| ServeError::Initialize(Box::new(e)))?;
    running.waiting().await.map_err(ServeError::Session)?;
    Ok(())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SubmitArgs {
    objective: String,
    workspace: Option<String>,
    team: Option<String>,
    budget: Option<Budget>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskArgs {
    task_id: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EventsArgs {
    task_id: String,
    after_seq: Option<u64>,
    limit: Option<u64>,
    wait_s: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MessageArgs {
    task_id: String,
    text: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EvidenceArgs {
    id: String,
    offset: Option<u64>,
    limit: Option<u64>,
    lines: Option<bool>,
}

fn schema(properties: Value, required: &[&str]) -> Arc<Map<String, Value>> {
    match json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false})
    {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(Map::new()),
    }
}

/// The tools, as `tools/list` answers them.
pub fn tools() -> Vec<Tool> {
    let task_id = json!({"type": "string", "description": "The task's id, as submit_task answered it."});
    vec![
        Tool::new(
            "submit_task",
            "Hand a task to the agentd team: the lead plans it, delegates to the coder and specialists, and \
             finishes with a summary. Answers {task_id}; follow it with task_events.",
            schema(
                json!({
                    "objective": {"type": "string", "description": "What the team is to do, as you would tell a colleague: the goal, the files, how to check it."},
                    "workspace": {"type": "string", "description": "The absolute path of the directory the team works in; default: the directory this server runs in."},
                    "team": {"type": "string", "description": "A team name, kept with the task."},
                    "budget": {
                        "type": "object",
                        "description": "The task's ceiling: its next request is not sent when it would cross it, and the task is paused (task_status says what it spent against it).",
                        "properties": {
                            "tokens": {"type": "integer", "minimum": 1, "description": "At most this many tokens, prompt and completion."},
                            "cost": {"type": "number", "exclusiveMinimum": 0, "description": "At most this many US dollars, at the daemon's [prices]."}
                        },
                        "additionalProperties": false
                    }
                }),
                &["objective"],
            ),
        ),
        Tool::new(
            "task_status",
            "A task's state (queued, running, waiting_retry, waiting, paused, finished, failed, cancelled, \
             interrupted), its objective and workspace, each role's context use, what it spent against its \
             budget, when a waiting or paused task goes on (resume_at), and its result or error.",
            schema(json!({"task_id": task_id}), &["task_id"]),
        ),
        Tool::new(
            "task_events",
            "A task's events after a seq (oldest first): model requests, tool calls, delegations, \
             compactions, its end. Answers {events, state, last_seq, running}; call again with \
             after_seq = the last seq you got until running is false and a page comes back empty.",
            schema(
                json!({
                    "task_id": task_id,
                    "after_seq": {"type": "integer", "minimum": 0, "description": "Only events after this seq; 0 (default) for all."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "At most this many events (default 100)."},
                    "wait_s": {"type": "integer", "minimum": 0, "maximum": MAX_WAIT_S, "description": "When no event is newer than after_seq, wait up to this many seconds for one (default 0)."}
                }),
                &["task_id"],
            ),
        ),
        Tool::new(
            "task_message",
            "A follow-up request to a task that has stopped (finished, failed or interrupted): the lead \
             takes it as a new message and the task runs again. Answers {state}.",
            schema(
                json!({"task_id": task_id, "text": {"type": "string", "description": "The follow-up."}}),
                &["task_id", "text"],
            ),
        ),
        Tool::new(
            "cancel_task",
            "Stop a task; what it was running is ended. Answers {state}.",
            schema(json!({"task_id": task_id}), &["task_id"]),
        ),
        Tool::new(
            "read_evidence",
            "Read a page of evidence a task stored whole (a large tool output, a compacted part of a \
             conversation), by the id its events name (evidence_id, archive_id). Answers {data, offset, \
             len, total_bytes, complete, next_offset}; read on from next_offset.",
            schema(
                json!({
                    "id": {"type": "string", "description": "The evidence id."},
                    "offset": {"type": "integer", "minimum": 0, "description": "Where to start: a byte, or a line with lines = true (0-based; default 0)."},
                    "limit": {"type": "integer", "minimum": 1, "description": "How much: bytes (default 65536) or lines (default 400)."},
                    "lines": {"type": "boolean", "description": "Count offset and limit in lines instead of bytes."}
                }),
                &["id"],
            ),
        ),
    ]
}

/// What a tool call answered, before it becomes a result: a JSON value, or an error text.
type Answer = Result<Value, String>;

fn json_of<T: Serialize>(value: &T) -> Answer {
    serde_json::to_value(value).map_err(|e| format!("cannot render the answer: {e}"))
}

fn refusal(method: &str, e: ClientError) -> String {
    match e {
        ClientError::Rpc { code, message } => format!("{method} refused ({code}): {message}"),
        other => format!("{method}: {other}"),
    }
}

impl AgentdMcp {
    /// One request to the daemon, on a blocking thread (the socket client is blocking).
    async fn ask<M: RpcMethod>(&self, params: M::Params) -> Result<M::Result, String> {
        let socket = self.socket.clone();
        let method = M::METHOD.name();
        let asked = tokio::task::spawn_blocking(move || Client::connect(&socket)?.call::<M>(params)).await;
        match asked {
            Ok(answer) => answer.map_err(|e| refusal(method, e)),
            Err(e) => Err(format!("{method}: the request stopped: {e}")),
        }
    }

    async fn submit(&self, args: SubmitArgs) -> Answer {
        let workspace = args.workspace.unwrap_or_else(|| self.default_workspace.display().to_string());
        let params = SubmitParams {
            objective: args.objective,
            workspace,
            team: args.team,
            budget: args.budget,
            task_id: None,
            ask: Vec::new(),
        };
        json_of(&self.ask::<method::TaskSubmit>(params).await?)
    }

    async fn events(&self, args: EventsArgs) -> Answer {
        let params = EventsParams { task_id: args.task_id, after_seq: args.after_seq, limit: args.limit };
        let page: EventsResult = self.ask::<method::TaskEvents>(params.clone()).await?;
        let wait = Duration::from_secs(args.wait_s.unwrap_or(0).min(MAX_WAIT_S));
        if !page.events.is_empty() || wait.is_zero() || !page.running {
            return json_of(&page);
        }
        // Nothing new yet: ask again every so often until something is, the runner stops (its end
        // is stored by then), or the wait is over. A local socket request is cheap; a subscription
        // would not wake when a runner that already stored its last event lets go.
        let clock = agentd_engine::clock::clock();
        let deadline = clock.now() + wait;
        loop {
            clock.sleep(POLL_EVERY).await;
            let page: EventsResult = self.ask::<method::TaskEvents>(params.clone()).await?;
            if !page.events.is_empty() || !page.running || clock.now() >= deadline {
                return json_of(&page);
            }
        }
    }

    async fn read_evidence(&self, args: EvidenceArgs) -> Answer {
        let lines = args.lines.unwrap_or(false);
        let params = EvidenceReadParams {
            id: args.id,
            offset: args.offset,
            limit: Some(args.limit.unwrap_or(if lines { 400 } else { 64 << 10 })),
            unit: Some(if lines { Unit::Lines } else { Unit::Bytes }),
        };
        json_of(&self.ask::<method::EvidenceRead>(params).await?)
    }

    async fn answer(&self, name: &str, arguments: Value) -> Answer {
        match name {
            "submit_task" => self.submit(args(name, arguments)?).await,
            "task_status" => {
                let a: TaskArgs = args(name, arguments)?;
                json_of(&self.ask::<method::TaskStatus>(TaskRef { task_id: a.task_id }).await?)
            }
            "task_events" => self.events(args(name, arguments)?).await,
            "task_message" => {
                let a: MessageArgs = args(name, arguments)?;
                let params = MessageParams { task_id: a.task_id, text: a.text };
                json_of(&self.ask::<method::TaskMessage>(params).await?)
            }
            "cancel_task" => {
                let a: TaskArgs = args(name, arguments)?;
                json_of(&self.ask::<method::TaskCancel>(TaskRef { task_id: a.task_id }).await?)
            }
            "read_evidence" => self.read_evidence(args(name, arguments)?).await,
            other => Err(format!("no tool {other:?}; the tools are {}", tool_names().join(", "))),
        }
    }
}

fn tool_names() -> Vec<String> {
    tools().into_iter().map(|t| t.name.into_owned()).collect()
}

fn args<T: DeserializeOwned>(tool: &str, arguments: Value) -> Result<T, String> {
    serde_json::from_value(arguments).map_err(|e| format!("invalid arguments for {tool}: {e}"))
}

impl ServerHandler for AgentdMcp {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
        info.server_info = Implementation::new("agentd", env!("CARGO_PKG_VERSION"));
        info.instructions = Some(INSTRUCTIONS.to_string());
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let result = match self.answer(&request.name, arguments).await {
            Ok(value) => CallToolResult::structured(value),
            Err(message) => CallToolResult::error(vec![ContentBlock::text(message)]),
        };
        Ok(result.into())
    }
}
