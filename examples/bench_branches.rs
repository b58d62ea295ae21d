//! What does running a team at once buy, and what does a branch cost?
//!
//! ```text
//! cargo run --release --example bench_branches
//! ```
//!
//! A scripted OpenAI-compatible server that takes `DELAY` to answer each request (a model's
//! latency) serves a task whose lead hands three parts to three teammates:
//!
//! 1. **Wall time**: the three `delegate` calls in one answer (they run at once), against the same
//!    three parts delegated one answer after another (one at a time), in one run of this program.
//!    Each teammate makes `STEPS` requests; the lead two (or four, one at a time).
//! 2. **Memory per running branch** and **daemon CPU per model request with 10 branches in flight**:
//!    one task whose lead delegates to ten agents of the coder (`max_instances = 10`,
//!    `max_concurrent = 16`) each making `STEPS` requests; the daemon's resident memory is read while
//!    all ten are in flight, against the same daemon idle before, and its CPU time over the run is
//!    divided by the requests served. (The working copies' own cost is `bench_copies`'s.)
//!
//! Every task must finish; the benchmark fails otherwise.

// A benchmark or demo, not the daemon: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use agentd_test_support::*;
use common::{agentd_binary, cpu_ms, ms, rss_kib, runtime, team_config, with_max_concurrent, Daemon, Result};
use serde_json::{json, Value};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// A model's latency: each answer comes this long after its request.
const DELAY: Duration = Duration::from_millis(500);
/// Requests of each teammate: `STEPS - 1` `list_dir` calls, then `finish`.
const STEPS: usize = 4;
const WIDE: usize = 10;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench_branches: {e}");
            ExitCode::from(1)
        }
    }
}

/// The part a teammate's request serves (`Part N`), from its handoff.
fn part(body: &Value) -> Option<String> {
    let first = body["messages"].as_array()?.iter().find(|m| m["role"] == "user")?;
    let opening: String = match first["content"].as_str() {
        Some(text) => text.to_string(),
        None => first["content"].as_array()?.iter().filter_map(|p| p["text"].as_str()).collect(),
    };
    opening.strip_prefix("Part ").map(|rest| rest.split_whitespace().next().unwrap_or("").to_string())
}

fn results(body: &Value) -> usize {
    body["messages"].as_array().map_or(0, |m| m.iter().filter(|m| m["role"] == "tool").count())
}

/// The server: teammates list the workspace `STEPS - 1` times, then finish; the lead delegates the
/// parts `parts` (all in one answer when `together`, else one answer each), then finishes.
async fn server(parts: Vec<(String, String)>, together: bool) -> ScriptedServer {
    ScriptedServer::builder()
        .responder(move |body| {
            let step = if let Some(p) = part(body) {
                if results(body) + 1 < STEPS {
                    sse(vec![tool_call("list_dir", json!({"path": "."}))])
                } else {
                    sse(vec![finish(&format!("part {p} done"))])
                }
            } else {
                let done = results(body);
                let delegate = |(to, p): &(String, String)| {
                    tool_call("delegate", json!({"to": to, "objective": format!("Part {p}: look around")}))
                };
                if together && done == 0 {
                    sse(parts.iter().map(delegate).collect())
                } else if !together && done < parts.len() {
                    sse(vec![delegate(&parts[done])])
                } else {
                    sse(vec![finish("all parts done")])
                }
            };
            Step::Delayed(DELAY, Box::new(step))
        })
        .start()
        .await
}

fn three_parts() -> Vec<(String, String)> {
    [("coder", "1"), ("reviewer", "2"), ("tester", "3")]
        .iter()
        .map(|(r, p)| (r.to_string(), p.to_string()))
        .collect()
}

const SPECIALISTS: &str = "[team.specialists.reviewer]\nprovider = \"scripted\"\nmodel = \"gpt-4o\"\n\n\
                           [team.specialists.tester]\nprovider = \"scripted\"\nmodel = \"gpt-4o\"\n\n";

