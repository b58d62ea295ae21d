//! The OpenAI client against the scripted server: real HTTP, real SSE, scripted faults.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use agentd_protocol::{AnomalyKind, ChatRequest, ProviderError};
use agentd_protocol::{Message, Part, Speaker, Tokens, Usage};
use agentd_providers::OpenAiClient;
use agentd_test_support::chat_request as request;
use agentd_test_support::{
    context_length_exceeded, cut_stream, empty_stream, hang, rate_limited, reasoning, server_error, sse,
    sse_with_usage, text, tool_call_with_id, ScriptedServer, Step,
};
use common::cancel_after;
use serde_json::json;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

async fn chat(
    server: &ScriptedServer,
    req: &ChatRequest,
) -> Result<agentd_protocol::ChatResponse, ProviderError> {
    let client = OpenAiClient::new(&server.base_url(), Some("sk-test".into()));
    client.chat(req, &CancellationToken::new()).await
}

#[tokio::test]
async fn text_reply_with_usage_and_the_exact_body_posted() {
    let server = ScriptedServer::start(vec![sse_with_usage(vec![text("hel"), text("lo")], 42, 2)]).await;
    let client = OpenAiClient::new(&server.base_url(), Some("sk-test".into()));
    let req = request(server.model(), vec![Message::user("hi")]);
    let r = client.chat(&req, &CancellationToken::new()).await.unwrap();
    assert_eq!(r.message, Message::assistant_text("hello"));
    assert_eq!(r.finish_reason, "stop");
    assert_eq!(r.usage.and_then(|u| u.counts()), Some(Usage::new(42, 2)));

    let sent = server.chat_requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0],
        serde_json::to_value(client.body(&req)).unwrap(),
        "what was counted is what was sent"
    );
    assert_eq!(sent[0]["stream"], json!(true));
    assert_eq!(sent[0]["stream_options"], json!({"include_usage": true}));
    assert_eq!(sent[0]["messages"][0], json!({"role": "system", "content": "You are terse."}));
    let recorded = server.requests();
    let chat = recorded.iter().find(|r| r.is_chat()).unwrap();
    assert_eq!(chat.header("authorization"), Some("Bearer sk-test"));
}

#[tokio::test]
async fn reasoning_and_parallel_tool_calls_are_reassembled() {
    let server = ScriptedServer::start(vec![sse(vec![
        reasoning("look at both"),
        tool_call_with_id("c1", "read_file", json!({"path": "src/lib.rs"})),
        tool_call_with_id("c2", "read_file", json!({"path": "Cargo.toml"})),
    ])])
    .await;
    let r = chat(&server, &request(server.model(), vec![Message::user("go")])).await.unwrap();
    assert_eq!(r.finish_reason, "tool_calls");
    assert_eq!(
        r.message.parts,
        vec![
            Part::Thinking { text: "look at both".into(), signature: None, redacted: false },
            Part::ToolCall {
                id: "c1".into(),
                name: "read_file".into(),
                arguments: r#"{"path":"src/lib.rs"}"#.into()
            },
            Part::ToolCall {
                id: "c2".into(),
                name: "read_file".into(),
                arguments: r#"{"path":"Cargo.toml"}"#.into()
            },
        ]
    );
}

