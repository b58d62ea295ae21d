//! End-to-end: an editor drives a team through `agentd acp`, the editor being the Agent Client
//! Protocol's own Python SDK (PyPI `agent-client-protocol`, pinned, installed in a virtual
//! environment of the test's) running `tests/acp/client.py`. One session: a refused workspace, a
//! prompt that runs the team to its end (the lead's reasoning and text, the coder's calls with
//! their kinds and files, a compaction, the delegation as a plan), a follow-up, a call the user
//! rejects (`[acp] ask`) that the coder reads as a refusal, a prompt cancelled while the model
//! thinks; then another editor loads the session and gets its history replayed. And an editor
//! writing raw lines — not UTF-8, not JSON and 50 MB long, over 64 MiB, a 50 MB prompt — is
//! answered each time and `agentd acp` goes on.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use agentd_test_support::daemon::{team_config, TestDaemon};
use agentd_test_support::pip::venv_with;
use agentd_test_support::workspace::sample_workspace;
use agentd_test_support::*;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_agentd");
/// The SDK the editor is written with, pinned.
const SDK: &str = "agent-client-protocol==0.12.1";
const READ: &str = "Read the data files one by one";
const FIX: &str = "Fix add() in src/lib.rs";
const READS: usize = 24;

/// The text of the last user message of a request, and whether a tool result came after it.
fn last_turn(body: &Value) -> (String, bool) {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let at = messages.iter().rposition(|m| m["role"] == "user").unwrap_or(0);
    let text = messages.get(at).map(|m| m["content"].to_string()).unwrap_or_default();
    (text, messages[at..].iter().any(|m| m["role"] == "tool"))
}

fn responder(reads: Arc<AtomicUsize>) -> impl Fn(&Value) -> Step + Send + Sync + 'static {
    move |body: &Value| {
        if is_summary_request(body) {
            return sse(vec![text("Summary: the coder read the data files; nothing unusual in them.")]);
        }
        if is_lead_request(body) {
            let (asked, returned) = last_turn(body);
            return match (asked.as_str(), returned) {
                (a, _) if a.contains("Think forever") => hang(),
                (a, false) if a.contains("Anything else") => {
                    sse(vec![text("Nothing else is needed."), finish("nothing more to do")])
                }
                (a, false) if a.contains("fix the adder") => sse(vec![delegate("coder", FIX)]),
                (a, true) if a.contains("fix the adder") => sse(vec![finish("the user refused the edit")]),
                (_, false) => sse(vec![
                    thinking("The data needs reading; the coder will do it.", "sig-1"),
                    text("I'll have the coder read the data."),
                    delegate("coder", READ),
                ]),
                (_, true) => sse(vec![finish("the coder read every file")]),
            };
        }
        // The coder keeps its history across delegations: the fix is the later one.
        if body["messages"].to_string().contains("Fix add()") {
            let (_, returned) = last_turn(body);
            let refused = body["messages"].to_string().contains("rejected by the user");
            return match (returned, refused) {
                (false, _) => sse(vec![tool_call(
                    "edit_file",
                    json!({"path": "src/lib.rs", "old_text": "a - b", "new_text": "a + b"}),
                )]),
                (true, true) => sse(vec![finish("the edit was rejected by the user; nothing changed")]),
                (true, false) => sse(vec![finish("edited")]),
            };
        }
        let n = reads.fetch_add(1, Ordering::SeqCst);
        if n < READS {
            sse(vec![
                text(&format!("reading file {}", n % 10)),
                tool_call("read_file", json!({"path": format!("data/file_{}.txt", n % 10)})),
            ])
        } else {
            sse(vec![finish(&format!("read {READS} files"))])
        }
    }
}

fn workspace() -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    sample_workspace(ws.path());
    std::fs::create_dir_all(ws.path().join("data")).unwrap();
    for i in 0..10 {
        let text: String =
            (1..=150).map(|n| format!("record {i}-{n}: value {}\n", (n * 7919 + i) % 10007)).collect();
        std::fs::write(ws.path().join(format!("data/file_{i}.txt")), text).unwrap();
    }
    ws
}

fn kinds(updates: &Value) -> Vec<String> {
    updates.as_array().unwrap().iter().map(|u| u["sessionUpdate"].as_str().unwrap().to_string()).collect()
}

