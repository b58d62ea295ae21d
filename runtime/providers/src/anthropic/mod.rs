//! The Anthropic Messages client: the streamed call, the error taxonomy (429, 529 overloaded,
//! "prompt is too long"), the window probe and `count_tokens`. The body (thinking blocks sent back
//! byte-identical, tool results merged into the user turn that follows the tool calls, prompt-cache
//! breakpoints, the thinking budget) is [`body`]'s, the event assembler [`stream`]'s.

pub(crate) mod body;
pub(crate) mod limits;
pub(crate) mod refusals;
pub(crate) mod stream;

use crate::error::truncate_chars;
use crate::http::{exchange, Http, Reply};
use crate::surface::client_surface;
use crate::wire::{window_number, WireFormat};
use agentd_protocol::{AnomalyKind, ChatRequest, ChatResponse, ProviderError, RetryAfter};
use agentd_protocol::{PromptCache, Tokens};
use body::{AnthropicBody, CountTextBody};
use refusals::classify_anthropic_http;
use reqwest::RequestBuilder;
use serde::Serialize;
use serde_json::Value;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

/// The API version every request names (`anthropic-version`).
pub const ANTHROPIC_VERSION: &str = "2023-06-01";
/// A client for the Anthropic Messages API (or a server speaking it).
#[derive(Debug, Clone)]
pub struct AnthropicClient {
    http: Http,
    /// Per model: the tokens `count_tokens` reports around a one-token user text (the message
    /// framing), subtracted by [`count_text`](Self::count_text). Shared by clones.
    text_overhead: Arc<Mutex<HashMap<String, u64>>>,
}

client_surface! {
    AnthropicClient,
    example: "https://api.anthropic.com/v1",
    /// The key is sent as `x-api-key`.
}

impl AnthropicClient {
    /// The `max_tokens` sent: Anthropic requires one, and with thinking it must exceed the budget.
    pub fn max_tokens(req: &ChatRequest) -> u32 {
        limits::max_tokens(req)
    }

