//! Rendering of scripted steps into the OpenAI chat-completions wire format
//! (SSE chunks, non-stream completions, error bodies, model list).
//!
//! Pure functions only: no I/O here, so another protocol (e.g. Anthropic
//! messages) can be added as a sibling module with the same shape.

use serde_json::{json, Value};

use crate::script::{Chunk, Reply, Usage, RAW_USAGE};

/// Identity shared by every chunk of one completion.
pub(crate) struct Frame<'a> {
    pub id: &'a str,
    pub model: &'a str,
}

/// The SSE end-of-stream marker.
pub(crate) const DONE: &str = "data: [DONE]\n\n";

/// One SSE event carrying a JSON payload.
pub(crate) fn sse_event(payload: &Value) -> String {
    format!("data: {payload}\n\n")
}

fn chunk(frame: &Frame<'_>, delta: Value, finish_reason: Option<&str>) -> Value {
    json!({
        "id": frame.id,
        "object": "chat.completion.chunk",
        "created": 0,
        "model": frame.model,
        "choices": [{ "index": 0, "delta": delta, "finish_reason": finish_reason }],
    })
}

/// Splits tool-call arguments into at least two pieces (three when long
/// enough) on char boundaries, so clients must reassemble them.
pub(crate) fn split_arguments(arguments: &str) -> Vec<String> {
    let chars: Vec<char> = arguments.chars().collect();
    let n = chars.len();
    let parts = n.clamp(2, 3);
    (0..parts).map(|i| chars[n * i / parts..n * (i + 1) / parts].iter().collect()).collect()
}

/// A tool call's arguments as its deltas carry them: split (see
/// [`split_arguments`]), or in one piece when the call is scripted `whole`.
pub(crate) fn argument_pieces(arguments: &str, whole: bool) -> Vec<String> {
    if whole {
        vec![arguments.to_string()]
    } else {
        split_arguments(arguments)
    }
}

/// The content deltas of a stream: an initial `role` delta, then one delta
/// per text/reasoning chunk and 1 + ≥2 deltas per tool call (1 + 1 for a
/// `whole` one). No finish.
pub(crate) fn delta_chunks(frame: &Frame<'_>, chunks: &[Chunk]) -> Vec<Value> {
    let mut out = vec![chunk(frame, json!({"role": "assistant", "content": ""}), None)];
    let mut tool_index = 0usize;
    for c in chunks {
        match c {
            Chunk::Text(text) => out.push(chunk(frame, json!({ "content": text }), None)),
            Chunk::Reasoning(text) | Chunk::Thinking { text, .. } => {
                out.push(chunk(frame, json!({ "reasoning_content": text }), None))
            }
            Chunk::RedactedThinking(_) => {}
            Chunk::ToolCall { id, name, arguments, whole } => {
                out.push(chunk(
                    frame,
                    json!({ "tool_calls": [{
                        "index": tool_index,
                        "id": id,
                        "type": "function",
                        "function": { "name": name, "arguments": "" },
                    }]}),
                    None,
                ));
                for piece in argument_pieces(arguments, *whole) {
                    out.push(chunk(
                        frame,
                        json!({ "tool_calls": [{
                            "index": tool_index,
                            "function": { "arguments": piece },
                        }]}),
                        None,
                    ));
                }
                tool_index += 1;
            }
        }
    }
    out
}

/// OpenAI's `usage` object; a cache figure goes in `prompt_tokens_details.cached_tokens`.
fn usage_json(usage: Usage) -> Value {
    if usage.raw {
        return json!(RAW_USAGE);
    }
    let mut body = json!({
        "prompt_tokens": usage.prompt,
        "completion_tokens": usage.completion,
        "total_tokens": usage.prompt.saturating_add(usage.completion),
    });
    if let Some(cached) = usage.cached {
        body["prompt_tokens_details"] = json!({ "cached_tokens": cached });
    }
    body
}

/// The full SSE body of a successful reply, as separate events (the last
/// one is `[DONE]`), with a usage chunk when `usage` is given.
pub(crate) fn stream_events(frame: &Frame<'_>, reply: &Reply, usage: Option<Usage>) -> Vec<String> {
    let mut events: Vec<String> = delta_chunks(frame, &reply.chunks).iter().map(sse_event).collect();
    let finish = reply.effective_finish_reason();
    events.push(sse_event(&chunk(frame, json!({}), Some(&finish))));
    if let Some(usage) = usage {
        events.push(sse_event(&json!({
            "id": frame.id,
            "object": "chat.completion.chunk",
            "created": 0,
            "model": frame.model,
            "choices": [],
            "usage": usage_json(usage),
        })));
    }
    events.push(DONE.to_string());
    events
}

