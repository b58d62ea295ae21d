//! End-to-end: MCP servers' tools in a team. The real daemon starts the test-support MCP fixture as a
//! stdio server for the task (in the workspace, in the sandbox, with the env allowlist), the coder
//! uses its tools as `mcp__fix__TOOL`, and every way a tool can go wrong — an error, a crash, a
//! timeout, an invalid result — reaches the model as an error result while the task goes on. A
//! large result becomes evidence with a first page, an image goes to the model as an image, a
//! crashed server is started again, and a streamable HTTP server with a bearer token serves the lead.
//! The other direction — another program driving a team through `agentd mcp` — is at the end.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use agentd_test_support::daemon::TestDaemon;
use agentd_test_support::mcp::{fixture_bin, McpClient, McpHttpServer};
use agentd_test_support::workspace::sample_workspace;
use agentd_test_support::*;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_agentd");
const KEY: &str = "sk-e2e-mcp-provider-key-never-passed";

fn landlock() -> bool {
    // SAFETY: landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION) only returns a number.
    unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, std::ptr::null::<u8>(), 0usize, 1u32) >= 1 }
}

/// A team on `base_url` whose provider has a key in the daemon's environment, with `extra` tables;
/// the sandbox may read the fixture's directory (or is off where the kernel has no Landlock).
fn config(base_url: &str, extra: &str) -> String {
    let sandbox = if landlock() {
        format!("[tools.sandbox]\nread = [\"{}\"]\n", fixture_bin().parent().unwrap().display())
    } else {
        "[tools.sandbox]\nmode = \"off\"\n".to_string()
    };
    format!(
        "[providers.scripted]\nkind = \"openai\"\nbase_url = \"{base_url}\"\napi_key_env = \"AGENTD_E2E_PROVIDER_KEY\"\n\n\
         [team.lead]\nprovider = \"scripted\"\nmodel = \"gpt-4o\"\n\n\
         [team.coder]\nprovider = \"scripted\"\nmodel = \"gpt-4o\"\n\n{sandbox}\n{extra}"
    )
}

/// A daemon serving `config` with the provider's key in its environment (`serve` refuses a provider
/// whose `api_key_env` is unset).
fn keyed(config: &str) -> TestDaemon {
    let mut d = TestDaemon::prepare(Path::new(BIN), config);
    d.set_env(&[("AGENTD_E2E_PROVIDER_KEY", KEY)]);
    d.serve();
    d
}

fn tool_names(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect()
}

/// The content of the tool message answering `call_id` in the last request that holds it.
fn result_of(server: &ScriptedServer, call_id: &str) -> String {
    server
        .chat_requests()
        .iter()
        .rev()
        .flat_map(|b| b["messages"].as_array().cloned().unwrap_or_default())
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
        .and_then(|m| m["content"].as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("no result for {call_id}"))
}

