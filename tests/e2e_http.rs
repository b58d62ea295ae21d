//! End-to-end: the HTTP API of the real binary, against a scripted model. It answers with the socket's
//! own types and error codes (each answer compared with the socket's), streams a task's events as
//! Server-Sent Events with `Last-Event-ID` replay (no gap, no repeat, the end marked), refuses a
//! request without the token, exchanges the token for a browser cookie once, and is off unless
//! configured or asked for (`agentd serve --http`, `agentd dashboard`).

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use agentd_test_support::daemon::{team_config, TestDaemon};
use agentd_test_support::*;
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_agentd");
const HTTP: &str = "[http]\nlisten = \"127.0.0.1:0\"\n";

/// A client of the daemon's API with its token; redirects are not followed, proxies not used.
struct Api {
    base: String,
    token: String,
    http: reqwest::Client,
}

impl Api {
    fn of(d: &TestDaemon) -> Api {
        let http = agentd_test_support::http_client()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        Api { base: d.http_base(), token: d.http_token(), http }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn answer(response: reqwest::Response) -> (u16, Value) {
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}")))
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        Self::answer(self.http.get(self.url(path)).bearer_auth(&self.token).send().await.unwrap()).await
    }

    async fn post(&self, path: &str, body: &str) -> (u16, Value) {
        let request = self.http.post(self.url(path)).bearer_auth(&self.token).body(body.to_string());
        Self::answer(request.header("content-type", "application/json").send().await.unwrap()).await
    }

    /// A `200` answer's value.
    async fn ok(&self, path: &str) -> Value {
        let (status, v) = self.get(path).await;
        assert_eq!(status, 200, "GET {path}: {v}");
        v
    }
}

/// The socket's answer to a method, or its error as `{"error": {code, message}}`: what the HTTP
/// API must answer too.
fn socket(d: &TestDaemon, method: &str, params: Value) -> Value {
    match d.client().call(method, params) {
        Ok(v) => v,
        Err(e) => json!({"error": {"code": e.code, "message": e.message}}),
    }
}

/// One SSE message: its id, event name and data.
#[derive(Debug, Clone, PartialEq)]
struct Message {
    id: Option<u64>,
    event: String,
    data: Value,
}

/// Reads an SSE stream until the server ends it (or until `until` says stop), parsing whole
/// messages as they arrive. Comments are skipped.
async fn read_sse(
    response: reqwest::Response,
    mut until: impl FnMut(&Message) -> bool,
) -> (Vec<Message>, bool) {
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"].to_str().unwrap().to_string();
    assert!(content_type.starts_with("text/event-stream"), "{content_type}");
    let mut stream = response.bytes_stream();
    let mut buffer = String::new();
    let mut messages = Vec::new();
    loop {
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            let mut m = Message { id: None, event: "message".into(), data: Value::Null };
            let mut data = String::new();
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id: ") {
                    m.id = Some(v.parse().unwrap());
                } else if let Some(v) = line.strip_prefix("event: ") {
                    m.event = v.to_string();
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data.push_str(v);
                }
            }
            if data.is_empty() {
                continue; // a comment
            }
            m.data = serde_json::from_str(&data).unwrap();
            let stop = until(&m);
            messages.push(m);
            if stop {
                return (messages, false);
            }
        }
        match tokio::time::timeout(Duration::from_secs(60), stream.next()).await {
            Ok(Some(chunk)) => buffer.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap()),
            // The server ended the stream.
            Ok(None) => return (messages, true),
            Err(_) => panic!("no SSE bytes for 60s; so far: {messages:#?}"),
        }
    }
}

