//! The script: what the scripted server answers, plus the shared state
//! (queue of steps, recorded requests, live-connection count).
//!
//! Everything here is protocol-agnostic: a [`Step`] describes *what* the
//! model says (or how it fails); the wire rendering lives in
//! [`crate::openai`] (and, later, other protocol modules).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;

use crate::cache::{self, Prompt};
use crate::count::Parts;

/// One scripted answer to one `POST /v1/chat/completions` request.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// A successful completion (streamed as SSE or as a single JSON body,
    /// depending on the request's `"stream"` flag).
    Respond(Reply),
    /// A failure mode (HTTP error, broken stream, hang, ...).
    Fault(Fault),
    /// Wait for the given duration (before anything is written), then
    /// answer with the inner step.
    Delayed(Duration, Box<Step>),
    /// Answer with the inner step, the stream's bytes written `bytes` at a
    /// time, one write every `every`: a slow server whose events arrive in
    /// parts. Only a streamed reply is paced; a fault or a JSON body goes out
    /// as it would.
    Trickled {
        /// The bytes of each write.
        bytes: usize,
        /// The pause between two writes.
        every: Duration,
        /// What is answered.
        step: Box<Step>,
    },
}

/// A successful model reply.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Reply {
    /// Content in emission order.
    pub chunks: Vec<Chunk>,
    /// Explicit finish reason; when `None` it is inferred
    /// (see [`Reply::effective_finish_reason`]).
    pub finish_reason: Option<String>,
    /// `(prompt_tokens, completion_tokens)`; when `Some`, a usage chunk is
    /// streamed (and `usage` is set in non-stream replies).
    pub usage: Option<(u64, u64)>,
    /// The usage object's JSON text, sent verbatim wherever the wire format puts a usage object
    /// (OpenAI's usage chunk, the Responses API's `response.usage`, Anthropic's `message_start` and
    /// `message_delta`): it may be what no JSON encoder writes (`NaN`, a number past 2^64 − 1).
    /// When set it is the reply's usage, whatever `usage` or `report_usage` say.
    pub raw_usage: Option<String>,
}

impl Reply {
    /// The finish reason actually sent: the explicit one, else
    /// `"tool_calls"` when the reply contains any tool call, else `"stop"`.
    pub fn effective_finish_reason(&self) -> String {
        if let Some(reason) = &self.finish_reason {
            return reason.clone();
        }
        if self.chunks.iter().any(|c| matches!(c, Chunk::ToolCall { .. })) {
            "tool_calls".to_string()
        } else {
            "stop".to_string()
        }
    }
}

/// A usage report as a reply carries it on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Usage {
    pub prompt: u64,
    pub completion: u64,
    /// Of `prompt`, the tokens read from the prompt cache; `None`: no cache figure on the wire.
    pub cached: Option<u64>,
    /// The reply's [`Reply::raw_usage`] goes where the usage object goes: the renderers put
    /// [`RAW_USAGE`] there, which the sender replaces with the raw text.
    pub raw: bool,
}

/// What a renderer writes where a raw usage object goes (a JSON string), replaced by the raw text
/// before the answer is sent ([`with_raw_usage`]).
pub(crate) const RAW_USAGE: &str = "@@scripted-raw-usage@@";

impl Usage {
    /// The usage the reply scripts, if any (no cache figure).
    pub fn scripted(reply: &Reply) -> Option<Usage> {
        if reply.raw_usage.is_some() {
            return Some(Usage { prompt: 0, completion: 0, cached: None, raw: true });
        }
        reply.usage.map(|(prompt, completion)| Usage { prompt, completion, cached: None, raw: false })
    }
}

/// `text` as rendered, with the reply's raw usage text where the renderer marked it.
pub(crate) fn with_raw_usage(text: String, reply: &Reply) -> String {
    match &reply.raw_usage {
        Some(raw) => text.replace(&format!("\"{RAW_USAGE}\""), raw),
        None => text,
    }
}

