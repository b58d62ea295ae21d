//! End-to-end: a compaction on request (`agentd compact`), through the real daemon and a scripted model.
//! Of a stopped task it is made at once, the focus given to the summariser, with the same events,
//! archive and checkpoint as an automatic one; of a running task it is made before the role's next
//! request; with nothing to compact, or no candidate small enough, it is refused: one
//! `compaction_refused` event, and nothing else is written (no archive, no checkpoint).

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
const SUMMARY: &str = "Summary: the lead read the notes; the parser splits on commas.";
const FOCUS: &str = "keep the parser details";

/// The lead reads `reads` notes, the `slow`th answer taking a while, then finishes; summaries are
/// answered with [`SUMMARY`].
fn lead(
    reads: usize,
    slow: usize,
    steps: Arc<AtomicUsize>,
) -> impl Fn(&Value) -> Step + Send + Sync + 'static {
    move |body: &Value| {
        if is_summary_request(body) {
            return sse(vec![text(SUMMARY)]);
        }
        let n = steps.fetch_add(1, Ordering::SeqCst);
        let step = if n < reads {
            sse(vec![tool_call("read_file", json!({"path": format!("notes/{}.txt", n % 3)}))])
        } else {
            sse(vec![finish("read the notes")])
        };
        if n == slow {
            delayed(Duration::from_millis(1_500), step)
        } else {
            step
        }
    }
}

fn workspace() -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(ws.path().join("notes")).unwrap();
    for i in 0..3 {
        let text: String = (0..60).map(|n| format!("note {i}-{n}: the parser splits on commas\n")).collect();
        std::fs::write(ws.path().join(format!("notes/{i}.txt")), text).unwrap();
    }
    ws
}

fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["kind"] == kind).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_task_is_compacted_now_with_the_focus_given_to_the_summariser() {
    let server = ScriptedServer::builder().responder(lead(4, usize::MAX, Arc::default())).start().await;
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let ws = workspace();
    let task = d.submit("Read the notes", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(60));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{}", d.serve_log());
    assert!(of_kind(&events, "compaction_started").is_empty(), "nothing near the trigger");

    let out = d.cli(&["compact", &task, "--focus", FOCUS, "--json"]);
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stderr), d.serve_log());
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((result["role"].as_str(), result["scheduled"].as_bool()), (Some("lead"), Some(false)));
    assert!(result["tokens_after"].as_u64() < result["tokens_before"].as_u64(), "{result}");
    let archive = result["archive_id"].as_str().unwrap();

    // The focus reached the summariser, inside the summary request.
    let summaries: Vec<Value> = server.chat_requests().into_iter().filter(is_summary_request).collect();
    assert!(!summaries.is_empty());
    for summary in &summaries {
        let asked = summary["messages"].to_string();
        assert!(asked.contains("<focus>") && asked.contains(FOCUS), "every summary request: {asked}");
    }
    // The same events and archive as an automatic compaction, and the checkpoint in the log.
    let logged = d.logged_events(&task);
    let finished = of_kind(&logged, "compaction_finished");
    assert_eq!(finished.len(), 1);
    assert_eq!(finished[0]["archive_id"], archive);
    assert_eq!(finished[0]["role"], "lead");
    assert!(!of_kind(&logged, "compaction_started").is_empty());
    let log = d.client().call("log.get", json!({"task_id": task, "role": "lead"})).unwrap();
    let checkpoint = log["records"].as_array().unwrap().iter().rev().find(|r| r["type"] == "system").unwrap();
    assert_eq!(checkpoint["subtype"], "compaction");
    assert!(checkpoint["history"].to_string().contains(SUMMARY));
    let state = d.client().call("task.status", json!({"task_id": task})).unwrap();
    assert_eq!(state["state"], "finished", "a compaction does not change the task's state");

    // Compacted again right away: what is left is the checkpoint and the last round, nothing new.
    let again = d.cli(&["compact", &task]);
    assert_eq!(again.status.code(), Some(1), "{}", String::from_utf8_lossy(&again.stdout));
    assert!(String::from_utf8_lossy(&again.stderr).contains("nothing to compact"));
    let unknown = d.cli(&["compact", &task, "--role", "reviewer"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("reviewer"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_with_nothing_to_compact_is_refused_and_nothing_is_written() {
    let server = ScriptedServer::start(vec![sse(vec![finish("done at once")])]).await;
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let ws = tempfile::tempdir().unwrap();
    let task = d.submit("Say hello", ws.path());
    d.events_until_end(&task, Duration::from_secs(30));
    let before = d.logged_events(&task).len();
    let out = d.cli(&["compact", &task, "--focus", FOCUS]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nothing to compact"), "{err}");
    // One event says so; no checkpoint, no archive.
    let logged = d.logged_events(&task);
    assert_eq!(logged.len(), before + 1, "{logged:?}");
    let refused = logged.last().unwrap();
    assert_eq!(refused["kind"], "compaction_refused");
    assert!(refused["reason"].as_str().unwrap().contains("nothing to compact"), "{refused}");
    let log = d.client().call("log.get", json!({"task_id": task})).unwrap();
    assert!(!log.to_string().contains("\"subtype\":\"compaction\""), "no checkpoint");
    assert_eq!(server.chat_requests().len(), 1, "no summary request");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_task_is_compacted_before_the_roles_next_request() {
    let server = ScriptedServer::builder().responder(lead(5, 4, Arc::default())).start().await;
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let ws = workspace();
    let task = d.submit("Read the notes", ws.path());
    // While the fifth answer is slow in coming, the user asks for a compaction.
    assert!(server.wait_for_requests(5, Duration::from_secs(30)).await);
    let r = d.client().call("task.compact", json!({"task_id": task, "focus": FOCUS})).unwrap();
    assert_eq!(r["scheduled"], true, "{r}");
    let events = d.events_until_end(&task, Duration::from_secs(60));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{}", d.serve_log());
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    let compacted = kinds.iter().position(|k| *k == "compaction_finished").expect("compacted");
    // Made between two requests, never during one: the request it precedes is sent after it.
    assert_eq!(kinds[compacted + 1], "request_sent", "{kinds:?}");
    assert_eq!(kinds[compacted - 1], "compaction_started");
    let summaries: Vec<Value> = server.chat_requests().into_iter().filter(is_summary_request).collect();
    assert!(summaries[0]["messages"].to_string().contains(FOCUS));
}

/// A compaction asked for that cannot be made — the summariser's answer leaves the history no
/// smaller than its destination — is a refusal with its reason (-32003, HTTP 409; the CLI exit 1),
/// not the daemon's internal error (-32603, HTTP 500); and a focus past its maximum is a bad
/// parameter naming `focus` (-32602, exit 2), sent to no model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_that_cannot_be_made_is_refused_with_its_reason() {
    let steps = Arc::new(AtomicUsize::new(0));
    let reads = lead(4, usize::MAX, steps);
    let server = ScriptedServer::builder()
        .responder(move |body: &Value| {
            if is_summary_request(body) {
                // A "summary" longer than everything it summarises.
                return sse(vec![text(&"the parser splits on commas, ".repeat(20_000))]);
            }
            reads(body)
        })
        .start()
        .await;
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let ws = workspace();
    let task = d.submit("Read the notes", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(60));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{}", d.serve_log());

    let asked = server.chat_requests().len();
    let long = "k".repeat(agentd_protocol::rpc::MAX_FOCUS_CHARS + 1);
    let e = d.client().call("task.compact", json!({"task_id": task, "focus": long})).unwrap_err();
    assert_eq!(e.code, -32602, "{e}");
    assert!(e.message.contains("focus") && e.message.contains("2001"), "{e}");
    let out = d.cli(&["compact", &task, "--focus", &long]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(server.chat_requests().len(), asked, "no summary request for a refused focus");

    let evidence_before = d.cli(&["evidence", "list", "--task", &task]);
    let e = d.client().call("task.compact", json!({"task_id": task})).unwrap_err();
    assert_eq!(e.code, -32003, "a refusal, not an internal error: {e}");
    assert!(e.message.contains("destination"), "with its reason: {e}");
    let out = d.cli(&["compact", &task]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("compaction refused") && err.contains("destination"), "{err}");
    assert!(err.contains("nothing was written") && !err.contains("failed"), "{err}");
    // Nothing written: the evidence list as it was, no checkpoint; one event for each refusal.
    let evidence_after = d.cli(&["evidence", "list", "--task", &task]);
    assert!(evidence_after.status.success());
    assert_eq!(
        String::from_utf8_lossy(&evidence_after.stdout),
        String::from_utf8_lossy(&evidence_before.stdout),
        "no archive of a refused compaction"
    );
    let logged = d.logged_events(&task);
    assert!(
        of_kind(&logged, "compaction_finished").is_empty()
            && of_kind(&logged, "compaction_failed").is_empty()
    );
    assert_eq!(of_kind(&logged, "compaction_refused").len(), 2, "one a refusal");
    let log = d.client().call("log.get", json!({"task_id": task})).unwrap();
    assert!(!log.to_string().contains("\"subtype\":\"compaction\""), "no checkpoint");
    let text = String::from_utf8_lossy(&d.cli(&["log", &task]).stdout).to_string();
    assert!(text.contains("compaction refused") && !text.contains("failed: compaction failed"), "{text}");
    let state = d.client().call("task.status", json!({"task_id": task})).unwrap();
    assert_eq!(state["state"], "finished", "the task is as it was");
}
