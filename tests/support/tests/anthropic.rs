//! The scripted server's Anthropic endpoints over real TCP with a raw HTTP/1.1 client.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use agentd_test_support::*;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

struct Resp {
    status: u16,
    head: String,
    body: String,
}

impl Resp {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).expect("a JSON body")
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    /// `(event name, data)` of every SSE event.
    fn events(&self) -> Vec<(String, Value)> {
        self.body
            .split("\n\n")
            .filter(|e| !e.trim().is_empty())
            .map(|e| {
                let name = e.lines().find_map(|l| l.strip_prefix("event: ")).unwrap_or("").to_string();
                let data = e.lines().find_map(|l| l.strip_prefix("data: ")).expect("a data line");
                (name, serde_json::from_str(data).unwrap())
            })
            .collect()
    }
}

/// Decodes a chunked body (complete or not).
fn dechunk(mut raw: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = raw.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else { break };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        raw = rest[n..].strip_prefix("\r\n").unwrap_or(&rest[n..]);
    }
    out
}

async fn call(
    server: &ScriptedServer,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> Resp {
    let mut stream = TcpStream::connect(server.addr()).await.unwrap();
    let body = if body.is_null() { String::new() } else { body.to_string() };
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n", body.len());
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(&body);
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    stream.read_to_end(&mut buf).await.unwrap();
    let text = String::from_utf8(buf).unwrap();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let chunked = head.to_ascii_lowercase().contains("transfer-encoding: chunked");
    let body = if chunked { dechunk(rest) } else { rest.to_string() };
    Resp { status, head: head.to_string(), body }
}

const VERSION: (&str, &str) = ("anthropic-version", "2023-06-01");

fn messages_body(stream: bool) -> Value {
    json!({
        "model": "claude-test",
        "max_tokens": 100,
        "system": "be brief",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "stream": stream,
    })
}

#[tokio::test]
async fn stream_events_in_anthropic_shape() {
    let server = ScriptedServer::builder()
        .model("claude-test")
        .script(vec![sse_with_usage(
            vec![
                thinking("hmm", "SIG"),
                text("a"),
                tool_call_with_id("toolu_1", "finish", json!({"summary": "s"})),
            ],
            30,
            5,
        )])
        .start()
        .await;
    let r = call(&server, "POST", "/v1/messages", &[VERSION], &messages_body(true)).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let events = r.events();
    for (name, data) in &events {
        assert_eq!(data["type"].as_str(), Some(name.as_str()), "event name = data type");
    }
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"message_start"));
    assert_eq!(names.last(), Some(&"message_stop"));
    assert!(names.contains(&"ping"));
    let starts: Vec<&str> = events
        .iter()
        .filter(|(n, _)| n == "content_block_start")
        .map(|(_, d)| d["content_block"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(starts, ["thinking", "text", "tool_use"]);
    let (_, delta) = events.iter().find(|(n, _)| n == "message_delta").unwrap();
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");
    assert_eq!(delta["usage"]["output_tokens"], 5);
    assert_eq!(events[0].1["message"]["usage"]["input_tokens"], 30);
    assert_eq!(server.chat_requests().len(), 1, "a /v1/messages request is a chat request");
}

#[tokio::test]
async fn non_stream_message_and_errors() {
    let server = ScriptedServer::builder()
        .model("claude-test")
        .script(vec![sse(vec![reasoning("r"), text("hello")]), rate_limited(Some("3")), overloaded()])
        .start()
        .await;
    let r = call(&server, "POST", "/v1/messages", &[VERSION], &messages_body(false)).await;
    assert_eq!(r.status, 200);
    let body = r.json();
    assert_eq!(body["type"], "message");
    assert_eq!(body["content"][0]["type"], "thinking");
    assert_eq!(body["content"][1], json!({"type": "text", "text": "hello"}));
    assert_eq!(body["stop_reason"], "end_turn");

    let r = call(&server, "POST", "/v1/messages", &[VERSION], &messages_body(true)).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("3"));
    assert_eq!(r.json()["error"]["type"], "rate_limit_error");
    assert_eq!(r.json()["type"], "error");

    let r = call(&server, "POST", "/v1/messages", &[VERSION], &messages_body(true)).await;
    assert_eq!(r.status, 529);
    assert_eq!(
        r.json(),
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    );

    // No version header: refused, and the script is not consumed.
    server.push(vec![sse(vec![text("x")])]);
    let r = call(&server, "POST", "/v1/messages", &[], &messages_body(true)).await;
    assert_eq!(r.status, 400);
    assert!(r.json()["error"]["message"].as_str().unwrap().contains("anthropic-version"));
    assert_eq!(server.remaining(), 1);
    let r = call(&server, "GET", "/v1/messages", &[VERSION], &Value::Null).await;
    assert_eq!(r.status, 405);
    let r =
        call(&server, "POST", "/v1/messages", &[VERSION, ("Content-Type", "application/json")], &json!("["))
            .await;
    assert_eq!(r.status, 400);
}