    /// What [`chat`](Self::chat) POSTs to `{base}/messages`; its serialisation is the wire. With a
    /// thinking budget, `max_tokens` is at least the budget plus [`THINKING_ANSWER_ROOM`] (it must
    /// exceed the budget).
    pub fn body<'a>(&self, req: &'a ChatRequest) -> AnthropicBody<'a> {
        AnthropicBody::chat(req)
    }

    /// What [`count_tokens`](Self::count_tokens) POSTs to `{base}/messages/count_tokens`: the
    /// message body without `max_tokens` and `stream`.
    pub fn count_tokens_body<'a>(&self, req: &'a ChatRequest) -> AnthropicBody<'a> {
        AnthropicBody::count(req)
    }

    /// The window the server declares for `model`: `GET {base}/models/{model}`, its
    /// `max_input_tokens` or `context_window` when present. Anthropic's own API may declare none:
    /// then `None` (as for an unknown model or a server without the endpoint).
    pub async fn probe_window(&self, model: &str) -> Result<Option<Tokens>, ProviderError> {
        let url = self.http.url(&format!("/models/{}", encode_path_segment(model)));
        let Reply { status, retry_after, body: text } =
            exchange(self.authorize(self.http.get(&url)), &url).await?;
        match status {
            200..=299 => Ok(serde_json::from_str::<Value>(&text).ok().and_then(|v| window_from_model(&v))),
            404 | 405 => Ok(None),
            _ => Err(classify_anthropic_http(status, retry_after, &text)),
        }
    }

    /// The input tokens of `req` by the provider's own count: `POST {base}/messages/count_tokens`
    /// with [`count_tokens_body`](Self::count_tokens_body), answered with `{"input_tokens": n}`.
    pub async fn count_tokens(&self, req: &ChatRequest) -> Result<u64, ProviderError> {
        self.count_body_tokens(&self.count_tokens_body(req)).await
    }

    async fn count_body_tokens(&self, body: &impl Serialize) -> Result<u64, ProviderError> {
        let url = self.http.url("/messages/count_tokens");
        let Reply { status, retry_after, body: text } =
            exchange(self.authorize(self.http.post(&url).json(body)), &url).await?;
        if !(200..=299).contains(&status) {
            return Err(classify_anthropic_http(status, retry_after, &text));
        }
        serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v.get("input_tokens").and_then(Value::as_u64))
            .ok_or_else(|| ProviderError::StreamAnomaly {
                kind: AnomalyKind::Parse,
                message: format!(
                    "count_tokens answered without `input_tokens`: {}",
                    truncate_chars(&text, 200)
                ),
            })
    }

    /// The tokens of a bare `text` for `model`, by `count_tokens`: the count of a user message made
    /// of the text, less the message's framing (measured once per model around a one-token text).
    /// `None` when the server has no counting endpoint (404, 405, 501). A whitespace-only text —
    /// which the API refuses as a message — is counted as its bytes (an overcount: the safe side).
    pub async fn count_text(&self, model: &str, text: &str) -> Result<Option<u64>, ProviderError> {
        if text.is_empty() {
            return Ok(Some(0));
        }
        if text.trim().is_empty() {
            return Ok(Some(text.len() as u64));
        }
        let known = self.text_overhead.lock().unwrap_or_else(|e| e.into_inner()).get(model).copied();
        let overhead = match known {
            Some(n) => n,
            None => match self.count_body_tokens(&CountTextBody::new(model, "a")).await {
                Ok(n) => {
                    let n = n.saturating_sub(1);
                    self.text_overhead.lock().unwrap_or_else(|e| e.into_inner()).insert(model.to_string(), n);
                    n
                }
                Err(e) if no_endpoint(&e) => return Ok(None),
                Err(e) => return Err(e),
            },
        };
        match self.count_body_tokens(&CountTextBody::new(model, text)).await {
            Ok(n) => Ok(Some(n.saturating_sub(overhead).max(1))),
            Err(e) if no_endpoint(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// Anthropic Messages: `x-api-key` and `anthropic-version`, `POST {base}/messages` streamed; an
/// empty stream is an empty answer; `max_tokens` is always sent (and so always claimed); the probe
/// of `/models/{id}`; `count_tokens`.
impl WireFormat for AnthropicClient {
    type Body<'a> = AnthropicBody<'a>;
    type Assembler = stream::Assembler;
    const CHAT_PATH: &'static str = "/messages";
    // agentd marks the request's prefix with `cache_control`, so every Anthropic server caches it.
    const PROMPT_CACHE: Option<PromptCache> = Some(PromptCache::ANTHROPIC);

    fn connect(http: Http) -> AnthropicClient {
        AnthropicClient { http, text_overhead: Arc::new(Mutex::new(HashMap::new())) }
    }

    fn http(&self) -> &Http {
        &self.http
    }

    fn authorize(&self, request: RequestBuilder) -> RequestBuilder {
        let request = request.header("anthropic-version", ANTHROPIC_VERSION);
        match self.http.api_key() {
            Some(key) => request.header("x-api-key", key),
            None => request,
        }
    }

    fn body<'a>(&self, req: &'a ChatRequest) -> AnthropicBody<'a> {
        AnthropicBody::chat(req)
    }

    fn classify_http(status: u16, retry_after: Option<RetryAfter>, body: &str) -> ProviderError {
        classify_anthropic_http(status, retry_after, body)
    }

    fn from_json_body(body: &str) -> Result<ChatResponse, ProviderError> {
        stream::from_json_body(body)
    }

    /// The `max_tokens` sent, which the API requires.
    fn output_reserve(req: &ChatRequest) -> Tokens {
        Tokens(u64::from(AnthropicClient::max_tokens(req)))
    }

    fn probe_window(
        &self,
        model: &str,
    ) -> impl Future<Output = Result<Option<Tokens>, ProviderError>> + Send {
        AnthropicClient::probe_window(self, model)
    }

    /// `POST {base}/messages/count_tokens`: a user message of the text, less its framing.
    fn count_text(
        &self,
        model: &str,
        text: &str,
    ) -> impl Future<Output = Result<Option<u64>, ProviderError>> + Send {
        AnthropicClient::count_text(self, model, text)
    }
}

/// A refusal that says the server has no such endpoint (an Anthropic-compatible proxy without
/// `count_tokens`).
fn no_endpoint(e: &ProviderError) -> bool {
    matches!(
        e,
        ProviderError::Rejected { status: 404 | 405 | 501, .. } | ProviderError::Server { status: 501, .. }
    )
}

/// A model id as one URL path segment (ids are plain, but a `/` or space must not change the path).
fn encode_path_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b':' | b'@') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `GET /models/{id}`: the declared input window, when there is one.
fn window_from_model(model: &Value) -> Option<Tokens> {
    let entry = model.get("data").and_then(|d| d.as_array()?.first()).unwrap_or(model);
    ["max_input_tokens", "context_window", "context_length", "max_model_len"]
        .iter()
        .find_map(|key| window_number(entry.get(*key)))
}

