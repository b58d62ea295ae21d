//! Unresolved observations: facts a compaction must carry verbatim, wherever in the history they sat.
//!
//! - A failing command: a `run_command` call answered with an error. It is resolved when a later
//!   `run_command` with exactly the same command string succeeds, or when a later `finish` succeeds
//!   (the task moved past it). Only the latest failure of each command is kept.
//! - A rejected finish: a `finish` call answered with an error. It is resolved by a later successful
//!   `finish`. Only the latest rejection is kept: each `finish` is judged afresh, so the latest
//!   rejection states what is still wrong.
//!
//! Comparisons are by exact text only (no case or whitespace normalisation) of the command as
//! `run_command` read it ([`command_of`]), however the model encoded its arguments.
//!
//! This module also makes the message a compaction carries them in ([`observations_message`]); the
//! compaction plan uses it and this module, never the other way round.

use crate::rounds::{round_of_each, rounds};
use agentd_protocol::message::{CarriedObservation, ObservationKind};
use agentd_protocol::message::{Message, MessageKind, Part};
use agentd_protocol::ToolName;
use std::collections::HashMap;

const RUN_COMMAND: ToolName = ToolName::RunCommand;
const FINISH: ToolName = ToolName::Finish;

/// The first line of the message carrying unresolved observations.
pub const OBSERVATIONS_HEADER: &str = "[unresolved observations]";

/// A fact a compaction must carry verbatim, wherever in the history it sat: a failure not yet resolved.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Observation {
    /// Index into [`rounds`] of the round holding the failed call and its result.
    pub round: usize,
    /// What failed.
    pub kind: ObservationKind,
    /// Verbatim and self-contained, e.g. "run_command `cargo test` failed:\n<the tool result>".
    pub text: String,
}

impl Observation {
    /// The observation as an observations message carries it (without its round, which a rebuilt
    /// history renumbers).
    pub fn carried(&self) -> CarriedObservation {
        CarriedObservation { kind: self.kind.clone(), text: self.text.clone() }
    }
}

/// The command string of a `run_command` call, the key of its failure: the command as `run_command`
/// reads it before running it ([`crate::args::run_command`] — a double-encoded object included), or
/// the raw arguments text when they name no command (such a call never ran).
pub fn command_of(arguments: &str) -> String {
    crate::args::run_command(arguments).unwrap_or_else(|_| arguments.to_string())
}

/// The observation text of a failed command.
pub fn failing_command_text(command: &str, result: &str) -> String {
    format!("{RUN_COMMAND} `{command}` failed:\n{result}")
}

/// The observation text of a rejected finish.
pub fn rejected_finish_text(result: &str) -> String {
    format!("{FINISH} was rejected:\n{result}")
}

/// One message holding the given observations: as data ([`Message::observations`], what a later
/// compaction reads) and as the text the model reads — [`OBSERVATIONS_HEADER`], then each text
/// verbatim after a blank line. Deduplicated by exact text (the first of equal texts is kept); `None`
/// when there are none.
pub fn observations_message(observations: impl IntoIterator<Item = CarriedObservation>) -> Option<Message> {
    let mut kept: Vec<CarriedObservation> = Vec::new();
    for o in observations {
        if !kept.iter().any(|k| k.text == o.text) {
            kept.push(o);
        }
    }
    if kept.is_empty() {
        return None;
    }
    let mut text = String::from(OBSERVATIONS_HEADER);
    for o in &kept {
        text.push_str("\n\n");
        text.push_str(&o.text);
    }
    Some(Message::user(text).with_kind(MessageKind::Observations).with_observations(kept))
}