/// A piece of model output.
#[derive(Debug, Clone, PartialEq)]
pub enum Chunk {
    /// Visible assistant text (`delta.content`).
    Text(String),
    /// Reasoning text (`delta.reasoning_content`, vLLM/DeepSeek style). On
    /// `/v1/messages`, consecutive ones form one `thinking` block, signed by
    /// the server.
    Reasoning(String),
    /// An Anthropic `thinking` block with its `signature` (on the OpenAI
    /// endpoint: reasoning text, no signature).
    Thinking {
        /// The thinking text.
        text: String,
        /// The signature the server sends with it.
        signature: String,
    },
    /// An Anthropic `redacted_thinking` block's `data` (not rendered on the
    /// OpenAI endpoint).
    RedactedThinking(String),
    /// A function tool call. `arguments` is the raw JSON text sent on the
    /// wire (split across several deltas when streamed, unless `whole`).
    ToolCall {
        /// The call's id.
        id: String,
        /// The tool's name.
        name: String,
        /// The raw arguments text.
        arguments: String,
        /// Streamed in one delta, so in one SSE event however long (a model
        /// that writes a big file in one piece), rather than split.
        whole: bool,
    },
}

/// Failure modes the server can simulate.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// HTTP 429 with an OpenAI `rate_limit_exceeded` body, plus a
    /// `Retry-After` header when `Some`.
    RateLimited {
        /// The `Retry-After` header's value, sent verbatim (`"2"`).
        retry_after: Option<String>,
    },
    /// The account's quota used up: OpenAI's 429 `insufficient_quota` (with a `Retry-After` that
    /// waiting would not honour), Anthropic's 402 `billing_error`.
    QuotaExhausted,
    /// Any HTTP error status (500/502/503, ...) with an OpenAI error body.
    ServerError {
        /// The HTTP status.
        status: u16,
        /// The error body's `message`.
        message: String,
    },
    /// HTTP 200 SSE: sends the chunks' deltas, then closes the connection
    /// without a finish reason, without `[DONE]` and without the terminating
    /// HTTP chunk (so an HTTP client sees an incomplete body).
    CutStream(Vec<Chunk>),
    /// HTTP 200 SSE that only carries `data: [DONE]`.
    EmptyStream,
    /// HTTP 200 SSE with no body at all: llama-cpp-python's answer, when streaming, to a prompt over
    /// its context (the error is raised after the headers went out). Non-streaming: as `EmptyStream`.
    SilentStream,
    /// HTTP 400 `context_length_exceeded`, worded like OpenAI/vLLM.
    ContextLengthExceeded {
        /// The context length the message states.
        limit: u64,
        /// The prompt length the message says was requested.
        requested: u64,
    },
    /// Streaming: sends the 200 SSE response head, then nothing until the
    /// client disconnects. Non-streaming: sends nothing at all.
    Hang,
    /// A 200 SSE stream of nothing but comments (`: keepalive`), one every `every`, until the
    /// client disconnects: bytes flow, no event ever comes. Non-streaming: as `Hang`.
    KeepAliveOnly {
        /// How long between two comments.
        every: Duration,
    },
    /// HTTP 200 with an HTML page as the body (a proxy's or a captive portal's answer), whatever
    /// was asked for.
    HtmlBody,
}

/// A request as the server received it (recorded before it is answered).
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The request target as sent (path plus query string, if any).
    pub path: String,
    /// Header names lowercased, values trimmed, in received order.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON, or `Value::Null` when empty / not JSON.
    pub body: Value,
    /// When the server had read the whole request: its own log's clock, by which tests tell which
    /// requests were in flight together.
    pub received: std::time::Instant,
}

impl RecordedRequest {
    /// The first header with that name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The path without its query string.
    pub fn path_only(&self) -> &str {
        strip_query(&self.path)
    }

    /// Whether this is a chat request: `POST /v1/chat/completions`, Anthropic's `POST
    /// /v1/messages` or the Responses API's `POST /v1/responses`.
    pub fn is_chat(&self) -> bool {
        self.method == "POST"
            && matches!(self.path_only(), crate::CHAT_PATH | crate::MESSAGES_PATH | crate::RESPONSES_PATH)
    }
}

pub(crate) fn strip_query(target: &str) -> &str {
    target.split(['?', '#']).next().unwrap_or(target)
}

/// Computes a step for a request when the script queue is empty.
pub type Responder = Arc<dyn Fn(&Value) -> Step + Send + Sync + 'static>;

