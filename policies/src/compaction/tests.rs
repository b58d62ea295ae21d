use super::candidate::ARCHIVE_REF_PLACEHOLDER;
use super::machine::Brief;
use super::*;
use crate::budget::Thresholds;
use crate::observations::{observations_message, unresolved, Observation, OBSERVATIONS_HEADER};
use crate::summary::{prefix_prompt, SUMMARISER_SYSTEM};
use agentd_protocol::message::{CarriedObservation, ObservationKind};
use agentd_protocol::message::{Message, MessageKind, Part, Speaker};
use agentd_protocol::tokens::Tokens;
use proptest::prelude::*;

/// A compaction's brief with this objective, nothing pinned, no focus.
fn brief(objective: &str) -> Brief<'_> {
    Brief { objective, pinned: &[], focus: None }
}

use std::collections::HashMap;

/// A deterministic stand-in for a tokenizer: a quarter token per character plus framing.
fn count_msg(m: &Message) -> Tokens {
    let chars: usize = m
        .parts
        .iter()
        .map(|p| match p {
            Part::Text { text } | Part::Thinking { text, .. } => text.chars().count(),
            Part::ToolCall { id, name, arguments } => id.len() + name.len() + arguments.chars().count(),
            Part::ToolResult { call_id, content, .. } => call_id.len() + content.chars().count(),
            Part::Image { data, .. } => data.len(),
        })
        .sum();
    Tokens(chars as u64 / 4 + 4)
}

fn count_all(h: &[Message]) -> Tokens {
    h.iter().map(count_msg).sum()
}

fn call(id: &str, name: &str, arguments: &str) -> Message {
    Message::new(
        Speaker::Assistant,
        vec![Part::ToolCall { id: id.into(), name: name.into(), arguments: arguments.into() }],
    )
}

fn run(id: &str, command: &str, ok: bool, out: &str) -> Vec<Message> {
    let args = serde_json::json!({ "command": command }).to_string();
    vec![call(id, "run_command", &args), Message::tool_result(id, out, !ok)]
}

fn filler(seed: &str, len: usize) -> String {
    let mut s = format!("{seed}:");
    let words = ["alpha ", "beta\n", "gamma ", "delta ", "é ", "0123456789 "];
    let mut i = 0;
    while s.len() < len {
        s.push_str(words[i % words.len()]);
        i += 1;
    }
    s
}

/// The machine's measurements in tests: [`count_msg`] per message, a quarter token per character of
/// text, and `framing` more for a whole history than its messages add up to (what the plan cannot see,
/// which forces retries).
struct TestMeasure {
    framing: Tokens,
}

impl Measure for TestMeasure {
    fn text(&self, text: &str) -> Tokens {
        Tokens(text.chars().count() as u64 / 4)
    }
    fn message(&self, m: &Message) -> Tokens {
        count_msg(m)
    }
    fn summary_request(&self, system: &str, messages: &[Message]) -> Tokens {
        self.text(system) + count_all(messages)
    }
    fn history(&self, h: &[Message]) -> Tokens {
        count_all(h) + self.framing
    }
}

const SUMMARY: &str = "Summary.";

/// A synchronous stand-in for the summariser and the archive: a fixed summary, archives named by
/// how much they hold. Every need is logged.
fn fake_summariser(log: &mut Vec<Need>) -> impl FnMut(&Need) -> Answer + '_ {
    move |need: &Need| {
        log.push(need.clone());
        match need {
            Need::Archive { upto } => Answer::Archived(format!("ev-{upto}")),
            _ => Answer::Summary(Some(SUMMARY.into())),
        }
    }
}

/// The archives written, in order: each holds `history[..upto]`.
fn archived(log: &[Need]) -> Vec<usize> {
    log.iter().filter_map(|n| if let Need::Archive { upto } = n { Some(*upto) } else { None }).collect()
}

fn setup(fixed: u64, destination: u64, trigger: u64, before: Tokens, reserve: u64) -> Setup {
    Setup {
        thresholds: Thresholds {
            window: Tokens(trigger * 2 + 20_000),
            trigger: Tokens(trigger),
            destination: Tokens(destination),
        },
        fixed: Tokens(fixed),
        before,
        before_estimated: false,
        summary_reserve: Tokens(reserve),
        sent_prefix: None,
        summariser_window: None,
        cache: None,
    }
}

fn input<'a>(
    history: &'a [Message],
    tokens: &'a [Tokens],
    objective: &'a str,
    destination: u64,
    files: &'a [WorkingFile],
) -> PlanInput<'a> {
    PlanInput {
        pinned: &[],
        history,
        message_tokens: tokens,
        fixed: Tokens(100),
        objective,
        destination: Tokens(destination),
        working_files: files,
        keep_rounds_limit: None,
        summary_reserve: Tokens(50),
        count: &count_msg,
        pricing: None,
    }
}

