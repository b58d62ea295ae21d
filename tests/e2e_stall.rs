//! End-to-end: a teammate that goes in circles — the same failing call, a loop of two reads, a
//! different missing file each time — is told once and then stopped, and its caller reads why:
//! never a silent loop, never a silent kill.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use agentd_test_support::daemon::{team_config, TestDaemon};
use agentd_test_support::*;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_agentd");

/// The coder runs the same failing check, whatever it is told, up to six times.
async fn circling_model() -> ScriptedServer {
    ScriptedServer::builder()
        .responder(|body: &Value| {
            let (offers_delegate, results) = lead_and_results(body);
            match (offers_delegate, results) {
                (true, 0) => sse(vec![delegate("coder", "Make ./check.sh pass")]),
                (true, _) => sse(vec![finish("the coder went in circles; left for a person")]),
                // Told: it takes a second to answer (long enough for `status` to be asked), and does it again.
                (false, n) if n < 6 && body["messages"].to_string().contains("going in circles") => delayed(
                    Duration::from_secs(1),
                    sse(vec![tool_call("run_command", json!({"command": "./check.sh"}))]),
                ),
                (false, n) if n < 6 => sse(vec![tool_call("run_command", json!({"command": "./check.sh"}))]),
                (false, _) => sse(vec![finish("gave up")]),
            }
        })
        .start()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coder_repeating_a_failing_call_is_told_once_then_stopped_and_the_lead_reads_why() {
    let server = circling_model().await;
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("check.sh"), "#!/bin/sh\necho 'FAILED: adds_two_numbers'\nexit 1\n")
        .unwrap();
    std::process::Command::new("chmod").arg("+x").arg(ws.path().join("check.sh")).status().unwrap();
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let task = d.submit("Make the check pass", ws.path());
    // While it is told, `status` says so.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !d.logged_events(&task).iter().any(|e| e["kind"] == "agent_stalled") {
        assert!(std::time::Instant::now() < deadline, "never stalled: {}", d.serve_log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let status = d.client().call("task.status", json!({"task_id": task})).unwrap();
    assert_eq!(status["stalled"][0]["role"], "coder", "{status}");
    let shown = String::from_utf8_lossy(&d.cli(&["status", &task]).stdout).to_string();
    assert!(shown.contains("stalled    coder: it made the same call 3 times"), "{shown}");
    let events = d.events_until_end(&task, Duration::from_secs(60));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}\n{}", d.serve_log());

    // Stalled after the third identical failing call, said once.
    let stalled: Vec<&Value> = events.iter().filter(|e| e["kind"] == "agent_stalled").collect();
    assert_eq!(stalled.len(), 1, "{events:#?}");
    assert_eq!((stalled[0]["role"].as_str(), stalled[0]["calls"].as_u64()), (Some("coder"), Some(3)));
    let commands_before = events
        .iter()
        .take_while(|e| e["kind"] != "agent_stalled")
        .filter(|e| e["kind"] == "tool_finished" && e["tool"] == "run_command")
        .count();
    assert_eq!(commands_before, 3);
    // Its next request told it, once; then it did it again and its turn ended there.
    let coder: Vec<Value> = server
        .chat_requests()
        .into_iter()
        .filter(|b| !b["tools"].as_array().into_iter().flatten().any(|t| t["function"]["name"] == "delegate"))
        .collect();
    assert_eq!(coder.len(), 4, "three calls, the told request, and no more");
    let told = |b: &Value| b["messages"].to_string().matches("going in circles").count();
    assert_eq!((told(&coder[2]), told(&coder[3])), (0, 1));
    let runs = events.iter().filter(|e| e["kind"] == "tool_called" && e["tool"] == "run_command").count();
    assert_eq!(runs, 4, "stopped after the call it was told about");
    // The lead read why, as the delegation's error result, and finished.
    let lead_last = server.chat_requests().into_iter().last().unwrap();
    let result =
        lead_last["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool").unwrap().clone();
    let text = result["content"].as_str().unwrap();
    assert!(
        text.contains("coder is going in circles and was stopped") && text.contains("./check.sh"),
        "{text}"
    );
    let returned = events.iter().find(|e| e["kind"] == "delegation_returned").unwrap();
    assert_eq!(returned["failed"], true, "{returned}");
    // `watch` says it in words.
    let log = String::from_utf8_lossy(&d.cli(&["log", &task]).stdout).to_string();
    assert!(log.contains("stalled: it made the same call 3 times"), "{log}");
}

