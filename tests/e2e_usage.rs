//! End-to-end: absurd usage reports are refused, never believed (issue 44, item 4). The real
//! binary against the scripted server, each reproduction as the issue wrote it: a coder answer
//! reporting 5,000,000 prompt tokens for a small request in a 131,072-token window; the Responses
//! API's `input_tokens` and `output_tokens` of 2^64 − 1; `cached_tokens` fifty times the prompt; a
//! `NaN` in the usage; and a task budget over answers whose reports are refused. Each time the answer
//! is kept, `usage_refused` says what was refused and why, nothing learns from the report, and what
//! was sent is counted instead.

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
const WINDOW: u64 = 131_072;
const TWO_TO_THE_64_LESS_ONE: &str = "18446744073709551615";

fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["kind"] == kind).collect()
}

/// The event just before `e` in `events` of the same role and `kind`.
fn last_before<'a>(events: &'a [Value], e: &Value, kind: &str) -> &'a Value {
    let seq = e["seq"].as_u64().unwrap();
    events
        .iter()
        .rfind(|x| x["kind"] == kind && x["role"] == e["role"] && x["seq"].as_u64().unwrap() < seq)
        .unwrap_or_else(|| panic!("no {kind} before {e}"))
}

/// A refused report's `response_received` counts what was sent: our count of the request.
fn counts_what_was_sent(events: &[Value], refused: &Value) {
    let sent = last_before(events, refused, "request_sent")["tokens"].as_u64().unwrap();
    assert_eq!(refused["sent_tokens"], sent, "{refused}");
    assert_eq!(refused["counted"]["prompt_tokens"], sent, "{refused}");
    let seq = refused["seq"].as_u64().unwrap();
    let answered =
        events.iter().find(|e| e["kind"] == "response_received" && e["seq"].as_u64().unwrap() > seq).unwrap();
    assert_eq!(answered["role"], refused["role"]);
    assert_eq!(answered["usage"], refused["counted"], "{answered}");
}

