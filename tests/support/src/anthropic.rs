//! Rendering of scripted steps into the Anthropic Messages wire format
//! (`POST /v1/messages`): SSE events (`message_start`, `content_block_*`,
//! `message_delta`, `message_stop`, `ping`), non-stream `message` bodies,
//! `{"type":"error","error":{…}}` bodies and the model object.
//!
//! Pure functions only, like [`crate::openai`]. Consecutive text chunks form
//! one `text` block and consecutive [`Chunk::Reasoning`] chunks one `thinking`
//! block (with a signature derived from its text); a [`Chunk::Thinking`] is a
//! block of its own with its scripted signature. Text and thinking are split
//! across at least two deltas, tool input across at least two
//! `input_json_delta`s after an empty one, as Anthropic streams them.

use serde_json::{json, Value};

use crate::openai::{argument_pieces, split_arguments, Frame};
use crate::script::{Chunk, Reply, Usage, RAW_USAGE};

/// One content block of a reply, grouped from the chunks.
#[derive(Debug, PartialEq)]
enum Block {
    Text(Vec<String>),
    /// `signature: None`: made from [`Chunk::Reasoning`], signed with [`signature_of`] the text.
    Thinking {
        pieces: Vec<String>,
        signature: Option<String>,
    },
    Redacted(String),
    ToolUse {
        id: String,
        name: String,
        arguments: String,
        /// Its `input_json_delta`s: one, not split.
        whole: bool,
    },
}

fn blocks(chunks: &[Chunk]) -> Vec<Block> {
    let mut out: Vec<Block> = Vec::new();
    for c in chunks {
        match (c, out.last_mut()) {
            (Chunk::Text(t), Some(Block::Text(pieces))) => pieces.push(t.clone()),
            (Chunk::Text(t), _) => out.push(Block::Text(vec![t.clone()])),
            (Chunk::Reasoning(t), Some(Block::Thinking { pieces, signature: None })) => {
                pieces.push(t.clone())
            }
            (Chunk::Reasoning(t), _) => {
                out.push(Block::Thinking { pieces: vec![t.clone()], signature: None })
            }
            (Chunk::Thinking { text, signature }, _) => out.push(Block::Thinking {
                pieces: split_arguments(text).into_iter().filter(|p| !p.is_empty()).collect(),
                signature: Some(signature.clone()),
            }),
            (Chunk::RedactedThinking(data), _) => out.push(Block::Redacted(data.clone())),
            (Chunk::ToolCall { id, name, arguments, whole }, _) => out.push(Block::ToolUse {
                id: id.clone(),
                name: name.clone(),
                arguments: arguments.clone(),
                whole: *whole,
            }),
        }
    }
    out
}

/// The signature the server gives a thinking block scripted without one: stable for a text, opaque
/// (FNV-1a of the text, base64-ish).
pub(crate) fn signature_of(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("EqScripted{h:016x}+/=")
}

fn event(name: &str, payload: &Value) -> String {
    format!("event: {name}\ndata: {payload}\n\n")
}

/// Anthropic's stop reason for the reply's (OpenAI-worded) finish reason.
pub(crate) fn stop_reason(reply: &Reply) -> String {
    match reply.effective_finish_reason().as_str() {
        "stop" => "end_turn".to_string(),
        "tool_calls" => "tool_use".to_string(),
        "length" => "max_tokens".to_string(),
        other => other.to_string(),
    }
}

/// Anthropic's `usage` object: `input_tokens` is the uncached rest of the prompt,
/// `cache_read_input_tokens` what the cache served (nothing is reported as written to it).
fn usage_json(usage: Usage, output_tokens: u64) -> Value {
    if usage.raw {
        return json!(RAW_USAGE);
    }
    let cached = usage.cached.unwrap_or(0).min(usage.prompt);
    json!({
        "input_tokens": usage.prompt - cached,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
        "output_tokens": output_tokens,
    })
}

