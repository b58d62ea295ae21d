//! The configured MCP servers of one task: started on first use, listed once per start, called with
//! a timeout, restarted after a crash with a backoff, closed when the task ends.
//!
//! Each server is a small state machine behind its own lock:
//!
//! - **never started**: the first [`TaskServers::tools_for`] of a role that gets its tools starts it
//!   (a stdio program in the task's workspace and sandbox, reaching what [`super::reach`] finds its
//!   program needs, or a session with an HTTP endpoint), within [`MCP_STARTUP_TIMEOUT`], and lists
//!   its tools;
//! - **running**: calls go to it; its tool list is kept, so every turn offers the same schemas;
//! - **down**: it crashed during a call, was found dead before one, or failed to start. The next use
//!   starts it again once `restart_delay_ms(failures)` has passed since the failure; a call made
//!   sooner waits for that moment when it falls within the call's timeout, and is otherwise
//!   answered [`McpError::Down`] at once. A turn that starts while a server is down offers the
//!   tools it listed before (their calls then say it is down), or none if it never listed any —
//!   then the server is named in [`RoleTools::unavailable`] with why.
//!
//! Every start and failure is news for the task's history ([`ServerNews`], taken by the engine) and
//! goes to the daemon's [`McpHealth`]. A call that the server answers — an error result included —
//! resets the count of failures. The waits read the daemon's clock, so a test can move through a
//! backoff with `clock.advance`.

use super::content;
use super::error::McpError;
use super::health::McpHealth;
use super::reach::{reach, Host};
use crate::config::{Config, McpServerConfig, McpTransport, MCP_STARTUP_TIMEOUT};
use agentd_agents::tools::service::Service;
use agentd_agents::tools::{SandboxMode, SandboxPolicy};
use agentd_engine::clock::clock;
use agentd_engine::tool_servers::{
    RoleTools, ServerNews, ToolFailure, ToolReply, ToolServers, ToolSpec, Unavailable,
};
use agentd_policies::retry::restart_delay_ms;
use agentd_protocol::ToolSchema;
use agentd_protocol::{McpTool, Role, ToolName};
use futures_util::future::BoxFuture;
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, InitializeRequestParams,
};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{Peer, ServiceExt};
use serde_json::Value;
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::io::AsyncBufReadExt;
use tokio_util::sync::CancellationToken;

/// How many of a stdio server's last stderr lines a failure quotes.
const STDERR_TAIL_LINES: usize = 6;

/// The MCP servers of one task.
pub struct TaskServers {
    servers: BTreeMap<String, Arc<Server>>,
    workspace: PathBuf,
    sandbox: SandboxPolicy,
    host: Host,
    task_id: String,
    health: Arc<McpHealth>,
    news: std::sync::Mutex<Vec<ServerNews>>,
}

impl TaskServers {
    /// The servers `config` names, for task `task_id` in `workspace`; nothing is started yet. Starts
    /// and failures go to `health`.
    pub fn new(config: &Config, task_id: &str, workspace: &Path, health: Arc<McpHealth>) -> TaskServers {
        let servers = config
            .mcp
            .iter()
            .map(|(name, c)| {
                (name.clone(), Arc::new(Server { config: c.clone(), state: Default::default() }))
            })
            .collect();
        TaskServers {
            servers,
            workspace: workspace.to_path_buf(),
            sandbox: config.team.sandbox.clone(),
            host: Host::current(),
            task_id: task_id.to_string(),
            health,
            news: Default::default(),
        }
    }

    /// The MCP tools `role` gets this turn, by server name then in each server's order. Starts the
    /// servers that were never started; a server that cannot start is left out, and named with why.
    pub async fn tools_for(&self, role: &Role, cancel: &CancellationToken) -> RoleTools {
        let mut offer = RoleTools::default();
        for server in self.servers.values().filter(|s| s.config.serves(role)) {
            let listed = tokio::select! {
                listed = server.tools(self) => listed,
                _ = cancel.cancelled() => return offer,
            };
            match listed {
                Ok(tools) => offer.tools.extend(tools),
                Err(e) => {
                    tracing::warn!(server = %server.config.name, role = %role, error = %e,
                        "an MCP server's tools are left out of this turn");
                    offer
                        .unavailable
                        .push(Unavailable { server: server.config.name.clone(), reason: e.to_string() });
                }
            }
        }
        offer
    }

