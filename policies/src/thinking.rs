//! Idle thinking cleanup. Through an active chain of tool calls every thinking part is sent back
//! unchanged: dropping it mid-chain makes the model forget why it called the tool. When a new user
//! request arrives after the agent was idle longer than the threshold, the old reasoning is stale:
//! every thinking part but the latest is removed, once. The result becomes the active history (a
//! checkpoint), so the removed blocks never return and the prompt prefix is stable again afterwards.

use agentd_protocol::message::{Message, Part};
use agentd_protocol::tokens::Tokens;
use std::time::Duration;

/// How long an agent must have been idle (since its last answer) before a new request clears its outdated
/// thinking, when `scheduler.idle_thinking_cleanup_after` is not set: an hour.
pub const DEFAULT_IDLE_THRESHOLD: Duration = Duration::from_secs(3600);

/// A cleanup frees at least this many tokens or is skipped: every cleanup rewrites the history, so the
/// provider's cached prefix is lost and the next request is billed in full (Anthropic's
/// `clear_at_least` makes the same trade).
pub const DEFAULT_CLEAR_AT_LEAST: Tokens = Tokens(512);

/// Whether a cleanup that frees `freed` tokens is worth the cache it throws away.
pub fn worth_clearing(freed: Tokens, at_least: Tokens) -> bool {
    freed >= at_least
}

/// Whether a new user request after `idle` should clean up thinking.
pub fn is_due(idle: Duration, threshold: Duration) -> bool {
    idle > threshold
}

/// The history without every thinking part but the latest, and how many parts were removed.
/// `None` when there is nothing to remove (at most one thinking part).
pub fn clear_outdated(history: &[Message]) -> Option<(Vec<Message>, Vec<Part>)> {
    let latest =
        history.iter().enumerate().rev().find_map(|(i, m)| {
            m.parts.iter().rposition(|p| matches!(p, Part::Thinking { .. })).map(|j| (i, j))
        });
    let (keep_msg, keep_part) = latest?;
    let mut removed = Vec::new();
    let cleaned: Vec<Message> = history
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let parts = m
                .parts
                .iter()
                .enumerate()
                .filter(|(j, p)| {
                    let drop = matches!(p, Part::Thinking { .. }) && (i, *j) != (keep_msg, keep_part);
                    if drop {
                        removed.push((*p).clone());
                    }
                    !drop
                })
                .map(|(_, p)| p.clone())
                .collect();
            Message::new(m.role, parts)
        })
        .collect();
    if removed.is_empty() {
        return None;
    }
    Some((cleaned, removed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentd_protocol::message::Speaker;
    use proptest::prelude::*;

    fn thinking(t: &str) -> Part {
        Part::Thinking { text: t.into(), signature: Some(format!("sig-{t}")), redacted: false }
    }

    fn assistant(parts: Vec<Part>) -> Message {
        Message::new(Speaker::Assistant, parts)
    }

    #[test]
    fn keeps_only_the_latest() {
        let h = vec![
            Message::user("go"),
            assistant(vec![thinking("a"), Part::Text { text: "x".into() }]),
            assistant(vec![thinking("b")]),
            Message::user("more"),
            assistant(vec![thinking("c"), Part::Text { text: "y".into() }]),
        ];
        let (cleaned, removed) = clear_outdated(&h).unwrap();
        assert_eq!(removed.len(), 2);
        assert_eq!(cleaned[1].parts, vec![Part::Text { text: "x".into() }]);
        assert!(cleaned[2].parts.is_empty());
        assert_eq!(cleaned[4], h[4], "the latest is sent back byte-identical");
    }

    #[test]
    fn nothing_to_do() {
        let h = vec![Message::user("go"), assistant(vec![thinking("only")])];
        assert!(clear_outdated(&h).is_none());
        assert!(clear_outdated(&[Message::user("go")]).is_none());
    }

    #[test]
    fn due_only_past_the_threshold() {
        assert!(!is_due(Duration::from_secs(3600), DEFAULT_IDLE_THRESHOLD));
        assert!(is_due(Duration::from_secs(3601), DEFAULT_IDLE_THRESHOLD));
    }

    proptest! {
        #[test]
        fn at_most_one_thinking_part_survives_and_nothing_else_changes(shape in proptest::collection::vec((0u8..3, 0u8..3), 0..30)) {
            let history: Vec<Message> = shape.iter().enumerate().map(|(i, (kind, n))| match kind {
                0 => Message::user(format!("u{i}")),
                _ => assistant((0..*n).map(|k| if k % 2 == 0 { thinking(&format!("t{i}-{k}")) } else { Part::Text { text: format!("x{i}") } }).collect()),
            }).collect();
            let before = history.iter().flat_map(|m| &m.parts).filter(|p| matches!(p, Part::Thinking { .. })).count();
            match clear_outdated(&history) {
                None => prop_assert!(before <= 1),
                Some((cleaned, removed)) => {
                    let after = cleaned.iter().flat_map(|m| &m.parts).filter(|p| matches!(p, Part::Thinking { .. })).count();
                    prop_assert_eq!(after, 1);
                    prop_assert_eq!(removed.len(), before - 1);
                    prop_assert_eq!(cleaned.len(), history.len());
                    for (a, b) in cleaned.iter().zip(&history) {
                        let kept: Vec<&Part> = b.parts.iter().filter(|p| !matches!(p, Part::Thinking { .. })).collect();
                        let now: Vec<&Part> = a.parts.iter().filter(|p| !matches!(p, Part::Thinking { .. })).collect();
                        prop_assert_eq!(kept, now);
                    }
                }
            }
        }
    }
}
