//! End-to-end: the window declared by Ollama's `/api/show` and by llama.cpp's `/props`, when the model
//! list declares none. `models probe` prints it as `declared`, and a task's requests are fitted to it.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use agentd_test_support::daemon::{team_config, TestDaemon};
use agentd_test_support::*;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_agentd");
const MODEL: &str = "qwen3-coder";

/// A team on one `kind = "ollama"` provider `o`.
fn ollama_config(base_url: &str) -> String {
    format!(
        "[providers.o]\nkind = \"ollama\"\nbase_url = \"{base_url}\"\n\n\
         [team.lead]\nprovider = \"o\"\nmodel = \"{MODEL}\"\n\n\
         [team.coder]\nprovider = \"o\"\nmodel = \"{MODEL}\"\n"
    )
}

fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["kind"] == kind).collect()
}

/// `models probe --role lead` prints `window` and `declared`; a one-request task's `request_sent`
/// carries the same window, declared.
fn assert_declared_window(server: &ScriptedServer, d: &TestDaemon, window: u64) {
    let out = d.cli(&["models", "probe", "--role", "lead"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains(&format!("window {window} tokens")) && text.contains("(declared)"), "{text}");
    assert!(text.contains(MODEL), "{text}");

    let ws = tempfile::tempdir().unwrap();
    let task = d.submit("Say done", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(30));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}\n{}", d.serve_log());
    let sent = of_kind(&events, "request_sent");
    assert!(!sent.is_empty(), "{events:#?}");
    for e in &sent {
        assert_eq!(e["window"], window, "{e}");
        assert_eq!(e["window_source"], "declared", "{e}");
    }
    assert_eq!(server.chat_requests().len(), sent.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ollama_num_ctx_from_api_show_is_the_declared_window() {
    let server = ScriptedServer::builder()
        .model(MODEL)
        .ollama_num_ctx(8192)
        .script(vec![sse(vec![finish("done")])])
        .start()
        .await;
    let d = TestDaemon::start(Path::new(BIN), &ollama_config(&server.base_url()));
    assert_declared_window(&server, &d, 8192);
    // It came from /api/show, asking for the configured model; the model list declared nothing.
    let shows: Vec<RecordedRequest> =
        server.requests().into_iter().filter(|r| r.path == "/api/show").collect();
    assert!(!shows.is_empty(), "{:?}", server.requests());
    assert!(shows.iter().all(|r| r.method == "POST" && r.body["model"] == MODEL), "{shows:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llama_cpp_n_ctx_from_props_is_the_declared_window() {
    let server = ScriptedServer::builder()
        .model(MODEL)
        .props_n_ctx(4096)
        .script(vec![sse(vec![finish("done")])])
        .start()
        .await;
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), MODEL, ""));
    assert_declared_window(&server, &d, 4096);
    assert!(
        server.requests().iter().any(|r| r.method == "GET" && r.path == "/props"),
        "{:?}",
        server.requests()
    );
    // /props answered first: Ollama's endpoint was never needed.
    assert!(server.requests().iter().all(|r| r.path != "/api/show"), "{:?}", server.requests());
}