/// The lead delegates once and finishes when the delegation returns; the coder reads
/// `path_of(n)` at its `n`th answer, up to 150 reads, whatever it is told.
async fn reading_coder(path_of: fn(usize) -> String) -> ScriptedServer {
    ScriptedServer::builder()
        .responder(move |body: &Value| match lead_and_results(body) {
            (true, 0) => sse(vec![delegate("coder", "Find the notes")]),
            (true, _) => sse(vec![finish("the coder got nowhere; left for a person")]),
            (false, n) if n < 150 => sse(vec![tool_call("read_file", json!({"path": path_of(n)}))]),
            (false, _) => sse(vec![finish("gave up")]),
        })
        .start()
        .await
}

/// The coder's reads before its `agent_stalled`, in all, and the event itself.
fn reads_and_stall(events: &[Value]) -> (usize, usize, Value) {
    let reads = |e: &&Value| e["kind"] == "tool_finished" && e["tool"] == "read_file";
    let before = events.iter().take_while(|e| e["kind"] != "agent_stalled").filter(reads).count();
    let all = events.iter().filter(reads).count();
    let stalled: Vec<&Value> = events.iter().filter(|e| e["kind"] == "agent_stalled").collect();
    assert_eq!(stalled.len(), 1, "said once: {events:#?}");
    (before, all, stalled[0].clone())
}

/// The reproduction: a teammate reading a different missing file each time made 150 failing
/// calls and was never `agent_stalled` (each error read as something new). A failed call is no
/// progress: after `idle_requests` (30) answers it is told, and at the next its turn ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coder_reading_a_different_missing_file_each_time_is_stalled_then_stopped() {
    let server = reading_coder(|n| format!("notes/missing_{n}.txt")).await;
    let ws = tempfile::tempdir().unwrap();
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let task = d.submit("Find the notes", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(120));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}\n{}", d.serve_log());
    let (before, all, stalled) = reads_and_stall(&events);
    assert_eq!((before, all), (30, 31), "told after 30 failing reads, stopped at the 31st");
    assert_eq!((stalled["role"].as_str(), stalled["calls"].as_u64()), (Some("coder"), Some(30)));
    let why = stalled["why"].as_str().unwrap();
    assert!(why.starts_with("answered 30 times in a row without getting anywhere"), "{why}");
    assert!(events
        .iter()
        .filter(|e| e["kind"] == "tool_finished" && e["tool"] == "read_file")
        .all(|e| e["ok"] == false));
    let returned = events.iter().find(|e| e["kind"] == "delegation_returned").unwrap();
    assert_eq!(returned["failed"], true, "{returned}");
    assert!(returned["summary"].as_str().unwrap().contains("coder is going in circles"), "{returned}");
}

/// The reproduction: `A,B,A,B…` (two files read in turn, each reading the same) was caught
/// only after 33 calls. A loop is caught once it has gone round `repeats` (3) times: at the sixth
/// call, and the seventh ends the turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coder_reading_two_files_in_turn_is_stalled_at_the_sixth_call() {
    let server = reading_coder(|n| if n % 2 == 0 { "a.txt".into() } else { "b.txt".into() }).await;
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a.txt"), "alpha\n").unwrap();
    std::fs::write(ws.path().join("b.txt"), "beta\n").unwrap();
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let task = d.submit("Find the notes", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(60));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}\n{}", d.serve_log());
    let (before, all, stalled) = reads_and_stall(&events);
    assert_eq!((before, all), (6, 7), "told at the sixth read, stopped at the seventh");
    assert_eq!((stalled["role"].as_str(), stalled["calls"].as_u64()), (Some("coder"), Some(6)));
    let why = stalled["why"].as_str().unwrap();
    assert!(why.contains("went round the same 2 calls 3 times"), "{why}");
    assert!(why.contains("a.txt") && why.contains("b.txt"), "{why}");
    let returned = events.iter().find(|e| e["kind"] == "delegation_returned").unwrap();
    assert_eq!(returned["failed"], true, "{returned}");
}

