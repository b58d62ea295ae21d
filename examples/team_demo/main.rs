//! agentd's main job, end to end, in one command:
//!
//! ```text
//! cargo run --release --example team_demo
//! ```
//!
//! A scripted OpenAI-compatible model server plays the models; the real `agentd` daemon runs in a
//! temporary home against a small bookkeeping crate, written into a temporary directory, whose
//! monthly totals all come out negated. The lead reads the crate's README and delegates to the coder,
//! which runs `./check.sh` (it stands in for `cargo test`: it prints the report `cargo test` gives
//! for the crate's current `src/money.rs`, so no compiler is needed), reads the failing modules one
//! by one (~2,500 tokens each), finds that `money::add` subtracts, fixes it and runs the check again.
//!
//! The history that builds up is what agentd exists for. The server declares a 32,768-token window
//! but takes only 16,384 (as a server that lists the model's full length but runs it with a smaller
//! context does): the coder's first request over 16,384 is refused with the provider's HTTP 400
//! `context_length_exceeded`, agentd learns the window from it (`window_learned`), compacts the
//! history and resends; later requests compact at the learned window's trigger. Summaries are
//! written by the same scripted model, from what each summary request carries; the scripted team,
//! too, decides each step from what its request holds (a compacted history included). One rate limit
//! (HTTP 429 with `Retry-After: 1`) is thrown in as well.
//!
//! The demo prints every event as it happens (each compaction: tokens before → after, summary
//! batches and the evidence id of what left the request), then the task's status, the diff, the
//! compactions and the refusal, the lead's and the coder's context gauges, the `agentd evidence read`
//! command for an archive with the first lines it prints, and the tail of the log. Exit code 0 only
//! when the task finished, the bug is fixed, the coder compacted at least twice and a window was
//! learned from a refusal; otherwise it says which of these did not happen and exits 1.
//!
//! With the dashboard (`cargo run --release --example team_demo -- --dashboard [ADDR]`, or
//! `AGENTD_DASHBOARD=1` / `AGENTD_DASHBOARD=ADDR`; ADDR defaults to a free port on 127.0.0.1) the
//! daemon also serves its web dashboard, the demo prints the login URL (`agentd dashboard`) and the
//! scripted model takes a second per answer, so the run and its chart can be watched live. On a
//! terminal it waits for Enter before submitting and again before stopping the daemon.//!
//! The modules: `workspace` (the bookkeeping crate and its `./check.sh`), `seen` (what a request
//! shows was done), `team` (the scripted lead, coder and summariser), `printing` (the sections,
//! the diff and the CLI's output); this file runs the demo and checks its outcome.

// A benchmark or demo, not the daemon: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

// The examples' shared helpers live beside this directory, not in it.
#[path = "../common/mod.rs"]
mod common;
mod printing;
mod seen;
mod team;
mod workspace;

use agentd_client::render::{event_line, one_line};
use agentd_test_support::*;
use common::{agentd_binary, is_terminal, team_config, Daemon, Result};
use printing::{cli_stdout, print_diff, read, section, strip_ansi, tail};
use seen::after_marker;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use team::Team;
use workspace::write_workspace;

pub const OBJECTIVE: &str =
    "The monthly report's totals are all wrong: find out why and make ./check.sh pass";
/// What the lead hands to the coder.
pub const CODER_OBJECTIVE: &str = "Run ./check.sh, trace the wrong totals through the modules whose tests \
                               fail, fix the cause and run ./check.sh again until it passes";
