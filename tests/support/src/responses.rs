//! Rendering of scripted steps into OpenAI's Responses API wire format (`POST /v1/responses`):
//! `response.*` SSE events, non-stream response objects, and the refusal over the window in the
//! Responses API's words; and the reverse, a Responses body read as the chat-completions body of the
//! same conversation ([`as_chat`]), so that the server counts it, caches it and hands it to a
//! responder with the same rules as the other protocols.
//!
//! Pure functions only, like [`crate::openai`]. Each run of text chunks is one `message` item and
//! each run of [`Chunk::Reasoning`] one `reasoning` item (its encrypted content derived from its
//! text); a [`Chunk::Thinking`] is a reasoning item of its own whose summary is the text and whose
//! `encrypted_content` is the scripted signature; a [`Chunk::RedactedThinking`] a reasoning item
//! with no summary. Text, summaries and arguments stream in at least two deltas each. Error bodies
//! are OpenAI's (the Responses API shares them).

use serde_json::{json, Map, Value};

use crate::anthropic::signature_of;
use crate::openai::{argument_pieces, split_arguments, Frame};
use crate::script::{Chunk, Reply, Usage, RAW_USAGE};

/// One output item of a reply, grouped from the chunks.
#[derive(Debug, PartialEq)]
enum Item {
    Message(Vec<String>),
    /// `encrypted: None`: made from [`Chunk::Reasoning`], encrypted as [`signature_of`] the text.
    Reasoning {
        summary: Vec<String>,
        encrypted: Option<String>,
    },
    Call {
        id: String,
        name: String,
        arguments: String,
        /// Its arguments in one delta, not split.
        whole: bool,
    },
}

fn items(chunks: &[Chunk]) -> Vec<Item> {
    let mut out: Vec<Item> = Vec::new();
    for c in chunks {
        match (c, out.last_mut()) {
            (Chunk::Text(t), Some(Item::Message(pieces))) => pieces.push(t.clone()),
            (Chunk::Text(t), _) => out.push(Item::Message(vec![t.clone()])),
            (Chunk::Reasoning(t), Some(Item::Reasoning { summary, encrypted: None })) => {
                summary.push(t.clone())
            }
            (Chunk::Reasoning(t), _) => {
                out.push(Item::Reasoning { summary: vec![t.clone()], encrypted: None })
            }
            (Chunk::Thinking { text, signature }, _) => {
                out.push(Item::Reasoning { summary: vec![text.clone()], encrypted: Some(signature.clone()) })
            }
            (Chunk::RedactedThinking(data), _) => {
                out.push(Item::Reasoning { summary: Vec::new(), encrypted: Some(data.clone()) })
            }
            (Chunk::ToolCall { id, name, arguments, whole }, _) => out.push(Item::Call {
                id: id.clone(),
                name: name.clone(),
                arguments: arguments.clone(),
                whole: *whole,
            }),
        }
    }
    out
}

impl Item {
    /// The whole item, as `response.output_item.done` and a response's `output` carry it.
    fn whole(&self, frame: &Frame<'_>, index: usize) -> Value {
        match self {
            Item::Message(pieces) => json!({
                "id": format!("msg_{}_{index}", frame.id),
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": pieces.concat(), "annotations": []}],
            }),
            Item::Reasoning { summary, encrypted } => {
                let text = summary.concat();
                let summary: Vec<Value> = if text.is_empty() {
                    Vec::new()
                } else {
                    vec![json!({"type": "summary_text", "text": text})]
                };
                json!({
                    "id": format!("rs_{}_{index}", frame.id),
                    "type": "reasoning",
                    "summary": summary,
                    "encrypted_content": encrypted.clone().unwrap_or_else(|| signature_of(&text)),
                })
            }
            Item::Call { id, name, arguments, .. } => json!({
                "id": format!("fc_{}_{index}", frame.id),
                "type": "function_call",
                "status": "completed",
                "call_id": id,
                "name": name,
                "arguments": arguments,
            }),
        }
    }

