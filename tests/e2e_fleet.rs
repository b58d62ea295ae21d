//! End-to-end: a fleet of real `agentd serve` daemons on a real `nats-server` (started here, on a free
//! port) — one queue, one history, leases with fencing, a task that survives the loss of its daemon.
//!
//! Without a `nats-server` of 2.10 or later the tests say SKIPPED (and fail under
//! `AGENTD_REQUIRE_NATS`, as in CI).

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use agentd_test_support::daemon::{team_config, TestDaemon};
use agentd_test_support::nats::{skip_or_fail, NatsCluster, NatsServer, Relay};
use agentd_test_support::*;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_agentd");

/// A model that finishes every task at once.
async fn finishing_model() -> ScriptedServer {
    ScriptedServer::builder().responder(|_| sse(vec![finish("done")])).start().await
}

/// A model whose lead hands work about sleeping to the coder, whose coder runs `sleep 60` and
/// finishes once it has the command's result (or its interruption); the lead then finishes. Any
/// other task finishes at once.
async fn sleeping_model() -> ScriptedServer {
    ScriptedServer::builder()
        .responder(|body: &Value| {
            let tools: Vec<&str> = body["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|t| t["function"]["name"].as_str())
                .collect();
            let has_result = body["messages"].as_array().into_iter().flatten().any(|m| m["role"] == "tool");
            if !body["messages"].to_string().contains("Sleep") {
                return sse(vec![finish("done")]);
            }
            match (tools.contains(&"delegate"), has_result) {
                (true, false) => sse(vec![delegate("coder", "Sleep a minute")]),
                (true, true) => sse(vec![finish("done after the command")]),
                (false, false) => sse(vec![tool_call(
                    "run_command",
                    json!({"command": "echo slept > proof.txt && sleep 60"}),
                )]),
                (false, true) => sse(vec![finish("slept")]),
            }
        })
        .start()
        .await
}

/// A daemon's configuration as node `node` of the fleet on `nats`, leases lasting 3 s.
fn node_config(server: &ScriptedServer, nats: &[String], node: &str, extra: &str) -> String {
    let (url, model) = (server.base_url(), server.model());
    let nats = nats.iter().map(|u| format!("\"{u}\"")).collect::<Vec<_>>().join(", ");
    format!(
        "[providers.scripted]\nkind = \"openai\"\nbase_url = \"{url}\"\n\n\
         [team.lead]\nprovider = \"scripted\"\nmodel = \"{model}\"\n\n\
         [team.coder]\nprovider = \"scripted\"\nmodel = \"{model}\"\n\n\
         [cluster]\nnats = [{nats}]\nnode = \"{node}\"\nmax_tasks = 4\nlease = \"3s\"\n{extra}\n"
    )
}

fn call(d: &TestDaemon, method: &str, params: Value) -> Value {
    d.client().call(method, params).unwrap_or_else(|e| panic!("{method}: {e:?}"))
}

/// Polls `task.status` on `d` until `done` accepts it.
fn wait_status(d: &TestDaemon, task_id: &str, timeout: Duration, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + timeout;
    let mut last = Value::Null;
    while Instant::now() < deadline {
        last = call(d, "task.status", json!({"task_id": task_id}));
        if done(&last) {
            return last;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("task {task_id}: the status never came; last {last}");
}

/// A task's events as `d` reads its log: seq numbered 1, 2, 3 … with no gap or repeat.
fn contiguous_events(d: &TestDaemon, task_id: &str) -> Vec<Value> {
    let events = d.logged_events(task_id);
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "task {task_id}: {events:#?}");
    events
}

fn kinds(events: &[Value]) -> Vec<String> {
    events.iter().map(|e| e["kind"].as_str().unwrap().to_string()).collect()
}

#[test]
fn three_daemons_run_thirty_tasks_each_exactly_once_and_read_one_history() {
    let Some(nats) = NatsServer::start() else {
        skip_or_fail("three_daemons_run_thirty_tasks_each_exactly_once_and_read_one_history");
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(finishing_model());
    // c also serves the HTTP API: its clients see the fleet's tasks too.
    let daemons: Vec<TestDaemon> = ["a", "b", "c"]
        .iter()
        .map(|node| {
            let config = node_config(&server, &[nats.url()], node, "");
            let config =
                if *node == "c" { format!("{config}\n[http]\nlisten = \"127.0.0.1:0\"\n") } else { config };
            TestDaemon::start(Path::new(BIN), &config)
        })
        .collect();
    let ws = tempfile::tempdir().unwrap();
    let tasks: Vec<String> =
        (0..30).map(|i| daemons[i % 3].submit(&format!("Task number {i}"), ws.path())).collect();
    // Any daemon answers for every task, whichever ran it.
    for (i, task_id) in tasks.iter().enumerate() {
        let status = wait_status(&daemons[(i + 1) % 3], task_id, Duration::from_secs(60), |s| {
            s["state"] == "finished"
        });
        assert!(["a", "b", "c"].contains(&status["node"].as_str().unwrap()), "{status}");
    }
    assert_eq!(server.chat_requests().len(), 30, "every task ran exactly once");
    let listed = call(&daemons[2], "task.list", json!({}));
    let listed: BTreeSet<String> =
        listed.as_array().unwrap().iter().map(|t| t["task_id"].as_str().unwrap().to_string()).collect();
    assert_eq!(listed, tasks.iter().cloned().collect(), "every daemon lists the fleet's tasks");
    let http = rt.block_on(async {
        let url = format!("{}/api/v1/tasks/{}", daemons[2].http_base(), tasks[0]);
        let response = agentd_test_support::http_client()
            .build()
            .unwrap()
            .get(url)
            .bearer_auth(daemons[2].http_token())
            .send()
            .await
            .unwrap();
        (response.status().as_u16(), response.json::<Value>().await.unwrap())
    });
    assert_eq!((http.0, &http.1["state"]), (200, &json!("finished")), "{http:?}");
    assert!(["a", "b", "c"].contains(&http.1["node"].as_str().unwrap()), "{http:?}");
    // The gauge a task's node measured is the fleet's too: every daemon shows it.
    let ran_on = http.1["node"].as_str().unwrap().to_string();
    for d in &daemons {
        let context = call(d, "context.get", json!({"task_id": tasks[0], "role": "lead"}));
        assert!(context["tokens"].as_u64().unwrap_or(0) > 0, "ran on {ran_on}: {context}");
    }
    for task_id in &tasks {
        let seen: Vec<Vec<Value>> = daemons.iter().map(|d| contiguous_events(d, task_id)).collect();
        assert!(seen.windows(2).all(|w| w[0] == w[1]), "one history, whichever daemon reads it");
        let kinds = kinds(&seen[0]);
        assert_eq!(kinds.first().map(String::as_str), Some("task_started"));
        assert_eq!(kinds.iter().filter(|k| *k == "task_finished").count(), 1, "{kinds:?}");
        assert!(!kinds.contains(&"task_resumed".to_string()), "nothing was taken over: {kinds:?}");
    }
    // `watch` on one daemon of a task another runs: live, no gap, no repeat, to its end.
    let task_id = daemons[0].submit("Watched from elsewhere", ws.path());
    let watched = daemons[1].events_until_end(&task_id, Duration::from_secs(30));
    assert_eq!(watched, contiguous_events(&daemons[2], &task_id));
    let status = call(&daemons[0], "daemon.status", json!({}));
    let cluster = &status["cluster"];
    assert_eq!(cluster["node"], "a");
    assert_eq!(cluster["connected"], true);
    let nodes: Vec<&str> =
        cluster["nodes"].as_array().unwrap().iter().map(|n| n["node"].as_str().unwrap()).collect();
    assert_eq!(nodes, ["a", "b", "c"], "{cluster}");
    assert!(cluster["streams"].as_array().unwrap().iter().any(|s| s["name"] == "AGENTD_LOG"), "{cluster}");
}

#[test]
fn a_task_whose_daemon_is_killed_mid_command_is_taken_over_and_finishes() {
    let Some(nats) = NatsServer::start() else {
        skip_or_fail("a_task_whose_daemon_is_killed_mid_command_is_taken_over_and_finishes");
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(sleeping_model());
    let mut a = TestDaemon::start(Path::new(BIN), &node_config(&server, &[nats.url()], "a", ""));
    let ws = tempfile::tempdir().unwrap();
    let task_id = a.submit("Sleep, then finish", ws.path());
    // A runs it: its command is running when A dies.
    wait_status(&a, &task_id, Duration::from_secs(30), |s| s["node"] == "a" && s["state"] == "running");
    wait_for_command(&a, &task_id);
    let b = TestDaemon::start(Path::new(BIN), &node_config(&server, &[nats.url()], "b", ""));
    let watcher = watch_in_thread(&b, &task_id);
    std::thread::sleep(Duration::from_millis(300));
    let killed = Instant::now();
    a.kill9();
    let status = wait_status(&b, &task_id, Duration::from_secs(30), |s| s["state"] == "finished");
    let took = killed.elapsed();
    assert_eq!(status["node"], "b", "{status}");
    assert_eq!(status["result"], "done after the command");
    assert!(took < Duration::from_secs(3 + 10), "taken over within the lease and a few seconds: {took:?}");
    let events = finished_events(&b, &task_id);
    assert_eq!(watcher.join().unwrap(), events, "watched on B across the takeover: no gap, no repeat");
    let resumed: Vec<&Value> = events.iter().filter(|e| e["kind"] == "task_resumed").collect();
    assert_eq!(resumed.len(), 1, "{events:#?}");
    assert_eq!(resumed[0]["node"], "b");
    // No tool call is left without its end: the one A's death cut short is closed as interrupted.
    let started: Vec<&Value> = events.iter().filter(|e| e["kind"] == "tool_called").collect();
    for call in started {
        let ended = events.iter().any(|e| e["kind"] == "tool_finished" && e["call_id"] == call["call_id"]);
        assert!(ended, "call {} has no end: {events:#?}", call["call_id"]);
    }
    assert!(events.iter().any(|e| e["kind"] == "tool_finished" && e["interrupted"] == true), "{events:#?}");
    // The command's change, made on A before it died, is recorded by B from A's checkpoint (kept in
    // the fleet's object store), and B can show and take it back.
    let found = events.iter().find(|e| e["kind"] == "files_changed").expect("the cut call's change");
    assert_eq!(
        (found["interrupted"].as_bool(), found["role"].as_str()),
        (Some(true), Some("coder")),
        "{found}"
    );
    let diff = call(&b, "task.diff", json!({"task_id": task_id, "stat": true}));
    assert_eq!(diff["files"][0]["path"], "proof.txt", "{diff}");
    let reverted = call(&b, "task.revert", json!({"task_id": task_id, "to": 0}));
    assert_eq!(reverted["files"][0]["path"], "proof.txt", "{reverted}");
    assert!(!ws.path().join("proof.txt").exists(), "put back on B");
    let events = finished_events(&b, &task_id);

    // A, restarted under its name, takes new work and never writes to the task it lost.
    let before = events;
    a.serve();
    let next = a.submit("A new task", ws.path());
    wait_status(&a, &next, Duration::from_secs(30), |s| s["state"] == "finished");
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(a.logged_events(&task_id), before, "the lost task's history is unchanged");
}

/// A model whose lead hands two parts to two coders at once (`Part A`, `Part B`); each coder writes
/// its file, then runs `sleep 60`, then finishes once it has the command's result (or its
/// interruption); the lead finishes once both returned.
async fn branching_model() -> ScriptedServer {
    ScriptedServer::builder()
        .responder(|body: &Value| {
            let messages = body["messages"].as_array().cloned().unwrap_or_default();
            let results = messages.iter().filter(|m| m["role"] == "tool").count();
            let opening = messages.iter().find(|m| m["role"] == "user").map(|m| m["content"].to_string());
            let part = opening
                .as_deref()
                .and_then(|o| ["A", "B"].into_iter().find(|p| o.contains(&format!("Part {p}"))));
            match (part, results) {
                (Some(p), 0) => sse(vec![tool_call(
                    "write_file",
                    json!({"path": format!("{p}.txt"), "content": format!("{p}\n")}),
                )]),
                (Some(_), 1) => sse(vec![tool_call("run_command", json!({"command": "sleep 60"}))]),
                (Some(p), _) => sse(vec![finish(&format!("{p} written"))]),
                (None, 0) => sse(vec![
                    tool_call_with_id("d1", "delegate", json!({"to": "coder", "objective": "Part A"})),
                    tool_call_with_id("d2", "delegate", json!({"to": "coder", "objective": "Part B"})),
                ]),
                (None, _) => sse(vec![finish("both parts written")]),
            }
        })
        .start()
        .await
}

/// A task whose two writing branches are mid-command in their working copies when its node is
/// killed: the node that takes it over continues both branches in their copies (the folder every
/// node reaches, as they reach the workspace) and merges each patch once.
#[test]
fn a_task_with_branches_in_flight_moves_whole_on_takeover() {
    let Some(nats) = NatsServer::start() else {
        skip_or_fail("a_task_with_branches_in_flight_moves_whole_on_takeover");
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(branching_model());
    let copies = tempfile::tempdir().unwrap();
    let extra = format!("\n[tools]\ncopies = \"{}\"\n", copies.path().display());
    let config = |node: &str| {
        node_config(&server, &[nats.url()], node, &extra).replacen(
            "[team.coder]\n",
            "[team.coder]\nmax_instances = 2\n",
            1,
        )
    };
    let mut a = TestDaemon::start(Path::new(BIN), &config("a"));
    let ws = tempfile::tempdir().unwrap();
    let task_id = a.submit("Write two parts", ws.path());
    // Both branches run their command, each in its copy, when A dies.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let events = a.logged_events(&task_id);
        let running =
            events.iter().filter(|e| e["kind"] == "tool_called" && e["tool"] == "run_command").count();
        if running == 2 {
            break;
        }
        assert!(Instant::now() < deadline, "the branches never got to their commands: {events:#?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let b = TestDaemon::start(Path::new(BIN), &config("b"));
    a.kill9();
    let status = wait_status(&b, &task_id, Duration::from_secs(60), |s| s["state"] == "finished");
    assert_eq!(status["node"], "b", "{status}");
    for p in ["A", "B"] {
        assert_eq!(std::fs::read_to_string(ws.path().join(format!("{p}.txt"))).unwrap(), format!("{p}\n"));
    }
    let events = finished_events(&b, &task_id);
    for id in ["d1", "d2"] {
        let returned: Vec<&Value> =
            events.iter().filter(|e| e["kind"] == "delegation_returned" && e["call_id"] == id).collect();
        assert_eq!(returned.len(), 1, "{id}: {events:#?}");
        assert_eq!(returned[0]["files_changed"], 1, "{:#?}", returned[0]);
    }
    let writes = server
        .chat_requests()
        .iter()
        .filter(|b| {
            b["messages"].to_string().contains("Part ") && !b["messages"].to_string().contains("tool_call_id")
        })
        .count();
    assert_eq!(writes, 2, "no branch started over on B");
    for call in events.iter().filter(|e| e["kind"] == "tool_called") {
        assert!(
            events.iter().any(|e| e["kind"] == "tool_finished" && e["call_id"] == call["call_id"]),
            "{call}"
        );
    }
}

#[test]
fn a_queued_task_says_why_no_node_takes_it() {
    let Some(nats) = NatsServer::start() else {
        skip_or_fail("a_queued_task_says_why_no_node_takes_it");
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(finishing_model());
    let elsewhere = tempfile::tempdir().unwrap();
    let roots = format!("workspaces = [\"{}\"]", elsewhere.path().display());
    let a = TestDaemon::start(Path::new(BIN), &node_config(&server, &[nats.url()], "a", &roots));
    let ws = tempfile::tempdir().unwrap();
    let task_id = a.submit("Nobody reaches this", ws.path());
    let status = wait_status(&a, &task_id, Duration::from_secs(10), |s| s["queued_because"].is_string());
    assert_eq!(status["state"], "queued");
    let why = status["queued_because"].as_str().unwrap();
    assert_eq!(why, format!("no live node reaches {}", ws.path().canonicalize().unwrap().display()));
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(server.chat_requests().len(), 0, "nobody ran it");
    // A node that reaches the workspace joins: it takes the task.
    let b = TestDaemon::start(Path::new(BIN), &node_config(&server, &[nats.url()], "b", ""));
    let status = wait_status(&b, &task_id, Duration::from_secs(30), |s| s["state"] == "finished");
    assert_eq!(status["node"], "b");
    // A second daemon under a name in use is refused, naming the name.
    let mut twin = TestDaemon::prepare(Path::new(BIN), &node_config(&server, &[nats.url()], "b", ""));
    let refused = twin.try_serve().unwrap_err();
    assert!(refused.contains("node name \"b\" is taken"), "{refused}");
}

/// NATS not answering at start (its servers still booting) is waited out for `[cluster]
/// start_timeout`, `daemon.status` saying why meanwhile and every other method refused saying the
/// same; past it, `serve` exits with an error naming the URLs.
#[test]
fn nats_unreachable_at_start_is_waited_out_then_an_error_naming_the_urls() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(finishing_model());
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let config = team_config(&server.base_url(), server.model(), "")
        + &format!("[cluster]\nnats = [\"nats://127.0.0.1:{port}\"]\nnode = \"a\"\nstart_timeout = \"4s\"\n");
    let d = TestDaemon::prepare(Path::new(BIN), &config);
    let child = d.command(&["serve"]).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(3);
    let starting = loop {
        let answer = agentd_test_support::daemon::RpcClient::connect(&d.socket())
            .ok()
            .and_then(|mut c| c.call("daemon.status", json!({})).ok());
        if let Some(status) = answer {
            break status;
        }
        assert!(Instant::now() < deadline, "no answer on the socket while joining");
        std::thread::sleep(Duration::from_millis(50));
    };
    let why = starting["cluster"]["starting"].as_str().unwrap_or_default().to_string();
    assert!(why.contains(&format!("nats://127.0.0.1:{port}")) && why.contains("attempt"), "{starting:#}");
    assert_eq!(starting["cluster"]["connected"], false);
    let shown = String::from_utf8(d.cli(&["daemon"]).stdout).unwrap();
    assert!(shown.contains("cluster      starting — cannot connect to NATS"), "{shown}");
    let refused = d.client().call("task.list", json!({})).unwrap_err();
    assert_eq!(refused.code, -32003, "{refused:?}");
    assert!(refused.message.contains("cluster: starting — "), "{refused:?}");
    let out = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains(&format!("nats://127.0.0.1:{port}")) && said.contains("[cluster]"), "{said}");
    assert!(!d.socket().exists(), "the socket is gone with the daemon");
}

/// Three daemons started within milliseconds of each other on a fresh three-server cluster (a
/// reboot, systemd) all come up — they all exited, one with "stream name already in use with a
/// different configuration (10058)", two with "jetstream request timed out" — and the first task
/// submitted after goes through at once.
#[test]
fn daemons_started_together_on_a_fresh_cluster_all_come_up() {
    let Some(nats) = NatsCluster::start(3) else {
        skip_or_fail("daemons_started_together_on_a_fresh_cluster_all_come_up");
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(finishing_model());
    let urls = nats.urls();
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(3));
    let started = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut probes = Vec::new();
    let starts: Vec<_> = ["a", "b", "c"]
        .into_iter()
        .map(|node| {
            let mut d =
                TestDaemon::prepare(Path::new(BIN), &node_config(&server, &urls, node, "replicas = 3"));
            d.start_within = Duration::from_secs(150);
            // Once the socket answers (saying it joins), it answers until the daemon runs: the
            // listener is handed over, never unbound, so a client is not refused in between.
            let (socket, started) = (d.socket(), started.clone());
            probes.push(std::thread::spawn(move || {
                let mut answered = false;
                let mut refused = Vec::new();
                while !started.load(std::sync::atomic::Ordering::SeqCst) {
                    match std::os::unix::net::UnixStream::connect(&socket) {
                        Ok(_) => answered = true,
                        Err(e) if answered => refused.push(e.to_string()),
                        Err(_) => {}
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                refused
            }));
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                let started = d.try_serve();
                (d, started)
            })
        })
        .collect();
    let daemons: Vec<TestDaemon> = starts
        .into_iter()
        .map(|s| {
            let (d, started) = s.join().unwrap();
            if let Err(e) = started {
                panic!("a daemon did not come up: {e}");
            }
            d
        })
        .collect();
    started.store(true, std::sync::atomic::Ordering::SeqCst);
    for probe in probes {
        let refused = probe.join().unwrap();
        assert!(refused.is_empty(), "refused while starting: {refused:?}");
    }
    for d in &daemons {
        let status = call(d, "daemon.status", json!({}));
        assert_eq!(status["cluster"]["connected"], true, "{status:#}");
        assert!(status["cluster"].get("starting").is_none(), "{status:#}");
    }
    let ws = tempfile::tempdir().unwrap();
    let task = daemons[2].submit("The first task of the fleet", ws.path());
    wait_status(&daemons[0], &task, Duration::from_secs(60), |s| s["state"] == "finished");
}

/// Follows a task on `d` from its first event to the end its daemon announces (`task.end`), on a
/// thread of its own: what `watch` would print.
fn watch_in_thread(d: &TestDaemon, task_id: &str) -> std::thread::JoinHandle<Vec<Value>> {
    let (socket, task_id) = (d.socket(), task_id.to_string());
    std::thread::spawn(move || {
        let mut c = agentd_test_support::daemon::RpcClient::connect(&socket).unwrap();
        c.set_timeout(Some(Duration::from_secs(60)));
        c.call("task.subscribe", json!({"task_id": task_id, "after_seq": 0})).unwrap();
        let mut events = Vec::new();
        loop {
            let n = c.next_notification().unwrap();
            if n["method"] == "task.end" {
                return events;
            }
            events.push(n["params"].clone());
        }
    })
}

/// The task's events once its log holds its `task_finished` (the record says `finished` a moment
/// before the event is in).
fn finished_events(d: &TestDaemon, task_id: &str) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let events = contiguous_events(d, task_id);
        if events.iter().any(|e| e["kind"] == "task_finished") || Instant::now() > deadline {
            return events;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until the task's log on `d` holds the `tool_called` of the coder's `run_command` (the
/// command is running; the lead's `delegate` call comes before it).
fn wait_for_command(d: &TestDaemon, task_id: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let running = |d: &TestDaemon| {
        d.logged_events(task_id).iter().any(|e| e["kind"] == "tool_called" && e["tool"] == "run_command")
    };
    while !running(d) {
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_daemon_cut_off_from_nats_stops_its_task_and_its_late_writes_are_refused() {
    let Some(nats) = NatsServer::start() else {
        skip_or_fail("a_daemon_cut_off_from_nats_stops_its_task_and_its_late_writes_are_refused");
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(sleeping_model());
    let relay = Relay::start(nats.port());
    let a = TestDaemon::start(Path::new(BIN), &node_config(&server, &[relay.url()], "a", ""));
    let ws = tempfile::tempdir().unwrap();
    let task_id = a.submit("Sleep, then finish", ws.path());
    wait_status(&a, &task_id, Duration::from_secs(30), |s| s["node"] == "a");
    wait_for_command(&a, &task_id);
    let b = TestDaemon::start(Path::new(BIN), &node_config(&server, &[nats.url()], "b", ""));
    relay.cut();
    // A cannot renew: it stops the task itself; once the lease lapses B takes it over.
    let status = wait_status(&b, &task_id, Duration::from_secs(30), |s| s["state"] == "finished");
    assert_eq!(status["node"], "b", "{status}");
    let log = a.serve_log();
    assert!(log.contains("stopping a task this node can no longer hold"), "{log}");
    // Back on the network, A writes nothing of the task it lost.
    let before = finished_events(&b, &task_id);
    relay.mend();
    std::thread::sleep(Duration::from_secs(4));
    let after = contiguous_events(&b, &task_id);
    assert_eq!(after, before, "nothing from A lands after the takeover");
    let resumed: Vec<&Value> = after.iter().filter(|e| e["kind"] == "task_resumed").collect();
    assert_eq!(resumed.len(), 1, "{after:#?}");
    assert_eq!(resumed[0]["node"], "b");
}

#[test]
fn a_daemon_stopped_hands_its_task_over_and_a_watcher_elsewhere_sees_it_through() {
    let Some(nats) = NatsServer::start() else {
        skip_or_fail("a_daemon_stopped_hands_its_task_over_and_a_watcher_elsewhere_sees_it_through");
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(sleeping_model());
    let mut a = TestDaemon::start(Path::new(BIN), &node_config(&server, &[nats.url()], "a", ""));
    let ws = tempfile::tempdir().unwrap();
    let task_id = a.submit("Sleep, then finish", ws.path());
    wait_for_command(&a, &task_id);
    let b = TestDaemon::start(Path::new(BIN), &node_config(&server, &[nats.url()], "b", ""));
    // B follows the task live from its first event, across the handover, to its end.
    let watcher = watch_in_thread(&b, &task_id);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(a.stop(), Some(0));
    let stopped = Instant::now();
    let status = wait_status(&b, &task_id, Duration::from_secs(30), |s| s["state"] == "finished");
    assert_eq!(status["node"], "b");
    assert!(
        stopped.elapsed() < Duration::from_secs(3),
        "handed over at once, not after the lease: {:?}",
        stopped.elapsed()
    );
    let watched: Vec<Value> = watcher.join().unwrap();
    assert_eq!(watched, contiguous_events(&b, &task_id), "no gap, no repeat, across the handover");
    let kinds = kinds(&watched);
    assert!(!kinds.contains(&"task_interrupted".to_string()), "a handover ends nothing: {kinds:?}");
    assert_eq!(kinds.last().map(String::as_str), Some("task_finished"));
}

#[test]
fn cancel_and_follow_up_reach_a_task_from_any_daemon() {
    let Some(nats) = NatsServer::start() else {
        skip_or_fail("cancel_and_follow_up_reach_a_task_from_any_daemon");
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(sleeping_model());
    let a = TestDaemon::start(Path::new(BIN), &node_config(&server, &[nats.url()], "a", ""));
    let ws = tempfile::tempdir().unwrap();
    let sleeping = a.submit("Sleep, then finish", ws.path());
    wait_for_command(&a, &sleeping);
    let b = TestDaemon::start(Path::new(BIN), &node_config(&server, &[nats.url()], "b", ""));
    // Cancelled from B: A, which runs it, stops it.
    let cancelled = call(&b, "task.cancel", json!({"task_id": sleeping}));
    assert_eq!(cancelled["state"], "cancelled");
    let events = contiguous_events(&b, &sleeping);
    assert_eq!(kinds(&events).last().map(String::as_str), Some("task_cancelled"));
    let refused = b.client().call("task.cancel", json!({"task_id": sleeping})).unwrap_err();
    assert!(refused.message.contains("already cancelled"), "{refused:?}");
    // A follow-up from B to a task A finished: queued, taken, run again.
    let quick = a.submit("A quick one", ws.path());
    wait_status(&b, &quick, Duration::from_secs(30), |s| s["state"] == "finished");
    let answer = call(&b, "task.message", json!({"task_id": quick, "text": "And once more"}));
    assert_eq!(answer["state"], "queued");
    let deadline = Instant::now() + Duration::from_secs(30);
    let finished = |d: &TestDaemon| {
        kinds(&contiguous_events(d, &quick)).iter().filter(|k| *k == "task_finished").count()
    };
    while finished(&a) < 2 {
        assert!(Instant::now() < deadline, "the follow-up never finished");
        std::thread::sleep(Duration::from_millis(50));
    }
    let kinds = kinds(&contiguous_events(&a, &quick));
    assert_eq!(kinds.iter().filter(|k| *k == "task_finished").count(), 2, "{kinds:?}");
    assert!(kinds.contains(&"task_message".to_string()), "{kinds:?}");
}

/// Starts a daemon, trying again while a newly formed NATS cluster elects its JetStream leader.
/// A daemon on a cluster that may still be forming: `serve` waits for it by itself (it had to be
/// started again and again until the cluster answered).
fn start_on_cluster(config: &str) -> TestDaemon {
    let mut d = TestDaemon::prepare(Path::new(BIN), config);
    d.start_within = Duration::from_secs(120);
    d.serve();
    d
}

#[test]
fn a_fleet_on_three_nats_servers_rides_out_one_down_and_waits_out_two() {
    let Some(mut nats) = NatsCluster::start(3) else {
        skip_or_fail("a_fleet_on_three_nats_servers_rides_out_one_down_and_waits_out_two");
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(sleeping_model());
    let urls = nats.urls();
    let a = start_on_cluster(&node_config(&server, &urls, "a", "replicas = 3"));
    let b = start_on_cluster(&node_config(&server, &urls, "b", "replicas = 3"));
    let ws = tempfile::tempdir().unwrap();
    // The first submit after the cluster forms goes through: the daemons came up once their
    // streams and buckets answered (it could fail with "no responders", to be tried again).
    let first = a.submit("Before anything fails", ws.path());
    wait_status(&b, &first, Duration::from_secs(30), |s| s["state"] == "finished");
    let status = call(&a, "daemon.status", json!({}));
    let log = status["cluster"]["streams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "AGENTD_LOG")
        .unwrap()
        .clone();
    // Three replicas: the leader and two peers, current or (for a moment) catching up.
    let peers = log["current"].as_u64().unwrap() + log["lagging"].as_array().map_or(0, |l| l.len() as u64);
    assert_eq!((log["replicas"].as_u64(), peers), (Some(3), 2), "{status}");

    // One server of three down: the fleet goes on, once the streams it led have new leaders.
    nats.stop_server(0);
    for d in [&a, &b] {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let status = call(d, "daemon.status", json!({}));
            let cluster = &status["cluster"];
            if cluster["connected"] == true
                && cluster["error"].is_null()
                && !cluster["streams"].as_array().unwrap().is_empty()
            {
                break;
            }
            assert!(Instant::now() < deadline, "the fleet never recovered from one server down: {status}");
            std::thread::sleep(Duration::from_millis(250));
        }
    }
    let second = b.submit("With one server down", ws.path());
    wait_status(&a, &second, Duration::from_secs(30), |s| s["state"] == "finished");

    // Two down: no quorum. A task running then cannot keep its lease; it waits, and goes on once a
    // quorum is back — nothing lost, nothing twice.
    let third = a.submit("Sleep, then finish", ws.path());
    wait_for_command(&a, &third);
    let holder = call(&a, "task.status", json!({"task_id": third}))["node"].as_str().unwrap().to_string();
    let holder = if holder == "a" { &a } else { &b };
    nats.stop_server(1);
    std::thread::sleep(Duration::from_secs(6));
    let status = call(&a, "daemon.status", json!({}));
    assert!(status["cluster"]["error"].is_string(), "the fleet's trouble is visible: {status}");
    // The node that held the task stopped it, and says it waits, and why (it read `running`).
    let waiting = call(holder, "task.status", json!({"task_id": third}));
    assert_eq!(waiting["state"], "waiting", "{waiting:#}");
    let why = waiting["waiting_because"].as_str().unwrap_or_default();
    assert!(why.contains("lease could not be renewed") && why.contains("goes on when"), "{waiting:#}");
    nats.start_server(0);
    nats.start_server(1);
    let deadline = Instant::now() + Duration::from_secs(60);
    while call(&a, "task.status", json!({"task_id": third}))["state"] != "finished" {
        if Instant::now() > deadline {
            eprintln!("LOGA {}", a.serve_log());
            eprintln!("LOGB {}", b.serve_log());
            eprintln!("RECORDS {}", call(&b, "log.get", json!({"task_id": third, "limit": 1000})));
            panic!("never finished");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = wait_status(&a, &third, Duration::from_secs(60), |s| s["state"] == "finished");
    assert_eq!(status["result"], "done after the command");
    let events = finished_events(&b, &third);
    let kinds = kinds(&events);
    assert_eq!(kinds.iter().filter(|k| *k == "task_finished").count(), 1, "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| *k == "task_started").count(), 1, "{kinds:?}");
    assert_eq!(contiguous_events(&a, &third), events, "one history");
    // Once the fleet could be written again, the node that took the task said why it was taken over.
    let resumed: Vec<&Value> = events.iter().filter(|e| e["kind"] == "task_resumed").collect();
    assert!(
        resumed.iter().any(|e| e["after"].as_str().is_some_and(|w| w.starts_with("taken over"))),
        "{resumed:#?}"
    );
}

#[test]
fn a_daemon_logs_in_with_the_token_its_environment_holds_and_a_wrong_one_is_refused() {
    let Some(nats) = NatsServer::start_with(&["--auth", "s3cret-fleet-token"]) else {
        skip_or_fail("a_daemon_logs_in_with_the_token_its_environment_holds_and_a_wrong_one_is_refused");
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(finishing_model());
    let config = node_config(&server, &[nats.url()], "a", "token_env = \"AGENTD_E2E_NATS_TOKEN\"");
    let mut wrong = TestDaemon::prepare(Path::new(BIN), &config);
    wrong.set_env(&[("AGENTD_E2E_NATS_TOKEN", "not-the-token")]);
    let refused = wrong.try_serve().unwrap_err();
    assert!(refused.contains(&nats.url()) && refused.to_lowercase().contains("author"), "{refused}");
    let mut unset = TestDaemon::prepare(Path::new(BIN), &config);
    let refused = unset.try_serve().unwrap_err();
    assert!(refused.contains("cluster.token_env") && refused.contains("AGENTD_E2E_NATS_TOKEN"), "{refused}");
    let mut right = TestDaemon::prepare(Path::new(BIN), &config);
    right.set_env(&[("AGENTD_E2E_NATS_TOKEN", "s3cret-fleet-token")]);
    right.try_serve().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let task_id = right.submit("Logged in", ws.path());
    wait_status(&right, &task_id, Duration::from_secs(30), |s| s["state"] == "finished");
}

#[test]
fn a_task_that_failed_on_one_daemon_is_resumed_from_another() {
    let Some(nats) = NatsServer::start() else {
        skip_or_fail("a_task_that_failed_on_one_daemon_is_resumed_from_another");
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    // The model refuses the first request (a 400 is not retried: the task fails), then finishes.
    let refused = Arc::new(AtomicBool::new(false));
    let server = rt.block_on(
        ScriptedServer::builder()
            .responder(move |_| match refused.swap(true, Ordering::SeqCst) {
                false => server_error(400, "the model is not loaded"),
                true => sse(vec![finish("done on the second try")]),
            })
            .start(),
    );
    let a = TestDaemon::start(Path::new(BIN), &node_config(&server, &[nats.url()], "a", ""));
    let ws = tempfile::tempdir().unwrap();
    let task_id = a.submit("Fail, then finish", ws.path());
    wait_status(&a, &task_id, Duration::from_secs(30), |s| s["state"] == "failed");
    let b = TestDaemon::start(Path::new(BIN), &node_config(&server, &[nats.url()], "b", ""));
    assert_eq!(call(&b, "task.resume", json!({"task_id": task_id}))["state"], "queued");
    let status = wait_status(&b, &task_id, Duration::from_secs(30), |s| s["state"] == "finished");
    assert_eq!(status["result"], "done on the second try");
    let kinds = kinds(&finished_events(&a, &task_id));
    assert_eq!(kinds.iter().filter(|k| *k == "task_failed").count(), 1, "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| *k == "task_resumed").count(), 1, "{kinds:?}");
    assert_eq!(kinds.last().map(String::as_str), Some("task_finished"), "{kinds:?}");
}
