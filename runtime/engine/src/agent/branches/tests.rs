//! The plan of an answer's `delegate` calls: which agent takes each, and who works in a copy.

use super::{plan, Plan};
use crate::agent::turn::Call;
use crate::team::TeamConfig;
use crate::testing::{role, team};
use agentd_protocol::{Role, ToolName};
use proptest::prelude::*;

fn delegate(to: &str) -> Call {
    let arguments = serde_json::json!({"to": to, "objective": format!("work for {to}")}).to_string();
    Call { id: format!("d-{to}"), name: ToolName::Delegate, arguments }
}

fn read() -> Call {
    Call { id: "r".into(), name: ToolName::ReadFile, arguments: r#"{"path":"a"}"#.into() }
}

/// A team whose coder may run `coders` at once, with a read-only reviewer and a writing doc-writer.
fn a_team(coders: u16) -> TeamConfig {
    let mut team = team("m");
    team.coder.max_instances = coders;
    team.specialists.insert("reviewer".into(), role("m"));
    let mut writer = role("m");
    writer.tools = Some(vec![ToolName::ReadFile, ToolName::WriteFile, ToolName::Finish]);
    team.specialists.insert("docs".into(), writer);
    team
}

/// Each call's (agent, copy), or the refusal.
fn shown(plans: &[Option<Plan>]) -> Vec<String> {
    plans
        .iter()
        .map(|p| match p {
            None => "-".to_string(),
            Some(Plan::Branch { instance, copy, .. }) => {
                format!("{instance}{}", if *copy { "+copy" } else { "" })
            }
            Some(Plan::Refused(why)) => format!("refused: {why}"),
        })
        .collect()
}

fn planned(calls: &[Call], coders: u16) -> Vec<String> {
    shown(&plan(calls, true, &Role::Lead, &a_team(coders)))
}

#[test]
fn a_plain_answer_runs_as_it_always_did() {
    assert_eq!(planned(&[delegate("coder")], 1), ["coder"]);
    // Two calls to a role of one agent: the same agent, one after the other, no copy.
    assert_eq!(planned(&[delegate("coder"), delegate("coder")], 1), ["coder", "coder"]);
    // A reader beside a writer shares the workspace.
    assert_eq!(planned(&[delegate("coder"), delegate("reviewer")], 1), ["coder", "reviewer"]);
    // A role without `delegate` has no branches at all.
    assert_eq!(shown(&plan(&[delegate("coder")], false, &Role::Lead, &a_team(1))), ["-"]);
}

#[test]
fn instances_take_calls_side_by_side_and_writers_get_copies() {
    let calls = [delegate("coder"), delegate("coder"), delegate("reviewer")];
    assert_eq!(planned(&calls, 3), ["coder+copy", "coder#2+copy", "reviewer"]);
    // Two writers of different roles, too.
    assert_eq!(planned(&[delegate("coder"), delegate("docs")], 1), ["coder+copy", "docs+copy"]);
    // Past max_instances, a call waits for the first agent, which is then alone with the second.
    let calls = [delegate("coder"), delegate("coder"), delegate("coder")];
    assert_eq!(planned(&calls, 2), ["coder+copy", "coder#2+copy", "coder+copy"]);
    // Another tool between two delegations settles the first: they never overlap.
    assert_eq!(planned(&[delegate("coder"), read(), delegate("coder")], 2), ["coder", "-", "coder"]);
}

#[test]
fn a_call_that_cannot_run_is_refused_with_why() {
    let refused = planned(&[delegate("nobody"), delegate("lead"), delegate("coder#4")], 3);
    assert!(
        refused[0].starts_with("refused: no team member \"nobody\"; delegate to one of: coder"),
        "{refused:?}"
    );
    assert_eq!(refused[1], "refused: an agent cannot delegate to itself");
    assert!(refused[2].contains("past coder's max_instances (3)"), "{refused:?}");
    let bad = Call { id: "x".into(), name: ToolName::Delegate, arguments: "{".into() };
    assert!(planned(&[bad], 1)[0].starts_with("refused: "));
    // An instance named by the lead is the one that runs.
    assert_eq!(planned(&[delegate("coder#2"), delegate("coder")], 2), ["coder#2+copy", "coder+copy"]);
}

fn a_call() -> impl Strategy<Value = Call> {
    prop_oneof![
        Just(delegate("coder")),
        Just(delegate("coder#2")),
        Just(delegate("reviewer")),
        Just(delegate("docs")),
        Just(read()),
    ]
}

proptest! {
    /// Whatever the answer: the plan is the same each time it is made (a resume finds the branches
    /// a crash cut), no agent takes two calls that would run at once, no instance is past its role's
    /// bound, and a writer works in a copy exactly when another writer runs beside it.
    #[test]
    fn the_plan_is_a_function_of_the_answer(calls in prop::collection::vec(a_call(), 0..12), coders in 1u16..4) {
        let team = a_team(coders);
        let plans = plan(&calls, true, &Role::Lead, &team);
        prop_assert_eq!(&plans, &plan(&calls, true, &Role::Lead, &team));
        // Replay the schedule: which branches run together.
        let mut running: Vec<(usize, Role)> = Vec::new();
        let mut beside_a_writer = vec![false; calls.len()];
        for (i, p) in plans.iter().enumerate() {
            match p {
                None => running.clear(),
                Some(Plan::Refused(_)) => {}
                Some(Plan::Branch { instance, .. }) => {
                    prop_assert!(instance.number() <= team.role(instance.base()).map_or(1, |r| r.max_instances));
                    if let Some(at) = running.iter().position(|(_, r)| r == instance) {
                        running.drain(..=at);
                    }
                    prop_assert!(!running.iter().any(|(_, r)| r == instance));
                    running.push((i, instance.clone()));
                    let writers: Vec<usize> = running.iter().filter(|(_, r)| team.writes(r)).map(|(j, _)| *j).collect();
                    if writers.len() >= 2 {
                        for j in writers {
                            beside_a_writer[j] = true;
                        }
                    }
                }
            }
        }
        for (i, p) in plans.iter().enumerate() {
            if let Some(Plan::Branch { copy, .. }) = p {
                prop_assert_eq!(*copy, beside_a_writer[i], "call {}", i);
            }
        }
    }
}
