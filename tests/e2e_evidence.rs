//! End-to-end: large tool results become evidence. At a 32K window (declared by the server and
//! enforced by its own count) a 400 KB file read and a 300 KB command output are stored whole in the
//! evidence archive, the model gets one page at a time and can page through all of it with
//! `read_evidence`; the archive is inspectable from the CLI, and a blob altered or deleted on disk is
//! named by `verify` and never served.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use agentd_test_support::daemon::{team_config, TestDaemon};
use agentd_test_support::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_agentd");
const WINDOW: u64 = 32_768;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// `line 000001: …` lines until the text is at least `bytes` long.
fn numbered_text(bytes: usize) -> String {
    let mut text = String::with_capacity(bytes + 100);
    let mut n = 0u64;
    while text.len() < bytes {
        n += 1;
        text.push_str(&format!("line {n:06}: the quick brown fox jumps over the lazy dog {}\n", n % 97));
    }
    text
}

fn tool_messages(body: &Value) -> Vec<&str> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["content"].as_str())
        .collect()
}

/// A parsed evidence page as the model gets it:
/// `[evidence ID: N bytes, M lines; lines a-b shown. Read on with read_evidence {"id": "ID", "offset": K}.]`
#[derive(Debug, Clone, PartialEq)]
struct PageView {
    id: String,
    bytes: u64,
    lines: u64,
    first: u64,
    last: u64,
    /// `None`: "This is the end."
    next: Option<u64>,
    data: String,
}