#[tokio::test]
async fn window_count_tokens_and_model_object() {
    let server = ScriptedServer::builder().model("claude-test").window(20).max_model_len(20).start().await;
    let body = json!({
        "model": "claude-test",
        "system": "be brief",
        "messages": [{"role": "user", "content": "a long question ".repeat(10)}],
    });
    let r = call(&server, "POST", "/v1/messages/count_tokens", &[VERSION], &body).await;
    assert_eq!(r.status, 200);
    let n = r.json()["input_tokens"].as_u64().unwrap();
    assert_eq!(n, count_request(&body));
    assert!(n > 20);

    let mut chat = body.clone();
    chat["max_tokens"] = json!(10);
    chat["stream"] = json!(true);
    let r = call(&server, "POST", "/v1/messages", &[VERSION], &chat).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["error"],
        json!({"type": "invalid_request_error", "message": format!("prompt is too long: {n} tokens > 20 maximum")})
    );
    assert_eq!(server.counted(), vec![n], "count_tokens is not a chat request");

    let r = call(&server, "GET", "/v1/models/claude-test", &[VERSION], &Value::Null).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["id"], "claude-test");
    assert_eq!(r.json()["type"], "model");
    assert_eq!(r.json()["context_window"], 20);
    let r = call(&server, "GET", "/v1/models/other", &[VERSION], &Value::Null).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["type"], "not_found_error");
}

#[tokio::test]
async fn faults_cut_and_empty_streams() {
    let server = ScriptedServer::builder()
        .model("claude-test")
        .script(vec![cut_stream(vec![text("partial")]), empty_stream(), context_length_exceeded(100, 150)])
        .start()
        .await;
    let r = call(&server, "POST", "/v1/messages", &[VERSION], &messages_body(true)).await;
    assert_eq!(r.status, 200);
    let names: Vec<String> = r.events().into_iter().map(|(n, _)| n).collect();
    assert!(!names.iter().any(|n| n == "message_stop" || n == "message_delta"), "{names:?}");
    let r = call(&server, "POST", "/v1/messages", &[VERSION], &messages_body(true)).await;
    let names: Vec<String> = r.events().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["message_start", "message_stop"]);
    let r = call(&server, "POST", "/v1/messages", &[VERSION], &messages_body(true)).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["message"], "prompt is too long: 150 tokens > 100 maximum");
}

#[tokio::test]
async fn reported_usage_splits_cached_and_uncached_input() {
    let server = ScriptedServer::builder()
        .model("claude-test")
        .report_usage(true)
        .responder(|_| sse(vec![text("ok")]))
        .start()
        .await;
    let system: String = (0..300).map(|i| format!("rule {i}: keep every identifier exact\n")).collect();
    let ephemeral = json!({"type": "ephemeral"});
    let tools =
        json!([{"name": "read_file", "input_schema": {"type": "object"}, "cache_control": ephemeral}]);
    let body = |messages: Value, stream: bool| {
        json!({
            "model": "claude-test",
            "max_tokens": 100,
            "stream": stream,
            "tools": tools,
            "system": [{"type": "text", "text": system, "cache_control": ephemeral}],
            "messages": messages,
        })
    };
    // The cache mark moves to the last block, as agentd sends it: marks are not part of the prefix.
    let first = body(
        json!([{"role": "user", "content": [{"type": "text", "text": "go", "cache_control": ephemeral}]}]),
        true,
    );
    let second = body(
        json!([
            {"role": "user", "content": [{"type": "text", "text": "go"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
            {"role": "user", "content": [{"type": "text", "text": "more", "cache_control": ephemeral}]},
        ]),
        false,
    );
    let r = call(&server, "POST", "/v1/messages", &[VERSION], &first).await;
    let start = &r.events()[0].1["message"]["usage"];
    assert_eq!(start["input_tokens"], count_request(&first));
    assert_eq!(start["cache_read_input_tokens"], 0);
    let r = call(&server, "POST", "/v1/messages", &[VERSION], &second).await;
    let usage = &r.json()["usage"];
    let cached = server.cached()[1];
    assert_eq!(cached, count_request(&first) - 3, "tools, system and the first message");
    assert_eq!(usage["cache_read_input_tokens"], cached);
    assert_eq!(usage["input_tokens"], count_request(&second) - cached);
    assert_eq!(usage["output_tokens"], count_text_tokens("ok"));
}
