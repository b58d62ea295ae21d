//! How much time does agentd itself add to each model turn, and how much memory does an idle task cost?
//!
//! ```text
//! cargo run --release --example bench_turns
//! ```
//!
//! A scripted OpenAI-compatible server answers every request instantly from memory: the lead
//! delegates to the coder, the coder answers `list_dir` for its first K requests and then `finish`,
//! and the lead finishes — a whole team, K + 3 model requests per task. A turn is the time between two
//! consecutive model requests of one task: the daemon parses the streamed answer, persists the events
//! and the messages, runs the tool (the cheap `list_dir`, or the delegation's handoff), counts the next
//! request's tokens and sends it. Measured with 1 task at a time, 10 and 100 concurrent tasks; every
//! task must finish (the benchmark fails otherwise). It is measured at
//! the server with a microsecond clock (it also includes the local server's own answer, which is
//! served from memory in microseconds) and cross-checked with the `at` timestamps of the daemon's
//! `request_sent` events (millisecond resolution). Then the daemon's resident memory (VmRSS) is read
//! before and after 200 tasks that finished and sit idle.

// A benchmark or demo, not the daemon: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use agentd_test_support::daemon::RpcClient;
use agentd_test_support::*;
use common::{
    agentd_binary, cpu_ms, is_terminal, rss_kib, team_config, with_max_concurrent, without_stall_watch,
    Daemon, Result,
};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Model requests answered with `list_dir` per measured task (then one `finish`): K turns per task.
const TURNS_PER_TASK: usize = 20;
const SEQUENTIAL_TASKS: usize = 10;
/// Concurrent runs: this many tasks submitted at once, each.
const CONCURRENT: [usize; 2] = [10, 100];
/// Model requests of one task: the lead's two, the coder's K + 1.
const fn requests_per_task(turns: usize) -> usize {
    turns + 3
}
const IDLE_TASKS: usize = 200;
const TASK_TIMEOUT: Duration = Duration::from_secs(90);

/// Arrival time of each model request, by task number (parsed from the objective `bench#N turns=K`).
type Arrivals = Arc<Mutex<HashMap<u64, Vec<Instant>>>>;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench_turns: {e}");
            ExitCode::from(1)
        }
    }
}

/// `bench#N turns=K` somewhere in the request's first user message.
fn task_marker(body: &Value) -> Option<(u64, usize)> {
    let messages = body["messages"].as_array()?;
    let user = messages.iter().find(|m| m["role"] == "user")?;
    let text = user["content"].to_string();
    let digits = |s: &str| s.chars().take_while(char::is_ascii_digit).collect::<String>();
    let after = &text[text.find("bench#")? + "bench#".len()..];
    let n = digits(after).parse().ok()?;
    let k = digits(&after[after.find("turns=")? + "turns=".len()..]).parse().ok()?;
    Some((n, k))
}

fn responder(arrivals: Arrivals) -> impl Fn(&Value) -> Step + Send + Sync + 'static {
    move |body: &Value| {
        let now = Instant::now();
        let Some((task, k)) = task_marker(body) else {
            return sse(vec![finish("not a bench task")]);
        };
        arrivals.lock().unwrap_or_else(|e| e.into_inner()).entry(task).or_default().push(now);
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let lead =
            body["tools"].as_array().is_some_and(|t| t.iter().any(|t| t["function"]["name"] == "delegate"));
        if lead {
            return if messages.iter().any(|m| m["role"] == "tool") {
                sse(vec![finish("the coder listed the workspace")])
            } else {
                sse(vec![delegate(
                    "coder",
                    &format!("bench#{task} turns={k}: list the workspace, then finish"),
                )])
            };
        }
        let assistant_turns = messages.iter().filter(|m| m["role"] == "assistant").count();
        if assistant_turns < k {
            sse(vec![tool_call("list_dir", json!({"path": "."}))])
        } else {
            sse(vec![finish("done")])
        }
    }
}

/// What one task's subscription saw.
struct TaskRun {
    number: u64,
    /// `at` of each `request_sent`, in ms since midnight UTC.
    request_at_ms: Vec<i64>,
    wall: Duration,
}

/// Milliseconds since midnight from an RFC 3339 UTC timestamp with milliseconds (`…THH:MM:SS.mmmZ`).
fn at_ms(at: &str) -> Option<i64> {
    let t = at.split('T').nth(1)?.trim_end_matches('Z');
    let (hms, frac) = t.split_once('.').unwrap_or((t, "0"));
    let mut parts = hms.split(':').map(|p| p.parse::<i64>().ok());
    let (h, m, s) = (parts.next()??, parts.next()??, parts.next()??);
    let ms: i64 = format!("{frac:0<3}")[..3].parse().ok()?;
    Some(((h * 60 + m) * 60 + s) * 1000 + ms)
}

