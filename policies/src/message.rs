//! The conversation model: a message is a role and a list of parts.
//!
//! Provider reasoning (`Thinking`) is a part of its own, kept apart from the shown text so it can be
//! sent back byte-identical through a chain of tool calls and cleared deliberately later.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Part {
    Text {
        text: String,
    },
    /// Provider reasoning. `signature` is the provider's opaque proof (Anthropic) and must be sent back
    /// unchanged with the text; `redacted` holds encrypted reasoning the provider would not show.
    Thinking {
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        redacted: bool,
    },
    ToolCall {
        id: String,
        name: String,
        /// The arguments exactly as the model produced them (a JSON text, possibly malformed).
        arguments: String,
    },
    ToolResult {
        call_id: String,
        content: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
    Image {
        media_type: String,
        /// Base64 data.
        data: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub parts: Vec<Part>,
}

impl Message {
    pub fn new(role: Role, parts: Vec<Part>) -> Message {
        Message { role, parts }
    }

    pub fn system(text: impl Into<String>) -> Message {
        Message::new(Role::System, vec![Part::Text { text: text.into() }])
    }

    pub fn user(text: impl Into<String>) -> Message {
        Message::new(Role::User, vec![Part::Text { text: text.into() }])
    }

    pub fn assistant_text(text: impl Into<String>) -> Message {
        Message::new(Role::Assistant, vec![Part::Text { text: text.into() }])
    }

    pub fn tool_result(call_id: impl Into<String>, content: impl Into<String>, is_error: bool) -> Message {
        Message::new(
            Role::Tool,
            vec![Part::ToolResult { call_id: call_id.into(), content: content.into(), is_error }],
        )
    }

    /// The concatenated shown text (no thinking, no tool traffic).
    pub fn text(&self) -> String {
        let mut out = String::new();
        for part in &self.parts {
            if let Part::Text { text } = part {
                out.push_str(text);
            }
        }
        out
    }

    /// The tool calls this message makes, in order: `(id, name, arguments)`.
    pub fn tool_calls(&self) -> impl Iterator<Item = (&str, &str, &str)> {
        self.parts.iter().filter_map(|p| match p {
            Part::ToolCall { id, name, arguments } => Some((id.as_str(), name.as_str(), arguments.as_str())),
            _ => None,
        })
    }

    /// The call ids this message answers.
    pub fn tool_result_ids(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|p| match p {
            Part::ToolResult { call_id, .. } => Some(call_id.as_str()),
            _ => None,
        })
    }

    pub fn has_thinking(&self) -> bool {
        self.parts.iter().any(|p| matches!(p, Part::Thinking { .. }))
    }
}
