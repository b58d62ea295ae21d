//! End-to-end: what a daemon kept up for months must not accumulate. A finished, failed or cancelled
//! task holds no file descriptor: not its workspace's, not its working copies', not a command's.
//!
//! The model is a scripted server; the daemon is the real binary, whose `/proc/PID/fd` is read.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use agentd_test_support::daemon::{team_config, TestDaemon};
use agentd_test_support::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_agentd");

/// The descriptors the daemon `pid` holds, each as what it points to.
fn descriptors(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .map(|p| p.display().to_string())
        .collect()
}

/// A branch's request, by its handoff's objective.
fn part_of(body: &Value) -> Option<String> {
    let opening = body["messages"][1]["content"].as_str().unwrap_or_default();
    opening.strip_prefix("Part ").map(|p| p.chars().take(1).collect())
}

fn results(body: &Value) -> usize {
    body["messages"].as_array().map_or(0, |m| m.iter().filter(|m| m["role"] == "tool").count())
}

/// What a task's objective asks of the scripted model: to finish, to fail (the server refuses the
/// lead's request after its coders return with a 400) or to be cancelled (the coders' command never answers).
fn fate(body: &Value) -> &'static str {
    let said = body["messages"].to_string();
    if said.contains("Fail:") {
        "fail"
    } else if said.contains("Stop:") {
        "stop"
    } else {
        "finish"
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_finished_failed_and_cancelled_tasks_leave_no_descriptor_behind() {
    // Each task: the lead hands three parts to three coders at once (each in a working copy), each
    // writes a file and runs a command; the lead finishes. One task in ten fails at the lead's second
    // request, one in ten is cancelled while its coders wait for the model.
    let server = ScriptedServer::builder()
        .responder(|body| match (part_of(body), results(body), fate(body)) {
            (Some(part), 0, _) => sse(vec![tool_call(
                "write_file",
                json!({"path": format!("{part}.txt"), "content": format!("{part}\n")}),
            )]),
            (Some(_), 1, "stop") => hang(),
            (Some(_), 1, _) => sse(vec![tool_call("run_command", json!({"command": "ls > listing.txt"}))]),
            (Some(part), _, _) => sse(vec![finish(&format!("{part} done"))]),
            (None, 0, fate) => {
                let word = match fate {
                    "fail" => "Fail:",
                    "stop" => "Stop:",
                    _ => "Go:",
                };
                sse(["A", "B", "C"]
                    .iter()
                    .map(|p| {
                        tool_call("delegate", json!({"to": "coder", "objective": format!("Part {p} {word}")}))
                    })
                    .collect())
            }
            (None, _, "fail") => server_error(400, "this request is refused"),
            (None, _, _) => sse(vec![finish("all done")]),
        })
        .start()
        .await;
    let copies = tempfile::tempdir().unwrap();
    let extra = format!("[tools]\ncopies = \"{}\"\n", copies.path().display());
    let config = team_config(&server.base_url(), "gpt-4o", &extra).replacen(
        "[team.coder]\n",
        "[team.coder]\nmax_instances = 3\n",
        1,
    );
    let d = TestDaemon::start(Path::new(BIN), &config);
    let pid = d.pid().unwrap();
    let root = tempfile::tempdir().unwrap();
    let mut ends = std::collections::BTreeMap::<String, usize>::new();
    let mut run = |n: usize| -> PathBuf {
        let ws = root.path().join(format!("ws{n}"));
        std::fs::create_dir(&ws).unwrap();
        let objective = match n % 10 {
            4 => "Fail: three parts",
            7 => "Stop: three parts",
            _ => "Three parts",
        };
        let task = d.submit(objective, &ws);
        if n % 10 == 7 {
            // Cancelled once its three coders wait for their second answer.
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while d.logged_events(&task).iter().filter(|e| e["kind"] == "files_changed").count() < 3 {
                assert!(std::time::Instant::now() < deadline, "the coders never wrote: {}", d.serve_log());
                std::thread::sleep(Duration::from_millis(20));
            }
            d.client().call("task.cancel", json!({"task_id": task})).unwrap();
        }
        let events = d.events_until_end(&task, Duration::from_secs(60));
        let last = events.last().unwrap()["kind"].as_str().unwrap().to_string();
        *ends.entry(last).or_default() += 1;
        ws
    };
    for n in 0..3 {
        run(n);
    }
    let warm = descriptors(pid);
    for n in 3..103 {
        run(n);
    }
    assert_eq!(
        ends.iter().map(|(k, v)| (k.as_str(), *v)).collect::<Vec<_>>(),
        [("task_cancelled", 10), ("task_failed", 10), ("task_finished", 83)],
        "{}",
        d.serve_log()
    );
    // The last run's end is recorded a moment before it hands the task back.
    let ours = |now: &[String]| -> Vec<String> {
        let (ws, cp) = (root.path().display().to_string(), copies.path().display().to_string());
        now.iter().filter(|p| p.starts_with(&ws) || p.starts_with(&cp)).cloned().collect()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let now = loop {
        let now = descriptors(pid);
        if (ours(&now).is_empty() && now.len() <= warm.len()) || std::time::Instant::now() > deadline {
            break now;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    println!("descriptors held by the daemon: {} after 3 tasks, {} after 103", warm.len(), now.len());
    assert_eq!(ours(&now), Vec::<String>::new(), "descriptors on ended tasks' workspaces and copies");
    assert!(
        now.len() <= warm.len(),
        "{} descriptors after 3 tasks, {} after 103: {:#?}",
        warm.len(),
        now.len(),
        now
    );
}
