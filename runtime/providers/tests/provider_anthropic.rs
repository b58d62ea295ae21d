//! The Anthropic Messages client against the scripted server's /v1/messages: real HTTP, real SSE,
//! Anthropic's faults.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use agentd_protocol::{AnomalyKind, ChatRequest, ChatResponse, ProviderError};
use agentd_protocol::{Message, Part, Speaker, Tokens, Usage};
use agentd_providers::{AnthropicClient, Client};
use agentd_test_support::chat_request as request;
use agentd_test_support::{
    context_length_exceeded, count_request, cut_stream, empty_stream, hang, overloaded, rate_limited,
    reasoning, redacted_thinking, server_error, sse, sse_with_finish, sse_with_usage, text, thinking,
    tool_call_with_id, ScriptedServer,
};
use common::cancel_after;
use serde_json::json;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const MODEL: &str = "claude-test";

async fn start(script: Vec<agentd_test_support::Step>) -> ScriptedServer {
    ScriptedServer::builder().model(MODEL).script(script).start().await
}

fn client(server: &ScriptedServer) -> AnthropicClient {
    AnthropicClient::new(&server.base_url(), Some("sk-ant-test".into()))
}

async fn chat(server: &ScriptedServer, req: &ChatRequest) -> Result<ChatResponse, ProviderError> {
    client(server).chat(req, &CancellationToken::new()).await
}

#[tokio::test]
async fn text_reply_with_usage_headers_and_the_exact_body_posted() {
    let server = start(vec![sse_with_usage(vec![text("hel"), text("lo")], 42, 2)]).await;
    let client = client(&server);
    let req = request(MODEL, vec![Message::user("hi")]);
    let r = client.chat(&req, &CancellationToken::new()).await.unwrap();
    assert_eq!(r.message, Message::assistant_text("hello"));
    assert_eq!(r.finish_reason, "stop");
    let usage = r.usage.as_ref().and_then(|u| u.counts());
    assert_eq!(usage, Some(Usage::new(42, 2)));
    assert_eq!(usage.map(|u| (u.cache_read_tokens, u.cache_write_tokens)), Some((0, 0)));

    let sent = server.chat_requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0],
        serde_json::to_value(client.body(&req)).unwrap(),
        "what was counted is what was sent"
    );
    assert_eq!(sent[0]["stream"], json!(true));
    assert_eq!(sent[0]["max_tokens"], json!(256));
    assert_eq!(
        sent[0]["system"],
        json!([{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}])
    );
    assert_eq!(sent[0]["tools"][0]["input_schema"]["type"], json!("object"));
    assert_eq!(sent[0]["tools"][0]["cache_control"], json!({"type": "ephemeral"}), "the last tool");
    assert!(sent[0].get("thinking").is_none());
    let recorded = server.requests();
    let chat = recorded.iter().find(|r| r.is_chat()).unwrap();
    assert_eq!(chat.path_only(), "/v1/messages");
    assert_eq!(chat.header("x-api-key"), Some("sk-ant-test"));
    assert_eq!(chat.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(chat.header("authorization"), None);
}

#[tokio::test]
async fn thinking_and_signatures_go_back_byte_identical() {
    let signed = "Let me look at \"both\" files…\n  then decide. ✓";
    let signature = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds+/w==";
    let server = start(vec![
        sse(vec![
            thinking(signed, signature),
            redacted_thinking("EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"),
            text("Reading."),
            tool_call_with_id("toolu_1", "read_file", json!({"path": "src/lib.rs"})),
        ]),
        sse(vec![text("done")]),
    ])
    .await;
    let first = chat(&server, &request(MODEL, vec![Message::user("go")])).await.unwrap();
    assert_eq!(first.finish_reason, "tool_calls");
    assert_eq!(
        first.message.parts,
        vec![
            Part::Thinking { text: signed.into(), signature: Some(signature.into()), redacted: false },
            Part::Thinking {
                text: "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP".into(),
                signature: None,
                redacted: true
            },
            Part::Text { text: "Reading.".into() },
            Part::ToolCall {
                id: "toolu_1".into(),
                name: "read_file".into(),
                arguments: r#"{"path":"src/lib.rs"}"#.into()
            },
        ]
    );
    assert_eq!(first.message.text(), "Reading.", "thinking is kept apart from the shown text");

    // Stored as the log stores it, then sent back with the tool's result.
    let stored: Message = serde_json::from_str(&serde_json::to_string(&first.message).unwrap()).unwrap();
    let history = vec![Message::user("go"), stored, Message::tool_result("toolu_1", "pub fn f() {}", false)];
    chat(&server, &request(MODEL, history)).await.unwrap();
    let sent = &server.chat_requests()[1];
    let assistant = &sent["messages"][1];
    assert_eq!(assistant["role"], "assistant");
    let blocks = assistant["content"].as_array().unwrap();
    assert_eq!(blocks[0]["type"], "thinking");
    assert_eq!(blocks[0]["thinking"].as_str().unwrap().as_bytes(), signed.as_bytes());
    assert_eq!(blocks[0]["signature"].as_str().unwrap().as_bytes(), signature.as_bytes());
    assert_eq!(
        blocks[1],
        json!({"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"})
    );
    assert_eq!(blocks[2], json!({"type": "text", "text": "Reading."}));
    assert_eq!(
        blocks[3],
        json!({"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "src/lib.rs"}})
    );
    assert_eq!(
        sent["messages"][2],
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "pub fn f() {}", "is_error": false,
             "cache_control": {"type": "ephemeral"}},
        ]})
    );
}