#[tokio::test]
async fn a_tool_chain_is_sent_back_with_its_reasoning() {
    let server = ScriptedServer::start(vec![sse(vec![text("done")])]).await;
    let assistant = Message::new(
        Speaker::Assistant,
        vec![
            Part::Thinking { text: "need the file".into(), signature: None, redacted: false },
            Part::ToolCall { id: "c1".into(), name: "read_file".into(), arguments: r#"{"path":"a"}"#.into() },
            Part::ToolCall { id: "c2".into(), name: "read_file".into(), arguments: r#"{"path":"b"}"#.into() },
        ],
    );
    let results = Message::new(
        Speaker::Tool,
        vec![
            Part::ToolResult { call_id: "c1".into(), content: "A".into(), is_error: false },
            Part::ToolResult { call_id: "c2".into(), content: "B".into(), is_error: false },
        ],
    );
    let mut req = request(server.model(), vec![Message::user("go"), assistant, results]);
    req.tool_choice_none = true;
    chat(&server, &req).await.unwrap();
    let sent = &server.chat_requests()[0];
    let messages = sent["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 5);
    assert_eq!(messages[2]["reasoning_content"], json!("need the file"));
    assert_eq!(messages[2]["tool_calls"].as_array().unwrap().len(), 2);
    assert_eq!(messages[3], json!({"role": "tool", "tool_call_id": "c1", "content": "A"}));
    assert_eq!(messages[4], json!({"role": "tool", "tool_call_id": "c2", "content": "B"}));
    assert_eq!(sent["tool_choice"], json!("none"));
    assert_eq!(sent["tools"][0]["function"]["name"], json!("read_file"));
}

#[tokio::test]
async fn http_errors_are_classified() {
    let server = ScriptedServer::start(vec![
        rate_limited(Some("2")),
        rate_limited(None),
        server_error(503, "overloaded, try later"),
        server_error(401, "Incorrect API key provided"),
        context_length_exceeded(16384, 20000),
    ])
    .await;
    let req = request(server.model(), vec![Message::user("hi")]);
    match chat(&server, &req).await {
        Err(ProviderError::RateLimited { retry_after, message }) => {
            assert_eq!(
                retry_after.map(|r| (r.delay, r.header)),
                Some((Duration::from_secs(2), "retry-after"))
            );
            assert!(message.contains("Rate limit"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(chat(&server, &req).await, Err(ProviderError::RateLimited { retry_after: None, .. })));
    assert_eq!(
        chat(&server, &req).await.unwrap_err(),
        ProviderError::Server { status: 503, message: "overloaded, try later".into() }
    );
    assert_eq!(
        chat(&server, &req).await.unwrap_err(),
        ProviderError::Rejected { status: 401, message: "Incorrect API key provided".into() }
    );
    match chat(&server, &req).await {
        Err(ProviderError::ContextOverflow { limit, message }) => {
            assert_eq!(limit, Some(Tokens(16384)));
            assert!(message.contains("maximum context length is 16384"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn broken_streams_are_anomalies() {
    let server = ScriptedServer::start(vec![cut_stream(vec![text("partial")]), empty_stream()]).await;
    let req = request(server.model(), vec![Message::user("hi")]);
    match chat(&server, &req).await {
        // The connection closed in the middle of the chunked body.
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
    let server = ScriptedServer::start(vec![hang()]).await;
    let client = OpenAiClient::new(&server.base_url(), None);
    let req = request(server.model(), vec![Message::user("hi")]);
    let cancel = cancel_after(Duration::from_millis(200));
    let start = Instant::now();
    let err = client.chat(&req, &cancel).await.unwrap_err();
    assert!(err.is_cancelled(), "{err:?}");
    assert!(
        matches!(&err, ProviderError::Cancelled { url } if url.ends_with("/chat/completions")),
        "{err:?}"
    );
    assert!(start.elapsed() < Duration::from_secs(5), "{:?}", start.elapsed());
    assert!(server.wait_for_idle(Duration::from_secs(5)).await, "the connection was dropped");
}

#[tokio::test]
async fn probe_reads_max_model_len_or_finds_nothing() {
    let server = ScriptedServer::builder().max_model_len(Some(32768)).start().await;
    let client = OpenAiClient::new(&server.base_url(), None);
    assert_eq!(client.probe_window(server.model()).await.unwrap(), Some(Tokens(32768)));

    // Nothing declared: /models has no length, /props and /api/show are 404.
    let server = ScriptedServer::builder().start().await;
    let client = OpenAiClient::new(&server.base_url(), None);
    assert_eq!(client.probe_window(server.model()).await.unwrap(), None);
}

/// Nothing listens at the port: the connection is refused, an error of its own (never resent).
#[tokio::test]
async fn a_refused_connection_is_its_own_error_naming_the_url() {
    // Bind and drop a listener to get a port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let base = format!("http://127.0.0.1:{port}/v1");
    let client = OpenAiClient::new(&base, None);
    match client.chat(&request("m", vec![Message::user("hi")]), &CancellationToken::new()).await {
        Err(e @ ProviderError::ConnectionRefused { .. }) => {
            let url = format!("{base}/chat/completions");
            assert_eq!(e, ProviderError::ConnectionRefused { url: url.clone() });
            assert!(
                e.to_string().starts_with(&format!("connection refused: is the server at {url} running?")),
                "{e}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(client.probe_window("m").await, Err(ProviderError::ConnectionRefused { .. })));
}

/// An `https://` server is spoken to in TLS, through rustls with ring as its one provider (no
/// provider is installed by hand: rustls takes the only one its features name). A server that
/// answers a ClientHello with plain text is a transport error naming the failure, never a panic.
#[tokio::test]
async fn an_https_server_gets_a_tls_client_hello() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut first = [0u8; 3];
        socket.read_exact(&mut first).await.unwrap();
        let _ = socket.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\nthis is not TLS").await;
        first
    });
    let client = OpenAiClient::new(&format!("https://127.0.0.1:{port}/v1"), Some("sk".into()));
    match client.chat(&request("m", vec![Message::user("hi")]), &CancellationToken::new()).await {
        Err(ProviderError::Transport { message, .. }) => assert!(!message.is_empty()),
        other => panic!("{other:?}"),
    }
    // A TLS handshake record (0x16) of TLS 1.x (0x03 0x01): a ClientHello.
    assert_eq!(server.await.unwrap(), [0x16, 0x03, 0x01]);
}

/// `max_concurrent` bounds the requests in flight: with a bound of 2 and four requests at once
/// against a server that takes 300 ms an answer, the server's own log has them in two waves — never
/// three in flight — and every one is answered (one beyond the bound waits, it never fails). The
/// requests' deadlines start when they are sent: a 500 ms total deadline holds for the last wave,
/// which waited 300 ms for its turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_beyond_max_concurrent_wait_their_turn_and_never_fail() {
    let answer = Duration::from_millis(300);
    let server = agentd_test_support::ScriptedServer::builder()
        .responder(move |_| Step::Delayed(answer, Box::new(sse(vec![text("ok")]))))
        .start()
        .await;
    let deadlines =
        agentd_providers::Deadlines { idle: Duration::from_secs(5), total: Duration::from_millis(500) };
    let client =
        agentd_providers::Client::from(OpenAiClient::new(&server.base_url(), None).with_deadlines(deadlines))
            .with_max_concurrent(2);
    let req = request(server.model(), vec![Message::user("hi")]);
    let cancel = CancellationToken::new();
    let asked = (0..4).map(|_| client.chat(&req, &cancel));
    let answers = futures_util::future::join_all(asked).await;
    assert!(answers.iter().all(Result::is_ok), "{answers:?}");
    let mut received: Vec<Instant> = server
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/chat/completions"))
        .map(|r| r.received)
        .collect();
    received.sort();
    assert_eq!(received.len(), 4);
    // At most two at once: the third came only once one of the first two was answered.
    assert!(received[2].duration_since(received[0]) >= answer - Duration::from_millis(20), "{received:?}");
    assert!(received[1].duration_since(received[0]) < answer, "the first two went together");
}
