//! End-to-end on OpenAI's Responses API (`kind = "openai-responses"`) against the scripted
//! `/v1/responses`: reasoning items go back unchanged through a chain of tool calls and are cleared
//! once after an idle gap under the thinking latch (the input's prefix stable after it, through a
//! restart too); every request of a role carries the same `prompt_cache_key`; the usage's cached
//! tokens teach the prompt cache; a refusal over the window, which states no number, teaches the
//! window.

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
const HOUR_MS: u64 = 3_600_000;

/// The team's config with its provider speaking the Responses API.
fn responses_config(base_url: &str, extra: &str) -> String {
    team_config(base_url, "gpt-5", extra).replacen("kind = \"openai\"", "kind = \"openai-responses\"", 1)
}

fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["kind"] == kind).collect()
}

fn input(body: &Value) -> &Vec<Value> {
    body["input"].as_array().unwrap()
}

/// The encrypted content of every reasoning item a request sends back.
fn encrypted(body: &Value) -> Vec<String> {
    input(body)
        .iter()
        .filter(|i| i["type"] == "reasoning")
        .map(|i| i["encrypted_content"].as_str().unwrap().to_string())
        .collect()
}

const LONG: &str =
    "Weighing the structure of the module, the callers of each function and the tests that cover them. ";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reasoning_items_go_back_through_a_chain_and_are_cleared_once_after_an_idle_gap() {
    let server = ScriptedServer::start(vec![
        // Day 1: a chain of two tool calls; each reasoning item goes back unchanged through it.
        sse(vec![
            thinking(&format!("R1 {}", LONG.repeat(20)), &format!("ENC-R1-{}", "x".repeat(2000))),
            tool_call("list_dir", json!({"path": "."})),
        ]),
        sse(vec![thinking("R2 the listing is short", "ENC-R2"), finish("first request done")]),
        // Day 2, after two idle hours.
        sse(vec![thinking("R3 new day", "ENC-R3"), tool_call("list_dir", json!({"path": "."}))]),
        sse(vec![thinking("R4 still going", "ENC-R4"), tool_call("list_dir", json!({"path": "."}))]),
        sse(vec![finish("second request done")]),
        // After a restart, within the hour.
        sse(vec![finish("third request done")]),
    ])
    .await;
    let ws = tempfile::tempdir().unwrap();
    let mut d = TestDaemon::prepare(Path::new(BIN), &responses_config(&server.base_url(), ""));
    d.serve_with_env(&[("AGENTD_CLOCK", "manual")]);
    let task = d.submit("First request", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(20));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{}", d.serve_log());
    let reqs = server.chat_requests();
    assert_eq!(reqs.len(), 2);
    let enc_r1 = format!("ENC-R1-{}", "x".repeat(2000));
    assert_eq!(encrypted(&reqs[1]), std::slice::from_ref(&enc_r1), "sent back unchanged through the chain");
    let r1 = input(&reqs[1]).iter().find(|i| i["type"] == "reasoning").unwrap();
    assert!(r1["summary"][0]["text"].as_str().unwrap().starts_with("R1 "), "{r1}");
    for body in &reqs {
        assert_eq!((body["store"].clone(), body["stream"].clone()), (json!(false), json!(true)));
        assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
    }
    let key = reqs[0]["prompt_cache_key"].as_str().unwrap().to_string();
    let role = key.strip_prefix(&format!("{task}/")).expect("the key is {task}/{role}").to_string();
    // The reasoning the history holds is the gauge's thinking, as thinking blocks are.
    let gauge = d.client().call("context.get", json!({"task_id": task, "role": role})).unwrap();
    assert!(gauge["categories"]["thinking"].as_u64().unwrap_or(0) > 500, "{gauge}");

    d.client().call("clock.advance", json!({"ms": 2 * HOUR_MS})).unwrap();
    let events = d.follow_up(&task, "Second request");
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}");
    let cleared = of_kind(&events, "thinking_cleared");
    assert_eq!(cleared.len(), 1, "once: {events:#?}");
    assert_eq!(cleared[0]["blocks_removed"], 1);
    assert!(cleared[0]["tokens_freed"].as_u64().unwrap() > 500, "{}", cleared[0]);

    let reqs = server.chat_requests();
    let (r3, r4, r5) = (&reqs[2], &reqs[3], &reqs[4]);
    assert_eq!(encrypted(r3), ["ENC-R2"], "the old reasoning is gone, the latest kept");
    assert_eq!(encrypted(r5), ["ENC-R2", "ENC-R3", "ENC-R4"]);
    // Prefix stability: every later request starts with exactly the items of the one before.
    assert_eq!(input(r4)[..input(r3).len()], input(r3)[..]);
    assert_eq!(input(r5)[..input(r4).len()], input(r4)[..]);
    assert!(reqs.iter().all(|r| r["prompt_cache_key"] == json!(key)), "one key for the role's requests");

    // Through a restart the cleared item never returns, and no new cleanup happens within the hour.
    d.stop();
    d.serve_with_env(&[("AGENTD_CLOCK", "manual")]);
    let events = d.follow_up(&task, "Third request");
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}");
    assert!(events.iter().all(|e| e["kind"] != "thinking_cleared"));
    let r6 = server.chat_requests().pop().unwrap();
    assert!(!encrypted(&r6).contains(&enc_r1));
    assert_eq!(input(&r6)[..input(r5).len()], input(r5)[..], "the restart kept the prefix");
    assert_eq!(r6["prompt_cache_key"], json!(key), "the same key after a restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_tokens_teach_the_cache_and_a_refusal_over_the_window_teaches_the_window() {
    let agent_requests = Arc::new(AtomicUsize::new(0));
    let counter = agent_requests.clone();
    let server = ScriptedServer::builder()
        .report_usage(true)
        .responder(move |body: &Value| {
            if is_summary_request(body) {
                return sse(vec![text("Summary: the files were read one by one.")]);
            }
            match counter.fetch_add(1, Ordering::SeqCst) {
                n @ 0..=7 => sse(vec![
                    thinking(&format!("file {n} next"), &format!("ENC-{n}")),
                    tool_call("read_file", json!({"path": format!("f{n}.txt")})),
                ]),
                // The Responses API's refusal: it names no number.
                8 => context_length_exceeded(0, 0),
                _ => sse(vec![finish("read them all")]),
            }
        })
        .start()
        .await;
    let ws = tempfile::tempdir().unwrap();
    for i in 0..8 {
        std::fs::write(ws.path().join(format!("f{i}.txt")), format!("file {i}: {}\n", "data ".repeat(300)))
            .unwrap();
    }
    let d = TestDaemon::start(Path::new(BIN), &responses_config(&server.base_url(), ""));
    let task = d.submit("Read the eight files", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(60));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}");

    let learned = of_kind(&events, "cache_learned");
    assert_eq!(learned.len(), 1, "{learned:#?}");
    assert_eq!(learned[0]["server"], json!(server.base_url()));
    assert_eq!(learned[0]["model"], "gpt-5");
    assert!(learned[0]["min_tokens"].as_u64().unwrap() >= 1024, "{}", learned[0]);
    let cached: Vec<u64> = of_kind(&events, "response_received")
        .iter()
        .map(|r| r["usage"]["cache_read_tokens"].as_u64().unwrap_or(0))
        .collect();
    assert!(cached.iter().any(|c| *c >= 1024), "the usage carried the cached part: {cached:?}");

    let windows = of_kind(&events, "window_learned");
    assert_eq!(windows.len(), 1, "{windows:#?}");
    let refused_at = of_kind(&events, "request_sent")[8]["tokens"].as_u64().unwrap();
    assert_eq!(windows[0]["new_window"].as_u64().unwrap(), refused_at * 95 / 100);
    assert_eq!(of_kind(&events, "compaction_finished").len(), 1);
    let last_sent = of_kind(&events, "request_sent").last().unwrap()["tokens"].as_u64().unwrap();
    assert!(last_sent < refused_at * 95 / 100, "{last_sent} vs {refused_at}");
    let shown = String::from_utf8_lossy(&d.cli(&["context", &task, "--role", "lead"]).stdout).to_string();
    assert!(shown.contains("cache        learned"), "{shown}");
}