#[tokio::test]
async fn unsigned_reasoning_is_signed_by_the_server_and_kept() {
    let server = start(vec![sse(vec![reasoning("hmm "), reasoning("ok"), text("4")])]).await;
    let r = chat(&server, &request(MODEL, vec![Message::user("2+2")])).await.unwrap();
    match &r.message.parts[0] {
        Part::Thinking { text, signature: Some(sig), redacted: false } => {
            assert_eq!(text, "hmm ok");
            assert!(!sig.is_empty());
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn parallel_tool_use_is_reassembled_and_a_chain_merges_into_one_user_turn() {
    let server = start(vec![
        sse(vec![
            tool_call_with_id("toolu_a", "read_file", json!({"path": "src/lib.rs"})),
            tool_call_with_id("toolu_b", "read_file", json!({"path": "Cargo.toml"})),
        ]),
        sse_with_finish(vec![text("cut short")], "length"),
    ])
    .await;
    let r = chat(&server, &request(MODEL, vec![Message::user("go")])).await.unwrap();
    assert_eq!(r.finish_reason, "tool_calls");
    let calls: Vec<_> = r.message.tool_calls().collect();
    assert_eq!(
        calls,
        vec![
            ("toolu_a", "read_file", r#"{"path":"src/lib.rs"}"#),
            ("toolu_b", "read_file", r#"{"path":"Cargo.toml"}"#)
        ]
    );
    let results = Message::new(
        Speaker::Tool,
        vec![
            Part::ToolResult { call_id: "toolu_a".into(), content: "A".into(), is_error: false },
            Part::ToolResult { call_id: "toolu_b".into(), content: "no such file".into(), is_error: true },
        ],
    );
    let mut req = request(MODEL, vec![Message::user("go"), r.message, results, Message::user("and hurry")]);
    req.tool_choice_none = true;
    let r = chat(&server, &req).await.unwrap();
    assert_eq!(r.finish_reason, "length");
    let sent = &server.chat_requests()[1];
    let messages = sent["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3, "user, assistant, user: roles alternate");
    assert_eq!(
        messages[2]["content"],
        json!([
            {"type": "tool_result", "tool_use_id": "toolu_a", "content": "A", "is_error": false},
            {"type": "tool_result", "tool_use_id": "toolu_b", "content": "no such file", "is_error": true},
            {"type": "text", "text": "and hurry", "cache_control": {"type": "ephemeral"}},
        ])
    );
    assert_eq!(sent["tool_choice"], json!({"type": "none"}));
}

#[tokio::test]
async fn http_errors_are_classified() {
    let server = start(vec![
        rate_limited(Some("7")),
        overloaded(),
        server_error(500, "Internal server error"),
        server_error(401, "invalid x-api-key"),
        context_length_exceeded(200000, 210034),
    ])
    .await;
    let req = request(MODEL, vec![Message::user("hi")]);
    match chat(&server, &req).await {
        Err(ProviderError::RateLimited { retry_after, message }) => {
            assert_eq!(
                retry_after.map(|r| (r.delay, r.header)),
                Some((Duration::from_secs(7), "retry-after"))
            );
            assert!(message.contains("rate limit"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        chat(&server, &req).await.unwrap_err(),
        ProviderError::Overloaded { retry_after: None, message: "Overloaded".into() }
    );
    assert_eq!(
        chat(&server, &req).await.unwrap_err(),
        ProviderError::Server { status: 500, message: "Internal server error".into() }
    );
    assert_eq!(
        chat(&server, &req).await.unwrap_err(),
        ProviderError::Rejected { status: 401, message: "invalid x-api-key".into() }
    );
    assert_eq!(
        chat(&server, &req).await.unwrap_err(),
        ProviderError::ContextOverflow {
            limit: Some(Tokens(200000)),
            message: "prompt is too long: 210034 tokens > 200000 maximum".into()
        }
    );
}

#[tokio::test]
async fn the_servers_window_refuses_with_the_limit_and_count_tokens_agrees() {
    let server = ScriptedServer::builder().model(MODEL).window(60).start().await;
    let client = client(&server);
    let req = request(MODEL, vec![Message::user("a long question ".repeat(20))]);
    let counted = client.count_tokens(&req).await.unwrap();
    assert_eq!(counted, count_request(&serde_json::to_value(client.count_tokens_body(&req)).unwrap()));
    assert!(counted > 60, "{counted}");
    match client.chat(&req, &CancellationToken::new()).await {
        Err(ProviderError::ContextOverflow { limit, message }) => {
            assert_eq!(limit, Some(Tokens(60)));
            assert!(message.contains(&format!("{counted} tokens > 60 maximum")), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(server.refused(), 1);
    let count_request_seen = server.requests().iter().any(|r| r.path_only() == "/v1/messages/count_tokens");
    assert!(count_request_seen);
}

#[tokio::test]
async fn count_text_removes_the_message_framing() {
    let server = start(vec![]).await;
    let client = Client::from(client(&server));
    let text = "The quick brown fox jumps over the lazy dog.";
    let n = client.count_text(MODEL, text).await.unwrap().unwrap();
    assert_eq!(n, agentd_test_support::count_text_tokens(text));
    assert_eq!(client.count_text(MODEL, "").await.unwrap(), Some(0));
    assert_eq!(client.count_text(MODEL, "  \n").await.unwrap(), Some(3));
}

#[tokio::test]
async fn silent_truncation_shows_in_usage() {
    let server = ScriptedServer::builder()
        .model(MODEL)
        .silent_truncation_at(10)
        .script(vec![sse(vec![text("ok")])])
        .start()
        .await;
    let r = chat(&server, &request(MODEL, vec![Message::user("a long question ".repeat(20))])).await.unwrap();
    assert_eq!(r.usage.and_then(|u| u.counts()).map(|u| u.prompt_tokens), Some(10));
}

#[tokio::test]
async fn broken_streams_are_anomalies() {
    let server = start(vec![cut_stream(vec![thinking("hm", "s"), text("partial")]), empty_stream()]).await;
    let req = request(MODEL, vec![Message::user("hi")]);
    match chat(&server, &req).await {
        Err(ProviderError::StreamAnomaly { kind: AnomalyKind::Cut, message }) => {
            assert!(message.contains("broke off"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    match chat(&server, &req).await {
        Err(ProviderError::StreamAnomaly { kind: AnomalyKind::Empty, .. }) => {}
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn cancelling_aborts_a_hung_stream_promptly() {
    let server = start(vec![hang()]).await;
    let client = client(&server);
    let cancel = cancel_after(Duration::from_millis(200));
    let start = Instant::now();
    let err = client.chat(&request(MODEL, vec![Message::user("hi")]), &cancel).await.unwrap_err();
    assert!(err.is_cancelled(), "{err:?}");
    assert!(matches!(&err, ProviderError::Cancelled { url } if url.ends_with("/messages")), "{err:?}");
    assert!(start.elapsed() < Duration::from_secs(5), "{:?}", start.elapsed());
    assert!(server.wait_for_idle(Duration::from_secs(5)).await, "the connection was dropped");
}

#[tokio::test]
async fn probe_reads_the_model_object() {
    let server = ScriptedServer::builder().model(MODEL).max_model_len(Some(200000)).start().await;
    let client = Client::from(client(&server));
    assert_eq!(client.probe_window(MODEL).await.unwrap(), Some(Tokens(200000)));
    assert_eq!(client.probe_window("claude-other").await.unwrap(), None, "unknown model: 404");
    let probe = server.requests().into_iter().find(|r| r.method == "GET").unwrap();
    assert_eq!(probe.path_only(), "/v1/models/claude-test");
    assert_eq!(probe.header("anthropic-version"), Some("2023-06-01"));

    let plain = start(vec![]).await;
    assert_eq!(AnthropicClient::new(&plain.base_url(), None).probe_window(MODEL).await.unwrap(), None);
}

/// Nothing listens at the port: the connection is refused, an error of its own (never resent).
#[tokio::test]
async fn a_refused_connection_is_its_own_error_naming_the_url() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let base = format!("http://127.0.0.1:{port}/v1");
    let client = AnthropicClient::new(&base, None);
    match client.chat(&request(MODEL, vec![Message::user("hi")]), &CancellationToken::new()).await {
        Err(e @ ProviderError::ConnectionRefused { .. }) => {
            let url = format!("{base}/messages");
            assert_eq!(e, ProviderError::ConnectionRefused { url: url.clone() });
            assert!(
                e.to_string().starts_with(&format!("connection refused: is the server at {url} running?")),
                "{e}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(client.probe_window(MODEL).await, Err(ProviderError::ConnectionRefused { .. })));
}