    /// Calls `tool` with the model's `arguments` (a JSON object's text; empty for none), within the
    /// server's timeout. `Err` is the error result the model gets (but [`McpError::Cancelled`]).
    pub async fn call(
        &self,
        tool: &McpTool,
        arguments: &str,
        cancel: &CancellationToken,
    ) -> Result<ToolReply, McpError> {
        let server = self
            .servers
            .get(tool.server())
            .ok_or_else(|| McpError::Unknown { server: tool.server().into() })?;
        let arguments = parse_arguments(tool, arguments)?;
        let timeout = server.config.call_timeout;
        let clock = clock();
        let deadline = clock.now() + timeout;
        tokio::select! {
            outcome = server.call(self, tool, arguments, deadline) => outcome,
            _ = clock.sleep(timeout) => Err(McpError::Timeout { tool: tool.to_string(), after: timeout }),
            _ = cancel.cancelled() => Err(McpError::Cancelled),
        }
    }

    /// Starts `server` now, unless it runs, and answers its tools or why it did not start: what
    /// `agentd doctor` shows.
    pub async fn probe(&self, server: &str) -> Result<Vec<ToolSpec>, McpError> {
        let s = self.servers.get(server).ok_or_else(|| McpError::Unknown { server: server.into() })?;
        let mut state = s.state.lock().await;
        s.ensure(&mut state, self, None).await?;
        Ok(state.tools.clone().unwrap_or_default())
    }

    /// Closes every connection: a stdio server's stdin is closed and the program, with everything
    /// it started, killed.
    pub async fn shutdown(&self) {
        for server in self.servers.values() {
            let live = server.state.lock().await.live.take();
            if let Some(mut live) = live {
                let _ = live.service.close_with_timeout(Duration::from_secs(1)).await;
            }
        }
        self.health.closed(&self.task_id);
    }

    /// The starts and failures not yet taken.
    pub fn news(&self) -> Vec<ServerNews> {
        std::mem::take(&mut *self.news.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }

    /// `server` started with `tools` tools.
    fn started(&self, server: &str, tools: usize) {
        let tools = u32::try_from(tools).unwrap_or(u32::MAX);
        self.health.started(&self.task_id, server, tools);
        self.tell(ServerNews::Started { server: server.to_string(), tools });
    }

    /// `server` failed (to start, when `start`); it may start again in `retry_in`.
    fn failed(&self, server: &str, error: String, retry_in: Duration, start: bool) {
        self.health.failed(&self.task_id, server, &error, Some(retry_in), start);
        self.tell(ServerNews::Failed { server: server.to_string(), error, retry_in: Some(retry_in) });
    }

    fn tell(&self, news: ServerNews) {
        self.news.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(news);
    }
}

/// The engine's view of a task's MCP servers: a failure is the error result the model reads.
impl ToolServers for TaskServers {
    fn tools_for<'a>(&'a self, role: &'a Role, cancel: &'a CancellationToken) -> BoxFuture<'a, RoleTools> {
        Box::pin(TaskServers::tools_for(self, role, cancel))
    }

    fn call<'a>(
        &'a self,
        tool: &'a McpTool,
        arguments: &'a str,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ToolReply, ToolFailure>> {
        Box::pin(async move {
            match TaskServers::call(self, tool, arguments, cancel).await {
                Ok(reply) => Ok(reply),
                Err(McpError::Cancelled) => Err(ToolFailure::Cancelled),
                Err(e) => Err(ToolFailure::Failed(e.for_model(tool))),
            }
        })
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(TaskServers::shutdown(self))
    }

    fn news(&self) -> Vec<ServerNews> {
        TaskServers::news(self)
    }

    fn writes(&self, tool: &agentd_protocol::McpTool) -> bool {
        self.servers.get(tool.server()).is_some_and(|s| s.config.writes)
    }
}

/// One configured server and what is known of it in this task.
struct Server {
    config: McpServerConfig,
    state: tokio::sync::Mutex<State>,
}

#[derive(Default)]
struct State {
    live: Option<Live>,
    /// The tools of its last listing, kept while it is down.
    tools: Option<Vec<ToolSpec>>,
    /// Crashes and failed starts in a row.
    failures: u32,
    /// When the last one happened.
    failed_at: Option<SystemTime>,
    /// What the last one was.
    last_error: String,
    /// Counts starts: a call reports a crash only of the connection it used.
    started: u64,
}

/// A running connection.
struct Live {
    service: RunningService<RoleClient, ClientConfig>,
    /// A stdio server's program; killed with its group when dropped.
    process: Option<Service>,
    generation: u64,
}

impl Live {
    /// How the connection ended, for a message.
    fn how_it_ended(&mut self) -> String {
        match self.process.as_mut().and_then(Service::try_exited) {
            Some(status) => match status.code() {
                Some(code) => format!("exited with code {code}"),
                None => format!("ended: {status}"),
            },
            None => "its connection closed".to_string(),
        }
    }
}