/// The window the server declares (`max_model_len` in `/v1/models`) and the one it really takes.
pub const DECLARED_WINDOW: u64 = 32_768;
pub const REAL_WINDOW: u64 = 16_384;
/// The modules with failing tests, in the order `./check.sh` reports them (and the coder reads them).
pub const MODULES: &[(&str, &str)] = &[
    ("report", "The monthly report"),
    ("ledger", "The general ledger"),
    ("invoice", "Invoices"),
    ("payroll", "Payroll"),
    ("tax", "Tax provisions"),
    ("budget", "Budgets"),
    ("expenses", "Expense claims"),
    ("accounts", "Account balances"),
    ("forecast", "Cash forecasts"),
    ("audit", "The audit trail"),
    ("receivables", "Accounts receivable"),
    ("payables", "Accounts payable"),
    ("assets", "Fixed assets"),
    ("inventory", "Inventory valuation"),
];
/// The shared helper the coder reads last: where the bug is.
pub const MONEY: &str = "src/money.rs";
pub const BUGGY_ADD: &str = "pub fn add(a: Cents, b: Cents) -> Cents {\n    a - b\n}";
pub const FIXED_ADD: &str = "pub fn add(a: Cents, b: Cents) -> Cents {\n    a + b\n}";
/// Accounts each module has functions for (three per account): the size of a module.
pub const ACCOUNTS_PER_MODULE: u32 = 9;

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
// ---------------------------------------------------------------------------------------------
// The run.

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
    let shown = Arc::new(Mutex::new(HashMap::new()));
    let team = Team { shown: shown.clone(), calls: AtomicUsize::new(0) };
    // Slow enough to watch with the dashboard: a second per answer.
    let delay = dashboard.as_ref().map(|_| Duration::from_secs(1));
    let server = rt.block_on(
        ScriptedServer::builder()
            .model("qwen3-coder")
            // Declares 32K, takes 16K: a request over 16K is refused with `context_length_exceeded`.
            .max_model_len(DECLARED_WINDOW)
            .window(REAL_WINDOW)
            // Like vLLM and llama.cpp: the server counts with the model's own tokenizer, and
            // reports the exact size of every request it answers (agentd calibrates from it).
            .tokenize_endpoint(true)
            .report_usage(true)
            // The first request meets a busy provider: 429 with Retry-After: 1 — the daemon waits
            // and sends the same request again.
            .script([rate_limited(Some("1"))])
            .responder(move |body| {
                let step = team.answer(body);
                match delay {
                    Some(d) => delayed(d, step),
                    None => step,
                }
            })
            .start(),
    );

    // The workspace: written into a temp dir, so nothing outside it is touched.
    let ws = tempfile::Builder::new()
        .prefix("agentd-demo-ws")
        .tempdir()
        .map_err(|e| format!("cannot create a temporary workspace: {e}"))?;
    write_workspace(ws.path())?;
    let money = ws.path().join(MONEY);
    let before = read(&money)?;

    let http = dashboard.as_ref().map(|addr| format!("[http]\nlisten = \"{addr}\"\n")).unwrap_or_default();
    let mut daemon = Daemon::start(&bin, &team_config(&server.base_url(), "qwen3-coder", &http))?;
    println!(
        "agentd team demo — scripted model at {} (declares a {DECLARED_WINDOW}-token window, takes \
         {REAL_WINDOW}), daemon home {}\nworkspace: a bookkeeping crate of {} modules whose totals all come \
         out negated (path in `status` below)",
        server.base_url(),
        daemon.home().display(),
        MODULES.len() + 1
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
    println!("submitted \"{OBJECTIVE}\" → task {task_id}\n");

    // Follow the events: `[req (request_sent so far) spinner] elapsed  seq role what`.
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
    let mut events: Vec<Value> = Vec::new();
    while !ended {
        let n = client.next_notification().map_err(|e| {
            format!("no event for 30s ({e}); the daemon's log:\n{}", tail(&daemon.serve_log(), 20))
        })?;
        let e = &n["params"];
        last_kind = e["kind"].as_str().unwrap_or("").to_string();
        ended = is_terminal(e);
        let event: agentd_protocol::Event = serde_json::from_value(e.clone())
            .map_err(|err| format!("an event the demo cannot read: {err}: {e}"))?;
        events.push(e.clone());
        if last_kind == "request_sent" {
            requests += 1;
        }
        let mut line = event_line(&event);
        if last_kind == "tool_called" {
            let call_id = e["call_id"].as_str().unwrap_or("");
            if let Some(a) = shown.lock().unwrap().get(call_id).filter(|a| !a.is_empty()) {
                line.push_str(&format!(" {a}"));
            }
        }
        let spin = match last_kind.as_str() {
            "task_finished" => '✓',
            _ if ended => '✗',
            _ => SPINNER[frame % SPINNER.len()],
        };
        frame += 1;
        println!("[req {requests:>2} {spin}] {:>5.2}s {line}", started.elapsed().as_secs_f64());
        if last_kind == "window_learned" && e["source"] == "error" {
            println!(
                "                        ↳ the provider refused the request above (HTTP 400 \
                 context_length_exceeded, stating its {}-token limit): agentd keeps that window for this \
                 server and model",
                e["new_window"]
            );
        }
    }
    let finished = last_kind == "task_finished";
    let elapsed = started.elapsed();

    section("agentd status");
    print!("{}", cli_stdout(&daemon, &["status", &task_id])?);

    section("src/money.rs, before → after");
    let after = read(&money)?;
    print_diff(&before, &after);
    let fixed = after.contains(FIXED_ADD);

    let of_kind = |kind: &str| events.iter().filter(|e| e["kind"] == kind).collect::<Vec<_>>();
    let compactions = of_kind("compaction_finished");
    let coder_compactions = compactions.iter().filter(|e| e["role"] == "coder").count();
    let learned: Vec<&Value> =
        of_kind("window_learned").into_iter().filter(|e| e["source"] == "error").collect();

    section("the refusal the window was learned from");
    // What the provider said, as the daemon logged it.
    let log = strip_ansi(&daemon.serve_log());
    for l in log.lines().filter_map(|l| after_marker(l, "window learned from a refusal")) {
        println!("daemon log: window learned from a refusal {}", one_line(l, 400));
    }
    for e in &learned {
        println!(
            "window_learned: {} → {} tokens (source: {})",
            e["old_window"],
            e["new_window"],
            e["source"].as_str().unwrap_or("")
        );
    }
    if learned.is_empty() {
        println!("(no window was learned from a refusal)");
    }
    println!("the server refused {} request(s) as over its window", server.refused());

    section("compactions");
    for c in &compactions {
        let n = |k: &str| c[k].as_u64().unwrap_or(0);
        let batches = n("batches");
        println!(
            "seq {:>3}  {:<6} {:>6} → {:>5} tokens, {batches} summary {}, archive {}",
            n("seq"),
            c["role"].as_str().unwrap_or(""),
            n("tokens_before"),
            n("tokens_after"),
            if batches == 1 { "batch" } else { "batches" },
            c["archive_id"].as_str().unwrap_or("")
        );
    }
    if compactions.is_empty() {
        println!("(none)");
    }

    section("agentd context --role lead");
    print!("{}", cli_stdout(&daemon, &["context", &task_id, "--role", "lead"])?);
    section("agentd context --role coder");
    print!("{}", cli_stdout(&daemon, &["context", &task_id, "--role", "coder"])?);

    if let Some(archive) = compactions.first().and_then(|c| c["archive_id"].as_str()) {
        section("reading a compaction's archive back");
        let args = ["evidence", "read", archive, "--lines", "--limit", "4"];
        println!(
            "what the first compaction removed, one message per JSON line:\n$ {} --home {} {}",
            bin.display(),
            daemon.home().display(),
            args.join(" ")
        );
        for l in cli_stdout(&daemon, &args)?.lines() {
            println!("{}", one_line(l, 160));
        }
    }

    section("agentd log (last 8 lines)");
    let log = cli_stdout(&daemon, &["log", &task_id])?;
    for l in log.lines().rev().take(8).collect::<Vec<_>>().into_iter().rev() {
        println!("{}", one_line(l, 150));
    }

    if dashboard.is_some() {
        pause("\nthe dashboard stays up: press Enter to stop the daemon");
    }
    let code = daemon.stop();
    let asked = server.chat_requests().len();
    let rate_limited = of_kind("retry_scheduled").into_iter().filter(|e| e["reason"] == "rate_limit").count();
    let checks = [
        (finished, if finished { "task finished".to_string() } else { "TASK DID NOT FINISH".to_string() }),
        (fixed, if fixed { "add() fixed".to_string() } else { "add() NOT fixed".to_string() }),
        (coder_compactions >= 2, format!("coder compactions: {coder_compactions} (at least 2 expected)")),
        (
            !learned.is_empty() && server.refused() >= 1,
            format!("windows learned from a refusal: {} (at least 1 expected)", learned.len()),
        ),
        (
            code == Some(0),
            format!("daemon stopped with SIGTERM (exit {})", code.map_or("?".to_string(), |c| c.to_string())),
        ),
    ];
    println!(
        "\n{asked} model requests in {:.1}s ({rate_limited} answered 429, {} refused as too long); {}.",
        elapsed.as_secs_f64(),
        server.refused(),
        checks.iter().map(|(_, what)| what.as_str()).collect::<Vec<_>>().join("; ")
    );
    let failed: Vec<&str> = checks.iter().filter(|(ok, _)| !ok).map(|(_, what)| what.as_str()).collect();
    if !failed.is_empty() {
        println!("DEMO FAILED, not as expected: {}", failed.join("; "));
    }
    Ok(failed.is_empty())
}
