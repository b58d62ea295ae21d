//! The scripted server's own token count of a chat request, independent of agentd's counter: o200k
//! over every message's content, reasoning and tool calls plus the tool definitions, with OpenAI's
//! published framing (3 tokens a message, 3 to prime the reply). A server with a window refuses what
//! this counts over it, as a real server would.
//!
//! An Anthropic Messages body is counted the same way: its top-level `system` (a string or text
//! blocks) as a system message, and in each message's content blocks the text, `thinking` text,
//! `redacted_thinking` data, `tool_use` (3 + name + input JSON) and `tool_result` (3 + its content).
//! Prompt-cache marks (`cache_control`) are request metadata, not prompt: they count nothing.
//!
//! The count is kept part by part ([`Parts`]: tools, system, each message, in prompt order), so the
//! prompt cache ([`crate::cache`]) prices a shared prefix with exactly the rules that count the whole.

use serde_json::Value;

use crate::script::Chunk;

/// Framing of every message (and of an Anthropic top-level `system`).
const MESSAGE_FRAMING: u64 = 3;
/// Framing of one tool call, `tool_use` or `tool_result` block.
const CALL_FRAMING: u64 = 3;
/// The priming of the reply, at the end of every request.
const REPLY_PRIMING: u64 = 3;

/// The o200k tokens of a bare text: what the server's `/tokenize` answers.
pub fn tokens(text: &str) -> u64 {
    tiktoken_rs::o200k_base_singleton().encode_ordinary(text).len() as u64
}

fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => {
            parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("")
        }
        _ => String::new(),
    }
}

/// Anthropic content blocks other than text (none in an OpenAI body).
fn block_tokens(content: &Value) -> u64 {
    let Value::Array(blocks) = content else { return 0 };
    let str_of = |b: &Value, key: &str| b.get(key).and_then(Value::as_str).unwrap_or("").to_string();
    blocks
        .iter()
        .map(|b| match b.get("type").and_then(Value::as_str).unwrap_or("") {
            "thinking" => tokens(&str_of(b, "thinking")),
            "redacted_thinking" => tokens(&str_of(b, "data")),
            "tool_use" => {
                CALL_FRAMING
                    + tokens(&str_of(b, "name"))
                    + tokens(&b.get("input").map(Value::to_string).unwrap_or_default())
            }
            "tool_result" => {
                let content = b.get("content").unwrap_or(&Value::Null);
                CALL_FRAMING + tokens(&content_text(content)) + block_tokens(content)
            }
            _ => 0,
        })
        .sum()
}

/// Tokens of one message of either protocol: framing, role, content (text and blocks), reasoning and
/// tool calls.
pub(crate) fn message_tokens(m: &Value) -> u64 {
    let mut total = MESSAGE_FRAMING + tokens(m.get("role").and_then(Value::as_str).unwrap_or(""));
    let content = m.get("content").unwrap_or(&Value::Null);
    total += tokens(&content_text(content)) + block_tokens(content);
    if let Some(r) = m.get("reasoning_content").and_then(Value::as_str) {
        total += tokens(r);
    }
    for call in m.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
        let f = &call["function"];
        total += CALL_FRAMING
            + tokens(f["name"].as_str().unwrap_or(""))
            + tokens(f["arguments"].as_str().unwrap_or(""));
    }
    total
}

/// Tokens of an Anthropic top-level `system` (a string or text blocks), framed as a system message.
fn system_tokens(system: &Value) -> u64 {
    MESSAGE_FRAMING + tokens("system") + tokens(&content_text(system))
}

/// Tokens of the tool definitions: their JSON without cache marks.
fn tools_tokens(tools: &Value) -> u64 {
    let mut tools = tools.clone();
    for tool in tools.as_array_mut().into_iter().flatten() {
        if let Some(tool) = tool.as_object_mut() {
            tool.remove("cache_control");
        }
    }
    tokens(&tools.to_string())
}

/// The server's count of a chat request, part by part in prompt order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Parts {
    /// The tool definitions (0 without `tools`).
    pub tools: u64,
    /// Anthropic's top-level `system` (0 without one; an OpenAI system prompt is a message).
    pub system: u64,
    /// Each message, in order.
    pub messages: Vec<u64>,
}

