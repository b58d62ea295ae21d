//! End-to-end: the real `agentd` binary over its real socket, against a scripted OpenAI-compatible
//! server: submit → the lead reads → delegates → the coder edits → finishes → the lead finishes.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use agentd_test_support::daemon::{team_config, TestDaemon};
use agentd_test_support::workspace::sample_workspace;
use agentd_test_support::*;
use serde_json::json;

const BIN: &str = env!("CARGO_BIN_EXE_agentd");

fn kinds(events: &[serde_json::Value]) -> Vec<String> {
    events.iter().map(|e| e["kind"].as_str().unwrap_or("").to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lead_delegates_and_coder_edits_a_file() {
    let server = ScriptedServer::builder()
        .max_model_len(Some(32_768))
        .script(vec![
            sse(vec![
                reasoning("look at the code first"),
                tool_call("read_file", json!({"path": "src/lib.rs"})),
            ]),
            sse(vec![
                text("add subtracts; the coder fixes it"),
                delegate("coder", "Make add() return a + b"),
            ]),
            sse(vec![tool_call(
                "edit_file",
                json!({"path": "src/lib.rs", "old_text": "a - b", "new_text": "a + b"}),
            )]),
            // The server's count of the coder's request (tools included): no sign of truncation.
            sse_with_usage(vec![finish("changed a - b to a + b in src/lib.rs")], 1_600, 12),
            sse(vec![finish("add() fixed by the coder")]),
        ])
        .start()
        .await;
    let ws = tempfile::tempdir().unwrap();
    sample_workspace(ws.path());
    let daemon = TestDaemon::start(std::path::Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));

    let out = daemon.cli(&[
        "submit",
        "Fix the add function",
        "--workspace",
        ws.path().to_str().unwrap(),
        "--wait",
        "--json",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout: {stdout}\nstderr: {}\nlog: {}",
        String::from_utf8_lossy(&out.stderr),
        daemon.serve_log()
    );
    let events: Vec<serde_json::Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();

    // Ordered and complete: seq 1..=n with no gap, the expected story in order.
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["seq"], json!(i as u64 + 1), "{events:#?}");
    }
    let k = kinds(&events);
    let story = [
        "task_started",
        "request_sent",
        "response_received",
        "tool_called",
        "tool_finished",
        "request_sent",
        "response_received",
        "tool_called",
        "delegated",
        "request_sent",
        "response_received",
        "tool_called",
        // The coder's edit, from the checkpoints around it.
        "files_changed",
        "tool_finished",
        "request_sent",
        "response_received",
        "tool_called",
        "tool_finished",
        "delegation_returned",
        "tool_finished",
        "request_sent",
        "response_received",
        "tool_called",
        "tool_finished",
        "task_finished",
    ];
    assert_eq!(k, story, "{events:#?}");
    let delegated = events.iter().find(|e| e["kind"] == "delegated").unwrap();
    assert_eq!(delegated["to_role"], "coder");
    assert_eq!(events.last().unwrap()["summary"], "add() fixed by the coder");
    let coder_usage =
        events.iter().filter(|e| e["kind"] == "response_received" && e["role"] == "coder").nth(1).unwrap();
    assert_eq!(coder_usage["usage"]["prompt_tokens"], 1_600);

    // The coder really edited the file.
    let lib = std::fs::read_to_string(ws.path().join("src/lib.rs")).unwrap();
    assert!(lib.contains("a + b") && !lib.contains("a - b"), "{lib}");

    // What the model saw: the coder's first request carries the delegated objective; the lead's last
    // carries the coder's summary as the delegate result, and its reasoning was sent back.
    let reqs = server.chat_requests();
    assert_eq!(reqs.len(), 5);
    let coder_first = reqs[2]["messages"].to_string();
    assert!(coder_first.contains("Make add() return a + b"), "{coder_first}");
    assert!(!coder_first.contains("Fix the add function"), "the coder has its own history: {coder_first}");
    let lead_last = &reqs[4]["messages"];
    assert!(lead_last.to_string().contains("changed a - b to a + b in src/lib.rs"));
    assert!(lead_last.to_string().contains("look at the code first"), "reasoning kept through the chain");
    let lead_tools: Vec<String> = reqs[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    assert!(
        lead_tools.contains(&"delegate".to_string()) && !lead_tools.contains(&"edit_file".to_string()),
        "{lead_tools:?}"
    );

    // The task and its log are inspectable.
    let status = daemon.client().call("task.status", json!({"task_id": events[0]["task_id"]})).unwrap();
    assert_eq!(status["state"], "finished");
    assert_eq!(status["result"], "add() fixed by the coder");
    assert!(status["roles"]["lead"]["tokens"].as_u64().unwrap() > 0);
    let log = daemon.cli(&["log", events[0]["task_id"].as_str().unwrap(), "--jsonl"]);
    let records: Vec<serde_json::Value> =
        String::from_utf8_lossy(&log.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(records.iter().any(|r| r["type"] == "message" && r["role"] == "coder"));
    assert!(records.iter().any(|r| r["type"] == "event"));
}
