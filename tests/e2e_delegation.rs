//! End-to-end: specialists and the receipts a delegated agent inherits — whole when they fit, a bounded
//! view with the complete list archived when they do not, and a loud failure when the archive cannot
//! be written.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use agentd_protocol::task::EVIDENCE_FOLDER;
use agentd_test_support::daemon::{team_config, TestDaemon};
use agentd_test_support::workspace::sample_workspace;
use agentd_test_support::*;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_agentd");

/// As `docs/interface.md` shows a specialist: its tools list without `finish`, which every role is
/// offered all the same (a specialist configured so could never end its turn: 25 refused finishes
/// in 30 s, and on).
const REVIEWER: &str = "[team.specialists.reviewer]\nprovider = \"scripted\"\nmodel = \"gpt-4o\"\nprompt = \"You review diffs for correctness.\"\ntools = [\"read_file\", \"list_dir\", \"search\"]\n";

fn tool_names(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_specialist_gets_its_prompt_its_tools_and_the_leads_receipts() {
    let server = ScriptedServer::start(vec![
        sse(vec![tool_call("read_file", json!({"path": "src/lib.rs"}))]),
        sse(vec![delegate("reviewer", "Review src/lib.rs for bugs")]),
        sse(vec![tool_call("read_file", json!({"path": "src/lib.rs"}))]),
        sse(vec![finish("add() subtracts: a - b should be a + b")]),
        sse(vec![finish("the reviewer found the bug")]),
    ])
    .await;
    let ws = tempfile::tempdir().unwrap();
    sample_workspace(ws.path());
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", REVIEWER));
    let task = d.submit("Find the bug", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(20));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}");
    let delegated = events.iter().find(|e| e["kind"] == "delegated").unwrap();
    assert_eq!(delegated["to_role"], "reviewer");
    assert!(delegated.get("receipts_id").is_none(), "one receipt fits whole: {delegated}");
    let returned = events.iter().find(|e| e["kind"] == "delegation_returned").unwrap();
    assert_eq!(returned["from_role"], "reviewer");

    let reqs = server.chat_requests();
    let reviewer = &reqs[2];
    assert_eq!(tool_names(reviewer), ["read_file", "list_dir", "search", "finish"]);
    let finished = events.iter().filter(|e| e["kind"] == "tool_finished" && e["tool"] == "finish");
    assert!(finished.clone().count() == 2 && finished.into_iter().all(|e| e["ok"] == true), "{events:#?}");
    let system = reviewer["messages"][0]["content"].as_str().unwrap();
    assert!(system.contains("You review diffs for correctness."), "{system}");
    let handoff = reviewer["messages"][1]["content"].as_str().unwrap();
    assert!(handoff.starts_with("Review src/lib.rs for bugs"), "{handoff}");
    assert!(
        handoff.contains("[receipts] What lead has done so far") && handoff.contains("read_file"),
        "{handoff}"
    );
    // The reviewer has its own history: the lead's objective is not in it.
    assert!(!reviewer["messages"].to_string().contains("Find the bug"));
    let status = d.client().call("task.status", json!({"task_id": task})).unwrap();
    assert!(status["roles"]["reviewer"]["tokens"].as_u64().unwrap() > 0);
}

#[test]
fn a_specialist_with_an_unknown_tool_is_a_config_error_naming_the_key() {
    let bad = REVIEWER.replace("\"search\"]", "\"search\", \"teleport\"]");
    assert_ne!(bad, REVIEWER);
    let d = TestDaemon::prepare(Path::new(BIN), &team_config("http://127.0.0.1:9/v1", "gpt-4o", &bad));
    let out = d.cli(&["serve"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("team.specialists.reviewer.tools") && err.contains("teleport"), "{err}");
}

/// `[team.stall]` with its loop test off.
const STALL_OFF: &str = "[team.stall]\nrepeats = 0\n";

/// The lead lists the workspace `n` times, then delegates to the coder, which finishes at once.
/// Listing the same two folders in turn is a loop the stall watch stops at its sixth call: the
/// tests of it turn the watch's loop test off ([`STALL_OFF`]), as they are about the receipts.
fn busy_lead(n: usize) -> Vec<Step> {
    let mut steps: Vec<Step> = (0..n)
        .map(|i| sse(vec![tool_call("list_dir", json!({"path": if i % 2 == 0 { "." } else { "src" }}))]))
        .collect();
    steps.push(sse(vec![delegate("coder", "Fix add() in src/lib.rs")]));
    steps.push(sse(vec![finish("nothing to change after all")]));
    steps.push(sse(vec![finish("delegated")]));
    steps
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receipts_over_the_handoff_budget_are_archived_and_viewed_newest_first() {
    let server = ScriptedServer::builder().max_model_len(Some(4_096)).script(busy_lead(30)).start().await;
    let ws = tempfile::tempdir().unwrap();
    sample_workspace(ws.path());
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", STALL_OFF));
    let task = d.submit("Look around, then have the coder fix add()", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(60));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{}", d.serve_log());
    let delegated = events.iter().find(|e| e["kind"] == "delegated").unwrap();
    let archive = delegated["receipts_id"].as_str().expect("the receipts were archived").to_string();

    let coder_first = server
        .chat_requests()
        .into_iter()
        .find(|b| !tool_names(b).contains(&"delegate".to_string()))
        .unwrap();
    let handoff = coder_first["messages"][1]["content"].as_str().unwrap().to_string();
    assert!(handoff.contains("of 30 operations shown"), "{handoff}");
    assert!(handoff.contains(&format!("read_evidence {{\"id\": \"{archive}\"}}")), "{handoff}");
    // A tenth of the 4,096-token window, measured with the model's tokenizer.
    let view_tokens = tiktoken_rs::o200k_base_singleton().encode_ordinary(&handoff).len();
    assert!(view_tokens <= 409 + 20, "{view_tokens}");

    // The archive holds every receipt.
    let page = d
        .client()
        .call("evidence.read", json!({"id": archive, "unit": "lines", "offset": 0, "limit": 100}))
        .unwrap();
    let lines: Vec<Value> =
        page["data"].as_str().unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 30);
    assert!(lines.iter().all(|r| r["tool"] == "list_dir" && r["ok"] == true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unwritable_receipts_archive_fails_the_handoff_loudly() {
    let server = ScriptedServer::builder().max_model_len(Some(4_096)).script(busy_lead(30)).start().await;
    let ws = tempfile::tempdir().unwrap();
    sample_workspace(ws.path());
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", STALL_OFF));
    // Neither the evidence folder nor the workspace's fallback folder can be created or written:
    // each is a plain file (this holds even for root, for whom permissions are no obstacle).
    let evidence = d.home().join("evidence");
    let _ = std::fs::remove_dir_all(&evidence);
    std::fs::write(&evidence, "not a directory").unwrap();
    std::fs::write(ws.path().join(EVIDENCE_FOLDER), "not a directory").unwrap();

    let task = d.submit("Look around, then have the coder fix add()", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(60));
    let last = events.last().unwrap();
    assert_eq!(last["kind"], "task_failed", "{events:#?}");
    let error = last["error"].as_str().unwrap();
    assert!(error.contains("handoff to coder failed") && error.contains("30 receipts"), "{error}");
    assert!(events.iter().all(|e| e["kind"] != "delegated"), "the handoff never went");
    // The coder was never asked anything.
    assert!(server.chat_requests().iter().all(|b| tool_names(b).contains(&"delegate".to_string())));
}
