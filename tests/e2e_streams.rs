//! End-to-end: big stream events (issue 44, item 6). A tool call's arguments of several megabytes
//! in one SSE event are read, in time linear in the bytes, and the call runs; an event arriving more
//! slowly than the idle deadline is read to its end, since its bytes keep coming, while keep-alives
//! alone still stall; an event over the cap on one event's size fails the task at once, naming it.
//!
//! The reproduction, as the issue gives it: one event carrying a tool call's arguments of 1 / 2 / 4 /
//! 8 MB took 0.10 / 1.13 / 3.77 / 11.35 s to read (the old reader parsed its whole buffer again for
//! every chunk that came), and a Responses stream with a 42 MB item failed as "stream anomaly
//! (stalled): no event for 30 s". `examples/bench_stream.rs` prints the figures.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use agentd_test_support::daemon::{team_config, TestDaemon};
use agentd_test_support::*;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_agentd");

fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["kind"] == kind).collect()
}

/// `len` bytes of text in lines, as a file an agent writes might read: quotes and newlines that the
/// arguments escape, and a non-ASCII character that the stream's pieces may split.
fn text_of(len: usize) -> String {
    let line = "    let \"value\" = compute(alpha, beta); // the next step — of the work\n";
    let mut text = line.repeat(len / line.len() + 1);
    let mut end = len;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text
}

/// The lead hands the writing to the coder, whose call is `write`; then both finish.
fn writing_team(write: Step) -> Vec<Step> {
    vec![
        sse(vec![delegate("coder", "Write big.txt")]),
        write,
        sse(vec![finish("wrote big.txt")]),
        sse(vec![finish("the coder wrote big.txt")]),
    ]
}

/// The first reproduction: a `write_file` of 8 MB whose arguments come in one SSE event of
/// about 9 MB, written 16 KiB at a time as a server flushing as it goes writes it, is read and run
/// at the first try: the file holds exactly what the model wrote, and the task finishes. (The old
/// reader took about 10 s over this event, scanning its buffer again for each piece, and with
/// `idle_timeout = "5s"` it stalled: "no event for 5s".)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_of_several_megabytes_in_one_event_is_read_and_run() {
    let content = text_of(8_000_000);
    let write = sse(vec![tool_call_whole("write_file", json!({"path": "big.txt", "content": content}))]);
    let write = trickled(16 * 1024, Duration::ZERO, write);
    let server =
        ScriptedServer::builder().max_model_len(10_000_000).script(writing_team(write)).start().await;
    let ws = tempfile::tempdir().unwrap();
    let extra = "[requests]\nidle_timeout = \"5s\"\n";
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", extra));
    let task = d.submit("Write big.txt", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(120));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{}", d.serve_log());
    assert!(of_kind(&events, "retry_scheduled").is_empty(), "read at the first try: {}", d.serve_log());
    let written = std::fs::read_to_string(ws.path().join("big.txt")).unwrap();
    assert!(written == content, "big.txt holds {} bytes, the model wrote {}", written.len(), content.len());
    assert_eq!(server.chat_requests().len(), 4);
}

/// `requests.idle_timeout = "1s"`: a stream of nothing but keep-alives is cut after a second (they
/// are not progress) and the request sent again; the answer then comes 3 KiB at a time, a piece every
/// 300 ms, so its big event takes several seconds — longer than the deadline — to arrive whole, and
/// is read to its end, since each piece brings part of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_slower_than_the_idle_deadline_is_read_while_its_bytes_keep_coming() {
    let content = text_of(40_000);
    let slow = trickled(
        3 * 1024,
        Duration::from_millis(300),
        sse(vec![tool_call_whole("write_file", json!({"path": "big.txt", "content": content}))]),
    );
    let mut script = writing_team(slow);
    script.insert(1, keep_alive_only(Duration::from_millis(100)));
    let server = ScriptedServer::start(script).await;
    let ws = tempfile::tempdir().unwrap();
    let extra =
        "[requests]\nidle_timeout = \"1s\"\n[retry]\nstream_anomaly = { attempts = 1, delay = \"10ms\" }\n";
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", extra));
    let started = std::time::Instant::now();
    let task = d.submit("Write big.txt", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(60));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}\n{}", d.serve_log());
    assert_eq!(std::fs::read_to_string(ws.path().join("big.txt")).unwrap(), content);
    // The keep-alives stalled; the slow answer did not.
    let retries = of_kind(&events, "retry_scheduled");
    assert_eq!(retries.len(), 1, "{retries:#?}");
    assert_eq!(retries[0]["reason"], "stream_anomaly");
    let log = d.serve_log();
    assert_eq!(log.matches("sent no event for 1s, nor any part of one").count(), 1, "{log}");
    // The slow answer's stream (about 45 KB in pieces of 3 KiB) took longer than the deadline.
    assert!(started.elapsed() > Duration::from_secs(4), "{:?}", started.elapsed());
    assert_eq!(server.chat_requests().len(), 5);
}

/// An event past 64 MiB fails the task as soon as the cap is passed, with the cap and the bytes
/// that had come in its words, and it is not asked again (the same request would be answered the
/// same): one request, no retry, though `stream_anomaly` allows two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_over_the_cap_fails_the_task_at_once_naming_the_cap() {
    let content = "x".repeat(65 * 1024 * 1024);
    let huge = sse(vec![tool_call_whole("write_file", json!({"path": "huge.txt", "content": content}))]);
    drop(content);
    let server = ScriptedServer::start(vec![huge, sse(vec![finish("never asked")])]).await;
    let ws = tempfile::tempdir().unwrap();
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let task = d.submit("Write huge.txt", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(120));
    let end = events.last().unwrap();
    assert_eq!(end["kind"], "task_failed", "{events:#?}");
    let error = end["error"].as_str().unwrap();
    assert!(error.contains("stream anomaly (too_large)"), "{error}");
    assert!(error.contains("passed 64 MiB, the most agentd reads of one event"), "{error}");
    let had_come: u64 = error
        .split(" bytes of it had come")
        .next()
        .and_then(|head| head.rsplit('(').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the bytes that had come are named: {error}"));
    assert!(had_come > 64 * 1024 * 1024 && had_come < 65 * 1024 * 1024, "{had_come}");
    assert!(of_kind(&events, "retry_scheduled").is_empty(), "{events:#?}");
    assert!(!ws.path().join("huge.txt").exists());
    assert_eq!(server.chat_requests().len(), 1, "asked once");
}