/// The events of a stream cut short: deltas only, no finish, no `[DONE]`.
pub(crate) fn cut_stream_events(frame: &Frame<'_>, chunks: &[Chunk]) -> Vec<String> {
    delta_chunks(frame, chunks).iter().map(sse_event).collect()
}

/// The assistant message assembled from the chunks (non-stream form).
fn message(chunks: &[Chunk]) -> Value {
    let mut content: Option<String> = None;
    let mut reasoning: Option<String> = None;
    let mut tool_calls = Vec::new();
    for c in chunks {
        match c {
            Chunk::Text(t) => content.get_or_insert_with(String::new).push_str(t),
            Chunk::Reasoning(t) | Chunk::Thinking { text: t, .. } => {
                reasoning.get_or_insert_with(String::new).push_str(t)
            }
            Chunk::RedactedThinking(_) => {}
            Chunk::ToolCall { id, name, arguments, .. } => tool_calls.push(json!({
                "id": id,
                "type": "function",
                "function": { "name": name, "arguments": arguments },
            })),
        }
    }
    let mut msg = json!({ "role": "assistant", "content": content });
    if let Some(r) = reasoning {
        msg["reasoning_content"] = json!(r);
    }
    if !tool_calls.is_empty() {
        msg["tool_calls"] = Value::Array(tool_calls);
    }
    msg
}

/// A non-stream `chat.completion` body, with `usage` when given.
pub(crate) fn completion(frame: &Frame<'_>, reply: &Reply, usage: Option<Usage>) -> Value {
    let mut body = json!({
        "id": frame.id,
        "object": "chat.completion",
        "created": 0,
        "model": frame.model,
        "choices": [{
            "index": 0,
            "message": message(&reply.chunks),
            "logprobs": null,
            "finish_reason": reply.effective_finish_reason(),
        }],
    });
    if let Some(usage) = usage {
        body["usage"] = usage_json(usage);
    }
    body
}

/// A non-stream completion with no content and no finish reason (the
/// non-stream counterpart of an empty stream).
pub(crate) fn empty_completion(frame: &Frame<'_>) -> Value {
    json!({
        "id": frame.id,
        "object": "chat.completion",
        "created": 0,
        "model": frame.model,
        "choices": [{
            "index": 0,
            "message": { "role": "assistant", "content": null },
            "logprobs": null,
            "finish_reason": null,
        }],
    })
}

/// An OpenAI-shaped error body.
pub(crate) fn error(message: &str, kind: &str, param: Option<&str>, code: Option<&str>) -> Value {
    json!({ "error": { "message": message, "type": kind, "param": param, "code": code } })
}

pub(crate) fn script_exhausted() -> Value {
    error("scripted server: script exhausted", "server_error", None, None)
}

pub(crate) fn rate_limited(model: &str, retry_after: Option<&str>) -> Value {
    let wait = match retry_after {
        Some(s) if s.bytes().all(|b| b.is_ascii_digit()) => format!("{s}s"),
        Some(s) => s.to_string(),
        None => "1s".to_string(),
    };
    error(
        &format!(
            "Rate limit reached for {model} in organization org-scripted on tokens per min \
             (TPM): Limit 30000, Used 30000, Requested 1000. Please try again in {wait}."
        ),
        "rate_limit_error",
        None,
        Some("rate_limit_exceeded"),
    )
}

pub(crate) fn server_error(status: u16, message: &str) -> Value {
    let kind = if status >= 500 { "server_error" } else { "invalid_request_error" };
    error(message, kind, None, None)
}

/// `context_length_exceeded`; the completion share is taken from the
/// request's `max_completion_tokens` / `max_tokens` when present.
pub(crate) fn context_length_exceeded(limit: u64, requested: u64, request: &Value) -> Value {
    let completion = ["max_completion_tokens", "max_tokens"]
        .iter()
        .find_map(|k| request.get(*k).and_then(Value::as_u64))
        .unwrap_or(0)
        .min(requested);
    let messages = requested - completion;
    error(
        &format!(
            "This model's maximum context length is {limit} tokens. However, you requested \
             {requested} tokens ({messages} in the messages, {completion} in the completion). \
             Please reduce the length of the messages."
        ),
        "invalid_request_error",
        Some("messages"),
        Some("context_length_exceeded"),
    )
}

