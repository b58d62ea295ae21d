//! agentd's main job, end to end, in one command:
//!
//! ```text
//! cargo run --release --example team_demo
//! ```
//!
//! A scripted OpenAI-compatible model server plays the models; the real `agentd` daemon runs in a
//! temporary home against a copy of a tiny Rust crate whose `add` subtracts. The lead reads the code,
//! delegates the fix to the coder, the coder edits and checks it, and both finish. One rate limit (HTTP
//! 429 with `Retry-After: 1`) is thrown in to show a fault being handled. The demo prints every event as
//! it happens, then the task's status, the diff, the lead's context gauge and the tail of the log.
//! Exit code 0 when the task finished.
//!
//! With the dashboard (`cargo run --release --example team_demo -- --dashboard [ADDR]`, or
//! `AGENTD_DASHBOARD=1` / `AGENTD_DASHBOARD=ADDR`; ADDR defaults to a free port on 127.0.0.1) the
//! daemon also serves its web dashboard, the demo prints the login URL (`agentd dashboard`) and the
//! scripted model takes a second per answer, so the run and its chart can be watched live. On a
//! terminal it waits for Enter before submitting and again before stopping the daemon.

// A benchmark or demo, not the daemon: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use agentd_client::render::{event_line, one_line};
use agentd_test_support::workspace::sample_workspace;
use agentd_test_support::*;
use common::{agentd_binary, is_terminal, team_config, Daemon, Result};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

const OBJECTIVE: &str = "Fix the add function so the tests pass";

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("team_demo: {e}");
            ExitCode::from(2)
        }
    }
}

/// What the models say, one step per model request, and a short description of each tool call's
/// arguments (keyed by call id) so the event lines can show what was asked for.
fn story() -> (Vec<Step>, HashMap<String, String>) {
    let mut args = HashMap::new();
    let mut call = |id: &str, name: &str, a: Value, shown: &str| {
        args.insert(id.to_string(), shown.to_string());
        tool_call_with_id(id, name, a)
    };
    let steps = vec![
        // 1. lead: think, then look at the code.
        sse_with_usage(
            vec![
                reasoning("The objective names add(); read src/lib.rs before deciding anything."),
                call("lead-1", "read_file", json!({"path": "src/lib.rs"}), "src/lib.rs"),
            ],
            1171,
            41,
        ),
        // 2. the provider is busy: 429 with Retry-After: 1 — the daemon waits and sends the same request again.
        rate_limited(Some("1")),
        // 3. lead: found the bug, hands the change to the coder.
        sse_with_usage(
            vec![
                reasoning("add() returns a - b but its test expects add(2, 3) == 5: the operator is wrong."),
                text("add subtracts; the coder will fix it."),
                call(
                    "lead-2",
                    "delegate",
                    json!({"to": "coder", "objective": "In src/lib.rs, make add() return a + b instead of a - b"}),
                    "to coder",
                ),
            ],
            1305,
            58,
        ),
        // 4. coder: reads the file itself (it has its own history).
        sse(vec![call("coder-1", "read_file", json!({"path": "src/lib.rs"}), "src/lib.rs")]),
        // 5. coder: the edit.
        sse_with_usage(
            vec![call(
                "coder-2",
                "edit_file",
                json!({"path": "src/lib.rs", "old_text": "a - b", "new_text": "a + b"}),
                "src/lib.rs: a - b → a + b",
            )],
            1652,
            47,
        ),
        // 6. coder: checks the result.
        sse(vec![call(
            "coder-3",
            "run_command",
            json!({"command": "grep -n 'a + b' src/lib.rs"}),
            "grep -n 'a + b' src/lib.rs",
        )]),
        // 7. coder: done.
        sse_with_usage(
            vec![call(
                "coder-4",
                "finish",
                json!({"summary": "add() now returns a + b (src/lib.rs line 5)"}),
                "",
            )],
            1780,
            30,
        ),
        // 8. lead: done.
        sse_with_usage(
            vec![
                text("The coder changed the operator; the test's expectation add(2, 3) == 5 now holds."),
                call(
                    "lead-3",
                    "finish",
                    json!({"summary": "Fixed: add() in src/lib.rs returned a - b; the coder changed it to a + b."}),
                    "",
                ),
            ],
            1419,
            52,
        ),
    ];
    (steps, args)
}