/// A team that reads a file too large to stay whole (so it becomes evidence) and finishes.
async fn evidence_run() -> (ScriptedServer, TestDaemon, tempfile::TempDir, String) {
    let server = ScriptedServer::builder()
        .max_model_len(Some(32_768))
        .window(32_768)
        .script(vec![
            sse(vec![tool_call("read_file", json!({"path": "big.txt"}))]),
            sse(vec![finish("read it")]),
        ])
        .start()
        .await;
    let ws = tempfile::tempdir().unwrap();
    let text: String =
        (1..=6000).map(|n| format!("line {n:05}: the quick brown fox jumps over the lazy dog\n")).collect();
    std::fs::write(ws.path().join("big.txt"), text).unwrap();
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", HTTP));
    let api = Api::of(&d);
    let (status, submitted) = api
        .post("/api/v1/tasks", &json!({"objective": "Read big.txt", "workspace": ws.path()}).to_string())
        .await;
    assert_eq!(status, 200, "{submitted}");
    let task = submitted["task_id"].as_str().unwrap().to_string();
    let events = d.events_until_end(&task, Duration::from_secs(60));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{}", d.serve_log());
    (server, d, ws, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_answers_with_the_sockets_types_and_error_codes() {
    let (_server, d, _ws, task) = evidence_run().await;
    let api = Api::of(&d);
    let mode = std::fs::metadata(d.home().join("http.token")).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the token is the daemon user's alone");

    // Every read answers what the socket answers, value for value.
    let t = task.as_str();
    for (path, method, params) in [
        ("/api/v1/tasks".to_string(), "task.list", json!({})),
        (format!("/api/v1/tasks/{t}"), "task.status", json!({"task_id": t})),
        (format!("/api/v1/tasks/{t}/context/lead"), "context.get", json!({"task_id": t, "role": "lead"})),
        (format!("/api/v1/tasks/{t}/log"), "log.get", json!({"task_id": t})),
        (
            format!("/api/v1/tasks/{t}/log?role=lead&after_seq=3&limit=5"),
            "log.get",
            json!({"task_id": t, "role": "lead", "after_seq": 3, "limit": 5}),
        ),
        (format!("/api/v1/evidence?task_id={t}"), "evidence.list", json!({"task_id": t})),
    ] {
        assert_eq!(api.ok(&path).await, socket(&d, method, params), "GET {path} vs {method}");
    }
    let evidence = api.ok("/api/v1/evidence").await;
    let id = evidence[0]["id"].as_str().expect("the read was stored as evidence").to_string();
    assert_eq!(
        api.ok(&format!("/api/v1/evidence/{id}")).await,
        socket(&d, "evidence.get", json!({"id": id}))
    );
    let page = api.ok(&format!("/api/v1/evidence/{id}/read?offset=10&limit=3&unit=lines")).await;
    assert_eq!(
        page,
        socket(&d, "evidence.read", json!({"id": id, "offset": 10, "limit": 3, "unit": "lines"}))
    );
    assert_eq!(
        page["data"].as_str().unwrap().lines().next().unwrap(),
        "line 00011: the quick brown fox jumps over the lazy dog"
    );
    assert_eq!(page["next_offset"], 13);
    let (status, verified) = api.post("/api/v1/evidence/verify", "").await;
    assert_eq!((status, &verified), (200, &socket(&d, "evidence.verify", json!({}))));
    assert_eq!(verified["problems"], json!([]));
    let daemon = api.ok("/api/v1/daemon").await;
    let by_socket = socket(&d, "daemon.status", json!({}));
    assert_eq!(daemon["http"], by_socket["http"]);
    assert_eq!(daemon["version"], by_socket["version"]);
    assert_eq!(daemon["http"]["listen"].as_str().map(|l| format!("http://{l}")), Some(api.base.clone()));

    // Errors: the socket's codes and messages, with the status their code has.
    let finished = json!({"task_id": t});
    let cases: Vec<(&str, String, &str, u16, Value)> = vec![
        (
            "GET",
            "/api/v1/tasks/no-such-task".into(),
            "",
            404,
            socket(&d, "task.status", json!({"task_id": "no-such-task"})),
        ),
        (
            "GET",
            "/api/v1/evidence/ev-nope".into(),
            "",
            404,
            socket(&d, "evidence.get", json!({"id": "ev-nope"})),
        ),
        ("POST", format!("/api/v1/tasks/{t}/resume"), "", 409, socket(&d, "task.resume", finished.clone())),
        (
            "POST",
            "/api/v1/tasks".into(),
            r#"{"objective": 1, "workspace": "/tmp"}"#,
            400,
            socket(&d, "task.submit", json!({"objective": 1, "workspace": "/tmp"})),
        ),
        (
            "POST",
            "/api/v1/tasks".into(),
            r#"{"objective": "x", "workspace": "/"}"#,
            403,
            socket(&d, "task.submit", json!({"objective": "x", "workspace": "/"})),
        ),
        (
            "POST",
            "/api/v1/tasks".into(),
            r#"{"objective": "x", "workspace": "/no/such/dir"}"#,
            404,
            socket(&d, "task.submit", json!({"objective": "x", "workspace": "/no/such/dir"})),
        ),
        (
            "GET",
            format!("/api/v1/tasks/{t}/context/nobody"),
            "",
            404,
            socket(&d, "context.get", json!({"task_id": t, "role": "nobody"})),
        ),
    ];
    for (verb, path, body, status, expected) in cases {
        let (got_status, got) = match verb {
            "GET" => api.get(&path).await,
            _ => api.post(&path, body).await,
        };
        assert!(expected.get("error").is_some(), "{expected}");
        assert_eq!((got_status, &got), (status, &expected), "{verb} {path}");
    }
    let (status, e) = api.post("/api/v1/tasks", "{objective").await;
    assert_eq!((status, e["error"]["code"].clone()), (400, json!(-32700)), "{e}");
    let (status, e) = api.get(&format!("/api/v1/tasks/{t}/log?limit=ten")).await;
    assert_eq!((status, e["error"]["code"].clone()), (400, json!(-32602)), "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("`limit`"), "{e}");
    let (status, e) = api.get("/api/v1/teapots").await;
    assert_eq!((status, e["error"]["code"].clone()), (404, json!(-32601)), "{e}");
    let (status, e) = api.get(&format!("/api/v1/tasks/{t}/cancel")).await;
    assert_eq!((status, e["error"]["code"].clone()), (405, json!(-32601)), "{e}");

    // The OpenAPI document is the one the protocol's types generate, and names every route.
    let openapi = api.ok("/api/v1/openapi.json").await;
    assert_eq!(openapi, agentd_protocol::openapi::openapi_document());
    for route in agentd_protocol::rpc::ROUTES.iter() {
        let verb = route.verb.as_str().to_lowercase();
        assert!(openapi["paths"][route.full_path()][&verb].is_object(), "{route:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_needs_the_token_and_a_browser_trades_it_once_for_a_cookie() {
    let server = ScriptedServer::start(vec![]).await;
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", HTTP));
    let api = Api::of(&d);
    let plain = &api.http;

    // No token, a wrong one, a wrong cookie: 401 with the socket's code for a refused caller.
    for request in [
        plain.get(api.url("/api/v1/tasks")),
        plain.get(api.url("/api/v1/tasks")).bearer_auth("not-the-token"),
        plain.get(api.url("/api/v1/daemon")).header("cookie", "agentd_token=not-the-token"),
        plain.post(api.url("/api/v1/tasks")).body(r#"{"objective": "x", "workspace": "/tmp"}"#),
        plain.get(api.url("/api/v1/tasks/x/events")),
    ] {
        let (status, e) = Api::answer(request.send().await.unwrap()).await;
        assert_eq!(status, 401, "{e}");
        assert_eq!(e["error"]["code"], -32600, "{e}");
        assert!(e["error"]["message"].as_str().unwrap().contains("token"), "{e}");
    }
    for path in ["/", "/assets/app.js", "/favicon.ico"] {
        let r = plain.get(api.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 401, "{path}");
        assert!(r.text().await.unwrap().contains("agentd dashboard"), "{path}: the page says what to do");
    }
    assert!(socket(&d, "task.list", json!({})).as_array().unwrap().is_empty(), "nothing was submitted");
    // The OpenAPI document alone is served without the token (it is docs/openapi.json), and says so.
    let (status, doc) = Api::answer(plain.get(api.url("/api/v1/openapi.json")).send().await.unwrap()).await;
    assert_eq!(status, 200);
    assert_eq!(doc["paths"]["/api/v1/openapi.json"]["get"]["security"], json!([]));
    // Another verb on it is a 405 naming GET, token or not (it answered 401: there is no token to it).
    for with_token in [false, true] {
        let trace = plain.request(reqwest::Method::TRACE, api.url("/api/v1/openapi.json"));
        let trace = if with_token { trace.bearer_auth(&api.token) } else { trace };
        let r = trace.send().await.unwrap();
        assert_eq!(r.headers().get("allow").map(|v| v.to_str().unwrap().to_string()), Some("GET".into()));
        let (status, e) = Api::answer(r).await;
        assert_eq!((status, e["error"]["code"].clone()), (405, json!(-32601)), "token {with_token}: {e}");
    }
    for route in agentd_protocol::rpc::ROUTES.iter() {
        let verb = route.verb.as_str().to_lowercase();
        let op = &doc["paths"][route.full_path()][&verb];
        assert!(op["responses"]["401"].is_object() && op.get("security").is_none(), "{route:?}: {op}");
    }

    // The dashboard's URL: a wrong token is refused; the right one becomes an HttpOnly, SameSite
    // cookie and a redirect to `/`, so the token leaves the address bar.
    let r = plain.get(api.url("/?token=not-the-token")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.headers().get("set-cookie").is_none());
    let url = String::from_utf8(d.cli(&["dashboard"]).stdout).unwrap().trim().to_string();
    assert_eq!(url, format!("{}/?token={}", api.base, api.token));
    let r = plain.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "/");
    let cookie = r.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(cookie.starts_with(&format!("agentd_token={};", api.token)), "{cookie}");
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"), "{cookie}");
    let jar = format!("agentd_token={}", api.token);
    let r = plain.get(api.url("/")).header("cookie", &jar).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("/assets/app.js"));
    let r = plain.get(api.url("/api/v1/tasks")).header("cookie", &jar).send().await.unwrap();
    assert_eq!(r.status(), 200);

    // A POST with the cookie from another site's page is refused; from the dashboard's own it is
    // the method's answer (here: a refused workspace).
    let submit = r#"{"objective": "x", "workspace": "/"}"#;
    let r = plain
        .post(api.url("/api/v1/tasks"))
        .header("cookie", &jar)
        .header("origin", "http://evil.example")
        .body(submit)
        .send()
        .await
        .unwrap();
    let (status, e) = Api::answer(r).await;
    assert_eq!((status, e["error"]["code"].clone()), (403, json!(-32600)), "{e}");
    let r =
        plain.post(api.url("/api/v1/tasks")).header("cookie", &jar).header("origin", &api.base).body(submit);
    let (status, e) = Api::answer(r.send().await.unwrap()).await;
    assert_eq!((status, e["error"]["code"].clone()), (403, json!(-32007)), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_stream_as_sse_with_last_event_id_replay_and_end_after_the_terminal_event() {
    // The lead's first request is rate limited for 30 s of the daemon's (manual) clock: the task
    // is live, waiting, while the stream is read.
    let server = ScriptedServer::builder()
        .script(vec![
            rate_limited(Some("30")),
            sse(vec![tool_call("list_dir", json!({"path": "."}))]),
            sse(vec![finish("looked")]),
        ])
        .start()
        .await;
    let ws = tempfile::tempdir().unwrap();
    let mut d = TestDaemon::prepare(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", HTTP));
    d.serve_with_env(&[("AGENTD_CLOCK", "manual")]);
    let api = Api::of(&d);
    let task = d.submit("Look around", ws.path());
    let events_url = api.url(&format!("/api/v1/tasks/{task}/events"));

    // Live: the stream shows the wait as it happens; then the clock moves and the rest follows.
    let live = api.http.get(&events_url).bearer_auth(&api.token).send().await.unwrap();
    let mut waiting = tokio::spawn(read_sse(live, |_| false));
    let (first, _) = read_sse(api.http.get(&events_url).bearer_auth(&api.token).send().await.unwrap(), |m| {
        m.data["kind"] == "retry_scheduled"
    })
    .await;
    assert_eq!(first.last().unwrap().data["kind"], "retry_scheduled", "{first:#?}");
    let (messages, ended) = loop {
        d.client().call("clock.advance", json!({"ms": 60_000})).unwrap();
        match tokio::time::timeout(Duration::from_millis(200), &mut waiting).await {
            Ok(done) => break done.unwrap(),
            Err(_) => continue,
        }
    };
    assert!(ended, "the server ends the stream after the end");
    let logged = d.logged_events(&task);
    let (events, end) = messages.split_at(messages.len() - 1);
    assert_eq!(events.iter().map(|m| m.data.clone()).collect::<Vec<_>>(), logged, "no gap, no repeat");
    for m in events {
        assert_eq!((m.event.as_str(), m.id), ("task.event", m.data["seq"].as_u64()), "{m:?}");
    }
    assert_eq!(end[0].event, "task.end");
    assert_eq!(end[0].id, None);
    assert_eq!(end[0].data, json!({"task_id": task, "seq": logged.len(), "kind": "task_finished"}));

    // Replay after an id (a reconnecting EventSource's Last-Event-ID), or after_seq: exactly the rest.
    for k in [0, 3, logged.len() as u64 - 1] {
        let r = api.http.get(&events_url).bearer_auth(&api.token).header("last-event-id", k.to_string());
        let (messages, ended) = read_sse(r.send().await.unwrap(), |_| false).await;
        assert!(ended);
        let seqs: Vec<u64> = messages.iter().filter_map(|m| m.id).collect();
        assert_eq!(seqs, (k + 1..=logged.len() as u64).collect::<Vec<_>>(), "after {k}");
        assert_eq!(messages.last().unwrap().event, "task.end");
    }
    let r = api.http.get(format!("{events_url}?after_seq=4")).bearer_auth(&api.token);
    let (messages, _) = read_sse(r.send().await.unwrap(), |_| false).await;
    assert_eq!(messages[0].id, Some(5));

    // At or past the end of a task that has ended (an EventSource reconnecting after the task.end,
    // a seq beyond the last): the task.end at once, and the server ends the response.
    let terminal = logged.len() as u64;
    for (last_event_id, query) in [(Some(terminal), ""), (None, "?after_seq=999999"), (Some(999_999), "")] {
        let mut r = api.http.get(format!("{events_url}{query}")).bearer_auth(&api.token);
        if let Some(id) = last_event_id {
            r = r.header("last-event-id", id.to_string());
        }
        let read =
            tokio::time::timeout(Duration::from_secs(30), read_sse(r.send().await.unwrap(), |_| false));
        let (messages, ended) = read.await.unwrap_or_else(|_| panic!("{last_event_id:?} {query}: no end"));
        assert!(ended, "{last_event_id:?} {query}");
        assert_eq!(messages, end.to_vec(), "{last_event_id:?} {query}: the end alone");
    }

    // A bad Last-Event-ID and an unknown task are errors, not streams.
    let r = api.http.get(&events_url).bearer_auth(&api.token).header("last-event-id", "soon");
    let (status, e) = Api::answer(r.send().await.unwrap()).await;
    assert_eq!((status, e["error"]["code"].clone()), (400, json!(-32602)), "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("Last-Event-ID"), "{e}");
    let (status, e) = api.get("/api/v1/tasks/no-such-task/events").await;
    assert_eq!((status, e), (404, socket(&d, "task.subscribe", json!({"task_id": "no-such-task"}))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_is_off_unless_configured_or_asked_for_on_the_command_line() {
    let server = ScriptedServer::start(vec![]).await;
    let mut d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    assert!(socket(&d, "daemon.status", json!({})).get("http").is_none());
    let out = d.cli(&["dashboard"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("[http] listen") && stderr.contains("--http"), "{stderr}");
    assert!(!d.home().join("http.token").exists(), "no token without a server");
    d.stop();

    // `serve --http`: on, with a token made for it; the dashboard's URL logs in.
    d.set_serve_args(&["--http", "127.0.0.1:0"]);
    d.serve();
    let api = Api::of(&d);
    assert!(api.base.starts_with("http://127.0.0.1:"), "{}", api.base);
    let url = String::from_utf8(d.cli(&["dashboard"]).stdout).unwrap().trim().to_string();
    let r = api.http.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 303);
    // The token outlives a restart: a bookmarked login still works.
    d.stop();
    d.serve();
    assert_eq!(Api::of(&d).token, api.token);
    d.stop();

    // A bad address is refused, naming where it came from.
    let out = d.cli(&["serve", "--http", "localhost:http"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--http"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(
        d.home().join("agentd.toml"),
        team_config(&server.base_url(), "gpt-4o", "[http]\nlisten = \"localhost:7878\"\n"),
    )
    .unwrap();
    let out = d.cli(&["serve"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("http.listen") && stderr.contains("agentd.toml"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_and_a_compaction_on_request_over_http_match_the_socket() {
    let quote = "We always use cargo nextest, never cargo test.";
    let server = ScriptedServer::start(vec![
        sse(vec![tool_call("remember", json!({"note": "Use cargo nextest", "quote": quote}))]),
        sse(vec![finish("noted")]),
        sse(vec![finish("hello")]),
    ])
    .await;
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", HTTP));
    let ws = tempfile::tempdir().unwrap();
    let task = d.submit(&format!("Fix it. {quote}"), ws.path());
    d.events_until_end(&task, Duration::from_secs(30));
    let api = Api::of(&d);

    let listed = api.ok("/api/v1/memory").await;
    assert_eq!(listed, socket(&d, "memory.list", json!({})));
    let id = listed[0]["id"].as_str().unwrap().to_string();
    let workspace = std::fs::canonicalize(ws.path()).unwrap().display().to_string();
    let query = format!("/api/v1/memory?workspace={}&deleted=false", workspace.replace('/', "%2F"));
    assert_eq!(api.ok(&query).await, listed, "a workspace's own notes");
    assert_eq!(api.ok("/api/v1/memory?user=true").await, json!([]));
    let (status, bad) = api.get("/api/v1/memory?user=yes").await;
    assert_eq!((status, bad["error"]["code"].as_i64()), (400, Some(-32602)), "{bad}");
    assert!(bad["error"]["message"].as_str().unwrap().contains("user"));

    let (status, edited) =
        api.post(&format!("/api/v1/memory/{id}/edit"), r#"{"text": "Use cargo nextest -q"}"#).await;
    assert_eq!((status, edited["change"]["action"].as_str()), (200, Some("edited")), "{edited}");
    let (status, deleted) = api.post(&format!("/api/v1/memory/{id}/delete"), "").await;
    assert_eq!((status, deleted["note"]["deleted"].as_bool()), (200, Some(true)));
    let (status, again) = api.post(&format!("/api/v1/memory/{id}/delete"), "").await;
    assert_eq!((status, again["error"]["code"].as_i64()), (409, Some(-32003)), "{again}");
    let (status, undone) = api.post("/api/v1/memory/undo", "{}").await;
    assert_eq!((status, undone["change"]["action"].as_str()), (200, Some("restored")));
    let detail = api.ok(&format!("/api/v1/memory/{id}")).await;
    assert_eq!(detail, socket(&d, "memory.get", json!({"id": id})));
    assert_eq!(detail["changes"].as_array().unwrap().len(), 4);
    let (status, missing) = api.get("/api/v1/memory/m999").await;
    assert_eq!((status, missing["error"]["code"].as_i64()), (404, Some(-32005)));

    // Nothing to compact in a one-step task: refused with the socket's code, as a 409.
    let short = d.submit("Say hello", ws.path());
    d.events_until_end(&short, Duration::from_secs(30));
    let (status, refused) = api.post(&format!("/api/v1/tasks/{short}/compact"), r#"{"focus": "x"}"#).await;
    assert_eq!((status, refused["error"]["code"].as_i64()), (409, Some(-32003)), "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("nothing to compact"));
}

/// The daemon's open descriptors, from /proc.
fn descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count()
}

/// Opens an event stream over a bare TCP connection and reads until its first comment arrives (the
/// response is under way), and answers the connection.
async fn open_stream(addr: &str, path: &str, token: &str) -> tokio::net::TcpStream {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains(": agentd follows") {
        let n = tokio::time::timeout(Duration::from_secs(30), stream.read(&mut buf)).await.unwrap().unwrap();
        assert!(n > 0, "the stream ended: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    assert!(String::from_utf8_lossy(&seen).starts_with("HTTP/1.1 200"), "{}", String::from_utf8_lossy(&seen));
    stream
}

/// Drops a connection with a reset (SO_LINGER 0) instead of an orderly close: a client that died.
fn reset(stream: tokio::net::TcpStream) {
    use std::os::fd::AsRawFd;
    let std = stream.into_std().unwrap();
    let linger = libc::linger { l_onoff: 1, l_linger: 0 };
    // SAFETY: setting an option on a socket this function owns, with a correctly sized value.
    let rc = unsafe {
        libc::setsockopt(
            std.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0);
    drop(std);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_event_stream_outlives_its_client_and_keep_alives_flow_while_nothing_happens() {
    // The lead's first request is rate limited for an hour: the task is live, and its stream has
    // nothing to send but keep-alives.
    let server = ScriptedServer::builder().script(vec![rate_limited(Some("3600"))]).start().await;
    let ws = tempfile::tempdir().unwrap();
    let config = format!("{HTTP}keep_alive = \"200ms\"\n");
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", &config));
    let api = Api::of(&d);
    let task = d.submit("Wait", ws.path());
    // Longer than any wait of the retry policy: the task waits it out, live, without running.
    d.wait_for_state(&task, "waiting", Duration::from_secs(30));
    let path = format!("/api/v1/tasks/{task}/events");
    let addr = api.base.trim_start_matches("http://").to_string();
    let pid = d.pid().unwrap();

    // Nothing happens, and the stream says so at the configured interval.
    let live = api.http.get(api.url(&path)).bearer_auth(&api.token).send().await.unwrap();
    let mut bytes = live.bytes_stream();
    let mut text = String::new();
    while text.matches(": keep-alive\n\n").count() < 3 {
        let chunk = tokio::time::timeout(Duration::from_secs(30), bytes.next()).await.unwrap().unwrap();
        text.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
    }
    drop(bytes);

    // Past the last event of a task that is still going: nothing until it ends, then its end.
    let r = api.http.get(api.url(&format!("{path}?after_seq=999999"))).bearer_auth(&api.token);
    let ahead = tokio::spawn(read_sse(r.send().await.unwrap(), |_| false));

    // 50 clients open the stream and go away, half closing their end, half reset: every descriptor
    // the daemon held for them is released.
    let settle = || async {
        // One stream opened and closed first, so what the server allocates once is in the baseline.
        drop(open_stream(&addr, &path, &api.token).await);
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    settle().await;
    let before = descriptors(pid);
    let mut clients = Vec::new();
    for _ in 0..50 {
        clients.push(open_stream(&addr, &path, &api.token).await);
    }
    let open = descriptors(pid);
    assert!(open >= before + 50, "the daemon holds a descriptor per stream: {before} before, {open} open");
    for (i, client) in clients.into_iter().enumerate() {
        if i % 2 == 0 {
            drop(client);
        } else {
            reset(client);
        }
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut now = descriptors(pid);
    while now > before + 2 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        now = descriptors(pid);
    }
    assert!(now <= before + 2, "descriptors: {before} before, {open} with 50 streams, {now} after they left");
    eprintln!("descriptors: {before} before, {open} with 50 streams open, {now} after the clients left");

    let (status, _) = api.post(&format!("/api/v1/tasks/{task}/cancel"), "").await;
    assert_eq!(status, 200);
    let (messages, ended) = tokio::time::timeout(Duration::from_secs(30), ahead).await.unwrap().unwrap();
    assert!(ended);
    let cancelled = d.logged_events(&task).len();
    assert_eq!(messages.len(), 1, "{messages:#?}");
    assert_eq!(messages[0].event, "task.end");
    assert_eq!(messages[0].data, json!({"task_id": task, "seq": cancelled, "kind": "task_cancelled"}));
}

/// Sends raw bytes on a fresh connection and reads the answer until the server closes it.
async fn raw_request(addr: &str, bytes: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut out)).await.unwrap().unwrap();
    String::from_utf8_lossy(&out).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_the_server_cannot_parse_gets_the_apis_json_error_and_logs_no_error() {
    let server = ScriptedServer::start(vec![]).await;
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", HTTP));
    let api = Api::of(&d);
    let addr = api.base.trim_start_matches("http://").to_string();
    let long = format!("GET /api/v1/{} HTTP/1.1\r\nHost: {addr}\r\n\r\n", "a".repeat(70_000));
    let many: String = (0..120).map(|i| format!("X-H{i}: v\r\n")).collect();
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        ("a URI over 64 KiB", long.into_bytes(), 400),
        (
            "NUL in the path",
            format!("GET /api/v1/ta\0sks HTTP/1.1\r\nHost: {addr}\r\n\r\n").into_bytes(),
            400,
        ),
        (
            "a control byte in a header",
            format!("GET /api/v1/tasks HTTP/1.1\r\nHost: {addr}\r\nX-Bad: a\x01b\r\n\r\n").into_bytes(),
            400,
        ),
        ("not HTTP", b"GARBAGE\r\n\r\n".to_vec(), 400),
        (
            "more headers than the server takes",
            format!("GET /api/v1/tasks HTTP/1.1\r\nHost: {addr}\r\n{many}\r\n").into_bytes(),
            431,
        ),
    ];
    for (what, bytes, status) in cases {
        let answer = raw_request(&addr, &bytes).await;
        let (head, body) = answer.split_once("\r\n\r\n").unwrap_or_else(|| panic!("{what}: {answer:?}"));
        assert!(head.starts_with(&format!("HTTP/1.1 {status} ")), "{what}: {head}");
        assert!(head.to_lowercase().contains("content-type: application/json"), "{what}: {head}");
        let e: Value =
            serde_json::from_str(body).unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {body:?}"));
        assert_eq!(e["error"]["code"], -32600, "{what}: {e}");
        assert!(!e["error"]["message"].as_str().unwrap().is_empty(), "{what}: {e}");
    }
    // The server goes on serving well-formed requests.
    let (status, _) = api.get("/api/v1/tasks").await;
    assert_eq!(status, 200);
    let log = d.serve_log();
    assert!(!log.contains("ERROR"), "no error line for a client's malformed request: {log}");
    assert!(log.contains("refused a request the server cannot parse"), "logged at debug: {log}");
}

/// A scrape read back with a parser of the Prometheus text format that is not ours: each sample's
/// value, summed over the samples of `metric` whose labels include `with`.
fn sum(text: &str, metric: &str, with: &[(&str, &str)]) -> f64 {
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == metric && with.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => f64::NAN,
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_prometheus_text_behind_the_token_and_match_the_tasks_status() {
    let server = ScriptedServer::builder()
        .max_model_len(Some(32_768))
        .window(32_768)
        .report_usage(true)
        .script(vec![
            sse(vec![tool_call("read_file", json!({"path": "a.txt"}))]),
            sse(vec![tool_call("read_file", json!({"path": "missing.txt"}))]),
            sse(vec![finish("read it")]),
        ])
        .start()
        .await;
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a.txt"), "hello\n").unwrap();
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", HTTP));
    let api = Api::of(&d);
    let task = d.submit("Read a.txt", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(60));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{}", d.serve_log());

    let refused = api.http.get(api.url("/metrics")).send().await.unwrap();
    assert_eq!(refused.status().as_u16(), 401, "behind the token");
    let scraped = api.http.get(api.url("/metrics")).bearer_auth(&api.token).send().await.unwrap();
    assert_eq!(scraped.status().as_u16(), 200);
    let kind = scraped.headers()["content-type"].to_str().unwrap().to_string();
    assert!(kind.starts_with("application/openmetrics-text"), "{kind}");
    let text = scraped.text().await.unwrap();

    // The counters say what the task's status says.
    let status = d.client().call("task.status", json!({"task_id": task})).unwrap();
    let spent = &status["spent"];
    let prompt = sum(&text, "agentd_tokens_total", &[("kind", "prompt")]);
    assert!(prompt > 0.0, "{text}");
    assert_eq!(prompt, spent["prompt_tokens"].as_f64().unwrap(), "{text}\n{status}");
    assert_eq!(
        sum(&text, "agentd_tokens_total", &[("kind", "completion")]),
        spent["completion_tokens"].as_f64().unwrap()
    );
    assert_eq!(
        sum(&text, "agentd_tokens_total", &[("kind", "cached")]),
        spent["cache_read_tokens"].as_f64().unwrap()
    );
    let answers = spent["requests"].as_f64().unwrap();
    assert_eq!(
        sum(&text, "agentd_responses_total", &[("model", "gpt-4o"), ("role", "lead")]),
        answers,
        "{text}"
    );
    assert_eq!(answers, 3.0);
    assert_eq!(sum(&text, "agentd_requests_total", &[("role", "lead")]), 3.0, "{text}");
    assert_eq!(sum(&text, "agentd_tool_calls_total", &[("tool", "read_file"), ("ok", "true")]), 1.0);
    assert_eq!(sum(&text, "agentd_tool_calls_total", &[("tool", "read_file"), ("ok", "false")]), 1.0);
    assert_eq!(sum(&text, "agentd_tasks", &[("state", "finished")]), 1.0);
    assert_eq!(sum(&text, "agentd_tasks", &[("state", "running")]), 0.0);

    // Public when the config says so.
    let public = format!("{HTTP}metrics_public = true\n");
    let open = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", &public));
    let api = Api::of(&open);
    let answer = api.http.get(api.url("/metrics")).send().await.unwrap();
    assert_eq!(answer.status().as_u16(), 200);
    assert!(answer.text().await.unwrap().contains("agentd_tasks{state=\"finished\"} 0"));
}
