//! What a tool call answers ([`ToolOutcome`]), and the output it held back from the model
//! ([`Overflow`]) so that nothing is lost.

use crate::error::ToolError;

/// What a tool call returns to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutcome {
    /// Whether the call did what was asked; `false` makes the result an error result.
    pub ok: bool,
    /// The result's text as the model will see it (before paging and redaction by the runtime).
    pub content: String,
    /// False when the output was cut off (a command killed at its timeout, output over the cap).
    pub complete: bool,
    /// The complete output, when `content` shows only its beginning (a `search` past its caps).
    pub overflow: Option<Overflow>,
}

/// Output a tool held back from its result: the tool capped what the model sees at once, and hands
/// over the whole so nothing is lost. `content` shows the first `shown_lines` lines of `full`, then a
/// footer of its own; the runtime stores `full` as evidence and tells the model where to read on
/// (`read_evidence` from offset `shown_lines`). Redaction applies to it as to the content.
#[derive(Debug, Clone, PartialEq)]
pub struct Overflow {
    /// The complete output (up to the tool's memory cap: `ToolOutcome::complete` is false when even
    /// this was cut).
    pub full: String,
    /// How many leading lines of `full` the result's content shows.
    pub shown_lines: u64,
}

impl ToolOutcome {
    /// A successful, complete result with this text.
    pub fn ok(content: impl Into<String>) -> ToolOutcome {
        ToolOutcome { ok: true, content: content.into(), complete: true, overflow: None }
    }

    /// A failed, complete result: `content` says what went wrong.
    pub fn error(content: impl Into<String>) -> ToolOutcome {
        ToolOutcome { ok: false, content: content.into(), complete: true, overflow: None }
    }
}

impl From<ToolError> for ToolOutcome {
    fn from(e: ToolError) -> ToolOutcome {
        ToolOutcome::error(e.to_string())
    }
}