fn number_after(s: &str, marker: &str) -> Option<u64> {
    let rest = &s[s.find(marker)? + marker.len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

fn parse_page(content: &str) -> Option<PageView> {
    let rest = content.strip_prefix("[evidence ")?;
    let (header, data) = rest.split_once('\n').unwrap_or((rest, ""));
    let id = header[..header.find(':')?].to_string();
    let shown = &header[header.find("; lines ")? + "; lines ".len()..];
    let (first, after) = shown.split_once('-')?;
    let last: String = after.chars().take_while(char::is_ascii_digit).collect();
    let next =
        if header.contains("This is the end.") { None } else { Some(number_after(header, "\"offset\": ")?) };
    Some(PageView {
        bytes: number_after(header, ": ")?,
        lines: number_after(header, " bytes, ")?,
        id,
        first: first.parse().ok()?,
        last: last.parse().ok()?,
        next,
        data: data.to_string(),
    })
}

/// The script of a team that pages through evidence: the lead delegates once and finishes when the
/// coder returns; the coder makes `first` (a tool call producing a large result), then follows the
/// `offset` of each page's header with `read_evidence` until "This is the end.", then finishes. The
/// summariser answers with a short summary. The offset comes from the last tool message's header;
/// if a compaction left no page at the end of the history, from the last header seen.
fn pager(
    objective: &'static str,
    first: (&'static str, Value),
) -> impl Fn(&Value) -> Step + Send + Sync + 'static {
    let last_seen: Arc<Mutex<Option<PageView>>> = Arc::new(Mutex::new(None));
    move |body: &Value| {
        if is_summary_request(body) {
            return sse(vec![text("Summary: the coder is paging through one piece of evidence in order.")]);
        }
        if is_lead_request(body) {
            let returned = !tool_messages(body).is_empty();
            return if returned {
                sse(vec![finish("the coder read all of it")])
            } else {
                sse(vec![delegate("coder", objective)])
            };
        }
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let last_tool = messages.iter().rev().find(|m| m["role"] == "tool");
        let Some(last_tool) = last_tool else {
            return sse(vec![tool_call(first.0, first.1.clone())]);
        };
        let parsed = last_tool["content"].as_str().and_then(parse_page);
        let page = {
            let mut seen = last_seen.lock().unwrap();
            if let Some(p) = &parsed {
                *seen = Some(p.clone());
            }
            seen.clone()
        };
        match page {
            Some(PageView { next: None, .. }) => sse(vec![finish("paged through all of it to the end")]),
            Some(PageView { id, next: Some(offset), .. }) => sse(vec![
                text(&format!("reading on from line {}", offset + 1)),
                tool_call("read_evidence", json!({"id": id, "offset": offset})),
            ]),
            None => sse(vec![finish("lost the page header")]),
        }
    }
}

fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["kind"] == kind).collect()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Every tool result in every request carries at most a quarter of the window (framing included),
/// by the server's own count; the server refused nothing and counted nothing over the window.
fn assert_tool_results_bounded(server: &ScriptedServer) {
    assert_eq!(server.refused(), 0, "nothing refused");
    let counted = server.counted();
    assert!(counted.iter().all(|&t| t <= WINDOW), "{counted:?}");
    let mut largest = 0;
    for (i, body) in server.chat_requests().iter().enumerate() {
        for content in tool_messages(body) {
            let tokens = count_request(&json!({"messages": [{"role": "tool", "content": content}]}));
            largest = largest.max(tokens);
            assert!(
                tokens <= WINDOW / 4,
                "request {i} carries a tool result of {tokens} tokens (> {}): {}",
                WINDOW / 4,
                content.chars().take(300).collect::<String>()
            );
        }
    }
    eprintln!("largest tool result: {largest} tokens; {} requests", counted.len());
}

/// Every distinct page of evidence `id` that the coder's requests carried, by first line, checked to
/// agree wherever a page appears more than once.
fn pages_seen(server: &ScriptedServer, id: &str) -> BTreeMap<u64, PageView> {
    let mut pages: BTreeMap<u64, PageView> = BTreeMap::new();
    for body in server.chat_requests().iter().filter(|b| is_coder_request(b)) {
        for content in tool_messages(body) {
            let Some(page) = parse_page(content) else { continue };
            assert_eq!(page.id, id, "only one piece of evidence is paged");
            if let Some(before) = pages.get(&page.first) {
                assert_eq!(before, &page, "the same page twice, with different contents");
            }
            pages.insert(page.first, page);
        }
    }
    pages
}

/// The pages, stripped of their headers and concatenated, after checking they are contiguous from
/// line 1 to the last, each `next` pointing at the following page.
fn concatenated(pages: &BTreeMap<u64, PageView>, total_lines: u64) -> String {
    let mut expect_first = 1;
    let mut out = String::new();
    for (first, page) in pages {
        assert_eq!(*first, expect_first, "pages are contiguous: {:?}", pages.keys().collect::<Vec<_>>());
        assert!(page.last >= page.first, "{page:?}");
        assert_eq!(page.lines, total_lines);
        match page.next {
            Some(next) => assert_eq!(next, page.last, "the 0-based next offset follows the page"),
            None => assert_eq!(page.last, total_lines, "the end is the last line"),
        }
        out.push_str(&page.data);
        expect_first = page.last + 1;
    }
    assert_eq!(expect_first, total_lines + 1, "the pages reach the last line");
    out
}

/// Runs a task until it ends and returns its id and events.
fn run_task(d: &TestDaemon, objective: &str, ws: &Path) -> (String, Vec<Value>) {
    let task = d.submit(objective, ws);
    let events = d.events_until_end(&task, Duration::from_secs(60));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}\n{}", d.serve_log());
    (task, events)
}

fn blob_path(d: &TestDaemon, meta: &Value) -> PathBuf {
    let sha = meta["sha256"].as_str().unwrap();
    d.home().join("evidence").join(&sha[..2]).join(sha)
}

