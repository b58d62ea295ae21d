//! End-to-end with a driven clock (`AGENTD_CLOCK=manual`, `clock.advance`): idle thinking cleanup
//! and its prefix stability, and cron jobs.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use agentd_test_support::daemon::{team_config, TestDaemon};
use agentd_test_support::*;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_agentd");
const HOUR_MS: u64 = 3_600_000;

fn manual_daemon(config: &str) -> TestDaemon {
    let mut d = TestDaemon::prepare(Path::new(BIN), config);
    d.serve_with_env(&[("AGENTD_CLOCK", "manual")]);
    d
}

fn advance(d: &TestDaemon, ms: u64) {
    d.client().call("clock.advance", json!({"ms": ms})).expect("clock.advance");
}

fn messages(body: &Value) -> &Vec<Value> {
    body["messages"].as_array().unwrap()
}

const LONG: &str = "Let me think this through step by step, weighing the structure of the module, the callers of each function and the tests that cover them. ";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_thinking_is_cleared_once_and_the_prefix_stays_stable() {
    let server = ScriptedServer::start(vec![
        // Day 1: a chain of two tool calls; its reasoning goes back unchanged through the chain.
        sse(vec![reasoning(&format!("R1 {}", LONG.repeat(20))), tool_call("list_dir", json!({"path": "."}))]),
        sse(vec![reasoning("R2 the listing is short"), finish("first request done")]),
        // Day 2, after two idle hours.
        sse(vec![reasoning("R3 new day"), tool_call("list_dir", json!({"path": "."}))]),
        sse(vec![reasoning("R4 still going"), tool_call("list_dir", json!({"path": "."}))]),
        sse(vec![finish("second request done")]),
        // After a restart, within the hour.
        sse(vec![finish("third request done")]),
    ])
    .await;
    let ws = tempfile::tempdir().unwrap();
    let mut d = manual_daemon(&team_config(&server.base_url(), "gpt-4o", ""));
    let task = d.submit("First request", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(20));
    assert_eq!(events.last().unwrap()["kind"], "task_finished");
    let reqs = server.chat_requests();
    assert!(reqs[1].to_string().contains("R1"), "thinking goes back through an active chain");

    advance(&d, 2 * HOUR_MS);
    let events = d.follow_up(&task, "Second request");
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}");
    let cleared: Vec<&Value> = events.iter().filter(|e| e["kind"] == "thinking_cleared").collect();
    assert_eq!(cleared.len(), 1, "once: {events:#?}");
    assert_eq!(cleared[0]["blocks_removed"], 1);
    assert!(cleared[0]["idle_ms"].as_u64().unwrap() >= 2 * HOUR_MS);
    assert!(cleared[0]["tokens_freed"].as_u64().unwrap() > 500, "{}", cleared[0]);

    let reqs = server.chat_requests();
    let (r3, r4, r5) = (&reqs[2], &reqs[3], &reqs[4]);
    assert!(!r3.to_string().contains("R1 "), "the old thinking is gone");
    assert!(r3.to_string().contains("R2 the listing is short"), "the latest is kept");
    // Prefix stability: every later request starts with exactly the messages of the one before.
    assert_eq!(messages(r4)[..messages(r3).len()], messages(r3)[..]);
    assert_eq!(messages(r5)[..messages(r4).len()], messages(r4)[..]);
    assert!(r5.to_string().contains("R3 new day") && r5.to_string().contains("R4 still going"));

    // Through a restart the cleared block never returns, and no new cleanup happens within the hour.
    d.stop();
    d.serve_with_env(&[("AGENTD_CLOCK", "manual")]);
    let events = d.follow_up(&task, "Third request");
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}");
    assert!(events.iter().all(|e| e["kind"] != "thinking_cleared"));
    let r6 = server.chat_requests().pop().unwrap();
    assert!(!r6.to_string().contains("R1 "));
    assert_eq!(messages(&r6)[..messages(r5).len()], messages(r5)[..], "the restart kept the prefix");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_within_the_threshold_keeps_all_thinking() {
    let server = ScriptedServer::start(vec![
        sse(vec![reasoning("A1"), tool_call("list_dir", json!({"path": "."}))]),
        sse(vec![reasoning("A2"), finish("done")]),
        sse(vec![finish("done again")]),
    ])
    .await;
    let ws = tempfile::tempdir().unwrap();
    let d = manual_daemon(&team_config(
        &server.base_url(),
        "gpt-4o",
        "[scheduler]\nidle_thinking_cleanup_after = \"1h\"\n",
    ));
    let task = d.submit("First", ws.path());
    d.events_until_end(&task, Duration::from_secs(20));
    advance(&d, HOUR_MS / 2);
    let events = d.follow_up(&task, "Second");
    assert!(events.iter().all(|e| e["kind"] != "thinking_cleared"));
    let last = server.chat_requests().pop().unwrap().to_string();
    assert!(last.contains("A1") && last.contains("A2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cleanup_that_would_free_too_little_is_skipped_and_the_cache_kept() {
    let server = ScriptedServer::start(vec![
        sse(vec![reasoning(&format!("B1 {}", LONG.repeat(20))), tool_call("list_dir", json!({"path": "."}))]),
        sse(vec![reasoning("B2 short"), finish("done")]),
        sse(vec![finish("done again")]),
    ])
    .await;
    let ws = tempfile::tempdir().unwrap();
    // The old reasoning is ~560 tokens: under a 1,000-token floor, clearing it is not worth the cache.
    let d = manual_daemon(&team_config(
        &server.base_url(),
        "gpt-4o",
        "[scheduler]\nidle_thinking_cleanup_after = \"1h\"\nidle_thinking_clear_at_least = 1000\n",
    ));
    let task = d.submit("First", ws.path());
    d.events_until_end(&task, Duration::from_secs(20));
    advance(&d, 2 * HOUR_MS);
    let events = d.follow_up(&task, "Second");
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}");
    assert!(events.iter().all(|e| e["kind"] != "thinking_cleared"), "{events:#?}");
    let reqs = server.chat_requests();
    let (before, after) = (&reqs[1], &reqs[2]);
    assert_eq!(messages(after)[..messages(before).len()], messages(before)[..], "the prefix is unchanged");
    assert!(after.to_string().contains("B1 "));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cron_jobs_run_on_schedule_and_report_their_outcome() {
    let server = ScriptedServer::start(vec![
        sse(vec![tool_call("list_dir", json!({"path": "."}))]),
        sse(vec![finish("listed")]),
    ])
    .await;
    let jobs = "[[scheduler.jobs]]\nname = \"nightly-verify\"\ncron = \"0 0 3 * * *\"\naction = \"evidence.verify\"\n\
                [[scheduler.jobs]]\nname = \"nightly-export\"\ncron = \"0 30 3 * * *\"\naction = \"logs.export\"\n";
    let ws = tempfile::tempdir().unwrap();
    let config = team_config(&server.base_url(), "gpt-4o", jobs);
    let d = manual_daemon(&config);
    let status = d.client().call("daemon.status", json!({})).unwrap();
    let listed = status["jobs"].as_array().unwrap();
    assert_eq!(listed.len(), 2);
    assert!(listed.iter().all(|j| j["next_run_at"].is_string() && j["runs"] == 0), "{status}");

    let task = d.submit("List the workspace", ws.path());
    d.events_until_end(&task, Duration::from_secs(20));
    advance(&d, 24 * HOUR_MS);
    // Both jobs ran once (they wake when the clock passes their time).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let jobs = loop {
        let status = d.client().call("daemon.status", json!({})).unwrap();
        let jobs = status["jobs"].as_array().unwrap().clone();
        if jobs.iter().all(|j| j["runs"].as_u64().unwrap() >= 1) {
            break jobs;
        }
        assert!(std::time::Instant::now() < deadline, "jobs did not run: {status}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let verify = jobs.iter().find(|j| j["name"] == "nightly-verify").unwrap();
    assert_eq!(verify["last_ok"], true, "{verify}");
    assert!(verify["last_outcome"].as_str().unwrap().contains("no problems"), "{verify}");
    let export = jobs.iter().find(|j| j["name"] == "nightly-export").unwrap();
    assert_eq!(export["last_ok"], true, "{export}");
    let exported = std::fs::read_to_string(d.home().join("exports").join(format!("{task}.jsonl"))).unwrap();
    assert!(exported.lines().count() > 5 && exported.contains("task_finished"));
    // The next run is in the future again.
    assert!(verify["next_run_at"].as_str().unwrap() > verify["last_run_at"].as_str().unwrap());
}

#[test]
fn a_bad_job_is_a_config_error_naming_it() {
    let jobs =
        "[[scheduler.jobs]]\nname = \"broken\"\ncron = \"at midnight\"\naction = \"evidence.verify\"\n";
    let d = TestDaemon::prepare(Path::new(BIN), &team_config("http://127.0.0.1:9/v1", "gpt-4o", jobs));
    let out = d.cli(&["serve"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("\"broken\"") && err.contains("cron"), "{err}");
}