    /// The item as `response.output_item.added` opens it: nothing in it yet.
    fn opened(&self, frame: &Frame<'_>, index: usize) -> Value {
        let mut item = self.whole(frame, index);
        match self {
            Item::Message(_) => item["content"] = json!([]),
            Item::Reasoning { .. } => {
                item["summary"] = json!([]);
                item.as_object_mut().map(|o| o.remove("encrypted_content"));
            }
            Item::Call { .. } => item["arguments"] = json!(""),
        }
        item["status"] = json!("in_progress");
        item
    }

    /// The deltas between its opening and its end.
    fn deltas(&self, index: usize) -> Vec<Value> {
        let pieces = |pieces: &[String]| -> Vec<String> {
            split_arguments(&pieces.concat()).into_iter().filter(|p| !p.is_empty()).collect()
        };
        match self {
            Item::Message(text) => pieces(text)
                .into_iter()
                .map(|d| json!({"type": "response.output_text.delta", "output_index": index, "content_index": 0, "delta": d}))
                .collect(),
            Item::Reasoning { summary, .. } => pieces(summary)
                .into_iter()
                .map(|d| json!({"type": "response.reasoning_summary_text.delta", "output_index": index, "summary_index": 0, "delta": d}))
                .collect(),
            Item::Call { arguments, whole, .. } => argument_pieces(arguments, *whole)
                .into_iter()
                .map(|d| json!({"type": "response.function_call_arguments.delta", "output_index": index, "delta": d}))
                .collect(),
        }
    }
}

fn event(payload: &Value) -> String {
    let name = payload["type"].as_str().unwrap_or("message");
    format!("event: {name}\ndata: {payload}\n\n")
}

/// The Responses API's `usage`: `input_tokens` is the whole prompt, `cached_tokens` the part the
/// cache served.
fn usage_json(usage: Usage) -> Value {
    if usage.raw {
        return json!(RAW_USAGE);
    }
    json!({
        "input_tokens": usage.prompt,
        "input_tokens_details": {"cached_tokens": usage.cached.unwrap_or(0).min(usage.prompt)},
        "output_tokens": usage.completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.prompt.saturating_add(usage.completion),
    })
}

/// The response object: `status` and its output; usage when given.
fn response_object(frame: &Frame<'_>, status: &str, output: Vec<Value>, usage: Option<Usage>) -> Value {
    let mut response = json!({
        "id": frame.id,
        "object": "response",
        "created_at": 0,
        "status": status,
        "model": frame.model,
        "output": output,
        "store": false,
    });
    if let Some(usage) = usage {
        response["usage"] = usage_json(usage);
    }
    if status == "incomplete" {
        response["incomplete_details"] = json!({"reason": "max_output_tokens"});
    }
    response
}

/// The status a reply ends with: `incomplete` when it was cut at its length.
fn status(reply: &Reply) -> &'static str {
    if reply.effective_finish_reason() == "length" {
        "incomplete"
    } else {
        "completed"
    }
}

fn created(frame: &Frame<'_>) -> String {
    event(
        &json!({"type": "response.created", "response": response_object(frame, "in_progress", Vec::new(), None)}),
    )
}

/// Each item's events: opened, its deltas, done (the last one left open when `open_last`).
fn item_events(frame: &Frame<'_>, items: &[Item], open_last: bool) -> Vec<String> {
    let mut events = Vec::new();
    for (index, item) in items.iter().enumerate() {
        events.push(event(
            &json!({"type": "response.output_item.added", "output_index": index, "item": item.opened(frame, index)}),
        ));
        events.extend(item.deltas(index).iter().map(event));
        if !(open_last && index + 1 == items.len()) {
            events.push(event(
                &json!({"type": "response.output_item.done", "output_index": index, "item": item.whole(frame, index)}),
            ));
        }
    }
    events
}

/// The full SSE body of a successful reply: `response.created`, each item's events, then
/// `response.completed` (or `response.incomplete`) with the whole output and the usage when given.
pub(crate) fn stream_events(frame: &Frame<'_>, reply: &Reply, usage: Option<Usage>) -> Vec<String> {
    let items = items(&reply.chunks);
    let mut events = vec![created(frame)];
    events.extend(item_events(frame, &items, false));
    let output: Vec<Value> = items.iter().enumerate().map(|(i, item)| item.whole(frame, i)).collect();
    let status = status(reply);
    events.push(event(&json!({
        "type": format!("response.{status}"),
        "response": response_object(frame, status, output, usage),
    })));
    events
}