/// One task's wall time, submit to end.
fn timed(d: &Daemon, ws: &std::path::Path, objective: &str) -> Result<Duration> {
    let started = Instant::now();
    let task = d.submit(objective, ws)?;
    let events = d.events_until_end(&task, Duration::from_secs(120))?;
    let last = events.last().map(|e| e["kind"].clone()).unwrap_or_default();
    if last != "task_finished" {
        return Err(format!("{objective}: ended with {last}: {}", d.serve_log()));
    }
    Ok(started.elapsed())
}

fn run() -> Result<()> {
    let bin = agentd_binary()?;
    let rt = runtime()?;
    let ws = tempfile::tempdir().map_err(|e| e.to_string())?;
    std::fs::write(ws.path().join("README.md"), "a workspace\n").map_err(|e| e.to_string())?;
    println!("bench_branches: each model answer takes {}; each teammate makes {STEPS} requests", ms(DELAY));

    let mut walls = Vec::new();
    for together in [true, false] {
        let server = rt.block_on(server(three_parts(), together));
        let d = Daemon::start(&bin, &team_config(&server.base_url(), "gpt-4o", SPECIALISTS))?;
        let wall = timed(&d, ws.path(), "three parts")?;
        let requests = server.chat_requests().len();
        println!(
            "  three parts {}: {}, {requests} model requests",
            if together { "at once      " } else { "one at a time" },
            ms(wall)
        );
        walls.push(wall);
    }
    println!(
        "  at once / one at a time: {:.2} ({:.1}x faster)",
        walls[0].as_secs_f64() / walls[1].as_secs_f64(),
        walls[1].as_secs_f64() / walls[0].as_secs_f64()
    );

    // Ten agents of the coder in flight at once.
    let parts: Vec<(String, String)> = (1..=WIDE).map(|n| ("coder".to_string(), n.to_string())).collect();
    let server = rt.block_on(server(parts, true));
    let config = with_max_concurrent(&team_config(&server.base_url(), "gpt-4o", ""), 16).replacen(
        "[team.coder]\n",
        &format!("[team.coder]\nmax_instances = {WIDE}\n"),
        1,
    );
    let d = Daemon::start(&bin, &config)?;
    let pid = d.pid().ok_or("no daemon pid")?;
    // A first task warms the daemon (its stores open, its caches filled) before the idle reading.
    let _ = timed(&d, ws.path(), "warm up")?;
    let (idle, cpu_before) = (rss_kib(pid)?, cpu_ms(pid)?);
    let served_before = server.chat_requests().len();
    let task = d.submit("ten parts", ws.path())?;
    // Read the memory while the ten branches are in flight (each has asked at least once).
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut peak = idle;
    loop {
        let branches =
            server.chat_requests().iter().skip(served_before).filter(|b| part(b).is_some()).count();
        peak = peak.max(rss_kib(pid)?);
        if branches >= WIDE * (STEPS - 1) || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let events = d.events_until_end(&task, Duration::from_secs(120))?;
    if events.last().map(|e| e["kind"].clone()).unwrap_or_default() != "task_finished" {
        return Err(format!("ten parts did not finish: {}", d.serve_log()));
    }
    let requests = server.chat_requests().len() - served_before;
    let cpu = cpu_ms(pid)? - cpu_before;
    let instances: std::collections::BTreeSet<String> = events
        .iter()
        .filter(|e| e["kind"] == "delegated")
        .filter_map(|e| e["to_role"].as_str().map(String::from))
        .collect();
    println!(
        "  {WIDE} branches at once ({} agents: {}):",
        instances.len(),
        instances.iter().cloned().collect::<Vec<_>>().join(" ")
    );
    println!(
        "    memory: {} KiB idle, {} KiB peak with {WIDE} in flight: {:.0} KiB per running branch",
        idle,
        peak,
        (peak.saturating_sub(idle)) as f64 / WIDE as f64
    );
    println!(
        "    daemon CPU: {cpu:.0} ms over {requests} model requests: {:.2} ms per request",
        cpu / requests.max(1) as f64
    );
    Ok(())
}
