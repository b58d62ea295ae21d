//! End-to-end: the daemon's life — init, config errors, one daemon per home, cancel, SIGTERM,
//! `kill -9` and resume.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use agentd_test_support::daemon::{team_config, TestDaemon};
use agentd_test_support::workspace::sample_workspace;
use agentd_test_support::*;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_agentd");

#[test]
fn init_writes_a_config_and_never_overwrites_one() {
    let d = TestDaemon::prepare(Path::new(BIN), "");
    let cfg = d.home().join("agentd.toml");
    std::fs::remove_file(&cfg).unwrap();
    let out = d.cli(&["init"]);
    assert_eq!(out.status.code(), Some(0));
    let written = std::fs::read_to_string(&cfg).unwrap();
    assert!(written.contains("[team.lead]"));
    std::fs::write(&cfg, "# mine\n").unwrap();
    let out = d.cli(&["init"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("left unchanged"));
    assert_eq!(std::fs::read_to_string(&cfg).unwrap(), "# mine\n");
}

#[test]
fn a_bad_config_names_the_key_and_the_file() {
    let bad = team_config("http://127.0.0.1:9/v1", "gpt-4o", "[tools]\ncommand_timeout = \"whenever\"\n");
    let d = TestDaemon::prepare(Path::new(BIN), &bad);
    let out = d.cli(&["serve"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("tools.command_timeout") && err.contains("agentd.toml"), "{err}");

    let unknown = team_config("http://127.0.0.1:9/v1", "gpt-4o", "[team.lead]\n");
    let d = TestDaemon::prepare(
        Path::new(BIN),
        &unknown.replace(
            "model = \"gpt-4o\"\n\n[team.coder]",
            "model = \"gpt-4o\"\nwindow = 8192\n\n[team.coder]",
        ),
    );
    let out = d.cli(&["serve"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("agentd.toml"), "{err}");
}

#[test]
fn a_second_serve_on_the_same_home_fails_and_harms_nothing() {
    let d = TestDaemon::start(Path::new(BIN), &team_config("http://127.0.0.1:9/v1", "gpt-4o", ""));
    let out = d.cli(&["serve"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("already serving"), "{err}");
    // The first daemon still answers on its socket.
    let status = d.client().call("daemon.status", json!({})).unwrap();
    assert!(status["uptime_s"].is_u64());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_while_the_model_is_thinking() {
    let server = ScriptedServer::start(vec![hang()]).await;
    let ws = tempfile::tempdir().unwrap();
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let task = d.submit("wait forever", ws.path());
    assert!(server.wait_for_requests(1, Duration::from_secs(10)).await);
    let out = d.cli(&["cancel", &task]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "cancelled");
    let events = d.events_until_end(&task, Duration::from_secs(10));
    assert_eq!(events.last().unwrap()["kind"], "task_cancelled");
    // The hung request was abandoned: the connection to the model is closed.
    assert!(server.wait_for_idle(Duration::from_secs(5)).await);
    // A cancelled task cannot be cancelled again or resumed.
    let e = d.client().call("task.cancel", json!({"task_id": task})).unwrap_err();
    assert_eq!(e.code, -32003);
    let e = d.client().call("task.resume", json!({"task_id": task})).unwrap_err();
    assert_eq!(e.code, -32003);
    // watch exits 1 on a cancelled task.
    assert_eq!(d.cli(&["watch", &task]).status.code(), Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_marks_running_tasks_interrupted_and_resume_continues() {
    let server = ScriptedServer::start(vec![hang()]).await;
    let ws = tempfile::tempdir().unwrap();
    sample_workspace(ws.path());
    let mut d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let task = d.submit("Fix the add function", ws.path());
    assert!(server.wait_for_requests(1, Duration::from_secs(10)).await);
    assert_eq!(d.stop(), Some(0), "{}", d.serve_log());
    assert!(!d.socket().exists(), "the socket is removed on a clean stop");

    server.push(vec![sse(vec![finish("resumed and done")])]);
    d.serve();
    let status = d.client().call("task.status", json!({"task_id": task})).unwrap();
    assert_eq!(status["state"], "interrupted");
    assert!(
        status["roles"]["lead"]["tokens"].as_u64().unwrap() > 0,
        "the gauge survives a restart: {status}"
    );
    let out = d.cli(&["resume", &task]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let events = d.events_until_end(&task, Duration::from_secs(20));
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert!(kinds.contains(&"task_interrupted") && kinds.contains(&"task_resumed"), "{kinds:?}");
    assert_eq!(events.last().unwrap()["kind"], "task_finished");
    // The objective was asked once: the resumed request carries the same single user message.
    let reqs = server.chat_requests();
    let last = reqs.last().unwrap();
    let users = last["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "user").count();
    assert_eq!(users, 1, "{last}");

    // `watch` of the whole history follows it through the interruption to the real end.
    let out = d.cli(&["watch", &task, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let watched: Vec<Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(watched, events, "every event, in order, from the first to the last");

    // A follow-up after the finish: watch goes on to the follow-up's end, as the daemon's stream does.
    server.push(vec![sse(vec![finish("followed up")])]);
    d.client().call("task.message", json!({"task_id": task, "text": "And one more thing"})).unwrap();
    let all = d.events_until_end(&task, Duration::from_secs(20));
    assert!(all.len() > events.len());
    assert_eq!(all.iter().filter(|e| e["kind"] == "task_finished").count(), 2);
    let out = d.cli(&["watch", &task, "--json"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), all.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_loses_nothing_and_resume_repairs_a_dangling_tool_call() {
    // The model asks for a slow command; the daemon is killed while it runs.
    let server = ScriptedServer::start(vec![
        sse(vec![tool_call("list_dir", json!({"path": "."}))]),
        sse(vec![delegate("coder", "run the slow check")]),
        sse(vec![tool_call("run_command", json!({"command": "sleep 30"}))]),
    ])
    .await;
    let ws = tempfile::tempdir().unwrap();
    sample_workspace(ws.path());
    let mut d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let task = d.submit("Check the project", ws.path());
    assert!(server.wait_for_requests(3, Duration::from_secs(20)).await);
    // Give the coder time to persist the tool call and start the command: its `tool_called` is logged
    // (the call's record alone comes first, and a crash between the two leaves no call to cut short).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let called =
            d.logged_events(&task).iter().any(|e| e["kind"] == "tool_called" && e["tool"] == "run_command");
        if called {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the coder never called the command");
        std::thread::sleep(Duration::from_millis(20));
    }
    let before =
        d.client().call("log.get", json!({"task_id": task})).unwrap()["records"].as_array().unwrap().len();
    d.kill9();

    server.push(vec![
        sse(vec![finish("the slow check was interrupted; nothing else to do")]),
        sse(vec![finish("checked")]),
    ]);
    d.serve();
    let listed = d.client().call("task.list", json!({})).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(listed[0]["state"], "interrupted");
    let after =
        d.client().call("log.get", json!({"task_id": task})).unwrap()["records"].as_array().unwrap().len();
    assert!(after > before, "every acknowledged record survived ({before} → {after}, plus the interruption)");

    d.client().call("task.resume", json!({"task_id": task})).unwrap();
    let events = d.events_until_end(&task, Duration::from_secs(30));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}");
    // Every call in the event history has its end: the one the crash cut short is marked
    // interrupted (effect unknown), before the task's own interruption.
    for called in events.iter().filter(|e| e["kind"] == "tool_called") {
        let ends: Vec<&Value> = events
            .iter()
            .filter(|e| e["kind"] == "tool_finished" && e["call_id"] == called["call_id"])
            .collect();
        assert_eq!(ends.len(), 1, "{called}: {ends:?}");
    }
    let cut: Vec<&Value> = events.iter().filter(|e| e["interrupted"] == true).collect();
    assert_eq!(cut.len(), 1, "{cut:?}");
    assert_eq!(
        (cut[0]["tool"].as_str(), cut[0]["ok"].as_bool(), cut[0]["role"].as_str()),
        (Some("run_command"), Some(false), Some("coder"))
    );
    let interrupted_at = events.iter().find(|e| e["kind"] == "task_interrupted").unwrap()["seq"].as_u64();
    assert!(cut[0]["seq"].as_u64() < interrupted_at);
    // Every request after the restart is well formed: each tool call has its result.
    for req in server.chat_requests().iter().skip(3) {
        let msgs = req["messages"].as_array().unwrap();
        for (i, m) in msgs.iter().enumerate() {
            for call in m["tool_calls"].as_array().into_iter().flatten() {
                let id = &call["id"];
                assert!(
                    msgs[i + 1..].iter().any(|r| r["role"] == "tool" && &r["tool_call_id"] == id),
                    "dangling call {id} in {req}"
                );
            }
        }
    }
    // The coder picked up where it was stopped (its repaired history says what happened), and its
    // summary went back to the lead as the delegation's result.
    let reqs = server.chat_requests();
    let coder_req = &reqs[3];
    let names: Vec<&str> = coder_req["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(!names.contains(&"delegate"), "the resumed request is the coder's");
    assert!(coder_req.to_string().contains("interrupted"), "the repaired result says what happened");
    let lead_last = reqs[4].to_string();
    assert!(lead_last.contains("the slow check was interrupted; nothing else to do"), "{lead_last}");
    assert!(events.iter().any(|e| e["kind"] == "delegation_returned"));
}
