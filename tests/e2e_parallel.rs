//! End-to-end: a team that works at once. Several `delegate` calls of one answer run side by side,
//! each result its call's; two agents of one role (`coder`, `coder#2`) each write in a working copy of
//! their own, their changes coming back as archived patches merged three-way — a conflict told to the
//! lead, never settled silently; a `kill -9` with branches in flight loses none and repeats none.
//!
//! The model is a scripted server that answers each request by what it carries (whose turn it is is
//! in the request), so that branches running at once get their own answers whatever order they
//! arrive in.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use agentd_test_support::daemon::{team_config, TestDaemon};
use agentd_test_support::*;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_agentd");

/// Two read-only specialists beside the coder; the coder runs up to three agents at once; working
/// copies in `copies`.
fn config(base_url: &str, copies: &Path) -> String {
    let specialists = "[team.specialists.reviewer]\nprovider = \"scripted\"\nmodel = \"gpt-4o\"\n\n\
                       [team.specialists.tester]\nprovider = \"scripted\"\nmodel = \"gpt-4o\"\n\n";
    let tools = format!("[tools]\ncopies = \"{}\"\n", copies.display());
    team_config(base_url, "gpt-4o", &format!("{specialists}{tools}")).replacen(
        "[team.coder]\n",
        "[team.coder]\nmax_instances = 3\n",
        1,
    )
}

/// The text of a request's messages after the system prompt, as one string.
fn said(body: &Value) -> String {
    body["messages"].as_array().map(|m| m[1..].iter().map(|m| m.to_string()).collect()).unwrap_or_default()
}

/// The first message after the system prompt: the lead's objective, or a teammate's handoff.
fn opening(body: &Value) -> String {
    body["messages"][1]["content"].as_str().unwrap_or_default().to_string()
}

/// How many tool results the request carries.
fn results(body: &Value) -> usize {
    body["messages"].as_array().map_or(0, |m| m.iter().filter(|m| m["role"] == "tool").count())
}

/// The tool results a request carries, by call id, in order.
fn tool_results(body: &Value) -> Vec<(String, String)> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap_or_default().to_string(),
                m["content"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// A branch's request, by its handoff's objective: which of the lead's `delegate` calls it serves.
fn branch_of<'a>(body: &Value, names: &[&'a str]) -> Option<&'a str> {
    let opening = opening(body);
    names.iter().copied().find(|n| opening.starts_with(&format!("Part {n}")))
}

