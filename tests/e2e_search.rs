//! End-to-end: `search` past its caps. The model sees the first `max_results` matching lines and a
//! footer that counts the rest; the complete output is stored as evidence (redacted like every tool
//! result), named in the result with the offset of the first line not shown, so `read_evidence`
//! continues exactly where the shown part stops.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use agentd_test_support::daemon::{team_config, TestDaemon};
use agentd_test_support::*;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_agentd");
const SECRET: &str = "s3cret-value-0123456789";

fn tool_messages(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["content"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_past_its_cap_shows_the_first_matches_and_keeps_the_rest_as_evidence() {
    let server = ScriptedServer::builder()
        .script(vec![
            sse(vec![tool_call("search", json!({"pattern": "^hit", "max_results": 20}))]),
            sse(vec![finish("searched")]),
        ])
        .start()
        .await;
    let ws = tempfile::tempdir().unwrap();
    let mut text: String = (1..=300).map(|i| format!("hit {i}\n")).collect();
    // A secret in a line the model is not shown: the evidence must not hold it either.
    text.push_str(&format!("hit with the key {SECRET}\n"));
    std::fs::write(ws.path().join("many.txt"), text).unwrap();
    let config =
        team_config(&server.base_url(), "gpt-4o", "[secrets]\nenv = [\"AGENTD_TEST_SEARCH_SECRET\"]\n");
    let mut d = TestDaemon::prepare(Path::new(BIN), &config);
    d.serve_with_env(&[("AGENTD_TEST_SEARCH_SECRET", SECRET)]);
    let task = d.submit("Find the hits", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(30));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}");

    // What the model got: 20 matching lines, the footer, and where the rest is.
    let requests = server.chat_requests();
    let result = tool_messages(&requests[1]).pop().unwrap();
    let lines: Vec<&str> = result.lines().collect();
    assert_eq!(lines[0], "many.txt:1:hit 1");
    assert_eq!(lines[19], "many.txt:20:hit 20");
    assert_eq!(lines[20], "[search: 301 matching lines in 1 file; the first 20 shown (max_results 20).]");
    let note = lines[21];
    assert!(note.starts_with("[the complete output is evidence ev-"), "{note}");
    assert!(note.contains("301 lines, of which the first 20 are above"), "{note}");
    assert!(note.ends_with("\"offset\": 20}.]"), "{note}");
    assert_eq!(lines.len(), 22, "{result}");

    // tool_finished names the evidence; reading on from the offset continues at line 21.
    let finished = events.iter().find(|e| e["kind"] == "tool_finished" && e["tool"] == "search").unwrap();
    let id = finished["evidence_id"].as_str().unwrap().to_string();
    assert!(note.contains(&id), "{note}");
    let page = d
        .client()
        .call("evidence.read", json!({"id": id, "offset": 20, "limit": 2, "unit": "lines"}))
        .unwrap();
    assert_eq!(page["data"], "many.txt:21:hit 21\nmany.txt:22:hit 22\n", "{page}");
    let last = d.client().call("evidence.read", json!({"id": id, "offset": 300, "unit": "lines"})).unwrap();
    let last = last["data"].as_str().unwrap();
    assert!(
        last.starts_with("many.txt:301:hit with the key [redacted: AGENTD_TEST_SEARCH_SECRET]"),
        "{last}"
    );
    assert!(!last.contains(SECRET));
}