fn texts(updates: &Value, kind: &str) -> String {
    let of_kind = updates.as_array().unwrap().iter().filter(|u| u["sessionUpdate"] == kind);
    of_kind.map(|u| u["content"]["text"].as_str().unwrap_or("")).collect::<Vec<_>>().join("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_editor_runs_follows_cancels_and_reloads_a_team_over_acp() {
    let server = ScriptedServer::builder()
        .max_model_len(Some(16_384))
        .window(16_384)
        .report_usage(true)
        .responder(responder(Arc::default()))
        .start()
        .await;
    let config = team_config(&server.base_url(), "gpt-4o", "[acp]\nask = [\"edit_file\"]\n");
    let d = TestDaemon::start(Path::new(BIN), &config);
    let ws = workspace();
    let venvs = tempfile::tempdir().unwrap();
    let venv = venv_with(venvs.path(), "acp", &[SDK]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/acp/client.py");
    let out = Command::new(venv.join("bin/python"))
        .arg(&script)
        .arg(BIN)
        .arg(d.home.path())
        .arg(ws.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the editor failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        d.serve_log()
    );
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();

    // initialize: protocol 1, sessions load, nothing to authenticate; authenticating anyway works.
    let init = &seen["initialize"];
    assert_eq!(init["protocolVersion"], 1);
    assert_eq!(init["agentCapabilities"]["loadSession"], true, "{init}");
    assert_eq!(init["agentInfo"]["name"], "agentd");
    assert!(init["authMethods"].as_array().is_none_or(|m| m.is_empty()), "{init}");
    assert_eq!(seen["authenticate"], json!({}));

    // A workspace submit would refuse is refused by session/new, naming the rule.
    let refused = &seen["refused_cwd"];
    assert_eq!(refused["code"], -32602, "{refused}");
    assert!(refused["message"].as_str().unwrap().contains("system directory"), "{refused}");

    // The first prompt: the task is the session.
    let task = seen["session_id"].as_str().unwrap().to_string();
    let status = d.client().call("task.status", json!({"task_id": task})).unwrap();
    assert_eq!(status["workspace"], ws.path().canonicalize().unwrap().display().to_string());
    let first = &seen["first"];
    assert_eq!(first["answer"]["stopReason"], "end_turn", "{first}");
    let updates = &first["updates"];
    let k = kinds(updates);
    assert!(texts(updates, "agent_thought_chunk").contains("The data needs reading"), "{k:?}");
    let said = texts(updates, "agent_message_chunk");
    assert!(said.contains("I'll have the coder read the data."), "{said}");
    assert!(said.contains("the coder read every file"), "the task's end: {said}");
    assert!(
        said.contains("coder's context compacted:") && said.contains(" → "),
        "a compaction, told: {said}"
    );
    let calls: Vec<&Value> =
        updates.as_array().unwrap().iter().filter(|u| u["sessionUpdate"] == "tool_call").collect();
    assert_eq!(calls.len(), READS, "every read, and no delegate or finish: {k:?}");
    let read = calls[0];
    assert_eq!(read["kind"], "read");
    assert_eq!(read["title"], "coder: read_file data/file_0.txt");
    let file = ws.path().canonicalize().unwrap().join("data/file_0.txt");
    assert_eq!(read["locations"][0]["path"], file.display().to_string());
    let id = read["toolCallId"].clone();
    let of_call: Vec<&Value> = updates
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["sessionUpdate"] == "tool_call_update" && u["toolCallId"] == id)
        .collect();
    assert_eq!(of_call[0]["status"], "in_progress");
    assert_eq!(of_call.last().unwrap()["status"], "completed");
    assert!(of_call.last().unwrap()["content"][0]["content"]["text"]
        .as_str()
        .unwrap()
        .contains("record 0-1:"));
    let plans: Vec<&Value> =
        updates.as_array().unwrap().iter().filter(|u| u["sessionUpdate"] == "plan").collect();
    assert_eq!(plans.first().unwrap()["entries"][0]["status"], "in_progress");
    assert_eq!(plans.last().unwrap()["entries"][0]["status"], "completed");
    assert!(plans[0]["entries"][0]["content"].as_str().unwrap().starts_with("coder: Read the data files"));
    // The turn's usage: the answer's field and agentd's own.
    let meta = &first["answer"]["_meta"]["agentd"];
    assert_eq!(meta["task_id"], task);
    assert_eq!(meta["state"], "finished");
    assert!(meta["answers"].as_u64().unwrap() > READS as u64, "{meta}");
    assert_eq!(first["answer"]["usage"]["inputTokens"], meta["usage"]["prompt_tokens"]);
    assert!(first["answer"]["usage"]["totalTokens"].as_u64().unwrap() > 0);

    // A follow-up is the same task, told only what is new.
    let follow = &seen["follow_up"];
    assert_eq!(follow["answer"]["stopReason"], "end_turn");
    let said = texts(&follow["updates"], "agent_message_chunk");
    assert!(said.contains("Nothing else is needed.") && said.contains("nothing more to do"), "{said}");
    assert!(!said.contains("read every file"), "nothing of the first turn again: {said}");

    // The edit asks first; the editor rejects it; the coder reads the refusal and nothing changes.
    let rejected = &seen["rejected"];
    assert_eq!(rejected["answer"]["stopReason"], "end_turn");
    let asked = seen["permissions"].as_array().unwrap();
    assert_eq!(asked.len(), 1, "only the edit asks: {asked:?}");
    let options: Vec<&str> =
        asked[0]["options"].as_array().unwrap().iter().map(|o| o["kind"].as_str().unwrap()).collect();
    assert_eq!(options, ["allow_once", "reject_once"]);
    let edit =
        rejected["updates"].as_array().unwrap().iter().find(|u| u["sessionUpdate"] == "tool_call").unwrap();
    assert_eq!(edit["kind"], "edit");
    assert_eq!(asked[0]["tool_call"]["toolCallId"], edit["toolCallId"], "the question names the call shown");
    let done = rejected["updates"]
        .as_array()
        .unwrap()
        .iter()
        .rfind(|u| u["sessionUpdate"] == "tool_call_update" && u["toolCallId"] == edit["toolCallId"])
        .unwrap();
    assert_eq!(done["status"], "failed");
    assert!(
        done["content"][0]["content"]["text"].as_str().unwrap().contains("rejected by the user"),
        "{done}"
    );
    assert!(std::fs::read_to_string(ws.path().join("src/lib.rs")).unwrap().contains("a - b"), "not edited");
    let events = d.logged_events(&task);
    let answered = events.iter().find(|e| e["kind"] == "permission_answered").unwrap();
    assert_eq!(
        (answered["allowed"].as_bool(), answered["reason"].as_str()),
        (Some(false), Some("rejected by the user"))
    );

    // Cancelled while the model thinks.
    assert_eq!(seen["cancelled"]["answer"]["stopReason"], "cancelled", "{}", seen["cancelled"]);
    let state = d.client().call("task.status", json!({"task_id": task})).unwrap();
    assert_eq!(state["state"], "cancelled");

    // Another editor loads the session: every turn replayed, the user's words included.
    let load = &seen["load"];
    let users = texts(&load["updates"], "user_message_chunk");
    for asked in ["Have the coder read the data", "Anything else?", "Now fix the adder", "Think forever"] {
        assert!(users.contains(asked), "{asked:?} in {users}");
    }
    let said = texts(&load["updates"], "agent_message_chunk");
    assert!(said.contains("the coder read every file") && said.contains("nothing more to do"), "{said}");
    let replayed =
        load["updates"].as_array().unwrap().iter().filter(|u| u["sessionUpdate"] == "tool_call").count();
    assert_eq!(replayed, READS + 1, "the reads and the edit");
    let unknown = &seen["load_unknown"];
    assert_eq!(unknown["code"], -32002, "{unknown}");
}

/// `agentd acp` driven line by line, as an editor writes them: what it answers on stdout, read on a
/// thread of its own.
struct RawEditor {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    answers: std::sync::mpsc::Receiver<Value>,
}

impl RawEditor {
    fn start(d: &TestDaemon) -> RawEditor {
        let mut child = d
            .command(&["acp"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, answers) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                let value =
                    serde_json::from_str(&line).unwrap_or_else(|e| json!({"unreadable": e.to_string()}));
                if tx.send(value).is_err() {
                    return;
                }
            }
        });
        RawEditor { child, stdin, answers }
    }

    fn send(&mut self, bytes: &[u8]) {
        use std::io::Write;
        self.stdin.write_all(bytes).unwrap();
        self.stdin.write_all(b"\n").unwrap();
        self.stdin.flush().unwrap();
    }

    fn request(&mut self, id: u64, method: &str, params: Value) {
        self.send(
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string().as_bytes(),
        );
    }

    /// The next message that is no `session/update`, and the updates before it.
    fn next(&self) -> (Value, Vec<Value>) {
        let mut updates = Vec::new();
        loop {
            let message =
                self.answers.recv_timeout(Duration::from_secs(60)).expect("an answer from agentd acp");
            if message["method"] == "session/update" {
                updates.push(message["params"]["update"].clone());
            } else {
                return (message, updates);
            }
        }
    }
}