/// Objective; a failing `cargo test` (big); a big read; a chat turn; a failing `ls`; a chat turn.
fn sample() -> Vec<Message> {
    let mut h = vec![Message::user("make the tests pass")];
    h.extend(run("c1", "cargo test", false, &filler("test output", 800)));
    h.push(call("r1", "read_file", r#"{"path":"src/lib.rs"}"#));
    h.push(Message::tool_result("r1", filler("lib", 4000), false));
    h.push(Message::assistant_text("I see the problem."));
    h.extend(run("c2", "ls", false, "ls: cannot access"));
    h.push(Message::assistant_text("Next I will edit src/lib.rs."));
    h
}

#[test]
fn the_candidate_is_laid_out_in_order() {
    let h = sample();
    let tokens: Vec<Tokens> = h.iter().map(count_msg).collect();
    let inp = input(&h, &tokens, "make the tests pass", 600, &[]);
    let p = plan(&inp);
    // Rounds: 0 objective, 1 cargo test, 2 read, 3 text, 4 ls, 5 text. The failing `cargo test` output
    // (~200 tokens) leaves the recent part but stays as an observation; the read goes.
    assert_eq!(p.keep_from_round, 3);
    assert_eq!(p.keep_from_message, 5);
    assert_eq!(p.kept_rounds, 3);
    assert_eq!(p.summarise, vec![0, 1, 2, 3, 4]);
    assert_eq!(p.observations.len(), 1);
    assert_eq!(p.observations[0].kind, ObservationKind::FailingCommand { command: "cargo test".into() });

    let cp = Checkpoint {
        summary: "Ran the tests; read src/lib.rs.".into(),
        archive_ref: Some("ev1".into()),
        batches: 1,
    };
    let out = assemble(&inp, &p, &cp);
    assert_eq!(out.len(), 3 + 4);
    assert_eq!(out[0].text(), "Objective: make the tests pass");
    assert!(is_checkpoint(&out[1]));
    assert_eq!(
        out[1].text(),
        "[checkpoint]\nRan the tests; read src/lib.rs.\n\nThe full text of the steps summarised here is archived \
         as evidence ev1; read it with read_evidence {\"id\": \"ev1\"}."
    );
    assert!(out[2]
        .text()
        .starts_with("[unresolved observations]\n\nrun_command `cargo test` failed:\ntest output:"));
    assert_eq!(&out[3..], &h[5..]);
    assert!(count_all(&out) + Tokens(100) <= Tokens(600));
}

#[test]
fn a_request_that_fits_whole_keeps_the_original_objective_once() {
    let h = sample();
    let tokens: Vec<Tokens> = h.iter().map(count_msg).collect();
    let inp = input(&h, &tokens, "make the tests pass", 100_000, &[]);
    let p = plan(&inp);
    assert_eq!(p.keep_from_message, 0);
    assert!(p.summarise.is_empty() && p.observations.is_empty());
    let out = assemble(&inp, &p, &Checkpoint::default());
    assert_eq!(out, h);
}

#[test]
fn working_files_come_newest_first_up_to_half() {
    let h = sample();
    let tokens: Vec<Tokens> = h.iter().map(count_msg).collect();
    let file = |path: &str, len: usize| {
        let text = filler(path, len);
        let tokens = Tokens(text.chars().count() as u64 / 4);
        WorkingFile { path: path.into(), text, tokens }
    };
    // destination - fixed = 1900; half = 950 tokens. 2000 chars = 500 tokens each: two fit, the third
    // does not, the small fourth does.
    let files = vec![file("a.rs", 2000), file("b.rs", 1600), file("c.rs", 2000), file("d.rs", 40)];
    let inp = input(&h, &tokens, "make the tests pass", 2000, &files);
    let p = plan(&inp);
    assert_eq!(p.files, vec![0, 1, 3]);
    let out = assemble(&inp, &p, &Checkpoint::default());
    let files_msg = out.iter().find(|m| m.text().starts_with(FILES_HEADER)).unwrap();
    let t = files_msg.text();
    assert!(t.starts_with("[working files]\n\n--- a.rs ---\na.rs:"));
    assert!(t.find("--- b.rs ---").unwrap() < t.find("--- d.rs ---").unwrap());
    assert!(!t.contains("--- c.rs ---"));
    let c = count_all(&out) + Tokens(100);
    assert!(c <= Tokens(2000), "{c}");
}

#[test]
fn a_file_already_present_verbatim_is_not_repeated() {
    let mut h = sample();
    let text = filler("kept", 100);
    h.push(call("r9", "read_file", r#"{"path":"k.rs"}"#));
    h.push(Message::tool_result("r9", text.clone(), false));
    let tokens: Vec<Tokens> = h.iter().map(count_msg).collect();
    let files = vec![WorkingFile { path: "k.rs".into(), text, tokens: Tokens(25) }];
    let inp = input(&h, &tokens, "make the tests pass", 1000, &files);
    let p = plan(&inp);
    assert!(p.files.is_empty());
    // Inside a longer result (an evidence page's header before it), or as what a kept write wrote.
    let mut h = sample();
    let text = filler("kept", 100);
    h.push(call("r9", "read_file", r#"{"path":"k.rs"}"#));
    h.push(Message::tool_result("r9", format!("[evidence e: 1 line]\n{text}"), false));
    let tokens: Vec<Tokens> = h.iter().map(count_msg).collect();
    let files = vec![WorkingFile { path: "k.rs".into(), text: text.clone(), tokens: Tokens(25) }];
    assert!(plan(&input(&h, &tokens, "make the tests pass", 1000, &files)).files.is_empty());
    let mut h = sample();
    let write = serde_json::json!({"path": "k.rs", "content": text}).to_string();
    h.push(call("w1", "write_file", &write));
    h.push(Message::tool_result("w1", "wrote k.rs", false));
    let tokens: Vec<Tokens> = h.iter().map(count_msg).collect();
    assert!(plan(&input(&h, &tokens, "make the tests pass", 1000, &files)).files.is_empty());
    // A file changed since: its current text is not in the history, so it is carried.
    let changed =
        vec![WorkingFile { path: "k.rs".into(), text: format!("{text} changed"), tokens: Tokens(27) }];
    assert_eq!(plan(&input(&h, &tokens, "make the tests pass", 1000, &changed)).files, vec![0]);
}

#[test]
fn judge_rules() {
    let t = Tokens;
    assert_eq!(judge(t(50), t(90), t(50), t(80), 3), Verdict::Accept);
    assert_eq!(judge(t(70), t(90), t(50), t(80), 3), Verdict::Accept);
    assert_eq!(judge(t(70), t(60), t(50), t(80), 3), Verdict::RetryWithFewerRounds);
    assert_eq!(judge(t(85), t(90), t(50), t(80), 1), Verdict::RetryWithFewerRounds);
    assert_eq!(
        judge(t(85), t(90), t(50), t(80), 0),
        Verdict::Fail {
            reason: "compacted request is 85 tokens; destination 50, trigger 80, before 90; nothing more can be removed"
                .into()
        }
    );
}

#[test]
fn compact_with_retries_with_fewer_rounds_when_the_full_count_is_larger() {
    let h = sample();
    let tokens: Vec<Tokens> = h.iter().map(count_msg).collect();
    let inp = input(&h, &tokens, "make the tests pass", 600, &[]);
    // The full request costs more than its messages (framing the plan could not see): just enough
    // to push the first candidate over the destination.
    let first = plan(&inp);
    // (As it is judged: naming the archive by the placeholder, before anything is archived.)
    let first_cp =
        Checkpoint { summary: SUMMARY.into(), archive_ref: Some(ARCHIVE_REF_PLACEHOLDER.into()), batches: 1 };
    let slack = Tokens(600) - (count_all(&assemble(&inp, &first, &first_cp)) + Tokens(100));
    let measure = TestMeasure { framing: slack + Tokens(1) };
    let mut log = Vec::new();
    let before = count_all(&h) + Tokens(100);
    let done = compact_with(
        &h,
        brief("make the tests pass"),
        &[],
        setup(100, 600, 601, before, 50),
        &measure,
        &mut fake_summariser(&mut log),
    )
    .unwrap();
    assert!(measure.history(&done.history) + Tokens(100) <= Tokens(600));
    assert_eq!(done.tokens, measure.history(&done.history) + Tokens(100), "counted in full");
    assert!(done.plan.kept_rounds < first.kept_rounds);
    // The retries are judged before anything is archived: one archive, of the accepted candidate.
    assert_eq!(archived(&log), [done.plan.keep_from_message], "{log:#?}");
    // The first summary continued the request in place; what later retries removed was folded.
    assert!(matches!(log[0], Need::InPlace { messages, .. } if messages == h.len()));
    assert!(done.in_place);
    assert!(log.iter().any(|n| matches!(n, Need::Fold { prompt, .. } if prompt.contains(SUMMARY))));
}

#[test]
fn compact_with_fails_with_the_numbers() {
    let h = sample();
    let measure = TestMeasure { framing: Tokens::ZERO };
    let mut log = Vec::new();
    // Nothing but the checkpoint fits below the trigger: every retry is tried, then the numbers.
    let err = compact_with(
        &h,
        brief("make the tests pass"),
        &[],
        setup(100, 100, 150, Tokens(2000), 50),
        &measure,
        &mut fake_summariser(&mut log),
    )
    .unwrap_err();
    assert!(err.starts_with("compacted request is "), "{err}");
    assert!(err.contains("destination 100, trigger 150, before 2000"), "{err}");
    // The objective alone over the trigger: refused before anything is summarised.
    let objective = filler("huge objective", 4000);
    let mut log = Vec::new();
    let err = compact_with(
        &h,
        brief(&objective),
        &[],
        setup(100, 600, 700, Tokens(2000), 50),
        &measure,
        &mut fake_summariser(&mut log),
    )
    .unwrap_err();
    let floor = Tokens(100) + count_msg(&objective_message(&objective));
    assert!(
        err.starts_with(&format!(
            "the system prompt, tools and objective alone are {floor} tokens, over the trigger of 700"
        )),
        "{err}"
    );
    assert!(log.is_empty(), "nothing was summarised: {log:?}");
}

#[test]
fn a_summariser_of_its_own_never_continues_the_request_and_its_batches_fit_its_window() {
    let h = sample();
    let measure = TestMeasure { framing: Tokens::ZERO };
    let before = count_all(&h) + Tokens(100);
    let sent = SentPrefix { messages: h.len() - 1, tokens: count_all(&h[..h.len() - 1]) + Tokens(100) };
    let own = Setup { sent_prefix: Some(sent), ..setup(100, 600, 601, before, 50) };
    let mut alone = Vec::new();
    compact_with(&h, brief("make the tests pass"), &[], own, &measure, &mut fake_summariser(&mut alone))
        .unwrap();
    assert!(matches!(alone[0], Need::InPlace { .. }), "the role's own model continues its request");
    // A small summariser: folded batches only, each request within its window.
    let window = Tokens(900);
    let small = Setup { summariser_window: Some(window), ..own };
    let mut log = Vec::new();
    let done =
        compact_with(&h, brief("make the tests pass"), &[], small, &measure, &mut fake_summariser(&mut log))
            .unwrap();
    assert!(!done.in_place);
    let folds: Vec<&String> = log
        .iter()
        .filter_map(|n| if let Need::Fold { prompt, .. } = n { Some(prompt) } else { None })
        .collect();
    assert!(
        !folds.is_empty() && folds.len() == log.iter().filter(|n| !matches!(n, Need::Archive { .. })).count()
    );
    for prompt in folds {
        let tokens = measure.summary_request(SUMMARISER_SYSTEM, &[Message::user(prompt.clone())]);
        assert!(tokens + Tokens(50) <= window, "{tokens} + the reserve over the summariser's {window}");
    }
}

#[test]
fn the_first_summary_continues_the_request_last_sent() {
    let h = sample();
    let measure = TestMeasure { framing: Tokens::ZERO };
    let before = count_all(&h) + Tokens(100);
    // The last request sent carried all but the last message (the new answer).
    let sent = SentPrefix { messages: h.len() - 1, tokens: count_all(&h[..h.len() - 1]) + Tokens(100) };
    for (prefix, estimated) in [(Some(sent), true), (Some(sent), false), (None, false), (None, true)] {
        let mut log = Vec::new();
        let s =
            Setup { sent_prefix: prefix, before_estimated: estimated, ..setup(100, 600, 601, before, 50) };
        let done =
            compact_with(&h, brief("make the tests pass"), &[], s, &measure, &mut fake_summariser(&mut log))
                .unwrap();
        match (prefix, estimated) {
            // The sent request, exactly: its prefix is what a provider has cached.
            (Some(sent), _) => {
                let Need::InPlace { messages, instruction, .. } = &log[0] else { panic!("{log:?}") };
                assert_eq!(*messages, sent.messages);
                let kept_of_prefix = sent.messages - done.plan.keep_from_message.min(sent.messages);
                assert_eq!(*instruction, prefix_prompt(kept_of_prefix, "make the tests pass"));
                assert!(done.in_place);
            }
            // Nothing was sent, but the history is measured: the history itself.
            (None, false) => {
                assert!(matches!(log[0], Need::InPlace { messages, .. } if messages == h.len()));
            }
            // An estimate never certifies that the history fits: folded batches.
            (None, true) => {
                assert!(matches!(log[0], Need::Fold { .. }), "{log:?}");
                assert!(!done.in_place);
            }
        }
    }
    // A sent request too large for the instruction and the answer: folded instead.
    let mut log = Vec::new();
    let mut s = setup(100, 600, 601, before, 50);
    s.sent_prefix = Some(SentPrefix { messages: 3, tokens: s.thresholds.window });
    compact_with(&h, brief("make the tests pass"), &[], s, &measure, &mut fake_summariser(&mut log)).unwrap();
    assert!(matches!(log[0], Need::Fold { .. }), "{log:?}");
}

#[test]
fn an_empty_in_place_answer_falls_back_to_folding() {
    let h = sample();
    let measure = TestMeasure { framing: Tokens::ZERO };
    let before = count_all(&h) + Tokens(100);
    let mut log = Vec::new();
    let mut respond = |need: &Need| {
        log.push(need.clone());
        match need {
            Need::Archive { upto } => Answer::Archived(format!("ev-{upto}")),
            Need::InPlace { .. } => Answer::Summary(Some("   ".into())),
            _ => Answer::Summary(Some(SUMMARY.into())),
        }
    };
    let done = compact_with(
        &h,
        brief("make the tests pass"),
        &[],
        setup(100, 600, 601, before, 50),
        &measure,
        &mut respond,
    )
    .unwrap();
    assert!(!done.in_place);
    assert!(matches!(log[1], Need::Fold { .. }), "{log:?}");
    assert!(done.history[1].text().contains(SUMMARY));
}

#[test]
fn a_history_opening_with_a_stray_result_never_opens_the_kept_part_with_it() {
    let h = vec![Message::tool_result("zz", "orphan", false), Message::assistant_text("hi")];
    let tokens: Vec<Tokens> = h.iter().map(count_msg).collect();
    let inp = input(&h, &tokens, "obj", 100_000, &[]);
    let p = plan(&inp);
    assert_eq!(p.keep_from_message, 1);
    assert_eq!(p.kept_rounds, 1);
    assert_eq!(p.summarise, vec![0]);
}

// ---- property tests ------------------------------------------------------------------------------

const TOOLS: [&str; 4] = ["read_file", "run_command", "finish", "edit_file"];
const COMMANDS: [&str; 3] = ["cargo test", "cargo build", "make lint"];

#[derive(Debug, Clone)]
enum Step {
    Say(usize),
    /// (tool, command, is_error, result length)
    Calls(Vec<(usize, usize, bool, usize)>),
    User(usize),
}

fn arb_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        2 => (0usize..400).prop_map(Step::Say),
        5 => prop::collection::vec((0usize..4, 0usize..3, any::<bool>(), 0usize..2000), 1..=3)
            .prop_map(Step::Calls),
        1 => (0usize..300).prop_map(Step::User),
    ]
}

fn build(objective: &str, steps: &[Step]) -> Vec<Message> {
    let mut h = vec![Message::user(objective)];
    let mut next_id = 0;
    for (n, step) in steps.iter().enumerate() {
        match step {
            Step::Say(len) => h.push(Message::assistant_text(filler(&format!("say{n}"), *len))),
            Step::User(len) => h.push(Message::user(filler(&format!("user{n}"), *len))),
            Step::Calls(calls) => {
                let mut parts = vec![Part::Text { text: format!("step {n}") }];
                let mut results = Vec::new();
                for (tool, cmd, is_error, len) in calls {
                    next_id += 1;
                    let id = format!("call{next_id}");
                    let name = TOOLS[*tool];
                    let arguments = match name {
                        "run_command" => serde_json::json!({ "command": COMMANDS[*cmd] }).to_string(),
                        "finish" => serde_json::json!({ "summary": format!("done {n}") }).to_string(),
                        _ => serde_json::json!({ "path": format!("src/f{cmd}.rs") }).to_string(),
                    };
                    parts.push(Part::ToolCall { id: id.clone(), name: name.into(), arguments });
                    results.push(Message::tool_result(
                        &id,
                        filler(&format!("out{next_id}"), *len),
                        *is_error,
                    ));
                }
                h.push(Message::new(Speaker::Assistant, parts));
                h.extend(results);
            }
        }
    }
    h
}

fn arb_files() -> impl Strategy<Value = Vec<WorkingFile>> {
    prop::collection::vec(0usize..3000, 0..3).prop_map(|lens| {
        lens.into_iter()
            .enumerate()
            .map(|(i, len)| {
                let text = filler(&format!("file{i}"), len);
                let tokens = Tokens(text.chars().count() as u64 / 4);
                WorkingFile { path: format!("src/file{i}.rs"), text, tokens }
            })
            .collect()
    })
}

/// The checks every accepted compaction must pass.
fn check_accepted(h: &[Message], objective: &str, out: &[Message], p: &Plan) -> Result<(), TestCaseError> {
    // The objective comes first.
    prop_assert_eq!(out[0].role, Speaker::User);
    prop_assert!(out[0].text().contains(objective));
    // The kept part is the history's tail, verbatim (the objective may have been moved to the front).
    let tail = &h[p.keep_from_message..];
    if p.keep_from_message == 0 && !h.is_empty() && out[0] == h[0] {
        prop_assert!(out.ends_with(&h[1..]));
    } else {
        prop_assert!(out.ends_with(tail));
    }
    prop_assert_eq!(p.summarise.clone(), (0..p.keep_from_message).collect::<Vec<_>>());
    // Every unresolved observation of the original history is present verbatim, exactly once.
    let obs_msgs: Vec<String> =
        out.iter().map(|m| m.text()).filter(|t| t.starts_with(OBSERVATIONS_HEADER)).collect();
    prop_assert!(obs_msgs.len() <= 1);
    for o in unresolved(h) {
        if o.round >= p.keep_from_round {
            prop_assert!(!p.observations.contains(&o));
        } else {
            prop_assert_eq!(obs_msgs.len(), 1);
            prop_assert_eq!(obs_msgs[0].matches(o.text.as_str()).count(), 1, "observation {:?}", o.text);
        }
    }
    // Every tool call has its result and every result its call.
    let mut calls: HashMap<String, usize> = HashMap::new();
    let mut results: HashMap<String, usize> = HashMap::new();
    for m in out {
        for (id, _, _) in m.tool_calls() {
            *calls.entry(id.to_string()).or_default() += 1;
        }
        for id in m.tool_result_ids() {
            *results.entry(id.to_string()).or_default() += 1;
        }
    }
    prop_assert_eq!(calls, results);
    // The kept part never opens with a tool result.
    if let Some(first) = tail.first() {
        prop_assert!(first.role != Speaker::Tool);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn compaction_lands_below_the_destination_or_fails_loudly(
        objective_len in 5usize..300,
        steps in prop::collection::vec(arb_step(), 0..25),
        files in arb_files(),
        fixed in 0u64..500,
        destination in 50u64..6000,
        gap in prop_oneof![1u64..50, 50u64..4000],
        summary_reserve in 20u64..120,
        request_framing in 0u64..400,
        sent in prop::option::of(0usize..60),
        estimated in any::<bool>(),
    ) {
        // The full count sees framing the per-message counts do not, which forces retries.
        let count_request = move |m: &[Message]| count_all(m) + Tokens(request_framing);
        let objective = filler("objective", objective_len);
        let h = build(&objective, &steps);
        let trigger = Tokens(destination + gap);
        let before = count_request(&h) + Tokens(fixed);
        let measure = TestMeasure { framing: Tokens(request_framing) };
        let sent_prefix = sent.map(|n| {
            let n = n.min(h.len());
            SentPrefix { messages: n, tokens: count_all(&h[..n]) + Tokens(fixed) }
        }).filter(|s| s.messages > 0);
        let s = Setup { sent_prefix, before_estimated: estimated, ..setup(fixed, destination, destination + gap, before, summary_reserve) };
        let mut log = Vec::new();
        let result = compact_with(&h, brief(&objective), &files, s, &measure, &mut fake_summariser(&mut log));
        match result {
            Ok(done) => {
                let c = measure.history(&done.history) + Tokens(fixed);
                prop_assert_eq!(c, done.tokens);
                prop_assert!(c <= Tokens(destination) || (c < trigger && c < before),
                    "accepted {} with destination {}, trigger {}, before {}", c, destination, trigger, before);
                check_accepted(&h, &objective, &done.history, &done.plan)?;
                // What left the request is archived whole, last as the checkpoint names it.
                let archives = archived(&log);
                if done.plan.keep_from_message > 0 {
                    prop_assert_eq!(archives.last().copied(), Some(done.plan.keep_from_message));
                    prop_assert_eq!(done.archive_ref.clone(), format!("ev-{}", done.plan.keep_from_message));
                }
            }
            Err(reason) => {
                // A refused compaction has written nothing.
                prop_assert!(archived(&log).is_empty(), "{:?}", log);
                let floor = Tokens(fixed) + count_msg(&objective_message(&objective));
                if floor >= trigger {
                    prop_assert!(reason.starts_with("the system prompt, tools and objective alone"), "{}", reason);
                } else {
                    prop_assert!(reason.starts_with("compacted request is "), "{}", reason);
                }
            }
        }
        for w in archived(&log).windows(2) {
            prop_assert!(w[1] > w[0]);
        }
        // A first summary in place continues exactly the request that was sent, when one was.
        if let (Some(Need::InPlace { messages, .. }), Some(sent)) = (log.first(), sent_prefix) {
            prop_assert_eq!(*messages, sent.messages);
        }
        if let (Some(Need::InPlace { messages, .. }), None) = (log.first(), sent_prefix) {
            prop_assert!(!estimated);
            prop_assert_eq!(*messages, h.len());
        }
    }

    #[test]
    fn compaction_succeeds_whenever_the_mandatory_parts_fit(
        objective_len in 5usize..300,
        steps in prop::collection::vec(arb_step(), 0..25),
        files in arb_files(),
        fixed in 0u64..500,
        room in 0u64..5000,
        gap in 1u64..4000,
    ) {
        let objective = filler("objective", objective_len);
        let h = build(&objective, &steps);
        let summary_reserve = Tokens(40);
        let skeleton = Checkpoint {
            summary: String::new(),
            archive_ref: Some(ARCHIVE_REF_PLACEHOLDER.into()),
            batches: 0,
        };
        let all_obs = unresolved(&h);
        let mandatory = Tokens(fixed)
            + count_msg(&objective_message(&objective))
            + count_msg(&checkpoint_message(&skeleton))
            + summary_reserve
            + observations_message(all_obs.iter().map(Observation::carried)).map_or(Tokens::ZERO, |m| count_msg(&m));
        let destination = mandatory + Tokens(room);
        let trigger = destination + Tokens(gap);
        let before = count_all(&h) + Tokens(fixed);
        let measure = TestMeasure { framing: Tokens::ZERO };
        let s = setup(fixed, destination.0, trigger.0, before, summary_reserve.0);
        let mut log = Vec::new();
        let done = compact_with(&h, brief(&objective), &files, s, &measure, &mut fake_summariser(&mut log))
            .map_err(TestCaseError::fail)?;
        prop_assert!(count_all(&done.history) + Tokens(fixed) <= destination);
        // The plan's own estimate was exact: no retry was needed.
        prop_assert!(archived(&log).len() <= 1);
        check_accepted(&h, &objective, &done.history, &done.plan)?;
    }

    #[test]
    fn fewer_rounds_only_summarise_more(
        steps in prop::collection::vec(arb_step(), 0..25),
        destination in 200u64..20_000,
    ) {
        let h = build("objective", &steps);
        let tokens: Vec<Tokens> = h.iter().map(count_msg).collect();
        let inp = input(&h, &tokens, "objective", destination, &[]);
        let mut previous = plan(&inp);
        for limit in (0..previous.kept_rounds).rev() {
            let p = plan(&PlanInput { keep_rounds_limit: Some(limit), ..inp });
            prop_assert!(p.kept_rounds <= limit);
            prop_assert!(p.summarise.starts_with(&previous.summarise));
            previous = p;
        }
    }
}

// ---- observations carried through compactions ------------------------------------------------------

/// `count` reads of `len` characters each, with ids unique under `tag`: work that pushes what came
/// before out of the kept rounds.
fn reads(tag: &str, count: usize, len: usize) -> Vec<Message> {
    let mut out = Vec::new();
    for n in 0..count {
        let id = format!("{tag}{n}");
        out.push(call(&id, "read_file", &serde_json::json!({ "path": format!("src/{id}.rs") }).to_string()));
        out.push(Message::tool_result(&id, filler(&id, len), false));
    }
    out
}

/// One compaction of `h` to 3000 tokens (trigger 4000), which must succeed.
fn compact_to_3000(h: &[Message]) -> Result<Compacted, String> {
    let before = count_all(h) + Tokens(100);
    let measure = TestMeasure { framing: Tokens::ZERO };
    compact_with(
        h,
        brief("make the tests pass"),
        &[],
        setup(100, 3000, 4000, before, 50),
        &measure,
        &mut fake_summariser(&mut Vec::new()),
    )
}

/// The observations of `h` as a compaction carries them (their rounds aside).
fn carried_of(h: &[Message]) -> Vec<CarriedObservation> {
    unresolved(h).iter().map(Observation::carried).collect()
}

#[test]
fn an_observation_that_looks_like_several_survives_two_compactions_as_one() {
    // The output, rendered into the observations message, holds what looks like the start of a
    // rejected finish and of another failing command after blank lines.
    let output =
        "FAILED: adds\n\nfinish was rejected:\nnot a rejection\n\nrun_command `ls` failed:\nnor a failing ls";
    let mut h = vec![Message::user("make the tests pass")];
    h.extend(run("c1", "cargo test", false, output));
    let expected = vec![CarriedObservation {
        kind: ObservationKind::FailingCommand { command: "cargo test".into() },
        text: format!("run_command `cargo test` failed:\n{output}"),
    }];
    assert_eq!(carried_of(&h), expected);
    h.extend(reads("a", 8, 2000));

    let once = compact_to_3000(&h).unwrap();
    assert!(once.plan.keep_from_message > 2, "the failure left the kept rounds");
    let carriers: Vec<&Message> =
        once.history.iter().filter(|m| m.kind == MessageKind::Observations).collect();
    assert_eq!(carriers.len(), 1);
    assert_eq!(carriers[0].observations, expected);
    assert_eq!(carriers[0].text(), format!("{OBSERVATIONS_HEADER}\n\n{}", expected[0].text));
    assert_eq!(carried_of(&once.history), expected);

    let mut more = once.history.clone();
    more.extend(reads("b", 8, 2000));
    let twice = compact_to_3000(&more).unwrap();
    let position = |h: &[Message]| h.iter().position(|m| m.kind == MessageKind::Observations);
    assert!(twice.plan.keep_from_message > position(&more).unwrap_or(0), "the observations message left too");
    assert_eq!(carried_of(&twice.history), expected, "still one observation, intact");
    let carriers: Vec<&Message> =
        twice.history.iter().filter(|m| m.kind == MessageKind::Observations).collect();
    assert_eq!(carriers.len(), 1);
    assert_eq!(carriers[0].observations, expected);
}

/// Tool outputs made of pieces that, rendered, look like where one observation ends and another starts.
fn arb_output() -> impl Strategy<Value = String> {
    let pieces = prop::sample::select(vec![
        "\n\n",
        "\n",
        "finish was rejected:\n",
        "run_command `",
        "cargo test",
        "` failed:",
        "[unresolved observations]",
        "exit code: 1",
        "é",
        " ",
    ]);
    prop::collection::vec(pieces, 0..12).prop_map(|p| p.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn unresolved_observations_survive_two_compactions_exactly(
        // (run_command or finish, command, succeeded, output)
        steps in prop::collection::vec((any::<bool>(), 0usize..3, any::<bool>(), arb_output()), 1..6),
    ) {
        let mut h = vec![Message::user("make the tests pass")];
        for (n, (is_command, cmd, ok, output)) in steps.iter().enumerate() {
            let id = format!("s{n}");
            if *is_command {
                h.extend(run(&id, COMMANDS[*cmd], *ok, output));
            } else {
                h.push(call(&id, "finish", r#"{"summary":"done"}"#));
                h.push(Message::tool_result(&id, output.clone(), !*ok));
            }
        }
        let expected = carried_of(&h);
        h.extend(reads("a", 8, 2000));
        let once = compact_to_3000(&h).map_err(TestCaseError::fail)?;
        prop_assert_eq!(carried_of(&once.history), expected.clone());
        let mut more = once.history;
        more.extend(reads("b", 8, 2000));
        let twice = compact_to_3000(&more).map_err(TestCaseError::fail)?;
        prop_assert_eq!(carried_of(&twice.history), expected.clone());
        // Every one of them was carried as data, in one message, each exactly once.
        let carriers: Vec<&Message> =
            twice.history.iter().filter(|m| m.kind == MessageKind::Observations).collect();
        prop_assert_eq!(carriers.len(), usize::from(!expected.is_empty()));
        if let Some(m) = carriers.first() {
            prop_assert_eq!(&m.observations, &expected);
        }
    }
}

#[test]
fn pinned_blocks_come_back_first_verbatim_fresh_and_are_never_summarised() {
    let instructions = Message::user("[instructions]\n--- AGENTS.md ---\nAlways run cargo nextest.")
        .with_kind(MessageKind::Instructions);
    let old_memory = Message::user("[memory]\n- [m1, workspace] old note").with_kind(MessageKind::Memory);
    let fresh_memory = Message::user("[memory]\n- [m2, workspace] fresh note").with_kind(MessageKind::Memory);
    let mut h = vec![instructions.clone(), old_memory.clone()];
    h.extend(sample());
    let pinned = [instructions.clone(), fresh_memory.clone()];
    let before = count_all(&h) + Tokens(100);
    let mut log = Vec::new();
    let done = compact_with(
        &h,
        Brief { objective: "make the tests pass", pinned: &pinned, focus: Some("keep the parser details") },
        &[],
        setup(100, 600, 700, before, 50),
        &TestMeasure { framing: Tokens::ZERO },
        &mut fake_summariser(&mut log),
    )
    .unwrap();
    assert_eq!(done.history[..2], pinned, "the blocks as they read now, first");
    let kinds: Vec<MessageKind> = done.history.iter().map(|m| m.kind).collect();
    assert_eq!(kinds.iter().filter(|k| k.is_pinned()).count(), 2, "never twice: {kinds:?}");
    assert!(!done.history.iter().any(|m| m.text().contains("old note")), "the old block is replaced");
    assert!(!done.plan.summarise.iter().any(|&i| h[i].kind.is_pinned()), "nothing pinned is summarised");
    for need in &log {
        let prompt = match need {
            Need::Fold { prompt, .. } => prompt,
            Need::InPlace { instruction, .. } => instruction,
            _ => continue,
        };
        assert!(prompt.contains("<focus>") && prompt.contains("keep the parser details"), "{prompt}");
        if let Need::Fold { prompt, .. } = need {
            assert!(!prompt.contains("Always run cargo nextest"), "a block is not summarised: {prompt}");
        }
    }
}

/// The objective, then `docs` reads of `doc_chars`-character documents, each answered by a line of
/// text, then one more read the model has not answered yet.
fn reading(docs: usize, doc_chars: usize) -> Vec<Message> {
    let mut h = vec![Message::user("read the notes")];
    for i in 0..=docs {
        let id = format!("r{i}");
        h.push(call(&id, "read_file", &format!(r#"{{"path":"notes/{i}.md"}}"#)));
        h.push(Message::tool_result(&id, filler(&format!("note {i}"), doc_chars), false));
        if i < docs {
            h.push(Message::assistant_text(format!("Note {i} read; on to the next.")));
        }
    }
    h
}

/// A cache like Anthropic's, the next compaction at `trigger`.
fn priced(trigger: u64) -> Option<Pricing> {
    Some(Pricing { cache: agentd_protocol::model::PromptCache::ANTHROPIC, trigger: Tokens(trigger) })
}

#[test]
fn with_a_cache_read_and_answered_documents_leave_and_the_unanswered_read_stays() {
    // Five answered reads of ~2,000 tokens and one unanswered, destination 8,000 (room for three
    // reads verbatim), trigger 12,000.
    let h = reading(5, 8_000);
    let tokens: Vec<Tokens> = h.iter().map(count_msg).collect();
    let today = plan(&input(&h, &tokens, "read the notes", 8_000, &[]));
    assert!(today.kept_rounds >= 5, "as many as fit: {today:?}");
    let inp = PlanInput { pricing: priced(12_000), ..input(&h, &tokens, "read the notes", 8_000, &[]) };
    let p = plan(&inp);
    // Only the read the model has not answered stays; everything before it leaves, to be summarised
    // and archived.
    assert_eq!(p.kept_rounds, 1, "{p:?}");
    assert_eq!(p.keep_from_message, h.len() - 2);
    assert_eq!(p.summarise, (0..h.len() - 2).collect::<Vec<_>>());
    let out = assemble(
        &inp,
        &p,
        &Checkpoint { summary: SUMMARY.into(), archive_ref: Some("ev".into()), batches: 1 },
    );
    assert_eq!(out[0].text(), "Objective: read the notes");
    assert!(is_checkpoint(&out[1]));
    assert_eq!(&out[2..], &h[h.len() - 2..]);
}

#[test]
fn with_a_cache_the_price_decides_and_a_prefix_under_the_minimum_is_read_in_full() {
    // Tiny rounds under a 1,024-token cache minimum: every landing is re-read in full whatever it
    // keeps, so the plan keeps what the price says, never less than the last round.
    let h = reading(6, 40);
    let tokens: Vec<Tokens> = h.iter().map(count_msg).collect();
    let inp = PlanInput { pricing: priced(900), ..input(&h, &tokens, "read the notes", 600, &[]) };
    let p = plan(&inp);
    assert!(p.kept_rounds >= 1);
    let today = plan(&input(&h, &tokens, "read the notes", 600, &[]));
    assert!(p.kept_rounds <= today.kept_rounds);
}

proptest! {
    /// With a cache, the plan keeps the last round whenever it fits, never more rounds than fit below
    /// the destination, and what it keeps is the cheapest landing of those it could keep.
    #[test]
    fn a_priced_plan_keeps_the_last_round_and_the_cheapest_landing(
        docs in 1usize..12,
        doc_chars in 40usize..12_000,
        destination in 800u64..20_000,
        trigger_gap in 100u64..20_000,
    ) {
        let h = reading(docs, doc_chars);
        let tokens: Vec<Tokens> = h.iter().map(count_msg).collect();
        let base = input(&h, &tokens, "read the notes", destination, &[]);
        let today = plan(&base);
        let p = plan(&PlanInput { pricing: priced(destination + trigger_gap), ..base });
        prop_assert!(p.kept_rounds <= today.kept_rounds);
        prop_assert!(p.kept_rounds >= today.kept_rounds.min(1));
        prop_assert_eq!(&p.summarise, &(0..p.keep_from_message).collect::<Vec<_>>());
        // Every landing between the floor and as many as fit is priced no lower than the chosen one.
        let landing = |kept: usize| plan(&PlanInput { keep_rounds_limit: Some(kept), ..base }).landing;
        let rounds = crate::rounds::rounds(&h);
        let round_tokens: Vec<Tokens> = rounds.iter().map(|r| r.clone().map(|i| tokens[i]).sum()).collect();
        let growth = super::candidate::growth(&h, &rounds, &round_tokens);
        let outlook = p.outlook.expect("a priced plan says what it priced with");
        prop_assert_eq!(
            (outlook.floor, outlook.trigger, outlook.growth),
            (Tokens(destination), Tokens(destination + trigger_gap), growth)
        );
        let chosen = price::price(landing(p.kept_rounds), &outlook);
        for kept in today.kept_rounds.min(1)..=today.kept_rounds {
            prop_assert!(chosen <= price::price(landing(kept), &outlook) + 1e-9, "kept {} vs {}", p.kept_rounds, kept);
        }
    }
}

#[test]
fn a_priced_compaction_says_where_the_next_one_comes_and_an_unpriced_one_does_not() {
    // Ten answered reads of ~2,000 tokens and one unanswered; destination 8,000, trigger 20,000.
    let h = reading(10, 8_000);
    let before = count_all(&h) + Tokens(100);
    let run = |cache| {
        let mut log = Vec::new();
        let setup = Setup { cache, ..setup(100, 8_000, 20_000, before, 50) };
        let measure = TestMeasure { framing: Tokens::ZERO };
        let done =
            compact_with(&h, brief("read the notes"), &[], setup, &measure, &mut fake_summariser(&mut log));
        done.unwrap()
    };
    assert_eq!(run(None).next_trigger(), None);
    let done = run(Some(agentd_protocol::model::PromptCache::ANTHROPIC));
    let outlook = done.plan.outlook.expect("priced");
    let next = done.next_trigger().expect("a priced compaction names the next trigger");
    assert_eq!(next, price::next_trigger(done.tokens, &outlook), "priced from the candidate as counted");
    assert!(next >= Tokens(8_000) && next <= Tokens(20_000), "{next}");
    // Reads of 2,000 from a small landing: re-reading up to 20,000 costs more than compacting sooner.
    assert!(next < Tokens(20_000), "{next}");
}