/// The lead's `delegate` calls, one per (id, to, part).
fn delegations(calls: &[(&str, &str, &str)]) -> Step {
    sse(calls
        .iter()
        .map(|(id, to, part)| {
            tool_call_with_id(id, "delegate", json!({"to": to, "objective": format!("Part {part}")}))
        })
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_delegations_in_one_answer_run_at_once_and_each_result_is_its_calls() {
    let second = Duration::from_secs(1);
    let server = ScriptedServer::builder()
        .responder(move |body| {
            if let Some(part) = branch_of(body, &["A", "B", "C"]) {
                return delayed(second, sse(vec![finish(&format!("{part} done"))]));
            }
            if results(body) == 0 {
                let calls = [("d1", "coder", "A"), ("d2", "reviewer", "B"), ("d3", "tester", "C")];
                return delayed(second, delegations(&calls));
            }
            delayed(second, sse(vec![finish("all three done")]))
        })
        .start()
        .await;
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("README.md"), "hello\n").unwrap();
    let copies = tempfile::tempdir().unwrap();
    let d = TestDaemon::start(Path::new(BIN), &config(&server.base_url(), copies.path()));
    let task = d.submit("Run three parts", ws.path());
    // While the three are at work, `status` and `tasks` name them.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while server.chat_requests().iter().filter(|b| branch_of(b, &["A", "B", "C"]).is_some()).count() < 3 {
        assert!(std::time::Instant::now() < deadline, "the branches never started: {}", d.serve_log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let status = d.client().call("task.status", json!({"task_id": task})).unwrap();
    let running: Vec<&str> =
        status["branches"].as_array().unwrap().iter().map(|b| b["role"].as_str().unwrap()).collect();
    assert_eq!(running, ["coder", "reviewer", "tester"], "{status}");
    let listed = d.client().call("task.list", json!({})).unwrap();
    let mine = listed.as_array().unwrap().iter().find(|t| t["task_id"] == task.as_str()).unwrap();
    assert_eq!(mine["branches"], json!(["coder", "reviewer", "tester"]), "{mine}");
    let shown = d.cli(&["status", &task]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains("branch     coder running: Part A"), "{shown}");
    let events = d.events_until_end(&task, Duration::from_secs(60));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}\n{}", d.serve_log());

    // The server's own log: each branch's request came while the others' were still being answered.
    let chats: Vec<RecordedRequest> =
        server.requests().into_iter().filter(|r| r.path.ends_with("/chat/completions")).collect();
    let branches: Vec<&RecordedRequest> =
        chats.iter().filter(|r| branch_of(&r.body, &["A", "B", "C"]).is_some()).collect();
    assert_eq!(branches.len(), 3, "one request per branch");
    let first = branches.iter().map(|r| r.received).min().unwrap();
    let last = branches.iter().map(|r| r.received).max().unwrap();
    assert!(
        last.duration_since(first) < second,
        "the branches overlap: {:?} apart",
        last.duration_since(first)
    );

    // Each result is its own call's, in call order.
    let lead_last = chats.last().unwrap();
    let tools = tool_results(&lead_last.body);
    assert_eq!(
        tools,
        [("d1".into(), "A done".into()), ("d2".into(), "B done".into()), ("d3".into(), "C done".into())]
    );
    // One writer alone works in the workspace: no copy.
    let delegated: Vec<&Value> = events.iter().filter(|e| e["kind"] == "delegated").collect();
    assert_eq!(delegated.len(), 3);
    assert!(delegated.iter().all(|e| e.get("working_copy").is_none()), "{delegated:#?}");
    let roles: Vec<&str> = delegated.iter().map(|e| e["to_role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["coder", "reviewer", "tester"]);
}

/// Two coders: `coder` writes `a_path` ← `a_text`, `coder#2` writes `b_path` ← `b_text`, each through
/// `write_file`, then finish; the lead then finishes.
async fn two_writers(a: (&'static str, &'static str), b: (&'static str, &'static str)) -> ScriptedServer {
    ScriptedServer::builder()
        .responder(move |body| {
            let write = |(path, content): (&str, &str)| {
                sse(vec![tool_call("write_file", json!({"path": path, "content": content}))])
            };
            match (branch_of(body, &["A", "B"]), results(body)) {
                (Some("A"), 0) => write(a),
                (Some("B"), 0) => write(b),
                (Some(part), _) => sse(vec![finish(&format!("{part} written"))]),
                (None, 0) => delegations(&[("d1", "coder", "A"), ("d2", "coder", "B")]),
                (None, _) => sse(vec![finish("both written")]),
            }
        })
        .start()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_coders_on_different_files_both_land_each_from_its_own_copy() {
    let server = two_writers(("a.txt", "from A\n"), ("b.txt", "from B\n")).await;
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("keep.txt"), "untouched\n").unwrap();
    let copies = tempfile::tempdir().unwrap();
    let d = TestDaemon::start(Path::new(BIN), &config(&server.base_url(), copies.path()));
    let task = d.submit("Write two files", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(60));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}\n{}", d.serve_log());
    assert_eq!(std::fs::read_to_string(ws.path().join("a.txt")).unwrap(), "from A\n");
    assert_eq!(std::fs::read_to_string(ws.path().join("b.txt")).unwrap(), "from B\n");
    assert_eq!(std::fs::read_to_string(ws.path().join("keep.txt")).unwrap(), "untouched\n");

    let delegated: Vec<&Value> = events.iter().filter(|e| e["kind"] == "delegated").collect();
    let roles: Vec<&str> = delegated.iter().map(|e| e["to_role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["coder", "coder#2"]);
    assert!(delegated.iter().all(|e| e["working_copy"].is_string()), "{delegated:#?}");
    // Each instance has its own history, named as such: in the events, the gauge and the log.
    assert!(events.iter().any(|e| e["role"] == "coder#2" && e["kind"] == "request_sent"));
    let gauge = d.cli(&["context", &task, "--role", "coder#2"]);
    assert!(gauge.status.success(), "{}", String::from_utf8_lossy(&gauge.stderr));
    let log = String::from_utf8_lossy(&d.cli(&["log", &task]).stdout).to_string();
    assert!(log.contains("coder#2"), "{log}");
    let past = d.cli(&["context", &task, "--role", "coder#4"]);
    assert!(!past.status.success(), "coder#4 is past max_instances = 3");
    let returned: Vec<&Value> = events.iter().filter(|e| e["kind"] == "delegation_returned").collect();
    assert_eq!(returned.len(), 2);
    for r in &returned {
        assert_eq!((r["files_changed"].as_u64(), r["lines_added"].as_u64()), (Some(1), Some(1)), "{r}");
        assert!(r.get("conflicts").is_none(), "{r}");
        let id = r["patch_evidence_id"].as_str().unwrap();
        let patch = d.client().call("evidence.read", json!({"id": id})).unwrap();
        let text = patch["data"].as_str().unwrap_or_default().to_string();
        assert!(text.contains("new file mode") && text.contains("+from "), "{patch}");
    }
    // The copies are gone once merged.
    assert_eq!(std::fs::read_dir(copies.path()).map(|d| d.count()).unwrap_or(0), 0, "copies left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_coders_on_the_same_lines_the_first_lands_and_the_second_is_a_conflict_told_to_the_lead() {
    let base = "one\ntwo\nthree\n";
    let server =
        two_writers(("shared.txt", "one\nTWO by A\nthree\n"), ("shared.txt", "one\nTWO by B\nthree\n")).await;
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("shared.txt"), base).unwrap();
    let copies = tempfile::tempdir().unwrap();
    let d = TestDaemon::start(Path::new(BIN), &config(&server.base_url(), copies.path()));
    let task = d.submit("Both change line two", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(60));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}\n{}", d.serve_log());
    // The first (in call order) landed; the second's version is not written.
    assert_eq!(std::fs::read_to_string(ws.path().join("shared.txt")).unwrap(), "one\nTWO by A\nthree\n");

    let returned: Vec<&Value> = events.iter().filter(|e| e["kind"] == "delegation_returned").collect();
    assert!(returned[0].get("conflicts").is_none(), "{:#?}", returned[0]);
    let conflicts = returned[1]["conflicts"].as_array().expect("the second is a conflict");
    assert_eq!(conflicts.len(), 1);
    assert_eq!(
        (conflicts[0]["path"].as_str(), conflicts[0]["kind"].as_str()),
        (Some("shared.txt"), Some("both_changed"))
    );
    assert_eq!(conflicts[0]["lines"], json!([2]));
    // Its version reads back whole from the evidence the conflict names.
    let id = conflicts[0]["evidence_id"].as_str().unwrap();
    let version = d.client().call("evidence.read", json!({"id": id})).unwrap();
    assert_eq!(version["data"].as_str(), Some("one\nTWO by B\nthree\n"), "{version}");
    // The lead read of it: the file, the hunk's line and the evidence, in the call's result.
    let last = server.chat_requests().into_iter().last().unwrap();
    let told = said(&last);
    assert!(told.contains("shared.txt") && told.contains(id) && told.contains("line 2"), "{told}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_a_command_creates_and_deletes_in_a_copy_come_back_in_its_patch() {
    let ws = tempfile::tempdir().unwrap();
    // A command in a copy is sandboxed to the copy: the real workspace is out of its reach.
    let escape = format!("echo escaped > {}/escaped.txt", ws.path().display());
    let server = ScriptedServer::builder()
        .responder(move |body| match (branch_of(body, &["A", "B"]), results(body)) {
            (Some("A"), 0) => sse(vec![tool_call("run_command", json!({"command": escape}))]),
            (Some("A"), 1) => sse(vec![tool_call(
                "run_command",
                json!({"command": "echo generated > gen.txt && rm old.txt && chmod +x run.sh"}),
            )]),
            (Some("B"), 0) => sse(vec![tool_call("write_file", json!({"path": "b.txt", "content": "b\n"}))]),
            (Some(part), _) => sse(vec![finish(&format!("{part} done"))]),
            (None, 0) => delegations(&[("d1", "coder", "A"), ("d2", "coder", "B")]),
            (None, _) => sse(vec![finish("done")]),
        })
        .start()
        .await;
    std::fs::write(ws.path().join("old.txt"), "old\n").unwrap();
    std::fs::write(ws.path().join("run.sh"), "#!/bin/sh\n").unwrap();
    let copies = tempfile::tempdir().unwrap();
    let d = TestDaemon::start(Path::new(BIN), &config(&server.base_url(), copies.path()));
    let task = d.submit("Generate and clean", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(60));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}\n{}", d.serve_log());
    assert_eq!(std::fs::read_to_string(ws.path().join("gen.txt")).unwrap(), "generated\n");
    assert!(!ws.path().join("old.txt").exists(), "the deletion came back");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(ws.path().join("run.sh")).unwrap().permissions().mode();
    assert_eq!(mode & 0o111, 0o111, "the mode change came back");
    assert_eq!(std::fs::read_to_string(ws.path().join("b.txt")).unwrap(), "b\n");
    assert!(!ws.path().join("escaped.txt").exists(), "a command in a copy wrote into the workspace");
    let escaped = events
        .iter()
        .find(|e| e["kind"] == "tool_finished" && e["role"] == "coder" && e["tool"] == "run_command");
    assert_eq!(escaped.map(|e| e["ok"].clone()), Some(json!(false)), "the escape failed in the sandbox");
    let returned =
        events.iter().find(|e| e["kind"] == "delegation_returned" && e["from_role"] == "coder").unwrap();
    assert_eq!(returned["files_changed"], 3, "{returned}");
    let patch = d.client().call("evidence.read", json!({"id": returned["patch_evidence_id"]})).unwrap();
    let text = patch["data"].as_str().unwrap();
    assert!(text.contains("b/gen.txt") && text.contains("new file mode"), "{text}");
    assert!(text.contains("a/old.txt") && text.contains("deleted file mode"), "{text}");
    assert!(text.contains("new mode 100755"), "{text}");

    // Checkpoints: the command's change is recorded in its copy, and the merge is one more change of
    // the workspace, under the delegate call.
    let in_copy = events
        .iter()
        .find(|e| e["kind"] == "files_changed" && e["role"] == "coder" && e["tool"] == "run_command")
        .unwrap();
    assert!(in_copy["working_copy"].as_str().unwrap().starts_with(&copies.path().display().to_string()));
    let delegate_seq = events
        .iter()
        .find(|e| e["kind"] == "tool_called" && e["call_id"] == "d1")
        .and_then(|e| e["seq"].as_u64())
        .unwrap();
    let merge = events
        .iter()
        .find(|e| e["kind"] == "files_changed" && e["tool"] == "delegate" && e["role"] == "coder")
        .unwrap();
    assert_eq!(
        (merge["call_seq"].as_u64(), merge.get("working_copy")),
        (Some(delegate_seq), None),
        "{merge}"
    );
    let paths = |args: &[&str]| -> Vec<String> {
        let out = d.cli(args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let diff: Value = serde_json::from_slice(&out.stdout).unwrap();
        diff["files"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(paths(&["diff", &task, "--json"]), ["b.txt", "gen.txt", "old.txt", "run.sh"]);
    assert_eq!(paths(&["diff", &task, "--role", "coder", "--json"]), ["gen.txt", "old.txt", "run.sh"]);
    // Taking back coder's merge leaves coder#2's change in place.
    let out = d.cli(&["revert", &task, "--call", &delegate_seq.to_string()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!ws.path().join("gen.txt").exists());
    assert_eq!(std::fs::read_to_string(ws.path().join("old.txt")).unwrap(), "old\n");
    let mode = std::fs::metadata(ws.path().join("run.sh")).unwrap().permissions().mode();
    assert_eq!(mode & 0o111, 0, "the mode is back");
    assert_eq!(std::fs::read_to_string(ws.path().join("b.txt")).unwrap(), "b\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_with_three_branches_in_flight_resumes_each_once() {
    // Each branch writes its file, then waits long on its finish: the daemon is killed meanwhile.
    let slow = Duration::from_secs(4);
    let server = ScriptedServer::builder()
        .responder(move |body| match (branch_of(body, &["A", "B", "C"]), results(body)) {
            (Some(part), 0) => sse(vec![tool_call(
                "write_file",
                json!({"path": format!("{part}.txt"), "content": format!("{part}\n")}),
            )]),
            (Some(part), _) => delayed(slow, sse(vec![finish(&format!("{part} done"))])),
            (None, 0) => delegations(&[("d1", "coder", "A"), ("d2", "coder", "B"), ("d3", "coder", "C")]),
            (None, _) => sse(vec![finish("all resumed")]),
        })
        .start()
        .await;
    let ws = tempfile::tempdir().unwrap();
    let copies = tempfile::tempdir().unwrap();
    let mut d = TestDaemon::start(Path::new(BIN), &config(&server.base_url(), copies.path()));
    let task = d.submit("Three parts, interrupted", ws.path());
    // Wait for the three branches' second requests (each has written its file in its copy).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let waiting = server
            .chat_requests()
            .iter()
            .filter(|b| branch_of(b, &["A", "B", "C"]).is_some() && results(b) > 0)
            .count();
        if waiting >= 3 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the branches never got that far: {}", d.serve_log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    d.kill9();
    // Nothing merged yet: the changes live in the copies.
    assert!(!ws.path().join("A.txt").exists());
    d.serve();
    d.client().call("task.resume", json!({"task_id": task})).expect("resume");
    let after = d.wait_for_state_not(&task, "running", Duration::from_secs(60));
    assert_eq!(after["state"], "finished", "{after}\n{}", d.serve_log());
    for part in ["A", "B", "C"] {
        assert_eq!(
            std::fs::read_to_string(ws.path().join(format!("{part}.txt"))).unwrap(),
            format!("{part}\n")
        );
    }
    let events = d.logged_events(&task);
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    let records = d.client().call("log.get", json!({"task_id": task})).unwrap();
    let all: Vec<u64> =
        records["records"].as_array().unwrap().iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert!(all.windows(2).all(|w| w[1] == w[0] + 1), "seq contiguous: {all:?}");
    assert!(!seqs.is_empty());
    let called = events.iter().filter(|e| e["kind"] == "tool_called").count();
    let ended = events.iter().filter(|e| e["kind"] == "tool_finished").count();
    assert_eq!(called, ended, "every tool call ended");
    // Each delegation returned (and its patch merged) once.
    for id in ["d1", "d2", "d3"] {
        let returned =
            events.iter().filter(|e| e["kind"] == "delegation_returned" && e["call_id"] == id).count();
        assert_eq!(returned, 1, "{id}: {events:#?}");
    }
    // No branch ran twice: each wrote once.
    let writes = server
        .chat_requests()
        .iter()
        .filter(|b| branch_of(b, &["A", "B", "C"]).is_some() && results(b) == 0)
        .count();
    assert_eq!(writes, 3, "no branch started over");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_branch_whose_model_fails_is_an_error_result_and_the_others_go_on() {
    let server = ScriptedServer::builder()
        .responder(|body| match branch_of(body, &["A", "B", "C"]) {
            // The reviewer's provider refuses for good: a used-up quota is never resent.
            Some("B") => Step::Fault(Fault::QuotaExhausted),
            Some(part) => delayed(Duration::from_millis(300), sse(vec![finish(&format!("{part} done"))])),
            None if results(body) == 0 => {
                delegations(&[("d1", "coder", "A"), ("d2", "reviewer", "B"), ("d3", "tester", "C")])
            }
            None => sse(vec![finish("two of three done")]),
        })
        .start()
        .await;
    let ws = tempfile::tempdir().unwrap();
    let copies = tempfile::tempdir().unwrap();
    let d = TestDaemon::start(Path::new(BIN), &config(&server.base_url(), copies.path()));
    let task = d.submit("Three parts, one fails", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(60));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}\n{}", d.serve_log());
    let returned: Vec<&Value> = events.iter().filter(|e| e["kind"] == "delegation_returned").collect();
    let failed: Vec<(&str, bool)> =
        returned.iter().map(|e| (e["call_id"].as_str().unwrap(), e["failed"] == true)).collect();
    assert_eq!(failed, [("d1", false), ("d2", true), ("d3", false)]);
    assert!(
        returned[1]["summary"].as_str().unwrap().starts_with("reviewer's turn failed:"),
        "{:#?}",
        returned[1]
    );
    // The lead read it as its call's error result, the others as theirs.
    let last = server.chat_requests().into_iter().last().unwrap();
    let results = tool_results(&last);
    assert_eq!(results.len(), 3);
    assert!(results[1].1.contains("quota"), "{:#?}", results[1]);
    assert_eq!(results[2], ("d3".to_string(), "C done".to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_stops_every_branch_and_kills_their_commands() {
    let marker = "sleep 37.25";
    let server = ScriptedServer::builder()
        .responder(move |body| match (branch_of(body, &["A", "B"]), results(body)) {
            (Some(_), 0) => sse(vec![tool_call("run_command", json!({"command": marker, "timeout_s": 120}))]),
            (Some(part), _) => sse(vec![finish(&format!("{part} done"))]),
            (None, 0) => delegations(&[("d1", "coder", "A"), ("d2", "coder", "B")]),
            (None, _) => sse(vec![finish("done")]),
        })
        .start()
        .await;
    let ws = tempfile::tempdir().unwrap();
    let copies = tempfile::tempdir().unwrap();
    let d = TestDaemon::start(Path::new(BIN), &config(&server.base_url(), copies.path()));
    let task = d.submit("Two long commands", ws.path());
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while agentd_test_support::browser::processes_naming(marker).len() < 2 {
        assert!(std::time::Instant::now() < deadline, "both commands never ran: {}", d.serve_log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let asked = std::time::Instant::now();
    d.client().call("task.cancel", json!({"task_id": task})).expect("cancel");
    let after = d.wait_for_state_not(&task, "running", Duration::from_secs(20));
    assert_eq!(after["state"], "cancelled", "{after}");
    assert!(asked.elapsed() < Duration::from_secs(10), "the cancel took {:?}", asked.elapsed());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !agentd_test_support::browser::processes_naming(marker).is_empty() {
        assert!(std::time::Instant::now() < deadline, "a branch's command outlived the cancel");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let events = d.logged_events(&task);
    let called = events.iter().filter(|e| e["kind"] == "tool_called").count();
    let ended = events.iter().filter(|e| e["kind"] == "tool_finished").count();
    assert_eq!(called, ended, "every call ended: {events:#?}");
    // A cancelled task's copies are removed.
    assert_eq!(std::fs::read_dir(copies.path()).map(|d| d.count()).unwrap_or(0), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_branch_that_overflows_its_window_compacts_without_touching_the_others() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let reads = Arc::new(AtomicUsize::new(0));
    let (reads_in, window) = (reads.clone(), 16_384);
    let server = ScriptedServer::builder()
        .max_model_len(Some(window))
        .window(window)
        .responder(move |body| {
            if is_summary_request(body) {
                return sse_with_usage(vec![text("Summary: the data files were read one by one.")], 900, 20);
            }
            let first_user = body["messages"].as_array().and_then(|m| m.iter().find(|m| m["role"] == "user"));
            let opening = first_user.map(|m| m["content"].to_string()).unwrap_or_default();
            if opening.contains("Part A") {
                // The coder reads 30 files of ~1,500 tokens: past its window, it must compact.
                let n = reads_in.fetch_add(1, Ordering::SeqCst);
                return if n < 30 {
                    sse(vec![tool_call("read_file", json!({"path": format!("data/file_{}.txt", n % 10)}))])
                } else {
                    sse(vec![finish("read them all")])
                };
            }
            if opening.contains("Part B") {
                // The reviewer reads two files, slowly, while the coder compacts.
                return match results(body) {
                    n if n < 2 => delayed(
                        Duration::from_millis(400),
                        sse(vec![tool_call("read_file", json!({"path": format!("data/file_{n}.txt")}))]),
                    ),
                    _ => sse(vec![finish("reviewed two")]),
                };
            }
            match results(body) {
                0 => delegations(&[("d1", "coder", "A"), ("d2", "reviewer", "B")]),
                _ => sse(vec![finish("done")]),
            }
        })
        .start()
        .await;
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(ws.path().join("data")).unwrap();
    for i in 0..10 {
        let text: String =
            (0..200).map(|n| format!("record {i}-{n}: value {}\n", (n * 7919 + i) % 10007)).collect();
        std::fs::write(ws.path().join(format!("data/file_{i}.txt")), text).unwrap();
    }
    let copies = tempfile::tempdir().unwrap();
    let d = TestDaemon::start(Path::new(BIN), &config(&server.base_url(), copies.path()));
    let task = d.submit("Read, and review", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(120));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{}", d.serve_log());
    assert_eq!(server.refused(), 0, "nothing over the window");
    let compacted: Vec<&str> = events
        .iter()
        .filter(|e| e["kind"] == "compaction_finished")
        .map(|e| e["role"].as_str().unwrap())
        .collect();
    assert!(!compacted.is_empty() && compacted.iter().all(|r| *r == "coder"), "{compacted:?}");
    // The reviewer's history was never rewritten: no checkpoint of its own, and each of its requests
    // carries the one before it whole.
    let log = d.client().call("log.get", json!({"task_id": task})).unwrap();
    let reviewer_checkpoints = log["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["type"] == "checkpoint" && r["role"] == "reviewer")
        .count();
    assert_eq!(reviewer_checkpoints, 0);
    let reviewer: Vec<Value> = server
        .chat_requests()
        .into_iter()
        .filter(|b| !is_summary_request(b) && opening(b).starts_with("Part B"))
        .map(|b| b["messages"].clone())
        .collect();
    assert_eq!(reviewer.len(), 3, "{reviewer:#?}");
    for pair in reviewer.windows(2) {
        let (before, after) = (pair[0].as_array().unwrap(), pair[1].as_array().unwrap());
        assert_eq!(&after[..before.len()], &before[..], "the reviewer's request grew by appending only");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_working_copy_that_cannot_be_made_is_an_error_result_never_the_shared_workspace() {
    let fs = match agentd_test_support::tmpfs::Tmpfs::mount("1m") {
        Ok(fs) => fs,
        Err(why) => {
            eprintln!("SKIPPED: a_working_copy_that_cannot_be_made_is_an_error_result_never_the_shared_workspace: {why}");
            return;
        }
    };
    let server = two_writers(("a.txt", "from A\n"), ("b.txt", "from B\n")).await;
    let ws = tempfile::tempdir().unwrap();
    // 3 MB of workspace cannot be copied into 1 MB.
    std::fs::write(ws.path().join("big.bin"), vec![7u8; 3 << 20]).unwrap();
    let d = TestDaemon::start(Path::new(BIN), &config(&server.base_url(), fs.path()));
    let task = d.submit("Write two files", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(60));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}\n{}", d.serve_log());
    // Neither writer ran in the shared workspace instead: nothing was written there.
    assert!(!ws.path().join("a.txt").exists() && !ws.path().join("b.txt").exists());
    assert!(!events.iter().any(|e| e["kind"] == "delegated"), "no branch started");
    let last = server.chat_requests().into_iter().last().unwrap();
    let results = tool_results(&last);
    assert_eq!(results.len(), 2);
    for (_, r) in &results {
        assert!(r.contains("not started") && r.contains("working copy could not be made"), "{r}");
    }
    // Nothing half-made is left in the copies' folder.
    let left: Vec<_> = walk(fs.path());
    assert!(left.iter().all(|p| !p.is_file()), "{left:?}");
}

/// Every path beneath `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        }
        out.push(path);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_draws_the_team_as_a_tree_with_each_delegations_patch() {
    use agentd_test_support::browser::{skip_or_fail, Browser};
    let test = "the_dashboard_draws_the_team_as_a_tree_with_each_delegations_patch";
    let b = match Browser::start().await {
        Ok(Some(b)) => b,
        Ok(None) => return skip_or_fail(test),
        Err(e) => panic!("Chromium is installed but did not start: {e}"),
    };
    let server =
        two_writers(("shared.txt", "one\nTWO by A\nthree\n"), ("shared.txt", "one\nTWO by B\nthree\n")).await;
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("shared.txt"), "one\ntwo\nthree\n").unwrap();
    let copies = tempfile::tempdir().unwrap();
    let config = format!("{}[http]\nlisten = \"127.0.0.1:0\"\n", config(&server.base_url(), copies.path()));
    let d = TestDaemon::start(Path::new(BIN), &config);
    let task = d.submit("Both change line two", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(60));
    assert_eq!(events.last().unwrap()["kind"], "task_finished");
    let out = d.cli(&["dashboard"]);
    b.goto(String::from_utf8(out.stdout).unwrap().trim()).await;
    b.wait_for("window.agentd && window.agentd.ready", Duration::from_secs(60)).await;
    b.goto(&format!("{}/#/task/{task}", d.http_base())).await;
    b.wait_for("document.querySelectorAll('#team li.branch').length === 2", Duration::from_secs(60)).await;
    let tree = b.text("#team").await;
    assert!(tree.starts_with("lead"), "{tree}");
    assert!(
        tree.contains("coder returned (working copy): Part A")
            && tree.contains("coder#2 returned (working copy): Part B"),
        "{tree}"
    );
    assert!(tree.contains("conflict: shared.txt (both_changed) at line(s) 2"), "{tree}");
    let links =
        b.js("return document.querySelectorAll('#team a[href^=\"#/evidence/\"]').length", json!([])).await;
    assert_eq!(links, json!(3), "two patches and the second's version of shared.txt");
    // Each delegation that changed files shows what it did, from the checkpoints; so does each
    // `files_changed` of the event list.
    b.js("document.querySelector('#team li.branch [data-diff]').click(); return true", json!([])).await;
    let shown = "[...document.querySelectorAll('#team pre.diff')].some(p => !p.hidden && p.textContent.includes('+TWO by A'))";
    b.wait_for(shown, Duration::from_secs(30)).await;
    let listed = "document.querySelector('#events [data-kind=files_changed] [data-diff]') !== null";
    b.wait_for(listed, Duration::from_secs(30)).await;
}