/// The dashboard's address when one was asked for: `--dashboard [ADDR]` or `AGENTD_DASHBOARD`.
fn dashboard_address() -> Option<String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(i) = args.iter().position(|a| a == "--dashboard") {
        let addr = args.get(i + 1).filter(|a| !a.starts_with("--")).cloned();
        return Some(addr.unwrap_or_else(|| "127.0.0.1:0".to_string()));
    }
    match std::env::var("AGENTD_DASHBOARD") {
        Ok(v) if v.is_empty() || v == "0" => None,
        Ok(v) if v == "1" => Some("127.0.0.1:0".to_string()),
        Ok(v) => Some(v),
        Err(_) => None,
    }
}

/// On a terminal, waits for Enter (a person is watching); elsewhere, does not wait.
fn pause(prompt: &str) {
    // SAFETY: isatty only inspects the descriptor.
    if unsafe { libc::isatty(0) } == 1 {
        println!("{prompt}");
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
    }
}

fn run() -> Result<bool> {
    let bin = agentd_binary()?;
    let rt = common::runtime()?;
    let dashboard = dashboard_address();
    let (mut steps, call_args) = story();
    if dashboard.is_some() {
        // Slow enough to watch: a second per answer.
        steps = steps.into_iter().map(|s| delayed(Duration::from_secs(1), s)).collect();
    }
    // Model turns the story has (the 429 is a fault, not a turn): the progress denominator.
    let total = steps
        .iter()
        .filter(|s| {
            matches!(s, Step::Respond(_))
                || matches!(s, Step::Delayed(_, inner) if matches!(**inner, Step::Respond(_)))
        })
        .count();
    let server = rt.block_on(
        ScriptedServer::builder()
            .model("qwen3-coder")
            .max_model_len(32_768)
            // Like vLLM and llama.cpp: the server counts with the model's own tokenizer, and
            // reports the exact size of every request it answers (agentd calibrates from it).
            .tokenize_endpoint(true)
            .report_usage(true)
            .script(steps)
            .start(),
    );

    // The workspace: a fresh copy of the sample crate, so nothing outside the temp dir is touched.
    let ws = tempfile::Builder::new()
        .prefix("agentd-demo-ws")
        .tempdir()
        .map_err(|e| format!("cannot create a temporary workspace: {e}"))?;
    sample_workspace(ws.path());
    let lib = ws.path().join("src/lib.rs");
    let before = read(&lib)?;

    let http = dashboard.as_ref().map(|addr| format!("[http]\nlisten = \"{addr}\"\n")).unwrap_or_default();
    let mut daemon = Daemon::start(&bin, &team_config(&server.base_url(), "qwen3-coder", &http))?;
    println!(
        "agentd team demo — scripted model at {}, daemon home {}\nworkspace: a copy of a tiny crate whose add() subtracts (path in `status` below)",
        server.base_url(),
        daemon.home().display()
    );
    if dashboard.is_some() {
        let url = cli_stdout(&daemon, &["dashboard"])?;
        println!("\ndashboard: open {}", url.trim());
        pause("press Enter to submit the task (the page shows it as it runs)");
    }

    let mut client = daemon.client()?;
    let submitted = client
        .call("task.submit", json!({"objective": OBJECTIVE, "workspace": ws.path()}))
        .map_err(|e| format!("task.submit failed: {e}"))?;
    let task_id = submitted["task_id"].as_str().ok_or("task.submit returned no task_id")?.to_string();
    println!("submitted \"{OBJECTIVE}\" → task {task_id}");

    // Follow the events: `[turn (request_sent so far)/(turns scripted) spinner] elapsed  seq role what`.
    client.set_timeout(Some(Duration::from_secs(30)));
    client
        .call("task.subscribe", json!({"task_id": task_id, "after_seq": 0}))
        .map_err(|e| format!("task.subscribe failed: {e}"))?;
    let started = Instant::now();
    let mut requests = 0;
    const SPINNER: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
    let mut frame = 0;
    let mut last_kind = String::new();
    let mut ended = false;
    while !ended {
        let n = client.next_notification().map_err(|e| {
            format!("no event for 30s ({e}); the daemon's log:\n{}", tail(&daemon.serve_log(), 20))
        })?;
        let e = &n["params"];
        last_kind = e["kind"].as_str().unwrap_or("").to_string();
        ended = is_terminal(e);
        let event: agentd_protocol::Event = serde_json::from_value(e.clone())
            .map_err(|err| format!("an event the demo cannot read: {err}: {e}"))?;
        if last_kind == "request_sent" {
            requests += 1;
        }
        let mut line = event_line(&event);
        if last_kind == "tool_called" {
            if let Some(a) = call_args.get(e["call_id"].as_str().unwrap_or("")).filter(|a| !a.is_empty()) {
                line.push_str(&format!(" {a}"));
            }
        }
        let spin = match last_kind.as_str() {
            "task_finished" => '✓',
            _ if ended => '✗',
            _ => SPINNER[frame % SPINNER.len()],
        };
        frame += 1;
        println!("[turn {requests}/{total} {spin}] {:>5.2}s {line}", started.elapsed().as_secs_f64());
    }
    let finished = last_kind == "task_finished";

    section("agentd status");
    print!("{}", cli_stdout(&daemon, &["status", &task_id])?);

    section("src/lib.rs, before → after");
    let after = read(&lib)?;
    print_diff(&before, &after);

    section("agentd context --role lead");
    print!("{}", cli_stdout(&daemon, &["context", &task_id, "--role", "lead"])?);

    section("agentd log (last 10 lines)");
    let log = cli_stdout(&daemon, &["log", &task_id])?;
    for l in log.lines().rev().take(10).collect::<Vec<_>>().into_iter().rev() {
        println!("{}", one_line(l, 150));
    }

    if dashboard.is_some() {
        pause("\nthe dashboard stays up: press Enter to stop the daemon");
    }
    let code = daemon.stop();
    let asked = server.chat_requests().len();
    println!(
        "\n{} — {asked} model requests (1 answered 429), {}; daemon stopped with SIGTERM (exit {}).",
        if finished { "task finished" } else { "TASK DID NOT FINISH" },
        if after.contains("a + b") && !after.contains("a - b") { "add() fixed" } else { "add() NOT fixed" },
        code.map_or("?".to_string(), |c| c.to_string())
    );
    Ok(finished && code == Some(0))
}

fn read(p: &Path) -> Result<String> {
    std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))
}

fn section(title: &str) {
    println!("\n── {title} {}", "─".repeat(60usize.saturating_sub(title.chars().count())));
}

fn cli_stdout(d: &Daemon, args: &[&str]) -> Result<String> {
    let out = d.cli(args)?;
    if !out.status.success() {
        return Err(format!(
            "agentd {} exited with {}: {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A minimal line diff (longest common subsequence; the files are tiny): changed lines only, numbered.
fn print_diff(before: &str, after: &str) {
    let a: Vec<&str> = before.lines().collect();
    let b: Vec<&str> = after.lines().collect();
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] { lcs[i + 1][j + 1] + 1 } else { lcs[i + 1][j].max(lcs[i][j + 1]) };
        }
    }
    let (mut i, mut j, mut changed) = (0, 0, false);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            println!("{:>4} - {}", i + 1, a[i]);
            i += 1;
            changed = true;
        } else {
            println!("{:>4} + {}", j + 1, b[j]);
            j += 1;
            changed = true;
        }
    }
    if !changed {
        println!("(no change)");
    }
}
