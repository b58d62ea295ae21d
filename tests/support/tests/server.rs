//! Exercises the scripted server over real TCP with a raw HTTP/1.1 client.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use agentd_test_support::*;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const T: Duration = Duration::from_secs(5);

#[derive(Debug)]
struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// Whether the body framing (chunked terminator / content-length) was
    /// complete.
    complete: bool,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("JSON body")
    }

    fn text(&self) -> String {
        String::from_utf8(self.body.clone()).unwrap()
    }

    /// The `data:` payloads of an SSE body, in order.
    fn sse_data(&self) -> Vec<String> {
        let text = self.text();
        text.split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                e.strip_prefix("data: ").unwrap_or_else(|| panic!("not an SSE data event: {e:?}")).to_string()
            })
            .collect()
    }

    /// The JSON chunks of an SSE body (everything but `[DONE]`).
    fn sse_chunks(&self) -> Vec<Value> {
        self.sse_data().iter().filter(|d| *d != "[DONE]").map(|d| serde_json::from_str(d).unwrap()).collect()
    }
}

fn parse_response(buf: &[u8]) -> Resp {
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no response head in {:?}", String::from_utf8_lossy(buf)));
    let head = std::str::from_utf8(&buf[..split]).unwrap();
    let rest = &buf[split + 4..];
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap();
    assert!(status_line.starts_with("HTTP/1.1 "), "{status_line}");
    let status: u16 = status_line[9..12].parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .map(|l| {
            let (k, v) = l.split_once(':').unwrap();
            (k.to_ascii_lowercase(), v.trim().to_string())
        })
        .collect();
    let chunked = headers.iter().any(|(k, v)| k == "transfer-encoding" && v == "chunked");
    let (body, complete) = if chunked {
        decode_chunked(rest)
    } else {
        let len: usize = headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .map(|(_, v)| v.parse().unwrap())
            .unwrap_or(rest.len());
        (rest[..len.min(rest.len())].to_vec(), rest.len() == len)
    };
    Resp { status, headers, body, complete }
}

fn decode_chunked(mut rest: &[u8]) -> (Vec<u8>, bool) {
    let mut body = Vec::new();
    loop {
        let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") else {
            return (body, false);
        };
        let size = usize::from_str_radix(std::str::from_utf8(&rest[..eol]).unwrap(), 16).unwrap();
        rest = &rest[eol + 2..];
        if size == 0 {
            return (body, rest.starts_with(b"\r\n"));
        }
        if rest.len() < size + 2 {
            body.extend_from_slice(&rest[..size.min(rest.len())]);
            return (body, false);
        }
        body.extend_from_slice(&rest[..size]);
        assert_eq!(&rest[size..size + 2], b"\r\n");
        rest = &rest[size + 2..];
    }
}

async fn read_all(stream: &mut TcpStream) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    loop {
        match tokio::time::timeout(T, stream.read(&mut tmp)).await {
            Err(_) => panic!("response timed out; got {:?}", String::from_utf8_lossy(&buf)),
            Ok(Ok(0)) | Ok(Err(_)) => return buf,
            Ok(Ok(n)) => buf.extend_from_slice(&tmp[..n]),
        }
    }
}

/// Sends raw bytes on a fresh connection and reads the response to EOF.
async fn raw(addr: SocketAddr, request: &[u8]) -> Resp {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    parse_response(&read_all(&mut stream).await)
}