// ---------------------------------------------------------------------------------------------
// 1. A 400 KB file read at a 32K window
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_400kb_file_read_is_evidence_and_the_model_pages_through_all_of_it() {
    const OBJECTIVE: &str = "Read big.txt in full";
    let server = ScriptedServer::builder()
        .max_model_len(Some(WINDOW))
        .window(WINDOW)
        .responder(pager(OBJECTIVE, ("read_file", json!({"path": "big.txt"}))))
        .start()
        .await;
    let ws = tempfile::tempdir().unwrap();
    let file = numbered_text(400_000);
    std::fs::write(ws.path().join("big.txt"), &file).unwrap();
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let (task, events) = run_task(&d, "Have the coder read big.txt", ws.path());

    // The read's result was stored as evidence, and the event says which.
    let reads: Vec<&Value> =
        of_kind(&events, "tool_finished").into_iter().filter(|e| e["tool"] == "read_file").collect();
    assert_eq!(reads.len(), 1, "{events:#?}");
    let id = reads[0]["evidence_id"].as_str().expect("tool_finished names the evidence").to_string();
    let meta = d.client().call("evidence.get", json!({"id": id})).unwrap();
    assert_eq!(meta["id"], id.as_str());
    assert_eq!(meta["bytes"], file.len() as u64);
    assert_eq!(meta["lines"], file.lines().count() as u64);
    assert_eq!(meta["source"]["tool"], "read_file");
    assert_eq!(meta["source"]["detail"], "big.txt");
    assert_eq!(meta["source"]["role"], "coder");
    assert_eq!(meta["source"]["task_id"], task.as_str());
    assert_eq!(meta["complete"], true);
    let listed = d.client().call("evidence.list", json!({"task_id": task})).unwrap();
    assert!(listed.as_array().unwrap().iter().any(|m| m["id"] == id.as_str()), "{listed}");

    // No request carried more than a quarter of the window in one tool result.
    assert_tool_results_bounded(&server);

    // The model saw every line, exactly once in order, by following the headers to the end.
    let pages = pages_seen(&server, &id);
    assert!(pages.len() > 10, "400 KB at a 32K window takes many pages: {}", pages.len());
    let first = &pages[&1];
    assert_eq!(first.bytes, file.len() as u64);
    assert!(first.next.is_some(), "the first page is not all of it");
    assert_eq!(concatenated(&pages, file.lines().count() as u64), file, "the pages are the file, exactly");
    assert_eq!(events.last().unwrap()["summary"], "the coder read all of it");
    let coder_done = of_kind(&events, "delegation_returned");
    assert_eq!(coder_done[0]["summary"], "paged through all of it to the end");
    eprintln!("{} pages, {} compactions", pages.len(), of_kind(&events, "compaction_finished").len());
}

