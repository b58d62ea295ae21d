//! Assembling a streamed Responses API answer (`response.*` events) into one [`ChatResponse`], and
//! telling a complete answer from a stream that went wrong.
//!
//! Output items arrive one by one (`response.output_item.added`, their deltas, then
//! `response.output_item.done` with the whole item, which is what counts), and the stream ends
//! with `response.completed` (the usage, the whole output again), `response.incomplete` (cut at
//! `max_output_tokens`: finish reason `length`) or `response.failed` / `error` (the error it
//! names). The answer's parts follow the output items' order: a `reasoning` item is a thinking
//! part (its summary as the text, its encrypted content as the signature sent back), a `message`
//! item text, a `function_call` a tool call.

use crate::openai::refusals::classify_stream_error;
use crate::sse::{anomaly, parse_json, read_data, Assemble, Data, Flow};
use agentd_protocol::{AnomalyKind, ChatResponse, ProviderError};
use agentd_protocol::{Figure, Message, Part, RawUsage, Speaker};
use serde_json::Value;
use std::collections::BTreeMap;

/// A server that ignored `stream: true` and answered with the whole response object.
pub(crate) fn from_json_body(body: &str) -> Result<ChatResponse, ProviderError> {
    let value = parse_json("the response", body)?;
    let mut asm = Assembler::default();
    asm.push_response(&value)?;
    asm.finish()
}

/// One output item as it is being assembled.
#[derive(Debug, Clone, PartialEq)]
enum Item {
    Reasoning {
        summary: Vec<String>,
        text: String,
        encrypted: Option<String>,
    },
    Message {
        text: String,
    },
    Call {
        id: String,
        name: String,
        arguments: String,
    },
    /// An item agentd does not use (a built-in tool's call …).
    Other,
}

impl Item {
    /// A whole item as the server gave it (`output_item.added` / `.done`, or a response's output).
    fn of(item: &Value) -> Item {
        let str_at = |key: &str| item.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
        let texts = |key: &str, kind: &str| -> Vec<String> {
            item.get(key)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|part| part.get("type").and_then(Value::as_str) == Some(kind))
                .filter_map(|part| part.get("text").and_then(Value::as_str))
                .map(str::to_string)
                .collect()
        };
        match item.get("type").and_then(Value::as_str) {
            Some("reasoning") => Item::Reasoning {
                summary: texts("summary", "summary_text"),
                text: texts("content", "reasoning_text").concat(),
                encrypted: item
                    .get("encrypted_content")
                    .and_then(Value::as_str)
                    .filter(|e| !e.is_empty())
                    .map(str::to_string),
            },
            Some("message") => Item::Message { text: texts("content", "output_text").concat() },
            Some("function_call") => {
                let arguments = match item.get("arguments") {
                    Some(Value::String(text)) => text.clone(),
                    // Some servers give the arguments as an object rather than its JSON text.
                    Some(v @ Value::Object(_)) => v.to_string(),
                    _ => String::new(),
                };
                Item::Call { id: str_at("call_id"), name: str_at("name"), arguments }
            }
            _ => Item::Other,
        }
    }

    /// The part this item is in the answer, if any.
    fn part(self, index: u64) -> Option<Part> {
        match self {
            Item::Reasoning { summary, text, encrypted } => {
                let shown = if summary.is_empty() { text } else { summary.join("\n\n") };
                (!shown.is_empty() || encrypted.is_some()).then_some(Part::Thinking {
                    text: shown,
                    signature: encrypted,
                    redacted: false,
                })
            }
            Item::Message { text } => (!text.is_empty()).then_some(Part::Text { text }),
            Item::Call { id, name, arguments } => {
                let id = if id.is_empty() { format!("call_{index}") } else { id };
                Some(Part::ToolCall { id, name, arguments })
            }
            Item::Other => None,
        }
    }
}

/// The state of one streamed answer, fed by [`drive`](crate::sse::drive) to its end.
#[derive(Debug, Default)]
pub(crate) struct Assembler {
    /// By the server's `output_index`.
    items: BTreeMap<u64, Item>,
    finish_reason: Option<String>,
    usage: Option<RawUsage>,
    events: usize,
}

