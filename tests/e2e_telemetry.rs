//! End-to-end: traces over OTLP. The real daemon, told `[telemetry] otlp_endpoint`, exports a team's
//! run to a collector of the test's own on 127.0.0.1, which decodes each OTLP/HTTP request with the
//! OpenTelemetry project's protobuf types (`opentelemetry-proto`, prost). The spans are there —
//! task → turn → request → tool and compaction — with their attributes, in one trace whose id is the
//! task's, the coder's turn under the lead's; and no prompt, argument or result is in any of it. A
//! collector that is not there, or answers 500, is counted in `/metrics` and `daemon.status`, said by
//! `agentd daemon`, and logged once.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use agentd_test_support::daemon::{team_config, TestDaemon};
use agentd_test_support::*;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BIN: &str = env!("CARGO_BIN_EXE_agentd");
const OBJECTIVE: &str = "Have the coder read the ledger files";
const SECRET_LINE: &str = "ledger entry";
const READS: usize = 24;

/// What a collector was sent: each request's path and body.
type Received = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// A collector: every OTLP/HTTP request body it was sent, answered `200` with an empty export
/// response. (The test's own HTTP/1.1 reading: one request after another on each connection.)
async fn collector() -> (String, Received) {
    collector_answering("200 OK").await
}

/// A collector answering every request with `status` (`200 OK`: an empty export response).
async fn collector_answering(status: &'static str) -> (String, Received) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let got: Received = Arc::default();
    let keep = got.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let keep = keep.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    let Some(end) = find(&buf, b"\r\n\r\n") else {
                        let mut chunk = [0u8; 65536];
                        match conn.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_string();
                    let length: usize = head
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().to_string())
                        })
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                    while buf.len() < end + 4 + length {
                        let mut chunk = [0u8; 65536];
                        match conn.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let body = buf[end + 4..end + 4 + length].to_vec();
                    buf.drain(..end + 4 + length);
                    let path = head.split_whitespace().nth(1).unwrap_or("").to_string();
                    keep.lock().unwrap().push((path, body));
                    let answer = format!("HTTP/1.1 {status}\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n");
                    if conn.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (url, got)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn responder(reads: Arc<AtomicUsize>) -> impl Fn(&Value) -> Step + Send + Sync + 'static {
    move |body: &Value| {
        if is_summary_request(body) {
            return sse(vec![text("Summary: the coder read the ledger files.")]);
        }
        if is_lead_request(body) {
            let returned = body["messages"].as_array().unwrap().iter().any(|m| m["role"] == "tool");
            return match returned {
                false => sse(vec![delegate("coder", "Read the ledger files one by one")]),
                true => sse(vec![finish("the coder read every ledger file")]),
            };
        }
        let n = reads.fetch_add(1, Ordering::SeqCst);
        match n < READS {
            true => sse(vec![tool_call("read_file", json!({"path": format!("ledger/{}.txt", n % 10)}))]),
            false => sse(vec![finish("read them")]),
        }
    }
}