// ---------------------------------------------------------------------------------------------
// 2. A command printing 300 KB
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_300kb_command_output_is_evidence_and_pages_the_same_way() {
    const OBJECTIVE: &str = "Run the generator and read its output";
    const COMMAND: &str = "seq 1 13000 | sed 's/$/ some padding text/'";
    let server = ScriptedServer::builder()
        .max_model_len(Some(WINDOW))
        .window(WINDOW)
        .responder(pager(OBJECTIVE, ("run_command", json!({"command": COMMAND}))))
        .start()
        .await;
    let ws = tempfile::tempdir().unwrap();
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let (task, events) = run_task(&d, "Have the coder run the generator", ws.path());

    let output: String = (1..=13_000).map(|n| format!("{n} some padding text\n")).collect();
    assert!(output.len() > 300_000, "{}", output.len());
    // The tool result as run_command renders it: the exit line, then stdout without its last newline.
    let expected = format!("exit code: 0\n--- stdout ---\n{}", output.trim_end_matches('\n'));

    let runs: Vec<&Value> =
        of_kind(&events, "tool_finished").into_iter().filter(|e| e["tool"] == "run_command").collect();
    assert_eq!(runs.len(), 1, "{events:#?}");
    assert_eq!(runs[0]["ok"], true);
    let id = runs[0]["evidence_id"].as_str().expect("tool_finished names the evidence").to_string();
    let meta = d.client().call("evidence.get", json!({"id": id})).unwrap();
    assert_eq!(meta["bytes"], expected.len() as u64);
    assert_eq!(meta["source"]["tool"], "run_command");
    assert_eq!(meta["source"]["detail"], COMMAND);
    assert_eq!(meta["source"]["task_id"], task.as_str());
    assert_eq!(meta["complete"], true);
    // Stored whole: one read of all of it is the output.
    let whole = d.client().call("evidence.read", json!({"id": id, "offset": 0, "limit": 4 << 20})).unwrap();
    assert_eq!(whole["data"].as_str().unwrap(), expected);
    assert_eq!(whole["total_bytes"], expected.len() as u64);
    assert_eq!(whole["complete"], true);

    // Only the first page went into the request after the command.
    let reqs = server.chat_requests();
    let after_run = reqs
        .iter()
        .filter(|b| is_coder_request(b))
        .find(|b| !tool_messages(b).is_empty())
        .expect("a coder request after the command");
    let results = tool_messages(after_run);
    assert_eq!(results.len(), 1);
    let first = parse_page(results[0]).expect("the result is an evidence page");
    assert_eq!((first.id.as_str(), first.first), (id.as_str(), 1));
    assert!(first.next.is_some() && first.data.len() < expected.len() / 4, "{}", first.data.len());
    assert!(expected.starts_with(&first.data));
    assert!(!results[0].contains("13000 some padding text"), "the end is not in the first page");

    assert_tool_results_bounded(&server);
    let pages = pages_seen(&server, &id);
    assert!(pages.len() > 10, "{}", pages.len());
    assert_eq!(concatenated(&pages, meta["lines"].as_u64().unwrap()), expected);
}

// ---------------------------------------------------------------------------------------------
// 3–5. The archive from the CLI; tampering; unknown ids
// ---------------------------------------------------------------------------------------------

