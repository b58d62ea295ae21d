//! End-to-end: crash consistency under repeated `kill -9`. A long task (a lead delegating to a coder
//! that alternates slow commands and reads) is killed at random moments, the daemon restarted and the
//! task resumed, again and again. After every restart: no event a subscriber was sent is lost or
//! changed, event seqs are contiguous from 1. At the end: the task finishes, every `tool_called` has
//! exactly one `tool_finished` (the ones a crash cut short marked interrupted), and the evidence
//! verifies.
//!
//! CI runs a few kills (`CRASH_LOOP_KILLS`, default 4); `scripts/crash-loop.sh` runs 50.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use agentd_test_support::daemon::{team_config, RpcClient, TestDaemon};
use agentd_test_support::seeded::Rng;
use agentd_test_support::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_agentd");
/// Coder steps before it finishes, each a slow command or a read (`CRASH_LOOP_STEPS`).
fn steps() -> usize {
    std::env::var("CRASH_LOOP_STEPS").ok().and_then(|v| v.parse().ok()).unwrap_or(40)
}

/// The script as a function of the request, so that a resumed conversation continues where it is.
fn responder(body: &Value, steps: usize) -> Step {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let results = messages.iter().filter(|m| m["role"] == "tool").count();
    if is_summary_request(body) {
        return sse(vec![text("Summary: the coder is working through its steps.")]);
    }
    if is_lead_request(body) {
        return if results > 0 {
            sse(vec![finish("the coder is done")])
        } else {
            sse(vec![delegate("coder", "Do the steps")])
        };
    }
    // The coder's progress is in its own history: the step is the number of results it holds (a
    // repaired, interrupted call counts as a step done).
    if results >= steps {
        return sse(vec![finish(&format!("{steps} steps done"))]);
    }
    if results % 2 == 0 {
        let command = format!("sleep 0.15; echo step {results} >> progress.txt");
        sse(vec![tool_call("run_command", json!({"command": command}))])
    } else {
        sse(vec![tool_call("read_file", json!({"path": "notes.txt"}))])
    }
}

/// Follows the task's events from the start on a connection of its own, recording each as it is
/// sent, until the connection breaks (the daemon was killed) or the task's stream ends.
fn record(socket: &Path, task: &str, into: Arc<Mutex<Vec<Value>>>) -> std::thread::JoinHandle<()> {
    let (socket, task) = (socket.to_path_buf(), task.to_string());
    std::thread::spawn(move || {
        let Ok(mut c) = RpcClient::connect(&socket) else { return };
        c.set_timeout(Some(Duration::from_secs(60)));
        if c.call("task.subscribe", json!({"task_id": task, "after_seq": 0})).is_err() {
            return;
        }
        while let Ok(n) = c.next_notification() {
            if n["method"] == "task.end" {
                return;
            }
            if let Ok(mut v) = into.lock() {
                v.push(n["params"].clone());
            }
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_kill_9_loses_nothing_and_every_call_ends() {
    let kills: usize = std::env::var("CRASH_LOOP_KILLS").ok().and_then(|v| v.parse().ok()).unwrap_or(4);
    let seed: u64 = std::env::var("CRASH_LOOP_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x5eed);
    let mut rng = Rng(seed);
    let steps = steps();
    let server = ScriptedServer::builder().responder(move |b| responder(b, steps)).start().await;
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("notes.txt"), "the notes the coder reads between its commands\n").unwrap();
    let mut d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let task = d.submit("Run the steps", ws.path());
    let mut acknowledged: BTreeMap<u64, Value> = BTreeMap::new();
    let mut done = false;
    for round in 0..kills {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let follower = record(&d.socket(), &task, seen.clone());
        std::thread::sleep(Duration::from_millis(150 + rng.below(900)));
        d.kill9();
        let _ = follower.join();
        for e in seen.lock().unwrap().iter() {
            acknowledged.insert(e["seq"].as_u64().unwrap(), e.clone());
        }
        d.serve();
        // Nothing a subscriber was sent is lost or changed, and the seqs are contiguous.
        let events = d.logged_events(&task);
        let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
        assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "round {round}: seqs not contiguous");
        for (seq, e) in &acknowledged {
            assert_eq!(
                &events[*seq as usize - 1],
                e,
                "round {round}: event {seq} was sent, then lost or changed"
            );
        }
        let state = d.client().call("task.status", json!({"task_id": task})).unwrap()["state"].clone();
        if state == "finished" {
            done = true;
            eprintln!("crash loop: the task finished before kill {}", round + 1);
            break;
        }
        assert_eq!(state, "interrupted", "round {round}");
        d.client().call("task.resume", json!({"task_id": task})).unwrap();
    }
    let events =
        if done { d.logged_events(&task) } else { d.events_until_end(&task, Duration::from_secs(120)) };
    let last = events.last().unwrap();
    assert_eq!(last["kind"], "task_finished", "{last}\n{}", d.serve_log());
    // Every call has exactly one end; the ones a crash cut short say so.
    let mut ends: BTreeMap<String, usize> = BTreeMap::new();
    for e in events.iter().filter(|e| e["kind"] == "tool_finished") {
        *ends.entry(e["call_id"].as_str().unwrap().to_string()).or_default() += 1;
    }
    for called in events.iter().filter(|e| e["kind"] == "tool_called") {
        assert_eq!(ends.get(called["call_id"].as_str().unwrap()), Some(&1), "{called}");
    }
    let interrupted = events.iter().filter(|e| e["interrupted"] == true).count();
    let interruptions = events.iter().filter(|e| e["kind"] == "task_interrupted").count();
    let verify = d.cli(&["evidence", "verify"]);
    assert_eq!(verify.status.code(), Some(0), "{}", String::from_utf8_lossy(&verify.stdout));
    eprintln!(
        "crash loop: seed {seed}, {interruptions} kills survived, {} events, {interrupted} calls ended as interrupted, \
         {} steps in progress.txt",
        events.len(),
        std::fs::read_to_string(ws.path().join("progress.txt")).unwrap_or_default().lines().count()
    );
}
