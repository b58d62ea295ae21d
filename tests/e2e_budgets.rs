//! End-to-end: spending under control, against scripted servers that report their usage, in both
//! wire formats. A task's budget pauses it before the request that would cross it — nothing over
//! the budget is sent — and `resume --budget-tokens` lets it finish; a day's budget pauses every
//! task until the day turns (a driven clock), then they go on by themselves; a usage limit that
//! resets in three hours is waited out as `waiting`, through a daemon restart, with no retry
//! attempt spent, and `resume` goes on at once.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use agentd_test_support::daemon::TestDaemon;
use agentd_test_support::workspace::docs_workspace;
use agentd_test_support::*;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_agentd");
const MODEL: &str = "qwen3-coder";
const KEY_ENV: &str = "AGENTD_TEST_BUDGET_KEY";
const MAX_OUT: u64 = 256;

/// `n` files of about `tokens` tokens each, under `docs/`.
fn workspace(n: usize, tokens: u64) -> tempfile::TempDir {
    docs_workspace(n, tokens, |i, line| {
        format!("Entry {i}.{line}: crate {} left Rotterdam on day {}.\n", line * 31 % 997, line % 29)
    })
}

/// The lead delegates the reading; the coder reads `files` files one per request and finishes;
/// the lead finishes. Every answer reports its usage (the server counts the prompt).
fn script(files: usize) -> Vec<Step> {
    let step = |chunks: Vec<Chunk>| sse_with_usage(chunks, 0, 20);
    let mut steps = vec![step(vec![delegate("coder", "Read the documents under docs/")])];
    for i in 0..files {
        steps.push(step(vec![tool_call("read_file", json!({"path": format!("docs/file_{i:02}.txt")}))]));
    }
    steps.push(step(vec![finish("read them all")]));
    steps.push(step(vec![finish("the coder read them all")]));
    steps
}

fn config(kind: &str, server: &ScriptedServer, extra: &str) -> String {
    format!(
        "[providers.p]\nkind = \"{kind}\"\nbase_url = \"{}\"\napi_key_env = \"{KEY_ENV}\"\n\n\
         [team.lead]\nprovider = \"p\"\nmodel = \"{MODEL}\"\nmax_output_tokens = {MAX_OUT}\n\n\
         [team.coder]\nprovider = \"p\"\nmodel = \"{MODEL}\"\nmax_output_tokens = {MAX_OUT}\n\n\
         [prices.\"{MODEL}\"]\ninput = 2.0\noutput = 8.0\n{extra}",
        server.base_url()
    )
}

async fn server(steps: Vec<Step>) -> ScriptedServer {
    ScriptedServer::builder()
        .model(MODEL)
        .max_model_len(Some(65_536))
        .report_usage(true)
        .script(steps)
        .start()
        .await
}

fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["kind"] == kind).collect()
}