/// The unresolved observations of `history`, oldest first, with distinct texts.
pub fn unresolved(history: &[Message]) -> Vec<Observation> {
    let round_of = round_of_each(&rounds(history));
    // Call id → (tool name, arguments) of the latest call with that id.
    let mut calls: HashMap<&str, (ToolName, &str)> = HashMap::new();
    // (order of the result, observation).
    let mut failing: Vec<(usize, Observation)> = Vec::new();
    let mut rejected: Option<(usize, Observation)> = None;
    let mut seq = 0usize;
    for (i, msg) in history.iter().enumerate() {
        // Observations carried by an earlier compaction stay unresolved until resolved here. They are
        // read from the message's data, never from its text (a log from before the data was stored is
        // given it once, by `repair::repair`).
        for carried in &msg.observations {
            seq += 1;
            let o =
                Observation { round: round_of[i], kind: carried.kind.clone(), text: carried.text.clone() };
            match &o.kind {
                ObservationKind::FailingCommand { command } => {
                    failing.retain(|(_, p)| {
                        !matches!(&p.kind, ObservationKind::FailingCommand { command: c } if c == command)
                    });
                    failing.push((seq, o));
                }
                ObservationKind::RejectedFinish => rejected = Some((seq, o)),
            }
        }
        for part in &msg.parts {
            match part {
                Part::ToolCall { id, name, arguments } => {
                    calls.insert(id, (ToolName::parse(name), arguments));
                }
                Part::ToolResult { call_id, content, is_error } => {
                    let Some((name, arguments)) = calls.get(call_id.as_str()) else {
                        continue;
                    };
                    seq += 1;
                    match name {
                        ToolName::RunCommand => {
                            let command = command_of(arguments);
                            failing.retain(|(_, o)| {
                                !matches!(&o.kind, ObservationKind::FailingCommand { command: c } if *c == command)
                            });
                            if *is_error {
                                let text = failing_command_text(&command, content);
                                let kind = ObservationKind::FailingCommand { command };
                                failing.push((seq, Observation { round: round_of[i], kind, text }));
                            }
                        }
                        ToolName::Finish => {
                            if *is_error {
                                let text = rejected_finish_text(content);
                                let kind = ObservationKind::RejectedFinish;
                                rejected = Some((seq, Observation { round: round_of[i], kind, text }));
                            } else {
                                failing.clear();
                                rejected = None;
                            }
                        }
                        _ => {}
                    }
                }
                _ => {}
            }
        }
    }
    failing.extend(rejected);
    failing.sort_by_key(|(seq, _)| *seq);
    let mut out: Vec<Observation> = Vec::with_capacity(failing.len());
    for (_, o) in failing {
        if !out.iter().any(|p| p.text == o.text) {
            out.push(o);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentd_protocol::message::Speaker;

    fn call(id: &str, name: &str, arguments: &str) -> Message {
        Message::new(
            Speaker::Assistant,
            vec![Part::ToolCall { id: id.into(), name: name.into(), arguments: arguments.into() }],
        )
    }

    fn run(id: &str, command: &str, ok: bool, out: &str) -> Vec<Message> {
        let args = serde_json::json!({ "command": command }).to_string();
        vec![call(id, RUN_COMMAND.as_str(), &args), Message::tool_result(id, out, !ok)]
    }

    fn history(steps: Vec<Vec<Message>>) -> Vec<Message> {
        let mut h = vec![Message::user("fix the build")];
        h.extend(steps.into_iter().flatten());
        h
    }

    #[test]
    fn a_failing_command_is_unresolved_until_it_succeeds() {
        let h = history(vec![run("c1", "cargo test", false, "exit code: 101\nboom")]);
        let obs = unresolved(&h);
        assert_eq!(obs.len(), 1);
        assert_eq!(obs[0].round, 1);
        assert_eq!(obs[0].kind, ObservationKind::FailingCommand { command: "cargo test".into() });
        assert_eq!(obs[0].text, "run_command `cargo test` failed:\nexit code: 101\nboom");

        let h = history(vec![
            run("c1", "cargo test", false, "boom"),
            run("c2", "cargo build", true, "ok"),
            run("c3", "cargo test", true, "ok"),
        ]);
        assert!(unresolved(&h).is_empty());
    }

    #[test]
    fn a_different_command_does_not_resolve() {
        let h = history(vec![run("c1", "cargo test", false, "boom"), run("c2", "cargo  test", true, "ok")]);
        assert_eq!(unresolved(&h).len(), 1);
    }

    #[test]
    fn only_the_latest_failure_of_a_command_is_kept() {
        let h = history(vec![
            run("c1", "cargo test", false, "first"),
            run("c2", "ls", false, "nope"),
            run("c3", "cargo test", false, "second"),
        ]);
        let obs = unresolved(&h);
        let texts: Vec<&str> = obs.iter().map(|o| o.text.as_str()).collect();
        assert_eq!(texts, vec!["run_command `ls` failed:\nnope", "run_command `cargo test` failed:\nsecond"]);
        assert_eq!(obs[1].round, 3);
    }

    #[test]
    fn a_successful_finish_moves_past_everything() {
        let finish = |id: &str, ok: bool, out: &str| {
            vec![call(id, FINISH.as_str(), r#"{"summary":"done"}"#), Message::tool_result(id, out, !ok)]
        };
        let h = history(vec![run("c1", "cargo test", false, "boom"), finish("f1", false, "tests fail")]);
        let obs = unresolved(&h);
        assert_eq!(obs.len(), 2);
        assert_eq!(obs[1].kind, ObservationKind::RejectedFinish);
        assert_eq!(obs[1].text, "finish was rejected:\ntests fail");

        let h = history(vec![
            run("c1", "cargo test", false, "boom"),
            finish("f1", false, "tests fail"),
            finish("f2", false, "still failing"),
        ]);
        let obs = unresolved(&h);
        assert_eq!(obs.len(), 2);
        assert_eq!(obs[1].text, "finish was rejected:\nstill failing");

        let h = history(vec![
            run("c1", "cargo test", false, "boom"),
            finish("f1", false, "tests fail"),
            finish("f2", true, "accepted"),
            run("c2", "make", false, "later failure"),
        ]);
        let obs = unresolved(&h);
        assert_eq!(obs.len(), 1);
        assert_eq!(obs[0].text, "run_command `make` failed:\nlater failure");
    }

    #[test]
    fn malformed_arguments_are_the_command() {
        assert_eq!(command_of("{not json"), "{not json");
        assert_eq!(command_of(r#"{"cmd":"x"}"#), r#"{"cmd":"x"}"#);
        assert_eq!(command_of(r#"{"command":["a","b"]}"#), r#"{"command":["a","b"]}"#);
        let h = vec![
            call("c1", RUN_COMMAND.as_str(), "{oops"),
            Message::tool_result("c1", "bad arguments", true),
        ];
        assert_eq!(unresolved(&h)[0].text, "run_command `{oops` failed:\nbad arguments");
    }

    #[test]
    fn a_double_encoded_failure_is_resolved_by_a_plain_success() {
        // Some models encode the arguments object once more as a JSON string; `run_command` runs it
        // all the same, so its failure is keyed on the command it ran.
        let plain = serde_json::json!({ "command": "cargo test" }).to_string();
        let twice = serde_json::Value::String(plain).to_string();
        let h = history(vec![vec![
            call("c1", RUN_COMMAND.as_str(), &twice),
            Message::tool_result("c1", "exit code: 101", true),
        ]]);
        let obs = unresolved(&h);
        assert_eq!(obs.len(), 1);
        assert_eq!(obs[0].kind, ObservationKind::FailingCommand { command: "cargo test".into() });
        assert_eq!(obs[0].text, "run_command `cargo test` failed:\nexit code: 101");

        let mut later = h.clone();
        later.extend(run("c2", "cargo test", true, "ok"));
        assert!(unresolved(&later).is_empty());
        // And the other way round: a plain failure, a double-encoded success.
        let mut h = history(vec![run("c1", "make", false, "boom")]);
        let twice = serde_json::Value::String(r#"{"command":"make"}"#.into()).to_string();
        h.extend([call("c2", RUN_COMMAND.as_str(), &twice), Message::tool_result("c2", "ok", false)]);
        assert!(unresolved(&h).is_empty());
    }

    #[test]
    fn other_tools_and_orphans_are_ignored() {
        let h = vec![
            call("r1", "read_file", r#"{"path":"x"}"#),
            Message::tool_result("r1", "no such file", true),
            Message::tool_result("zz", "orphan", true),
        ];
        assert!(unresolved(&h).is_empty());
    }

    #[test]
    fn observations_carried_by_a_compaction_stay_until_resolved() {
        // Outputs that look like the start of another observation are still part of this one.
        let first = failing_command_text(
            "cargo test",
            "FAILED: adds\n\nrun_command `x` failed:\nnot a start\n\nfinish was rejected:\nnor this",
        );
        let second = rejected_finish_text("verification `make` failed");
        let carried_msg = observations_message([
            CarriedObservation {
                kind: ObservationKind::FailingCommand { command: "cargo test".into() },
                text: first.clone(),
            },
            CarriedObservation { kind: ObservationKind::RejectedFinish, text: second.clone() },
        ])
        .unwrap();
        assert_eq!(carried_msg.text(), format!("{OBSERVATIONS_HEADER}\n\n{first}\n\n{second}"));
        let h = vec![Message::user("objective"), carried_msg.clone()];
        let found = unresolved(&h);
        assert_eq!(
            found.iter().map(|o| o.text.clone()).collect::<Vec<_>>(),
            vec![first.clone(), second.clone()]
        );
        // The same command succeeding later resolves the carried failure.
        let mut later = h.clone();
        later.extend(run("c9", "cargo test", true, "ok"));
        let found = unresolved(&later);
        assert_eq!(found.iter().map(|o| o.text.clone()).collect::<Vec<_>>(), vec![second]);
    }

    /// Arguments texts a model might send for `run_command`: objects with or without a command,
    /// encoded once or twice, with other fields, and plain noise.
    fn arguments_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let command = prop_oneof![
            ".{0,12}".prop_map(serde_json::Value::String),
            any::<i64>().prop_map(serde_json::Value::from),
            Just(serde_json::Value::Null),
            prop::collection::vec(".{0,4}", 0..3).prop_map(|v| serde_json::json!(v)),
        ];
        let object = (prop::option::of(command), prop::option::of(".{0,6}"), any::<bool>()).prop_map(
            |(command, other, twice)| {
                let mut o = serde_json::Map::new();
                if let Some(c) = command {
                    o.insert("command".into(), c);
                }
                if let Some(x) = other {
                    o.insert("timeout_s".into(), serde_json::Value::String(x));
                }
                let text = serde_json::Value::Object(o).to_string();
                if twice {
                    serde_json::Value::String(text).to_string()
                } else {
                    text
                }
            },
        );
        prop_oneof![object, ".{0,24}", r#"\s*"\{.{0,20}"#]
    }

    proptest::proptest! {
        /// The key of a failing `run_command` is the command the `run_command` reader extracts,
        /// whenever it extracts one; otherwise the raw text.
        #[test]
        fn the_key_is_the_command_as_read(text in arguments_text()) {
            match crate::args::run_command(&text) {
                Ok(command) => proptest::prop_assert_eq!(command_of(&text), command),
                Err(_) => proptest::prop_assert_eq!(command_of(&text), text),
            }
        }
    }
}