fn request_bytes(method: &str, path: &str, extra: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n{extra}Content-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

async fn post(addr: SocketAddr, path: &str, body: &Value) -> Resp {
    let body = serde_json::to_vec(body).unwrap();
    raw(
        addr,
        &request_bytes(
            "POST",
            path,
            "Content-Type: application/json\r\nAuthorization: Bearer sk-test\r\n",
            &body,
        ),
    )
    .await
}

async fn get(addr: SocketAddr, path: &str) -> Resp {
    raw(addr, &request_bytes("GET", path, "", b"")).await
}

fn chat_body(stream: bool) -> Value {
    json!({
        "model": "gpt-4o",
        "stream": stream,
        "messages": [{"role": "user", "content": "hi"}],
    })
}

async fn chat(server: &ScriptedServer, stream: bool) -> Resp {
    post(server.addr(), "/v1/chat/completions", &chat_body(stream)).await
}

fn deltas(resp: &Resp) -> Vec<Value> {
    resp.sse_chunks()
        .into_iter()
        .filter(|c| !c["choices"].as_array().unwrap().is_empty())
        .map(|c| c["choices"][0]["delta"].clone())
        .collect()
}

fn finish_reasons(resp: &Resp) -> Vec<Value> {
    resp.sse_chunks()
        .into_iter()
        .filter(|c| !c["choices"].as_array().unwrap().is_empty())
        .map(|c| c["choices"][0]["finish_reason"].clone())
        .filter(|f| !f.is_null())
        .collect()
}

#[tokio::test]
async fn streams_text_deltas() {
    let server = ScriptedServer::start(vec![sse(vec![text("Hel"), text("lo")])]).await;
    let resp = chat(&server, true).await;
    assert_eq!(resp.status, 200);
    assert!(resp.complete);
    assert_eq!(resp.header("content-type"), Some("text/event-stream"));
    assert_eq!(resp.header("connection"), Some("close"));
    assert_eq!(resp.sse_data().last().unwrap(), "[DONE]");

    let chunks = resp.sse_chunks();
    for c in &chunks {
        assert_eq!(c["object"], "chat.completion.chunk");
        assert_eq!(c["model"], "gpt-4o");
        assert_eq!(c["created"], 0);
        assert_eq!(c["id"], chunks[0]["id"]);
        assert_eq!(c["choices"][0]["index"], 0);
    }
    let content: String = deltas(&resp).iter().filter_map(|d| d["content"].as_str()).collect();
    assert_eq!(content, "Hello");
    assert_eq!(deltas(&resp)[0]["role"], "assistant");
    assert_eq!(finish_reasons(&resp), vec![json!("stop")]);
    // The finish chunk is the last JSON chunk and has an empty delta.
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"][0]["delta"], json!({}));
    assert!(last.get("usage").is_none());
    assert_eq!(server.remaining(), 0);
}

#[tokio::test]
async fn streams_reasoning_content() {
    let server = ScriptedServer::start(vec![sse(vec![reasoning("think"), text("answer")])]).await;
    let resp = chat(&server, true).await;
    let d = deltas(&resp);
    assert_eq!(d[1], json!({"reasoning_content": "think"}));
    assert_eq!(d[2], json!({"content": "answer"}));
}

#[tokio::test]
async fn tool_call_arguments_are_split() {
    let args = json!({"path": "src/lib.rs", "max_lines": 200});
    let server = ScriptedServer::start(vec![sse(vec![
        text("let me look"),
        tool_call_with_id("call_a", "read_file", args.clone()),
        tool_call("list_dir", json!({"path": "."})),
    ])])
    .await;
    let resp = chat(&server, true).await;
    assert_eq!(finish_reasons(&resp), vec![json!("tool_calls")]);

    let calls: Vec<Value> = deltas(&resp)
        .into_iter()
        .filter_map(|d| d.get("tool_calls").cloned())
        .map(|tc| {
            let arr = tc.as_array().unwrap();
            assert_eq!(arr.len(), 1);
            arr[0].clone()
        })
        .collect();
    for index in 0..2u64 {
        let mine: Vec<&Value> = calls.iter().filter(|c| c["index"] == index).collect();
        // One header delta plus at least two argument deltas.
        assert!(mine.len() >= 3, "{mine:?}");
        assert_eq!(mine[0]["type"], "function");
        assert_eq!(mine[0]["function"]["arguments"], "");
        assert!(mine[1..].iter().all(|c| c.get("id").is_none()));
        let joined: String = mine[1..].iter().map(|c| c["function"]["arguments"].as_str().unwrap()).collect();
        let parsed: Value = serde_json::from_str(&joined).unwrap();
        if index == 0 {
            assert_eq!(mine[0]["id"], "call_a");
            assert_eq!(mine[0]["function"]["name"], "read_file");
            assert_eq!(parsed, args);
        } else {
            let id = mine[0]["id"].as_str().unwrap();
            assert!(id.starts_with("call_") && id != "call_a", "{id}");
            assert_eq!(mine[0]["function"]["name"], "list_dir");
            assert_eq!(parsed, json!({"path": "."}));
        }
    }
}

#[test]
fn generated_call_ids_are_unique() {
    let ids: std::collections::HashSet<String> = (0..100)
        .map(|_| match finish("done") {
            Chunk::ToolCall { id, name, .. } => {
                assert_eq!(name, "finish");
                id
            }
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(ids.len(), 100);
    match delegate("coder", "fix add") {
        Chunk::ToolCall { name, arguments, .. } => {
            assert_eq!(name, "delegate");
            assert_eq!(
                serde_json::from_str::<Value>(&arguments).unwrap(),
                json!({"to": "coder", "objective": "fix add"})
            );
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn usage_chunk_follows_finish() {
    let server = ScriptedServer::start(vec![sse_with_usage(vec![text("x")], 120, 7)]).await;
    let resp = chat(&server, true).await;
    let chunks = resp.sse_chunks();
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert_eq!(last["usage"], json!({"prompt_tokens": 120, "completion_tokens": 7, "total_tokens": 127}));
    let before = &chunks[chunks.len() - 2];
    assert_eq!(before["choices"][0]["finish_reason"], "stop");
    assert_eq!(resp.sse_data().last().unwrap(), "[DONE]");
}

#[tokio::test]
async fn explicit_finish_reason_wins() {
    let server =
        ScriptedServer::start(vec![sse_with_finish(vec![tool_call("x", json!({}))], "length")]).await;
    let resp = chat(&server, true).await;
    assert_eq!(finish_reasons(&resp), vec![json!("length")]);
}

#[tokio::test]
async fn non_stream_completion() {
    let server = ScriptedServer::start(vec![sse_with_usage(
        vec![
            reasoning("hmm"),
            text("a"),
            text("b"),
            tool_call_with_id("call_z", "read_file", json!({"path": "x"})),
        ],
        10,
        5,
    )])
    .await;
    let resp = chat(&server, false).await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("content-type"), Some("application/json"));
    let body = resp.json();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["model"], "gpt-4o");
    let choice = &body["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["role"], "assistant");
    assert_eq!(choice["message"]["content"], "ab");
    assert_eq!(choice["message"]["reasoning_content"], "hmm");
    assert_eq!(
        choice["message"]["tool_calls"],
        json!([{"id": "call_z", "type": "function",
                "function": {"name": "read_file", "arguments": "{\"path\":\"x\"}"}}])
    );
    assert_eq!(body["usage"], json!({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}));
}

#[tokio::test]
async fn rate_limited_fault() {
    let server = ScriptedServer::start(vec![rate_limited(Some("2")), rate_limited(None)]).await;
    let resp = chat(&server, true).await;
    assert_eq!(resp.status, 429);
    assert_eq!(resp.header("retry-after"), Some("2"));
    let err = &resp.json()["error"];
    assert!(err["message"].as_str().unwrap().starts_with("Rate limit reached"));
    assert_eq!(err["type"], "rate_limit_error");
    assert_eq!(err["code"], "rate_limit_exceeded");

    let resp = chat(&server, true).await;
    assert_eq!(resp.status, 429);
    assert_eq!(resp.header("retry-after"), None);
}

#[tokio::test]
async fn server_error_fault() {
    let server =
        ScriptedServer::start(vec![server_error(503, "overloaded"), server_error(502, "bad gateway")]).await;
    let resp = chat(&server, true).await;
    assert_eq!(resp.status, 503);
    assert_eq!(resp.json()["error"]["message"], "overloaded");
    assert_eq!(resp.json()["error"]["type"], "server_error");
    assert_eq!(chat(&server, false).await.status, 502);
}

#[tokio::test]
async fn cut_stream_fault() {
    let server = ScriptedServer::start(vec![
        cut_stream(vec![text("partial"), tool_call("read_file", json!({"path": "a"}))]),
        cut_stream(vec![text("partial")]),
    ])
    .await;
    let resp = chat(&server, true).await;
    assert_eq!(resp.status, 200);
    assert!(!resp.complete, "cut stream must not end the chunked body");
    assert!(!resp.sse_data().iter().any(|d| d == "[DONE]"));
    assert!(finish_reasons(&resp).is_empty());
    assert!(deltas(&resp).iter().any(|d| d["content"] == "partial"));
    assert!(deltas(&resp).iter().any(|d| d.get("tool_calls").is_some()));

    // Non-stream: truncated JSON body.
    let resp = chat(&server, false).await;
    assert_eq!(resp.status, 200);
    assert!(!resp.complete);
    assert!(serde_json::from_slice::<Value>(&resp.body).is_err());
}

#[tokio::test]
async fn empty_stream_fault() {
    let server = ScriptedServer::start(vec![empty_stream()]).await;
    let resp = chat(&server, true).await;
    assert_eq!(resp.status, 200);
    assert!(resp.complete);
    assert_eq!(resp.sse_data(), vec!["[DONE]".to_string()]);
}

#[tokio::test]
async fn context_length_fault() {
    let server = ScriptedServer::start(vec![context_length_exceeded(16384, 20000)]).await;
    let mut body = chat_body(true);
    body["max_tokens"] = json!(1000);
    let resp = post(server.addr(), "/v1/chat/completions", &body).await;
    assert_eq!(resp.status, 400);
    let err = &resp.json()["error"];
    assert_eq!(
        err["message"],
        "This model's maximum context length is 16384 tokens. However, you requested 20000 \
         tokens (19000 in the messages, 1000 in the completion). Please reduce the length of \
         the messages."
    );
    assert_eq!(err["type"], "invalid_request_error");
    assert_eq!(err["param"], "messages");
    assert_eq!(err["code"], "context_length_exceeded");
}

#[tokio::test]
async fn hang_fault_until_client_disconnects() {
    let server = ScriptedServer::start(vec![hang()]).await;
    let mut stream = TcpStream::connect(server.addr()).await.unwrap();
    let body = serde_json::to_vec(&chat_body(true)).unwrap();
    stream.write_all(&request_bytes("POST", "/v1/chat/completions", "", &body)).await.unwrap();
    // The head arrives...
    let mut got = Vec::new();
    let mut tmp = [0u8; 1024];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(T, stream.read(&mut tmp)).await.unwrap().unwrap();
        assert!(n > 0);
        got.extend_from_slice(&tmp[..n]);
    }
    let head = String::from_utf8_lossy(&got).to_string();
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(head.contains("text/event-stream"));
    assert!(got.ends_with(b"\r\n\r\n"), "nothing after the head");
    // ...then nothing.
    let more = tokio::time::timeout(Duration::from_millis(150), stream.read(&mut tmp)).await;
    assert!(more.is_err(), "server sent data during a hang: {more:?}");
    assert_eq!(server.active_connections(), 1);
    drop(stream);
    assert!(server.wait_for_idle(T).await, "server noticed the hang-up");
}

#[tokio::test]
async fn delayed_step() {
    let server =
        ScriptedServer::start(vec![delayed(Duration::from_millis(150), sse(vec![text("late")]))]).await;
    let start = Instant::now();
    let resp = chat(&server, true).await;
    assert!(start.elapsed() >= Duration::from_millis(150));
    assert!(deltas(&resp).iter().any(|d| d["content"] == "late"));
}

#[tokio::test]
async fn delayed_step_abandoned_by_client() {
    let server = ScriptedServer::start(vec![delayed(Duration::from_secs(60), sse(vec![]))]).await;
    let mut stream = TcpStream::connect(server.addr()).await.unwrap();
    let body = serde_json::to_vec(&chat_body(true)).unwrap();
    stream.write_all(&request_bytes("POST", "/v1/chat/completions", "", &body)).await.unwrap();
    assert!(server.wait_for_requests(1, T).await);
    drop(stream);
    assert!(server.wait_for_idle(T).await);
}

#[tokio::test]
async fn models_endpoint() {
    let server = ScriptedServer::start(vec![]).await;
    let resp = get(server.addr(), "/v1/models").await;
    assert_eq!(resp.status, 200);
    let body = resp.json();
    assert_eq!(body["object"], "list");
    assert_eq!(body["data"][0]["id"], "gpt-4o");
    assert_eq!(body["data"][0]["object"], "model");
    assert_eq!(body["data"][0]["owned_by"], "scripted");
    assert!(body["data"][0].get("max_model_len").is_none());

    let server = ScriptedServer::builder().model("qwen3-coder").max_model_len(Some(16384)).start().await;
    let body = get(server.addr(), "/v1/models").await.json();
    assert_eq!(body["data"][0]["id"], "qwen3-coder");
    assert_eq!(body["data"][0]["max_model_len"], 16384);
    assert!(server.base_url().starts_with("http://127.0.0.1:"));
    assert!(server.base_url().ends_with("/v1"));
    assert_eq!(server.model(), "qwen3-coder");
    // Chunks echo the configured model.
    server.push([sse(vec![text("x")])]);
    let resp = chat(&server, true).await;
    assert_eq!(resp.sse_chunks()[0]["model"], "qwen3-coder");
}

#[tokio::test]
async fn records_requests() {
    let server = ScriptedServer::start(vec![sse(vec![text("a")])]).await;
    get(server.addr(), "/v1/models").await;
    chat(&server, true).await;
    raw(server.addr(), &request_bytes("POST", "/v1/chat/completions", "", b"not json")).await;

    let reqs = server.requests();
    assert_eq!(reqs.len(), 3);
    assert_eq!(reqs[0].method, "GET");
    assert_eq!(reqs[0].path, "/v1/models");
    assert_eq!(reqs[0].body, Value::Null);
    assert_eq!(reqs[1].method, "POST");
    assert_eq!(reqs[1].path, "/v1/chat/completions");
    assert_eq!(reqs[1].header("Authorization"), Some("Bearer sk-test"));
    assert!(reqs[1].headers.iter().any(|(k, v)| k == "content-type" && v == "application/json"));
    assert!(reqs[1].headers.iter().all(|(k, _)| *k == k.to_ascii_lowercase()));
    assert_eq!(reqs[1].body, chat_body(true));
    assert_eq!(reqs[2].body, Value::Null);

    assert_eq!(server.chat_requests(), vec![chat_body(true), Value::Null]);
    assert!(server.wait_for_requests(2, Duration::from_millis(10)).await);
    assert!(!server.wait_for_requests(3, Duration::from_millis(30)).await);
}

#[tokio::test]
async fn invalid_json_chat_is_400_and_keeps_the_step() {
    let server = ScriptedServer::start(vec![sse(vec![text("a")])]).await;
    let resp = raw(server.addr(), &request_bytes("POST", "/v1/chat/completions", "", b"{oops")).await;
    assert_eq!(resp.status, 400);
    assert_eq!(resp.json()["error"]["type"], "invalid_request_error");
    assert_eq!(server.remaining(), 1);
}

#[tokio::test]
async fn script_exhausted_is_500() {
    let server = ScriptedServer::start(vec![sse(vec![text("only")])]).await;
    assert_eq!(chat(&server, true).await.status, 200);
    let resp = chat(&server, true).await;
    assert_eq!(resp.status, 500);
    assert_eq!(resp.json()["error"]["message"], "scripted server: script exhausted");
    assert_eq!(resp.json()["error"]["type"], "server_error");
    // Both requests were recorded.
    assert_eq!(server.chat_requests().len(), 2);
}

#[tokio::test]
async fn push_and_remaining() {
    let server = ScriptedServer::start(vec![]).await;
    assert_eq!(server.remaining(), 0);
    server.push([sse(vec![text("1")]), sse(vec![text("2")])]);
    assert_eq!(server.remaining(), 2);
    let resp = chat(&server, false).await;
    assert_eq!(resp.json()["choices"][0]["message"]["content"], "1");
    assert_eq!(server.remaining(), 1);
}

#[tokio::test]
async fn responder_answers_when_script_is_empty() {
    let server = ScriptedServer::builder()
        .script([sse(vec![text("scripted")])])
        .responder(|body| {
            let n = body["messages"].as_array().map_or(0, Vec::len);
            sse(vec![text(&format!("saw {n} messages"))])
        })
        .start()
        .await;
    let first = chat(&server, false).await.json();
    assert_eq!(first["choices"][0]["message"]["content"], "scripted");
    let second = chat(&server, false).await.json();
    assert_eq!(second["choices"][0]["message"]["content"], "saw 1 messages");
    assert_ne!(first["id"], second["id"]);
}

#[tokio::test]
async fn unknown_path_is_404() {
    let server = ScriptedServer::start(vec![sse(vec![])]).await;
    let resp = post(server.addr(), "/v1/completions", &json!({})).await;
    assert_eq!(resp.status, 404);
    assert!(resp.json()["error"]["message"].is_string());
    assert_eq!(get(server.addr(), "/v1/chat/completions").await.status, 405);
    assert_eq!(server.remaining(), 1);
}

#[tokio::test]
async fn malformed_requests_get_400() {
    let server = ScriptedServer::start(vec![]).await;
    let cases: Vec<Vec<u8>> = vec![
        b"GARBAGE\r\n\r\n".to_vec(),
        b"GET /v1/models HTTP/9.9\r\n\r\n".to_vec(),
        b"GET /v1/models HTTP/1.1\r\nno-colon-here\r\n\r\n".to_vec(),
        b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: abc\r\n\r\n".to_vec(),
        b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd".to_vec(),
        b"POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n".to_vec(),
        b"POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n".to_vec(),
        b"\xff\xfe\x00 / HTTP/1.1\r\n\r\n".to_vec(),
    ];
    for case in cases {
        let resp = raw(server.addr(), &case).await;
        assert_eq!(resp.status, 400, "{:?} -> {}", String::from_utf8_lossy(&case), resp.text());
        assert!(resp.json()["error"]["message"].is_string());
    }
    // Oversized head.
    let mut huge = b"GET /v1/models HTTP/1.1\r\nX-Big: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 70 * 1024));
    huge.extend_from_slice(b"\r\n\r\n");
    assert_eq!(raw(server.addr(), &huge).await.status, 431);
    // A client that connects and leaves gets nothing and breaks nothing.
    drop(TcpStream::connect(server.addr()).await.unwrap());
    // Still serving.
    assert_eq!(get(server.addr(), "/v1/models").await.status, 200);
    assert!(server.wait_for_idle(T).await);
}

#[tokio::test]
async fn chunked_request_body() {
    let server = ScriptedServer::start(vec![sse(vec![text("ok")])]).await;
    let body = serde_json::to_vec(&chat_body(true)).unwrap();
    let (a, b) = body.split_at(10);
    let mut req =
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    req.extend_from_slice(format!("{:x};ext=1\r\n", a.len()).as_bytes());
    req.extend_from_slice(a);
    req.extend_from_slice(format!("\r\n{:X}\r\n", b.len()).as_bytes());
    req.extend_from_slice(b);
    req.extend_from_slice(b"\r\n0\r\nX-Trailer: t\r\n\r\n");
    let resp = raw(server.addr(), &req).await;
    assert_eq!(resp.status, 200);
    assert_eq!(server.chat_requests(), vec![chat_body(true)]);
}

#[tokio::test]
async fn request_sent_in_pieces_and_expect_continue() {
    let server = ScriptedServer::start(vec![sse(vec![text("ok")])]).await;
    let body = serde_json::to_vec(&chat_body(false)).unwrap();
    let mut stream = TcpStream::connect(server.addr()).await.unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let (h1, h2) = head.as_bytes().split_at(7);
    stream.write_all(h1).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    stream.write_all(h2).await.unwrap();
    let mut tmp = [0u8; 64];
    let n = tokio::time::timeout(T, stream.read(&mut tmp)).await.unwrap().unwrap();
    assert!(tmp[..n].starts_with(b"HTTP/1.1 100 Continue\r\n\r\n"));
    stream.write_all(&body).await.unwrap();
    let rest = read_all(&mut stream).await;
    let resp = parse_response(&rest);
    assert_eq!(resp.status, 200);
    assert_eq!(resp.json()["choices"][0]["message"]["content"], "ok");
}

#[tokio::test]
async fn concurrent_requests() {
    let server = ScriptedServer::builder().responder(|_| sse(vec![text("r")])).start().await;
    let addr = server.addr();
    let tasks: Vec<_> = (0..16)
        .map(|_| tokio::spawn(async move { post(addr, "/v1/chat/completions", &chat_body(true)).await }))
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap().status, 200);
    }
    assert_eq!(server.chat_requests().len(), 16);
}

#[tokio::test]
async fn drop_stops_the_server() {
    let server = ScriptedServer::start(vec![hang()]).await;
    let addr = server.addr();
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let body = serde_json::to_vec(&chat_body(true)).unwrap();
    stream.write_all(&request_bytes("POST", "/v1/chat/completions", "", &body)).await.unwrap();
    assert!(server.wait_for_requests(1, T).await);
    drop(server);
    // The hanging connection is closed by the server going away.
    let _ = read_all(&mut stream).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn tokenize_endpoint_only_when_asked_for() {
    let server = ScriptedServer::builder()
        .model("qwen3-coder")
        .max_model_len(32768)
        .tokenize_endpoint(true)
        .start()
        .await;
    let resp =
        post(server.addr(), "/tokenize", &json!({"model": "qwen3-coder", "prompt": "hello world"})).await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.json(), json!({"count": 2, "tokens": [0, 1], "max_model_len": 32768}));
    assert_eq!(count_text_tokens("hello world"), 2);
    // llama.cpp's field works too; neither is an error.
    let resp = post(server.addr(), "/tokenize", &json!({"content": "hello", "add_special": false})).await;
    assert_eq!(resp.json()["count"], 1);
    assert_eq!(post(server.addr(), "/tokenize", &json!({"model": "x"})).await.status, 400);
    assert_eq!(server.requests().iter().filter(|r| r.path == "/tokenize").count(), 3);
    assert!(server.chat_requests().is_empty());

    let off = ScriptedServer::builder().model("qwen3-coder").start().await;
    let resp = post(off.addr(), "/tokenize", &json!({"prompt": "hello world"})).await;
    assert_eq!(resp.status, 404);
}

#[tokio::test]
async fn window_probes_of_ollama_and_llama_cpp_only_when_asked_for() {
    let server =
        ScriptedServer::builder().model("qwen3-coder").ollama_num_ctx(8192).props_n_ctx(4096).start().await;
    let resp =
        post(server.addr(), "/api/show", &json!({"model": "qwen3-coder", "name": "qwen3-coder"})).await;
    assert_eq!(resp.status, 200);
    assert_eq!(
        resp.json(),
        json!({"parameters": "num_ctx 8192", "model_info": {"llama.context_length": 131072}})
    );
    let resp = get(server.addr(), "/props").await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.json(), json!({"default_generation_settings": {"n_ctx": 4096}}));
    // The model list still declares nothing.
    let models = get(server.addr(), "/v1/models").await.json();
    assert!(models["data"][0].get("max_model_len").is_none(), "{models}");
    assert_eq!(server.requests().iter().filter(|r| r.path == "/api/show" || r.path == "/props").count(), 2);

    let off = ScriptedServer::builder().model("qwen3-coder").start().await;
    assert_eq!(post(off.addr(), "/api/show", &json!({"model": "qwen3-coder"})).await.status, 404);
    assert_eq!(get(off.addr(), "/props").await.status, 404);
}

/// A user message of well over 1,024 tokens.
fn long_text(tag: &str) -> String {
    (0..300).map(|i| format!("{tag}: line {i} of a long tool result, value {}\n", i * 7)).collect()
}

fn chat_of(messages: Value, stream: bool) -> Value {
    json!({"model": "gpt-4o", "stream": stream, "messages": messages})
}

/// The usage object of a reply, streamed or not.
fn usage_of(resp: &Resp, stream: bool) -> Value {
    if stream {
        resp.sse_chunks().last().unwrap()["usage"].clone()
    } else {
        resp.json()["usage"].clone()
    }
}

#[tokio::test]
async fn reported_usage_is_the_servers_own_count() {
    let server = ScriptedServer::builder()
        .report_usage(true)
        .script(vec![
            sse_with_usage(vec![text("x")], 999_999, 7),
            sse(vec![text("hello there"), tool_call("finish", json!({"summary": "s"}))]),
            sse(vec![text("hi")]),
        ])
        .start()
        .await;
    let bodies = [
        chat_of(json!([{"role": "user", "content": "hi"}]), true),
        chat_of(json!([{"role": "user", "content": "a longer question than that"}]), false),
        chat_of(json!([{"role": "user", "content": "once more"}]), true),
    ];
    let mut usages = Vec::new();
    for body in &bodies {
        let stream = body["stream"] == true;
        let resp = post(server.addr(), "/v1/chat/completions", body).await;
        assert_eq!(resp.status, 200);
        usages.push(usage_of(&resp, stream));
    }
    let counted = server.counted();
    assert_eq!(counted, bodies.iter().map(count_request).collect::<Vec<_>>());
    assert_eq!(server.cached(), vec![0, 0, 0], "nothing long enough to cache");
    for (usage, n) in usages.iter().zip(&counted) {
        assert_eq!(usage["prompt_tokens"], *n, "{usage}");
        assert_eq!(usage["prompt_tokens_details"], json!({"cached_tokens": 0}));
        assert_eq!(
            usage["total_tokens"],
            usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap()
        );
    }
    // The scripted completion figure is kept; else the reply's own tokens.
    assert_eq!(usages[0]["completion_tokens"], 7);
    let call = 3 + count_text_tokens("finish") + count_text_tokens(r#"{"summary":"s"}"#);
    assert_eq!(usages[1]["completion_tokens"], count_text_tokens("hello there") + call);
    assert_eq!(usages[2]["completion_tokens"], count_text_tokens("hi"));
}

#[tokio::test]
async fn a_shared_prefix_is_reported_as_cached() {
    let server =
        ScriptedServer::builder().report_usage(true).responder(|_| sse(vec![text("ok")])).start().await;
    let system = json!({"role": "system", "content": "You are a careful agent."});
    let first = json!([system, {"role": "user", "content": long_text("a")}]);
    let second =
        json!([system, {"role": "user", "content": long_text("a")}, {"role": "user", "content": "next"}]);
    // Shares only the short system prompt with both: under 1,024 tokens, so nothing is cached.
    let third = json!([system, {"role": "user", "content": long_text("b")}]);
    // Shares the long prefix with the first two, not with the third.
    let fourth =
        json!([system, {"role": "user", "content": long_text("a")}, {"role": "user", "content": "other"}]);
    let mut usages = Vec::new();
    for (i, messages) in [&first, &second, &third, &fourth].into_iter().enumerate() {
        let stream = i % 2 == 0;
        let resp = post(server.addr(), "/v1/chat/completions", &chat_of(messages.clone(), stream)).await;
        usages.push(usage_of(&resp, stream));
    }
    // The first request's prompt without the reply priming is the shared prefix.
    let prefix = count_request(&chat_of(first.clone(), true)) - 3;
    assert!(prefix >= MIN_CACHED_PREFIX, "{prefix}");
    assert_eq!(server.cached(), vec![0, prefix, 0, prefix]);
    for (usage, cached) in usages.iter().zip(server.cached()) {
        assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], cached, "{usage}");
    }
    assert_eq!(
        usages.iter().map(|u| u["prompt_tokens"].as_u64().unwrap()).collect::<Vec<_>>(),
        server.counted()
    );
}

