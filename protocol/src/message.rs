//! The conversation model: a message is a speaker, a list of parts and the kind of message it is.
//!
//! The [`MessageKind`] says what a message *is* to agentd — the objective, a checkpoint summary, the
//! unresolved observations, the working files, or a plain turn — and is stored on the message when
//! it is made, so no room ever sorts messages by their text. An observations message carries its
//! observations as data too ([`CarriedObservation`]), so a later compaction reads them back without
//! parsing the text they were rendered into. Provider reasoning (`Thinking`) is a part
//! of its own, kept apart from the shown text so it can be sent back byte-identical through a chain of
//! tool calls and cleared deliberately later.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Who a message is from, as every chat wire format names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Speaker {
    /// The system prompt.
    System,
    /// The user, or agentd speaking for the task (objective, checkpoints, follow-ups).
    User,
    /// The model.
    Assistant,
    /// A tool's result.
    Tool,
}

/// What a message is to agentd. Stored on the message (absent on the wire when `plain`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MessageKind {
    /// A turn of the conversation: the model's, a tool's, a user's.
    #[default]
    Plain,
    /// The task's objective, the first thing every request carries.
    Objective,
    /// A compaction's summary of what left the request.
    Checkpoint,
    /// The unresolved failures carried through compactions.
    Observations,
    /// The current text of the files the coder changed.
    WorkingFiles,
    /// The project's instructions (`AGENTS.md`), read at the task's start and at each compaction.
    Instructions,
    /// The durable memory notes of the workspace and the user, as they were when the task started (or
    /// at its last compaction).
    Memory,
    /// What agentd tells an agent about its own conduct: that it is going in circles (`agent_stalled`).
    /// Never taken for a user's request.
    Notice,
}

/// What an unresolved observation is about. On the wire `type` names it in snake case
/// (`failing_command`, `rejected_finish`) beside its fields.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ObservationKind {
    /// A `run_command` call that failed, until the same command succeeds or a `finish` is accepted.
    FailingCommand {
        /// The command string exactly as the model sent it.
        command: String,
    },
    /// A `finish` that was rejected, until a later `finish` is accepted.
    RejectedFinish,
}

/// An unresolved failure an observations message carries, as data: what it is about and its text.
/// The message's shown text is made from these texts (the model reads that); a later compaction reads
/// these, never the shown text, so a text that looks like the start of another observation is still one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct CarriedObservation {
    /// What failed.
    pub kind: ObservationKind,
    /// Verbatim and self-contained, e.g. "run_command `cargo test` failed:\n<the tool result>".
    pub text: String,
}

impl MessageKind {
    /// Whether this is a plain turn (the default, left off the wire).
    pub fn is_plain(&self) -> bool {
        *self == MessageKind::Plain
    }

    /// Whether this is one of the blocks every request of a task starts with — the project's
    /// instructions and the memory notes — which a compaction never summarises: it puts them back
    /// first, verbatim, as they read at that moment.
    pub fn is_pinned(&self) -> bool {
        matches!(self, MessageKind::Instructions | MessageKind::Memory)
    }
}

impl Speaker {
    /// The speaker's name on the OpenAI wire (`system`, `user`, `assistant`, `tool`).
    pub fn as_str(self) -> &'static str {
        match self {
            Speaker::System => "system",
            Speaker::User => "user",
            Speaker::Assistant => "assistant",
            Speaker::Tool => "tool",
        }
    }
}

/// One piece of a message's content. On the wire `type` names the variant in snake case (`text`, `thinking`,
/// `tool_call`, `tool_result`, `image`) beside its fields.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Part {
    /// Text shown to or written by the model.
    Text {
        /// The text itself.
        text: String,
    },
    /// Provider reasoning. `signature` is the provider's opaque proof (Anthropic) and must be sent back
    /// unchanged with the text; `redacted` holds encrypted reasoning the provider would not show.
    Thinking {
        /// The reasoning as the provider streamed it (for a redacted block, the encrypted data).
        text: String,
        /// Anthropic's signature over the block, sent back unchanged with the text; absent for providers that
        /// sign nothing.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
        /// True for a block the provider redacted: `text` is opaque encrypted data, sent back as is.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        redacted: bool,
    },
    /// A call the model made to one of its tools, answered by a `tool_result` part with the same id.
    ToolCall {
        /// The call's id, as the model's answer gave it (agentd makes one up when a server gives none).
        id: String,
        /// The tool's name as the model wrote it; it may name no tool the role has, which is answered with an
        /// error result.
        name: String,
        /// The arguments exactly as the model produced them (a JSON text, possibly malformed).
        arguments: String,
    },
    /// A tool's answer to a call, in a `tool` message.
    ToolResult {
        /// The id of the `tool_call` this answers.
        call_id: String,
        /// The result as the model sees it: the tool's output with secrets redacted, or the first page of it
        /// with a note naming the evidence that holds the rest.
        content: String,
        /// True when the call failed (a refused path, a command that exited non-zero, bad arguments): the
        /// model is told it is an error.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
    /// An image given to the model.
    Image {
        /// The image's media type, such as `image/png`.
        media_type: String,
        /// Base64 data.
        data: String,
    },
}

