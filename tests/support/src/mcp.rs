//! A real MCP server and a real MCP client, for agentd's tests: both speak the protocol through the
//! official SDK (`rmcp`), over stdio or streamable HTTP on 127.0.0.1 — nothing of agentd's own is
//! mocked.
//!
//! [`Fixture`] is the server. Its tools:
//!
//! | tool | arguments | answers |
//! |---|---|---|
//! | `echo` | `text` | the text |
//! | `big` | `lines` | that many numbered lines (`line 7 of 2000: …`), for paging |
//! | `fail` | `message`? | a tool error (`isError: true`) with the message |
//! | `slow` | `ms` | `slept N ms`, after sleeping that long (for timeouts) |
//! | `crash` | — | the process exits with code 7 before answering (for restarts); in-process, a protocol error |
//! | `image` | — | a text and a 1×1 PNG |
//! | `bad_image` | — | an "image" whose data is not base64 (an invalid result) |
//! | `resource` | — | an embedded text resource and a resource link |
//! | `whereami` | — | `{"pid", "cwd", "env": [names]}` as JSON text |
//! | `touch` | `path`, `text` | writes `text` to `path` (relative to its working directory: the task's workspace), answers `wrote PATH` |
//!
//! It runs as the `mcp_fixture` binary (`mcp_fixture stdio`, or `mcp_fixture http` printing
//! `listening http://127.0.0.1:PORT/mcp`; [`fixture_bin`] finds or builds it) or in-process
//! ([`McpHttpServer::start`]), optionally requiring a bearer token.
//!
//! [`McpClient`] is the client: it starts a program speaking MCP on its stdio (`agentd mcp`, the
//! fixture) and calls its tools.

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig, ContentBlock,
    ErrorData, Implementation, InitializeRequestParams, ListToolsResult, PaginatedRequestParams, Resource,
    ResourceContents, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleClient, RoleServer, RunningService};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ServerHandler, ServiceExt};
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// A 1×1 transparent PNG, base64: what `image` answers.
pub const PIXEL_PNG: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

/// The exit code of the fixture's `crash` tool.
pub const CRASH_EXIT_CODE: i32 = 7;

/// The MCP server of the tests (see the module's table of tools).
#[derive(Clone, Debug, Default)]
pub struct Fixture {
    /// `crash` exits the process (the binary); in-process it answers a protocol error instead.
    pub exit_on_crash: bool,
}

fn schema(properties: Value, required: &[&str]) -> Arc<Map<String, Value>> {
    let value = json!({"type": "object", "properties": properties, "required": required});
    match value {
        Value::Object(map) => Arc::new(map),
        _ => unreachable!("a JSON object"),
    }
}

/// The fixture's tools, as it lists them.
pub fn fixture_tools() -> Vec<Tool> {
    let none = || schema(json!({}), &[]);
    vec![
        Tool::new(
            "echo",
            "Answers the text it is given.",
            schema(json!({"text": {"type": "string"}}), &["text"]),
        ),
        Tool::new(
            "big",
            "Answers that many numbered lines.",
            schema(json!({"lines": {"type": "integer"}}), &["lines"]),
        ),
        Tool::new(
            "fail",
            "Always fails, with the message.",
            schema(json!({"message": {"type": "string"}}), &[]),
        ),
        Tool::new("slow", "Sleeps, then answers.", schema(json!({"ms": {"type": "integer"}}), &["ms"])),
        Tool::new("crash", "Exits the server without answering.", none()),
        Tool::new("image", "Answers a text and a 1x1 PNG.", none()),
        Tool::new("bad_image", "Answers an image whose data is not base64.", none()),
        Tool::new("resource", "Answers an embedded text resource and a link.", none()),
        Tool::new("whereami", "Answers the server's pid, working directory and environment names.", none()),
        Tool::new(
            "touch",
            "Writes the text to the file at the path, relative to the working directory.",
            schema(json!({"path": {"type": "string"}, "text": {"type": "string"}}), &["path", "text"]),
        ),
    ]
}

fn arg_u64(args: &Map<String, Value>, name: &str) -> Result<u64, ErrorData> {
    args.get(name)
        .and_then(Value::as_u64)
        .ok_or_else(|| ErrorData::invalid_params(format!("`{name}` must be a non-negative integer"), None))
}

