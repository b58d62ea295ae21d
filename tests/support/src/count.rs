//! The scripted server's own token count of a chat request, independent of agentd's counter: o200k
//! over every message's content, reasoning and tool calls plus the tool definitions, with OpenAI's
//! published framing (3 tokens a message, 3 to prime the reply). A server with a window refuses what
//! this counts over it, as a real server would.

use serde_json::Value;

fn tokens(text: &str) -> u64 {
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

/// Tokens of a chat-completions request body.
pub fn count_request(body: &Value) -> u64 {
    let mut total = 3;
    for m in body.get("messages").and_then(Value::as_array).into_iter().flatten() {
        total += 3;
        total += tokens(m.get("role").and_then(Value::as_str).unwrap_or(""));
        total += tokens(&content_text(m.get("content").unwrap_or(&Value::Null)));
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
        total += tokens(&tools.to_string());
    }
    total
}