/// Submits `count` tasks of `turns` turns at once, follows each one to its end, returns what was seen.
fn run_tasks(
    daemon: &Daemon,
    ws: &std::path::Path,
    first: u64,
    count: usize,
    turns: usize,
) -> Result<Vec<TaskRun>> {
    let mut submitter = daemon.client()?;
    let mut ids = Vec::new();
    let t0 = Instant::now();
    for i in 0..count as u64 {
        let objective = format!("bench#{} turns={turns}: list the workspace, then finish", first + i);
        let r = submitter
            .call("task.submit", json!({"objective": objective, "workspace": ws}))
            .map_err(|e| format!("task.submit failed: {e}"))?;
        let id = r["task_id"].as_str().ok_or("task.submit returned no task_id")?.to_string();
        ids.push((first + i, id));
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = ids
            .iter()
            .map(|(number, id)| {
                s.spawn(move || -> Result<TaskRun> {
                    let mut c: RpcClient = daemon.client()?;
                    c.set_timeout(Some(TASK_TIMEOUT));
                    c.call("task.subscribe", json!({"task_id": id, "after_seq": 0}))
                        .map_err(|e| format!("task.subscribe {id}: {e}"))?;
                    let mut request_at_ms = Vec::new();
                    loop {
                        let n = c
                            .next_notification()
                            .map_err(|e| format!("task {id}: no event within {TASK_TIMEOUT:?}: {e}"))?;
                        let e = &n["params"];
                        let kind = e["kind"].as_str().unwrap_or("");
                        if kind == "request_sent" {
                            request_at_ms.push(
                                at_ms(e["at"].as_str().unwrap_or(""))
                                    .ok_or_else(|| format!("bad `at` in {e}"))?,
                            );
                        }
                        if is_terminal(e) {
                            if kind != "task_finished" {
                                return Err(format!("task {id} ended with {kind}: {e}"));
                            }
                            request_at_ms.sort_unstable();
                            return Ok(TaskRun { number: *number, request_at_ms, wall: t0.elapsed() });
                        }
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| "a subscriber thread panicked".to_string())?)
            .collect()
    })
}

struct Row {
    label: String,
    tasks: usize,
    server_gaps_us: Vec<f64>,
    event_gaps_ms: Vec<f64>,
    wall: Duration,
    /// The daemon's CPU time (user + system) during the run, in ms.
    daemon_cpu_ms: f64,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn measure(label: &str, runs: &[TaskRun], arrivals: &Arrivals, turns: usize) -> Result<Row> {
    let map = arrivals.lock().unwrap_or_else(|e| e.into_inner());
    let mut server_gaps_us = Vec::new();
    let mut event_gaps_ms = Vec::new();
    for r in runs {
        let times = map
            .get(&r.number)
            .ok_or_else(|| format!("the server saw no request of task bench#{}", r.number))?;
        if times.len() != requests_per_task(turns) || r.request_at_ms.len() != requests_per_task(turns) {
            return Err(format!(
                "task bench#{}: expected {} model requests, the server saw {} and the events show {}",
                r.number,
                requests_per_task(turns),
                times.len(),
                r.request_at_ms.len()
            ));
        }
        server_gaps_us.extend(times.windows(2).map(|w| (w[1] - w[0]).as_secs_f64() * 1e6));
        event_gaps_ms
            .extend(r.request_at_ms.windows(2).map(|w| ((w[1] - w[0]).rem_euclid(86_400_000)) as f64));
    }
    server_gaps_us.sort_by(f64::total_cmp);
    event_gaps_ms.sort_by(f64::total_cmp);
    let wall = runs.iter().map(|r| r.wall).max().unwrap_or_default();
    Ok(Row {
        label: label.to_string(),
        tasks: runs.len(),
        server_gaps_us,
        event_gaps_ms,
        wall,
        daemon_cpu_ms: 0.0,
    })
}

fn run() -> Result<()> {
    let bin = agentd_binary()?;
    let rt = common::runtime()?;
    let arrivals: Arrivals = Arc::default();
    let server = rt.block_on(
        ScriptedServer::builder()
            .model("bench-model")
            .max_model_len(131_072)
            .responder(responder(arrivals.clone()))
            .start(),
    );
    let ws = tempfile::Builder::new()
        .prefix("agentd-bench-ws")
        .tempdir()
        .map_err(|e| format!("temp workspace: {e}"))?;
    agentd_test_support::workspace::sample_workspace(ws.path());
    let config =
        without_stall_watch(&with_max_concurrent(&team_config(&server.base_url(), "bench-model", ""), 1024));
    let mut daemon = Daemon::start(&bin, &config)?;
    let pid = daemon.pid().ok_or("the daemon has no pid")?;
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("agentd turn overhead — {}, {cores} CPU cores shared by the daemon, the scripted server and this client", bin.display());
    println!(
        "each task: the lead delegates, the coder makes {TURNS_PER_TASK} list_dir turns and finishes, the lead finishes \
         ({} model requests, answered instantly)\n",
        requests_per_task(TURNS_PER_TASK)
    );

    let started = Instant::now();
    let mut next = 1u64;
    // Warm-up: connections, token-counter tables, database files.
    run_tasks(&daemon, ws.path(), next, 1, 3)?;
    next += 1;

    // Idle tasks first, on a warm but not yet crowded daemon: each task makes one request and finishes.
    let rss_before = rss_kib(pid)?;
    for _ in 0..IDLE_TASKS {
        run_tasks(&daemon, ws.path(), next, 1, 0)?;
        next += 1;
    }
    std::thread::sleep(Duration::from_millis(500));
    let rss_after = rss_kib(pid)?;

    let cpu0 = cpu_ms(pid)?;
    let mut sequential = Vec::new();
    for _ in 0..SEQUENTIAL_TASKS {
        sequential.extend(run_tasks(&daemon, ws.path(), next, 1, TURNS_PER_TASK)?);
        next += 1;
    }
    let seq_wall: Duration = sequential.iter().map(|r| r.wall).sum();
    let mut rows = vec![measure("1 task at a time", &sequential, &arrivals, TURNS_PER_TASK)?];
    rows[0].wall = seq_wall;
    let cpu1 = cpu_ms(pid)?;
    rows[0].daemon_cpu_ms = cpu1 - cpu0;

    let mut cpu = cpu1;
    let mut total = next - 1;
    for count in CONCURRENT {
        let concurrent = run_tasks(&daemon, ws.path(), next, count, TURNS_PER_TASK)?;
        next += count as u64;
        total += count as u64;
        let mut row = measure(&format!("{count} concurrent tasks"), &concurrent, &arrivals, TURNS_PER_TASK)?;
        let now = cpu_ms(pid)?;
        row.daemon_cpu_ms = now - cpu;
        cpu = now;
        rows.push(row);
    }
    let rss_end = rss_kib(pid)?;

    println!("time per turn (gap between consecutive model requests of one task)");
    println!(
        "{:<20} {:>5} {:>6} | {:>9} {:>9} {:>9} | {:>11} {:>6} | {:>7} {:>8}",
        "", "tasks", "turns", "median", "p99", "max", "events: med", "p99", "turns/s", "CPU/req"
    );
    for r in &rows {
        let s = &r.server_gaps_us;
        let ms = |us: f64| format!("{:.2} ms", us / 1000.0);
        println!(
            "{:<20} {:>5} {:>6} | {:>9} {:>9} {:>9} | {:>8.0} ms {:>3.0} ms | {:>7.0} {:>5.2} ms",
            r.label,
            r.tasks,
            s.len(),
            ms(percentile(s, 50.0)),
            ms(percentile(s, 99.0)),
            ms(s.last().copied().unwrap_or(f64::NAN)),
            percentile(&r.event_gaps_ms, 50.0),
            percentile(&r.event_gaps_ms, 99.0),
            (r.tasks * requests_per_task(TURNS_PER_TASK)) as f64 / r.wall.as_secs_f64(),
            r.daemon_cpu_ms / (r.tasks * requests_per_task(TURNS_PER_TASK)) as f64
        );
    }
    println!(
        "  median/p99/max: measured at the scripted server (µs clock); they include its in-memory answer"
    );
    println!(
        "  and the list_dir tool. events: the same gaps from request_sent `at` stamps (1 ms resolution)."
    );
    println!("  turns/s: model requests of those tasks / wall time from submit to the last task_finished.");
    println!(
        "  CPU/req: the daemon's user+system CPU time during the run / its model requests (10 ms ticks).\n"
    );

    let per_task = (rss_after as f64 - rss_before as f64) / IDLE_TASKS as f64;
    println!("daemon memory (VmRSS of pid {pid})");
    println!("  before {IDLE_TASKS} idle tasks  {:>8.1} MiB", rss_before as f64 / 1024.0);
    println!(
        "  after  {IDLE_TASKS} idle tasks  {:>8.1} MiB   → {per_task:.1} KiB per finished, idle task",
        rss_after as f64 / 1024.0
    );
    println!(
        "  after the latency runs {:>8.1} MiB   ({total} tasks in total, every one finished, 0 errors)",
        rss_end as f64 / 1024.0,
    );
    println!(
        "  (RSS includes the allocator's and sled's caches, so this is an upper bound, not an exact size)"
    );

    let code = daemon.stop();
    println!(
        "\nbenchmark took {:.1}s; daemon stopped with SIGTERM (exit {})",
        started.elapsed().as_secs_f64(),
        code.map_or("?".into(), |c| c.to_string())
    );
    drop(server);
    Ok(())
}