/// The lead delegates with the call's own budget (`budget_tokens`) or, when `budget` is `None`, under
/// the role's configured deadline; the coder keeps working (a new command each time) until it is
/// stopped; the lead then finishes.
async fn endless_coder_model(budget: Option<u64>, delay: Duration) -> ScriptedServer {
    ScriptedServer::builder()
        .responder(move |body: &Value| {
            let (lead, results) = lead_and_results(body);
            match (lead, results) {
                (true, 0) => {
                    let mut args = json!({"to": "coder", "objective": "Keep improving the notes"});
                    if let Some(budget) = budget {
                        args["budget_tokens"] = json!(budget);
                    }
                    sse(vec![tool_call("delegate", args)])
                }
                (true, _) => sse(vec![finish("the coder ran out of its allowance; enough for now")]),
                (false, n) => delayed(
                    delay,
                    sse(vec![
                        text(&format!("step {n}: appending a line")),
                        tool_call("run_command", json!({"command": format!("echo line {n} >> notes.txt")})),
                    ]),
                ),
            }
        })
        .start()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delegation_budget_reached_mid_branch_ends_it_with_what_it_did_and_the_task_goes_on() {
    let server = endless_coder_model(Some(6_000), Duration::ZERO).await;
    let ws = tempfile::tempdir().unwrap();
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let task = d.submit("Improve the notes", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(60));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}\n{}", d.serve_log());
    let delegated = events.iter().find(|e| e["kind"] == "delegated").unwrap();
    assert_eq!(delegated["limit_tokens"], 6_000, "{delegated}");
    let returned = events.iter().find(|e| e["kind"] == "delegation_returned").unwrap();
    assert_eq!(returned["failed"], true, "{returned}");
    let summary = returned["summary"].as_str().unwrap();
    assert!(summary.contains("delegation budget of 6000 tokens was reached"), "{summary}");
    assert!(summary.contains("Its last words: step") && summary.contains("run_command"), "{summary}");
    // It did some work, and no request of it passed its budget.
    let spent: u64 = events
        .iter()
        .filter(|e| e["kind"] == "response_received" && e["role"] == "coder")
        .map(|e| {
            let usage = &e["usage"];
            usage["prompt_tokens"].as_u64().unwrap_or(0) + usage["completion_tokens"].as_u64().unwrap_or(0)
        })
        .sum();
    let runs = events.iter().filter(|e| e["kind"] == "tool_called" && e["tool"] == "run_command").count();
    assert!(runs >= 1 && spent <= 6_000, "{runs} commands, {spent} tokens");
    assert_eq!(std::fs::read_to_string(ws.path().join("notes.txt")).unwrap().lines().count(), runs);
    // The lead read it as the call's error result, and went on to finish.
    let lead_last = server.chat_requests().into_iter().last().unwrap();
    let text = lead_last["messages"].to_string();
    assert!(text.contains("coder stopped before finishing"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delegation_deadline_from_the_config_ends_it_and_the_lead_reads_what_it_did() {
    let server = endless_coder_model(None, Duration::from_millis(300)).await;
    let ws = tempfile::tempdir().unwrap();
    let config = team_config(&server.base_url(), "gpt-4o", "").replacen(
        "[team.coder]\n",
        "[team.coder]\ndelegation_deadline = \"1s\"\n",
        1,
    );
    assert!(config.contains("delegation_deadline"), "{config}");
    let d = TestDaemon::start(Path::new(BIN), &config);
    let task = d.submit("Improve the notes", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(60));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}\n{}", d.serve_log());
    let delegated = events.iter().find(|e| e["kind"] == "delegated").unwrap();
    assert!(delegated["deadline"].is_string(), "{delegated}");
    let returned = events.iter().find(|e| e["kind"] == "delegation_returned").unwrap();
    assert_eq!(returned["failed"], true, "{returned}");
    assert!(returned["summary"].as_str().unwrap().contains("delegation deadline"), "{returned}");
}
