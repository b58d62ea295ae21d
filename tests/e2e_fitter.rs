//! End-to-end: the fitter at small windows. The scripted server counts every request itself and
//! refuses one over its window, so "no request over the window" is checked by the other side.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use agentd_test_support::daemon::{team_config, TestDaemon};
use agentd_test_support::*;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_agentd");
const OBJECTIVE: &str = "Read every data file and run ./check.sh";
const FAILING_LINE: &str = "FAILED: test adds_two_numbers (expected 5, got -1)";

/// A workspace with ten ~6 KB data files and a check script that fails.
fn workspace() -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(ws.path().join("data")).unwrap();
    for i in 0..10 {
        let mut text = String::new();
        let mut n = 0u64;
        while text.len() < 6_000 {
            n += 1;
            text.push_str(&format!(
                "record {i}-{n}: value {} flag {}\n",
                (n * 7919 + i) % 10007,
                n.is_multiple_of(3)
            ));
        }
        std::fs::write(ws.path().join(format!("data/file_{i}.txt")), text).unwrap();
    }
    std::fs::write(ws.path().join("check.sh"), format!("#!/bin/sh\necho '{FAILING_LINE}'\nexit 1\n"))
        .unwrap();
    std::process::Command::new("chmod").arg("+x").arg(ws.path().join("check.sh")).status().unwrap();
    ws
}

/// The team's script as a function of the request: the lead delegates once and finishes when the
/// coder returns; the coder runs the failing check, reads `reads` files, then finishes; the
/// summariser answers with a short summary.
fn responder(reads: usize, coder_steps: Arc<AtomicUsize>) -> impl Fn(&Value) -> Step + Send + Sync + 'static {
    move |body: &Value| {
        if is_summary_request(body) {
            return sse_with_usage(
                vec![text("Summary: data files were read one by one; nothing unusual found in them.")],
                900,
                20,
            );
        }
        if is_lead_request(body) {
            let returned = body["messages"].as_array().unwrap().iter().any(|m| m["role"] == "tool");
            return if returned {
                sse(vec![finish("the coder read every file")])
            } else {
                sse(vec![delegate("coder", OBJECTIVE)])
            };
        }
        let n = coder_steps.fetch_add(1, Ordering::SeqCst);
        if n == 0 {
            sse(vec![tool_call("run_command", json!({"command": "./check.sh"}))])
        } else if n <= reads {
            sse(vec![
                text(&format!("reading file {}", (n - 1) % 10)),
                tool_call("read_file", json!({"path": format!("data/file_{}.txt", (n - 1) % 10)})),
            ])
        } else {
            sse(vec![finish(&format!("read {reads} files; ./check.sh still fails"))])
        }
    }
}

fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["kind"] == kind).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_tool_loop_never_sends_a_request_over_the_window() {
    let steps = Arc::new(AtomicUsize::new(0));
    let server = ScriptedServer::builder()
        .max_model_len(Some(16_384))
        .window(16_384)
        .responder(responder(40, steps.clone()))
        .start()
        .await;
    let ws = workspace();
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let task = d.submit("Have the coder read the data", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(120));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{}", d.serve_log());

    // The other side agrees: nothing was refused, nothing was over the window.
    assert_eq!(server.refused(), 0);
    let counted = server.counted();
    assert!(counted.iter().all(|&t| t <= 16_384), "{counted:?}");
    let finished = of_kind(&events, "compaction_finished");
    assert!(!finished.is_empty(), "40 reads of ~1,300 tokens at a 16K window must compact");
    // Each role compacts on its own: the coder's reads fill its history, the lead's stays small.
    assert!(finished.iter().all(|f| f["role"] == "coder"), "{finished:#?}");
    for f in &finished {
        assert!(f["tokens_after"].as_u64().unwrap() <= 8_192, "lands at the destination: {f}");
        assert!(f["tokens_before"].as_u64().unwrap() > 13_107, "only past the trigger: {f}");
    }
    // Our own measurement never exceeds the window either, and our count is never below the server's.
    for e in of_kind(&events, "request_sent") {
        assert!(e["tokens"].as_u64().unwrap() <= 16_384, "{e}");
    }

    // The objective and the failing check line are in every coder request after they appear.
    let reqs = server.chat_requests();
    let coder: Vec<&Value> = reqs.iter().filter(|b| is_coder_request(b)).collect();
    assert_eq!(coder.len(), 42);
    let mut failing_seen = false;
    for (i, body) in coder.iter().enumerate() {
        let text = body["messages"].to_string();
        assert!(text.contains(OBJECTIVE), "coder request {i} lost the objective");
        if failing_seen {
            assert!(
                text.contains(FAILING_LINE),
                "coder request {i} lost the failing check: {}",
                serde_json::to_string_pretty(&body["messages"])
                    .unwrap()
                    .chars()
                    .take(6000)
                    .collect::<String>()
            );
        }
        failing_seen |= text.contains(FAILING_LINE);
    }
    assert!(failing_seen);
    // The first summary of a compaction continues the request itself (same system, tools and
    // messages, tools forbidden), so a provider's prompt cache serves its prefix.
    let in_place: Vec<&Value> = reqs.iter().filter(|b| b["tool_choice"] == "none").collect();
    assert!(!in_place.is_empty(), "no in-place summary request");
    for summary_req in &in_place {
        let msgs = summary_req["messages"].as_array().unwrap();
        let prefix = &msgs[..msgs.len() - 1];
        // The request that crossed the trigger was never sent; the one before it was, and the
        // summary request is exactly its messages (the part a prompt cache holds) plus the instruction.
        let continued = reqs.iter().any(|b| {
            b["tool_choice"] != "none" && b["messages"].as_array().is_some_and(|m| m[..] == *prefix)
        });
        assert!(
            continued,
            "an in-place summary request is the last sent request's messages + the instruction"
        );
        assert!(msgs.last().unwrap()["content"].as_str().unwrap().starts_with("[compaction]"));
        assert!(summary_req["tools"].as_array().is_some_and(|t| !t.is_empty()));
    }
    // Summaries were folded in batches that fit, and what left the request is archived and readable.
    let archive = finished[0]["archive_id"].as_str().unwrap();
    let meta = d.client().call("evidence.get", json!({"id": archive})).unwrap();
    assert!(meta["bytes"].as_u64().unwrap() > 1_000);
    let page = d
        .client()
        .call("evidence.read", json!({"id": archive, "unit": "lines", "offset": 0, "limit": 3}))
        .unwrap();
    assert!(page["data"].as_str().unwrap().contains(OBJECTIVE), "{page}");
    let checkpoint_req = coder.iter().find(|b| b["messages"].to_string().contains("[checkpoint]")).unwrap();
    assert!(checkpoint_req["messages"].to_string().contains(archive));

    // One measurement, one owner: the gauge shows what the last request_sent said.
    let last_sent =
        of_kind(&events, "request_sent").into_iter().rfind(|e| e["role"] == "coder").unwrap().clone();
    let gauge = d.client().call("context.get", json!({"task_id": task, "role": "coder"})).unwrap();
    assert_eq!(gauge["tokens"], last_sent["tokens"]);
    assert_eq!(gauge["window"], 16_384);
    assert_eq!(gauge["trigger_tokens"], last_sent["trigger_tokens"]);
    let cats = &gauge["categories"];
    let sum: u64 =
        ["system", "tools", "objective", "checkpoint", "observations", "files", "messages", "thinking"]
            .iter()
            .map(|k| cats[k].as_u64().unwrap())
            .sum();
    assert!(
        sum + 3 >= gauge["tokens"].as_u64().unwrap() && sum <= gauge["tokens"].as_u64().unwrap(),
        "{gauge}"
    );
    let out = d.cli(&["context", &task, "--role", "coder"]);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("16384") && shown.contains("checkpoint"), "{shown}");
    let total: u64 = counted.iter().sum();
    eprintln!(
        "long run: {} requests, {} tokens sent in all (server's count), {} compactions, largest request {}",
        counted.len(),
        total,
        finished.len(),
        counted.iter().max().unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undeclared_window_is_learned_on_the_first_refusal_and_never_refused_again() {
    let steps = Arc::new(AtomicUsize::new(0));
    let server = ScriptedServer::builder().window(16_384).responder(responder(30, steps)).start().await;
    let ws = workspace();
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let task = d.submit("Have the coder read the data", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(120));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{}", d.serve_log());
    assert_eq!(server.refused(), 1, "refused once, then never again");
    let learned = of_kind(&events, "window_learned");
    assert_eq!(learned.len(), 1, "{learned:?}");
    assert_eq!(learned[0]["new_window"], 16_384);
    assert_eq!(learned[0]["source"], "error");
    // The refused request was compacted and resent.
    let after_learning = events.iter().skip_while(|e| e["kind"] != "window_learned").collect::<Vec<_>>();
    assert!(after_learning.iter().any(|e| e["kind"] == "compaction_finished"));
    // Persisted: a restarted daemon still knows it.
    let out = d.cli(&["models", "probe", "--role", "coder"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("16384"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_truncation_is_detected_from_usage() {
    let steps = Arc::new(AtomicUsize::new(0));
    let server =
        ScriptedServer::builder().silent_truncation_at(6_000).responder(responder(12, steps)).start().await;
    let ws = workspace();
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let task = d.submit("Have the coder read the data", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(120));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{}", d.serve_log());
    let learned = of_kind(&events, "window_learned");
    assert_eq!(learned.len(), 1, "{learned:?}");
    assert_eq!(learned[0]["source"], "usage");
    assert_eq!(learned[0]["old_window"], 256_000);
    let new = learned[0]["new_window"].as_u64().unwrap();
    assert!((6_000..6_100).contains(&new), "{new}");
    // After the clamp every request fits what the server really keeps.
    let seqs: Vec<u64> = learned.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    for e in of_kind(&events, "request_sent") {
        if e["seq"].as_u64().unwrap() > seqs[0] {
            assert!(e["tokens"].as_u64().unwrap() <= new, "{e}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_tiktoken_does_not_know_is_counted_by_the_servers_endpoint_or_marked_estimated() {
    for (endpoint, source, estimated) in [(true, "endpoint", false), (false, "estimate", true)] {
        let server = ScriptedServer::builder()
            .model("qwen3-coder")
            .tokenize_endpoint(endpoint)
            .script(vec![sse(vec![tool_call("list_dir", json!({"path": "."}))]), sse(vec![finish("done")])])
            .start()
            .await;
        let ws = tempfile::tempdir().unwrap();
        let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "qwen3-coder", ""));
        let task = d.submit("List the workspace", ws.path());
        let events = d.events_until_end(&task, Duration::from_secs(20));
        assert_eq!(events.last().unwrap()["kind"], "task_finished");
        for e in of_kind(&events, "request_sent") {
            assert_eq!(e["estimated"], estimated, "{e}");
        }
        let gauge = d.client().call("context.get", json!({"task_id": task, "role": "lead"})).unwrap();
        assert_eq!(gauge["count_source"], source);
        assert_eq!(gauge["estimated"], estimated);
        let shown = String::from_utf8_lossy(&d.cli(&["context", &task]).stdout).to_string();
        assert_eq!(shown.contains('~'), estimated, "{shown}");
        if endpoint {
            // Measured by the server's own tokenizer: within framing of its count of the request.
            let ours = of_kind(&events, "request_sent")[0]["tokens"].as_u64().unwrap();
            let theirs = server.counted()[0];
            assert!(ours >= theirs && ours <= theirs + theirs / 5, "ours {ours}, server {theirs}");
        }
    }
}
