//! Repairing a history read back from the log after a crash, so that it is never sent broken:
//! every tool call gets a result (a synthetic error naming the interruption when none was stored),
//! and results that answer no call are dropped. Consecutive user messages are left as they are: they
//! are legal on the wire (a provider that needs alternation merges them when it serialises), and the
//! objective, checkpoint and observations messages a compaction writes must stay apart.
//!
//! It is also where a log written by an older agentd is read into today's shape, once: messages a
//! compaction wrote get their kind back, and observations messages their observations as data.

use crate::compaction::{CHECKPOINT_HEADER, FILES_HEADER, OBJECTIVE_PREFIX};
use crate::observations::OBSERVATIONS_HEADER;
use agentd_protocol::message::{CarriedObservation, ObservationKind};
use agentd_protocol::message::{Message, MessageKind, Part, Speaker};
use agentd_protocol::ToolName;
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
    /// Observations messages written before observations were stored as data, given their
    /// observations back as data (read once from their text).
    pub observations_restored: usize,
}

impl Repairs {
    /// Whether the repair changed anything (the runtime then records the repaired history as a checkpoint).
    pub fn any(&self) -> bool {
        self.results_added + self.orphan_results_dropped + self.kinds_restored + self.observations_restored
            > 0
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

/// The observations an observations message written before they were stored as data (a log from an
/// older agentd) shows in its text, read once so that the message carries them as data from then on.
/// The text is blocks joined by blank lines after [`OBSERVATIONS_HEADER`], each starting with a
/// failing command's or a rejected finish's first line. This is the old reading, kept as it was: a
/// block whose text holds such a line after a blank line is read as two, which is why observations are
/// stored as data now. Nothing but this legacy repair parses an observations message's text.
fn legacy_observations(text: &str) -> Vec<CarriedObservation> {
    let Some(body) = text.strip_prefix(OBSERVATIONS_HEADER).and_then(|b| b.strip_prefix("\n\n")) else {
        return Vec::new();
    };
    const COMMAND_TAIL: &str = "` failed:";
    let finish_head = format!("{} was rejected:\n", ToolName::Finish);
    let command_head = format!("{} `", ToolName::RunCommand);
    let is_start = |at: usize| {
        let rest = &body[at..];
        (at == 0 || body[..at].ends_with("\n\n"))
            && (rest.starts_with(&finish_head)
                || (rest.starts_with(&command_head)
                    && rest.lines().next().is_some_and(|l| {
                        // The opening and closing backquotes are two (the old reading sliced between
                        // them and panicked on "run_command ` failed:").
                        l.ends_with(COMMAND_TAIL) && l.len() >= command_head.len() + COMMAND_TAIL.len()
                    })))
    };
    let starts: Vec<usize> =
        (0..body.len()).filter(|&at| body.is_char_boundary(at) && is_start(at)).collect();
    let mut out = Vec::new();
    for (k, &start) in starts.iter().enumerate() {
        let end = starts.get(k + 1).map_or(body.len(), |&next| next - 2);
        let block = &body[start..end];
        let kind = if block.starts_with(&finish_head) {
            ObservationKind::RejectedFinish
        } else {
            let first = block.lines().next().unwrap_or("");
            let command = first[command_head.len()..first.len() - COMMAND_TAIL.len()].to_string();
            ObservationKind::FailingCommand { command }
        };
        out.push(CarriedObservation { kind, text: block.to_string() });
    }
    out
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
                let mut msg = msg.clone();
                if let Some(kind) = legacy_kind(&msg) {
                    msg.kind = kind;
                    repairs.kinds_restored += 1;
                }
                if msg.kind == MessageKind::Observations && msg.observations.is_empty() {
                    msg.observations = legacy_observations(&msg.text());
                    if !msg.observations.is_empty() {
                        repairs.observations_restored += 1;
                    }
                }
                out.push(msg);
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
    use crate::observations::{observations_message, unresolved};

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

    #[test]
    fn a_legacy_observations_message_gets_its_observations_as_data_once() {
        let text =
            "[unresolved observations]\n\nrun_command `cargo test` failed:\nboom\n\nfinish was rejected:\nno";
        let expected = vec![
            CarriedObservation {
                kind: ObservationKind::FailingCommand { command: "cargo test".into() },
                text: "run_command `cargo test` failed:\nboom".into(),
            },
            CarriedObservation {
                kind: ObservationKind::RejectedFinish,
                text: "finish was rejected:\nno".into(),
            },
        ];
        // Written before kinds were stored, and written with its kind before observations were data.
        for old in [Message::user(text), Message::user(text).with_kind(MessageKind::Observations)] {
            let (fixed, repairs) = repair(&[Message::user("objective"), old]);
            assert_eq!(repairs.observations_restored, 1);
            assert_eq!(fixed[1].kind, MessageKind::Observations);
            assert_eq!(fixed[1].text(), text, "the model reads the same text");
            assert_eq!(fixed[1].observations, expected);
            let carried: Vec<CarriedObservation> = unresolved(&fixed).iter().map(|o| o.carried()).collect();
            assert_eq!(carried, expected, "a compaction reads them from the data");
            let (again, repairs) = repair(&fixed);
            assert_eq!((again, repairs.any()), (fixed, false), "read once");
        }
        // A message made since carries its data and is left as it is.
        let new = observations_message(expected.clone()).unwrap();
        let (fixed, repairs) = repair(std::slice::from_ref(&new));
        assert_eq!((fixed, repairs.any()), (vec![new], false));
    }

    #[test]
    fn the_legacy_reading_is_the_old_one() {
        // What the old reading made of a text that looks like two observations: two (the reason they
        // are data now). A log holding it resumes as it would have before.
        let text = "[unresolved observations]\n\nrun_command `make` failed:\nout\n\nfinish was rejected:\nin the output";
        let read = legacy_observations(text);
        assert_eq!(read.len(), 2);
        assert_eq!(read[0].text, "run_command `make` failed:\nout");
        // A line that only looks like a failing command's head, with one backquote, is not one (the
        // old reading panicked on it).
        let odd = "[unresolved observations]\n\nrun_command `a` failed:\nx\n\nrun_command ` failed:\ny";
        let read = legacy_observations(odd);
        assert_eq!(read.len(), 1);
        assert_eq!(read[0].text, "run_command `a` failed:\nx\n\nrun_command ` failed:\ny");
        assert!(legacy_observations("[unresolved observations]").is_empty());
        assert!(legacy_observations("not an observations message").is_empty());
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
