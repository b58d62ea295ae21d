//! Test support for agentd: a **scripted model server** that speaks the real
//! OpenAI chat-completions wire protocol over real HTTP/1.1 on
//! `127.0.0.1:<random port>`, plus a tiny sample workspace for demos.
//!
//! Tests point agentd's model client at [`ScriptedServer::base_url`] and
//! script what "the model" answers, one [`Step`] per
//! `POST /v1/chat/completions`:
//!
//! ```no_run
//! use agentd_test_support::*;
//! use serde_json::json;
//!
//! # async fn demo() {
//! let server = ScriptedServer::start(vec![
//!     sse(vec![reasoning("look first"), tool_call("read_file", json!({"path": "src/lib.rs"}))]),
//!     rate_limited(Some("0")),
//!     sse_with_usage(vec![text("fixed it"), finish("changed - to +")], 1200, 40),
//! ])
//! .await;
//! let base_url = server.base_url(); // "http://127.0.0.1:PORT/v1"
//! // ... run the code under test against `base_url` ...
//! assert!(server.wait_for_requests(3, std::time::Duration::from_secs(5)).await);
//! let bodies = server.chat_requests(); // what the client actually sent
//! # let _ = (base_url, bodies);
//! # }
//! ```
//!
//! What the server does:
//! - `GET /v1/models` lists the configured model (with vLLM's
//!   `max_model_len` when configured).
//! - `POST /tokenize` (vLLM's counting endpoint) answers the o200k count of
//!   `prompt`, when [`ServerBuilder::tokenize_endpoint`] is on; else 404.
//! - `POST /api/show` (Ollama) and `GET /props` (llama.cpp) declare a
//!   context window when [`ServerBuilder::ollama_num_ctx`] /
//!   [`ServerBuilder::props_n_ctx`] set one; else 404.
//! - `POST /v1/chat/completions` pops the next step (or asks the
//!   [responder](ServerBuilder::responder) when the queue is empty) and
//!   answers it as SSE when the body has `"stream": true`, else as one JSON
//!   completion. Tool-call arguments are split across several deltas so
//!   clients are exercised on reassembly (unless scripted whole:
//!   [`tool_call_whole`], one event however long). Faults ([`Fault`])
//!   simulate rate limits, 5xx, cut and empty streams, context overflow and
//!   hangs; [`trickled`] writes a reply's stream a few bytes at a time.
//! - `POST /v1/messages` (Anthropic Messages; needs an `anthropic-version`
//!   header) answers the same steps in Anthropic's wire format: SSE events
//!   with `text`, `thinking` (+ `signature_delta`), `redacted_thinking` and
//!   `tool_use` blocks, or one `message` body; faults in Anthropic's shapes
//!   (429 `rate_limit_error` + `retry-after`, 529 `overloaded_error`, 400
//!   "prompt is too long: N tokens > M maximum"). `POST
//!   /v1/messages/count_tokens` answers `{"input_tokens": n}` by the server's
//!   own count, and `GET /v1/models/{id}` Anthropic's model object (with
//!   `context_window` when `max_model_len` is set). The window and silent
//!   truncation apply to both chat endpoints.
//! - `POST /v1/responses` (OpenAI's Responses API) answers the same steps as
//!   `response.*` SSE events (reasoning items carry `encrypted_content`: a
//!   `thinking` chunk's signature), or one response object; its body is read
//!   as the chat-completions body of the same conversation
//!   ([`responses_as_chat`]) to be counted, cached and shown to a responder;
//!   over the window it refuses in the Responses API's words (no number).
//! - With [`ServerBuilder::report_usage`], every successful chat reply reports
//!   usage like a real provider: the prompt as the server counted it, and the
//!   part its prompt cache served (the longest message-level prefix shared
//!   with an earlier request, 0 under [`MIN_CACHED_PREFIX`]), recorded per
//!   request in [`ScriptedServer::cached`] beside [`ScriptedServer::counted`].
//! - Every request is recorded before it is answered
//!   ([`ScriptedServer::requests`]); an exhausted script answers HTTP 500.
//! - Malformed HTTP gets a 400; nothing a client sends can panic the server.
//!
//! Layout: `script` (steps and shared state), `openai`, `anthropic` and `responses`
//! (step → wire rendering, pure), `count` (the server's token count) and
//! `cache` (its prompt cache), `http` (hand-rolled HTTP/1.1 on tokio),
//! `server` (handle and builder; routing, chat answers, faults and sending
//! in its submodules).
// A crate of test helpers: a failed expectation here is a failed test, so it may panic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod anthropic;
pub mod browser;
mod cache;
pub mod corpus;
mod count;
pub mod daemon;
mod http;
pub mod mcp;
pub mod nats;
mod openai;
pub mod pip;
mod requests;
mod responses;
mod script;
pub mod seeded;
mod server;
pub mod tmpfs;
pub mod workspace;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{json, Value};

