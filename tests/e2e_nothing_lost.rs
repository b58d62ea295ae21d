//! End-to-end: nothing a team writes or a user keeps is lost without a word. A branch's working copy
//! holds what the workspace holds — what git ignores included — and what the branch writes comes
//! back, wherever it is; what a copy or a checkpoint cannot hold (a FIFO, a socket, a name that is
//! not UTF-8, another hard link) is carried or named, never passed over; a merge a `kill -9` cuts
//! short is recorded whole, so `diff` and `revert` agree with the disk.
//!
//! The model is a scripted server answering each request by what it carries (whose turn it is), the
//! daemon the real binary.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use agentd_test_support::daemon::{team_config, TestDaemon};
use agentd_test_support::*;
use serde_json::{json, Value};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_agentd");

/// The coder runs up to three agents at once; working copies in `copies`.
fn config(base_url: &str, copies: &Path) -> String {
    let tools = format!("[tools]\ncopies = \"{}\"\n", copies.display());
    team_config(base_url, "gpt-4o", &tools).replacen("[team.coder]\n", "[team.coder]\nmax_instances = 3\n", 1)
}

/// The first message after the system prompt: the lead's objective, or a teammate's handoff.
fn opening(body: &Value) -> String {
    body["messages"][1]["content"].as_str().unwrap_or_default().to_string()
}

/// A branch's request, by its handoff's objective (`Part A …`).
fn part_of(body: &Value) -> Option<String> {
    opening(body).strip_prefix("Part ").map(|p| p.chars().take(1).collect())
}

fn results(body: &Value) -> usize {
    body["messages"].as_array().map_or(0, |m| m.iter().filter(|m| m["role"] == "tool").count())
}

/// The lead's answer handing `parts` to coders at once.
fn delegations(parts: &[&str]) -> Step {
    sse(parts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            tool_call_with_id(
                &format!("d{}", i + 1),
                "delegate",
                json!({"to": "coder", "objective": format!("Part {p}")}),
            )
        })
        .collect())
}

