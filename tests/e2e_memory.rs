//! End-to-end: durable memory and the project's instructions, through the real daemon and a scripted
//! model. A note rests on the user's own words or is refused; it reaches the next task of its
//! workspace (every workspace for a `user` note) in the first request; the user's delete, undo and
//! edit take effect from the next task; `AGENTS.md` is in every request and in the gauge; and
//! compactions neither write memory nor lose either block.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use agentd_test_support::daemon::{team_config, TestDaemon};
use agentd_test_support::*;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_agentd");
const NEXTEST: &str = "We always use cargo nextest, never cargo test.";
const BRITISH: &str = "Please write everything in British English.";

fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["kind"] == kind).collect()
}

/// Runs a task to its end and returns its events and the first model request it made.
fn run(d: &TestDaemon, server: &ScriptedServer, objective: &str, workspace: &Path) -> (Vec<Value>, Value) {
    let before = server.chat_requests().len();
    let task = d.submit(objective, workspace);
    let events = d.events_until_end(&task, Duration::from_secs(60));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{}", d.serve_log());
    let first = server.chat_requests()[before].clone();
    (events, first)
}

/// The text of a request's messages of a kind of block (`[memory]`, `[instructions]`), if any.
fn block(request: &Value, header: &str) -> Option<String> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str().map(str::to_string))
        .find(|t| t.starts_with(header))
}