impl Fixture {
    async fn answer(&self, name: &str, args: Map<String, Value>) -> Result<CallToolResult, ErrorData> {
        Ok(match name {
            "echo" => {
                let text = args.get("text").and_then(Value::as_str).unwrap_or_default();
                CallToolResult::success(vec![ContentBlock::text(text)])
            }
            "big" => {
                let n = arg_u64(&args, "lines")?;
                let text: String = (1..=n)
                    .map(|i| format!("line {i} of {n}: the quick brown fox jumps over the lazy dog\n"))
                    .collect();
                CallToolResult::success(vec![ContentBlock::text(text)])
            }
            "fail" => {
                let message = args.get("message").and_then(Value::as_str).unwrap_or("the fixture failed");
                CallToolResult::error(vec![ContentBlock::text(message)])
            }
            "slow" => {
                let ms = arg_u64(&args, "ms")?;
                tokio::time::sleep(Duration::from_millis(ms)).await;
                CallToolResult::success(vec![ContentBlock::text(format!("slept {ms} ms"))])
            }
            "crash" if self.exit_on_crash => std::process::exit(CRASH_EXIT_CODE),
            "crash" => {
                return Err(ErrorData::internal_error("crash: an in-process fixture does not exit", None))
            }
            "image" => CallToolResult::success(vec![
                ContentBlock::text("a 1x1 png:"),
                ContentBlock::image(PIXEL_PNG, "image/png"),
            ]),
            "bad_image" => {
                CallToolResult::success(vec![ContentBlock::image("not base64 at all!", "image/png")])
            }
            "resource" => CallToolResult::success(vec![
                ContentBlock::resource(ResourceContents::text("the notes say hello", "file:///notes.txt")),
                ContentBlock::resource_link(Resource::new("file:///data.csv", "data.csv")),
            ]),
            "whereami" => {
                let cwd = std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_default();
                let mut env: Vec<String> =
                    std::env::vars_os().map(|(k, _)| k.to_string_lossy().into_owned()).collect();
                env.sort();
                let text = json!({"pid": std::process::id(), "cwd": cwd, "env": env}).to_string();
                CallToolResult::success(vec![ContentBlock::text(text)])
            }
            "touch" => {
                let path = args.get("path").and_then(Value::as_str).unwrap_or_default();
                let text = args.get("text").and_then(Value::as_str).unwrap_or_default();
                match std::fs::write(path, text) {
                    Ok(()) => CallToolResult::success(vec![ContentBlock::text(format!("wrote {path}"))]),
                    Err(e) => CallToolResult::error(vec![ContentBlock::text(format!("{path}: {e}"))]),
                }
            }
            other => return Err(ErrorData::invalid_params(format!("no tool {other:?}"), None)),
        })
    }
}

impl ServerHandler for Fixture {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
        info.server_info = Implementation::new("agentd-mcp-fixture", env!("CARGO_PKG_VERSION"));
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(fixture_tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        Ok(self.answer(&request.name, args).await?.into())
    }
}

/// Serves the fixture on this process's stdin and stdout until the client goes away.
pub async fn serve_stdio() -> std::io::Result<()> {
    let fixture = Fixture { exit_on_crash: true };
    let running = fixture
        .serve((tokio::io::stdin(), tokio::io::stdout()))
        .await
        .map_err(|e| std::io::Error::other(format!("initialize: {e}")))?;
    running.waiting().await.map_err(std::io::Error::other)?;
    Ok(())
}

/// Serves `fixture` by streamable HTTP at `/mcp` on `listener` until the task is dropped; with a
/// `token`, a request without `Authorization: Bearer TOKEN` is answered 401.
pub async fn serve_http(listener: tokio::net::TcpListener, fixture: Fixture, token: Option<String>) {
    use hyper::service::service_fn;
    let service: StreamableHttpService<Fixture, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(fixture.clone()),
        Default::default(),
        StreamableHttpServerConfig::default(),
    );
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let service = service.clone();
        let token = token.clone();
        tokio::spawn(async move {
            let handle = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                let service = service.clone();
                let token = token.clone();
                async move {
                    let authorized = token.as_ref().is_none_or(|t| {
                        request.headers().get(hyper::header::AUTHORIZATION).and_then(|v| v.to_str().ok())
                            == Some(format!("Bearer {t}").as_str())
                    });
                    let refusal = match (authorized, request.uri().path() == "/mcp") {
                        (false, _) => Some((hyper::StatusCode::UNAUTHORIZED, "unauthorized")),
                        (true, false) => Some((hyper::StatusCode::NOT_FOUND, "not found")),
                        (true, true) => None,
                    };
                    if let Some((status, text)) = refusal {
                        use http_body_util::BodyExt;
                        let body = http_body_util::Full::new(hyper::body::Bytes::from(text)).boxed();
                        let mut response = hyper::Response::new(body);
                        *response.status_mut() = status;
                        return Ok::<_, std::convert::Infallible>(response);
                    }
                    Ok(service.handle(request).await)
                }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, handle).await;
        });
    }
}

/// The fixture served by streamable HTTP on 127.0.0.1 inside the test process; stopped when dropped.
pub struct McpHttpServer {
    url: String,
    task: tokio::task::JoinHandle<()>,
}

impl McpHttpServer {
    /// Starts the fixture at `http://127.0.0.1:PORT/mcp`.
    pub async fn start() -> McpHttpServer {
        McpHttpServer::start_with_token(None).await
    }

    /// As [`start`](Self::start), refusing requests without `Authorization: Bearer TOKEN`.
    pub async fn start_with_token(token: Option<&str>) -> McpHttpServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1");
        let url = format!("http://{}/mcp", listener.local_addr().expect("a local address"));
        let task = tokio::spawn(serve_http(listener, Fixture::default(), token.map(str::to_string)));
        McpHttpServer { url, task }
    }

    /// The endpoint: `http://127.0.0.1:PORT/mcp`.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for McpHttpServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The `mcp_fixture` binary: next to the binaries of the running test (`target/<profile>/`), built