pub(crate) fn invalid_json() -> Value {
    error(
        "We could not parse the JSON body of your request. (HINT: This likely means you \
         aren't using your HTTP library correctly. The OpenAI API expects a JSON payload.)",
        "invalid_request_error",
        None,
        None,
    )
}

pub(crate) fn bad_request(message: &str) -> Value {
    error(message, "invalid_request_error", None, None)
}

pub(crate) fn not_found(method: &str, path: &str) -> Value {
    error(&format!("Invalid URL ({method} {path})"), "invalid_request_error", None, Some("unknown_url"))
}

pub(crate) fn method_not_allowed(method: &str, path: &str) -> Value {
    error(
        &format!("Method {method} not allowed on {path}"),
        "invalid_request_error",
        None,
        Some("method_not_allowed"),
    )
}

/// `GET /v1/models` body (vLLM-style `max_model_len` only when known).
pub(crate) fn models(model: &str, max_model_len: Option<u64>) -> Value {
    let mut entry = json!({
        "id": model,
        "object": "model",
        "created": 0,
        "owned_by": "scripted",
    });
    if let Some(len) = max_model_len {
        entry["max_model_len"] = json!(len);
    }
    json!({ "object": "list", "data": [entry] })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_is_lossless_and_at_least_two() {
        for s in ["", "{", "{}", "{\"a\":1}", "héllo wörld ✓ with some length"] {
            let parts = split_arguments(s);
            assert!(parts.len() >= 2, "{s:?}");
            assert_eq!(parts.concat(), s);
        }
        assert_eq!(split_arguments("{\"a\":1}").len(), 3);
    }

    #[test]
    fn a_whole_call_streams_its_arguments_in_one_event() {
        let frame = Frame { id: "c", model: "m" };
        let arguments = "{\"content\": \"a long file\"}";
        let whole =
            Chunk::ToolCall { id: "t".into(), name: "n".into(), arguments: arguments.into(), whole: true };
        let deltas = delta_chunks(&frame, &[whole]);
        let pieces: Vec<&str> = deltas
            .iter()
            .filter_map(|d| d.pointer("/choices/0/delta/tool_calls/0/function/arguments")?.as_str())
            .filter(|a| !a.is_empty())
            .collect();
        assert_eq!(pieces, [arguments]);
    }

    #[test]
    fn context_length_split_uses_max_tokens() {
        let body = context_length_exceeded(100, 150, &json!({"max_tokens": 30}));
        let msg = body["error"]["message"].as_str().unwrap();
        assert!(msg.contains("(120 in the messages, 30 in the completion)"), "{msg}");
        let body = context_length_exceeded(100, 10, &json!({"max_tokens": 30}));
        let msg = body["error"]["message"].as_str().unwrap();
        assert!(msg.contains("(0 in the messages, 10 in the completion)"), "{msg}");
    }

    #[test]
    fn non_stream_message_assembly() {
        let reply = Reply {
            chunks: vec![Chunk::Reasoning("think".into()), Chunk::Text("a".into()), Chunk::Text("b".into())],
            finish_reason: None,
            usage: None,
            raw_usage: None,
        };
        let body = completion(&Frame { id: "x", model: "m" }, &reply, Usage::scripted(&reply));
        let msg = &body["choices"][0]["message"];
        assert_eq!(msg["content"], "ab");
        assert_eq!(msg["reasoning_content"], "think");
        assert!(msg.get("tool_calls").is_none());
        assert!(body.get("usage").is_none());
        assert_eq!(body["choices"][0]["finish_reason"], "stop");
    }

    #[test]
    fn a_raw_usage_goes_on_the_wire_verbatim() {
        let raw = r#"{"prompt_tokens": NaN, "completion_tokens": 18446744073709551616}"#;
        let reply = Reply {
            chunks: vec![Chunk::Text("a".into())],
            usage: Some((10, 1)),
            raw_usage: Some(raw.into()),
            ..Reply::default()
        };
        let frame = Frame { id: "x", model: "m" };
        let events: Vec<String> = stream_events(&frame, &reply, Usage::scripted(&reply))
            .into_iter()
            .map(|e| crate::script::with_raw_usage(e, &reply))
            .collect();
        let usage_chunk = &events[events.len() - 2];
        assert!(usage_chunk.contains(&format!("\"usage\":{raw}")), "{usage_chunk}");
        let body = crate::script::with_raw_usage(
            completion(&frame, &reply, Usage::scripted(&reply)).to_string(),
            &reply,
        );
        assert!(body.contains(raw) && !body.contains(crate::script::RAW_USAGE), "{body}");
    }
}