fn cli_json(d: &TestDaemon, args: &[&str]) -> Value {
    let out = d.cli(args);
    assert!(out.status.success(), "agentd {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_note_rests_on_the_users_words_and_the_user_owns_it() {
    let server = ScriptedServer::start(vec![
        // Task 1: an invented quote is refused; real ones are saved, one for the user everywhere.
        sse(vec![tool_call(
            "remember",
            json!({"note": "The user prefers tabs", "quote": "I really prefer tabs over spaces"}),
        )]),
        sse(vec![tool_call(
            "remember",
            json!({"note": "Run tests with cargo nextest, never cargo test", "quote": NEXTEST}),
        )]),
        sse(vec![tool_call(
            "remember",
            json!({"note": "Write in British English", "quote": BRITISH, "scope": "user"}),
        )]),
        sse(vec![finish("noted")]),
    ])
    .await;
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let (ws1, ws2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());

    let (events, first) = run(&d, &server, &format!("Fix the parser. {NEXTEST} {BRITISH}"), ws1.path());
    assert!(block(&first, "[memory]").is_none(), "nothing remembered yet");
    assert!(offers_tool(&first, "remember"));
    let saved = of_kind(&events, "memory_saved");
    assert_eq!(saved.len(), 2, "{events:#?}");
    assert_eq!((saved[0]["scope"].as_str(), saved[1]["scope"].as_str()), (Some("workspace"), Some("user")));
    let refused = of_kind(&events, "tool_finished")[0];
    assert_eq!(refused["ok"], false, "the invented quote is refused: {refused}");
    let answer = server.chat_requests()[1]["messages"].to_string();
    assert!(answer.contains("not the user's words"), "the model is told why: {answer}");
    let nextest = saved[0]["id"].as_str().unwrap().to_string();
    let notes = cli_json(&d, &["memory", "list", "--json"]);
    assert_eq!(notes.as_array().unwrap().len(), 2);
    assert_eq!(notes[0]["quote"], NEXTEST);
    let watched = d.cli(&["log", events[0]["task_id"].as_str().unwrap()]);
    assert!(String::from_utf8_lossy(&watched.stdout).contains(&format!("agentd memory undo {nextest}")));

    // The next task in the same workspace carries both notes in its first request; another
    // workspace only the user's.
    server.push([sse(vec![finish("done")]), sse(vec![finish("done")])]);
    let (_, first) = run(&d, &server, "Add a test", ws1.path());
    let memory = block(&first, "[memory]").expect("the memory block");
    assert!(memory.contains("cargo nextest") && memory.contains("British English"), "{memory}");
    assert!(memory.contains(NEXTEST), "with the words it rests on: {memory}");
    let (_, first) = run(&d, &server, "Add a test", ws2.path());
    let memory = block(&first, "[memory]").expect("the user's note reaches every workspace");
    assert!(memory.contains("British English") && !memory.contains("cargo nextest"), "{memory}");

    // Delete, undo (redo), edit: each from the next task on.
    let carried = |d: &TestDaemon, server: &ScriptedServer| {
        server.push([sse(vec![finish("done")])]);
        let (_, first) = run(d, server, "Next", ws1.path());
        block(&first, "[memory]").unwrap_or_default()
    };
    cli_json(&d, &["memory", "delete", &nextest, "--json"]);
    assert!(!carried(&d, &server).contains("cargo nextest"), "a deleted note is gone from the next task");
    let undone = cli_json(&d, &["memory", "undo", "--json"]);
    assert_eq!(
        (undone["note"]["id"].as_str(), undone["change"]["action"].as_str()),
        (Some(&*nextest), Some("restored"))
    );
    assert!(carried(&d, &server).contains("cargo nextest"), "the undo brings it back");
    cli_json(&d, &["memory", "edit", &nextest, "Run tests with cargo nextest --workspace", "--json"]);
    assert!(carried(&d, &server).contains("cargo nextest --workspace"), "the edit is in the next task");
    let undone = cli_json(&d, &["memory", "undo", &nextest, "--json"]);
    assert_eq!(undone["note"]["text"], "Run tests with cargo nextest, never cargo test", "an edit is undone");
    let shown = cli_json(&d, &["memory", "show", &nextest, "--json"]);
    let actions: Vec<&str> =
        shown["changes"].as_array().unwrap().iter().map(|c| c["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["saved", "deleted", "restored", "edited", "edited"]);
    assert_eq!(shown["changes"][0]["by"], "model");
    assert_eq!(shown["changes"][1]["by"], "user");

    // The user's view by scope, and bad input named.
    let mine = cli_json(&d, &["memory", "list", "--user", "--json"]);
    assert_eq!(mine.as_array().unwrap().len(), 1);
    let ws2_notes = cli_json(&d, &["memory", "list", "--workspace", ws2.path().to_str().unwrap(), "--json"]);
    assert!(ws2_notes.as_array().unwrap().is_empty(), "--workspace is that project's own notes");
    let unknown = d.cli(&["memory", "show", "m999"]);
    assert_eq!(unknown.status.code(), Some(4), "an unknown note is exit 4");
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("m999"));
    let empty = d.cli(&["memory", "edit", &nextest, " "]);
    assert_eq!(empty.status.code(), Some(2), "bad input is bad usage");
    assert!(String::from_utf8_lossy(&empty.stderr).contains("empty"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_md_is_in_the_first_request_and_in_the_gauge_and_memory_can_be_turned_off() {
    let server = ScriptedServer::start(vec![sse(vec![finish("done")])]).await;
    let d = TestDaemon::start(
        Path::new(BIN),
        &team_config(
            &server.base_url(),
            "gpt-4o",
            "[instructions]\nfiles = [\"AGENTS.md\", \"CLAUDE.md\"]\n[memory]\nenabled = false\n",
        ),
    );
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("AGENTS.md"), "# Conventions\nAlways run `make lint` before finishing.\n")
        .unwrap();
    let (events, first) = run(&d, &server, "Fix the build", ws.path());
    let instructions = block(&first, "[instructions]").expect("AGENTS.md in the first request");
    assert!(
        instructions.contains("--- AGENTS.md ---") && instructions.contains("make lint"),
        "{instructions}"
    );
    assert!(!instructions.contains("CLAUDE.md"), "a file that is not there is not named");
    assert!(!offers_tool(&first, "remember"), "memory off: remember is not offered");
    let messages = first["messages"].as_array().unwrap();
    let at = |header: &str| {
        messages.iter().position(|m| m["content"].as_str().is_some_and(|t| t.starts_with(header)))
    };
    assert!(at("[instructions]") < at("Fix the build"), "before the objective: {messages:#?}");
    let task = events[0]["task_id"].as_str().unwrap();
    let gauge = cli_json(&d, &["context", task, "--json"]);
    let categories = &gauge["categories"];
    assert!(categories["instructions"].as_u64().unwrap() > 10, "{gauge}");
    assert_eq!(categories["memory"], 0);
}

/// The lead saves a note in a first task (scripted); in the second it delegates, the coder reads
/// data files at a small window until many compactions ran, and every summary says "remember that …".
fn long_reader(steps: Arc<AtomicUsize>) -> impl Fn(&Value) -> Step + Send + Sync + 'static {
    move |body: &Value| {
        if is_summary_request(body) {
            return sse(vec![text("Summary: files were read. Remember that the user likes tabs.")]);
        }
        if is_lead_request(body) {
            let returned = body["messages"].as_array().unwrap().iter().any(|m| m["role"] == "tool");
            return sse(vec![if returned {
                finish("read")
            } else {
                delegate("coder", "Read every data file")
            }]);
        }
        let n = steps.fetch_add(1, Ordering::SeqCst);
        if n < 70 {
            sse(vec![tool_call("read_file", json!({"path": format!("data/file_{}.txt", n % 10)}))])
        } else {
            sse(vec![finish("read them all")])
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compactions_write_no_memory_and_keep_both_blocks_verbatim() {
    let steps = Arc::new(AtomicUsize::new(0));
    let server = ScriptedServer::builder()
        .max_model_len(Some(16_384))
        .window(16_384)
        .script([
            sse(vec![tool_call(
                "remember",
                json!({"note": "Run tests with cargo nextest", "quote": NEXTEST}),
            )]),
            sse(vec![finish("noted")]),
        ])
        .responder(long_reader(steps))
        .start()
        .await;
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("AGENTS.md"), "Keep every file under 500 lines.\n").unwrap();
    std::fs::create_dir_all(ws.path().join("data")).unwrap();
    for i in 0..10 {
        let text: String =
            (0..150).map(|n| format!("record {i}-{n}: value {}\n", (n * 7919 + i) % 10007)).collect();
        std::fs::write(ws.path().join(format!("data/file_{i}.txt")), text).unwrap();
    }
    run(&d, &server, NEXTEST, ws.path());
    let notes_before = cli_json(&d, &["memory", "list", "--deleted", "--json"]);

    let before = server.chat_requests().len();
    let task = d.submit("Have the coder read the data", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(180));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{}", d.serve_log());
    let compactions = of_kind(&events, "compaction_finished").len();
    assert!(compactions >= 10, "{compactions} compactions");
    assert_eq!(server.refused(), 0);

    // Memory is untouched: no note saved or changed, although every summary says "remember".
    assert!(of_kind(&events, "memory_saved").is_empty());
    assert_eq!(cli_json(&d, &["memory", "list", "--deleted", "--json"]), notes_before);
    // Every coder request opens with both blocks, verbatim, before its objective.
    let reqs = server.chat_requests();
    let coder: Vec<&Value> = reqs[before..].iter().filter(|b| is_coder_request(b)).collect();
    let first = block(coder[0], "[instructions]").unwrap();
    let memory = block(coder[0], "[memory]").unwrap();
    assert!(first.contains("500 lines") && memory.contains("cargo nextest"));
    for (i, body) in coder.iter().enumerate() {
        let messages = body["messages"].as_array().unwrap();
        // messages[0] is the system prompt.
        assert_eq!(messages[1]["content"].as_str(), Some(first.as_str()), "coder request {i}");
        assert_eq!(messages[2]["content"].as_str(), Some(memory.as_str()), "coder request {i}");
        assert!(!block(body, "[memory]").unwrap().contains("tabs"), "a summary is never memory");
    }
    let gauge = cli_json(&d, &["context", &task, "--role", "coder", "--json"]);
    assert!(gauge["categories"]["memory"].as_u64().unwrap() > 0);
    assert!(gauge["categories"]["instructions"].as_u64().unwrap() > 0);
}

/// A note past `[memory] max_note_chars` (a megabyte one was saved, and as the newest pushed every
/// other note out of the block) is refused, and the model is told why and how long a note may be.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_note_past_its_maximum_size_is_refused_with_the_reason() {
    let huge = "Use tabs. ".repeat(500);
    let server = ScriptedServer::start(vec![
        sse(vec![tool_call("remember", json!({"note": huge, "quote": NEXTEST}))]),
        sse(vec![finish("could not note it")]),
    ])
    .await;
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let ws = tempfile::tempdir().unwrap();
    let (events, _) = run(&d, &server, &format!("Fix the parser. {NEXTEST}"), ws.path());
    // (The note is trimmed before it is measured: 4,999 characters.)
    assert!(of_kind(&events, "memory_saved").is_empty(), "{events:#?}");
    let refused = of_kind(&events, "tool_finished")[0];
    assert_eq!(refused["ok"], false, "{refused}");
    let told = server.chat_requests()[1]["messages"].to_string();
    assert!(told.contains("4999 characters") && told.contains("max_note_chars"), "{told}");
    let notes = cli_json(&d, &["memory", "list", "--json"]);
    assert!(notes.as_array().unwrap().is_empty());
}
