//! Setup the provider integration tests share.

#![allow(dead_code)] // each test crate uses its own part

use agentd_agents::schema::ToolSchema;
use agentd_policies::Message;
use agentd_runtime::provider::ChatRequest;
use serde_json::json;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// A terse system prompt, one `read_file` tool and at most 256 output tokens.
pub fn request(model: &str, messages: Vec<Message>) -> ChatRequest {
    ChatRequest {
        model: model.to_string(),
        system: "You are terse.".into(),
        messages,
        tools: vec![ToolSchema {
            name: "read_file".into(),
            description: "Read a file".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        }],
        tool_choice_none: false,
        max_tokens: Some(256),
        thinking_budget: None,
    }
}

/// A token that a spawned task cancels after `delay`.
pub fn cancel_after(delay: Duration) -> CancellationToken {
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        trigger.cancel();
    });
    cancel
}
