//! End-to-end: what goes wrong — path escapes, provider faults and retries, refusals that state the
//! window, requests that cannot fit.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use agentd_test_support::daemon::{team_config, TestDaemon};
use agentd_test_support::workspace::sample_workspace;
use agentd_test_support::*;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_agentd");

fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["kind"] == kind).collect()
}

/// The tool results the model saw in a request, by call id.
fn tool_results(req: &Value) -> Vec<(String, String)> {
    req["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (m["tool_call_id"].as_str().unwrap().to_string(), m["content"].as_str().unwrap().to_string())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_escapes_are_refused_as_tool_errors_the_model_sees() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "top secret").unwrap();
    let ws = tempfile::tempdir().unwrap();
    sample_workspace(ws.path());
    std::os::unix::fs::symlink(outside.path(), ws.path().join("link")).unwrap();
    let server = ScriptedServer::start(vec![
        sse(vec![
            tool_call_with_id("c1", "read_file", json!({"path": "../secret.txt"})),
            tool_call_with_id("c2", "read_file", json!({"path": outside.path().join("secret.txt")})),
            tool_call_with_id("c3", "read_file", json!({"path": "link/secret.txt"})),
            tool_call_with_id("c4", "list_dir", json!({"path": "src/../.."})),
        ]),
        sse(vec![finish("could not read outside the workspace")]),
    ])
    .await;
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let task = d.submit("Try to escape", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(20));
    assert_eq!(events.last().unwrap()["kind"], "task_finished");
    let finished = of_kind(&events, "tool_finished");
    assert_eq!(finished.len(), 5);
    assert!(finished[..4].iter().all(|e| e["ok"] == false), "{finished:#?}");
    let results = tool_results(&server.chat_requests()[1]);
    assert_eq!(results.len(), 4);
    for (id, content) in &results {
        assert!(!content.contains("top secret"), "{id} leaked: {content}");
    }
    assert!(results[0].1.contains("escapes"), "{results:?}");
    assert!(results[1].1.contains("absolute"), "{results:?}");
    assert!(results[2].1.contains("symlink"), "{results:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_are_retried_by_policy_without_duplicating_messages() {
    let server = ScriptedServer::start(vec![
        rate_limited(Some("1")),
        server_error(503, "upstream overloaded"),
        cut_stream(vec![text("half an answ")]),
        empty_stream(),
        sse(vec![finish("done after four faults")]),
    ])
    .await;
    let retry = "[retry]\nrate_limit = { attempts = 3, delay = \"30s\" }\nserver_error = { attempts = 2, delay = \"10ms\" }\nstream_anomaly = { attempts = 2, delay = \"10ms\" }\n";
    let ws = tempfile::tempdir().unwrap();
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", retry));
    let task = d.submit("Survive the faults", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(30));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}");
    let retries = of_kind(&events, "retry_scheduled");
    let reasons: Vec<&str> = retries.iter().map(|e| e["reason"].as_str().unwrap()).collect();
    assert_eq!(reasons, ["rate_limit", "server_error", "stream_anomaly", "stream_anomaly"]);
    // Retry-After (1 s) wins over the configured 30 s; stream anomalies grow: 10 ms, then 20 ms.
    assert_eq!(retries[0]["delay_ms"], 1000);
    assert_eq!(retries[0]["max_attempts"], 3);
    assert_eq!(retries[2]["delay_ms"], 10);
    assert_eq!(retries[3]["delay_ms"], 20);
    // Five requests, all identical: a retry resends the same request and stores nothing twice.
    let reqs = server.chat_requests();
    assert_eq!(reqs.len(), 5);
    assert!(reqs.iter().all(|r| r["messages"] == reqs[0]["messages"]));
    let log = d.client().call("log.get", json!({"task_id": task, "role": "lead"})).unwrap();
    let assistant = log["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["type"] == "message" && r["message"]["role"] == "assistant")
        .count();
    assert_eq!(assistant, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhausted_retries_fail_the_task_with_the_last_provider_error() {
    let server = ScriptedServer::start(vec![empty_stream(), empty_stream(), empty_stream()]).await;
    let retry = "[retry]\nstream_anomaly = { attempts = 2, delay = \"10ms\" }\n";
    let ws = tempfile::tempdir().unwrap();
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", retry));
    let task = d.submit("Meet a silent model", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(30));
    let last = events.last().unwrap();
    assert_eq!(last["kind"], "task_failed");
    assert!(last["error"].as_str().unwrap().contains("stream anomaly"), "{last}");
    assert_eq!(of_kind(&events, "retry_scheduled").len(), 2);
    assert_eq!(server.chat_requests().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_refusal_fails_the_task_with_its_message() {
    let server = ScriptedServer::start(vec![server_error(401, "Incorrect API key provided")]).await;
    let ws = tempfile::tempdir().unwrap();
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let task = d.submit("Anything", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(20));
    let last = events.last().unwrap();
    assert_eq!(last["kind"], "task_failed");
    assert!(last["error"].as_str().unwrap().contains("Incorrect API key provided"), "{last}");
    let out = d.cli(&["status", &task]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("failed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_that_states_the_window_is_learned_and_persisted() {
    let server =
        ScriptedServer::start(vec![context_length_exceeded(16_384, 20_000), sse(vec![finish("fits now")])])
            .await;
    let ws = tempfile::tempdir().unwrap();
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let task = d.submit("Learn the window", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(20));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}");
    let learned = of_kind(&events, "window_learned");
    assert_eq!(learned.len(), 1);
    assert_eq!(learned[0]["old_window"], 256_000);
    assert_eq!(learned[0]["new_window"], 16_384);
    assert_eq!(learned[0]["source"], "error");
    let sent = of_kind(&events, "request_sent");
    assert_eq!(sent[0]["window_source"], "assumed");
    assert_eq!(sent[1]["window"], 16_384);
    assert_eq!(sent[1]["window_source"], "error");
    // `models probe` asks the server (which declares nothing) and keeps the learned window.
    let out = d.cli(&["models", "probe", "--role", "lead"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("16384") && text.contains("error"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_over_the_declared_window_is_never_sent() {
    let server = ScriptedServer::builder()
        .max_model_len(Some(1_000))
        .script(vec![sse(vec![finish("never")])])
        .start()
        .await;
    let ws = tempfile::tempdir().unwrap();
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let huge = "please consider this detail carefully. ".repeat(600);
    let task = d.submit(&huge, ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(20));
    let last = events.last().unwrap();
    assert_eq!(last["kind"], "task_failed");
    let error = last["error"].as_str().unwrap();
    // The objective alone is over the window: compaction cannot help, and says so with the numbers.
    assert!(error.contains("compaction failed") && error.contains("1000-token window"), "{error}");
    let failed = of_kind(&events, "compaction_failed");
    assert_eq!(failed.len(), 1, "{events:#?}");
    let started = of_kind(&events, "compaction_started");
    assert_eq!(started[0]["window"], 1000);
    assert_eq!(started[0]["trigger_tokens"], 800);
    assert_eq!(started[0]["destination_tokens"], 500);
    assert!(server.chat_requests().is_empty(), "nothing over the window reaches the model");
    let gauge = d.client().call("context.get", json!({"task_id": task, "role": "lead"})).unwrap();
    assert_eq!(gauge["window"], 1000);
    assert!(gauge["tokens"].as_u64().unwrap() > 1000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_during_a_retry_wait_ends_it_at_once() {
    let server = ScriptedServer::start(vec![rate_limited(Some("50"))]).await;
    let ws = tempfile::tempdir().unwrap();
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let task = d.submit("Wait for the rate limit", ws.path());
    let status = d.wait_for_state(&task, "waiting_retry", Duration::from_secs(10));
    assert_eq!(status["state"], "waiting_retry");
    let started = std::time::Instant::now();
    let r = d.client().call("task.cancel", json!({"task_id": task})).unwrap();
    assert_eq!(r["state"], "cancelled");
    assert!(started.elapsed() < Duration::from_secs(5), "the 50 s wait was not sat out");
    let events = d.events_until_end(&task, Duration::from_secs(10));
    let retry = of_kind(&events, "retry_scheduled");
    assert_eq!(retry[0]["delay_ms"], 50_000);
    assert_eq!(events.last().unwrap()["kind"], "task_cancelled");
    assert_eq!(server.chat_requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compact_at_is_remembered_per_role_and_applies_from_the_next_turn() {
    let server = ScriptedServer::builder()
        .max_model_len(Some(10_000))
        .script(vec![sse(vec![finish("one")]), sse(vec![finish("two")])])
        .start()
        .await;
    let ws = tempfile::tempdir().unwrap();
    let mut d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let first = d.submit("First", ws.path());
    let events = d.events_until_end(&first, Duration::from_secs(20));
    assert_eq!(of_kind(&events, "request_sent")[0]["trigger_tokens"], 8_000);

    let out = d.cli(&["settings", "lead", "compact_at", "40"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let e = d
        .client()
        .call("settings.set", json!({"role": "lead", "key": "compact_at", "value": 400}))
        .unwrap_err();
    assert_eq!(e.code, -32602);
    let e = d
        .client()
        .call("settings.set", json!({"role": "nobody", "key": "compact_at", "value": 40}))
        .unwrap_err();
    assert!(e.message.contains("nobody"), "{e}");
    // Remembered through a restart, per role and per server/model.
    d.stop();
    d.serve();
    let got = d.client().call("settings.get", json!({"role": "lead", "key": "compact_at"})).unwrap();
    assert_eq!(got["value"], 40);
    assert_eq!(got["model"], "gpt-4o");
    let second = d.submit("Second", ws.path());
    let events = d.events_until_end(&second, Duration::from_secs(20));
    let sent = of_kind(&events, "request_sent");
    assert_eq!(sent[0]["trigger_tokens"], 4_000);
    let gauge = d.client().call("context.get", json!({"task_id": second, "role": "lead"})).unwrap();
    assert_eq!(gauge["compact_at"], 40);
    assert_eq!(gauge["destination_tokens"], 3_500, "at least 5 points below a lower trigger");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_known_output_requirement_lowers_the_trigger() {
    let server = ScriptedServer::builder()
        .max_model_len(Some(10_000))
        .script(vec![sse(vec![finish("one")])])
        .start()
        .await;
    let ws = tempfile::tempdir().unwrap();
    let config = team_config(&server.base_url(), "gpt-4o", "").replacen(
        "model = \"gpt-4o\"\n",
        "model = \"gpt-4o\"\nmax_output_tokens = 4000\n",
        1,
    );
    let d = TestDaemon::start(Path::new(BIN), &config);
    let task = d.submit("Answer briefly", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(20));
    let sent = of_kind(&events, "request_sent");
    assert_eq!(sent[0]["trigger_tokens"], 6_000, "80% would leave the 4,000-token answer no room");
    assert_eq!(server.chat_requests()[0]["max_tokens"], 4000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_stream_is_asked_again_without_streaming_and_its_real_error_learned() {
    // llama-cpp-python streams nothing at all for a prompt over its context; the same request
    // without streaming carries the real refusal, which states the limit.
    let server = ScriptedServer::start(vec![
        silent_stream(),
        context_length_exceeded(2_048, 3_031),
        sse(vec![finish("fits now")]),
    ])
    .await;
    let ws = tempfile::tempdir().unwrap();
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let task = d.submit("Learn from silence", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(20));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}");
    let learned = of_kind(&events, "window_learned");
    assert_eq!(learned[0]["new_window"], 2048);
    assert!(of_kind(&events, "retry_scheduled").is_empty(), "no blind retry of the silence");
    let reqs = server.chat_requests();
    assert_eq!(reqs[0]["stream"], true);
    assert_eq!(reqs[1]["stream"], false, "asked again without streaming");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settings_change_applies_from_the_next_turn_never_mid_turn() {
    let server = ScriptedServer::builder()
        .max_model_len(Some(10_000))
        .script(vec![
            delayed(Duration::from_millis(800), sse(vec![tool_call("list_dir", json!({"path": "."}))])),
            sse(vec![finish("first turn done")]),
            sse(vec![finish("second task done")]),
        ])
        .start()
        .await;
    let ws = tempfile::tempdir().unwrap();
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let first = d.submit("First", ws.path());
    assert!(server.wait_for_requests(1, Duration::from_secs(10)).await);
    // Mid-turn: the model is still answering the first request.
    d.client().call("settings.set", json!({"role": "lead", "key": "compact_at", "value": 40})).unwrap();
    let events = d.events_until_end(&first, Duration::from_secs(20));
    let triggers: Vec<u64> =
        of_kind(&events, "request_sent").iter().map(|e| e["trigger_tokens"].as_u64().unwrap()).collect();
    assert_eq!(triggers, [8_000, 8_000], "the running turn keeps its snapshot");
    let second = d.submit("Second", ws.path());
    let events = d.events_until_end(&second, Duration::from_secs(20));
    assert_eq!(
        of_kind(&events, "request_sent")[0]["trigger_tokens"],
        4_000,
        "the next turn takes the change"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_that_states_no_limit_still_bounds_the_window() {
    // A 400 that says the input is too long but names no number: what was sent did not fit, so the
    // window is learned just below it, and the request is compacted and resent.
    let agent_requests = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = agent_requests.clone();
    let server = ScriptedServer::builder()
        .responder(move |body: &Value| {
            if is_summary_request(body) {
                return sse(vec![text("Summary: the files were read one by one.")]);
            }
            match counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
                n @ 0..=7 => sse(vec![tool_call("read_file", json!({"path": format!("f{n}.txt")}))]),
                8 => server_error(400, "The input is too long for this model."),
                _ => sse(vec![finish("read them all")]),
            }
        })
        .start()
        .await;
    let ws = tempfile::tempdir().unwrap();
    for i in 0..8 {
        std::fs::write(ws.path().join(format!("f{i}.txt")), format!("file {i}: {}\n", "data ".repeat(300)))
            .unwrap();
    }
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let task = d.submit("Read the eight files", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(30));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}");
    let learned = of_kind(&events, "window_learned");
    assert_eq!(learned.len(), 1, "{learned:#?}");
    let refused_at = of_kind(&events, "request_sent")[8]["tokens"].as_u64().unwrap();
    assert_eq!(learned[0]["new_window"].as_u64().unwrap(), refused_at * 95 / 100);
    assert_eq!(of_kind(&events, "compaction_finished").len(), 1);
    let last_sent = of_kind(&events, "request_sent").last().unwrap()["tokens"].as_u64().unwrap();
    assert!(last_sent < refused_at * 95 / 100, "{last_sent} vs {refused_at}");
}

/// A stream of nothing but `: keepalive` comments is stalled: it is cut at the idle deadline (the
/// comments are not progress) and the request retried; a server that answers nothing at all is cut
/// at the request deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alives_are_not_progress_and_every_request_has_a_deadline() {
    let server = ScriptedServer::start(vec![
        keep_alive_only(Duration::from_millis(100)),
        delayed(Duration::from_secs(60), sse(vec![finish("too late")])),
        sse(vec![finish("answered at last")]),
    ])
    .await;
    let ws = tempfile::tempdir().unwrap();
    let extra = "[requests]\nidle_timeout = \"1s\"\ntimeout = \"2s\"\n\
                 [retry]\nstream_anomaly = { attempts = 2, delay = \"10ms\" }\n";
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", extra));
    let started = std::time::Instant::now();
    let task = d.submit("Answer", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(30));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}\n{}", d.serve_log());
    let retries = of_kind(&events, "retry_scheduled");
    assert_eq!(retries.len(), 2, "{retries:#?}");
    assert!(retries.iter().all(|r| r["reason"] == "stream_anomaly"), "{retries:#?}");
    let log = d.serve_log();
    assert!(log.contains("sent no event for 1s"), "the idle deadline names itself: {log}");
    assert!(log.contains("within the request deadline of 2s"), "the total deadline names itself: {log}");
    let took = started.elapsed();
    assert!(took >= Duration::from_secs(3) && took < Duration::from_secs(20), "{took:?}");
    assert_eq!(server.chat_requests().len(), 3);
}

/// A 200 whose body is an HTML page is reported as what it is, not as an empty stream; a 529 from
/// an OpenAI-compatible server is "overloaded", with its own short schedule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_html_200_is_named_and_a_529_is_overloaded() {
    let server =
        ScriptedServer::start(vec![server_error(529, "the engine is overloaded"), html_body()]).await;
    let ws = tempfile::tempdir().unwrap();
    let extra = "[retry]\noverloaded = { attempts = 2, delay = \"10ms\" }\nstream_anomaly = { attempts = 0, delay = \"10ms\" }\n";
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", extra));
    let task = d.submit("Answer", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(20));
    let retries = of_kind(&events, "retry_scheduled");
    assert_eq!(retries.len(), 1, "{retries:#?}");
    assert_eq!(retries[0]["reason"], "overloaded");
    assert_eq!((retries[0]["max_attempts"].as_u64(), retries[0]["delay_ms"].as_u64()), (Some(2), Some(10)));
    let end = events.last().unwrap();
    assert_eq!(end["kind"], "task_failed", "{events:#?}");
    let error = end["error"].as_str().unwrap();
    assert!(error.contains("200 with text/html") && error.contains("not an event stream"), "{error}");
    assert!(error.contains("Network login required"), "the page's start is shown: {error}");
}

/// A quota that will not come back by waiting — OpenAI's 429 `insufficient_quota` (even with its
/// `Retry-After`), Anthropic's 402 `billing_error` — fails the task at once with the provider's
/// words: one request, no retry scheduled, no retry schedule spent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_used_up_quota_fails_the_task_at_once_on_both_wire_formats() {
    for kind in ["openai", "anthropic"] {
        let server = ScriptedServer::start(vec![quota_exhausted(), sse(vec![finish("never reached")])]).await;
        let retry = "[retry]\nrate_limit = { attempts = 5, delay = \"10ms\" }\n";
        let config = format!(
            "[providers.p]\nkind = \"{kind}\"\nbase_url = \"{}\"\napi_key_env = \"AGENTD_TEST_QUOTA_KEY\"\n\n\
             [team.lead]\nprovider = \"p\"\nmodel = \"m\"\n\n[team.coder]\nprovider = \"p\"\nmodel = \"m\"\n\n{retry}",
            server.base_url()
        );
        let mut d = TestDaemon::prepare(Path::new(BIN), &config);
        d.serve_with_env(&[("AGENTD_TEST_QUOTA_KEY", "k")]);
        let ws = tempfile::tempdir().unwrap();
        let task = d.submit("Anything", ws.path());
        let events = d.events_until_end(&task, Duration::from_secs(20));
        let last = events.last().unwrap();
        assert_eq!(last["kind"], "task_failed", "{kind}: {events:#?}");
        let error = last["error"].as_str().unwrap();
        assert!(error.contains("the provider's quota is used up"), "{kind}: {error}");
        assert!(
            error.contains("exceeded your current quota") || error.contains("credit balance is too low"),
            "{error}"
        );
        assert!(of_kind(&events, "retry_scheduled").is_empty(), "{kind}: {events:#?}");
        assert_eq!(server.chat_requests().len(), 1, "{kind}");
    }
}