/// The task's logged events once one of `kind` is among them: a halt's state is recorded a moment
/// before its event.
fn events_with(d: &TestDaemon, task: &str, kind: &str) -> Vec<Value> {
    let limit = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let events = d.logged_events(task);
        if !of_kind(&events, kind).is_empty() || std::time::Instant::now() > limit {
            return events;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Prompt and completion tokens of every answer the server gave so far.
fn server_spent(server: &ScriptedServer, answers: usize) -> u64 {
    server.counted().iter().take(answers).sum::<u64>() + 20 * answers as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_budget_pauses_before_the_request_that_would_cross_it_and_a_raise_finishes_it() {
    for kind in ["openai", "anthropic"] {
        task_budget_on(kind).await;
    }
}

async fn task_budget_on(kind: &str) {
    let server = server(script(3)).await;
    let ws = workspace(3, 2_000);
    let mut d = TestDaemon::prepare(Path::new(BIN), &config(kind, &server, ""));
    d.serve_with_env(&[(KEY_ENV, "test-key")]);
    let budget = 9_000u64;
    let submitted = d
        .client()
        .call(
            "task.submit",
            json!({"objective": "Read the documents", "workspace": ws.path(), "budget": {"tokens": budget}}),
        )
        .unwrap();
    let task = submitted["task_id"].as_str().unwrap().to_string();
    let status = d.wait_for_state(&task, "paused", Duration::from_secs(60));
    let events = events_with(&d, &task, "budget_reached");
    let reached = of_kind(&events, "budget_reached");
    assert_eq!(reached.len(), 1, "{kind}: {events:#?}");
    let reached = reached[0];
    assert_eq!(reached["scope"], "task", "{kind}");
    assert_eq!(reached["budget"]["tokens"], budget, "{kind}");
    let spent = reached["spent"]["tokens"].as_u64().unwrap();
    let request = reached["request"]["tokens"].as_u64().unwrap();
    // What was spent is the server's own usage, summed; it is under the budget, and the request that
    // would have crossed it was never sent.
    let answered = server.counted().len();
    assert_eq!(spent, server_spent(&server, answered), "{kind}: {reached:#}");
    assert!(spent <= budget && spent + request > budget, "{kind}: {spent} + {request} vs {budget}");
    assert_eq!(server.chat_requests().len(), answered, "{kind}: no request past the budget was sent");
    assert!(answered < script(3).len(), "{kind}: the budget paused the task before its end");
    assert_eq!(status["budget"]["tokens"], budget, "{kind}");
    let status_tokens = status["spent"]["prompt_tokens"].as_u64().unwrap()
        + status["spent"]["completion_tokens"].as_u64().unwrap();
    assert_eq!(status_tokens, spent, "{kind}: status and the event agree");
    // The list shows spent against budget.
    let list = d.client().call("task.list", json!({})).unwrap();
    let line = list.as_array().unwrap().iter().find(|t| t["task_id"] == task.as_str()).unwrap().clone();
    assert_eq!(
        (line["state"].clone(), line["spent"]["tokens"].clone()),
        (json!("paused"), json!(spent)),
        "{kind}"
    );
    assert_eq!(line["budget"]["tokens"], budget, "{kind}");
    let shown = d.cli(&["status", &task]);
    let shown = String::from_utf8_lossy(&shown.stdout).to_string();
    assert!(shown.contains(&format!("budget     {spent}/{budget} tokens")), "{kind}: {shown}");

    // A raise that is no raise is refused, naming the figure and what was spent.
    let low = d.cli(&["resume", &task, "--budget-tokens", &spent.to_string()]);
    let says = String::from_utf8_lossy(&low.stderr).to_string();
    assert_eq!(low.status.code(), Some(2), "{kind}: a refused parameter is a usage error: {says}");
    // Named as the flag typed.
    assert!(says.contains("--budget-tokens") && says.contains(&spent.to_string()), "{says}");
    assert_eq!(d.client().call("task.status", json!({"task_id": task})).unwrap()["state"], "paused");
    // A real one lets it finish.
    let out = d.cli(&["resume", &task, "--budget-tokens", "1000000"]);
    assert!(out.status.success(), "{kind}: {}", String::from_utf8_lossy(&out.stderr));
    let status = d.wait_for_state(&task, "finished", Duration::from_secs(60));
    assert_eq!(status["budget"]["tokens"], 1_000_000, "{kind}");
    assert_eq!(server.chat_requests().len(), script(3).len(), "{kind}: every request once");
    // What the user reads: the list with spent against budget, and the usage report.
    let tasks = String::from_utf8_lossy(&d.cli(&["tasks"]).stdout).to_string();
    assert!(tasks.contains(&task) && tasks.contains("/1000000 tokens"), "{kind}: {tasks}");
    let usage = d.cli(&["usage", "--by", "model"]);
    let usage = String::from_utf8_lossy(&usage.stdout).to_string();
    assert!(usage.contains(MODEL) && usage.contains("total"), "{kind}: {usage}");
    println!("agentd tasks ({kind}):\n{tasks}\nagentd usage --by model ({kind}):\n{usage}");
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_day_budget_pauses_until_the_day_turns_then_the_task_goes_on_by_itself() {
    let server = server(script(3)).await;
    let ws = workspace(3, 3_000);
    let day_budget = 14_000u64;
    let mut d = TestDaemon::prepare(
        Path::new(BIN),
        &config("openai", &server, &format!("\n[budgets]\nday_tokens = {day_budget}\n")),
    );
    d.serve_with_env(&[(KEY_ENV, "test-key"), ("AGENTD_CLOCK", "manual")]);
    let task = d.submit("Read the documents", ws.path());
    let mut pauses = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        assert!(std::time::Instant::now() < deadline, "{}", d.serve_log());
        let status = d.client().call("task.status", json!({"task_id": task})).unwrap();
        match status["state"].as_str().unwrap() {
            "finished" => break,
            "paused" => {
                pauses += 1;
                let resume_at = status["resume_at"].as_str().unwrap().to_string();
                let daemon = d.client().call("daemon.status", json!({})).unwrap();
                assert_eq!(daemon["today"]["budget"]["tokens"], day_budget);
                let next_day =
                    humantime::parse_rfc3339(daemon["today"]["next_day_at"].as_str().unwrap()).unwrap();
                assert_eq!(
                    next_day,
                    humantime::parse_rfc3339(&resume_at).unwrap(),
                    "paused until the day turns"
                );
                let spent_today = daemon["today"]["spent"]["tokens"].as_u64().unwrap();
                assert!(spent_today <= day_budget, "{daemon:#}");
                // Nothing moves until the day turns.
                std::thread::sleep(Duration::from_millis(300));
                let still = d.client().call("task.status", json!({"task_id": task})).unwrap();
                assert_eq!(still["state"], "paused");
                let now = humantime::parse_rfc3339(daemon["clock"].as_str().unwrap()).unwrap();
                let at = humantime::parse_rfc3339(&resume_at).unwrap();
                let ms = at.duration_since(now).unwrap().as_millis() as u64 + 1_000;
                d.client().call("clock.advance", json!({"ms": ms})).unwrap();
                // It goes on: running again, or already paused anew until a later day.
                let limit = std::time::Instant::now() + Duration::from_secs(20);
                loop {
                    let now = d.client().call("task.status", json!({"task_id": task})).unwrap();
                    if now["state"] != "paused" || now["resume_at"] != resume_at.as_str() {
                        break;
                    }
                    assert!(std::time::Instant::now() < limit, "{:#?}", d.logged_events(&task));
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            "failed" => panic!("{status:#}\n{}", d.serve_log()),
            _ => std::thread::sleep(Duration::from_millis(30)),
        }
    }
    assert!(pauses >= 1, "the day's budget paused the task at least once");
    let events = d.logged_events(&task);
    let reached = of_kind(&events, "budget_reached");
    assert_eq!(reached.len(), pauses);
    assert!(reached.iter().all(|r| r["scope"] == "day" && r["resume_at"].is_string()), "{reached:#?}");
    // No day spent more than its budget: the usage of each day's answers, summed.
    let mut by_day: std::collections::BTreeMap<String, u64> = Default::default();
    for e in of_kind(&events, "response_received") {
        let u = &e["usage"];
        *by_day.entry(e["at"].as_str().unwrap()[..10].to_string()).or_default() +=
            u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap();
    }
    assert!(by_day.len() >= 2 && by_day.values().all(|t| *t <= day_budget), "{by_day:?}");
    let sent: Vec<&Value> = of_kind(&events, "request_sent");
    assert_eq!(server.chat_requests().len(), script(3).len(), "{by_day:?} {reached:#?} {sent:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_usage_limit_hours_away_is_waited_out_through_a_restart_without_spending_retries() {
    for kind in ["openai", "anthropic"] {
        usage_limit_on(kind).await;
    }
}

async fn usage_limit_on(kind: &str) {
    let step = |chunks: Vec<Chunk>| sse_with_usage(chunks, 0, 5);
    let server = server(vec![
        rate_limited(Some("10800")),
        step(vec![finish("done after the wait")]),
        // The second task: limited, then resumed by hand at once.
        rate_limited(Some("10800")),
        step(vec![finish("done at once")]),
    ])
    .await;
    let ws = tempfile::tempdir().unwrap();
    let mut d = TestDaemon::prepare(Path::new(BIN), &config(kind, &server, ""));
    let env = [(KEY_ENV, "test-key"), ("AGENTD_CLOCK", "manual")];
    d.serve_with_env(&env);
    let task = d.submit("Answer", ws.path());
    let status = d.wait_for_state(&task, "waiting", Duration::from_secs(30));
    let resume_at = status["resume_at"].as_str().unwrap().to_string();
    let events = events_with(&d, &task, "usage_limit_wait");
    let wait = of_kind(&events, "usage_limit_wait");
    assert_eq!(wait.len(), 1, "{kind}: {events:#?}");
    assert_eq!(
        (wait[0]["source"].clone(), wait[0]["reason"].clone()),
        (json!("retry-after"), json!("rate_limit"))
    );
    assert_eq!(wait[0]["resume_at"], resume_at.as_str());
    assert!(of_kind(&events, "retry_scheduled").is_empty(), "{kind}: no retry attempt was spent");
    let clock = humantime::parse_rfc3339(status["updated_at"].as_str().unwrap()).unwrap();
    let ahead = humantime::parse_rfc3339(&resume_at).unwrap().duration_since(clock).unwrap();
    assert!(ahead > Duration::from_secs(10_790) && ahead <= Duration::from_secs(10_800), "{kind}: {ahead:?}");

    // The daemon restarts: the task still waits, for the same moment.
    d.stop();
    d.serve_with_env(&env);
    let status = d.client().call("task.status", json!({"task_id": task})).unwrap();
    assert_eq!(
        (status["state"].clone(), status["resume_at"].clone()),
        (json!("waiting"), json!(resume_at)),
        "{kind}"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(server.chat_requests().len(), 1, "{kind}: nothing is sent before the limit resets");
    // The clock reaches resume_at: it goes on by itself and finishes.
    d.client().call("clock.advance", json!({"ms": 10_801_000})).unwrap();
    d.wait_for_state(&task, "finished", Duration::from_secs(30));
    assert_eq!(server.chat_requests().len(), 2, "{kind}");
    let events = d.logged_events(&task);
    assert!(of_kind(&events, "retry_scheduled").is_empty(), "{kind}");

    // A second task waits too; `resume` goes on now.
    let second = d.submit("Answer again", ws.path());
    d.wait_for_state(&second, "waiting", Duration::from_secs(30));
    let out = d.cli(&["resume", &second]);
    assert!(out.status.success(), "{kind}: {}", String::from_utf8_lossy(&out.stderr));
    d.wait_for_state(&second, "finished", Duration::from_secs(30));
    assert_eq!(server.chat_requests().len(), 4, "{kind}");
    d.stop();
}

/// A server asking for 300,000,000,000 seconds (it wedged the task `running` for good: the resume
/// time could not be written) is waited the 30-day ceiling, said so, and the task can be cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_task_can_be_cancelled() {
    let server = server(vec![rate_limited(Some("300000000000"))]).await;
    let ws = tempfile::tempdir().unwrap();
    let mut d = TestDaemon::prepare(Path::new(BIN), &config("openai", &server, ""));
    d.serve_with_env(&[(KEY_ENV, "test-key"), ("AGENTD_CLOCK", "manual")]);
    let task = d.submit("Answer", ws.path());
    let status = d.wait_for_state(&task, "waiting", Duration::from_secs(30));
    let events = events_with(&d, &task, "usage_limit_wait");
    let wait = of_kind(&events, "usage_limit_wait");
    assert_eq!(wait.len(), 1, "{events:#?}");
    assert_eq!(wait[0]["capped"], true, "{:#}", wait[0]);
    let clock = humantime::parse_rfc3339(status["updated_at"].as_str().unwrap()).unwrap();
    let ahead =
        humantime::parse_rfc3339(status["resume_at"].as_str().unwrap()).unwrap().duration_since(clock);
    let days = ahead.unwrap().as_secs_f64() / 86_400.0;
    assert!((29.99..=30.0).contains(&days), "{days} days");
    let watched = String::from_utf8_lossy(&d.cli(&["log", &task]).stdout).to_string();
    assert!(watched.contains("longer than the 30-day ceiling"), "{watched}");
    let out = d.cli(&["cancel", &task]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    d.wait_for_state(&task, "cancelled", Duration::from_secs(10));
    // Its resume_at comes and goes: a cancelled task never runs again.
    d.client().call("clock.advance", json!({"ms": 31u64 * 86_400_000})).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let status = d.client().call("task.status", json!({"task_id": task})).unwrap();
    assert_eq!(status["state"], "cancelled");
    assert_eq!(server.chat_requests().len(), 1);
    d.stop();
}

/// A day's budget with many tasks at once: each request is admitted against what was spent *and*
/// what the other tasks' requests in flight may spend, so the day overshoots by at most one
/// request (it did by 30 %: five tasks each took the last of a 20,000-token day). With 5 and with
/// 20 tasks submitted together, each reading files one request at a time on a server that answers
/// slowly, so that requests overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_day_budget_holds_with_tasks_running_at_once() {
    for tasks in [5, 20] {
        day_budget_at_once(tasks).await;
    }
}

async fn day_budget_at_once(tasks: usize) {
    const READS: usize = 6;
    let server = ScriptedServer::builder()
        .model(MODEL)
        .max_model_len(Some(65_536))
        .report_usage(true)
        .responder(|body: &Value| {
            let results =
                body["messages"].as_array().map_or(0, |m| m.iter().filter(|m| m["role"] == "tool").count());
            let chunks = if results < READS {
                vec![tool_call("read_file", json!({"path": format!("docs/file_{results:02}.txt")}))]
            } else {
                vec![finish("read them")]
            };
            delayed(Duration::from_millis(150), sse_with_usage(chunks, 0, 20))
        })
        .start()
        .await;
    let ws = workspace(READS, 800);
    let day_budget = 20_000u64;
    let mut d = TestDaemon::prepare(
        Path::new(BIN),
        &config("openai", &server, &format!("\n[budgets]\nday_tokens = {day_budget}\n")),
    );
    d.serve_with_env(&[(KEY_ENV, "test-key"), ("AGENTD_CLOCK", "manual")]);
    let ids: Vec<String> =
        (0..tasks).map(|i| d.submit(&format!("Read the documents ({i})"), ws.path())).collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    for id in &ids {
        loop {
            let state = d.client().call("task.status", json!({"task_id": id})).unwrap()["state"].clone();
            if state == "paused" || state == "finished" {
                break;
            }
            assert_ne!(state, "failed", "{}", d.serve_log());
            assert!(std::time::Instant::now() < deadline, "{id} is {state}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // What the server was asked for, by its own count, against the budget.
    let spent: u64 = server.counted().iter().sum::<u64>() + 20 * server.counted().len() as u64;
    let mut largest = 0;
    let mut paused = 0;
    for id in &ids {
        let events = d.logged_events(id);
        for sent in of_kind(&events, "request_sent") {
            largest = largest.max(sent["tokens"].as_u64().unwrap() + MAX_OUT);
        }
        paused += of_kind(&events, "budget_reached").len();
    }
    assert!(paused > 0, "{tasks} tasks: the day's budget stopped some");
    assert!(
        spent <= day_budget + largest,
        "{tasks} tasks: {spent} tokens spent against a day of {day_budget} (the largest request: {largest})"
    );
    let daemon = d.client().call("daemon.status", json!({})).unwrap();
    assert_eq!(daemon["today"]["spent"]["tokens"], spent, "{tasks} tasks: the ledger and the server agree");
    println!("{tasks} tasks at once: {spent} tokens spent against a day of {day_budget} (largest request {largest})");
    d.stop();
}

/// A budget figure that is no amount — `NaN`, `inf`, `1e309` (read as infinite), 0, past the
/// documented maximum — is refused wherever it enters, naming the figure: it was accepted by
/// `submit` and `resume` (serialised as `null`, the task got no budget at all).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budget_figures_that_are_no_amounts_are_refused_everywhere() {
    let server = server(vec![]).await;
    let ws = tempfile::tempdir().unwrap();
    let mut d = TestDaemon::prepare(Path::new(BIN), &config("openai", &server, ""));
    d.serve_with_env(&[(KEY_ENV, "test-key")]);
    let workspace = ws.path().to_str().unwrap();
    for (flag, value) in [
        ("--budget-cost", "NaN"),
        ("--budget-cost", "inf"),
        ("--budget-cost", "-inf"),
        ("--budget-cost", "1e309"),
        ("--budget-cost", "0"),
        ("--budget-cost", "1000000.01"),
        ("--budget-tokens", "0"),
        ("--budget-tokens", "1000000000001"),
        ("--budget-tokens", "ten"),
    ] {
        for command in [vec!["submit", "x", "--workspace", workspace], vec!["resume", "01ab"]] {
            let mut args = command.clone();
            let given = format!("{flag}={value}");
            args.push(&given);
            let out = d.cli(&args);
            let says = String::from_utf8_lossy(&out.stderr).to_string();
            assert_eq!(out.status.code(), Some(2), "{args:?}: {says}");
            assert!(says.contains(flag) && says.contains(value), "{args:?}: {says}");
        }
    }
    assert!(
        d.client().call("task.list", json!({})).unwrap().as_array().unwrap().is_empty(),
        "nothing submitted"
    );
    // The socket's (and so HTTP's and `agentd mcp`'s) figures go through the same check.
    for (budget, says) in [
        (json!({"cost": 2_000_000.0}), "budget.cost"),
        (json!({"cost": -1.0}), "budget.cost"),
        (json!({"tokens": 0}), "budget.tokens"),
        (json!({"tokens": 5_000_000_000_000u64}), "budget.tokens"),
    ] {
        let params = json!({"objective": "x", "workspace": workspace, "budget": budget});
        let e = d.client().call("task.submit", params).unwrap_err();
        assert!(e.to_string().contains(says), "{budget}: {e}");
    }
    d.stop();
}