impl State {
    fn failed(&mut self, error: String) {
        self.failures = self.failures.saturating_add(1);
        self.failed_at = Some(clock().now());
        self.last_error = error;
    }

    /// How long after its last failure the server may be started again.
    fn retry_in(&self) -> Duration {
        Duration::from_millis(restart_delay_ms(self.failures))
    }

    /// When the server may be started again.
    fn restart_at(&self) -> Option<SystemTime> {
        self.failed_at.map(|at| at + Duration::from_millis(restart_delay_ms(self.failures)))
    }
}

impl Server {
    fn name(&self) -> &str {
        &self.config.name
    }

    /// The server's tools: listed at its start, kept while it is down.
    async fn tools(&self, servers: &TaskServers) -> Result<Vec<ToolSpec>, McpError> {
        let mut state = self.state.lock().await;
        match self.ensure(&mut state, servers, None).await {
            Ok(_) => Ok(state.tools.clone().unwrap_or_default()),
            Err(e) => state.tools.clone().ok_or(e),
        }
    }

    async fn call(
        &self,
        servers: &TaskServers,
        tool: &McpTool,
        arguments: serde_json::Map<String, Value>,
        deadline: SystemTime,
    ) -> Result<ToolReply, McpError> {
        let (peer, generation) = {
            let mut state = self.state.lock().await;
            self.ensure(&mut state, servers, Some(deadline)).await?
        };
        let mut params = CallToolRequestParams::new(tool.tool().to_string());
        params.arguments = Some(arguments);
        match peer.call_tool(params).await {
            Ok(result) => {
                self.state.lock().await.failures = 0;
                content::outcome(tool, result)
            }
            // The connection is gone (a stdio server exited, an HTTP server stopped answering):
            // the server is down until it is started again.
            Err(source)
                if peer.is_transport_closed()
                    || matches!(
                        source,
                        rmcp::ServiceError::TransportClosed | rmcp::ServiceError::TransportSend(_)
                    ) =>
            {
                let mut state = self.state.lock().await;
                let how = match state.live.take_if(|l| l.generation == generation) {
                    Some(mut live) => {
                        // Give an exiting program a moment to be reaped, so its exit code is known.
                        for _ in 0..20 {
                            if live.process.as_mut().is_none_or(|p| p.try_exited().is_some()) {
                                break;
                            }
                            clock().sleep(Duration::from_millis(10)).await;
                        }
                        let how = live.how_it_ended();
                        let error = format!("stopped during a call of {tool} ({how})");
                        state.failed(error.clone());
                        tracing::warn!(server = self.name(), %tool, %how, "an MCP server stopped during a call");
                        servers.failed(self.name(), error, state.retry_in(), false);
                        how
                    }
                    None => "its connection closed".to_string(),
                };
                let retry_in = state.retry_in();
                Err(McpError::Stopped { server: self.name().into(), how, retry_in })
            }
            Err(source) => Err(McpError::Request {
                server: self.name().into(),
                what: "tools/call",
                source: Box::new(source),
            }),
        }
    }

    /// A running connection: the live one, or a new one once the restart delay allows. With a
    /// `deadline`, waits for the restart delay if it ends before the deadline; without one, never
    /// waits.
    async fn ensure(
        &self,
        state: &mut State,
        servers: &TaskServers,
        deadline: Option<SystemTime>,
    ) -> Result<(Peer<RoleClient>, u64), McpError> {
        if let Some(live) = state.live.as_mut() {
            if !live.service.peer().is_transport_closed() {
                return Ok((live.service.peer().clone(), live.generation));
            }
            let how = live.how_it_ended();
            tracing::warn!(server = self.name(), %how, "an MCP server stopped between calls");
            state.live = None;
            let error = format!("stopped between calls ({how})");
            state.failed(error.clone());
            servers.failed(self.name(), error, state.retry_in(), false);
        }
        if let Some(at) = state.restart_at() {
            let now = clock().now();
            if let Ok(wait) = at.duration_since(now) {
                if deadline.is_none_or(|d| at > d) {
                    return Err(McpError::Down {
                        server: self.name().into(),
                        failures: state.failures,
                        retry_in: wait,
                        last: state.last_error.clone(),
                    });
                }
                clock().sleep(wait).await;
            }
        }
        state.started += 1;
        let generation = state.started;
        let clock = clock();
        let started = tokio::select! {
            started = connect(&self.config, servers, generation) => started,
            _ = clock.sleep(MCP_STARTUP_TIMEOUT) => {
                Err(McpError::StartTimeout { server: self.name().into(), after: MCP_STARTUP_TIMEOUT })
            }
        };
        match started {
            Ok((live, tools)) => {
                tracing::info!(server = self.name(), tools = tools.len(), generation, "MCP server started");
                servers.started(self.name(), tools.len());
                let peer = live.service.peer().clone();
                state.live = Some(live);
                state.tools = Some(tools);
                Ok((peer, generation))
            }
            Err(e) => {
                tracing::warn!(server = self.name(), error = %e, "an MCP server failed to start");
                state.failed(e.to_string());
                servers.failed(self.name(), e.to_string(), state.retry_in(), true);
                Err(e)
            }
        }
    }
}