fn message_start(frame: &Frame<'_>, usage: Option<Usage>) -> String {
    let mut message = json!({
        "id": frame.id,
        "type": "message",
        "role": "assistant",
        "model": frame.model,
        "content": [],
        "stop_reason": null,
        "stop_sequence": null,
    });
    if let Some(usage) = usage {
        message["usage"] = usage_json(usage, 1);
    }
    event("message_start", &json!({"type": "message_start", "message": message}))
}

fn block_events(index: usize, block: &Block, close: bool) -> Vec<String> {
    let start = |content_block: Value| {
        event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": content_block}),
        )
    };
    let delta = |delta: Value| {
        event("content_block_delta", &json!({"type": "content_block_delta", "index": index, "delta": delta}))
    };
    let mut out = Vec::new();
    match block {
        Block::Text(pieces) => {
            out.push(start(json!({"type": "text", "text": ""})));
            for p in pieces {
                out.push(delta(json!({"type": "text_delta", "text": p})));
            }
        }
        Block::Thinking { pieces, signature } => {
            out.push(start(json!({"type": "thinking", "thinking": ""})));
            for p in pieces {
                out.push(delta(json!({"type": "thinking_delta", "thinking": p})));
            }
            let signature = signature.clone().unwrap_or_else(|| signature_of(&pieces.concat()));
            out.push(delta(json!({"type": "signature_delta", "signature": signature})));
        }
        Block::Redacted(data) => out.push(start(json!({"type": "redacted_thinking", "data": data}))),
        Block::ToolUse { id, name, arguments, whole } => {
            out.push(start(json!({"type": "tool_use", "id": id, "name": name, "input": {}})));
            out.push(delta(json!({"type": "input_json_delta", "partial_json": ""})));
            for p in argument_pieces(arguments, *whole) {
                out.push(delta(json!({"type": "input_json_delta", "partial_json": p})));
            }
        }
    }
    if close {
        out.push(event("content_block_stop", &json!({"type": "content_block_stop", "index": index})));
    }
    out
}

/// The full SSE body of a successful reply, as separate events. Usage figures are sent only when
/// `usage` is given (`input_tokens` = the uncached prompt).
pub(crate) fn stream_events(frame: &Frame<'_>, reply: &Reply, usage: Option<Usage>) -> Vec<String> {
    let mut events = vec![message_start(frame, usage), event("ping", &json!({"type": "ping"}))];
    for (index, block) in blocks(&reply.chunks).iter().enumerate() {
        events.extend(block_events(index, block, true));
    }
    let mut delta = json!({
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason(reply), "stop_sequence": null},
    });
    if let Some(usage) = usage {
        delta["usage"] =
            if usage.raw { json!(RAW_USAGE) } else { json!({"output_tokens": usage.completion}) };
    }
    events.push(event("message_delta", &delta));
    events.push(event("message_stop", &json!({"type": "message_stop"})));
    events
}

/// The events of a stream cut short: the start and the blocks (the last one left open), no
/// `message_delta`, no `message_stop`.
pub(crate) fn cut_stream_events(frame: &Frame<'_>, chunks: &[Chunk]) -> Vec<String> {
    let blocks = blocks(chunks);
    let mut events = vec![message_start(frame, None)];
    for (index, block) in blocks.iter().enumerate() {
        events.extend(block_events(index, block, index + 1 < blocks.len()));
    }
    events
}

/// A stream that starts and stops with nothing in it and no stop reason.
pub(crate) fn empty_stream_events(frame: &Frame<'_>) -> Vec<String> {
    vec![message_start(frame, None), event("message_stop", &json!({"type": "message_stop"}))]
}