/// Static server configuration.
#[derive(Clone)]
pub(crate) struct Config {
    pub model: String,
    pub max_model_len: Option<u64>,
    pub responder: Option<Responder>,
    /// The window the server enforces with its own count (declared or not).
    pub window: Option<u64>,
    /// Like Ollama's default: accept an over-long prompt, keep only this many tokens, say nothing.
    pub silent_truncation_at: Option<u64>,
    /// Serve vLLM's `POST /tokenize` (else it is a 404, as on a server without one).
    pub tokenize_endpoint: bool,
    /// Serve Ollama's `POST /api/show` with this `num_ctx` (else a 404).
    pub ollama_num_ctx: Option<u64>,
    /// Serve llama.cpp's `GET /props` with this `n_ctx` (else a 404).
    pub props_n_ctx: Option<u64>,
    /// Every successful reply reports usage: the server's own count and cache of the prompt.
    pub report_usage: bool,
}

#[derive(Default)]
struct Inner {
    queue: VecDeque<Step>,
    requests: Vec<RecordedRequest>,
    counted: Vec<u64>,
    cached: Vec<u64>,
    refused: usize,
    /// The prompts of the chat requests accepted so far: what the prompt cache holds.
    prompts: Vec<Prompt>,
}

/// State shared between the [`crate::ScriptedServer`] handle and the
/// connection tasks.
pub(crate) struct State {
    pub config: Config,
    inner: Mutex<Inner>,
    completions: AtomicU64,
    active: AtomicUsize,
    /// Whether the prompt cache still serves prefixes (a server whose cache was turned off stops).
    caching: std::sync::atomic::AtomicBool,
}

impl State {
    pub fn new(config: Config, script: Vec<Step>) -> Self {
        State {
            config,
            inner: Mutex::new(Inner {
                queue: script.into(),
                requests: Vec::new(),
                counted: Vec::new(),
                cached: Vec::new(),
                refused: 0,
                prompts: Vec::new(),
            }),
            completions: AtomicU64::new(0),
            active: AtomicUsize::new(0),
            caching: std::sync::atomic::AtomicBool::new(true),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave `Inner` inconsistent
        // (all mutations are single push/pop calls), so ignore poisoning.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn push(&self, steps: impl IntoIterator<Item = Step>) {
        self.lock().queue.extend(steps);
    }

    pub fn remaining(&self) -> usize {
        self.lock().queue.len()
    }

    pub fn record(&self, request: RecordedRequest) {
        self.lock().requests.push(request);
    }

    /// Records the server's own count of a chat request (`parts`) and answers how much of it the
    /// prompt cache serves; `refused` when it was over the window (it then reads nothing from the
    /// cache and adds nothing to it).
    pub fn record_count(&self, parts: &Parts, prompt: Prompt, refused: bool) -> u64 {
        let mut inner = self.lock();
        let caching = self.caching.load(Ordering::SeqCst);
        let cached =
            if refused || !caching { 0 } else { cache::cached_tokens(&prompt, parts, &inner.prompts) };
        inner.counted.push(parts.total());
        inner.cached.push(cached);
        if refused {
            inner.refused += 1;
        } else {
            inner.prompts.push(prompt);
        }
        cached
    }

    pub fn counted(&self) -> Vec<u64> {
        self.lock().counted.clone()
    }

    /// From now on the prompt cache serves nothing (and reports 0 cached tokens).
    pub fn stop_caching(&self) {
        self.caching.store(false, Ordering::SeqCst);
    }

    pub fn cached(&self) -> Vec<u64> {
        self.lock().cached.clone()
    }

    pub fn refused(&self) -> usize {
        self.lock().refused
    }

    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.lock().requests.clone()
    }

    pub fn chat_request_count(&self) -> usize {
        self.lock().requests.iter().filter(|r| r.is_chat()).count()
    }

    /// Pops the next scripted step, falling back to the responder.
    pub fn next_step(&self, body: &Value) -> Option<Step> {
        let popped = self.lock().queue.pop_front();
        // Call the responder outside the lock: it may be slow or re-enter.
        popped.or_else(|| self.config.responder.as_ref().map(|r| r(body)))
    }

    /// A fresh completion id: `chatcmpl-1`, `chatcmpl-2`, ...
    pub fn next_completion_id(&self) -> String {
        format!("chatcmpl-{}", self.completions.fetch_add(1, Ordering::Relaxed) + 1)
    }

    pub fn active_connections(&self) -> usize {
        self.active.load(Ordering::SeqCst)
    }

    /// Counts a live connection until the guard is dropped.
    pub fn connection_guard(self: &Arc<Self>) -> ConnectionGuard {
        self.active.fetch_add(1, Ordering::SeqCst);
        ConnectionGuard(self.clone())
    }
}

pub(crate) struct ConnectionGuard(Arc<State>);

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::SeqCst);
    }
}
