//! Receipts: a short record of one tool call — what was called with what, and how it ended. The
//! caller's receipts travel with a delegation so the teammate knows what was already read, written
//! and run; the full result, when archived, is named by `evidence_id`.

use crate::text::one_line;
use crate::tools::ToolOutcome;
use agentd_protocol::text::truncate_chars;
use agentd_protocol::ToolName;

/// Characters kept of the arguments and of the outcome.
pub const SUMMARY_CHARS: usize = 200;

use agentd_protocol::Receipt;

/// The receipt of one call of `tool` with `arguments` that ended in `outcome`.
pub fn receipt(
    tool: ToolName,
    arguments: &str,
    outcome: &ToolOutcome,
    evidence_id: Option<String>,
) -> Receipt {
    let result = one_line(&outcome.content);
    let result = if outcome.complete { result } else { format!("(incomplete) {result}") };
    Receipt {
        tool,
        arguments: summary(arguments),
        ok: outcome.ok,
        outcome: truncate_chars(&result, SUMMARY_CHARS),
        evidence_id,
    }
}

fn summary(text: &str) -> String {
    truncate_chars(&one_line(text), SUMMARY_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summarises_both_sides() {
        let outcome = ToolOutcome::ok("exit code: 0\n--- stdout ---\nok");
        let r =
            receipt(ToolName::RunCommand, "{\"command\":\n \"cargo test\"}", &outcome, Some("ev1".into()));
        assert_eq!(r.tool, ToolName::RunCommand);
        assert_eq!(r.arguments, "{\"command\": \"cargo test\"}");
        assert_eq!(r.outcome, "exit code: 0 --- stdout --- ok");
        assert!(r.ok);
        assert_eq!(r.evidence_id.as_deref(), Some("ev1"));
    }

    #[test]
    fn truncates_on_char_boundaries() {
        let long = "é".repeat(500);
        let outcome = ToolOutcome { complete: false, ..ToolOutcome::error(long.clone()) };
        let r = receipt(ToolName::ReadFile, &long, &outcome, None);
        assert_eq!(r.arguments.chars().count(), SUMMARY_CHARS);
        assert!(r.arguments.ends_with('…'));
        assert_eq!(r.outcome.chars().count(), SUMMARY_CHARS);
        assert!(r.outcome.starts_with("(incomplete) éé"));
        assert!(!r.ok);
    }

    #[test]
    fn round_trips_through_json() {
        let r = receipt(ToolName::Finish, "{}", &ToolOutcome::ok("done"), None);
        let back: Receipt = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }
}