impl Parts {
    /// Counts a chat-completions or Anthropic Messages body.
    pub fn of(body: &Value) -> Parts {
        Parts {
            tools: body.get("tools").map_or(0, tools_tokens),
            system: body.get("system").filter(|s| !s.is_null()).map_or(0, system_tokens),
            messages: body
                .get("messages")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(message_tokens)
                .collect(),
        }
    }

    /// The whole request: every part plus the reply priming.
    pub fn total(&self) -> u64 {
        REPLY_PRIMING + self.tools + self.system + self.messages.iter().sum::<u64>()
    }
}

/// Tokens of a chat request body: chat completions, or Anthropic Messages.
pub fn count_request(body: &Value) -> u64 {
    Parts::of(body).total()
}

/// Tokens of what a reply says: its text, reasoning and tool calls (name and arguments), at least 1.
pub(crate) fn reply_tokens(chunks: &[Chunk]) -> u64 {
    let n: u64 = chunks
        .iter()
        .map(|c| match c {
            Chunk::Text(t) | Chunk::Reasoning(t) | Chunk::Thinking { text: t, .. } => tokens(t),
            Chunk::RedactedThinking(_) => 0,
            Chunk::ToolCall { name, arguments, .. } => CALL_FRAMING + tokens(name) + tokens(arguments),
        })
        .sum();
    n.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn anthropic_and_openai_bodies_of_the_same_conversation_count_alike() {
        let openai = json!({"messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hello there"},
        ]});
        let anthropic = json!({
            "system": "be brief",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hello there"}]}],
        });
        assert_eq!(count_request(&openai), count_request(&anthropic));
    }

    #[test]
    fn system_blocks_and_cache_marks_count_as_the_plain_request() {
        let plain = json!({
            "system": "be brief",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hello there"}]}],
            "tools": [{"name": "read_file", "description": "Read", "input_schema": {"type": "object"}}],
        });
        let ephemeral = json!({"type": "ephemeral"});
        let cached = json!({
            "system": [{"type": "text", "text": "be brief", "cache_control": ephemeral}],
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": "hello there", "cache_control": ephemeral},
            ]}],
            "tools": [{"name": "read_file", "description": "Read", "input_schema": {"type": "object"},
                       "cache_control": ephemeral}],
        });
        assert_eq!(count_request(&cached), count_request(&plain));
        let two_blocks = json!({
            "system": [{"type": "text", "text": "be "}, {"type": "text", "text": "brief"}],
            "messages": plain["messages"],
            "tools": plain["tools"],
        });
        assert_eq!(count_request(&two_blocks), count_request(&plain));
    }

    #[test]
    fn anthropic_blocks_count() {
        let base = json!({"messages": [{"role": "user", "content": "hi"}]});
        let with_blocks = json!({"messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "let me see", "signature": "sig"},
                {"type": "tool_use", "id": "t", "name": "read_file", "input": {"path": "a"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t", "content": "fn main() {}"},
            ]},
        ]});
        let expected = count_request(&base)
            + (3 + tokens("assistant")
                + tokens("let me see")
                + 3
                + tokens("read_file")
                + tokens(r#"{"path":"a"}"#))
            + (3 + tokens("user") + 3 + tokens("fn main() {}"));
        assert_eq!(count_request(&with_blocks), expected);
    }

    #[test]
    fn the_request_is_the_sum_of_its_parts() {
        let body = json!({
            "system": "be brief",
            "messages": [
                {"role": "user", "content": "hello there"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "read_file", "arguments": "{}"}},
                ]},
            ],
            "tools": [{"name": "read_file"}],
        });
        let parts = Parts::of(&body);
        assert_eq!(parts.messages.len(), 2);
        assert_eq!(parts.messages[0], 3 + tokens("user") + tokens("hello there"));
        assert_eq!(parts.messages[1], 3 + tokens("assistant") + 3 + tokens("read_file") + tokens("{}"));
        assert_eq!(parts.system, 3 + tokens("system") + tokens("be brief"));
        assert_eq!(parts.tools, tokens(r#"[{"name":"read_file"}]"#));
        assert_eq!(count_request(&body), 3 + parts.tools + parts.system + parts.messages.iter().sum::<u64>());
    }
}