pub use cache::MIN_CACHED_PREFIX;
pub use count::{count_request, tokens as count_text_tokens};
pub use requests::{
    is_coder_request, is_lead_request, is_summary_request, offers_tool, SUMMARISER_SYSTEM_START,
};
pub use responses::as_chat as responses_as_chat;
pub use script::{Chunk, Fault, RecordedRequest, Reply, Responder, Step};
pub use server::{ScriptedServer, ServerBuilder};

/// Model id served when none is configured.
pub const DEFAULT_MODEL: &str = "gpt-4o";
/// Path of the chat-completions endpoint.
pub const CHAT_PATH: &str = "/v1/chat/completions";
/// Path of the model-list endpoint.
pub const MODELS_PATH: &str = "/v1/models";
/// Path of OpenAI's Responses API endpoint.
pub const RESPONSES_PATH: &str = "/v1/responses";
/// Path of Anthropic's Messages endpoint.
pub const MESSAGES_PATH: &str = "/v1/messages";
/// Path of Anthropic's token-counting endpoint.
pub const COUNT_TOKENS_PATH: &str = "/v1/messages/count_tokens";
/// Path of vLLM's (and llama.cpp's) token-counting endpoint, at the server root; served only when
/// [`ServerBuilder::tokenize_endpoint`] is on.
pub const TOKENIZE_PATH: &str = "/tokenize";
/// Path of Ollama's model-details endpoint, at the server root; served only when
/// [`ServerBuilder::ollama_num_ctx`] is set.
pub const OLLAMA_SHOW_PATH: &str = "/api/show";
/// Path of llama.cpp's server-properties endpoint, at the server root; served only when
/// [`ServerBuilder::props_n_ctx`] is set.
pub const PROPS_PATH: &str = "/props";

/// A `reqwest` client builder for a test's own HTTP requests (the API, the WebDriver, the fleet's
/// listeners): reqwest is built without a TLS provider of its own, and a client cannot exist before
/// the process has one, so this installs ring first, as the daemon's `install_tls_provider` does.
pub fn http_client() -> reqwest::ClientBuilder {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    reqwest::Client::builder()
}

static NEXT_CALL_ID: AtomicU64 = AtomicU64::new(1);

/// A successful streamed reply with the finish reason inferred
/// (`"tool_calls"` if any tool call, else `"stop"`) and no usage.
pub fn sse(chunks: Vec<Chunk>) -> Step {
    Step::Respond(Reply { chunks, ..Reply::default() })
}

/// Like [`sse`], plus a usage chunk with these token counts.
pub fn sse_with_usage(chunks: Vec<Chunk>, prompt: u64, completion: u64) -> Step {
    Step::Respond(Reply { chunks, usage: Some((prompt, completion)), ..Reply::default() })
}

/// Like [`sse`], with this usage object sent verbatim in the wire format's place for it
/// ([`Reply::raw_usage`]): `{"prompt_tokens": NaN, "completion_tokens": 4}`, whatever a server
/// might say.
pub fn sse_with_raw_usage(chunks: Vec<Chunk>, raw_usage: &str) -> Step {
    Step::Respond(Reply { chunks, raw_usage: Some(raw_usage.to_string()), ..Reply::default() })
}

/// A successful reply with an explicit finish reason (e.g. `"length"`).
pub fn sse_with_finish(chunks: Vec<Chunk>, finish_reason: &str) -> Step {
    Step::Respond(Reply { chunks, finish_reason: Some(finish_reason.to_string()), ..Reply::default() })
}

/// Visible assistant text.
pub fn text(s: &str) -> Chunk {
    Chunk::Text(s.to_string())
}

/// Reasoning text (`reasoning_content`).
pub fn reasoning(s: &str) -> Chunk {
    Chunk::Reasoning(s.to_string())
}

/// An Anthropic `thinking` block with its signature (reasoning text on the
/// OpenAI endpoint).
pub fn thinking(text: &str, signature: &str) -> Chunk {
    Chunk::Thinking { text: text.to_string(), signature: signature.to_string() }
}

/// An Anthropic `redacted_thinking` block (nothing on the OpenAI endpoint).
pub fn redacted_thinking(data: &str) -> Chunk {
    Chunk::RedactedThinking(data.to_string())
}

/// A tool call with a fresh unique id (`call_<n>`); `args` is serialized
/// to JSON text.
pub fn tool_call(name: &str, args: Value) -> Chunk {
    let n = NEXT_CALL_ID.fetch_add(1, Ordering::Relaxed);
    tool_call_with_id(&format!("call_{n}"), name, args)
}

/// A tool call with an explicit id.
pub fn tool_call_with_id(id: &str, name: &str, args: Value) -> Chunk {
    Chunk::ToolCall { id: id.to_string(), name: name.to_string(), arguments: args.to_string(), whole: false }
}