// ---------------------------------------------------------------------------------------------
// Errors

#[cfg(test)]
mod tests {
    use super::limits::MAX_CACHE_BREAKPOINTS;
    use super::refusals::classify_anthropic_error;
    use super::*;
    use agentd_protocol::ToolSchema;
    use agentd_protocol::{Message, Part, Speaker};
    use serde_json::json;
    use std::time::Duration;

    fn request(messages: Vec<Message>) -> ChatRequest {
        ChatRequest {
            model: "claude-x".into(),
            system: "be brief".into(),
            messages,
            tools: vec![],
            tool_choice_none: false,
            max_tokens: None,
            thinking_budget: None,
            cache_key: None,
        }
    }

    fn client() -> AnthropicClient {
        AnthropicClient::new("http://127.0.0.1:9/v1/", Some(String::new()))
    }

    /// The bodies as the server reads them.
    fn json_body(req: &ChatRequest) -> Value {
        serde_json::to_value(client().body(req)).unwrap()
    }

    fn json_count_body(req: &ChatRequest) -> Value {
        serde_json::to_value(client().count_tokens_body(req)).unwrap()
    }

    fn thinking(text: &str, signature: &str) -> Part {
        Part::Thinking { text: text.into(), signature: Some(signature.into()), redacted: false }
    }

    #[test]
    fn base_url_and_empty_key() {
        let c = client();
        assert_eq!(c.base_url(), "http://127.0.0.1:9/v1");
        assert_eq!(c.http.api_key(), None);
    }

