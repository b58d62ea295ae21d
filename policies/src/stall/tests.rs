use super::*;
use proptest::prelude::*;

fn run(result: &str) -> Seen<'_> {
    Seen { tool: "run_command", arguments: r#"{"command":"make"}"#, result, ok: false, acts: true }
}

fn read<'a>(path: &'a str, result: &'a str, ok: bool) -> Seen<'a> {
    Seen { tool: "read_file", arguments: path, result, ok, acts: false }
}

#[test]
fn the_same_failing_call_three_times_stalls_then_ends_the_turn() {
    let mut w = Watch::new(StallPolicy::default());
    assert_eq!(w.answered(&[run("error 1")]), Verdict::Going);
    assert_eq!(w.answered(&[run("error 1")]), Verdict::Going);
    let Verdict::Stalled { why, calls } = w.answered(&[run("error 1")]) else { panic!() };
    assert_eq!(calls, 3);
    assert!(why.contains("same call 3 times") && why.contains("run_command {\"command\":\"make\"}"), "{why}");
    assert!(matches!(w.answered(&[run("error 1")]), Verdict::StillStalled { calls: 4, .. }));
}

#[test]
fn progress_forgives_and_a_different_result_is_no_repeat() {
    let mut w = Watch::new(StallPolicy::default());
    for _ in 0..2 {
        assert_eq!(w.answered(&[run("error 1")]), Verdict::Going);
    }
    assert_eq!(w.answered(&[run("error 2")]), Verdict::Going, "another result: counting starts again");
    let write = Seen { tool: "write_file", arguments: "{}", result: "wrote", ok: true, acts: true };
    assert!(matches!(w.answered(&[run("error 2")]), Verdict::Going));
    assert!(matches!(w.answered(&[run("error 2")]), Verdict::Stalled { .. }));
    // Told; then it writes something new: forgiven, and a later stall is told again.
    assert_eq!(w.answered(&[write]), Verdict::Going);
    for _ in 0..2 {
        w.answered(&[run("error 3")]);
    }
    assert!(matches!(w.answered(&[run("error 3")]), Verdict::Stalled { .. }));
}

#[test]
fn answers_with_nothing_new_stall_and_zero_turns_the_tests_off() {
    let policy = StallPolicy { repeats: 0, idle_requests: 3 };
    let mut w = Watch::new(policy);
    let same = |p: &'static str| read(p, "same text", true);
    assert_eq!(w.answered(&[same("a")]), Verdict::Going, "a new result is progress");
    assert_eq!(w.answered(&[same("b")]), Verdict::Going);
    assert_eq!(w.answered(&[same("c")]), Verdict::Going);
    assert!(matches!(w.answered(&[same("d")]), Verdict::Stalled { calls: 3, .. }));
    // A compaction makes what it saw new again.
    let mut w = Watch::new(policy);
    w.answered(&[same("a")]);
    w.answered(&[same("b")]);
    w.compacted();
    assert_eq!(w.answered(&[same("c")]), Verdict::Going);
    assert_eq!(w.answered(&[same("d")]), Verdict::Going, "idle counted from the compaction");
    let mut off = Watch::new(StallPolicy { repeats: 0, idle_requests: 0 });
    for _ in 0..50 {
        assert_eq!(off.answered(&[run("error")]), Verdict::Going);
    }
}

