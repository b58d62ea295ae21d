//! The scripted server's own token count of a chat request, independent of agentd's counter: o200k
//! over every message's content, reasoning and tool calls plus the tool definitions, with OpenAI's
//! published framing (3 tokens a message, 3 to prime the reply). A server with a window refuses what
//! this counts over it, as a real server would.
//!
//! An Anthropic Messages body is counted the same way: its top-level `system` (a string or text
//! blocks) as a system message, and in each message's content blocks the text, `thinking` text,
//! `redacted_thinking` data, `tool_use` (3 + name + input JSON) and `tool_result` (3 + its content).
//! Prompt-cache marks (`cache_control`) are request metadata, not prompt: they count nothing.

use serde_json::Value;

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
                3 + tokens(&str_of(b, "name"))
                    + tokens(&b.get("input").map(Value::to_string).unwrap_or_default())
            }
            "tool_result" => {
                let content = b.get("content").unwrap_or(&Value::Null);
                3 + tokens(&content_text(content)) + block_tokens(content)
            }
            _ => 0,
        })
        .sum()
}

/// Tokens of a chat request body: chat completions, or Anthropic Messages.
pub fn count_request(body: &Value) -> u64 {
    let mut total = 3;
    if let Some(system) = body.get("system").filter(|s| !s.is_null()) {
        total += 3 + tokens("system") + tokens(&content_text(system));
    }
    for m in body.get("messages").and_then(Value::as_array).into_iter().flatten() {
        total += 3;
        total += tokens(m.get("role").and_then(Value::as_str).unwrap_or(""));
        let content = m.get("content").unwrap_or(&Value::Null);
        total += tokens(&content_text(content)) + block_tokens(content);
        if let Some(r) = m.get("reasoning_content").and_then(Value::as_str) {
            total += tokens(r);
        }
        for call in m.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
            let f = &call["function"];
            total +=
                3 + tokens(f["name"].as_str().unwrap_or("")) + tokens(f["arguments"].as_str().unwrap_or(""));
        }
    }
    if let Some(tools) = body.get("tools") {
        let mut tools = tools.clone();
        for tool in tools.as_array_mut().into_iter().flatten() {
            if let Some(tool) = tool.as_object_mut() {
                tool.remove("cache_control");
            }
        }
        total += tokens(&tools.to_string());
    }
    total
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
}