#[tokio::test]
async fn a_changed_tool_list_or_a_refused_request_caches_nothing() {
    let short = count_request(&chat_of(json!([{"role": "user", "content": long_text("a")}]), false));
    let server = ScriptedServer::builder()
        .report_usage(true)
        .window(short + 200)
        .responder(|_| sse(vec![text("ok")]))
        .start()
        .await;
    let messages = json!([{"role": "user", "content": long_text("a")}]);
    let tools =
        json!([{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]);
    let more_tools = json!([tools[0], {"type": "function", "function": {"name": "finish"}}]);
    let with = |tools: &Value, messages: &Value| json!({"model": "gpt-4o", "stream": false, "tools": tools, "messages": messages});
    for body in [with(&tools, &messages), with(&more_tools, &messages), with(&tools, &messages)] {
        assert_eq!(post(server.addr(), "/v1/chat/completions", &body).await.status, 200);
    }
    let parts_of_first = count_request(&with(&tools, &messages)) - 3;
    // Tools come first in the prompt: another tool list shares nothing; the same one shares it all.
    assert_eq!(server.cached(), vec![0, 0, parts_of_first]);

    // Over the window: refused, nothing cached, nothing left in the cache for the next one.
    let long =
        json!([{"role": "user", "content": long_text("b")}, {"role": "user", "content": long_text("c")}]);
    let resp = post(server.addr(), "/v1/chat/completions", &chat_of(long.clone(), false)).await;
    assert_eq!(resp.status, 400);
    let prefix_of_refused = json!([long[0]]);
    let resp = post(server.addr(), "/v1/chat/completions", &chat_of(prefix_of_refused, false)).await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.json()["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    assert_eq!(server.refused(), 1);
    assert_eq!(server.cached()[3..], [0, 0]);
    assert_eq!(server.counted().len(), server.cached().len());
}

#[tokio::test]
async fn usage_reports_are_off_by_default() {
    let server = ScriptedServer::start(vec![
        sse(vec![text("x")]),
        sse_with_usage(vec![text("x")], 120, 7),
        sse(vec![text("x")]),
    ])
    .await;
    let first = json!([{"role": "user", "content": long_text("a")}]);
    let second = json!([first[0], {"role": "user", "content": "more"}]);
    let resp = post(server.addr(), "/v1/chat/completions", &chat_of(first.clone(), true)).await;
    assert!(resp.sse_chunks().iter().all(|c| c.get("usage").is_none()), "no usage unless scripted");
    let resp = post(server.addr(), "/v1/chat/completions", &chat_of(second, true)).await;
    assert_eq!(
        resp.sse_chunks().last().unwrap()["usage"],
        json!({"prompt_tokens": 120, "completion_tokens": 7, "total_tokens": 127}),
        "the scripted figures, as they were"
    );
    let resp = post(server.addr(), "/v1/chat/completions", &chat_of(first.clone(), false)).await;
    assert!(resp.json().get("usage").is_none());
    // The cache is still recorded, for the test to read.
    let prefix = count_request(&chat_of(first, true)) - 3;
    assert_eq!(server.cached(), vec![0, prefix, prefix]);
}

#[tokio::test]
async fn reported_usage_under_silent_truncation_tells_the_cut() {
    let server = ScriptedServer::builder()
        .report_usage(true)
        .silent_truncation_at(50)
        .script(vec![sse(vec![text("ok")])])
        .start()
        .await;
    let resp = post(
        server.addr(),
        "/v1/chat/completions",
        &chat_of(json!([{"role": "user", "content": long_text("a")}]), false),
    )
    .await;
    assert_eq!(resp.json()["usage"]["prompt_tokens"], 50);
    assert!(server.counted()[0] > 50);
}
