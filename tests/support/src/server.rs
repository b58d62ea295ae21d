//! The server handle, its builder, the accept loop and request routing.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

use crate::anthropic;
use crate::http::{Conn, ReadError, Request};
use crate::openai::{self, Frame};
use crate::script::{strip_query, Config, Fault, RecordedRequest, Reply, Responder, State, Step, Usage};
use crate::{
    CHAT_PATH, COUNT_TOKENS_PATH, MESSAGES_PATH, MODELS_PATH, OLLAMA_SHOW_PATH, PROPS_PATH, TOKENIZE_PATH,
};

/// How long a client may take to send a complete request.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// A scripted OpenAI-compatible model server on `127.0.0.1:<random port>`.
///
/// Dropping the handle stops the server and aborts every open connection.
pub struct ScriptedServer {
    state: Arc<State>,
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for ScriptedServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedServer")
            .field("addr", &self.addr)
            .field("model", &self.state.config.model)
            .field("remaining", &self.remaining())
            .finish()
    }
}

impl ScriptedServer {
    /// Starts a server with the default configuration and this script.
    /// Must be called from within a tokio runtime.
    pub async fn start(script: Vec<Step>) -> ScriptedServer {
        Self::builder().script(script).start().await
    }

    /// A builder for model name, `max_model_len`, script and responder.
    pub fn builder() -> ServerBuilder {
        ServerBuilder::default()
    }

    /// `http://127.0.0.1:PORT/v1`: the value for an OpenAI `base_url`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The bound socket address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The model id served (and echoed in completions).
    pub fn model(&self) -> &str {
        &self.state.config.model
    }

    /// Appends steps to the script.
    pub fn push(&self, steps: impl IntoIterator<Item = Step>) {
        self.state.push(steps);
    }

    /// The server's own token count of every chat request, in order (refused ones included).
    pub fn counted(&self) -> Vec<u64> {
        self.state.counted()
    }

    /// The prompt tokens the server's prompt cache served for every chat request, parallel to
    /// [`counted`](Self::counted) (0 for a refused one): the longest prefix shared with an earlier
    /// accepted request — tools, system, then the leading JSON-equal messages — or 0 when that is
    /// under [`MIN_CACHED_PREFIX`](crate::MIN_CACHED_PREFIX) tokens. Recorded whether or not
    /// [`report_usage`](ServerBuilder::report_usage) puts it on the wire.
    pub fn cached(&self) -> Vec<u64> {
        self.state.cached()
    }

    /// How many chat requests were refused as over the window.
    pub fn refused(&self) -> usize {
        self.state.refused()
    }

