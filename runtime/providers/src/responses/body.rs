//! OpenAI's Responses API on the wire, as serde structs: the body a [`ChatRequest`] is POSTed as to
//! `{base}/responses`. A field that is `None` (or an empty list where the wire has none) is left out.
//!
//! Nothing is stored at the server (`store: false`): every request carries the whole conversation as
//! input items, and the reasoning the model did comes back encrypted (`include:
//! ["reasoning.encrypted_content"]`) so that it can be sent back within a chain of tool calls. An
//! agentd message becomes items in its parts' order: a user's text and images one `message` item,
//! each tool result a `function_call_output`, an assistant's thinking parts `reasoning` items, its
//! text one `message` item (`output_text`) and each tool call a `function_call`.
//!
//! A reasoning item goes back with its encrypted content unchanged and its summary as one
//! `summary_text` (a summary the server gave in several parts is sent as one, joined by blank
//! lines, as agentd keeps it). Thinking with no encrypted content (another format's reasoning, or
//! a server that sent none) is not sent: with nothing stored at the server there is nothing for it
//! to refer to, and OpenAI refuses a reasoning item it cannot find. The item ids the server gave
//! are not sent either, for the same reason.

use crate::openai::body::Function;
use crate::wire::{data_url, pieces, Piece};
use agentd_protocol::ChatRequest;
use agentd_protocol::{Message, Part, Speaker};
use serde::Serialize;

/// What the Responses API is asked to include besides the output: the reasoning, encrypted.
pub(crate) const ENCRYPTED_REASONING: &str = "reasoning.encrypted_content";

/// The JSON POSTed to `{base}/responses`: `model`, the system prompt as `instructions`, the
/// conversation as `input` items, the tools (and `tool_choice: "none"` to keep but forbid them),
/// `max_output_tokens` when the request names one, `store: false`, `stream`, the encrypted
/// reasoning asked for in `include` (unless the model refused it), and the request's cache key as
/// `prompt_cache_key`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResponsesBody<'a> {
    pub(crate) model: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub(crate) instructions: &'a str,
    pub(crate) input: Vec<InputItem<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tool_choice: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) max_output_tokens: Option<u32>,
    pub(crate) store: bool,
    pub(crate) stream: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) include: Vec<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) prompt_cache_key: Option<&'a str>,
}

/// One input item, tagged by its `type`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum InputItem<'a> {
    Message { role: &'static str, content: Vec<Content> },
    Reasoning { summary: Vec<Summary<'a>>, encrypted_content: &'a str },
    FunctionCall { call_id: &'a str, name: &'a str, arguments: &'a str },
    FunctionCallOutput { call_id: &'a str, output: &'a str },
}

/// A message item's content part.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Content {
    InputText { text: String },
    InputImage { image_url: String },
    OutputText { text: String },
}

/// A reasoning item's summary part.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Summary<'a> {
    SummaryText { text: &'a str },
}

/// `{"type": "function", "name", "description", "parameters"}`: the Responses API's tools are chat
/// completions' `function` laid flat.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename = "function")]
pub(crate) struct WireTool<'a> {
    #[serde(flatten)]
    pub(crate) function: Function<'a>,
}

impl<'a> ResponsesBody<'a> {
    /// The streamed request for `req`; `include` and `cache_key` say whether the server still
    /// takes those optional fields.
    pub(crate) fn new(req: &'a ChatRequest, include: bool, cache_key: bool) -> ResponsesBody<'a> {
        let mut input = Vec::with_capacity(req.messages.len() * 2);
        for message in &req.messages {
            input_items(message, &mut input);
        }
        let tools: Vec<WireTool<'a>> = req
            .tools
            .iter()
            .map(|t| WireTool {
                function: Function { name: &t.name, description: &t.description, parameters: &t.parameters },
            })
            .collect();
        ResponsesBody {
            model: &req.model,
            instructions: &req.system,
            input,
            tool_choice: (!tools.is_empty() && req.tool_choice_none).then_some("none"),
            tools,
            max_output_tokens: req.max_tokens,
            store: false,
            stream: true,
            include: if include { vec![ENCRYPTED_REASONING] } else { Vec::new() },
            prompt_cache_key: req.cache_key.as_deref().filter(|_| cache_key),
        }
    }

    /// The same request without streaming.
    pub(crate) fn unstreamed(self) -> ResponsesBody<'a> {
        ResponsesBody { stream: false, ..self }
    }
}

/// One agentd message as input items, in its parts' order.
fn input_items<'a>(message: &'a Message, out: &mut Vec<InputItem<'a>>) {
    match message.role {
        Speaker::Assistant => assistant_items(message, out),
        Speaker::System | Speaker::User | Speaker::Tool => {
            for part in &message.parts {
                if let Part::ToolResult { call_id, content, .. } = part {
                    out.push(InputItem::FunctionCallOutput { call_id, output: content });
                }
            }
            // Whatever else the message says is its speaker's.
            let role = if message.role == Speaker::System { "system" } else { "user" };
            let content = user_content(message);
            if !content.is_empty() {
                out.push(InputItem::Message { role, content });
            }
        }
    }
}

/// An assistant message: its reasoning, its text (one `output_text` message where the text part
/// stood first) and its calls, in order.
fn assistant_items<'a>(message: &'a Message, out: &mut Vec<InputItem<'a>>) {
    let text = message.text();
    let mut text_sent = text.is_empty();
    for part in &message.parts {
        match part {
            Part::Thinking { text, signature: Some(encrypted), redacted: false } => {
                let summary = if text.is_empty() { Vec::new() } else { vec![Summary::SummaryText { text }] };
                out.push(InputItem::Reasoning { summary, encrypted_content: encrypted });
            }
            Part::Text { .. } if !text_sent => {
                text_sent = true;
                out.push(InputItem::Message {
                    role: "assistant",
                    content: vec![Content::OutputText { text: text.clone() }],
                });
            }
            Part::ToolCall { id, name, arguments } => {
                out.push(InputItem::FunctionCall { call_id: id, name, arguments });
            }
            _ => {}
        }
    }
}

/// A user message's text runs and images, in order.
fn user_content(message: &Message) -> Vec<Content> {
    pieces(message)
        .into_iter()
        .map(|piece| match piece {
            Piece::Text(text) => Content::InputText { text },
            Piece::Image { media_type, data } => {
                Content::InputImage { image_url: data_url(media_type, data) }
            }
        })
        .collect()
}