/// A non-stream `message` body, with `usage` when given.
pub(crate) fn message(frame: &Frame<'_>, reply: &Reply, usage: Option<Usage>) -> Value {
    let content: Vec<Value> = blocks(&reply.chunks)
        .into_iter()
        .map(|b| match b {
            Block::Text(pieces) => json!({"type": "text", "text": pieces.concat()}),
            Block::Thinking { pieces, signature } => {
                let text = pieces.concat();
                let signature = signature.unwrap_or_else(|| signature_of(&text));
                json!({"type": "thinking", "thinking": text, "signature": signature})
            }
            Block::Redacted(data) => json!({"type": "redacted_thinking", "data": data}),
            Block::ToolUse { id, name, arguments, .. } => {
                let input = serde_json::from_str::<Value>(&arguments).unwrap_or_else(|_| json!({}));
                json!({"type": "tool_use", "id": id, "name": name, "input": input})
            }
        })
        .collect();
    let mut body = json!({
        "id": frame.id,
        "type": "message",
        "role": "assistant",
        "model": frame.model,
        "content": content,
        "stop_reason": stop_reason(reply),
        "stop_sequence": null,
    });
    if let Some(usage) = usage {
        body["usage"] = usage_json(usage, usage.completion);
    }
    body
}

/// A non-stream message with no content and no stop reason.
pub(crate) fn empty_message(frame: &Frame<'_>) -> Value {
    json!({
        "id": frame.id,
        "type": "message",
        "role": "assistant",
        "model": frame.model,
        "content": [],
        "stop_reason": null,
        "stop_sequence": null,
    })
}

