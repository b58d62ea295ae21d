//! The coder's history the benchmark measures: about a million o200k tokens of rounds (an
//! occasional user message; an assistant message with optional thinking and text and one or two
//! tool calls; their results), the messages appended one by one for the re-fit, and a description
//! of a history (messages by role, tool calls, thinking parts, text bytes).

use crate::gen::Gen;
use crate::MODEL;
use agentd_engine::counter::TokenCounter;
use agentd_protocol::{Message, Part, Speaker};

/// A coder's history of about `target` o200k tokens: the objective, then rounds (an occasional user
/// message; an assistant message with optional thinking and text and one or two tool calls; their
/// results). Returns the history and the objective.
pub fn build_history(g: &mut Gen, target: u64) -> (Vec<Message>, String) {
    // Sizing only: the measured figures use fresh counters.
    let sizer = TokenCounter::new(MODEL);
    let objective = format!(
        "The inventory service drops reservations when two orders for the same SKU arrive within a few \
         milliseconds. Find the race in the reservation path, fix it without a global lock, add a \
         regression test that reproduces the interleaving, and make sure `cargo test --workspace` and \
         `cargo clippy --all-targets -- -D warnings` pass. {}",
        g.prose(600)
    );
    let mut history = vec![Message::user(objective.clone())];
    let mut tokens = sizer.count_message(&history[0]).tokens.0;
    while tokens < target {
        let mut round = Vec::new();
        if g.below(14) == 0 {
            let text = match g.below(3) {
                0 => format!("Status? {}", {
                    let n = 150 + g.below(400);
                    g.prose(n)
                }),
                1 => format!("Also consider this log from production:\n{}", {
                    let n = 400 + g.below(2000);
                    g.command_output(n)
                }),
                _ => {
                    let n = 200 + g.below(1200);
                    g.prose(n)
                }
            };
            round.push(Message::user(text));
        }
        let mut parts = Vec::new();
        if g.below(3) == 0 {
            parts.push(Part::Thinking {
                text: {
                    let n = 300 + g.below(1500);
                    g.prose(n)
                },
                signature: None,
                redacted: false,
            });
        }
        if g.below(2) == 0 {
            parts.push(Part::Text {
                text: {
                    let n = 80 + g.below(600);
                    g.prose(n)
                },
            });
        }
        let calls = 1 + usize::from(g.below(4) == 0);
        let mut results = Vec::new();
        for _ in 0..calls {
            let id = g.call_id();
            let (name, arguments, content, is_error) = g.tool_exchange();
            parts.push(Part::ToolCall { id: id.clone(), name: name.into(), arguments });
            results.push(Message::tool_result(id, content, is_error));
        }
        round.push(Message::new(Speaker::Assistant, parts));
        round.extend(results);
        for m in round {
            tokens += sizer.count_message(&m).tokens.0;
            history.push(m);
        }
    }
    (history, objective)
}

/// The i-th appended message, about 200 tokens, distinct: alternately assistant prose and a short
/// tool result of code.
pub fn appended_message(g: &mut Gen, i: usize) -> Message {
    if i.is_multiple_of(2) {
        Message::assistant_text(format!("Step {i}: {}", g.prose(860)))
    } else {
        Message::tool_result(g.call_id(), g.code(720), false)
    }
}

/// The text bytes a message carries (ids, names and arguments included).
pub fn message_bytes(m: &Message) -> usize {
    m.parts
        .iter()
        .map(|p| match p {
            Part::Text { text } => text.len(),
            Part::Thinking { text, signature, .. } => text.len() + signature.as_ref().map_or(0, String::len),
            Part::ToolCall { id, name, arguments } => id.len() + name.len() + arguments.len(),
            Part::ToolResult { call_id, content, .. } => call_id.len() + content.len(),
            Part::Image { data, .. } => data.len(),
        })
        .sum()
}

/// A history described: messages by role, tool calls, messages with thinking, text bytes.
pub struct HistoryStats {
    pub messages: usize,
    pub user: usize,
    pub assistant: usize,
    pub tool: usize,
    pub tool_calls: usize,
    pub thinking: usize,
    pub bytes: usize,
}

impl HistoryStats {
    pub fn of(history: &[Message]) -> HistoryStats {
        let by = |r: Speaker| history.iter().filter(|m| m.role == r).count();
        HistoryStats {
            messages: history.len(),
            user: by(Speaker::User),
            assistant: by(Speaker::Assistant),
            tool: by(Speaker::Tool),
            tool_calls: history.iter().map(|m| m.tool_calls().count()).sum(),
            thinking: history.iter().filter(|m| m.has_thinking()).count(),
            bytes: history.iter().map(message_bytes).sum(),
        }
    }
}