/// The reproductions, with the real binary: a line of invalid UTF-8 killed `agentd acp` (now
/// -32700 and it goes on, as for malformed JSON); a 50 MB malformed line was echoed whole in the
/// error's data (now its first KiB, saying how much was cut); a 50 MB prompt was -32603 (now the
/// documented refusal: stop reason `refusal`, naming the daemon's limit); a line over 64 MiB is not
/// held (-32600) and the editor goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_lines_are_answered_and_agentd_acp_goes_on() {
    let server = ScriptedServer::builder().script(vec![]).start().await;
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let ws = workspace();
    let mut editor = RawEditor::start(&d);
    editor.request(1, "initialize", json!({"protocolVersion": 1, "clientCapabilities": {}}));
    assert_eq!(editor.next().0["result"]["protocolVersion"], 1);

    // Invalid UTF-8 inside an otherwise well-formed request.
    editor.send(b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"initialize\",\"params\":{\"x\":\"\xff\xfe\"}}");
    let (answer, _) = editor.next();
    assert_eq!(
        (answer["id"].clone(), answer["error"]["code"].as_i64()),
        (Value::Null, Some(-32700)),
        "{answer}"
    );
    assert!(answer["error"]["message"].as_str().unwrap().contains("not valid UTF-8"), "{answer}");

    // 50 MB that is not JSON: quoted cut.
    let mut malformed = b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"session/prompt\",\"params\":".to_vec();
    malformed.resize(50_000_000, b'x');
    editor.send(&malformed);
    let (answer, _) = editor.next();
    assert_eq!(
        answer["error"]["code"],
        -32700,
        "{}",
        &answer.to_string()[..answer.to_string().len().min(500)]
    );
    let data = &answer["error"]["data"];
    assert_eq!(data["line"].as_str().unwrap().len(), 1024);
    assert_eq!(
        (data["line_bytes"].as_u64(), data["cut_bytes"].as_u64()),
        (Some(50_000_000), Some(50_000_000 - 1024))
    );
    assert!(answer.to_string().len() < 4096, "the answer is small: {} bytes", answer.to_string().len());

    // Over 64 MiB: not held, answered, and the line after it is read.
    editor.send(&vec![b' '; 64 * 1024 * 1024 + 10]);
    let (answer, _) = editor.next();
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    assert_eq!(answer["error"]["data"]["line_bytes"], 64 * 1024 * 1024 + 10);

    // A 50 MB prompt: the daemon's refusal, naming its limit, as the prompt's answer.
    editor.request(4, "session/new", json!({"cwd": ws.path(), "mcpServers": []}));
    let session = editor.next().0["result"]["sessionId"].as_str().unwrap().to_string();
    let prompt = "y".repeat(50_000_000);
    editor.request(
        5,
        "session/prompt",
        json!({"sessionId": session, "prompt": [{"type": "text", "text": prompt}]}),
    );
    let (answer, updates) = editor.next();
    assert_eq!(answer["id"], 5);
    assert_eq!(answer["result"]["stopReason"], "refusal", "{answer}");
    let said: String = updates.iter().filter_map(|u| u["content"]["text"].as_str()).collect();
    assert!(
        said.contains("[agentd] refused: the prompt is too long") && said.contains("8388608 bytes"),
        "{said}"
    );
    assert!(server.chat_requests().is_empty(), "nothing reached a model");
    let status = d.client().call("task.status", json!({"task_id": session}));
    assert!(status.is_err(), "no task was made: {status:?}");

    // Still serving; closing stdin ends it cleanly.
    editor.request(6, "initialize", json!({"protocolVersion": 1, "clientCapabilities": {}}));
    assert_eq!(editor.next().0["id"], 6);
    drop(editor.stdin);
    let exit = editor.child.wait().unwrap();
    assert!(exit.success(), "{exit}");
}