    #[test]
    fn body_system_user_max_tokens_stream() {
        let body = json_body(&request(vec![Message::user("hi")]));
        assert_eq!(
            body,
            json!({
                "model": "claude-x",
                "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
                "max_tokens": 8192,
                "messages": [{"role": "user", "content": [
                    {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}},
                ]}],
                "stream": true,
            })
        );
        let mut req = request(vec![Message::user("hi")]);
        req.system.clear();
        req.max_tokens = Some(100);
        let body = json_body(&req);
        assert!(body.get("system").is_none());
        assert_eq!(body["max_tokens"], json!(100));
        let count = json_count_body(&req);
        assert!(count.get("stream").is_none() && count.get("max_tokens").is_none());
        assert_eq!(count["messages"], body["messages"]);
    }

    #[test]
    fn assistant_thinking_first_then_text_then_tool_use() {
        let assistant = Message::new(
            Speaker::Assistant,
            vec![
                Part::Text { text: "Reading.".into() },
                thinking("first", "sig1"),
                Part::ToolCall {
                    id: "toolu_1".into(),
                    name: "read_file".into(),
                    arguments: r#"{"path":"a"}"#.into(),
                },
                Part::Thinking { text: "ZW5jcnlwdGVk".into(), signature: None, redacted: true },
                Part::Thinking { text: "unsigned, from elsewhere".into(), signature: None, redacted: false },
                Part::ToolCall {
                    id: "toolu_2".into(),
                    name: "list_dir".into(),
                    arguments: "{not json".into(),
                },
            ],
        );
        let body = json_body(&request(vec![Message::user("go"), assistant]));
        assert_eq!(
            body["messages"][1],
            json!({"role": "assistant", "content": [
                {"type": "thinking", "thinking": "first", "signature": "sig1"},
                {"type": "redacted_thinking", "data": "ZW5jcnlwdGVk"},
                {"type": "text", "text": "Reading."},
                {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a"}},
                {"type": "tool_use", "id": "toolu_2", "name": "list_dir", "input": {},
                 "cache_control": {"type": "ephemeral"}},
            ]})
        );
    }

    #[test]
    fn thinking_round_trips_byte_identical() {
        // What a stream delivered, stored as parts, goes back out exactly.
        let text = "Let me think \"carefully\"\n  about 2 + 2…  \u{1F600}\\n";
        let signature = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds+/==";
        let events = [
            format!(
                "event: content_block_start\ndata: {}\n\n",
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}})
            ),
            format!(
                "event: content_block_delta\ndata: {}\n\n",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": &text[..10]}})
            ),
            format!(
                "event: content_block_delta\ndata: {}\n\n",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": &text[10..]}})
            ),
            format!(
                "event: content_block_delta\ndata: {}\n\n",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": signature}})
            ),
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_9\",\"name\":\"finish\",\"input\":{}}}\n\n".into(),
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"summary\\\":\\\"4\\\"}\"}}\n\n".into(),
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"}}\n\n".into(),
        ];
        let pieces: Vec<Result<Vec<u8>, std::io::Error>> =
            events.iter().map(|e| Ok(e.clone().into_bytes())).collect();
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let response = runtime
            .block_on(crate::sse::drive(futures_util::stream::iter(pieces), stream::Assembler::default()))
            .unwrap();
        // Stored and read back as the log does.
        let stored: Message =
            serde_json::from_str(&serde_json::to_string(&response.message).unwrap()).unwrap();
        let results = Message::tool_result("toolu_9", "ok", false);
        let body = json_body(&request(vec![Message::user("2+2?"), stored, results]));
        let block = &body["messages"][1]["content"][0];
        assert_eq!(block["type"], "thinking");
        assert_eq!(block["thinking"].as_str().unwrap().as_bytes(), text.as_bytes());
        assert_eq!(block["signature"].as_str().unwrap().as_bytes(), signature.as_bytes());
        // And on the wire, as bytes: the JSON escapes decode to the same text.
        let wire = serde_json::to_string(&body).unwrap();
        let back: Value = serde_json::from_str(&wire).unwrap();
        assert_eq!(back["messages"][1]["content"][0]["thinking"].as_str(), Some(text));
    }

    #[test]
    fn tool_results_merge_into_one_user_turn_first() {
        let assistant = Message::new(
            Speaker::Assistant,
            vec![
                Part::ToolCall { id: "a".into(), name: "read_file".into(), arguments: "{}".into() },
                Part::ToolCall { id: "b".into(), name: "list_dir".into(), arguments: "{}".into() },
            ],
        );
        let messages = vec![
            Message::user("objective"),
            Message::user("checkpoint"),
            assistant,
            Message::tool_result("a", "fn main() {}", false),
            Message::user("also: the user says hurry"),
            Message::tool_result("b", "", true),
            Message::system("a note"),
            Message::assistant_text("done"),
        ];
        let body = json_body(&request(messages));
        assert_eq!(
            body["messages"],
            json!([
                {"role": "user", "content": [
                    {"type": "text", "text": "objective"},
                    {"type": "text", "text": "checkpoint"},
                ]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "a", "name": "read_file", "input": {}},
                    {"type": "tool_use", "id": "b", "name": "list_dir", "input": {}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "a", "content": "fn main() {}", "is_error": false},
                    {"type": "tool_result", "tool_use_id": "b", "is_error": true},
                    {"type": "text", "text": "also: the user says hurry"},
                    {"type": "text", "text": "a note"},
                ]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "done", "cache_control": {"type": "ephemeral"}},
                ]},
            ])
        );
    }

    #[test]
    fn roles_alternate_and_empty_messages_are_left_out() {
        let messages = vec![
            Message::user("a"),
            Message::new(Speaker::User, vec![Part::Text { text: String::new() }]),
            Message::assistant_text("b"),
            Message::new(Speaker::Assistant, vec![]),
            Message::new(
                Speaker::Assistant,
                vec![
                    thinking("t", "s"),
                    Part::ToolCall { id: "c".into(), name: "n".into(), arguments: "{}".into() },
                ],
            ),
            Message::tool_result("c", "r", false),
        ];
        let body = json_body(&request(messages));
        let turns = body["messages"].as_array().unwrap();
        let roles: Vec<&str> = turns.iter().map(|t| t["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["user", "assistant", "user"]);
        // Merged assistant turn: thinking first.
        assert_eq!(turns[1]["content"][0]["type"], "thinking");
        assert_eq!(turns[1]["content"][1], json!({"type": "text", "text": "b"}));
        for turn in turns {
            assert!(!turn["content"].as_array().unwrap().is_empty());
        }
    }

    #[test]
    fn images_and_joined_text() {
        let m = Message::new(
            Speaker::User,
            vec![
                Part::Text { text: "look".into() },
                Part::Text { text: " here".into() },
                Part::Image { media_type: "image/png".into(), data: "AAAA".into() },
                Part::Text { text: "and say".into() },
            ],
        );
        let body = json_body(&request(vec![m]));
        assert_eq!(
            body["messages"][0]["content"],
            json!([
                {"type": "text", "text": "look here"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
                {"type": "text", "text": "and say", "cache_control": {"type": "ephemeral"}},
            ])
        );
    }

    #[test]
    fn tools_and_tool_choice_none() {
        let mut req = request(vec![Message::user("summarise")]);
        req.tools = vec![ToolSchema {
            name: "read_file".into(),
            description: "Read a file".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        }];
        req.tool_choice_none = true;
        let body = json_body(&req);
        assert_eq!(
            body["tools"],
            json!([{
                "name": "read_file",
                "description": "Read a file",
                "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
                "cache_control": {"type": "ephemeral"},
            }])
        );
        assert_eq!(body["tool_choice"], json!({"type": "none"}));
        req.tools.clear();
        let body = json_body(&req);
        assert!(body.get("tools").is_none() && body.get("tool_choice").is_none());
    }

    #[test]
    fn a_thinking_budget_enables_thinking_and_raises_max_tokens_above_it() {
        let mut req = request(vec![Message::user("think")]);
        req.thinking_budget = Some(2048);
        let body = json_body(&req);
        assert_eq!(body["thinking"], json!({"type": "enabled", "budget_tokens": 2048}));
        assert_eq!(body["max_tokens"], json!(8192), "the default already exceeds 2048 + 4096");
        req.thinking_budget = Some(16_000);
        assert_eq!(json_body(&req)["max_tokens"], json!(20_096));
        req.max_tokens = Some(32_000);
        assert_eq!(json_body(&req)["max_tokens"], json!(32_000), "a larger max_tokens is kept");
        req.max_tokens = Some(100);
        req.thinking_budget = Some(1024);
        assert_eq!(json_body(&req)["max_tokens"], json!(5120));
        // The count sees the same thinking configuration; without a budget there is none.
        assert_eq!(json_count_body(&req)["thinking"], json!({"type": "enabled", "budget_tokens": 1024}));
        req.thinking_budget = None;
        assert!(json_body(&req).get("thinking").is_none());
        assert_eq!(json_body(&req)["max_tokens"], json!(100));
    }

    #[test]
    fn cache_breakpoints_on_tools_system_and_the_last_block_at_most_four() {
        let tool = |name: &str| ToolSchema {
            name: name.into(),
            description: "d".into(),
            parameters: json!({"type": "object"}),
        };
        let assistant = Message::new(
            Speaker::Assistant,
            vec![
                thinking("hm", "sig"),
                Part::ToolCall { id: "t1".into(), name: "read_file".into(), arguments: "{}".into() },
            ],
        );
        let mut req = request(vec![
            Message::user("go"),
            assistant,
            Message::tool_result("t1", "contents", false),
            Message::user("and then"),
        ]);
        req.tools = vec![tool("read_file"), tool("list_dir"), tool("finish")];
        let body = json_body(&req);
        let marked = serde_json::to_string(&body).unwrap().matches("\"cache_control\"").count();
        assert_eq!(marked, 3);
        assert!(marked <= MAX_CACHE_BREAKPOINTS);
        let tools = body["tools"].as_array().unwrap();
        assert!(tools[..2].iter().all(|t| t.get("cache_control").is_none()));
        assert_eq!(tools[2]["cache_control"], json!({"type": "ephemeral"}));
        assert_eq!(body["system"][0]["cache_control"], json!({"type": "ephemeral"}));
        let last = body["messages"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(
            last["content"],
            json!([
                {"type": "tool_result", "tool_use_id": "t1", "content": "contents", "is_error": false},
                {"type": "text", "text": "and then", "cache_control": {"type": "ephemeral"}},
            ])
        );
        // Earlier turns are not marked: the breakpoint moves with the end of the request.
        assert!(body["messages"][1]["content"]
            .as_array()
            .unwrap()
            .iter()
            .all(|b| b.get("cache_control").is_none()));
        // A last turn ending in thinking marks the block before it; no system, no tools: one mark.
        let only =
            Message::new(Speaker::Assistant, vec![Part::Text { text: "so".into() }, thinking("then", "s2")]);
        let mut req = request(vec![only]);
        req.system.clear();
        let body = json_body(&req);
        assert_eq!(serde_json::to_string(&body).unwrap().matches("cache_control").count(), 1);
        assert_eq!(body["messages"][0]["content"][0]["type"], "thinking");
        assert!(body["messages"][0]["content"][0].get("cache_control").is_none());
        assert_eq!(body["messages"][0]["content"][1]["cache_control"], json!({"type": "ephemeral"}));
        // Nothing to send: no messages, nothing marked, no panic.
        let body = json_body(&request(vec![]));
        assert_eq!(body["messages"], json!([]));
    }

    #[test]
    fn prompt_too_long_is_an_overflow_with_its_limit() {
        let body = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210034 tokens > 200000 maximum"}}"#;
        assert_eq!(
            classify_anthropic_http(400, None, body),
            ProviderError::ContextOverflow {
                limit: Some(Tokens(200000)),
                message: "prompt is too long: 210034 tokens > 200000 maximum".into()
            }
        );
        let body = r#"{"type":"error","error":{"type":"invalid_request_error","message":"input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, decrease input length or `max_tokens` and try again"}}"#;
        assert!(matches!(
            classify_anthropic_http(400, None, body),
            ProviderError::ContextOverflow { limit: Some(Tokens(200000)), .. }
        ));
        // About the output limit, not the window.
        let body = r#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: 64000 > 32000, which is the maximum allowed number of output tokens for claude-opus-4"}}"#;
        assert!(matches!(
            classify_anthropic_http(400, None, body),
            ProviderError::Rejected { status: 400, .. }
        ));
    }

    #[test]
    fn http_statuses() {
        let overloaded = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert_eq!(
            classify_anthropic_http(529, None, overloaded),
            ProviderError::Overloaded { retry_after: None, message: "Overloaded".into() }
        );
        let limited = r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#;
        assert!(matches!(
            classify_anthropic_http(429, Some(RetryAfter::new(Duration::from_secs(7), "retry-after")), limited),
            ProviderError::RateLimited { retry_after: Some(d), .. } if d.delay == Duration::from_secs(7)
        ));
        let auth =
            r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#;
        assert_eq!(
            classify_anthropic_http(401, None, auth),
            ProviderError::Rejected { status: 401, message: "invalid x-api-key".into() }
        );
        let api = r#"{"type":"error","error":{"type":"api_error","message":"Internal server error"}}"#;
        assert!(matches!(classify_anthropic_http(500, None, api), ProviderError::Server { status: 500, .. }));
        assert!(matches!(
            classify_anthropic_http(502, None, "<html>"),
            ProviderError::Server { status: 502, .. }
        ));
        assert!(matches!(classify_anthropic_http(529, None, ""), ProviderError::Overloaded { .. }));
    }

    #[test]
    fn stream_error_objects() {
        assert!(matches!(
            classify_anthropic_error(&json!({"type": "rate_limit_error", "message": "slow down"})),
            ProviderError::RateLimited { .. }
        ));
        assert!(matches!(
            classify_anthropic_error(&json!({"type": "invalid_request_error", "message": "bad"})),
            ProviderError::Rejected { status: 400, .. }
        ));
        assert!(matches!(
            classify_anthropic_error(&json!("boom")),
            ProviderError::Server { status: 500, .. }
        ));
    }

    #[test]
    fn model_windows_and_path_encoding() {
        assert_eq!(window_from_model(&json!({"id": "c", "max_input_tokens": 200000})), Some(Tokens(200000)));
        assert_eq!(
            window_from_model(&json!({"id": "c", "context_window": "1000000"})),
            Some(Tokens(1_000_000))
        );
        assert_eq!(window_from_model(&json!({"id": "c", "display_name": "Claude"})), None);
        assert_eq!(window_from_model(&json!({"id": "c", "context_window": 0})), None);
        assert_eq!(encode_path_segment("claude-sonnet-4-5@20250929"), "claude-sonnet-4-5@20250929");
        assert_eq!(encode_path_segment("a/b c"), "a%2Fb%20c");
    }
}