/// A finished task whose coder read `files` (each large enough to become evidence); returns the
/// task id and the evidence ids, in the order of the reads.
async fn task_with_evidence(
    files: &[(&str, &str)],
) -> (ScriptedServer, TestDaemon, tempfile::TempDir, String, Vec<String>) {
    let mut script = vec![sse(vec![delegate("coder", "Read the files")])];
    for (path, _) in files {
        script.push(sse(vec![tool_call("read_file", json!({"path": path}))]));
    }
    script.push(sse(vec![finish("read them")]));
    script.push(sse(vec![finish("done")]));
    let server =
        ScriptedServer::builder().max_model_len(Some(WINDOW)).window(WINDOW).script(script).start().await;
    let ws = tempfile::tempdir().unwrap();
    for (path, text) in files {
        std::fs::write(ws.path().join(path), text).unwrap();
    }
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let (task, events) = run_task(&d, "Have the coder read the files", ws.path());
    let ids: Vec<String> = of_kind(&events, "tool_finished")
        .into_iter()
        .filter(|e| e["tool"] == "read_file")
        .map(|e| e["evidence_id"].as_str().expect("stored as evidence").to_string())
        .collect();
    assert_eq!(ids.len(), files.len(), "{events:#?}");
    (server, d, ws, task, ids)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_lists_shows_reads_and_verifies_evidence() {
    // Larger than the window: a result that cannot stay whole in any request.
    let file = numbered_text(160_000);
    let (_server, d, _ws, task, ids) = task_with_evidence(&[("data.txt", &file)]).await;
    let id = &ids[0];

    // list --task: one line per piece of evidence, starting with its id.
    let out = d.cli(&["evidence", "list", "--task", &task]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let listed = stdout(&out);
    let line = listed.lines().find(|l| l.starts_with(id.as_str())).unwrap_or_else(|| panic!("{listed}"));
    assert!(
        line.contains(&file.len().to_string()) && line.contains("read_file") && line.contains("data.txt"),
        "{line}"
    );
    // --json parses, and agrees with the socket.
    let out = d.cli(&["evidence", "list", "--task", &task, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let list: Value = serde_json::from_str(&stdout(&out)).expect("evidence list --json is JSON");
    let rpc = d.client().call("evidence.list", json!({"task_id": task})).unwrap();
    assert_eq!(list, rpc);
    assert!(list.as_array().unwrap().iter().any(|m| m["id"] == id.as_str()), "{list}");
    // Another task's filter lists none of it.
    let out = d.cli(&["evidence", "list", "--task", "no-such-task", "--json"]);
    let none: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(none, json!([]));

    // show: the metadata in words, and as JSON with --json.
    let out = d.cli(&["evidence", "show", id]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains(&format!("size       {} bytes", file.len())), "{}", stdout(&out));
    let out = d.cli(&["evidence", "show", id, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let meta: Value = serde_json::from_str(&stdout(&out)).expect("evidence show --json prints JSON");
    assert_eq!(meta["id"], id.as_str());
    assert_eq!(meta["bytes"], file.len() as u64);
    assert_eq!(meta["source"]["detail"], "data.txt");
    assert_eq!(meta, d.client().call("evidence.get", json!({"id": id})).unwrap());

    // read: exactly the bytes asked for, on stdout; where to go on, on stderr.
    let out = d.cli(&["evidence", "read", id, "--offset", "0", "--limit", "100"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(out.stdout, file.as_bytes()[..100].to_vec());
    assert!(stderr(&out).contains("--offset 100"), "{}", stderr(&out));
    let out = d.cli(&["evidence", "read", id, "--offset", "1000", "--limit", "37"]);
    assert_eq!(out.stdout, file.as_bytes()[1000..1037].to_vec());
    // --lines: lines 11..=15 (offset counts from 0).
    let out = d.cli(&["evidence", "read", id, "--offset", "10", "--limit", "5", "--lines"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let want: String = file.lines().skip(10).take(5).map(|l| format!("{l}\n")).collect();
    assert_eq!(stdout(&out), want);
    assert!(stdout(&out).starts_with("line 000011: "));
    // The last line, and nothing after it.
    let total = file.lines().count();
    let out = d.cli(&["evidence", "read", id, "--offset", &(total - 1).to_string(), "--lines"]);
    assert_eq!(stdout(&out), format!("{}\n", file.lines().last().unwrap()));
    assert!(!stderr(&out).contains("--offset"), "{}", stderr(&out));

    // verify: all is well.
    let out = d.cli(&["evidence", "verify"]);
    assert_eq!(out.status.code(), Some(0), "{}\n{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("0 problems"), "{}", stdout(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_altered_or_deleted_blob_is_named_by_verify_and_never_served() {
    let a = numbered_text(160_000);
    let b: String =
        (1..=4000).map(|n| format!("record {n}: another file, another blob {}\n", n * 31)).collect();
    let (_server, mut d, _ws, _task, ids) = task_with_evidence(&[("a.txt", &a), ("b.txt", &b)]).await;
    let (altered, deleted) = (&ids[0], &ids[1]);
    let meta_a = d.client().call("evidence.get", json!({"id": altered})).unwrap();
    let meta_b = d.client().call("evidence.get", json!({"id": deleted})).unwrap();
    assert_ne!(meta_a["sha256"], meta_b["sha256"]);
    // Served while intact (and so verified by this process).
    let page = d.client().call("evidence.read", json!({"id": altered, "offset": 0, "limit": 64})).unwrap();
    assert_eq!(page["data"].as_str().unwrap(), &a[..64]);

    // Alter one byte of a's blob, in place, keeping its size.
    let path_a = blob_path(&d, &meta_a);
    let perms = std::fs::metadata(&path_a).unwrap().permissions();
    assert!(perms.readonly(), "blobs are stored read-only");
    let mut writable = perms.clone();
    #[allow(clippy::permissions_set_readonly_false)]
    writable.set_readonly(false);
    std::fs::set_permissions(&path_a, writable).unwrap();
    let mut bytes = std::fs::read(&path_a).unwrap();
    let at = bytes.len() / 2;
    bytes[at] = if bytes[at] == b'#' { b'%' } else { b'#' };
    std::fs::write(&path_a, &bytes).unwrap();
    assert_eq!(std::fs::metadata(&path_a).unwrap().len(), a.len() as u64, "same size");

    // The running daemon notices at the next read (the file was rewritten since it verified it).
    let err = d.client().call("evidence.read", json!({"id": altered, "offset": 0, "limit": 64})).unwrap_err();
    assert!(err.message.contains("altered") && err.message.contains(altered.as_str()), "{err:?}");
    assert!(!err.message.contains("line 000001"), "no data with the error: {err:?}");

    // verify names it, and exits 1.
    let out = d.cli(&["evidence", "verify"]);
    assert_eq!(out.status.code(), Some(1), "{}\n{}", stdout(&out), stderr(&out));
    let report = stdout(&out);
    let named: Vec<&str> = report.lines().filter(|l| l.contains(altered.as_str())).collect();
    assert_eq!(named.len(), 1, "{report}");
    assert!(named[0].contains("altered"), "{report}");
    assert!(!report.contains(deleted.as_str()), "the intact one is not named: {report}");
    assert!(report.contains("1 problems"), "{report}");

    // A fresh daemon (nothing verified yet in this process) refuses to serve it too.
    assert_eq!(d.stop(), Some(0));
    d.serve();
    for args in
        [vec!["evidence", "read", altered.as_str()], vec!["evidence", "read", altered.as_str(), "--lines"]]
    {
        let out = d.cli(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}\n{}", stdout(&out), stderr(&out));
        assert!(out.stdout.is_empty(), "no data: {}", stdout(&out));
        let message = stderr(&out);
        assert!(message.contains("altered") && message.contains(altered.as_str()), "{message}");
    }
    let err =
        d.client().call("evidence.read", json!({"id": altered, "unit": "lines", "limit": 5})).unwrap_err();
    assert!(err.message.contains("altered"), "{err:?}");
    // Its metadata is still there, and the intact blob is still served.
    assert_eq!(d.client().call("evidence.get", json!({"id": altered})).unwrap(), meta_a);
    let page = d.client().call("evidence.read", json!({"id": deleted, "offset": 0, "limit": 40})).unwrap();
    assert_eq!(page["data"].as_str().unwrap(), &b[..40]);

    // Delete b's blob: verify names it as missing, alongside the altered one.
    let path_b = blob_path(&d, &meta_b);
    std::fs::remove_file(&path_b).unwrap();
    let out = d.cli(&["evidence", "verify"]);
    assert_eq!(out.status.code(), Some(1), "{}\n{}", stdout(&out), stderr(&out));
    let report = stdout(&out);
    let missing: Vec<&str> = report.lines().filter(|l| l.contains(deleted.as_str())).collect();
    assert_eq!(missing.len(), 1, "{report}");
    assert!(missing[0].contains("missing"), "{report}");
    assert!(report.lines().any(|l| l.contains(altered.as_str()) && l.contains("altered")), "{report}");
    assert!(report.contains("2 problems"), "{report}");
    let out = d.cli(&["evidence", "read", deleted]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert!(stderr(&out).contains("missing") && stderr(&out).contains(deleted.as_str()), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_evidence_id_is_error_32002_and_exit_code_4() {
    let server = ScriptedServer::builder().max_model_len(Some(WINDOW)).start().await;
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let id = "ev-00000000-0000-7000-8000-000000000000";

    let mut c = d.client();
    for (method, params) in [
        ("evidence.get", json!({"id": id})),
        ("evidence.read", json!({"id": id})),
        ("evidence.read", json!({"id": id, "offset": 3, "limit": 10, "unit": "lines"})),
    ] {
        let err = c.call(method, params.clone()).unwrap_err();
        assert_eq!(err.code, -32002, "{method} {params}: {err:?}");
        assert!(err.message.contains(id), "{method}: {err:?}");
    }
    // The connection stays usable.
    assert_eq!(c.call("evidence.list", json!({})).unwrap(), json!([]));

    for args in [
        vec!["evidence", "show", id],
        vec!["evidence", "read", id],
        vec!["evidence", "read", id, "--offset", "5", "--limit", "10", "--lines"],
    ] {
        // No such evidence: exit 4, as for no such task.
        let out = d.cli(&args);
        assert_eq!(out.status.code(), Some(4), "{args:?}: {}\n{}", stdout(&out), stderr(&out));
        assert!(out.stdout.is_empty(), "{args:?}: {}", stdout(&out));
        assert!(stderr(&out).contains(id), "{args:?}: {}", stderr(&out));
    }
    // With nothing stored, verify has nothing to complain about.
    let out = d.cli(&["evidence", "verify"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(stdout(&out).contains("0 checked, 0 problems"), "{}", stdout(&out));
}

// ---------------------------------------------------------------------------------------------
// 6. The evidence store cannot take it: the whole result goes to the workspace
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_store_cannot_take_a_large_result_it_is_written_whole_to_the_workspace() {
    const SMALL_WINDOW: u64 = 16_384;
    let server = ScriptedServer::builder()
        .max_model_len(Some(SMALL_WINDOW))
        .window(SMALL_WINDOW)
        .script(vec![
            sse(vec![tool_call("read_file", json!({"path": "big.txt"}))]),
            sse(vec![finish("read it from the workspace file")]),
        ])
        .start()
        .await;
    let ws = tempfile::tempdir().unwrap();
    let file = numbered_text(100_000);
    std::fs::write(ws.path().join("big.txt"), &file).unwrap();
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));

    // The blob directory becomes a plain file: every blob write now fails.
    let blobs = d.home().join("evidence");
    if blobs.is_dir() {
        std::fs::remove_dir_all(&blobs).unwrap();
    }
    std::fs::write(&blobs, "not a directory").unwrap();

    let (_task, events) = run_task(&d, "Read big.txt", ws.path());

    // The whole result is one file in the workspace's evidence folder. Its name is spelled out, not
    // `EVIDENCE_FOLDER`: it is the documented, user-visible path (docs/interface.md) this pins.
    let folder = ws.path().join(".agentd-evidence");
    let files: Vec<PathBuf> = std::fs::read_dir(&folder)
        .unwrap_or_else(|e| panic!("{}: {e}\n{}", folder.display(), d.serve_log()))
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(std::fs::read(&files[0]).unwrap(), file.as_bytes(), "written whole, byte for byte");

    // The model got the path and the beginning, not the end.
    let reqs = server.chat_requests();
    assert_eq!(reqs.len(), 2, "{reqs:#?}");
    let results = tool_messages(&reqs[1]);
    assert_eq!(results.len(), 1, "{results:?}");
    let content = results[0];
    let name = files[0].file_name().unwrap().to_str().unwrap();
    assert!(content.contains(&format!(".agentd-evidence/{name}")), "{content}");
    assert!(content.contains(file.lines().next().unwrap()), "{content}");
    assert!(!content.contains(file.lines().last().unwrap()), "{content}");
    assert!(content.len() < file.len() / 4, "only the beginning: {} bytes", content.len());

    let reads: Vec<&Value> =
        of_kind(&events, "tool_finished").into_iter().filter(|e| e["tool"] == "read_file").collect();
    assert_eq!(reads.len(), 1, "{events:#?}");
    assert_eq!(reads[0]["ok"], true, "{}", reads[0]);
    assert!(reads[0].get("evidence_id").is_none_or(Value::is_null), "{}", reads[0]);
    assert_eq!(server.refused(), 0);
}