/// Starts the server (its program, or a session with its endpoint), completes the handshake and
/// lists its tools.
async fn connect(
    config: &McpServerConfig,
    servers: &TaskServers,
    generation: u64,
) -> Result<(Live, Vec<ToolSpec>), McpError> {
    let server = config.name.clone();
    let info = InitializeRequestParams::new(
        ClientCapabilities::default(),
        Implementation::new("agentd", env!("CARGO_PKG_VERSION")),
    );
    let (service, process) = match &config.transport {
        McpTransport::Stdio { command, args, .. } => {
            let policy = stdio_policy(config, &servers.sandbox, &servers.workspace, &servers.host)?;
            let program = policy.1.to_string_lossy().into_owned();
            let mut process =
                Service::spawn(&policy.0, &servers.workspace, &program, args).map_err(|source| {
                    let hint = spawn_hint(&source, &config.name, command);
                    McpError::Spawn { server: server.clone(), source: Box::new(source), hint }
                })?;
            let tail = Arc::new(std::sync::Mutex::new(VecDeque::new()));
            let reader =
                process.stderr().map(|stderr| tokio::spawn(log_stderr(server.clone(), stderr, tail.clone())));
            let Some((stdout, stdin)) = process.stdio() else {
                unreachable!("a freshly spawned service has its pipes")
            };
            match info.serve((stdout, stdin)).await {
                Ok(service) => (service, Some(process)),
                Err(source) => {
                    // What the program said before it went: read to its end once it is killed.
                    drop(process);
                    if let Some(reader) = reader {
                        let _ = reader.await;
                    }
                    let said = last_words(&tail);
                    return Err(McpError::Initialize { server, source: Box::new(source), said });
                }
            }
        }
        McpTransport::Http { url, bearer_env } => {
            // An https:// server needs the process's TLS provider before rmcp's client exists.
            agentd_providers::install_tls_provider();
            let mut transport = StreamableHttpClientTransportConfig::with_uri(url.as_str());
            if let Some(var) = bearer_env {
                let token = std::env::var(var)
                    .map_err(|_| McpError::NoToken { server: server.clone(), var: var.clone() })?;
                transport = transport.auth_header(token);
            }
            let service = info.serve(StreamableHttpClientTransport::from_config(transport)).await.map_err(
                |source| McpError::Initialize {
                    server: server.clone(),
                    source: Box::new(source),
                    said: String::new(),
                },
            )?;
            (service, None)
        }
    };
    let listed = service.peer().list_all_tools().await.map_err(|source| McpError::Request {
        server: server.clone(),
        what: "tools/list",
        source: Box::new(source),
    })?;
    let mut tools: Vec<ToolSpec> = Vec::new();
    for tool in listed {
        if !config.offers(&tool.name) {
            continue;
        }
        let Some(name) = McpTool::new(&config.name, &tool.name) else {
            tracing::warn!(server = %config.name, tool = %tool.name,
                "an MCP tool is not offered: its name cannot be written as mcp__SERVER__TOOL");
            continue;
        };
        if tools.iter().any(|t| t.name.as_str() == name.as_str()) {
            continue;
        }
        let mut parameters = Value::Object((*tool.input_schema).clone());
        if let Value::Object(schema) = &mut parameters {
            // Providers take only object schemas; MCP requires them, not every server sends it.
            schema.entry("type").or_insert_with(|| Value::String("object".into()));
        }
        let description = tool.description.map(|d| d.into_owned()).or(tool.title).unwrap_or_default();
        let schema = ToolSchema { name: name.as_str().to_string(), description, parameters };
        tools.push(ToolSpec { name: ToolName::Mcp(name), schema });
    }
    if let Some(only) = &config.tools {
        for missing in
            only.iter().filter(|t| !tools.iter().any(|s| s.name.mcp().is_some_and(|m| m.tool() == *t)))
        {
            tracing::warn!(server = %config.name, tool = %missing, "a tool named in `tools` is not listed by the server");
        }
    }
    Ok((Live { service, process, generation }, tools))
}