fn task_status(d: &TestDaemon, task: &str) -> Value {
    d.client().call("task.status", json!({"task_id": task})).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_million_prompt_tokens_for_a_small_request_are_refused_and_the_next_count_is_not_poisoned() {
    let coder_steps = Arc::new(AtomicUsize::new(0));
    let steps = coder_steps.clone();
    let server = ScriptedServer::builder()
        .max_model_len(Some(WINDOW))
        .window(WINDOW)
        .report_usage(true)
        .responder(move |body: &Value| {
            if is_lead_request(body) {
                let returned = body["messages"].as_array().unwrap().iter().any(|m| m["role"] == "tool");
                return if returned {
                    sse(vec![finish("the coder listed it")])
                } else {
                    sse(vec![delegate("coder", "List the workspace")])
                };
            }
            match steps.fetch_add(1, Ordering::SeqCst) {
                0 => sse_with_raw_usage(
                    vec![tool_call("list_dir", json!({"path": "."}))],
                    r#"{"prompt_tokens": 5000000, "completion_tokens": 12, "total_tokens": 5000012}"#,
                ),
                _ => sse(vec![finish("listed: nothing much")]),
            }
        })
        .start()
        .await;
    let ws = tempfile::tempdir().unwrap();
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let task = d.submit("Have the coder list the workspace", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(60));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{}", d.serve_log());

    let refused = of_kind(&events, "usage_refused");
    assert_eq!(refused.len(), 1, "{refused:#?}");
    let refused = refused[0];
    assert_eq!(refused["role"], "coder");
    assert_eq!(refused["reported"]["prompt"], json!({"key": "prompt_tokens", "said": "5000000"}));
    let reason = refused["reasons"][0].as_str().unwrap();
    assert!(reason.contains("5000000") && reason.contains("131072-token window"), "{reason}");
    counts_what_was_sent(&events, refused);

    // The coder's next request is counted from what it sends, not from 5,000,000: within a few
    // percent of the server's own count, far inside the window.
    let coder_sent: Vec<u64> = of_kind(&events, "request_sent")
        .iter()
        .filter(|e| e["role"] == "coder")
        .map(|e| e["tokens"].as_u64().unwrap())
        .collect();
    assert_eq!(coder_sent.len(), 2, "{coder_sent:?}");
    let coder_counted: Vec<u64> = server
        .chat_requests()
        .iter()
        .zip(server.counted())
        .filter(|(body, _)| is_coder_request(body))
        .map(|(_, n)| n)
        .collect();
    let (ours, theirs) = (coder_sent[1], coder_counted[1]);
    assert!(ours < 10_000 && ours.abs_diff(theirs) <= theirs / 10, "ours {ours}, server {theirs}");
    assert!(of_kind(&events, "window_learned").is_empty(), "no window learned from it");
    // The task's totals count what was sent.
    let spent = &task_status(&d, &task)["spent"];
    assert!(spent["prompt_tokens"].as_u64().unwrap() < 50_000, "{spent}");
    // Said aloud where a person watches.
    let log = String::from_utf8_lossy(&d.cli(&["log", &task]).stdout).to_string();
    assert!(log.contains("usage report refused: `prompt_tokens` 5000000 is above"), "{log}");
}

/// The team's config with its provider speaking the Responses API.
fn responses_config(base_url: &str) -> String {
    team_config(base_url, "gpt-5", "").replacen("kind = \"openai\"", "kind = \"openai-responses\"", 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_usage_of_two_to_the_sixty_four_less_one_wraps_no_total_and_leaves_the_gauge_sane() {
    let max = TWO_TO_THE_64_LESS_ONE;
    let server = ScriptedServer::builder()
        .report_usage(true)
        .script(vec![
            sse(vec![tool_call("list_dir", json!({"path": "."}))]),
            sse_with_raw_usage(
                vec![tool_call("list_dir", json!({"path": "."}))],
                &format!(r#"{{"input_tokens": {max}, "input_tokens_details": {{"cached_tokens": 0}}, "output_tokens": {max}, "total_tokens": {max}}}"#),
            ),
            sse(vec![finish("listed twice")]),
        ])
        .start()
        .await;
    let ws = tempfile::tempdir().unwrap();
    let d = TestDaemon::start(Path::new(BIN), &responses_config(&server.base_url()));
    let task = d.submit("List the workspace twice", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(60));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{}", d.serve_log());

    let refused = of_kind(&events, "usage_refused");
    assert_eq!(refused.len(), 1, "{refused:#?}");
    assert_eq!(refused[0]["reported"]["prompt"]["said"], max);
    assert_eq!(refused[0]["reported"]["completion"]["said"], max);
    assert_eq!(refused[0]["reasons"].as_array().unwrap().len(), 2, "{}", refused[0]);
    counts_what_was_sent(&events, refused[0]);

    // No total wrapped: the task's spent is the server's two believed counts and ours of the third.
    let answered: Vec<&Value> = of_kind(&events, "response_received");
    let summed: u64 = answered.iter().map(|e| e["usage"]["prompt_tokens"].as_u64().unwrap()).sum();
    let counted = server.counted();
    assert_eq!(summed, counted[0] + refused[0]["sent_tokens"].as_u64().unwrap() + counted[2]);
    let status = task_status(&d, &task);
    assert_eq!(status["spent"]["prompt_tokens"], summed, "{status}");
    assert!(status["spent"]["completion_tokens"].as_u64().unwrap() < 10_000, "{status}");
    // The gauge is the last request's count, inside the window.
    let gauge = d.client().call("context.get", json!({"task_id": task, "role": "lead"})).unwrap();
    let last_sent = of_kind(&events, "request_sent").last().unwrap()["tokens"].clone();
    assert_eq!(gauge["tokens"], last_sent);
    assert!(gauge["tokens"].as_u64().unwrap() < gauge["window"].as_u64().unwrap(), "{gauge}");
    for args in [vec!["status", task.as_str()], vec!["context", task.as_str()], vec!["usage"]] {
        let shown = String::from_utf8_lossy(&d.cli(&args).stdout).to_string();
        assert!(!shown.contains(max) && !shown.contains("18446744"), "{args:?}: {shown}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_tokens_fifty_times_the_prompt_teach_no_cache_and_leave_the_trigger() {
    let list = || vec![tool_call("list_dir", json!({"path": "."}))];
    let server = ScriptedServer::builder()
        .max_model_len(Some(WINDOW))
        .script(vec![
            sse_with_raw_usage(
                list(),
                r#"{"prompt_tokens": 1800, "completion_tokens": 9, "prompt_tokens_details": {"cached_tokens": 90000}}"#,
            ),
            sse(list()),
            sse(list()),
            sse(vec![finish("listed four times")]),
        ])
        .start()
        .await;
    let ws = tempfile::tempdir().unwrap();
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let task = d.submit("List the workspace four times", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(60));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{}", d.serve_log());

    let refused = of_kind(&events, "usage_refused");
    assert_eq!(refused.len(), 1, "{refused:#?}");
    assert_eq!(
        refused[0]["reasons"],
        json!(["`prompt_tokens_details.cached_tokens` 90000 is more than the prompt's 1800 tokens"])
    );
    // The prompt was believable and is counted; the cache figure is not.
    assert_eq!(refused[0]["counted"], json!({"prompt_tokens": 1800, "completion_tokens": 9}));
    assert!(of_kind(&events, "cache_learned").is_empty(), "no cache learned from it");
    // The trigger stays the window's, every request: 80 % of 131,072.
    let triggers: Vec<u64> =
        of_kind(&events, "request_sent").iter().map(|e| e["trigger_tokens"].as_u64().unwrap()).collect();
    assert_eq!(triggers, vec![104_857; 4], "unpriced, unmoved");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nan_in_the_usage_keeps_the_answer_and_is_recorded() {
    let server = ScriptedServer::start(vec![
        sse_with_raw_usage(
            vec![tool_call("list_dir", json!({"path": "."}))],
            r#"{"prompt_tokens": NaN, "completion_tokens": 7, "total_tokens": NaN}"#,
        ),
        sse(vec![finish("listed")]),
    ])
    .await;
    let ws = tempfile::tempdir().unwrap();
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let task = d.submit("List the workspace", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(60));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{}", d.serve_log());
    // The answer was taken as it came: not resent as a parse anomaly.
    assert!(of_kind(&events, "retry_scheduled").is_empty(), "{events:#?}");
    assert_eq!(server.chat_requests().len(), 2);
    let ran = of_kind(&events, "tool_finished");
    assert!(
        ran.iter().any(|e| e["tool"] == "list_dir" && e["ok"] == true),
        "the answer's call ran: {ran:#?}"
    );

    let refused = of_kind(&events, "usage_refused");
    assert_eq!(refused.len(), 1, "{refused:#?}");
    assert_eq!(refused[0]["reported"]["prompt"], json!({"key": "prompt_tokens", "said": "NaN"}));
    assert_eq!(refused[0]["reasons"], json!(["`prompt_tokens` is NaN, not a count of tokens"]));
    assert_eq!(refused[0]["counted"]["completion_tokens"], 7, "the believable answer figure is kept");
    counts_what_was_sent(&events, refused[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_budget_counts_what_was_sent_when_the_reports_are_refused() {
    let absurd = r#"{"prompt_tokens": 5000000, "completion_tokens": 5000000}"#;
    let server = ScriptedServer::builder()
        .max_model_len(Some(WINDOW))
        .script(vec![
            sse_with_raw_usage(vec![tool_call("list_dir", json!({"path": "."}))], absurd),
            sse_with_raw_usage(vec![tool_call("list_dir", json!({"path": "."}))], absurd),
            sse_with_raw_usage(vec![finish("listed twice")], absurd),
        ])
        .start()
        .await;
    let ws = tempfile::tempdir().unwrap();
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let budget = 30_000u64;
    let submitted = d
        .client()
        .call(
            "task.submit",
            json!({"objective": "List the workspace twice", "workspace": ws.path(), "budget": {"tokens": budget}}),
        )
        .unwrap();
    let task = submitted["task_id"].as_str().unwrap().to_string();
    let events = d.events_until_end(&task, Duration::from_secs(60));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{}", d.serve_log());
    assert!(of_kind(&events, "budget_reached").is_empty(), "5,000,000 a report never paused it");

    let refused = of_kind(&events, "usage_refused");
    assert_eq!(refused.len(), 3, "{refused:#?}");
    for r in &refused {
        counts_what_was_sent(&events, r);
    }
    let sent: u64 = of_kind(&events, "request_sent").iter().map(|e| e["tokens"].as_u64().unwrap()).sum();
    let answers: u64 = refused.iter().map(|r| r["counted"]["completion_tokens"].as_u64().unwrap()).sum();
    let status = task_status(&d, &task);
    assert_eq!(status["spent"]["prompt_tokens"], sent, "{status}");
    assert_eq!(status["spent"]["completion_tokens"], answers, "{status}");
    assert!(sent + answers <= budget, "{status}");
}