impl Assembler {
    /// One event's payload (its `type` says what it is).
    fn push_event(&mut self, event: &Value) -> Result<Flow, ProviderError> {
        self.events += 1;
        let index = || event.get("output_index").and_then(Value::as_u64).unwrap_or(0);
        let delta = || event.get("delta").and_then(Value::as_str).unwrap_or_default();
        match event.get("type").and_then(Value::as_str).unwrap_or_default() {
            "response.output_item.added" | "response.output_item.done" => {
                if let Some(item) = event.get("item") {
                    self.items.insert(index(), Item::of(item));
                }
            }
            "response.output_text.delta" => {
                if let Item::Message { text } = self.item(index(), || Item::Message { text: String::new() }) {
                    text.push_str(delta());
                }
            }
            "response.reasoning_summary_text.delta" => {
                let part = event.get("summary_index").and_then(Value::as_u64).unwrap_or(0);
                let empty = || Item::Reasoning { summary: Vec::new(), text: String::new(), encrypted: None };
                if let Item::Reasoning { summary, .. } = self.item(index(), empty) {
                    let part = usize::try_from(part).unwrap_or(usize::MAX).min(summary.len());
                    if part == summary.len() {
                        summary.push(String::new());
                    }
                    if let Some(text) = summary.get_mut(part) {
                        text.push_str(delta());
                    }
                }
            }
            "response.reasoning_text.delta" => {
                let empty = || Item::Reasoning { summary: Vec::new(), text: String::new(), encrypted: None };
                if let Item::Reasoning { text, .. } = self.item(index(), empty) {
                    text.push_str(delta());
                }
            }
            "response.function_call_arguments.delta" => {
                let empty =
                    || Item::Call { id: String::new(), name: String::new(), arguments: String::new() };
                if let Item::Call { arguments, .. } = self.item(index(), empty) {
                    arguments.push_str(delta());
                }
            }
            "response.completed" | "response.incomplete" => {
                if let Some(response) = event.get("response") {
                    self.push_response(response)?;
                }
                return Ok(Flow::Done);
            }
            "response.failed" => {
                let error = event.pointer("/response/error").filter(|e| !e.is_null());
                return Err(classify_stream_error(error.unwrap_or(event)));
            }
            "error" => return Err(classify_stream_error(event.get("error").unwrap_or(event))),
            // `response.created`, `.in_progress`, content and summary parts opened and closed, the
            // `.done` of each delta kind: the items' `.done` says all of it.
            _ => {}
        }
        Ok(Flow::More)
    }

    /// The item at `index`, made by `empty` when its `added` event was missed.
    fn item(&mut self, index: u64, empty: impl FnOnce() -> Item) -> &mut Item {
        self.items.entry(index).or_insert_with(empty)
    }

    /// A whole response object (`response.completed`'s, or an unstreamed answer): its status, its
    /// usage, and its output where the stream did not bring the items.
    fn push_response(&mut self, response: &Value) -> Result<(), ProviderError> {
        if let Some(error) = response.get("error").filter(|e| !e.is_null()) {
            return Err(classify_stream_error(error));
        }
        if let Some(usage) = response.get("usage").and_then(parse_usage) {
            self.usage = Some(usage);
        }
        let output = response.get("output").and_then(Value::as_array);
        if self.items.is_empty() {
            for (index, item) in output.into_iter().flatten().enumerate() {
                self.items.insert(index as u64, Item::of(item));
            }
        }
        let status = response.get("status").and_then(Value::as_str).unwrap_or("completed");
        let reason = match status {
            "incomplete" => match response.pointer("/incomplete_details/reason").and_then(Value::as_str) {
                Some("max_output_tokens") | None => "length",
                Some(other) => other,
            },
            "failed" => {
                return Err(ProviderError::Server {
                    status: 500,
                    message: "the response failed without saying why".into(),
                })
            }
            _ if self.items.values().any(|i| matches!(i, Item::Call { .. })) => "tool_calls",
            _ => "stop",
        };
        self.finish_reason = Some(reason.to_string());
        Ok(())
    }
}

impl Assemble for Assembler {
    fn push(&mut self, _event: &str, data: &str) -> Result<Flow, ProviderError> {
        match read_data("a stream event", data)? {
            Data::Blank => Ok(Flow::More),
            Data::Done => Ok(Flow::Done),
            Data::Json(value) => self.push_event(&value),
        }
    }

    /// The response's end came: only what trails it can still be lost.
    fn complete(&self) -> bool {
        self.finish_reason.is_some()
    }

    fn finish(self) -> Result<ChatResponse, ProviderError> {
        let parts: Vec<Part> = self.items.into_iter().filter_map(|(index, item)| item.part(index)).collect();
        let has_output = parts.iter().any(|p| matches!(p, Part::Text { .. } | Part::ToolCall { .. }));
        let reasoning: usize = parts
            .iter()
            .map(|p| match p {
                Part::Thinking { text, .. } => text.len(),
                _ => 0,
            })
            .sum();
        let Some(finish_reason) = self.finish_reason else {
            if !parts.is_empty() {
                return Err(anomaly(
                    AnomalyKind::NoFinishReason,
                    format!(
                        "the stream ended without the response's end after {} output item(s)",
                        parts.len()
                    ),
                ));
            }
            return Err(anomaly(
                AnomalyKind::Empty,
                format!("the stream ended after {} event(s) without any output or end", self.events),
            ));
        };
        if !has_output {
            return Err(anomaly(
                AnomalyKind::Empty,
                format!(
                    "the model finished ({finish_reason}) without text or tool calls ({reasoning} chars of reasoning)"
                ),
            ));
        }
        Ok(ChatResponse {
            message: Message::new(Speaker::Assistant, parts),
            finish_reason,
            usage: self.usage,
        })
    }
}

/// A usage object, each figure kept as said (judged later, against the request): `input_tokens`
/// (the whole prompt), `output_tokens`, and the input's cached part,
/// `input_tokens_details.cached_tokens`. `null` or anything but an object is no report.
fn parse_usage(usage: &Value) -> Option<RawUsage> {
    usage.as_object()?;
    let figure = |key: &str, pointer: &str| usage.pointer(pointer).map(|v| Figure::of(key, v));
    Some(RawUsage {
        prompt: figure("input_tokens", "/input_tokens"),
        completion: figure("output_tokens", "/output_tokens"),
        cache_read: figure("input_tokens_details.cached_tokens", "/input_tokens_details/cached_tokens"),
        cache_write: None,
        cache_apart: false,
    })
}