/// One message of a conversation: who speaks, what they say, and what the message is to agentd.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct Message {
    /// Who the message is from.
    pub role: Speaker,
    /// Its content, in order: text, thinking, tool calls, tool results and images as the model exchanged
    /// them.
    pub parts: Vec<Part>,
    /// What the message is to agentd; `plain` unless agentd made it for a purpose.
    #[serde(default, skip_serializing_if = "MessageKind::is_plain")]
    pub kind: MessageKind,
    /// On an `observations` message, the observations its text shows, as data; empty (and absent on
    /// the wire) on every other message. Never sent to a model: only the parts are.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub observations: Vec<CarriedObservation>,
}

impl Message {
    /// A plain message of `role` with these parts.
    pub fn new(role: Speaker, parts: Vec<Part>) -> Message {
        Message { role, parts, kind: MessageKind::Plain, observations: Vec::new() }
    }

    /// This message, carrying `observations` as data (see [`Message::observations`]).
    pub fn with_observations(mut self, observations: Vec<CarriedObservation>) -> Message {
        self.observations = observations;
        self
    }

    /// This message, marked as being of `kind`.
    pub fn with_kind(mut self, kind: MessageKind) -> Message {
        self.kind = kind;
        self
    }

    /// A plain system message holding `text`.
    pub fn system(text: impl Into<String>) -> Message {
        Message::new(Speaker::System, vec![Part::Text { text: text.into() }])
    }

    /// A plain user message holding `text`.
    pub fn user(text: impl Into<String>) -> Message {
        Message::new(Speaker::User, vec![Part::Text { text: text.into() }])
    }

    /// A plain assistant message holding `text`.
    pub fn assistant_text(text: impl Into<String>) -> Message {
        Message::new(Speaker::Assistant, vec![Part::Text { text: text.into() }])
    }

    /// A tool message answering the call `call_id` with `content`, marked as an error when `is_error`.
    pub fn tool_result(call_id: impl Into<String>, content: impl Into<String>, is_error: bool) -> Message {
        Message::new(
            Speaker::Tool,
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

    /// Whether the message carries provider reasoning (a thinking part).
    pub fn has_thinking(&self) -> bool {
        self.parts.iter().any(|p| matches!(p, Part::Thinking { .. }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carried_observations_are_stored_beside_the_text_and_absent_when_none() {
        let carried = vec![
            CarriedObservation {
                kind: ObservationKind::FailingCommand { command: "cargo test".into() },
                text: "run_command `cargo test` failed:\nboom".into(),
            },
            CarriedObservation {
                kind: ObservationKind::RejectedFinish,
                text: "finish was rejected:\nno".into(),
            },
        ];
        let m = Message::user("[unresolved observations]\n\n…")
            .with_kind(MessageKind::Observations)
            .with_observations(carried);
        let json = serde_json::to_value(&m).unwrap();
        assert_eq!(
            json["observations"],
            serde_json::json!([
                {"kind": {"type": "failing_command", "command": "cargo test"},
                 "text": "run_command `cargo test` failed:\nboom"},
                {"kind": {"type": "rejected_finish"}, "text": "finish was rejected:\nno"},
            ])
        );
        assert_eq!(serde_json::from_value::<Message>(json).unwrap(), m);
        // Every other message is written as before, and a message written before reads with none.
        let plain = serde_json::to_value(Message::user("hi")).unwrap();
        assert_eq!(plain, serde_json::json!({"role": "user", "parts": [{"type": "text", "text": "hi"}]}));
        let old: Message = serde_json::from_str(
            r#"{"role":"user","parts":[{"type":"text","text":"[unresolved observations]"}],"kind":"observations"}"#,
        )
        .unwrap();
        assert!(old.observations.is_empty());
    }
}
