//! End-to-end: the coder's `run_command` through the real daemon runs sandboxed. The daemon holds a
//! provider key in its environment; the command tries to read it, the daemon's home and socket, the
//! world outside the workspace, and to leave a `setsid` child behind.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use agentd_test_support::daemon::{team_config, TestDaemon};
use agentd_test_support::*;
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_agentd");

fn landlock_abi() -> i64 {
    // SAFETY: landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION) only returns a number.
    unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, std::ptr::null::<u8>(), 0usize, 1u32) }
}

/// The text of the first tool result the coder got back.
fn tool_result(server: &ScriptedServer) -> String {
    for req in server.chat_requests() {
        for m in req["messages"].as_array().into_iter().flatten() {
            if m["role"] == "tool" && m["content"].as_str().is_some_and(|c| c.contains("probe-start")) {
                return m["content"].as_str().unwrap_or_default().to_string();
            }
        }
    }
    String::new()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_coders_commands_cannot_reach_the_key_the_home_or_the_world() {
    if landlock_abi() < 1 {
        println!("SKIPPED: this kernel does not enforce Landlock");
        return;
    }
    let probe = format!("/tmp/agentd-e2e-sandbox-probe-{}", std::process::id());
    let ws = tempfile::tempdir().unwrap();
    let config = team_config("http://127.0.0.1:9/v1", "gpt-4o", "");
    let mut d = TestDaemon::prepare(Path::new(BIN), &config);
    let home = d.home().to_path_buf();
    let command = format!(
        "echo probe-start; env; echo \"environ: $(cat /proc/$PPID/environ 2>&1 | tr '\\0' ' ' | head -c 200)\"; \
         cat {home}/agentd.toml && echo READ-HOME; \
         /usr/bin/python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); s.connect('{home}/agentd.sock'); print('CONNECTED')\"; \
         touch {probe} && echo WROTE-TMP; touch inside && echo wrote-inside; \
         setsid sleep 1000 >/dev/null 2>&1 & echo \"pid=$!\"",
        home = home.display(),
    );
    let server = ScriptedServer::start(vec![
        sse(vec![delegate("coder", "probe the sandbox")]),
        sse(vec![tool_call("run_command", json!({ "command": command }))]),
        sse(vec![finish("probed")]),
        sse(vec![finish("done")]),
    ])
    .await;
    std::fs::write(home.join("agentd.toml"), team_config(&server.base_url(), "gpt-4o", "")).unwrap();
    d.set_env(&[("RUST_LOG", "info"), ("SECRET_PROVIDER_KEY", "sk-e2e-do-not-leak")]);
    d.serve();
    let task = d.submit("Probe the sandbox", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(30));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}");

    let out = tool_result(&server);
    println!("{out}");
    assert!(out.contains("probe-start"), "{out}");
    assert!(!out.contains("sk-e2e-do-not-leak") && !out.contains("SECRET_PROVIDER_KEY"), "{out}");
    assert!(!out.contains("READ-HOME") && !out.contains("[providers.scripted]"), "{out}");
    assert!(!out.contains("CONNECTED"), "{out}");
    assert!(!out.contains("WROTE-TMP") && !Path::new(&probe).exists(), "{out}");
    assert!(out.contains("wrote-inside") && ws.path().join("inside").exists(), "{out}");
    let pid: i32 = out
        .lines()
        .find_map(|l| l.strip_prefix("pid="))
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("no pid in {out}"));
    let started = Instant::now();
    let alive = |pid: i32| {
        // SAFETY: signal 0 only checks that the pid exists.
        let exists = unsafe { libc::kill(pid, 0) } == 0;
        exists && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z "))
    };
    while alive(pid) {
        if started.elapsed() > Duration::from_secs(3) {
            // SAFETY: kill on the pid the command reported.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            if d.serve_log().contains("cgroup=false") {
                println!("SKIPPED: setsid child: no cgroup for commands here (the daemon says so)");
                break;
            }
            panic!("the setsid child {pid} outlived its call");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(d.serve_log().contains("command sandbox"), "{}", d.serve_log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_verify_command_runs_in_the_same_sandbox() {
    if landlock_abi() < 1 {
        println!("SKIPPED: this kernel does not enforce Landlock");
        return;
    }
    let probe = format!("/tmp/agentd-e2e-verify-probe-{}", std::process::id());
    // First attempt: marks itself inside the workspace, then tries to write outside it and fails.
    // Second attempt: passes.
    let verify = format!("if [ -e attempted ]; then true; else touch attempted && touch {probe}; fi");
    let server = ScriptedServer::start(vec![
        sse(vec![delegate("coder", "make it pass")]),
        sse(vec![finish("first try")]),
        sse(vec![finish("second try")]),
        sse(vec![finish("done")]),
    ])
    .await;
    let ws = tempfile::tempdir().unwrap();
    let extra = format!("verify = {verify:?}\n");
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", &extra));
    let task = d.submit("Make it pass", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(30));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}");
    let rejected = events.iter().filter(|e| e["kind"] == "finish_rejected").count();
    assert_eq!(rejected, 1, "{events:#?}");
    assert!(ws.path().join("attempted").exists(), "verify ran in the workspace");
    assert!(!Path::new(&probe).exists(), "verify could write outside the workspace");
    let told = server.chat_requests().iter().any(|r| {
        r["messages"].as_array().into_iter().flatten().any(|m| {
            m["role"] == "tool"
                && m["content"]
                    .as_str()
                    .is_some_and(|c| c.contains("finish rejected") && c.contains("Permission denied"))
        })
    });
    assert!(told, "the coder is told why verify failed");
}