/// there with `cargo build -p agentd-test-support --bin mcp_fixture` when it is missing or older
/// than its sources. `cargo test --workspace` builds it with everything else.
pub fn fixture_bin() -> PathBuf {
    static BUILT: OnceLock<Mutex<Option<PathBuf>>> = OnceLock::new();
    let mut built = BUILT.get_or_init(|| Mutex::new(None)).lock().unwrap_or_else(|p| p.into_inner());
    if let Some(path) = built.as_ref() {
        return path.clone();
    }
    let exe = std::env::current_exe().expect("the test's own path");
    // target/<profile>/deps/TEST-HASH, or target/<profile>/TEST for a binary.
    let mut dir = exe.parent().expect("the test's directory").to_path_buf();
    if dir.file_name().is_some_and(|n| n == "deps" || n == "examples") {
        dir.pop();
    }
    let path = dir.join("mcp_fixture");
    if stale(&path) {
        let profile = match dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") | None => "dev".to_string(),
            Some(other) => other.to_string(),
        };
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = std::process::Command::new(cargo)
            .args(["build", "-p", "agentd-test-support", "--bin", "mcp_fixture", "--profile", &profile])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("CARGO_TARGET_DIR", dir.parent().expect("the target directory"))
            .status()
            .expect("run cargo to build mcp_fixture");
        assert!(status.success(), "cargo build --bin mcp_fixture failed");
    }
    assert!(path.exists(), "no mcp_fixture at {}", path.display());
    *built = Some(path.clone());
    path
}

/// Whether the binary at `path` is missing or older than the fixture's sources.
fn stale(path: &Path) -> bool {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let Some(built) = modified(path) else { return true };
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    [src.join("mcp.rs"), src.join("bin/mcp_fixture.rs")]
        .iter()
        .any(|s| modified(s).is_some_and(|m| m > built))
}

/// What a tool call answered, as a test reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// `isError` of the result.
    pub is_error: bool,
    /// The text blocks, joined by newlines.
    pub text: String,
    /// `structuredContent`, when the server sent it.
    pub structured: Option<Value>,
}

impl Reply {
    /// The structured content, or the text read as JSON.
    pub fn json(&self) -> Value {
        self.structured.clone().unwrap_or_else(|| {
            serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("{e}: {}", self.text))
        })
    }
}

/// An MCP client over a child process's stdio (`agentd mcp`, the fixture).
pub struct McpClient {
    service: RunningService<RoleClient, ClientConfig>,
    child: tokio::process::Child,
}

impl McpClient {
    /// Starts `command` with piped stdin and stdout and initializes an MCP session with it.
    pub async fn spawn(command: std::process::Command) -> McpClient {
        let mut command = tokio::process::Command::from(command);
        command.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).kill_on_drop(true);
        let mut child = command.spawn().expect("start the MCP server program");
        let stdout = child.stdout.take().expect("its stdout");
        let stdin = child.stdin.take().expect("its stdin");
        let info = InitializeRequestParams::new(
            ClientCapabilities::default(),
            Implementation::new("agentd-test-client", env!("CARGO_PKG_VERSION")),
        );
        let service = tokio::time::timeout(Duration::from_secs(30), info.serve((stdout, stdin)))
            .await
            .expect("the server answers initialize within 30s")
            .expect("initialize");
        McpClient { service, child }
    }

    /// The names of the tools the server lists.
    pub async fn tool_names(&self) -> Vec<String> {
        self.tools().await.into_iter().map(|t| t.name.to_string()).collect()
    }

    /// The tools the server lists.
    pub async fn tools(&self) -> Vec<Tool> {
        self.service.list_all_tools().await.expect("tools/list")
    }

    /// Calls `name` with `arguments` (a JSON object); a protocol or transport failure panics.
    pub async fn call(&self, name: &str, arguments: Value) -> Reply {
        self.try_call(name, arguments).await.unwrap_or_else(|e| panic!("tools/call {name}: {e}"))
    }

    /// Calls `name` with `arguments`; a protocol or transport failure is the error's text.
    pub async fn try_call(&self, name: &str, arguments: Value) -> Result<Reply, String> {
        let mut params = CallToolRequestParams::new(name.to_string());
        params.arguments = match arguments {
            Value::Object(map) => Some(map),
            Value::Null => None,
            other => panic!("arguments must be an object, not {other}"),
        };
        let result = self.service.call_tool(params).await.map_err(|e| e.to_string())?;
        let text: Vec<&str> =
            result.content.iter().filter_map(|c| c.as_text().map(|t| t.text.as_str())).collect();
        Ok(Reply {
            is_error: result.is_error.unwrap_or(false),
            text: text.join("\n"),
            structured: result.structured_content.clone(),
        })
    }

    /// Ends the session (closes the server's stdin) and waits for the program to exit.
    pub async fn close(mut self) -> Option<std::process::ExitStatus> {
        let _ = self.service.close().await;
        tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await.ok()?.ok()
    }
}