    /// Every request received so far (including malformed-JSON ones, but not
    /// requests whose HTTP framing could not be parsed).
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state.requests()
    }

    /// Bodies of the chat requests (`POST /v1/chat/completions` and `POST /v1/messages`), in order.
    pub fn chat_requests(&self) -> Vec<Value> {
        self.state.requests().into_iter().filter(RecordedRequest::is_chat).map(|r| r.body).collect()
    }

    /// Scripted steps not yet consumed.
    pub fn remaining(&self) -> usize {
        self.state.remaining()
    }

    /// Connections currently open (useful to assert that a cancelled client
    /// really hung up on a [`Fault::Hang`]).
    pub fn active_connections(&self) -> usize {
        self.state.active_connections()
    }

    /// Waits until at least `n` chat requests have been received; returns
    /// `false` on timeout.
    pub async fn wait_for_requests(&self, n: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.state.chat_request_count() >= n {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Waits until no connection is open; returns `false` on timeout.
    pub async fn wait_for_idle(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.state.active_connections() == 0 {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Drop for ScriptedServer {
    fn drop(&mut self) {
        // Dropping the accept loop drops its JoinSet, aborting connections.
        self.task.abort();
    }
}

/// Configures a [`ScriptedServer`].
pub struct ServerBuilder {
    model: String,
    max_model_len: Option<u64>,
    window: Option<u64>,
    silent_truncation_at: Option<u64>,
    tokenize_endpoint: bool,
    ollama_num_ctx: Option<u64>,
    props_n_ctx: Option<u64>,
    report_usage: bool,
    script: Vec<Step>,
    responder: Option<Responder>,
}

impl Default for ServerBuilder {
    fn default() -> Self {
        ServerBuilder {
            model: crate::DEFAULT_MODEL.to_string(),
            max_model_len: None,
            window: None,
            silent_truncation_at: None,
            tokenize_endpoint: false,
            ollama_num_ctx: None,
            props_n_ctx: None,
            report_usage: false,
            script: Vec::new(),
            responder: None,
        }
    }
}

impl std::fmt::Debug for ServerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerBuilder")
            .field("model", &self.model)
            .field("max_model_len", &self.max_model_len)
            .field("script", &self.script)
            .field("responder", &self.responder.is_some())
            .finish()
    }
}

impl ServerBuilder {
    /// Model id reported by `/v1/models` and echoed in completions
    /// (default `"gpt-4o"`).
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }

    /// `max_model_len` reported by `/v1/models` (omitted when `None`).
    /// Accepts `Some(n)`, `None` or a bare `n`.
    pub fn max_model_len(mut self, len: impl Into<Option<u64>>) -> Self {
        self.max_model_len = len.into();
        self
    }

    /// Enforces a context window with the server's own count (see `count`): a request over it is
    /// refused with OpenAI's `context_length_exceeded`, stating the limit, and consumes no step.
    /// Independent of what `/v1/models` declares.
    pub fn window(mut self, tokens: u64) -> Self {
        self.window = Some(tokens);
        self
    }

    /// Accepts over-long prompts silently, processing only `tokens` of them, and reports that in
    /// `usage.prompt_tokens` (Ollama's behaviour with its default `num_ctx`).
    pub fn silent_truncation_at(mut self, tokens: u64) -> Self {
        self.silent_truncation_at = Some(tokens);
        self
    }

    /// Serves vLLM's `POST /tokenize` (default off: a 404, as on a server without one). It answers
    /// `{"count": n, "tokens": [0, 1, …], "max_model_len": …}` with `n` the o200k tokens of `prompt`
    /// (or llama.cpp's `content`), as [`count_text_tokens`](crate::count_text_tokens) counts them.
    pub fn tokenize_endpoint(mut self, on: bool) -> Self {
        self.tokenize_endpoint = on;
        self
    }

    /// Serves Ollama's `POST /api/show` (default off: a 404), answering
    /// `{"parameters": "num_ctx {n}", "model_info": {"llama.context_length": 131072}}`: the model
    /// runs with `num_ctx` `n`, below what the model itself could take.
    pub fn ollama_num_ctx(mut self, n: u64) -> Self {
        self.ollama_num_ctx = Some(n);
        self
    }

    /// Serves llama.cpp's `GET /props` (default off: a 404), answering
    /// `{"default_generation_settings": {"n_ctx": n}}`.
    pub fn props_n_ctx(mut self, n: u64) -> Self {
        self.props_n_ctx = Some(n);
        self
    }

    /// Reports usage on every successful chat reply, as a real provider does (default off: only a
    /// scripted [`sse_with_usage`](crate::sse_with_usage) reports any). The prompt figure is the
    /// server's own count of the request ([`count_request`](crate::count_request), the count the
    /// window is enforced with), overriding a scripted one; the completion figure is the scripted one,
    /// else the o200k tokens of the reply's text, reasoning and tool calls. The prompt-cache figure
    /// ([`ScriptedServer::cached`]) goes in OpenAI's `usage.prompt_tokens_details.cached_tokens`, and
    /// on `/v1/messages` in `cache_read_input_tokens`, with `input_tokens` the uncached rest.
    pub fn report_usage(mut self, on: bool) -> Self {
        self.report_usage = on;
        self
    }

    /// Appends steps to the initial script.
    pub fn script(mut self, steps: impl IntoIterator<Item = Step>) -> Self {
        self.script.extend(steps);
        self
    }

    /// Computes the answer when the script queue is empty.
    pub fn responder<F>(mut self, f: F) -> Self
    where
        F: Fn(&Value) -> Step + Send + Sync + 'static,
    {
        self.responder = Some(Arc::new(f));
        self
    }

    /// Binds `127.0.0.1:0` and spawns the accept loop on the current tokio
    /// runtime.
    pub async fn start(self) -> ScriptedServer {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.expect("scripted server: bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("scripted server: local_addr");
        let config = Config {
            model: self.model,
            max_model_len: self.max_model_len,
            responder: self.responder,
            window: self.window,
            silent_truncation_at: self.silent_truncation_at,
            tokenize_endpoint: self.tokenize_endpoint,
            ollama_num_ctx: self.ollama_num_ctx,
            props_n_ctx: self.props_n_ctx,
            report_usage: self.report_usage,
        };
        let state = Arc::new(State::new(config, self.script));
        let task = tokio::spawn(accept_loop(listener, state.clone()));
        ScriptedServer { state, addr, task }
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<State>) {
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        match listener.accept().await {
            Ok((stream, _)) => {
                connections.spawn(handle_connection(stream, state.clone()));
            }
            // E.g. EMFILE: back off instead of spinning.
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

async fn handle_connection(stream: TcpStream, state: Arc<State>) {
    let _guard = state.connection_guard();
    let mut conn = Conn::new(stream);
    let request = match tokio::time::timeout(READ_TIMEOUT, conn.read_request()).await {
        Err(_) | Ok(Err(ReadError::Closed)) => return,
        Ok(Err(ReadError::Malformed(msg))) => {
            let _ =
                conn.send_json(400, &[], &openai::bad_request(&format!("malformed request: {msg}"))).await;
            conn.close().await;
            return;
        }
        Ok(Err(ReadError::TooLarge { status, message })) => {
            let _ = conn.send_json(status, &[], &openai::bad_request(&message)).await;
            conn.close().await;
            return;
        }
        Ok(Ok(request)) => request,
    };

    let body: Option<Value> = serde_json::from_slice(&request.body).ok();
    state.record(RecordedRequest {
        method: request.method.clone(),
        path: request.target.clone(),
        headers: request.headers.clone(),
        body: body.clone().unwrap_or(Value::Null),
    });

    route(&mut conn, &state, &request, body).await;
    conn.close().await;
}

async fn route(conn: &mut Conn, state: &State, request: &Request, body: Option<Value>) {
    let path = strip_query(&request.target);
    let method = request.method.as_str();
    let result = match (method, path) {
        ("GET", MODELS_PATH) => {
            let models = openai::models(&state.config.model, state.config.max_model_len);
            conn.send_json(200, &[], &models).await
        }
        ("POST", CHAT_PATH) => match body {
            Some(body @ Value::Object(_)) => {
                chat(conn, state, &body, Protocol::OpenAi).await;
                Ok(())
            }
            _ => conn.send_json(400, &[], &openai::invalid_json()).await,
        },
        ("POST", MESSAGES_PATH | COUNT_TOKENS_PATH)
            if !request.headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("anthropic-version")) =>
        {
            conn.send_json(400, &[], &anthropic::missing_version()).await
        }
        ("POST", MESSAGES_PATH) => match body {
            Some(body @ Value::Object(_)) => {
                chat(conn, state, &body, Protocol::Anthropic).await;
                Ok(())
            }
            _ => conn.send_json(400, &[], &anthropic::invalid_json()).await,
        },
        ("POST", COUNT_TOKENS_PATH) => match body {
            // The server's own count, as the window is enforced with (never refused, never scripted).
            Some(body @ Value::Object(_)) => {
                let n = crate::count::count_request(&body);
                conn.send_json(200, &[], &serde_json::json!({ "input_tokens": n })).await
            }
            _ => conn.send_json(400, &[], &anthropic::invalid_json()).await,
        },
        (_, MESSAGES_PATH | COUNT_TOKENS_PATH) => {
            conn.send_json(405, &[], &anthropic::method_not_allowed(method, path)).await
        }
        ("GET", p) if p.strip_prefix(MODELS_PATH).is_some_and(|id| id.len() > 1 && id.starts_with('/')) => {
            let id = &p[MODELS_PATH.len() + 1..];
            if id == state.config.model {
                let model = anthropic::model(&state.config.model, state.config.max_model_len);
                conn.send_json(200, &[], &model).await
            } else {
                conn.send_json(404, &[], &anthropic::not_found(method, path)).await
            }
        }
        ("POST", TOKENIZE_PATH) if state.config.tokenize_endpoint => {
            let (status, answer) = tokenize(state, body.as_ref());
            conn.send_json(status, &[], &answer).await
        }
        ("POST", OLLAMA_SHOW_PATH) if state.config.ollama_num_ctx.is_some() => {
            let show = serde_json::json!({
                "parameters": format!("num_ctx {}", state.config.ollama_num_ctx.unwrap_or_default()),
                "model_info": {"llama.context_length": 131072},
            });
            conn.send_json(200, &[], &show).await
        }
        ("GET", PROPS_PATH) if state.config.props_n_ctx.is_some() => {
            let props =
                serde_json::json!({"default_generation_settings": {"n_ctx": state.config.props_n_ctx}});
            conn.send_json(200, &[], &props).await
        }
        (_, MODELS_PATH | CHAT_PATH) => {
            conn.send_json(405, &[], &openai::method_not_allowed(method, path)).await
        }
        _ => conn.send_json(404, &[], &openai::not_found(method, path)).await,
    };
    // A write error means the client is gone: nothing left to do.
    let _ = result;
}

/// vLLM's `POST /tokenize`: the o200k count of `prompt` (or llama.cpp's `content`).
fn tokenize(state: &State, body: Option<&Value>) -> (u16, Value) {
    let text = body.and_then(|b| b.get("prompt").or_else(|| b.get("content"))).and_then(Value::as_str);
    let Some(text) = text else {
        return (400, openai::bad_request("tokenize: `prompt` (a string) is required"));
    };
    let n = crate::count::tokens(text);
    let max_model_len = state.config.max_model_len.or(state.config.window);
    (
        200,
        serde_json::json!({"count": n, "tokens": (0..n).collect::<Vec<u64>>(), "max_model_len": max_model_len}),
    )
}

/// The wire protocol of a chat request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    /// `POST /v1/chat/completions`.
    OpenAi,
    /// `POST /v1/messages`.
    Anthropic,
}

/// Answers a chat request (either protocol) from the script.
async fn chat(conn: &mut Conn, state: &State, body: &Value, protocol: Protocol) {
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let parts = crate::count::Parts::of(body);
    let counted = parts.total();
    let over = state.config.window.is_some_and(|w| counted > w);
    let cached = state.record_count(&parts, crate::cache::Prompt::of(body), over);
    if let (true, Some(limit)) = (over, state.config.window) {
        let step = crate::context_length_exceeded(limit, counted);
        let Step::Fault(fault) = step else { return };
        let frame = Frame { id: "chatcmpl-refused", model: &state.config.model };
        let _ = fault_response(conn, &frame, &fault, stream, body, protocol).await;
        return;
    }
    let Some(mut step) = state.next_step(body) else {
        let exhausted = match protocol {
            Protocol::OpenAi => openai::script_exhausted(),
            Protocol::Anthropic => anthropic::script_exhausted(),
        };
        let _ = conn.send_json(500, &[], &exhausted).await;
        return;
    };
    let mut id = state.next_completion_id();
    if protocol == Protocol::Anthropic {
        id = id.replacen("chatcmpl-", "msg_scripted_", 1);
    }
    let frame = Frame { id: &id, model: &state.config.model };
    loop {
        match step {
            Step::Delayed(delay, inner) => {
                tokio::select! {
                    _ = tokio::time::sleep(delay) => step = *inner,
                    // The client gave up while we were "thinking".
                    _ = conn.wait_for_disconnect() => return,
                }
            }
            Step::Respond(reply) => {
                let usage = usage_of(&state.config, &reply, counted, cached);
                let _ = respond(conn, &frame, &reply, usage, stream, protocol).await;
                return;
            }
            Step::Fault(fault) => {
                let _ = fault_response(conn, &frame, &fault, stream, body, protocol).await;
                return;
            }
        }
    }
}

/// The usage a reply reports: the scripted one; with `report_usage`, the server's own count of the
/// prompt and what its cache served, with the scripted completion figure (else the reply's own
/// tokens); under silent truncation, the prompt as cut (the truth a usage report tells).
fn usage_of(config: &Config, reply: &Reply, counted: u64, cached: u64) -> Option<Usage> {
    let mut usage = Usage::scripted(reply);
    if config.report_usage {
        let completion = reply
            .usage
            .map_or_else(|| crate::count::reply_tokens(&reply.chunks), |(_, completion)| completion);
        usage = Some(Usage { prompt: counted, completion, cached: Some(cached) });
    }
    if let Some(cut) = config.silent_truncation_at {
        let prompt = counted.min(cut);
        let cached = usage.and_then(|u| u.cached).map(|c| c.min(prompt));
        usage = Some(Usage { prompt, completion: usage.map_or(8, |u| u.completion), cached });
    }
    usage
}

async fn respond(
    conn: &mut Conn,
    frame: &Frame<'_>,
    reply: &Reply,
    usage: Option<Usage>,
    stream: bool,
    protocol: Protocol,
) -> std::io::Result<()> {
    if protocol == Protocol::Anthropic {
        if !stream {
            return conn.send_json(200, &[], &anthropic::message(frame, reply, usage)).await;
        }
        return send_stream(conn, anthropic::stream_events(frame, reply, usage)).await;
    }
    if !stream {
        return conn.send_json(200, &[], &openai::completion(frame, reply, usage)).await;
    }
    send_stream(conn, openai::stream_events(frame, reply, usage)).await
}

async fn start_sse(conn: &mut Conn) -> std::io::Result<()> {
    conn.start_chunked(200, "text/event-stream", &[("Cache-Control", "no-cache".into())]).await
}

/// Starts an SSE stream and sends `events`, leaving the stream open.
async fn send_events(conn: &mut Conn, events: Vec<String>) -> std::io::Result<()> {
    start_sse(conn).await?;
    for event in events {
        conn.send_chunk(event.as_bytes()).await?;
    }
    Ok(())
}

/// A whole SSE stream of `events`.
async fn send_stream(conn: &mut Conn, events: Vec<String>) -> std::io::Result<()> {
    send_events(conn, events).await?;
    conn.end_chunked().await
}

/// Announces `body` whole as a 200 JSON answer, sends half of it and stops: the caller hangs up.
async fn send_half_json(conn: &mut Conn, body: &Value) -> std::io::Result<()> {
    let full = serde_json::to_vec(body).unwrap_or_default();
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\
         Content-Length: {}\r\n\r\n",
        full.len()
    );
    conn.write_all(head.as_bytes()).await?;
    conn.write_all(&full[..full.len() / 2]).await
}

/// Accepts the request (starting an SSE stream when it asked for one) and never answers, until
/// the client hangs up.
async fn hang(conn: &mut Conn, stream: bool) -> std::io::Result<()> {
    if stream {
        start_sse(conn).await?;
    }
    conn.wait_for_disconnect().await;
    Ok(())
}

/// SSE comments only, one every `every`, until the client hangs up (bounded: at most 10 minutes).
async fn keep_alive_only(conn: &mut Conn, stream: bool, every: Duration) -> std::io::Result<()> {
    if !stream {
        return hang(conn, false).await;
    }
    start_sse(conn).await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
    while tokio::time::Instant::now() < deadline {
        tokio::select! {
            _ = tokio::time::sleep(every) => conn.send_chunk(b": keepalive\n\n").await?,
            _ = conn.wait_for_disconnect() => return Ok(()),
        }
    }
    Ok(())
}

/// A 200 whose body is an HTML page, as a proxy or a captive portal answers.
async fn html_body(conn: &mut Conn) -> std::io::Result<()> {
    let page = b"<!DOCTYPE html><html><head><title>Sign in</title></head><body><h1>Network login required</h1></body></html>";
    conn.send_response(200, "text/html; charset=utf-8", &[], page).await
}

/// The status line keeps a sane status even for odd scripted ones.
fn sane_status(status: u16) -> u16 {
    if (100..=999).contains(&status) {
        status
    } else {
        500
    }
}

async fn fault_response(
    conn: &mut Conn,
    frame: &Frame<'_>,
    fault: &Fault,
    stream: bool,
    body: &Value,
    protocol: Protocol,
) -> std::io::Result<()> {
    if protocol == Protocol::Anthropic {
        return anthropic_fault(conn, frame, fault, stream).await;
    }
    match fault {
        Fault::RateLimited { retry_after } => {
            let headers: Vec<(&str, String)> =
                retry_after.iter().map(|v| ("Retry-After", v.clone())).collect();
            let error = openai::rate_limited(frame.model, retry_after.as_deref());
            conn.send_json(429, &headers, &error).await
        }
        Fault::QuotaExhausted => {
            let error = openai::error(
                "You exceeded your current quota, please check your plan and billing details.",
                "insufficient_quota",
                None,
                Some("insufficient_quota"),
            );
            conn.send_json(429, &[("Retry-After", "20".to_string())], &error).await
        }
        Fault::ServerError { status, message } => {
            let status = sane_status(*status);
            conn.send_json(status, &[], &openai::server_error(status, message)).await
        }
        Fault::ContextLengthExceeded { limit, requested } => {
            let error = openai::context_length_exceeded(*limit, *requested, body);
            conn.send_json(400, &[], &error).await
        }
        // No terminating chunk: the caller closes the connection.
        Fault::CutStream(chunks) if stream => {
            send_events(conn, openai::cut_stream_events(frame, chunks)).await
        }
        Fault::CutStream(chunks) => {
            let reply = Reply { chunks: chunks.clone(), ..Reply::default() };
            send_half_json(conn, &openai::completion(frame, &reply, None)).await
        }
        Fault::EmptyStream if stream => send_stream(conn, vec![openai::DONE.to_string()]).await,
        Fault::SilentStream if stream => send_stream(conn, Vec::new()).await,
        Fault::EmptyStream | Fault::SilentStream => {
            conn.send_json(200, &[], &openai::empty_completion(frame)).await
        }
        Fault::Hang => hang(conn, stream).await,
        Fault::KeepAliveOnly { every } => keep_alive_only(conn, stream, *every).await,
        Fault::HtmlBody => html_body(conn).await,
    }
}

/// A fault in Anthropic's shapes: `{"type":"error","error":{…}}` bodies, `retry-after` on a 429, a
/// 529 `overloaded_error`, "prompt is too long", and streams cut or empty as Anthropic's would be.
async fn anthropic_fault(
    conn: &mut Conn,
    frame: &Frame<'_>,
    fault: &Fault,
    stream: bool,
) -> std::io::Result<()> {
    match fault {
        Fault::RateLimited { retry_after } => {
            let headers: Vec<(&str, String)> =
                retry_after.iter().map(|v| ("retry-after", v.clone())).collect();
            conn.send_json(429, &headers, &anthropic::rate_limited()).await
        }
        Fault::QuotaExhausted => {
            let error = anthropic::error(
                "billing_error",
                "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing.",
            );
            conn.send_json(402, &[], &error).await
        }
        Fault::ServerError { status, message } => {
            let status = sane_status(*status);
            conn.send_json(status, &[], &anthropic::server_error(status, message)).await
        }
        Fault::ContextLengthExceeded { limit, requested } => {
            conn.send_json(400, &[], &anthropic::prompt_too_long(*limit, *requested)).await
        }
        // No terminating chunk: the caller closes the connection.
        Fault::CutStream(chunks) if stream => {
            send_events(conn, anthropic::cut_stream_events(frame, chunks)).await
        }
        Fault::CutStream(chunks) => {
            let reply = Reply { chunks: chunks.clone(), ..Reply::default() };
            send_half_json(conn, &anthropic::message(frame, &reply, None)).await
        }
        Fault::SilentStream if stream => send_stream(conn, Vec::new()).await,
        Fault::EmptyStream if stream => send_stream(conn, anthropic::empty_stream_events(frame)).await,
        Fault::EmptyStream | Fault::SilentStream => {
            conn.send_json(200, &[], &anthropic::empty_message(frame)).await
        }
        Fault::Hang => hang(conn, stream).await,
        Fault::KeepAliveOnly { every } => keep_alive_only(conn, stream, *every).await,
        Fault::HtmlBody => html_body(conn).await,
    }
}