/// A stream cut short: the items so far (the last one left open), no end.
pub(crate) fn cut_stream_events(frame: &Frame<'_>, chunks: &[Chunk]) -> Vec<String> {
    let mut events = vec![created(frame)];
    events.extend(item_events(frame, &items(chunks), true));
    events
}

/// A stream that starts and says nothing more.
pub(crate) fn empty_stream_events(frame: &Frame<'_>) -> Vec<String> {
    vec![created(frame)]
}

/// A non-stream response object, with `usage` when given.
pub(crate) fn response(frame: &Frame<'_>, reply: &Reply, usage: Option<Usage>) -> Value {
    let output = items(&reply.chunks).iter().enumerate().map(|(i, item)| item.whole(frame, i)).collect();
    response_object(frame, status(reply), output, usage)
}

/// A non-stream response that is still in progress and has no output.
pub(crate) fn empty_response(frame: &Frame<'_>) -> Value {
    response_object(frame, "in_progress", Vec::new(), None)
}

/// OpenAI's refusal of an input over the window on the Responses API: it states no number.
pub(crate) fn context_length_exceeded() -> Value {
    crate::openai::error(
        "Your input exceeds the context window of this model. Please adjust your input and try again.",
        "invalid_request_error",
        Some("input"),
        Some("context_length_exceeded"),
    )
}

/// The chat-completions body of the same conversation: `instructions` as the system message, a
/// `message` item as a message of its role (its texts joined), the reasoning, text and calls between
/// two other messages as one assistant message (`reasoning_content` its summaries and encrypted
/// content, `tool_calls` its calls), a `function_call_output` as a `tool` message; each tool wrapped
/// in `function` as chat completions has it, `tool_choice` as it is. What the server counts, caches and shows a responder.
pub fn as_chat(body: &Value) -> Value {
    let mut messages: Vec<Value> = Vec::new();
    if let Some(instructions) = body.get("instructions").and_then(Value::as_str).filter(|s| !s.is_empty()) {
        messages.push(json!({"role": "system", "content": instructions}));
    }
    let text_of = |content: &Value| -> String {
        match content {
            Value::String(s) => s.clone(),
            Value::Array(parts) => {
                parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect()
            }
            _ => String::new(),
        }
    };
    let items = match body.get("input") {
        Some(Value::String(text)) => vec![json!({"type": "message", "role": "user", "content": text})],
        Some(Value::Array(items)) => items.clone(),
        _ => Vec::new(),
    };
    for item in &items {
        let kind = item.get("type").and_then(Value::as_str).unwrap_or("message");
        let role = item.get("role").and_then(Value::as_str).unwrap_or("user");
        match kind {
            "message" if role != "assistant" => messages
                .push(json!({"role": role, "content": text_of(item.get("content").unwrap_or(&Value::Null))})),
            "function_call_output" => messages.push(json!({
                "role": "tool",
                "tool_call_id": item.get("call_id").cloned().unwrap_or(Value::Null),
                "content": item.get("output").and_then(Value::as_str).unwrap_or_default(),
            })),
            "message" | "reasoning" | "function_call" => {
                let open = messages.last().is_some_and(|m| m["role"] == "assistant");
                if !open {
                    messages.push(json!({"role": "assistant", "content": null}));
                }
                let Some(assistant) = messages.last_mut().and_then(Value::as_object_mut) else { continue };
                assistant_item(assistant, kind, item, &text_of);
            }
            _ => {}
        }
    }
    let mut chat = json!({"model": body.get("model").cloned().unwrap_or(Value::Null), "messages": messages});
    if let Some(tools) = body.get("tools").and_then(Value::as_array) {
        // Chat completions wraps each flat Responses tool in `function`.
        let wrapped: Vec<Value> = tools
            .iter()
            .map(|t| {
                let mut function = t.clone();
                function.as_object_mut().map(|f| f.remove("type"));
                json!({"type": "function", "function": function})
            })
            .collect();
        chat["tools"] = json!(wrapped);
    }
    for key in ["tool_choice", "stream"] {
        if let Some(value) = body.get(key) {
            chat[key] = value.clone();
        }
    }
    chat
}

