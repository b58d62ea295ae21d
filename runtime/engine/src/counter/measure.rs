//! Measurement: the one walk over what is sent, shared by counting and by
//! [`TokenCounter::missing_texts`](super::TokenCounter::missing_texts).
//!
//! A message costs its framing, its role and each part; a tool definition its JSON schema and
//! framing; an image the provider's rule (never a measurement). The walk takes the text counter as a
//! closure, so the same walk counts with tiktoken, with what the endpoint taught, or merely notes
//! which texts the endpoint has not counted yet.

use super::Tokenizer;
use agentd_protocol::ToolSchema;
use agentd_protocol::{Count, Message, Part, Speaker};

/// Framing tokens of every message (`<|im_start|>`, role separator, `<|im_end|>` …).
const MESSAGE_FRAMING: u64 = 4;
/// Framing of one tool call inside an assistant message.
const TOOL_CALL_FRAMING: u64 = 8;
/// Framing of one tool result.
const TOOL_RESULT_FRAMING: u64 = 4;
/// Framing of one tool definition.
const TOOL_SPEC_FRAMING: u64 = 8;
/// The priming of the reply (`<|im_start|>assistant<|message|>`).
pub(super) const REPLY_PRIMING: u64 = 3;
/// An image, by OpenAI's high-detail rule for a typical 1024×1024 picture: 85 + 4 tiles × 170.
const IMAGE_TOKENS: u64 = 765;

/// The framing tokens a request's messages are counted with: every message's, tool call's and tool
/// result's (the tool definitions' aside). This is the part of a count that is our approximation of
/// the server's template, set on the safe side: a server's own count may fall short of ours by up
/// to this much without having cut anything.
pub fn framing(messages: &[Message]) -> agentd_protocol::Tokens {
    let per_message = messages.iter().map(|m| {
        let parts = m.parts.iter().map(|p| match p {
            Part::ToolCall { .. } => TOOL_CALL_FRAMING,
            Part::ToolResult { .. } => TOOL_RESULT_FRAMING,
            _ => 0,
        });
        MESSAGE_FRAMING.saturating_add(parts.fold(0u64, u64::saturating_add))
    });
    agentd_protocol::Tokens(per_message.fold(0u64, u64::saturating_add))
}

/// A request's count, by category. `total = system + tools + messages + reply priming`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RequestCount {
    /// The whole request, in tokens.
    pub total: Count,
    /// The system prompt, counted as a message.
    pub system: Count,
    /// The tool schemas.
    pub tools: Count,
    /// Every message of the request (thinking included).
    pub messages: Count,
    /// The part of `messages` that is thinking (reasoning sent back to the provider).
    pub thinking: Count,
}

/// One cached measurement.
#[derive(Debug, Clone, Copy)]
pub(super) struct Entry {
    pub(super) total: Count,
    pub(super) thinking: Count,
}

pub(super) fn measure_message(t: Tokenizer, m: &Message, count: &mut dyn FnMut(&str) -> Count) -> Entry {
    let mut total = t.fixed(MESSAGE_FRAMING) + count(m.role.as_str());
    let mut thinking = t.fixed(0);
    for part in &m.parts {
        match part {
            Part::Text { text } => total += count(text),
            Part::Thinking { text, signature, .. } => {
                let mut c = count(text);
                if let Some(signature) = signature {
                    c += count(signature);
                }
                thinking += c;
                total += c;
            }
            Part::ToolCall { name, arguments, .. } => {
                total += count(name) + count(arguments) + t.fixed(TOOL_CALL_FRAMING);
            }
            Part::ToolResult { call_id, content, .. } => {
                total += count(call_id) + count(content) + t.fixed(TOOL_RESULT_FRAMING);
            }
            // The provider's rule, not ours: never a measurement.
            Part::Image { .. } => total += Count::estimated(IMAGE_TOKENS),
        }
    }
    Entry { total, thinking }
}

pub(super) fn measure_system(t: Tokenizer, system: &str, count: &mut dyn FnMut(&str) -> Count) -> Entry {
    let total = t.fixed(MESSAGE_FRAMING) + count(Speaker::System.as_str()) + count(system);
    Entry { total, thinking: t.fixed(0) }
}

pub(super) fn measure_tool(t: Tokenizer, json: &str, count: &mut dyn FnMut(&str) -> Count) -> Entry {
    Entry { total: count(json) + t.fixed(TOOL_SPEC_FRAMING), thinking: t.fixed(0) }
}

/// A tool definition as its JSON schema serialisation (name, description, parameters).
pub(super) fn tool_json(tool: &ToolSchema) -> String {
    serde_json::to_string(tool).unwrap_or_default()
}