fn finished(events: &[Value], call_id: &str) -> Value {
    events
        .iter()
        .find(|e| e["kind"] == "tool_finished" && e["call_id"] == call_id)
        .cloned()
        .unwrap_or_else(|| panic!("no tool_finished for {call_id}: {events:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_coder_uses_a_stdio_mcp_servers_tools_and_survives_everything_they_do() {
    let fixture = fixture_bin().display().to_string();
    let mcp = format!(
        "[mcp.servers.fix]\ncommand = \"{fixture}\"\nargs = [\"stdio\"]\nroles = [\"coder\"]\ntimeout = \"2s\"\n"
    );
    let call = |id: &str, tool: &str, args: Value| sse(vec![tool_call_with_id(id, tool, args)]);
    let server = ScriptedServer::builder()
        .max_model_len(Some(16_384))
        .script(vec![
            sse(vec![delegate("coder", "Use the fixture's tools")]),
            call("c-echo", "mcp__fix__echo", json!({"text": "hello from the coder"})),
            call("c-big", "mcp__fix__big", json!({"lines": 3000})),
            call("c-fail", "mcp__fix__fail", json!({"message": "no such branch"})),
            call("c-image", "mcp__fix__image", json!({})),
            call("c-bad", "mcp__fix__bad_image", json!({})),
            call("c-where", "mcp__fix__whereami", json!({})),
            call("c-crash", "mcp__fix__crash", json!({})),
            call("c-again", "mcp__fix__whereami", json!({})),
            call("c-slow", "mcp__fix__slow", json!({"ms": 60_000})),
            call("c-args", "mcp__fix__echo", json!(["not", "an", "object"])),
            sse(vec![finish("used every fixture tool")]),
            sse(vec![finish("the coder used the fixture")]),
        ])
        .start()
        .await;
    let ws = tempfile::tempdir().unwrap();
    sample_workspace(ws.path());
    let mut d = TestDaemon::prepare(Path::new(BIN), &config(&server.base_url(), &mcp));
    d.set_env(&[("AGENTD_E2E_PROVIDER_KEY", KEY)]);
    d.serve();
    let task = d.submit("Try the MCP fixture", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(90));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}\n{}", d.serve_log());

    // The lead does not get the server's tools; the coder does, with the server's own schemas.
    let reqs = server.chat_requests();
    assert!(!tool_names(&reqs[0]).iter().any(|n| n.starts_with("mcp__")), "{:?}", tool_names(&reqs[0]));
    let coder = &reqs[1];
    for tool in ["mcp__fix__echo", "mcp__fix__big", "mcp__fix__crash", "mcp__fix__whereami"] {
        assert!(tool_names(coder).contains(&tool.to_string()), "{tool}: {:?}", tool_names(coder));
    }
    let echo = coder["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "mcp__fix__echo")
        .unwrap();
    assert_eq!(echo["function"]["parameters"]["properties"]["text"]["type"], "string");
    assert_eq!(echo["function"]["description"], "Answers the text it is given.");

    // The MCP schemas are counted with the built-in ones, by the same rule: the coder's gauge has
    // each tool definition's JSON by the model's tokenizer, plus its framing.
    let coder_last =
        reqs.iter().rev().find(|b| tool_names(b).contains(&"mcp__fix__echo".to_string())).unwrap();
    let expected: u64 = coder_last["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let f = &t["function"];
            let schema = agentd_protocol::ToolSchema {
                name: f["name"].as_str().unwrap().to_string(),
                description: f["description"].as_str().unwrap().to_string(),
                parameters: f["parameters"].clone(),
            };
            let json = serde_json::to_string(&schema).unwrap();
            tiktoken_rs::o200k_base_singleton().encode_ordinary(&json).len() as u64 + 8
        })
        .sum();
    let gauge = d.client().call("context.get", json!({"task_id": task, "role": "coder"})).unwrap();
    assert_eq!(gauge["categories"]["tools"].as_u64(), Some(expected), "{gauge}");

    // A plain result, whole.
    assert_eq!(result_of(&server, "c-echo"), "hello from the coder");
    let called = events.iter().find(|e| e["kind"] == "tool_called" && e["call_id"] == "c-echo").unwrap();
    assert_eq!((called["tool"].as_str(), called["role"].as_str()), (Some("mcp__fix__echo"), Some("coder")));
    assert_eq!(finished(&events, "c-echo")["ok"], true);

    // A result over the paging limit is evidence, and the model gets its first page.
    let big = result_of(&server, "c-big");
    assert!(big.starts_with("[evidence "), "{}", &big[..big.len().min(300)]);
    assert!(big.contains("line 1 of 3000: "), "{}", &big[..300]);
    let stored = finished(&events, "c-big");
    let id = stored["evidence_id"].as_str().expect("the big result is evidence");
    assert!(stored["result_tokens"].as_u64().unwrap() <= stored["whole_limit"].as_u64().unwrap());
    let meta = d.client().call("evidence.get", json!({"id": id})).unwrap();
    assert_eq!(meta["lines"], 3000);
    assert_eq!(meta["source"]["tool"], "mcp__fix__big");

    // The tool's own error is an error result.
    assert_eq!(result_of(&server, "c-fail"), "no such branch");
    assert_eq!(finished(&events, "c-fail")["ok"], false);

    // An image goes to the model as an image, after its text.
    assert_eq!(result_of(&server, "c-image"), "a 1x1 png:");
    let coder_last = reqs.iter().rev().find(|b| b.to_string().contains("c-image")).unwrap();
    let last = coder_last["messages"].as_array().unwrap().clone();
    let at = last.iter().position(|m| m["tool_call_id"] == "c-image").unwrap();
    let image = &last[at + 1];
    assert_eq!(image["role"], "user", "{image}");
    assert!(image["content"][0]["image_url"]["url"]
        .as_str()
        .unwrap()
        .starts_with("data:image/png;base64,iVBOR"));

    // An invalid result is an error result naming what is wrong.
    let bad = result_of(&server, "c-bad");
    assert!(
        bad.contains("mcp__fix__bad_image answered an invalid result") && bad.contains("not base64"),
        "{bad}"
    );

    // The server runs in the workspace, with the allowlist only: the provider's key is not there.
    let here: Value = serde_json::from_str(&result_of(&server, "c-where")).unwrap();
    assert_eq!(here["cwd"], ws.path().canonicalize().unwrap().display().to_string());
    let env = here["env"].to_string();
    assert!(env.contains("\"PATH\"") && !env.contains("AGENTD_E2E_PROVIDER_KEY"), "{env}");
    for request in &reqs {
        assert!(!request.to_string().contains(KEY), "the key reached a request");
    }

    // A crash is an error result; the next call starts the server again (a new process).
    let crash = result_of(&server, "c-crash");
    assert!(crash.contains("MCP server fix stopped during the call (exited with code 7)"), "{crash}");
    let again: Value = serde_json::from_str(&result_of(&server, "c-again")).unwrap();
    assert_ne!(again["pid"], here["pid"], "restarted");

    // A call past the server's timeout is cancelled and said so.
    let slow = result_of(&server, "c-slow");
    assert_eq!(slow, "mcp__fix__slow took longer than its timeout (2s) and was cancelled");
    // Arguments that are not an object are refused before they reach the server.
    let args = result_of(&server, "c-args");
    assert_eq!(args, "invalid arguments for mcp__fix__echo: expected a JSON object, got an array");

    // The task's end stopped the server it started.
    let pid = again["pid"].as_u64().unwrap() as libc::pid_t;
    let mut gone = false;
    for _ in 0..500 {
        // SAFETY: signal 0 only asks whether the process exists.
        let exists = unsafe { libc::kill(pid, 0) == 0 };
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default().contains(") Z");
        if !exists || zombie {
            gone = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(gone, "the MCP server outlived its task");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_mcp_server_with_a_bearer_token_serves_the_lead_and_its_token_is_redacted() {
    let token = "tok-e2e-0123456789";
    let fixture = McpHttpServer::start_with_token(Some(token)).await;
    let mcp = format!(
        "[mcp.servers.web]\nurl = \"{}\"\nbearer_env = \"AGENTD_E2E_MCP_TOKEN\"\nroles = [\"lead\"]\ntools = [\"echo\"]\n",
        fixture.url()
    );
    let server = ScriptedServer::start(vec![
        sse(vec![tool_call_with_id(
            "l-echo",
            "mcp__web__echo",
            json!({"text": format!("the token is {token}")}),
        )]),
        sse(vec![tool_call_with_id("l-fail", "mcp__web__fail", json!({}))]),
        sse(vec![finish("echoed")]),
    ])
    .await;
    let ws = tempfile::tempdir().unwrap();
    let mut d = TestDaemon::prepare(Path::new(BIN), &config(&server.base_url(), &mcp));
    d.set_env(&[("AGENTD_E2E_PROVIDER_KEY", KEY), ("AGENTD_E2E_MCP_TOKEN", token)]);
    d.serve();
    let task = d.submit("Echo through the web server", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(30));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}\n{}", d.serve_log());
    let lead = &server.chat_requests()[0];
    let mcp_tools: Vec<String> = tool_names(lead).into_iter().filter(|n| n.starts_with("mcp__")).collect();
    assert_eq!(mcp_tools, ["mcp__web__echo"], "only the tools the filter names");
    // The server answered through the token; the token itself is redacted like a secret.
    assert_eq!(result_of(&server, "l-echo"), "the token is [redacted: AGENTD_E2E_MCP_TOKEN]");
    // A tool the filter leaves out is not available, like any tool the role does not have.
    let fail = result_of(&server, "l-fail");
    assert!(fail.starts_with("tool \"mcp__web__fail\" is not available to the lead role"), "{fail}");
    // The log holds the result as redacted too (the model's own arguments are its own words).
    let log = d.client().call("log.get", json!({"task_id": task})).unwrap();
    let results: Vec<&Value> = log["records"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["message"]["parts"].as_array().into_iter().flatten())
        .filter(|p| p["type"] == "tool_result")
        .collect();
    assert!(
        results.iter().any(|p| p["content"] == "the token is [redacted: AGENTD_E2E_MCP_TOKEN]"),
        "{results:#?}"
    );
    assert!(!results.iter().any(|p| p.to_string().contains(token)), "the token reached a logged result");
}

/// A server that cannot start is never silent: the task's history says so (`mcp_server_failed`, in
/// `log` too), the model's request names the server and why, a call of its tool is answered why,
/// `status` lists it while the task runs, `daemon.status` shows its last start, and `agentd doctor`
/// fails naming it and the key to change. The task still finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_start_is_visible_everywhere_and_the_task_finishes() {
    let mcp = "[mcp.servers.shouter]\ncommand = \"/nonexistent/venv/bin/python\"\nargs = [\"server.py\"]\nroles = [\"lead\"]\n";
    let server = ScriptedServer::start(vec![
        sse(vec![tool_call_with_id("l-1", "mcp__shouter__shout", json!({"text": "hi"}))]),
        // Slow enough for `status` to be read while the task runs.
        delayed(Duration::from_secs(3), sse(vec![finish("carried on without the shouter")])),
    ])
    .await;
    let ws = tempfile::tempdir().unwrap();
    let d = keyed(&config(&server.base_url(), mcp));
    let task = d.submit("Shout hello", ws.path());
    let why = "cannot start MCP server shouter: /nonexistent/venv/bin/python does not exist";
    // While it runs, `task.status` lists the server as down.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let down = loop {
        let status = d.client().call("task.status", json!({"task_id": task})).unwrap();
        if let Some(down) = status["mcp_down"].as_array().filter(|d| !d.is_empty()) {
            break down.clone();
        }
        assert!(std::time::Instant::now() < deadline, "no mcp_down in {status:#}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!((down[0]["server"].as_str(), down[0]["error"].as_str()), (Some("shouter"), Some(why)));
    assert!(down[0]["retry_at"].is_string());
    let shown = String::from_utf8(d.cli(&["status", &task]).stdout).unwrap();
    assert!(shown.contains(&format!("mcp down   shouter: {why} (tried again after ")), "{shown}");
    let events = d.events_until_end(&task, Duration::from_secs(30));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}");
    let failed: Vec<&Value> = events.iter().filter(|e| e["kind"] == "mcp_server_failed").collect();
    assert_eq!(failed.len(), 1, "once, not at every turn: {events:#?}");
    assert_eq!((failed[0]["server"].as_str(), failed[0]["error"].as_str()), (Some("shouter"), Some(why)));
    assert_eq!(failed[0]["will_retry_in_ms"], 1000);
    // The model is told in its request, and its call is answered why.
    let system = server.chat_requests()[0]["messages"][0]["content"].as_str().unwrap().to_string();
    assert!(
        system.contains(&format!(
            "Unavailable this turn: the tools of MCP server shouter (mcp__shouter__*) — {why}."
        )),
        "{system}"
    );
    assert!(!tool_names(&server.chat_requests()[0]).iter().any(|n| n.starts_with("mcp__")));
    assert_eq!(
        result_of(&server, "l-1"),
        format!("tool \"mcp__shouter__shout\" is not available this turn: {why}")
    );
    // `log` shows it in words; the task's end closed its servers, so nothing is down any more.
    let log = String::from_utf8(d.cli(&["log", &task]).stdout).unwrap();
    assert!(log.contains(&format!("MCP server shouter FAILED: {why}")), "{log}");
    let status = d.client().call("task.status", json!({"task_id": task})).unwrap();
    assert!(status.get("mcp_down").is_none(), "{status:#}");
    let daemon = d.client().call("daemon.status", json!({})).unwrap();
    let last = &daemon["mcp"][0];
    assert_eq!((last["server"].as_str(), last["transport"].as_str()), (Some("shouter"), Some("stdio")));
    assert_eq!(last["target"], "/nonexistent/venv/bin/python server.py");
    assert_eq!(
        (last["last_start"]["ok"].as_bool(), last["last_start"]["error"].as_str()),
        (Some(false), Some(why))
    );
    let shown = String::from_utf8(d.cli(&["daemon"]).stdout).unwrap();
    assert!(
        shown.contains("mcp          shouter (stdio /nonexistent/venv/bin/python server.py): FAILED "),
        "{shown}"
    );
    // `agentd doctor` fails, naming the server, the error and the key.
    let out = d
        .command(&["doctor", "--no-probe", "--workspace", ws.path().to_str().unwrap()])
        .env("AGENTD_E2E_PROVIDER_KEY", KEY)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(1), "{text}");
    let line = format!(
        "FAIL  mcp      shouter: in the sandbox, workspace {}: {why}",
        ws.path().canonicalize().unwrap().display()
    );
    assert!(text.contains(&line), "{text}");
    assert!(text.contains("→ mcp.servers.shouter.command"), "{text}");
    assert!(text.ends_with("1 failed: mcp shouter\n"), "{text}");
    // Each model line names the key variable it checked (never its value).
    assert!(text.contains("API key from $AGENTD_E2E_PROVIDER_KEY") && !text.contains(KEY), "{text}");
}

/// A published MCP server (`mcp-server-time` from PyPI) installed as users install it — a virtual
/// environment in a home outside the system's directories, whose interpreter is pyenv's in the real
/// home — configured with nothing but its command, under the default sandbox: both ways of naming it
/// (its console script; the venv's python with `-m`) start, and the coder's calls reach the model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_installed_in_a_venv_in_the_home_starts_under_the_default_sandbox() {
    let home = tempfile::tempdir().unwrap();
    let venv = agentd_test_support::pip::venv_with(home.path(), "time", &["mcp-server-time"]);
    let mcp = format!(
        "[mcp.servers.time]\ncommand = \"{v}/bin/mcp-server-time\"\n\n\
         [mcp.servers.clock]\ncommand = \"{v}/bin/python\"\nargs = [\"-m\", \"mcp_server_time\", \"--local-timezone\", \"UTC\"]\n",
        v = venv.display()
    );
    let server = ScriptedServer::start(vec![
        sse(vec![delegate("coder", "Tell the time in Tokyo")]),
        sse(vec![tool_call_with_id("t-1", "mcp__time__get_current_time", json!({"timezone": "Asia/Tokyo"}))]),
        sse(vec![tool_call_with_id(
            "t-2",
            "mcp__clock__convert_time",
            json!({"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}),
        )]),
        sse(vec![finish("it is 21:00 in Tokyo when it is noon in UTC")]),
        sse(vec![finish("the coder told the time")]),
    ])
    .await;
    let ws = tempfile::tempdir().unwrap();
    // The default sandbox: no `read`, no `[tools.sandbox]` at all.
    let config = format!(
        "[providers.scripted]\nkind = \"openai\"\nbase_url = \"{}\"\n\n\
         [team.lead]\nprovider = \"scripted\"\nmodel = \"gpt-4o\"\n\n\
         [team.coder]\nprovider = \"scripted\"\nmodel = \"gpt-4o\"\n\n{mcp}",
        server.base_url()
    );
    let mut d = TestDaemon::prepare(Path::new(BIN), &config);
    d.serve();
    let task = d.submit("Tell the time in Tokyo", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(120));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}\n{}", d.serve_log());
    let started: Vec<(&str, u64)> = events
        .iter()
        .filter(|e| e["kind"] == "mcp_server_started")
        .map(|e| (e["server"].as_str().unwrap(), e["tools"].as_u64().unwrap()))
        .collect();
    assert_eq!(started, [("clock", 2), ("time", 2)], "{events:#?}");
    assert!(!events.iter().any(|e| e["kind"] == "mcp_server_failed"), "{events:#?}");
    // The coder's request offers the server's own tools; their answers reach the model.
    let coder = &server.chat_requests()[1];
    for tool in ["mcp__time__get_current_time", "mcp__clock__convert_time"] {
        assert!(tool_names(coder).contains(&tool.to_string()), "{:?}", tool_names(coder));
    }
    let tokyo: Value = serde_json::from_str(&result_of(&server, "t-1")).unwrap();
    assert_eq!(tokyo["timezone"], "Asia/Tokyo");
    assert!(tokyo["datetime"].as_str().unwrap().ends_with("+09:00"), "{tokyo}");
    let converted: Value = serde_json::from_str(&result_of(&server, "t-2")).unwrap();
    assert!(converted["target"]["datetime"].as_str().unwrap().contains("T21:00:00"), "{converted}");
    // daemon.status lists both servers with their last start.
    let status = d.client().call("daemon.status", json!({})).unwrap();
    let servers = status["mcp"].as_array().unwrap();
    assert_eq!(servers.len(), 2);
    assert!(
        servers.iter().all(|s| s["last_start"]["ok"] == true && s["last_start"]["tools"] == 2),
        "{status:#}"
    );
    // `agentd doctor` starts both the same way, reads the provider, and finds nothing failing.
    let out = d.cli(&["doctor", "--no-probe", "--workspace", ws.path().to_str().unwrap(), "--json"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{report:#}");
    let check = |area: &str, name: &str| {
        report["checks"].as_array().unwrap().iter().find(|c| c["area"] == area && c["name"] == name).cloned()
    };
    for server in ["time", "clock"] {
        let c = check("mcp", server).unwrap();
        assert!(c["verdict"] == "ok" && c["detail"].as_str().unwrap().contains(": 2 tools ("), "{c}");
    }
    let lead = check("model", "lead").unwrap();
    assert!(lead["detail"].as_str().unwrap().contains("counted by tiktoken (o200k_base)"), "{lead}");
    // The model line says which key variable it checked (never its value): here, none is configured.
    assert!(lead["detail"].as_str().unwrap().contains("providers.scripted.api_key_env unset"), "{lead}");
    assert_eq!(check("daemon", d.socket().to_str().unwrap()).unwrap()["verdict"], "ok");
}

// -------------------------------------------------------------------------------------------------
// agentd as an MCP server
// -------------------------------------------------------------------------------------------------

/// `agentd --home HOME mcp`, run in `dir`, as an MCP client sees it.
async fn agentd_mcp(d: &TestDaemon, dir: &Path) -> McpClient {
    let mut command = d.command(&["mcp"]);
    command.current_dir(dir);
    McpClient::spawn(command).await
}

/// Every event of `task` through `task_events`, polled with a wait until its runner has stopped and
/// a page comes back empty.
async fn all_events(client: &McpClient, task: &str, mut after: u64) -> (Vec<Value>, String) {
    let mut events = Vec::new();
    for _ in 0..200 {
        let page =
            client.call("task_events", json!({"task_id": task, "after_seq": after, "wait_s": 5})).await;
        assert!(!page.is_error, "{}", page.text);
        let page = page.json();
        let batch = page["events"].as_array().unwrap().clone();
        let state = page["state"].as_str().unwrap().to_string();
        if batch.is_empty() && page["running"] == false {
            return (events, state);
        }
        if let Some(last) = batch.last() {
            after = last["seq"].as_u64().unwrap();
        }
        events.extend(batch);
    }
    panic!("the task did not end: {events:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_program_drives_a_team_through_agentd_mcp() {
    let ws = tempfile::tempdir().unwrap();
    sample_workspace(ws.path());
    let big: String = (1..=3000).map(|i| format!("row {i}: some data to page through\n")).collect();
    std::fs::write(ws.path().join("big.txt"), big).unwrap();
    let server = ScriptedServer::builder()
        .max_model_len(Some(16_384))
        .script(vec![
            sse(vec![tool_call_with_id("r1", "read_file", json!({"path": "big.txt"}))]),
            sse(vec![delegate("coder", "Fix add() in src/lib.rs")]),
            sse(vec![tool_call(
                "edit_file",
                json!({"path": "src/lib.rs", "old_text": "a - b", "new_text": "a + b"}),
            )]),
            sse(vec![finish("add() adds now")]),
            sse(vec![finish("fixed add()")]),
            // The follow-up.
            sse(vec![finish("nothing more to do")]),
            // The second task, which the client cancels while the model thinks.
            hang(),
        ])
        .start()
        .await;
    let d = keyed(&config(&server.base_url(), ""));
    let client = agentd_mcp(&d, ws.path()).await;
    let names = client.tool_names().await;
    assert_eq!(
        names,
        ["submit_task", "task_status", "task_events", "task_message", "cancel_task", "read_evidence"]
    );

    // Submitted without a workspace: the directory `agentd mcp` runs in.
    let submitted = client.call("submit_task", json!({"objective": "Fix the adder"})).await;
    assert!(!submitted.is_error, "{}", submitted.text);
    let task = submitted.json()["task_id"].as_str().unwrap().to_string();
    let (events, state) = all_events(&client, &task, 0).await;
    assert_eq!(state, "finished");
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "every event, in order, once");
    assert_eq!(events.last().unwrap()["kind"], "task_finished");
    assert!(events.iter().any(|e| e["kind"] == "delegated" && e["to_role"] == "coder"));
    assert!(std::fs::read_to_string(ws.path().join("src/lib.rs")).unwrap().contains("a + b"));

    let status = client.call("task_status", json!({"task_id": task})).await.json();
    assert_eq!(
        (status["state"].as_str(), status["result"].as_str()),
        (Some("finished"), Some("fixed add()"))
    );
    assert_eq!(status["workspace"], ws.path().canonicalize().unwrap().display().to_string());

    // What the task stored whole is readable by the id its events name.
    let id = finished(&events, "r1")["evidence_id"].as_str().unwrap().to_string();
    let page =
        client.call("read_evidence", json!({"id": id, "offset": 10, "limit": 2, "lines": true})).await.json();
    assert_eq!(page["data"], "row 11: some data to page through\nrow 12: some data to page through\n");
    assert_eq!(page["next_offset"], 12);

    // A follow-up runs the task again; its events continue the same seqs.
    let followed = client.call("task_message", json!({"task_id": task, "text": "Anything else?"})).await;
    assert!(!followed.is_error, "{}", followed.text);
    let last = *seqs.last().unwrap();
    let (more, state) = all_events(&client, &task, last).await;
    assert_eq!(state, "finished");
    assert_eq!(more[0]["seq"].as_u64(), Some(last + 1));
    assert!(more.iter().any(|e| e["kind"] == "task_message"));
    assert_eq!(more.last().unwrap()["kind"], "task_finished");

    // A running task is cancelled.
    let budget = json!({"tokens": 1_000_000, "cost": 2.5});
    let second = client
        .call("submit_task", json!({"objective": "Think forever", "workspace": ws.path(), "budget": budget}))
        .await;
    let second = second.json()["task_id"].as_str().unwrap().to_string();
    d.wait_for_state(&second, "running", Duration::from_secs(10));
    let status = client.call("task_status", json!({"task_id": second})).await.json();
    assert_eq!(status["budget"], budget, "the task keeps the budget it was handed: {status}");
    let cancelled = client.call("cancel_task", json!({"task_id": second})).await;
    assert!(!cancelled.is_error, "{}", cancelled.text);
    let (_, state) = all_events(&client, &second, 0).await;
    assert_eq!(state, "cancelled");

    // The daemon's refusals are error results with their code and message.
    let unknown = client.call("task_status", json!({"task_id": "nope"})).await;
    assert!(
        unknown.is_error && unknown.text.contains("-32001") && unknown.text.contains("unknown task"),
        "{unknown:?}"
    );
    let bad = client.call("submit_task", json!({"objective": "x", "workspace": "/"})).await;
    assert!(bad.is_error && bad.text.contains("-32007"), "{bad:?}");
    let broke = client.call("submit_task", json!({"objective": "x", "budget": {"cost": -1.0}})).await;
    assert!(broke.is_error && broke.text.contains("budget.cost"), "{broke:?}");
    let typo = client.call("task_status", json!({"task": task})).await;
    assert!(typo.is_error && typo.text.contains("invalid arguments for task_status"), "{typo:?}");
    let status = client.close().await.expect("agentd mcp exits when its client goes");
    assert!(status.success(), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agentd_mcp_without_a_daemon_answers_each_call_with_an_error_naming_the_socket() {
    let d = TestDaemon::prepare(Path::new(BIN), &config("http://127.0.0.1:9/v1", ""));
    let ws = tempfile::tempdir().unwrap();
    let client = agentd_mcp(&d, ws.path()).await;
    let reply = client.call("submit_task", json!({"objective": "anything"})).await;
    assert!(reply.is_error, "{reply:?}");
    assert!(
        reply.text.contains("cannot reach the daemon") && reply.text.contains("agentd.sock"),
        "{}",
        reply.text
    );
}