/// A tool call whose arguments stream in one delta, so in one SSE event however long (every other
/// tool call's are split across several); fresh unique id. A call of several megabytes is one
/// event of several megabytes, as a model that writes a big file in one piece sends it.
pub fn tool_call_whole(name: &str, args: Value) -> Chunk {
    let n = NEXT_CALL_ID.fetch_add(1, Ordering::Relaxed);
    Chunk::ToolCall {
        id: format!("call_{n}"),
        name: name.to_string(),
        arguments: args.to_string(),
        whole: true,
    }
}

/// A tool call whose arguments text is sent verbatim (e.g. malformed JSON
/// to exercise argument repair); fresh unique id.
pub fn tool_call_raw(name: &str, raw_arguments: &str) -> Chunk {
    let n = NEXT_CALL_ID.fetch_add(1, Ordering::Relaxed);
    Chunk::ToolCall {
        id: format!("call_{n}"),
        name: name.to_string(),
        arguments: raw_arguments.to_string(),
        whole: false,
    }
}

/// `tool_call("finish", {"summary": summary})`.
pub fn finish(summary: &str) -> Chunk {
    tool_call("finish", json!({ "summary": summary }))
}

/// What a scripted responder tells requests apart by: whether the request offers `delegate` (the
/// lead's, in the default team) and how many tool results its messages hold.
pub fn lead_and_results(body: &Value) -> (bool, usize) {
    let lead = body["tools"].as_array().into_iter().flatten().any(|t| t["function"]["name"] == "delegate");
    let results = body["messages"].as_array().into_iter().flatten().filter(|m| m["role"] == "tool").count();
    (lead, results)
}

/// `tool_call("delegate", {"to": to, "objective": objective})`.
pub fn delegate(to: &str, objective: &str) -> Chunk {
    tool_call("delegate", json!({ "to": to, "objective": objective }))
}

/// HTTP 429, with `Retry-After` when given.
pub fn rate_limited(retry_after: Option<&str>) -> Step {
    Step::Fault(Fault::RateLimited { retry_after: retry_after.map(str::to_string) })
}

/// The account's quota used up: OpenAI's 429 `insufficient_quota`, Anthropic's 402 `billing_error`.
pub fn quota_exhausted() -> Step {
    Step::Fault(Fault::QuotaExhausted)
}

/// An HTTP error status with an OpenAI error body.
pub fn server_error(status: u16, msg: &str) -> Step {
    Step::Fault(Fault::ServerError { status, message: msg.to_string() })
}

/// HTTP 529 with Anthropic's `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`.
pub fn overloaded() -> Step {
    Step::Fault(Fault::ServerError { status: 529, message: "Overloaded".to_string() })
}

/// A 200 SSE stream that breaks off after these chunks.
pub fn cut_stream(chunks: Vec<Chunk>) -> Step {
    Step::Fault(Fault::CutStream(chunks))
}

/// A 200 SSE stream carrying only `data: [DONE]`.
pub fn empty_stream() -> Step {
    Step::Fault(Fault::EmptyStream)
}

/// HTTP 200 SSE with no body at all (llama-cpp-python's over-long prompt while streaming).
pub fn silent_stream() -> Step {
    Step::Fault(Fault::SilentStream)
}

/// HTTP 400 `context_length_exceeded`.
pub fn context_length_exceeded(limit: u64, requested: u64) -> Step {
    Step::Fault(Fault::ContextLengthExceeded { limit, requested })
}

/// Sends the SSE response head, then nothing until the client hangs up.
pub fn hang() -> Step {
    Step::Fault(Fault::Hang)
}

/// A 200 SSE stream of `: keepalive` comments every `every`, and never an event.
pub fn keep_alive_only(every: Duration) -> Step {
    Step::Fault(Fault::KeepAliveOnly { every })
}

/// HTTP 200 with an HTML page as its body.
pub fn html_body() -> Step {
    Step::Fault(Fault::HtmlBody)
}

/// Waits `delay` before answering with `step`.
pub fn delayed(delay: Duration, step: Step) -> Step {
    Step::Delayed(delay, Box::new(step))
}

/// Answers with `step`, its stream written `bytes` at a time with `every` between two writes (see
/// [`Step::Trickled`]).
pub fn trickled(bytes: usize, every: Duration, step: Step) -> Step {
    Step::Trickled { bytes, every, step: Box::new(step) }
}

/// A terse system prompt, one `read_file` tool and at most 256 output tokens.
pub fn chat_request(model: &str, messages: Vec<agentd_protocol::Message>) -> agentd_protocol::ChatRequest {
    agentd_protocol::ChatRequest {
        model: model.to_string(),
        system: "You are terse.".into(),
        messages,
        tools: vec![agentd_protocol::ToolSchema {
            name: "read_file".into(),
            description: "Read a file".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        }],
        tool_choice_none: false,
        max_tokens: Some(256),
        thinking_budget: None,
        cache_key: None,
    }
}