/// The texts of the tool results a request carries.
fn tool_results(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn run_ok(d: &TestDaemon, args: &[&str]) -> String {
    let out = d.cli(args);
    assert!(
        out.status.success(),
        "agentd {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_two_coders_write_at_ignored_paths_lands_and_what_cannot_be_carried_is_told() {
    // The reproduction: `.gitignore` = `build/ *.log .env`; two coders at once. One runs a
    // command writing a build output, a log and a kept file (and reads the `.env` it needs); the
    // other writes `build/report.txt` with `write_file`. One makes a FIFO, which no patch carries;
    // the workspace holds a socket, which no copy holds.
    let server = ScriptedServer::builder()
        .responder(|body| match (part_of(body).as_deref(), results(body)) {
            (Some("A"), 0) => sse(vec![tool_call(
                "run_command",
                json!({"command": "mkdir -p build; echo generated > build/out.bin; echo log > debug.log; echo new > kept.txt; cp .env env-seen.txt; mkfifo made.fifo"}),
            )]),
            (Some("B"), 0) => sse(vec![tool_call("write_file", json!({"path": "build/report.txt", "content": "report\n"}))]),
            (Some(part), _) => sse(vec![finish(&format!("{part} done"))]),
            (None, 0) => delegations(&["A", "B"]),
            (None, _) => sse(vec![finish("both done")]),
        })
        .start()
        .await;
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join(".gitignore"), "build/\n*.log\n.env\n").unwrap();
    std::fs::write(ws.path().join(".env"), "TOKEN=abc\n").unwrap();
    let _socket = std::os::unix::net::UnixListener::bind(ws.path().join("app.sock")).unwrap();
    let copies = tempfile::tempdir().unwrap();
    let d = TestDaemon::start(Path::new(BIN), &config(&server.base_url(), copies.path()));
    let task = d.submit("Two parts at once", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(60));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}\n{}", d.serve_log());
    let read =
        |rel: &str| std::fs::read_to_string(ws.path().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
    assert_eq!(read("build/out.bin"), "generated\n");
    assert_eq!(read("debug.log"), "log\n");
    assert_eq!(read("kept.txt"), "new\n");
    assert_eq!(read("build/report.txt"), "report\n");
    assert_eq!(read("env-seen.txt"), "TOKEN=abc\n", "the branch's copy held the .env git ignores");
    assert!(!ws.path().join("made.fifo").exists(), "a FIFO is not carried");

    // Each delegation says what its copy left out; each return what its patch could not carry.
    let delegated: Vec<&Value> = events.iter().filter(|e| e["kind"] == "delegated").collect();
    assert_eq!(delegated.len(), 2);
    for e in &delegated {
        assert_eq!(e["not_copied"], json!([{"path": "app.sock", "why": "a socket"}]), "{e}");
    }
    let returned: Vec<&Value> = events.iter().filter(|e| e["kind"] == "delegation_returned").collect();
    let counts: Vec<(u64, Value)> =
        returned.iter().map(|e| (e["files_changed"].as_u64().unwrap(), e["not_carried"].clone())).collect();
    assert_eq!(
        counts,
        [(4, json!([{"path": "made.fifo", "why": "a FIFO"}])), (1, Value::Null)],
        "{returned:#?}"
    );
    // The branch read what its copy lacks in its handoff; the lead read what was not carried back.
    let handoff = server.chat_requests().into_iter().find(|b| part_of(b).as_deref() == Some("A")).unwrap();
    assert!(opening(&handoff).contains("not in it: app.sock (a socket)"), "{}", opening(&handoff));
    let lead_last = server.chat_requests().into_iter().rfind(|b| part_of(b).is_none()).unwrap();
    let told = tool_results(&lead_last).join("\n");
    assert!(told.contains("not carried back") && told.contains("made.fifo (a FIFO)"), "{told}");
    assert!(!told.contains("no changes"), "{told}");
    // `watch` says it too.
    let log = run_ok(&d, &["log", &task, "--full"]);
    assert!(log.contains("not carried back: made.fifo (a FIFO)"), "{log}");
    assert!(log.contains("not in its copy: app.sock (a socket)"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_see_names_that_are_not_utf8_fifos_and_hard_links_or_say_what_they_cannot() {
    // The reproduction: a command makes files whose names are not UTF-8 and FIFOs, and
    // writes through a hard link the user made to a file outside the workspace; a second command
    // removes a FIFO the user had.
    let server = ScriptedServer::builder()
        .responder(|body| match (part_of(body), results(body)) {
            (Some(_), 0) => sse(vec![tool_call(
                "run_command",
                json!({"command": "printf 'latin-1\\n' > \"$(printf 'caf\\351.txt')\"; mkdir \"$(printf 'd\\377')\"; printf 'deep\\n' > \"$(printf 'd\\377/x')\"; mkfifo p1 p2; echo ok > plain.txt; echo changed >> linked.txt"}),
            )]),
            (Some(_), 1) => sse(vec![tool_call("run_command", json!({"command": "rm user.fifo"}))]),
            (Some(_), _) => sse(vec![finish("made")]),
            (None, 0) => delegations(&["A"]),
            (None, _) => sse(vec![finish("done")]),
        })
        .start()
        .await;
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("linked.txt"), "original\n").unwrap();
    std::fs::hard_link(ws.join("linked.txt"), dir.path().join("outside.txt")).unwrap();
    let status = std::process::Command::new("mkfifo").arg(ws.join("user.fifo")).status().unwrap();
    assert!(status.success());
    let copies = tempfile::tempdir().unwrap();
    let d = TestDaemon::start(Path::new(BIN), &config(&server.base_url(), copies.path()));

    // doctor names the hard link before any task runs.
    let doctor = d.cli(&["doctor", "--no-probe", "--json", "--workspace", ws.to_str().unwrap()]);
    let report: Value = serde_json::from_slice(&doctor.stdout).unwrap();
    let check =
        report["checks"].as_array().unwrap().iter().find(|c| c["area"] == "workspace").unwrap().clone();
    assert_eq!(check["verdict"], "warn", "{check}");
    let detail = check["detail"].as_str().unwrap();
    assert!(detail.contains("1 file with other hard links: linked.txt"), "{detail}");
    assert!(detail.contains("user.fifo"), "{detail}");

    let task = d.submit("Make odd files", &ws);
    let events = d.events_until_end(&task, Duration::from_secs(60));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}\n{}", d.serve_log());
    // At its start, the task said which files have other links.
    let linked = events.iter().find(|e| e["kind"] == "linked_files").expect("linked_files");
    assert_eq!(linked["files"][0]["path"], "linked.txt", "{linked}");

    // The diff sees every change: the Latin-1 names (as the text of their bytes), the FIFOs named
    // as what they are, the write through the link.
    let diff: Value = serde_json::from_str(&run_ok(&d, &["diff", &task, "--json"])).unwrap();
    let mut paths: Vec<String> =
        diff["files"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap().to_string()).collect();
    paths.sort();
    let name = |bytes: &[u8]| agentd_protocol::path_name::encode(bytes);
    let mut expected = vec![
        name(b"caf\xe9.txt"),
        name(b"d\xff/x"),
        "linked.txt".to_string(),
        "p1".to_string(),
        "p2".to_string(),
        "plain.txt".to_string(),
        "user.fifo".to_string(),
    ];
    expected.sort();
    assert_eq!(paths, expected, "{diff:#}\n{}", run_ok(&d, &["log", &task]));
    let not_held: Vec<(&str, &str)> = diff["not_held"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["path"].as_str().unwrap(), n["why"].as_str().unwrap()))
        .collect();
    assert_eq!(
        not_held,
        [
            ("p1", "a FIFO: a checkpoint records its name, not its content"),
            ("p2", "a FIFO: a checkpoint records its name, not its content"),
            ("user.fifo", "a FIFO: a checkpoint records its name, not its content"),
        ]
    );
    // At the terminal, a byte that is not UTF-8 is shown as \xNN.
    let shown = run_ok(&d, &["diff", &task, "--stat"]);
    assert!(shown.contains("caf\\xe9.txt") && shown.contains("d\\xff/x"), "{shown}");
    assert!(shown.contains("not held  p1 (a FIFO"), "{shown}");

    // Revert everything: the files the command made are gone, byte-named ones included; the FIFO the
    // user had cannot be made again and the link's other name keeps what was written: both said.
    let out = d.cli(&["revert", &task, "--to", "0", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let reverted: Value = serde_json::from_slice(&out.stdout).unwrap();
    for gone in [&b"caf\xe9.txt"[..], b"d\xff", b"p1", b"p2", b"plain.txt"] {
        assert!(
            !ws.join(OsStr::from_bytes(gone)).exists(),
            "{:?} is still there",
            String::from_utf8_lossy(gone)
        );
    }
    assert_eq!(std::fs::read_to_string(ws.join("linked.txt")).unwrap(), "original\n");
    assert_eq!(std::fs::read_to_string(dir.path().join("outside.txt")).unwrap(), "original\nchanged\n");
    let not_restored: Vec<(&str, &str)> = reverted["not_restored"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["path"].as_str().unwrap(), n["why"].as_str().unwrap()))
        .collect();
    assert_eq!(not_restored.len(), 2, "{reverted:#}");
    assert_eq!(not_restored[0].0, "linked.txt");
    assert!(not_restored[0].1.contains("1 other hard link"), "{not_restored:?}");
    assert_eq!(
        not_restored[1],
        ("user.fifo", "it was a FIFO: a checkpoint records its name, not the thing itself")
    );
    let event = d.logged_events(&task).into_iter().rfind(|e| e["kind"] == "reverted").unwrap();
    assert_eq!(event["not_restored"].as_array().unwrap().len(), 2, "{event}");
    // The lead is told in its next request, and the log says it.
    let log = run_ok(&d, &["log", &task, "--full"]);
    assert!(log.contains("NOT put back: linked.txt"), "{log}");
}

/// Regular files under `root`, recursively, as paths relative to it.
fn files_under(root: &Path) -> Vec<String> {
    fn visit(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                visit(root, &path, out);
            } else {
                out.push(path.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    visit(root, root, &mut out);
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merge_cut_by_kill_9_is_recorded_whole_and_reverted_whole() {
    // The reproduction: three branches each writing 4,000 files, the daemon killed in the
    // middle of a merge, then resumed: `diff` must count every file on disk, and `revert` take back
    // every one.
    const FILES: usize = 4000;
    let server = ScriptedServer::builder()
        .responder(|body| match (part_of(body), results(body)) {
            (Some(part), 0) => sse(vec![tool_call(
                "run_command",
                json!({"command": format!("mkdir {part} && cd {part} && for i in $(seq {FILES}); do echo $i > f$i.txt; done")}),
            )]),
            (Some(part), _) => sse(vec![finish(&format!("{part} written"))]),
            (None, 0) => delegations(&["A", "B", "C"]),
            (None, _) => sse(vec![finish("all written")]),
        })
        .start()
        .await;
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("kept.txt"), "the user's\n").unwrap();
    let copies = tempfile::tempdir().unwrap();
    let mut d = TestDaemon::start(Path::new(BIN), &config(&server.base_url(), copies.path()));
    let task = d.submit("Three parts of 4000 files", ws.path());
    // Killed once a merge has put some of its files in place and not all of them (a merge stages
    // every file under a temporary name first, then renames each into place).
    let in_place = |part: &str| -> usize {
        let names = std::fs::read_dir(ws.path().join(part)).into_iter().flatten().flatten();
        names.filter(|e| !e.file_name().to_string_lossy().starts_with(".agentd-")).count()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let caught = loop {
        if let Some(part) = ["A", "B", "C"].into_iter().find(|p| (1..FILES).contains(&in_place(p))) {
            d.kill9();
            break part;
        }
        assert!(std::time::Instant::now() < deadline, "no merge was caught in the middle: {}", d.serve_log());
    };
    let at_kill = in_place(caught);
    assert!((1..FILES).contains(&at_kill), "{caught}: {at_kill} files in place at the kill");
    d.serve();
    d.client().call("task.resume", json!({"task_id": task})).expect("resume");
    let after = d.wait_for_state_not(&task, "running", Duration::from_secs(120));
    assert_eq!(after["state"], "finished", "{after}\n{}", d.serve_log());
    let on_disk: Vec<String> = files_under(ws.path()).into_iter().filter(|f| f != "kept.txt").collect();
    let odd: Vec<&String> = on_disk.iter().filter(|f| !f.ends_with(".txt") || f.contains("agentd")).collect();
    assert_eq!(on_disk.len(), 3 * FILES, "{odd:?}");

    // The diff counts every file on disk that the task made.
    let diff: Value = serde_json::from_str(&run_ok(&d, &["diff", &task, "--stat", "--json"])).unwrap();
    let mut diffed: Vec<String> =
        diff["files"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap().to_string()).collect();
    diffed.sort();
    assert_eq!(
        diffed.len(),
        on_disk.len(),
        "diff counts {} of {} files on disk",
        diffed.len(),
        on_disk.len()
    );
    assert_eq!(diffed, on_disk);
    let events = d.logged_events(&task);
    let interrupted: Vec<&Value> =
        events.iter().filter(|e| e["kind"] == "files_changed" && e["interrupted"] == true).collect();
    assert_eq!(interrupted.len(), 1, "the merge cut short was recorded at the resume: {interrupted:#?}");
    assert_eq!(interrupted[0]["tool"], "delegate");
    assert!(interrupted[0]["files"].as_array().unwrap().len() >= at_kill);

    // A revert to before the delegations leaves nothing the task made, and the user's file.
    let first_call =
        events.iter().find(|e| e["kind"] == "tool_called").and_then(|e| e["seq"].as_u64()).unwrap();
    let out = run_ok(&d, &["revert", &task, "--to", &(first_call - 1).to_string()]);
    assert!(out.contains(&format!("reverted {} file(s)", 3 * FILES)), "{out}");
    assert_eq!(files_under(ws.path()), ["kept.txt"]);
}