/// `{"type":"error","error":{"type": kind, "message": message}}`.
pub(crate) fn error(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

pub(crate) fn rate_limited() -> Value {
    error(
        "rate_limit_error",
        "This request would exceed the rate limit for your organization (scripted) of 30,000 input \
         tokens per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits.",
    )
}

/// The error body for a scripted HTTP status: `overloaded_error` for 529, `api_error` for other
/// 5xx, the request error type for 4xx.
pub(crate) fn server_error(status: u16, message: &str) -> Value {
    let kind = match status {
        529 => "overloaded_error",
        500..=599 => "api_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        _ => "invalid_request_error",
    };
    error(kind, message)
}

/// Anthropic's refusal of a prompt over the window.
pub(crate) fn prompt_too_long(limit: u64, requested: u64) -> Value {
    error("invalid_request_error", &format!("prompt is too long: {requested} tokens > {limit} maximum"))
}

pub(crate) fn script_exhausted() -> Value {
    error("api_error", "scripted server: script exhausted")
}

pub(crate) fn invalid_json() -> Value {
    error("invalid_request_error", "The request body is not valid JSON.")
}

pub(crate) fn missing_version() -> Value {
    error("invalid_request_error", "anthropic-version: header is required")
}

pub(crate) fn not_found(method: &str, path: &str) -> Value {
    error("not_found_error", &format!("Not found: {method} {path}"))
}

pub(crate) fn method_not_allowed(method: &str, path: &str) -> Value {
    error("invalid_request_error", &format!("Method {method} not allowed on {path}"))
}

/// `GET /v1/models/{id}`: Anthropic's model object, plus `context_window` when the server declares
/// one.
pub(crate) fn model(model: &str, context_window: Option<u64>) -> Value {
    let mut body = json!({
        "type": "model",
        "id": model,
        "display_name": model,
        "created_at": "2025-01-01T00:00:00Z",
    });
    if let Some(window) = context_window {
        body["context_window"] = json!(window);
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    const FRAME: Frame<'static> = Frame { id: "msg_1", model: "claude-test" };

    fn payloads(events: &[String]) -> Vec<Value> {
        events
            .iter()
            .map(|e| {
                let data = e.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
                serde_json::from_str(data).unwrap()
            })
            .collect()
    }

    #[test]
    fn chunks_group_into_blocks() {
        let chunks = vec![
            Chunk::Reasoning("a".into()),
            Chunk::Reasoning("b".into()),
            Chunk::Thinking { text: "signed".into(), signature: "sig".into() },
            Chunk::RedactedThinking("enc".into()),
            Chunk::Text("x".into()),
            Chunk::Text("y".into()),
            Chunk::ToolCall { id: "t".into(), name: "n".into(), arguments: "{}".into(), whole: false },
        ];
        let b = blocks(&chunks);
        assert_eq!(b.len(), 5);
        assert_eq!(b[0], Block::Thinking { pieces: vec!["a".into(), "b".into()], signature: None });
        match &b[1] {
            Block::Thinking { pieces, signature } => {
                assert!(pieces.len() >= 2);
                assert_eq!(pieces.concat(), "signed");
                assert_eq!(signature.as_deref(), Some("sig"));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(b[3], Block::Text(vec!["x".into(), "y".into()]));
    }

    #[test]
    fn stream_shape() {
        let reply = Reply {
            chunks: vec![
                Chunk::Thinking { text: "hmm".into(), signature: "S1".into() },
                Chunk::Text("hi".into()),
                Chunk::ToolCall {
                    id: "toolu_1".into(),
                    name: "finish".into(),
                    arguments: r#"{"summary":"s"}"#.into(),
                    whole: false,
                },
            ],
            finish_reason: None,
            usage: Some((100, 7)),
            raw_usage: None,
        };
        let p = payloads(&stream_events(&FRAME, &reply, Usage::scripted(&reply)));
        let kinds: Vec<&str> = p.iter().map(|v| v["type"].as_str().unwrap()).collect();
        assert_eq!(kinds[..2], ["message_start", "ping"]);
        assert_eq!(kinds[kinds.len() - 2..], ["message_delta", "message_stop"]);
        assert_eq!(p[0]["message"]["usage"]["input_tokens"], 100);
        let delta = &p[p.len() - 2];
        assert_eq!(delta["delta"]["stop_reason"], "tool_use");
        assert_eq!(delta["usage"]["output_tokens"], 7);
        let signature: Vec<&Value> = p.iter().filter(|v| v["delta"]["type"] == "signature_delta").collect();
        assert_eq!(signature[0]["delta"]["signature"], "S1");
        let json: String = p
            .iter()
            .filter(|v| v["delta"]["type"] == "input_json_delta")
            .map(|v| v["delta"]["partial_json"].as_str().unwrap())
            .collect();
        assert_eq!(json, r#"{"summary":"s"}"#);
        // Without scripted usage, no usage at all.
        let reply = Reply { chunks: vec![Chunk::Text("x".into())], ..Reply::default() };
        let p = payloads(&stream_events(&FRAME, &reply, Usage::scripted(&reply)));
        assert!(p[0]["message"].get("usage").is_none());
        assert_eq!(p[p.len() - 2]["delta"]["stop_reason"], "end_turn");
    }

    #[test]
    fn cut_stream_leaves_the_last_block_open() {
        let p =
            payloads(&cut_stream_events(&FRAME, &[Chunk::Text("a".into()), Chunk::Reasoning("b".into())]));
        let kinds: Vec<&str> = p.iter().map(|v| v["type"].as_str().unwrap()).collect();
        assert!(!kinds.contains(&"message_stop") && !kinds.contains(&"message_delta"));
        assert_eq!(*kinds.last().unwrap(), "content_block_delta");
    }

    #[test]
    fn non_stream_message() {
        let reply = Reply {
            chunks: vec![Chunk::Reasoning("r".into()), Chunk::Text("a".into()), Chunk::Text("b".into())],
            finish_reason: Some("length".into()),
            usage: None,
            raw_usage: None,
        };
        let body = message(&FRAME, &reply, Usage::scripted(&reply));
        assert_eq!(body["content"][0]["signature"], signature_of("r"));
        assert_eq!(body["content"][1], json!({"type": "text", "text": "ab"}));
        assert_eq!(body["stop_reason"], "max_tokens");
        assert!(body.get("usage").is_none());
    }
}