/// The sandbox a stdio server starts under, and its program as found: the task's sandbox, plus
/// what the program needs ([`super::reach`]), the entry's `read`, `env`, `network` and `sandbox`.
pub fn stdio_policy(
    config: &McpServerConfig,
    sandbox: &SandboxPolicy,
    workspace: &Path,
    host: &Host,
) -> Result<(SandboxPolicy, PathBuf), McpError> {
    let McpTransport::Stdio { command, args, env, network, read, sandbox: confined } = &config.transport
    else {
        unreachable!("only a stdio server has a program")
    };
    let found = reach(command, args, workspace, host)
        .map_err(|source| McpError::NotFound { server: config.name.clone(), source })?;
    let mut policy = sandbox.clone();
    policy.env.extend(env.iter().cloned());
    policy.read.extend(found.read);
    policy.read.extend(read.iter().cloned());
    policy.write.extend(found.write);
    policy.set_env.extend(found.env);
    policy.network = network.unwrap_or(policy.network || found.fetches);
    if !confined {
        policy.mode = SandboxMode::Off;
    }
    Ok((policy, found.program))
}

/// What to change when a program could not be started: the sandbox refused it, most often.
fn spawn_hint(e: &agentd_agents::tools::service::ServiceError, server: &str, command: &str) -> String {
    use agentd_agents::tools::service::ServiceError;
    match e {
        ServiceError::Spawn { source, .. } if source.kind() == std::io::ErrorKind::PermissionDenied => {
            format!(
                " (the sandbox does not reach {command} or what it runs from: list the directory in \
             `mcp.servers.{server}.read`, or set `mcp.servers.{server}.sandbox = false`; `agentd doctor` \
             starts it the same way)"
            )
        }
        _ => String::new(),
    }
}

/// A stdio server's stderr, a line at a time, in the daemon's log; its last lines kept in `tail`.
async fn log_stderr(
    server: String,
    stderr: tokio::process::ChildStderr,
    tail: Arc<std::sync::Mutex<VecDeque<String>>>,
) {
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let line: String = line.chars().take(500).collect();
        tracing::debug!(server = %server, "mcp stderr: {line}");
        let mut tail = tail.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if tail.len() == STDERR_TAIL_LINES {
            tail.pop_front();
        }
        tail.push_back(line);
    }
}

/// The kept stderr lines, as a clause of an error (empty when the program wrote none).
fn last_words(tail: &std::sync::Mutex<VecDeque<String>>) -> String {
    let tail = tail.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let lines: Vec<&str> = tail.iter().map(|l| l.trim()).filter(|l| !l.is_empty()).collect();
    if lines.is_empty() {
        String::new()
    } else {
        format!("; its stderr ends: {}", lines.join(" | "))
    }
}

