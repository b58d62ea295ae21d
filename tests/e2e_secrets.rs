//! End-to-end: no secret reaches a model, a log or the database. The provider's key is in the
//! daemon's environment (as `api_key_env` wants it) and a deploy token is named in `[secrets] env`;
//! the coder reads the daemon's own environment through `/proc`, runs `env`, reads a file holding
//! the token and produces an output large enough to become evidence. Every request body the
//! provider got, every line the daemon logged, `agentd log --jsonl` and every byte under the home
//! are searched for both values. The command sandbox is off here: redaction is the layer that holds
//! even then (with it on, the command cannot read the daemon's environment at all — e2e_sandbox).

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use agentd_protocol::task::EVIDENCE_FOLDER;
use agentd_test_support::daemon::TestDaemon;
use agentd_test_support::*;
use serde_json::json;
use std::path::Path;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_agentd");
const KEY: &str = "sk-live-7f3a9c1e5b2d4f6a8c0e";
const TOKEN: &str = "tok-deploy-0d9e8f7a6b5c4d3e";

/// Every file under `dir`, recursively, with its bytes.
fn files(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files(&path));
        } else if let Ok(bytes) = std::fs::read(&path) {
            out.push((path, bytes));
        }
    }
    out
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_keys_and_configured_secrets_are_redacted_everywhere() {
    let big = format!("{}\n", format!("line of output with the key {KEY} in it\n").repeat(3_000));
    // A 32K window: the 150 KB output cannot stay whole and becomes evidence.
    let server = ScriptedServer::builder()
        .max_model_len(Some(32_768))
        .script(vec![
            sse(vec![delegate("coder", "Look around")]),
            sse(vec![
                tool_call("run_command", json!({"command": "cat /proc/$PPID/environ | tr '\\0' '\\n'; env"})),
                tool_call("read_file", json!({"path": "deploy.env"})),
                tool_call("read_file", json!({"path": "big.log"})),
            ]),
            sse(vec![finish("looked around")]),
            sse(vec![finish("done")]),
        ])
        .start()
        .await;
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("deploy.env"), format!("DEPLOY_TOKEN={TOKEN}\n")).unwrap();
    std::fs::write(ws.path().join("big.log"), &big).unwrap();
    let config = format!(
        "[providers.scripted]\nkind = \"openai\"\nbase_url = \"{}\"\napi_key_env = \"AGENTD_TEST_PROVIDER_KEY\"\n\n\
         [team.lead]\nprovider = \"scripted\"\nmodel = \"gpt-4o\"\n\n\
         [team.coder]\nprovider = \"scripted\"\nmodel = \"gpt-4o\"\n\n\
         [secrets]\nenv = [\"AGENTD_TEST_DEPLOY_TOKEN\"]\n\n\
         [tools.sandbox]\nmode = \"off\"\n",
        server.base_url()
    );
    let mut d = TestDaemon::prepare(Path::new(BIN), &config);
    d.serve_with_env(&[("AGENTD_TEST_PROVIDER_KEY", KEY), ("AGENTD_TEST_DEPLOY_TOKEN", TOKEN)]);
    let task = d.submit("Have the coder look around", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(30));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}\n{}", d.serve_log());

    // The key is what authenticates the requests, in the header — and nowhere in a body.
    let requests = server.requests();
    assert!(requests.iter().any(|r| r.header("authorization") == Some(&format!("Bearer {KEY}"))));
    let bodies: Vec<String> = requests.iter().map(|r| r.body.to_string()).collect();
    for (i, body) in bodies.iter().enumerate() {
        assert!(!body.contains(KEY) && !body.contains(TOKEN), "request {i} carries a secret: {body}");
    }
    // The results were there, redacted by name.
    let all = bodies.join("\n");
    assert!(all.contains("[redacted: AGENTD_TEST_PROVIDER_KEY]"), "the environment was read: {all}");
    assert!(all.contains("DEPLOY_TOKEN=[redacted: AGENTD_TEST_DEPLOY_TOKEN]"), "the file was read");
    // The large output became evidence, whole but redacted.
    let finished: Vec<_> =
        events.iter().filter(|e| e["kind"] == "tool_finished" && e["evidence_id"].is_string()).collect();
    assert_eq!(finished.len(), 1, "{finished:#?}");

    let jsonl = d.cli(&["log", &task, "--jsonl"]);
    assert!(jsonl.status.success());
    assert!(!contains(&jsonl.stdout, KEY) && !contains(&jsonl.stdout, TOKEN), "agentd log --jsonl");
    let log = d.serve_log();
    assert!(!log.contains(KEY) && !log.contains(TOKEN), "the daemon's log");
    d.stop();
    let stored = files(d.home());
    assert!(stored.iter().any(|(p, _)| p.starts_with(d.home().join("evidence"))), "a blob was stored");
    for (path, bytes) in &stored {
        assert!(!contains(bytes, KEY) && !contains(bytes, TOKEN), "{} holds a secret", path.display());
    }
    for (path, bytes) in
        files(ws.path()).iter().filter(|(p, _)| p.starts_with(ws.path().join(EVIDENCE_FOLDER)))
    {
        assert!(!contains(bytes, KEY), "{} holds a secret", path.display());
    }
}
