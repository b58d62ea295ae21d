//! End-to-end: the disk fills mid-task. The task ends `failed` (the error naming storage), its
//! subscriber gets the end, another task can be cancelled, `daemon.status` shows the storage error —
//! and once space is freed the store heals without a restart: the ends that could not be written are
//! recorded, a new task runs to `task_finished`, and the event log is intact.
//!
//! Needs root to mount a small tmpfs for the daemon's home; elsewhere it prints `SKIPPED: …`.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use agentd_test_support::daemon::{team_config, TestDaemon};
use agentd_test_support::tmpfs::Tmpfs;
use agentd_test_support::*;
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_agentd");

fn status(d: &TestDaemon, task: &str) -> Value {
    d.client().call("task.status", json!({"task_id": task})).expect("task.status")
}

fn storage(d: &TestDaemon) -> Value {
    match d.client().call("daemon.status", json!({})) {
        Ok(s) => s["storage"].clone(),
        Err(e) => panic!("daemon.status: {e}; the daemon's log:\n{}", d.serve_log()),
    }
}

/// Polls until `f` holds, panicking with `what` and the last value after `timeout`.
fn wait_until(timeout: Duration, what: &str, mut f: impl FnMut() -> (bool, Value)) -> Value {
    let deadline = Instant::now() + timeout;
    loop {
        let (done, last) = f();
        if done {
            return last;
        }
        if Instant::now() > deadline {
            panic!("{what} within {timeout:?}; last: {last}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The task's whole event log, checked contiguous from 1.
fn event_log(d: &TestDaemon, task: &str) -> Vec<Value> {
    let log = d.client().call("log.get", json!({"task_id": task})).expect("log.get");
    let records = log["records"].as_array().cloned().unwrap_or_default();
    for (i, r) in records.iter().enumerate() {
        assert_eq!(r["seq"], json!(i as u64 + 1), "record seqs are contiguous: {records:#?}");
    }
    let events: Vec<Value> =
        records.iter().filter(|r| r["type"] == "event").map(|r| r["event"].clone()).collect();
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["seq"], json!(i as u64 + 1), "event seqs are contiguous: {events:#?}");
    }
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_fails_the_task_loudly_and_the_store_heals_without_a_restart() {
    let fs = match Tmpfs::mount("16m") {
        Ok(fs) => fs,
        Err(why) => {
            eprintln!("SKIPPED: a_full_disk_fails_the_task_loudly_and_the_store_heals: {why}");
            return;
        }
    };
    // B waits on a model that does not answer at all (no response head, so B writes nothing).
    let server = ScriptedServer::start(vec![delayed(Duration::from_secs(600), hang())]).await;
    let ws = tempfile::tempdir().unwrap();
    let home = tempfile::Builder::new().prefix("agentd-home").tempdir_in(fs.path()).unwrap();
    std::fs::write(home.path().join("agentd.toml"), team_config(&server.base_url(), "gpt-4o", "")).unwrap();
    let mut d = TestDaemon::in_home(Path::new(BIN), home);
    d.serve();

    // B waits on the model; A's answer (large) arrives after the disk is full.
    let b = d.submit("wait on the model", ws.path());
    assert!(server.wait_for_requests(1, Duration::from_secs(10)).await);
    let big = "the answer is long. ".repeat(20_000);
    server.push(vec![delayed(Duration::from_millis(1500), sse(vec![text(&big), finish("A done")]))]);
    let a = d.submit("answer at length", ws.path());
    assert!(server.wait_for_requests(2, Duration::from_secs(10)).await);
    let mut sub = d.client();
    sub.set_timeout(Some(Duration::from_secs(30)));
    sub.call("task.subscribe", json!({"task_id": a, "after_seq": 0})).unwrap();

    let filler = fs.path().join("filler");
    let _ = std::fs::write(&filler, vec![0x5a_u8; 64 << 20]);

    // A ends failed; its subscriber gets the end (the terminal event, or an unrecorded end).
    let mut seen = Vec::new();
    let end = loop {
        let n = sub.next_notification().expect("the subscriber of A gets the end, not a hang");
        if n["method"] == "task.end" {
            break n["params"].clone();
        }
        seen.push(n["params"].clone());
    };
    let a_status = wait_until(Duration::from_secs(10), "A is failed", || {
        let s = status(&d, &a);
        (s["state"] == "failed", s)
    });
    let error = a_status["error"].as_str().unwrap_or("");
    assert!(error.contains("storage"), "the error names storage: {a_status}");
    let recorded_at_once = a_status["recorded"] == json!(true);
    if recorded_at_once {
        assert_eq!(end["kind"], "task_failed", "{end}");
        assert_eq!(seen.last().unwrap()["kind"], "task_failed", "{seen:#?}");
    } else {
        assert_eq!(end["recorded"], json!(false), "{end}");
        assert_eq!(end["state"], "failed", "{end}");
        assert!(end["error"].as_str().unwrap_or("").contains("storage"), "{end}");
    }
    let listed = d.client().call("task.list", json!({})).unwrap();
    let listed_a = listed.as_array().unwrap().iter().find(|t| t["task_id"] == a.as_str()).cloned().unwrap();
    assert_eq!(listed_a["state"], "failed", "{listed_a}");

    // The storage error is reported; another task can still be cancelled.
    let s = storage(&d);
    assert_eq!(s["ok"], json!(false), "{s}");
    assert!(s["error"].as_str().is_some_and(|e| !e.is_empty()) && s["since"].is_string(), "{s}");
    let cli = d.cli(&["daemon"]);
    assert!(String::from_utf8_lossy(&cli.stderr).contains("storage is failing"), "{cli:?}");
    let cancelled =
        d.client().call("task.cancel", json!({"task_id": b})).expect("cancel works on a full disk");
    assert_eq!(cancelled["state"], "cancelled");
    let b_status = status(&d, &b);
    assert_eq!(b_status["state"], "cancelled", "{b_status}");
    assert_eq!(b_status["recorded"], json!(false), "{b_status}");
    // `watch` does not hang on an unrecorded end, and says it is not a success.
    let watch = d.cli(&["watch", &b]);
    assert_eq!(watch.status.code(), Some(1), "{watch:?}");

    // Space comes back: the store heals with the daemon still running.
    std::fs::remove_file(&filler).unwrap();
    let s = wait_until(Duration::from_secs(15), "the store heals", || {
        let s = storage(&d);
        (s["ok"] == json!(true) && s["unrecorded_ends"] == json!(0), s)
    });
    assert!(s.get("error").is_none(), "{s}");

    // The unrecorded ends are written now, with their terminal events, and nothing acknowledged
    // was lost: every event A's subscriber was sent is in the log, unchanged.
    let a_status = status(&d, &a);
    assert_eq!((a_status["state"].as_str(), a_status["recorded"].as_bool()), (Some("failed"), Some(true)));
    assert!(a_status["error"].as_str().unwrap_or("").contains("storage"), "{a_status}");
    let a_events = event_log(&d, &a);
    assert_eq!(a_events.last().unwrap()["kind"], "task_failed", "{a_events:#?}");
    for sent in &seen {
        assert!(a_events.contains(sent), "acknowledged event lost: {sent}");
    }
    let b_status = status(&d, &b);
    assert_eq!((b_status["state"].as_str(), b_status["recorded"].as_bool()), (Some("cancelled"), Some(true)));
    let b_events = event_log(&d, &b);
    assert_eq!(b_events.last().unwrap()["kind"], "task_cancelled", "{b_events:#?}");
    // A subscriber now replays A to its recorded end.
    let replayed = d.events_until_end(&a, Duration::from_secs(10));
    assert_eq!(replayed.last().unwrap()["kind"], "task_failed");

    // New work runs.
    server.push(vec![sse(vec![finish("healed")])]);
    let c = d.submit("after the heal", ws.path());
    let events = d.events_until_end(&c, Duration::from_secs(20));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}");
    event_log(&d, &c);
    assert_eq!(d.stop(), Some(0), "{}", d.serve_log());
    drop(d);
    drop(fs);
}