/// The model's arguments as the JSON object `tools/call` takes, read as every built-in tool reads
/// its own (`agentd_policies::args::arguments_object`): empty text is no arguments, a doubly encoded
/// object is unwrapped.
fn parse_arguments(tool: &McpTool, arguments: &str) -> Result<serde_json::Map<String, Value>, McpError> {
    agentd_policies::args::arguments_object(tool.as_str(), arguments)
        .map_err(|e| McpError::Arguments { tool: e.tool, reason: e.message })
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentd_test_support::mcp::{fixture_bin, McpHttpServer};
    use std::path::Path;

    const TEAM: &str = "[providers.p]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\n\
        [team.lead]\nprovider = \"p\"\nmodel = \"m\"\n[team.coder]\nprovider = \"p\"\nmodel = \"m\"\n";

    fn landlock() -> bool {
        agentd_agents::tools::sandbox::kernel_abi() >= 1
    }

    /// A config with the team and `mcp`; the fixture's directory is readable in the sandbox (or the
    /// sandbox is off where the kernel has no Landlock).
    fn config(mcp: &str) -> Config {
        let dir = fixture_bin().parent().unwrap().display().to_string();
        let sandbox = if landlock() {
            format!("[tools.sandbox]\nread = [\"{dir}\"]\n")
        } else {
            "[tools.sandbox]\nmode = \"off\"\n".to_string()
        };
        Config::parse(&format!("{TEAM}{sandbox}{mcp}"), Path::new("/nonexistent-home/agentd.toml")).unwrap()
    }

    fn task_servers(config: &Config, workspace: &Path) -> TaskServers {
        TaskServers::new(config, "t1", workspace, Arc::default())
    }

    fn tool(name: &str) -> McpTool {
        McpTool::parse(name).unwrap()
    }

    async fn call(servers: &TaskServers, name: &str, args: &str) -> Result<ToolReply, McpError> {
        servers.call(&tool(name), args, &CancellationToken::new()).await
    }

    #[tokio::test]
    async fn an_http_servers_tools_reach_only_its_roles_and_answer_through_the_sdk() {
        let fixture = McpHttpServer::start().await;
        let c = config(&format!(
            "[mcp.servers.web]\nurl = \"{}\"\nroles = [\"lead\"]\ntools = [\"echo\", \"fail\", \"image\", \"bad_image\", \"resource\"]\n",
            fixture.url()
        ));
        let ws = tempfile::tempdir().unwrap();
        let servers = task_servers(&c, ws.path());
        let cancel = CancellationToken::new();
        assert_eq!(
            servers.tools_for(&Role::Coder, &cancel).await,
            RoleTools::default(),
            "the coder gets none"
        );
        let tools = servers.tools_for(&Role::Lead, &cancel).await.tools;
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "mcp__web__echo",
                "mcp__web__fail",
                "mcp__web__image",
                "mcp__web__bad_image",
                "mcp__web__resource"
            ]
        );
        let echo = &tools[0].schema;
        assert_eq!(echo.name, "mcp__web__echo");
        assert_eq!(echo.description, "Answers the text it is given.");
        assert_eq!(echo.parameters["properties"]["text"]["type"], "string");

        let out = call(&servers, "mcp__web__echo", r#"{"text": "hi"}"#).await.unwrap();
        assert_eq!((out.ok, out.text.as_str(), out.images.len()), (true, "hi", 0));
        let out = call(&servers, "mcp__web__fail", r#"{"message": "no such branch"}"#).await.unwrap();
        assert_eq!((out.ok, out.text.as_str()), (false, "no such branch"));
        let out = call(&servers, "mcp__web__image", "").await.unwrap();
        assert_eq!(out.text, "a 1x1 png:");
        assert_eq!(out.images[0].media_type, "image/png");
        assert_eq!(&out.images[0].bytes[1..4], b"PNG");
        let out = call(&servers, "mcp__web__resource", "{}").await.unwrap();
        assert!(out.text.contains("the notes say hello") && out.text.contains("data.csv"), "{}", out.text);

        let invalid = call(&servers, "mcp__web__bad_image", "{}").await.unwrap_err();
        assert!(matches!(invalid, McpError::Invalid { .. }), "{invalid}");
        let bad_args = call(&servers, "mcp__web__echo", "[1, 2]").await.unwrap_err();
        assert_eq!(
            bad_args.to_string(),
            "invalid arguments for mcp__web__echo: expected a JSON object, got an array"
        );
        let unknown = call(&servers, "mcp__nope__echo", "{}").await.unwrap_err();
        assert!(matches!(unknown, McpError::Unknown { .. }), "{unknown}");
        // The server's own refusal (a tool it does not have) is an error result, not a crash.
        let refused = call(&servers, "mcp__web__teleport", "{}").await.unwrap_err();
        assert!(matches!(refused, McpError::Request { what: "tools/call", .. }), "{refused}");
        assert!(call(&servers, "mcp__web__echo", r#"{"text": "still here"}"#).await.is_ok());
        servers.shutdown().await;
    }

    #[tokio::test]
    async fn a_slow_call_times_out_and_the_server_stays_usable() {
        let fixture = McpHttpServer::start().await;
        let c = config(&format!("[mcp.servers.web]\nurl = \"{}\"\ntimeout = \"300ms\"\n", fixture.url()));
        let ws = tempfile::tempdir().unwrap();
        let servers = task_servers(&c, ws.path());
        let slow = call(&servers, "mcp__web__slow", r#"{"ms": 30000}"#).await.unwrap_err();
        assert_eq!(slow.to_string(), "mcp__web__slow took longer than its timeout (0.3s) and was cancelled");
        let quick = call(&servers, "mcp__web__slow", r#"{"ms": 1}"#).await.unwrap();
        assert_eq!(quick.text, "slept 1 ms");
    }

    #[tokio::test]
    async fn an_http_server_that_goes_away_is_down_then_started_again_at_its_next_use() {
        let fixture = McpHttpServer::start().await;
        let c = config(&format!("[mcp.servers.web]\nurl = \"{}\"\ntimeout = \"5s\"\n", fixture.url()));
        let ws = tempfile::tempdir().unwrap();
        let servers = task_servers(&c, ws.path());
        assert!(call(&servers, "mcp__web__echo", r#"{"text": "up"}"#).await.is_ok());
        drop(fixture);
        let gone = call(&servers, "mcp__web__echo", r#"{"text": "down"}"#).await.unwrap_err();
        assert!(matches!(gone, McpError::Stopped { .. }), "{gone}");
        // The next call waits out the backoff and tries to start it again: nothing listens, so
        // that start fails, and the call says so; the turn would go on.
        let again = call(&servers, "mcp__web__echo", "{}").await.unwrap_err();
        assert!(matches!(again, McpError::Initialize { .. }), "{again}");
    }

    #[tokio::test]
    async fn a_bearer_token_is_sent_and_a_missing_one_is_named() {
        let fixture = McpHttpServer::start_with_token(Some("tok-0123456789")).await;
        let mcp =
            |var: &str| format!("[mcp.servers.web]\nurl = \"{}\"\nbearer_env = \"{var}\"\n", fixture.url());
        let ws = tempfile::tempdir().unwrap();
        // PATH is set in any test run; it is no token, so the server refuses the session.
        let refused = task_servers(&config(&mcp("PATH")), ws.path());
        let e = call(&refused, "mcp__web__echo", "{}").await.unwrap_err();
        assert!(matches!(e, McpError::Initialize { .. }), "{e}");
        let unset = task_servers(&config(&mcp("AGENTD_TEST_NO_SUCH_TOKEN")), ws.path());
        let e = call(&unset, "mcp__web__echo", "{}").await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "MCP server web: its bearer_env AGENTD_TEST_NO_SUCH_TOKEN is not set in the daemon's environment"
        );
    }

    #[tokio::test]
    async fn a_server_that_cannot_start_is_down_and_its_restart_waits_for_the_backoff() {
        // A port nothing listens on: every start fails.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let c = config(&format!(
            "[mcp.servers.web]\nurl = \"http://127.0.0.1:{port}/mcp\"\ntimeout = \"200ms\"\n"
        ));
        let ws = tempfile::tempdir().unwrap();
        let health = Arc::new(McpHealth::default());
        let servers = TaskServers::new(&c, "t1", ws.path(), health.clone());
        let offer = servers.tools_for(&Role::Coder, &CancellationToken::new()).await;
        // No tools, and why: the server is named with its start's error.
        assert!(offer.tools.is_empty());
        assert_eq!(offer.unavailable.len(), 1);
        assert_eq!(offer.unavailable[0].server, "web");
        assert!(offer.unavailable[0].reason.starts_with("MCP server web did not start: "), "{offer:?}");
        // The failure is news for the task's history, once, and the daemon's health knows it.
        let news = servers.news();
        assert!(
            matches!(&news[..], [ServerNews::Failed { server, retry_in: Some(d), .. }]
            if server == "web" && *d == Duration::from_secs(1)),
            "{news:?}"
        );
        assert!(servers.news().is_empty(), "each reported once");
        let down = health.down("t1");
        assert_eq!((down.len(), down[0].server.as_str()), (1, "web"));
        let last = health.servers(&c)[0].last_start.clone().unwrap();
        assert!(!last.ok && last.task_id == "t1" && last.error.is_some(), "{last:?}");
        // Started at the first use and failed: within the 1 s backoff, a call is told so at once.
        let e = call(&servers, "mcp__web__echo", "{}").await.unwrap_err();
        let McpError::Down { failures, .. } = &e else { panic!("{e}") };
        assert_eq!(*failures, 1);
        assert!(e.to_string().contains("is down (1 failure(s) in a row"), "{e}");
        servers.shutdown().await;
        assert!(health.down("t1").is_empty(), "a closed task has nothing down");
    }

    #[tokio::test]
    async fn a_stdio_server_runs_in_the_workspace_with_the_allowlist_and_is_restarted_after_a_crash() {
        let bin = fixture_bin().display().to_string();
        let c = config(&format!(
            "[mcp.servers.fix]\ncommand = \"{bin}\"\nargs = [\"stdio\"]\nenv = [\"CARGO_PKG_NAME\"]\n"
        ));
        let ws = tempfile::tempdir().unwrap();
        let servers = task_servers(&c, ws.path());
        let tools = servers.tools_for(&Role::Coder, &CancellationToken::new()).await.tools;
        assert!(tools.iter().any(|t| t.name.as_str() == "mcp__fix__crash"), "{tools:?}");
        assert!(matches!(&servers.news()[..], [ServerNews::Started { server, .. }] if server == "fix"));
        let here: Value =
            serde_json::from_str(&call(&servers, "mcp__fix__whereami", "{}").await.unwrap().text).unwrap();
        assert_eq!(here["cwd"], ws.path().canonicalize().unwrap().display().to_string());
        let env: Vec<&str> = here["env"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        assert!(env.contains(&"PATH") && !env.contains(&"CARGO_MANIFEST_DIR"), "{env:?}");
        if std::env::var_os("CARGO_PKG_NAME").is_some() {
            assert!(env.contains(&"CARGO_PKG_NAME"), "the server's env names pass: {env:?}");
        }
        let first = here["pid"].as_u64().unwrap();

        let crashed = call(&servers, "mcp__fix__crash", "{}").await.unwrap_err();
        assert!(crashed.to_string().contains("stopped during the call (exited with code 7)"), "{crashed}");
        let news = servers.news();
        assert!(
            matches!(&news[..], [ServerNews::Failed { error, .. }]
            if error == "stopped during a call of mcp__fix__crash (exited with code 7)"),
            "{news:?}"
        );
        // The next call waits out the 1 s backoff, starts the server again and is answered.
        let again: Value =
            serde_json::from_str(&call(&servers, "mcp__fix__whereami", "{}").await.unwrap().text).unwrap();
        assert_ne!(again["pid"].as_u64().unwrap(), first, "a new process");
        servers.shutdown().await;
        // SAFETY: signal 0 only asks whether the process exists.
        let alive = |pid: u64| unsafe { libc::kill(pid as libc::pid_t, 0) == 0 };
        let pid = again["pid"].as_u64().unwrap();
        for _ in 0..300 {
            if !alive(pid)
                || std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default().contains(") Z")
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the server outlived its task's shutdown");
    }

    /// The engine's turn with this daemon's MCP client as its tool servers: a tool of a real MCP
    /// server (over streamable HTTP) is offered, called, and its image goes along within the limit.
    #[actix::test]
    async fn an_mcp_tool_is_offered_called_and_its_image_goes_along_within_the_limit() {
        use agentd_engine::task::{launch, Start};
        use agentd_protocol::{EventKind, Part, Record, TaskState};
        use agentd_test_support::{sse, tool_call_with_id, ScriptedServer};
        use serde_json::json;
        let fixture = McpHttpServer::start().await;
        let server = ScriptedServer::start(vec![
            sse(vec![tool_call_with_id("m1", "mcp__web__image", json!({}))]),
            sse(vec![tool_call_with_id("m2", "finish", json!({"summary": "looked at it"}))]),
        ])
        .await;
        let extra = format!(
            "[mcp.servers.web]\nurl = \"{}\"\ntools = [\"image\"]\nroles = [\"lead\"]\n",
            fixture.url()
        );
        let rig = crate::testing::Rig::start(server, &extra).await;
        let task = rig.task("Look at the picture");
        let workspace = agentd_agents::workspace::Workspace::new(rig.workspace.path()).unwrap();
        let servers = rig.shared.tool_servers(&task.task_id, workspace.root());
        let (done, mut ended) = tokio::sync::watch::channel(None);
        let start = Start::Fresh { objective: "Look at the picture".into() };
        let engine = rig.shared.engine.clone();
        launch(engine, task.task_id.clone(), workspace, start, CancellationToken::new(), servers, done)
            .unwrap();
        let state = tokio::time::timeout(Duration::from_secs(30), ended.wait_for(Option::is_some)).await;
        assert_eq!(*state.unwrap().unwrap(), Some(TaskState::Finished));

        // The settings snapshot names the MCP tool; the request carries its schema with the others.
        let records = rig.shared.storage.records(&task.task_id, 0, 10_000).unwrap();
        let settings = records.into_iter().find_map(|(_, r)| match r {
            Record::Settings { role: Role::Lead, settings } => Some(settings),
            _ => None,
        });
        assert!(settings.unwrap().tools.contains(&ToolName::parse("mcp__web__image")));
        let first = &rig.server.chat_requests()[0];
        let names: Vec<&str> = first["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names.last(), Some(&"mcp__web__image"));
        assert_eq!(names.len(), agentd_agents::roles::LEAD_TOOLS.len() + 1);
        // The result is one tool message: its text, then the image.
        let lead = rig.history(&task.task_id, "lead");
        let result = &lead[2];
        assert!(matches!(&result.parts[0], Part::ToolResult { call_id, content, is_error: false }
            if call_id == "m1" && content == "a 1x1 png:"));
        assert!(matches!(&result.parts[1], Part::Image { media_type, .. } if media_type == "image/png"));
        let events = rig.events(&task.task_id);
        let finished = events.iter().find_map(|e| match &e.kind {
            EventKind::ToolFinished { tool, result_tokens, whole_limit, .. }
                if tool.as_str() == "mcp__web__image" =>
            {
                Some((*result_tokens, *whole_limit))
            }
            _ => None,
        });
        let (result_tokens, whole_limit) = finished.expect("the MCP call's tool_finished");
        // Measured with the image, by the provider's rule (an estimate of 765 tokens).
        assert!(result_tokens.is_some_and(|t| t.0 > 765 && Some(t) <= whole_limit), "{result_tokens:?}");
    }
}
