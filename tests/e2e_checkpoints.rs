//! End-to-end: every change a task makes to its workspace — a shell command's included — is
//! checkpointed, shown by `agentd diff` and taken back by `agentd revert`, byte for byte and mode for
//! mode, in a git repository and outside one, without touching the user's git state; a revert that
//! would overwrite the user's own edit is refused until `--force`; a revert can be reverted; and a
//! `kill -9` between a command and its checkpoint loses nothing.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use agentd_test_support::daemon::{team_config, TestDaemon};
use agentd_test_support::*;
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_agentd");

/// What the coder's one command does: edits a file, creates one, deletes one, changes a mode.
const COMMAND: &str =
    "sed -i s/one/ONE/ a.txt && printf 'new\\n' > sub/new.txt && rm gone.txt && chmod 644 tool.sh";

/// The lead delegates; the coder runs `command` once, then finishes; the lead finishes.
async fn one_command_model(command: &'static str) -> ScriptedServer {
    ScriptedServer::builder()
        .responder(move |body: &Value| {
            let (lead, results) = lead_and_results(body);
            match (lead, results) {
                (true, 0) => sse(vec![delegate("coder", "Change the files")]),
                (true, _) => sse(vec![finish("done")]),
                (false, 0) => sse(vec![tool_call("run_command", json!({ "command": command }))]),
                (false, _) => sse(vec![finish("changed them")]),
            }
        })
        .start()
        .await
}

/// The workspace before the task: `a.txt`, `gone.txt`, an executable `tool.sh`, `sub/keep.txt`, and a
/// build output the ignore file keeps out of checkpoints.
fn workspace(git: bool) -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    let p = ws.path();
    std::fs::write(p.join("a.txt"), "one\ntwo\n").unwrap();
    std::fs::write(p.join("gone.txt"), "bye\n").unwrap();
    std::fs::write(p.join("tool.sh"), "#!/bin/sh\necho tool\n").unwrap();
    std::fs::set_permissions(p.join("tool.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir(p.join("sub")).unwrap();
    std::fs::write(p.join("sub/keep.txt"), "keep\n").unwrap();
    std::fs::write(p.join(".gitignore"), "target/\n").unwrap();
    if git {
        for args in [&["init", "-q"][..], &["add", "-A"], &["commit", "-q", "-m", "start"]] {
            let ok = git_in(p).args(args).status().unwrap().success();
            assert!(ok, "git {args:?}");
        }
    }
    ws
}

fn git_in(dir: &Path) -> Command {
    let mut git = Command::new("git");
    git.current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com");
    git
}

/// The files of a tree (ignoring `.git`): path → (bytes, mode).
fn files(root: &Path) -> Vec<(String, Vec<u8>, u32)> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let rel = path.strip_prefix(root).unwrap().to_string_lossy().to_string();
            if rel == ".git" || rel.starts_with(".agentd") {
                continue;
            }
            let md = std::fs::symlink_metadata(&path).unwrap();
            if md.is_dir() {
                dirs.push(path);
            } else {
                out.push((rel, std::fs::read(&path).unwrap(), md.permissions().mode() & 0o7777));
            }
        }
    }
    out.sort();
    out
}

/// The `seq` of the task's `run_command` call.
fn command_seq(events: &[Value]) -> u64 {
    events.iter().find(|e| e["kind"] == "tool_called" && e["tool"] == "run_command").unwrap()["seq"]
        .as_u64()
        .unwrap()
}

fn run_ok(d: &TestDaemon, args: &[&str]) -> String {
    let out = d.cli(args);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "agentd {args:?}: {text}\n{}", String::from_utf8_lossy(&out.stderr));
    text
}