/// One reasoning, message or call item added to the assistant message being built.
fn assistant_item(
    assistant: &mut Map<String, Value>,
    kind: &str,
    item: &Value,
    text_of: &dyn Fn(&Value) -> String,
) {
    let append = |assistant: &mut Map<String, Value>, key: &str, text: &str| {
        let old = assistant.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
        assistant.insert(key.to_string(), json!(old + text));
    };
    match kind {
        "reasoning" => {
            let summary = text_of(item.get("summary").unwrap_or(&Value::Null));
            append(assistant, "reasoning_content", &summary);
            let encrypted = item.get("encrypted_content").and_then(Value::as_str).unwrap_or_default();
            append(assistant, "reasoning_content", encrypted);
        }
        "message" => append(assistant, "content", &text_of(item.get("content").unwrap_or(&Value::Null))),
        _ => {
            let call = json!({
                "id": item.get("call_id").cloned().unwrap_or(Value::Null),
                "type": "function",
                "function": {
                    "name": item.get("name").cloned().unwrap_or(Value::Null),
                    "arguments": item.get("arguments").and_then(Value::as_str).unwrap_or_default(),
                },
            });
            match assistant.get_mut("tool_calls").and_then(Value::as_array_mut) {
                Some(calls) => calls.push(call),
                None => {
                    assistant.insert("tool_calls".into(), json!([call]));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_responses_body_reads_as_the_chat_body_of_the_same_conversation() {
        let body = json!({
            "model": "o4",
            "instructions": "be brief",
            "input": [
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix it"}]},
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "look"}], "encrypted_content": "ENC"},
                {"type": "function_call", "call_id": "c1", "name": "read_file", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "fn main() {}"},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]},
            ],
            "tools": [{"type": "function", "name": "read_file", "parameters": {}}],
            "tool_choice": "none",
            "stream": true,
        });
        let chat = as_chat(&body);
        assert_eq!(
            chat["messages"],
            json!([
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "fix it"},
                {"role": "assistant", "content": null, "reasoning_content": "lookENC", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}},
                ]},
                {"role": "tool", "tool_call_id": "c1", "content": "fn main() {}"},
                {"role": "assistant", "content": "done"},
            ])
        );
        assert_eq!(chat["tool_choice"], "none");
        assert_eq!(
            chat["tools"],
            json!([{"type": "function", "function": {"name": "read_file", "parameters": {}}}])
        );
        assert!(crate::is_summary_request(&chat));
    }

    #[test]
    fn a_reply_streams_as_items_and_ends_with_its_usage() {
        let frame = Frame { id: "resp_1", model: "o4" };
        let reply = Reply {
            chunks: vec![
                Chunk::Thinking { text: "look first".into(), signature: "ENC1".into() },
                Chunk::Text("on it".into()),
                Chunk::ToolCall {
                    id: "c1".into(),
                    name: "read_file".into(),
                    arguments: "{\"path\":\"a\"}".into(),
                    whole: false,
                },
            ],
            ..Reply::default()
        };
        let events = stream_events(
            &frame,
            &reply,
            Some(Usage { prompt: 2000, completion: 9, cached: Some(1500), raw: false }),
        );
        let last = events.last().unwrap();
        assert!(last.starts_with("event: response.completed\n"), "{last}");
        let data: Value =
            serde_json::from_str(last.lines().nth(1).unwrap().trim_start_matches("data: ")).unwrap();
        assert_eq!(data["response"]["usage"]["input_tokens_details"]["cached_tokens"], 1500);
        let output = &data["response"]["output"];
        assert_eq!(output[0]["encrypted_content"], "ENC1");
        assert_eq!(output[0]["summary"][0]["text"], "look first");
        assert_eq!(output[1]["content"][0]["text"], "on it");
        assert_eq!(output[2]["call_id"], "c1");
        let deltas = events.iter().filter(|e| e.contains(".delta\n")).count();
        assert!(deltas >= 6, "at least two deltas an item: {deltas}");
        let cut = cut_stream_events(&frame, &reply.chunks);
        assert!(!cut.iter().any(|e| e.contains("response.completed")));
    }
}
