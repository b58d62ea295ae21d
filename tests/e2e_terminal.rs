//! End-to-end: what agentd prints to a terminal from a model, a tool, a note or a file cannot act on
//! the terminal, and a reader that goes away is the end of the output, not a panic. A scripted model
//! saves a note and finishes with escape sequences in them (clear screen, OSC 52 clipboard write,
//! window title, a C1 CSI, a right-to-left override); every command a person reads shows them
//! escaped, and `--json` gives the text as the model wrote it.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use agentd_test_support::daemon::{team_config, TestDaemon};
use agentd_test_support::*;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_agentd");
const QUOTE: &str = "we indent with tabs";
const NOTE: &str = "Indent with tabs\u{1b}[2J\u{1b}]0;owned\u{7}\u{9b}31m\u{202e}gnp.exe";
const SUMMARY: &str = "done\u{1b}]52;c;ZXZpbA==\u{7}\r\u{1b}[1A";

/// Whether `text` holds anything a terminal would act on.
fn acts_on_a_terminal(text: &str) -> bool {
    text.chars().any(|c| (c.is_control() && c != '\n' && c != '\t') || ('\u{202a}'..='\u{202e}').contains(&c))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_model_wrote_is_shown_escaped_and_a_closed_stdout_ends_quietly() {
    let server = ScriptedServer::start(vec![
        sse(vec![tool_call("remember", json!({"note": NOTE, "quote": QUOTE}))]),
        sse(vec![finish(SUMMARY)]),
    ])
    .await;
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let ws = tempfile::tempdir().unwrap();
    // The objective holds a pasted escape too: `tasks` shows it.
    let task = d.submit(&format!("Note this: {QUOTE}.\u{1b}[5m"), ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(60));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{}", d.serve_log());
    let saved: Vec<&Value> = events.iter().filter(|e| e["kind"] == "memory_saved").collect();
    let id = saved[0]["id"].as_str().unwrap().to_string();

    for args in [
        vec!["memory", "list"],
        vec!["memory", "show", &id],
        vec!["watch", &task],
        vec!["log", &task],
        vec!["status", &task],
        vec!["tasks"],
    ] {
        let out = d.cli(&args);
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        let shown = String::from_utf8(out.stdout).unwrap();
        assert!(!acts_on_a_terminal(&shown), "{args:?} printed raw control characters: {shown:?}");
        assert!(shown.contains("\\u{1b}"), "{args:?} shows the escape as text: {shown}");
    }
    // `--json` is for programs: the text as the model wrote it.
    let notes: Value = serde_json::from_slice(&d.cli(&["memory", "list", "--json"]).stdout).unwrap();
    assert_eq!(notes[0]["text"], NOTE);
    let status: Value = serde_json::from_slice(&d.cli(&["status", &task, "--json"]).stdout).unwrap();
    assert_eq!(status["result"], SUMMARY);

    // A reader that goes away at once (`agentd log TASK | head -0`): exit 0, nothing said; it
    // panicked with "failed printing to stdout: Broken pipe".
    for args in [
        vec!["log", &task],
        vec!["log", &task, "--json"],
        vec!["watch", &task],
        vec!["status", &task],
        vec!["tasks"],
        vec!["memory", "list"],
        vec!["completions", "bash"],
    ] {
        let mut child = d.command(&args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {said}");
        assert!(said.is_empty(), "{args:?} said: {said}");
    }
}