async fn a_command_is_diffed_and_reverted_byte_for_byte(git: bool) {
    let server = one_command_model(COMMAND).await;
    let ws = workspace(git);
    let before = files(ws.path());
    let git_state = |ws: &Path| {
        // `--no-optional-locks`: this look must not refresh the index itself.
        let status =
            git_in(ws).args(["--no-optional-locks", "status", "--porcelain"]).output().unwrap().stdout;
        let index = std::fs::read(ws.join(".git/index")).unwrap();
        let stash = git_in(ws).args(["stash", "list"]).output().unwrap().stdout;
        let log = git_in(ws).args(["log", "--format=%H"]).output().unwrap().stdout;
        (status, index, stash, log)
    };
    let git_before = git.then(|| git_state(ws.path()));
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let task = d.submit("Change the files", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(60));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}\n{}", d.serve_log());
    assert_eq!(std::fs::read_to_string(ws.path().join("a.txt")).unwrap(), "ONE\ntwo\n");

    // The call's change, as its event says it.
    let seq = command_seq(&events);
    let changed = events.iter().find(|e| e["kind"] == "files_changed").unwrap();
    assert_eq!(changed["call_seq"], seq, "{changed}");
    assert_eq!(changed["role"], "coder");
    // `diff` shows all four, from the checkpoints.
    let diff: Value = serde_json::from_str(&run_ok(&d, &["diff", &task, "--json"])).unwrap();
    let shown: Vec<(&str, &str)> = diff["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["path"].as_str().unwrap(), f["change"].as_str().unwrap()))
        .collect();
    assert_eq!(
        shown,
        [("a.txt", "modified"), ("gone.txt", "deleted"), ("sub/new.txt", "added"), ("tool.sh", "mode")],
        "{diff:#}"
    );
    let text = run_ok(&d, &["diff", &task]);
    assert!(text.contains("-one\n+ONE\n") && text.contains("old mode 100755\nnew mode 100644"), "{text}");
    assert!(text.contains("deleted file mode 100644") && text.contains("+new"), "{text}");
    let stat = run_ok(&d, &["diff", &task, "--stat"]);
    assert!(stat.contains(&format!("modified  a.txt  +1 -1  (calls {seq})")), "{stat}");
    let coder = run_ok(&d, &["diff", &task, "--role", "lead", "--stat"]);
    assert!(coder.contains("no changes recorded"), "the lead made none: {coder}");

    // Put back: every file byte for byte, modes too.
    let out = run_ok(&d, &["revert", &task, "--to", &(seq - 1).to_string()]);
    assert!(out.contains("reverted 4 file(s)"), "{out}");
    assert_eq!(files(ws.path()), before, "the workspace is as it was");
    if let Some(git_before) = git_before {
        assert_eq!(git_state(ws.path()), git_before, "agentd's bookkeeping never touches the user's git");
    }
    let after = run_ok(&d, &["diff", &task, "--stat"]);
    assert!(
        after.contains("no changes recorded"),
        "a revert is a change, and the task's sum is none: {after}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_edits_creates_and_deletes_is_diffed_and_reverted_in_a_git_workspace() {
    a_command_is_diffed_and_reverted_byte_for_byte(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_edits_creates_and_deletes_is_diffed_and_reverted_in_a_plain_workspace() {
    a_command_is_diffed_and_reverted_byte_for_byte(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revert_over_the_users_edit_is_refused_until_forced_and_a_revert_can_be_reverted() {
    let server = one_command_model(COMMAND).await;
    let ws = workspace(false);
    let before = files(ws.path());
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let task = d.submit("Change the files", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(60));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}");
    let done = files(ws.path());
    let seq = command_seq(&events);

    // The user edits a file the task changed: the revert is refused, naming it, and writes nothing.
    std::fs::write(ws.path().join("a.txt"), "mine\n").unwrap();
    let refused = d.cli(&["revert", &task, "--to", &(seq - 1).to_string()]);
    assert!(!refused.status.success());
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(why.contains("a.txt") && why.contains("--force"), "{why}");
    assert!(ws.path().join("sub/new.txt").exists(), "nothing was written");
    // With --force it is done.
    let forced: Value = serde_json::from_str(&run_ok(
        &d,
        &["revert", &task, "--to", &(seq - 1).to_string(), "--force", "--json"],
    ))
    .unwrap();
    assert_eq!(forced["forced"], json!(["a.txt"]), "{forced}");
    assert_eq!(files(ws.path()), before);

    // The revert is recorded, and reverting it brings the task's work back (the user's edit with it).
    let reverted = forced["seq"].as_u64().unwrap();
    let logged = d.logged_events(&task);
    let event = logged.iter().find(|e| e["seq"] == reverted).unwrap();
    assert_eq!(event["kind"], "reverted", "{event}");
    run_ok(&d, &["revert", &task, "--call", &reverted.to_string()]);
    let mut expected = done;
    for (path, bytes, _) in &mut expected {
        if path == "a.txt" {
            *bytes = b"mine\n".to_vec();
        }
    }
    assert_eq!(files(ws.path()), expected);
    // The lead is told in its next request: a follow-up shows it.
    run_ok(&d, &["message", &task, "thanks; anything else?"]);
    let events = d.events_until_end(&task, Duration::from_secs(60));
    assert_eq!(events.last().unwrap()["kind"], "task_finished");
    let last = server.chat_requests().into_iter().last().unwrap();
    assert!(last["messages"].to_string().contains("The user reverted"), "{last}");
    let log = String::from_utf8_lossy(&d.cli(&["log", &task]).stdout).to_string();
    assert!(log.contains("files changed by call") && log.contains("reverted every change after"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_9_between_a_command_and_its_checkpoint_loses_no_change() {
    // The command changes a file, then sleeps: the daemon is killed while it sleeps, before the
    // checkpoint after it could be taken.
    let server = one_command_model("printf 'changed\\n' > a.txt && rm gone.txt && sleep 5").await;
    let ws = workspace(false);
    let before = files(ws.path());
    let mut d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let task = d.submit("Change the files", ws.path());
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while ws.path().join("gone.txt").exists() {
        assert!(std::time::Instant::now() < deadline, "the command never ran: {}", d.serve_log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    d.kill9();
    d.serve();
    let logged = d.logged_events(&task);
    assert!(!logged.iter().any(|e| e["kind"] == "files_changed"), "killed before the checkpoint after");
    let called = logged.iter().find(|e| e["kind"] == "tool_called" && e["tool"] == "run_command").unwrap();
    assert!(called["checkpoint"].is_string(), "the checkpoint before is named: {called}");
    run_ok(&d, &["resume", &task]);
    let events = d.events_until_end(&task, Duration::from_secs(60));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}\n{}", d.serve_log());
    let found = events.iter().find(|e| e["kind"] == "files_changed").unwrap();
    assert_eq!(found["interrupted"], true, "{found}");
    // `diff` and `revert` agree with the files on disk.
    let diff: Value = serde_json::from_str(&run_ok(&d, &["diff", &task, "--json"])).unwrap();
    let shown: Vec<&str> =
        diff["files"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap()).collect();
    assert_eq!(shown, ["a.txt", "gone.txt"], "{diff:#}");
    run_ok(&d, &["revert", &task, "--to", &(command_seq(&events) - 1).to_string()]);
    assert_eq!(files(ws.path()), before);
    // `evidence verify` re-hashes the checkpoints' objects too: one altered on disk is named.
    let verify = run_ok(&d, &["evidence", "verify"]);
    assert!(!verify.contains("checkpoint object"), "{verify}");
    let gone = found["files"].as_array().unwrap().iter().find(|f| f["path"] == "gone.txt").unwrap();
    let object = gone["before"]["sha256"].as_str().unwrap();
    let blob = d.home().join("evidence").join(&object[..2]).join(object);
    let mut writable = std::fs::metadata(&blob).unwrap().permissions();
    writable.set_mode(0o644);
    std::fs::set_permissions(&blob, writable).unwrap();
    std::fs::write(&blob, b"not a listing").unwrap();
    let out = d.cli(&["evidence", "verify"]);
    let report = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(report.contains(&format!("checkpoint object {object} is altered")), "{report}");
    // And a diff that needs it says so rather than showing anything else.
    let call = command_seq(&events).to_string();
    let refused = d.cli(&["diff", &task, "--call", &call]);
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{}", String::from_utf8_lossy(&refused.stdout));
    assert!(why.contains(object) && why.contains("altered"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_of_an_mcp_server_marked_writes_is_checkpointed_and_one_not_marked_is_not() {
    let fixture = agentd_test_support::mcp::fixture_bin().display().to_string();
    let server = ScriptedServer::builder()
        .responder(|body: &Value| {
            let (lead, results) = lead_and_results(body);
            match (lead, results) {
                (true, 0) => sse(vec![delegate("coder", "Write through both servers")]),
                (true, _) => sse(vec![finish("done")]),
                (false, 0) => {
                    sse(vec![tool_call("mcp__marked__touch", json!({"path": "marked.txt", "text": "m\n"}))])
                }
                (false, 1) => {
                    sse(vec![tool_call("mcp__plain__touch", json!({"path": "plain.txt", "text": "p\n"}))])
                }
                (false, _) => sse(vec![finish("wrote both")]),
            }
        })
        .start()
        .await;
    let ws = workspace(false);
    let servers = format!(
        "[mcp.servers.marked]\ncommand = \"{fixture}\"\nargs = [\"stdio\"]\nwrites = true\n\n\
         [mcp.servers.plain]\ncommand = \"{fixture}\"\nargs = [\"stdio\"]\n\n\
         [tools.sandbox]\nmode = \"off\"\n"
    );
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", &servers));
    let task = d.submit("Write through both servers", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(60));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}\n{}", d.serve_log());
    assert_eq!(std::fs::read_to_string(ws.path().join("plain.txt")).unwrap(), "p\n");
    let changed: Vec<&Value> = events.iter().filter(|e| e["kind"] == "files_changed").collect();
    assert_eq!(changed.len(), 1, "only the marked server's call is checkpointed: {changed:#?}");
    assert_eq!(changed[0]["tool"], "mcp__marked__touch");
    assert_eq!(changed[0]["files"][0]["path"], "marked.txt");
}
