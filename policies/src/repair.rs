//! Repairing a history read back from the log after a crash, so that it is never sent broken:
//! every tool call gets a result (a synthetic error naming the interruption when none was stored),
//! and results that answer no call are dropped. Consecutive user messages are left as they are: they
//! are legal on the wire (a provider that needs alternation merges them when it serialises), and the
//! objective, checkpoint and observations messages a compaction writes must stay apart.

use crate::compaction::{CHECKPOINT_HEADER, FILES_HEADER, OBJECTIVE_PREFIX};
use crate::message::{Message, MessageKind, Part, Speaker};
use crate::observations::OBSERVATIONS_HEADER;
use std::collections::HashSet;

/// The text a tool call gets when the daemon stopped before its result was stored.
pub const INTERRUPTED_RESULT: &str =
    "interrupted: the daemon stopped before this tool call returned; its effect is unknown, check before relying on it";

/// What [`repair`] changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Repairs {
    /// Tool calls that had no result and got [`INTERRUPTED_RESULT`] as an error result.
    pub results_added: usize,
    /// Tool results that answered no call in the history and were dropped.
    pub orphan_results_dropped: usize,
    /// Messages a compaction wrote before kinds were stored, given their kind back.
    pub kinds_restored: usize,
}

impl Repairs {
    /// Whether the repair changed anything (the runtime then records the repaired history as a checkpoint).
    pub fn any(&self) -> bool {
        self.results_added + self.orphan_results_dropped + self.kinds_restored > 0
    }
}

/// The kind of a user message a compaction wrote before messages carried their kind (a log from an
/// older agentd): read once from the header it was written with, so a resumed task still carries its
/// checkpoint and its unresolved observations as such. Messages written since carry their kind.
fn legacy_kind(message: &Message) -> Option<MessageKind> {
    if message.role != Speaker::User || !message.kind.is_plain() {
        return None;
    }
    let text = message.text();
    [
        (CHECKPOINT_HEADER, MessageKind::Checkpoint),
        (OBSERVATIONS_HEADER, MessageKind::Observations),
        (FILES_HEADER, MessageKind::WorkingFiles),
        (OBJECTIVE_PREFIX, MessageKind::Objective),
    ]
    .into_iter()
    .find(|(header, _)| text.starts_with(header))
    .map(|(_, kind)| kind)
}

/// Returns the repaired history and what was changed.
pub fn repair(history: &[Message]) -> (Vec<Message>, Repairs) {
    let mut out: Vec<Message> = Vec::with_capacity(history.len());
    let mut repairs = Repairs::default();
    let mut i = 0;
    while i < history.len() {
        let msg = &history[i];
        match msg.role {
            Speaker::Assistant => {
                out.push(msg.clone());
                let calls: Vec<String> = msg.tool_calls().map(|(id, _, _)| id.to_string()).collect();
                // Collect the tool messages that follow.
                let mut answered = HashSet::new();
                let mut j = i + 1;
                while j < history.len() && history[j].role == Speaker::Tool {
                    let tool_msg = &history[j];
                    let parts: Vec<Part> = tool_msg
                        .parts
                        .iter()
                        .filter(|p| match p {
                            Part::ToolResult { call_id, .. } => {
                                if calls.contains(call_id) && answered.insert(call_id.clone()) {
                                    true
                                } else {
                                    repairs.orphan_results_dropped += 1;
                                    false
                                }
                            }
                            _ => true,
                        })
                        .cloned()
                        .collect();
                    if !parts.is_empty() {
                        out.push(Message::new(Speaker::Tool, parts));
                    }
                    j += 1;
                }
                for id in calls.iter().filter(|id| !answered.contains(*id)) {
                    out.push(Message::tool_result(id.clone(), INTERRUPTED_RESULT, true));
                    repairs.results_added += 1;
                }
                i = j;
            }
            Speaker::Tool => {
                // A tool message with no assistant call before it.
                repairs.orphan_results_dropped += msg.tool_result_ids().count();
                i += 1;
            }
            Speaker::User => {
                match legacy_kind(msg) {
                    Some(kind) => {
                        out.push(msg.clone().with_kind(kind));
                        repairs.kinds_restored += 1;
                    }
                    None => out.push(msg.clone()),
                }
                i += 1;
            }
            Speaker::System => {
                out.push(msg.clone());
                i += 1;
            }
        }
    }
    (out, repairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_legacy_checkpoint_gets_its_kind_back_once() {
        let old = [
            Message::user("[checkpoint]\nwhat happened"),
            Message::user("[unresolved observations]\n\nrun_command `x` failed:\nno"),
        ];
        let (fixed, repairs) = repair(&old);
        assert_eq!(repairs.kinds_restored, 2);
        assert_eq!(fixed[0].kind, MessageKind::Checkpoint);
        assert_eq!(fixed[1].kind, MessageKind::Observations);
        let (again, repairs) = repair(&fixed);
        assert_eq!((again, repairs.any()), (fixed, false));
        // A user message agentd did not write stays plain unless it starts with a header.
        let (plain, _) = repair(&[Message::user("please fix [checkpoint]")]);
        assert_eq!(plain[0].kind, MessageKind::Plain);
    }

    fn call(id: &str) -> Message {
        Message::new(
            Speaker::Assistant,
            vec![Part::ToolCall { id: id.into(), name: "read_file".into(), arguments: "{}".into() }],
        )
    }

    #[test]
    fn missing_result_is_added() {
        let h = vec![Message::user("go"), call("c1")];
        let (r, rep) = repair(&h);
        assert_eq!(rep.results_added, 1);
        assert_eq!(r.len(), 3);
        assert_eq!(r[2].tool_result_ids().collect::<Vec<_>>(), vec!["c1"]);
    }

    #[test]
    fn intact_history_is_unchanged() {
        let h = vec![Message::user("go"), call("c1"), Message::tool_result("c1", "ok", false)];
        let (r, rep) = repair(&h);
        assert!(!rep.any());
        assert_eq!(r, h);
    }

    #[test]
    fn consecutive_users_stay_apart() {
        let h = vec![
            Message::user("Objective: a").with_kind(MessageKind::Objective),
            Message::user("[checkpoint]\nb").with_kind(MessageKind::Checkpoint),
        ];
        let (r, rep) = repair(&h);
        assert!(!rep.any());
        assert_eq!(r, h);
    }

    #[test]
    fn orphan_result_dropped() {
        let h = vec![Message::user("a"), Message::tool_result("zz", "x", false)];
        let (r, rep) = repair(&h);
        assert_eq!(rep.orphan_results_dropped, 1);
        assert_eq!(r.len(), 1);
    }
}