fn attributes(span: &Span) -> HashMap<String, String> {
    span.attributes
        .iter()
        .map(|kv| {
            let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(Any::StringValue(s)) => s.clone(),
                Some(Any::IntValue(i)) => i.to_string(),
                Some(Any::BoolValue(b)) => b.to_string(),
                Some(Any::DoubleValue(d)) => d.to_string(),
                _ => String::new(),
            };
            (kv.key.clone(), value)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_teams_run_is_one_trace_of_task_turn_request_tool_and_compaction_spans_without_content() {
    let (url, got) = collector().await;
    let server = ScriptedServer::builder()
        .max_model_len(Some(16_384))
        .window(16_384)
        .report_usage(true)
        .responder(responder(Arc::default()))
        .start()
        .await;
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(ws.path().join("ledger")).unwrap();
    for i in 0..10 {
        let text: String =
            (1..=150).map(|n| format!("{SECRET_LINE} {i}-{n}: {}\n", (n * 7919 + i) % 10007)).collect();
        std::fs::write(ws.path().join(format!("ledger/{i}.txt")), text).unwrap();
    }
    let config =
        team_config(&server.base_url(), "gpt-4o", &format!("[telemetry]\notlp_endpoint = \"{url}\"\n"));
    let mut d = TestDaemon::prepare(Path::new(BIN), &config);
    d.set_env(&[("OTEL_BSP_SCHEDULE_DELAY", "200"), ("OTEL_SERVICE_NAME", "agentd-e2e")]);
    d.serve();
    let task = d.submit(OBJECTIVE, ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(120));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{}", d.serve_log());
    assert!(events.iter().any(|e| e["kind"] == "compaction_finished"), "the coder compacted");
    // Stopping the daemon sends what its exporter still holds.
    d.stop();

    let bodies = got.lock().unwrap().clone();
    assert!(!bodies.is_empty(), "nothing exported: {}", d.serve_log());
    let mut spans: Vec<Span> = Vec::new();
    for (path, body) in &bodies {
        assert_eq!(path, "/v1/traces");
        let text = String::from_utf8_lossy(body);
        for content in [OBJECTIVE, SECRET_LINE, "ledger/", "Read the ledger files one by one"] {
            assert!(!text.contains(content), "{content:?} was exported");
        }
        let request = ExportTraceServiceRequest::decode(body.as_slice()).unwrap();
        for resource in request.resource_spans {
            let service = resource.resource.as_ref().map(|r| r.attributes.clone()).unwrap_or_default();
            let named = service.iter().any(|kv| {
                kv.key == "service.name"
                    && matches!(kv.value.as_ref().and_then(|v| v.value.as_ref()), Some(Any::StringValue(s)) if s == "agentd-e2e")
            });
            assert!(named, "OTEL_SERVICE_NAME names the service: {service:?}");
            spans.extend(resource.scope_spans.into_iter().flat_map(|s| s.spans));
        }
    }
    let by_id: HashMap<Vec<u8>, &Span> = spans.iter().map(|s| (s.span_id.clone(), s)).collect();
    let named = |name: &'static str| spans.iter().filter(move |s| s.name == name);

    // One trace, whose id is the task's.
    let hex: String = task.chars().filter(|c| *c != '-').collect();
    let trace: Vec<u8> = (0..16).map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap()).collect();
    assert!(spans.iter().all(|s| s.trace_id == trace), "every span in the task's trace");
    let root = named("task").next().expect("a task span");
    assert_eq!(attributes(root)["agentd.task_id"], task);

    // The turns, the coder's under the lead's.
    let turns: Vec<&Span> = named("turn").collect();
    let lead = turns.iter().find(|s| attributes(s)["agentd.role"] == "lead").expect("the lead's turn");
    let coder = turns.iter().find(|s| attributes(s)["agentd.role"] == "coder").expect("the coder's turn");
    assert_eq!(lead.parent_span_id, root.span_id);
    let mut up = coder.parent_span_id.clone();
    let mut under_lead = false;
    while let Some(parent) = by_id.get(&up) {
        if parent.span_id == lead.span_id {
            under_lead = true;
        }
        up = parent.parent_span_id.clone();
    }
    assert!(under_lead, "the delegation nests the coder's turn under the lead's");

    // Requests with their model, server, window and usage; tools with their outcome; compactions.
    let requests: Vec<HashMap<String, String>> = named("request").map(attributes).collect();
    assert!(requests.len() > READS, "{}", requests.len());
    for r in &requests {
        assert_eq!(r["gen_ai.request.model"], "gpt-4o");
        assert_eq!(r["server.address"], server.base_url());
        assert_eq!(r["agentd.window"], "16384");
        assert!(r["agentd.tokens_sent"].parse::<u64>().unwrap() > 0);
        assert!(r.get("gen_ai.usage.input_tokens").is_some_and(|t| t.parse::<u64>().unwrap() > 0), "{r:?}");
    }
    let tools: Vec<HashMap<String, String>> = named("tool").map(attributes).collect();
    let reads = tools.iter().filter(|t| t["agentd.tool"] == "read_file");
    assert_eq!(reads.clone().count(), READS, "{tools:?}");
    assert!(reads.clone().all(|t| t["agentd.ok"] == "true" && t["agentd.call_id"].starts_with("call_")));
    assert_eq!(
        tools.iter().filter(|t| t["agentd.tool"] == "finish").count(),
        2,
        "the coder's and the lead's"
    );
    let tool = named("tool").next().unwrap();
    assert!(tool.end_time_unix_nano > tool.start_time_unix_nano, "a duration");
    assert_eq!(by_id[&tool.parent_span_id].name, "turn");
    let compactions: Vec<HashMap<String, String>> = named("compaction").map(attributes).collect();
    assert!(!compactions.is_empty());
    for c in &compactions {
        let (before, after) = (
            c["agentd.tokens_before"].parse::<u64>().unwrap(),
            c["agentd.tokens_after"].parse::<u64>().unwrap(),
        );
        assert!(after < before, "{c:?}");
        assert!(
            c["agentd.archive_id"].len() > 8 && c["agentd.batches"].parse::<u32>().unwrap() >= 1,
            "{c:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_include_content_the_spans_carry_the_words_redacted() {
    const SECRET: &str = "s3cret-value-of-the-e2e-telemetry-test";
    let (url, got) = collector().await;
    let server = ScriptedServer::builder()
        .report_usage(true)
        .script(vec![
            sse(vec![
                text("Reading the notes."),
                tool_call("read_file", json!({"path": "notes.txt", "why": SECRET})),
            ]),
            sse(vec![finish("read them")]),
        ])
        .start()
        .await;
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("notes.txt"), format!("hello from the notes {SECRET}\n")).unwrap();
    let extra = format!("[telemetry]\notlp_endpoint = \"{url}\"\ninclude_content = true\n[secrets]\nenv = [\"E2E_TRACE_SECRET\"]\n");
    let mut d = TestDaemon::prepare(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", &extra));
    d.set_env(&[("OTEL_BSP_SCHEDULE_DELAY", "200"), ("E2E_TRACE_SECRET", SECRET)]);
    d.serve();
    let task = d.submit("Read the notes", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(60));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{}", d.serve_log());
    d.stop();
    let bodies = got.lock().unwrap().clone();
    let mut spans: Vec<Span> = Vec::new();
    for (_, body) in &bodies {
        assert!(!String::from_utf8_lossy(body).contains(SECRET), "a secret was exported");
        let request = ExportTraceServiceRequest::decode(body.as_slice()).unwrap();
        spans.extend(request.resource_spans.into_iter().flat_map(|r| r.scope_spans).flat_map(|s| s.spans));
    }
    let read = spans
        .iter()
        .map(attributes)
        .find(|a| a.get("agentd.tool").map(String::as_str) == Some("read_file"))
        .unwrap();
    assert!(
        read["agentd.arguments"].contains("notes.txt")
            && read["agentd.arguments"].contains("[redacted: E2E_TRACE_SECRET]"),
        "{read:?}"
    );
    assert!(read["agentd.result"].contains("hello from the notes"), "{read:?}");
    let first = spans
        .iter()
        .filter(|s| s.name == "request")
        .map(attributes)
        .find(|a| a.contains_key("gen_ai.completion"));
    let first = first.expect("a request with its answer");
    assert!(
        spans
            .iter()
            .filter(|s| s.name == "request")
            .map(attributes)
            .any(|a| a["gen_ai.completion"] == "Reading the notes."),
        "{first:?}"
    );
    assert!(first["gen_ai.prompt"].len() <= 4096);
}

/// What `daemon.status` says of the exports once its count `field` (`exports_ok`,
/// `exports_failed`) is at least `n`.
async fn exports_once(d: &TestDaemon, field: &str, n: u64) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let status = d.client().call("daemon.status", json!({})).unwrap();
        if status["telemetry"][field].as_u64() >= Some(n) {
            return status["telemetry"].clone();
        }
        assert!(std::time::Instant::now() < deadline, "{status}\n{}", d.serve_log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `GET /metrics` (public here) as text.
async fn scrape(d: &TestDaemon) -> String {
    let status = d.client().call("daemon.status", json!({})).unwrap();
    let url = format!("http://{}/metrics", status["http"]["listen"].as_str().unwrap());
    let http = agentd_test_support::http_client().no_proxy().build().unwrap();
    http.get(url).send().await.unwrap().text().await.unwrap()
}

/// The value of the sample named `name` in a scrape.
fn sample(text: &str, name: &str) -> f64 {
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
    let found =
        scrape.samples.iter().find(|s| s.metric == name).unwrap_or_else(|| panic!("{name} in {text}"));
    match found.value {
        prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v) => v,
        _ => f64::NAN,
    }
}

/// The reproduction: a collector on a closed port, or answering 500, was silent. Now each
/// failed batch is counted in `/metrics` and `daemon.status` (with the last error), `agentd daemon`
/// says so, and the log says it once however many batches fail; a collector that takes them is
/// counted too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_not_there_or_answers_500_is_counted_said_and_logged_once() {
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let (failing, sent) = collector_answering("500 Internal Server Error").await;
    let (working, _) = collector().await;
    for (url, fails) in [(closed, true), (failing, true), (working, false)] {
        let server =
            ScriptedServer::builder().responder(|_: &Value| sse(vec![finish("nothing to do")])).start().await;
        let extra = format!(
            "[telemetry]\notlp_endpoint = \"{url}\"\n[http]\nlisten = \"127.0.0.1:0\"\nmetrics_public = true\n"
        );
        let mut d = TestDaemon::prepare(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", &extra));
        d.set_env(&[("OTEL_BSP_SCHEDULE_DELAY", "200")]);
        d.serve();
        let ws = tempfile::tempdir().unwrap();
        // Two tasks, each exported after the other failed: two failed batches at least.
        for (i, objective) in ["First", "Second"].iter().enumerate() {
            let task = d.submit(objective, ws.path());
            let events = d.events_until_end(&task, Duration::from_secs(60));
            assert_eq!(events.last().unwrap()["kind"], "task_finished", "{}", d.serve_log());
            let field = if fails { "exports_failed" } else { "exports_ok" };
            exports_once(&d, field, i as u64 + 1).await;
        }
        let endpoint = format!("{url}/v1/traces");
        let shown = String::from_utf8_lossy(&d.cli(&["daemon"]).stdout).to_string();
        let metrics = scrape(&d).await;
        let status = d.client().call("daemon.status", json!({})).unwrap()["telemetry"].clone();
        assert_eq!(status["endpoint"], endpoint.as_str(), "{status}");
        let log = d.serve_log();
        let warned = log.matches("traces could not be exported to the OTLP collector").count();
        if fails {
            let failed = status["exports_failed"].as_u64().unwrap();
            assert!(failed >= 2, "{status}");
            assert_eq!(status["exports_ok"], 0, "{status}");
            assert!(sample(&metrics, "agentd_otlp_export_failures_total") >= 2.0, "{metrics}");
            assert_eq!(sample(&metrics, "agentd_otlp_exports_total"), 0.0, "{metrics}");
            let error = status["last_error"].as_str().unwrap();
            assert!(status["last_error_at"].is_string(), "{status}");
            assert!(
                shown.contains(&format!("telemetry    traces to {endpoint}: 0 batches exported, "))
                    && shown.contains(" FAILED (the last at ")
                    && shown.contains(error),
                "{shown}"
            );
            assert_eq!(warned, 1, "said once, not per batch: {log}");
            assert!(log.contains(&endpoint), "the log names the collector: {log}");
        } else {
            assert_eq!(status["exports_failed"], 0, "{status}");
            assert!(sample(&metrics, "agentd_otlp_exports_total") >= 2.0, "{metrics}");
            assert_eq!(sample(&metrics, "agentd_otlp_export_failures_total"), 0.0, "{metrics}");
            assert!(
                !shown.contains("FAILED") && shown.contains(&format!("telemetry    traces to {endpoint}: ")),
                "{shown}"
            );
            assert_eq!(warned, 0, "{log}");
        }
    }
    assert!(sent.lock().unwrap().len() >= 2, "the failing collector was sent the batches");
}