/// The issue's first finding: a different missing file each time, 150 failing calls, was never a
/// stall (each error read as new). A failed call is no progress: stalled at the 30th answer.
#[test]
fn a_different_missing_file_each_time_is_no_progress() {
    let mut w = Watch::new(StallPolicy::default());
    let mut verdicts = Vec::new();
    for i in 0..150 {
        let path = format!(r#"{{"path":"missing_{i}.txt"}}"#);
        let error = format!("read_file: missing_{i}.txt: No such file or directory");
        verdicts.push(w.answered(&[read(&path, &error, false)]));
    }
    let first = verdicts.iter().position(|v| *v != Verdict::Going).unwrap();
    assert_eq!(first + 1, DEFAULT_IDLE_REQUESTS as usize);
    let Verdict::Stalled { why, calls } = &verdicts[first] else { panic!("{:?}", verdicts[first]) };
    assert_eq!(*calls, DEFAULT_IDLE_REQUESTS);
    assert!(why.starts_with("answered 30 times in a row without getting anywhere"), "{why}");
    assert!(matches!(verdicts[first + 1], Verdict::StillStalled { .. }), "then its turn ends");
}

/// The issue's second finding: `A,B,A,B…` was caught after 33 calls. It is caught when the loop has
/// gone round `repeats` times: at the sixth call.
#[test]
fn an_a_b_loop_is_caught_when_it_has_gone_round_three_times() {
    let mut w = Watch::new(StallPolicy::default());
    let a = read(r#"{"path":"a.txt"}"#, "alpha", true);
    let b = read(r#"{"path":"b.txt"}"#, "beta", true);
    let verdicts: Vec<Verdict> = [a, b, a, b, a, b].iter().map(|c| w.answered(&[*c])).collect();
    assert!(verdicts[..5].iter().all(|v| *v == Verdict::Going), "{verdicts:?}");
    let Verdict::Stalled { why, calls } = &verdicts[5] else { panic!("{verdicts:?}") };
    assert_eq!(*calls, 6);
    assert!(
        why.contains("went round the same 2 calls 3 times")
            && why.contains(r#"read_file {"path":"a.txt"} → read_file {"path":"b.txt"}"#),
        "{why}"
    );
    // Two loops in one answer each, the same: caught at the third answer.
    let mut w = Watch::new(StallPolicy::default());
    assert_eq!(w.answered(&[a, b]), Verdict::Going);
    assert_eq!(w.answered(&[a, b]), Verdict::Going);
    assert!(matches!(w.answered(&[a, b]), Verdict::Stalled { calls: 6, .. }));
}

#[test]
fn a_loop_a_compaction_broke_is_no_loop_and_a_write_made_again_is_no_progress() {
    let mut w = Watch::new(StallPolicy::default());
    let (a, b) = (read("a", "alpha", true), read("b", "beta", true));
    for c in [a, b, a, b] {
        assert_eq!(w.answered(&[c]), Verdict::Going);
    }
    w.compacted();
    for c in [a, b, a] {
        assert_eq!(w.answered(&[c]), Verdict::Going, "read again after a compaction: new");
    }
    // Writing the same file with the same content, between the same failing checks, is a loop.
    let mut w = Watch::new(StallPolicy::default());
    let write = Seen { tool: "write_file", arguments: "x=1", result: "wrote 3 bytes", ok: true, acts: true };
    let check = run("FAILED");
    let verdicts: Vec<Verdict> =
        [write, check, write, check, write, check].iter().map(|c| w.answered(&[*c])).collect();
    assert!(matches!(verdicts[5], Verdict::Stalled { calls: 6, .. }), "{verdicts:?}");
    // A command that succeeds with new arguments is progress, even if it prints what another did.
    let mut w = Watch::new(StallPolicy { repeats: 3, idle_requests: 2 });
    for i in 0..10 {
        let args = format!("echo {i} >> notes.txt");
        let echo =
            Seen { tool: "run_command", arguments: &args, result: "exit code: 0", ok: true, acts: true };
        assert_eq!(w.answered(&[echo]), Verdict::Going);
    }
}

/// One call of a generated run: a small alphabet of tools, arguments and results, so that loops and
/// repeats come up by chance too.
fn any_call() -> impl Strategy<Value = (u8, u8, u8, bool, bool)> {
    (0u8..3, 0u8..6, 0u8..6, any::<bool>(), any::<bool>())
}

/// A generated call's words: tool, arguments, result, and whether it succeeded and acts.
type Owned = (String, String, String, bool, bool);

fn owned(call: &(u8, u8, u8, bool, bool)) -> Owned {
    let (tool, args, result, ok, acts) = *call;
    (format!("tool{tool}"), format!("args{args}"), format!("result{result}"), ok, acts)
}

fn seen(o: &Owned) -> Seen<'_> {
    Seen { tool: &o.0, arguments: &o.1, result: &o.2, ok: o.3, acts: o.4 }
}

proptest! {
    /// Any loop of up to MAX_PERIOD calls, gone round `repeats` times after any prefix, its calls
    /// split into answers of at most a round each, is stalled by the answer that completes the last
    /// round. (An answer that holds a call's first sight and its repeat made progress: never a stall.)
    #[test]
    fn any_short_loop_gone_round_repeats_times_is_stalled_by_then(
        prefix in proptest::collection::vec(any_call(), 0..20),
        round in proptest::collection::vec(any_call(), 1..=MAX_PERIOD),
        repeats in 2u32..5,
        cuts in proptest::collection::vec(1usize..4, 1..40),
    ) {
        let mut w = Watch::new(StallPolicy { repeats, idle_requests: 0 });
        for call in prefix.iter().map(owned) {
            w.answered(&[seen(&call)]);
        }
        let looped: Vec<Owned> = (0..repeats).flat_map(|_| round.iter()).map(owned).collect();
        let calls: Vec<Seen<'_>> = looped.iter().map(seen).collect();
        let mut at = 0;
        let mut stalled = false;
        for cut in cuts.iter().cycle() {
            if at == calls.len() {
                break;
            }
            let end = (at + (*cut).min(round.len())).min(calls.len());
            stalled |= w.answered(&calls[at..end]) != Verdict::Going;
            at = end;
        }
        prop_assert!(stalled, "never stalled going round {:?} {} times", round, repeats);
    }

    /// A run whose every answer has a successful call with a result never seen before is never
    /// stalled, whatever else its answers hold.
    #[test]
    fn every_answer_with_a_new_successful_result_is_never_stalled(
        answers in proptest::collection::vec(proptest::collection::vec(any_call(), 0..4), 1..60),
        at in proptest::collection::vec(0usize..4, 60),
    ) {
        let mut w = Watch::new(StallPolicy::default());
        for (i, others) in answers.iter().enumerate() {
            let mut these: Vec<Owned> = others.iter().map(owned).collect();
            let new = (
                "read_file".to_string(),
                format!("file{i}"),
                format!("the text of file {i}"),
                true,
                false,
            );
            these.insert(at[i].min(these.len()), new);
            let calls: Vec<Seen<'_>> = these.iter().map(seen).collect();
            prop_assert_eq!(w.answered(&calls), Verdict::Going);
        }
    }

    /// `idle_requests` answers in a row of failed calls, whatever their errors say, are stalled by
    /// then.
    #[test]
    fn failed_calls_alone_stall_by_idle_requests_answers(
        idle in 1u32..40,
        errors in proptest::collection::vec(any::<u32>(), 40),
    ) {
        let mut w = Watch::new(StallPolicy { repeats: 0, idle_requests: idle });
        let mut stalled_at = None;
        for (i, e) in errors.iter().enumerate() {
            let (args, error) = (format!("path {i}"), format!("error {e} at {i}"));
            if w.answered(&[read(&args, &error, false)]) != Verdict::Going {
                stalled_at = Some(i + 1);
                break;
            }
        }
        prop_assert_eq!(stalled_at, Some(idle as usize));
    }

    /// An agent reading many different files that exist (their texts all different) is never
    /// stalled, with the default policy, however many it reads.
    #[test]
    fn reading_many_different_existing_files_is_never_stalled(n in 1usize..300) {
        let mut w = Watch::new(StallPolicy::default());
        for i in 0..n {
            let (path, text) = (format!("src/file_{i}.rs"), format!("fn f{i}() {{}}"));
            prop_assert_eq!(w.answered(&[read(&path, &text, true)]), Verdict::Going);
        }
    }
}
