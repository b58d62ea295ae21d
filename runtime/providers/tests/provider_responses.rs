//! The Responses API client against the scripted server: real HTTP, real `response.*` SSE, scripted
//! faults; and the optional fields a server may refuse (the chat-completions kind's
//! `prompt_cache_key` too).

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use agentd_protocol::{AnomalyKind, ChatRequest, ChatResponse, ProviderError};
use agentd_protocol::{Message, Part, Speaker};
use agentd_providers::{OpenAiClient, ResponsesClient};
use agentd_test_support::chat_request as request;
use agentd_test_support::{
    cut_stream, empty_stream, rate_limited, reasoning, server_error, sse, text, thinking, tool_call_with_id,
    ScriptedServer,
};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

fn client(server: &ScriptedServer) -> ResponsesClient {
    ResponsesClient::new(&server.base_url(), Some("sk-test".into()))
}

async fn chat(client: &ResponsesClient, req: &ChatRequest) -> Result<ChatResponse, ProviderError> {
    client.chat(req, &CancellationToken::new()).await
}

/// The reasoning items of a recorded body's input.
fn reasoning_items(body: &Value) -> Vec<Value> {
    body["input"].as_array().unwrap().iter().filter(|i| i["type"] == "reasoning").cloned().collect()
}

#[tokio::test]
async fn a_chain_of_tool_calls_sends_each_reasoning_item_back_unchanged() {
    let server = ScriptedServer::start(vec![
        sse(vec![
            thinking("I need the manifest first.", "gAAAA-encrypted-one=="),
            tool_call_with_id("call_1", "read_file", json!({"path": "Cargo.toml"})),
        ]),
        sse(vec![
            thinking("Now the source.", "gAAAA-encrypted-two=="),
            text("Reading it."),
            tool_call_with_id("call_2", "read_file", json!({"path": "src/lib.rs"})),
        ]),
        sse(vec![reasoning("all clear"), text("Both read.")]),
    ])
    .await;
    let client = client(&server);
    let mut req = request(server.model(), vec![Message::user("read both")]);
    req.cache_key = Some("task-1/coder".into());
    let mut asked = Vec::new();
    for step in 0..3 {
        asked.push(req.clone());
        let answer = chat(&client, &req).await.unwrap();
        assert!(matches!(answer.message.parts[0], Part::Thinking { .. }), "{answer:?}");
        if step < 2 {
            assert_eq!(answer.finish_reason, "tool_calls");
        }
        let results: Vec<Part> = answer
            .message
            .tool_calls()
            .map(|(id, _, _)| Part::ToolResult {
                call_id: id.into(),
                content: format!("contents for {id}"),
                is_error: false,
            })
            .collect();
        req.messages.push(answer.message);
        if !results.is_empty() {
            req.messages.push(Message::new(Speaker::Tool, results));
        }
    }
    let sent = server.chat_requests();
    assert_eq!(sent.len(), 3);
    for (body, req) in sent.iter().zip(&asked) {
        assert_eq!(
            body,
            &serde_json::to_value(client.body(req)).unwrap(),
            "what was counted is what was sent"
        );
        assert_eq!(body["store"], json!(false));
        assert_eq!(body["stream"], json!(true));
        assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
        assert_eq!(body["prompt_cache_key"], json!("task-1/coder"));
        assert_eq!(body["instructions"], json!("You are terse."));
        assert_eq!(body["tools"][0]["name"], json!("read_file"));
    }
    // Each request sends back every reasoning item so far, as the server gave it.
    assert_eq!(reasoning_items(&sent[0]), Vec::<Value>::new());
    assert_eq!(
        reasoning_items(&sent[2]),
        vec![
            json!({"type": "reasoning", "summary": [{"type": "summary_text", "text": "I need the manifest first."}], "encrypted_content": "gAAAA-encrypted-one=="}),
            json!({"type": "reasoning", "summary": [{"type": "summary_text", "text": "Now the source."}], "encrypted_content": "gAAAA-encrypted-two=="}),
        ]
    );
    // In the order the model gave them: reasoning, text, call, then the call's output.
    let kinds: Vec<&str> =
        sent[2]["input"].as_array().unwrap().iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "message",
            "reasoning",
            "function_call",
            "function_call_output",
            "reasoning",
            "message",
            "function_call",
            "function_call_output"
        ]
    );
    let input = sent[2]["input"].as_array().unwrap();
    assert_eq!(
        input[2],
        json!({"type": "function_call", "call_id": "call_1", "name": "read_file", "arguments": "{\"path\":\"Cargo.toml\"}"})
    );
    assert_eq!(
        input[3],
        json!({"type": "function_call_output", "call_id": "call_1", "output": "contents for call_1"})
    );
    assert_eq!(
        input[5],
        json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Reading it."}]})
    );
    let auth = server.requests().into_iter().find(|r| r.is_chat()).unwrap();
    assert_eq!(auth.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(auth.path_only(), "/v1/responses");
}

#[tokio::test]
async fn usage_reports_the_cached_part_of_the_input() {
    let server = ScriptedServer::builder()
        .report_usage(true)
        .script(vec![sse(vec![text("one")]), sse(vec![text("two")])])
        .start()
        .await;
    let client = client(&server);
    let long = "A paragraph the cache will keep. ".repeat(300);
    let mut req = request(server.model(), vec![Message::user(long.clone())]);
    let first = chat(&client, &req).await.unwrap().usage.and_then(|u| u.counts()).unwrap();
    assert_eq!(first.cache_read_tokens, 0);
    assert_eq!(first.prompt_tokens, server.counted()[0]);
    req.messages.push(Message::assistant_text("one"));
    req.messages.push(Message::user("and again"));
    let second = chat(&client, &req).await.unwrap().usage.and_then(|u| u.counts()).unwrap();
    assert_eq!(second.cache_read_tokens, server.cached()[1]);
    assert!(second.cache_read_tokens > 1024, "{second:?}");
    assert_eq!(second.prompt_tokens, server.counted()[1]);
}

#[tokio::test]
async fn a_request_over_the_window_is_an_overflow_that_states_no_number() {
    let server = ScriptedServer::builder().window(200).script(vec![]).start().await;
    let req = request(server.model(), vec![Message::user("too long ".repeat(300))]);
    match chat(&client(&server), &req).await {
        Err(ProviderError::ContextOverflow { limit: None, message }) => {
            assert!(message.contains("exceeds the context window"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(server.refused(), 1);
}

#[tokio::test]
async fn refusals_and_broken_streams_are_classified() {
    let server = ScriptedServer::start(vec![
        rate_limited(Some("1")),
        server_error(503, "overloaded"),
        cut_stream(vec![text("partial")]),
        empty_stream(),
    ])
    .await;
    let client = client(&server);
    let req = request(server.model(), vec![Message::user("hi")]);
    assert!(matches!(
        chat(&client, &req).await,
        Err(ProviderError::RateLimited { retry_after: Some(_), .. })
    ));
    assert!(matches!(chat(&client, &req).await, Err(ProviderError::Server { status: 503, .. })));
    assert!(matches!(
        chat(&client, &req).await,
        Err(ProviderError::StreamAnomaly { kind: AnomalyKind::Cut, .. })
    ));
    assert!(matches!(
        chat(&client, &req).await,
        Err(ProviderError::StreamAnomaly { kind: AnomalyKind::Empty, .. })
    ));
}

#[tokio::test]
async fn a_model_that_refuses_encrypted_reasoning_is_asked_again_without_it_once_and_for_all() {
    let server = ScriptedServer::start(vec![
        server_error(400, "Encrypted content is not supported with this model."),
        sse(vec![text("fine")]),
        sse(vec![text("again")]),
    ])
    .await;
    let client = client(&server);
    let req = request(server.model(), vec![Message::user("hi")]);
    assert_eq!(chat(&client, &req).await.unwrap().message, Message::assistant_text("fine"));
    assert_eq!(chat(&client, &req).await.unwrap().message, Message::assistant_text("again"));
    let sent = server.chat_requests();
    assert_eq!(sent.len(), 3);
    assert_eq!(sent[0]["include"], json!(["reasoning.encrypted_content"]));
    assert!(sent[1].get("include").is_none() && sent[2].get("include").is_none());
    // Any other refusal is the caller's, and nothing is asked twice for it.
    let server = ScriptedServer::start(vec![server_error(400, "Invalid value for 'input'.")]).await;
    let refused = chat(&self::client(&server), &req).await;
    assert!(matches!(refused, Err(ProviderError::Rejected { status: 400, .. })), "{refused:?}");
    assert_eq!(server.chat_requests().len(), 1);
}

#[tokio::test]
async fn chat_completions_sends_the_cache_key_until_the_server_refuses_the_field() {
    let server = ScriptedServer::start(vec![
        sse(vec![text("one")]),
        server_error(422, "1 validation error: prompt_cache_key: extra fields not permitted"),
        sse(vec![text("two")]),
        sse(vec![text("three")]),
    ])
    .await;
    let client = OpenAiClient::new(&server.base_url(), None);
    let mut req = request(server.model(), vec![Message::user("hi")]);
    req.cache_key = Some("task-9/lead".into());
    for expected in ["one", "two", "three"] {
        let answer = client.chat(&req, &CancellationToken::new()).await.unwrap();
        assert_eq!(answer.message, Message::assistant_text(expected));
    }
    let keys: Vec<Value> = server.chat_requests().iter().map(|b| b["prompt_cache_key"].clone()).collect();
    assert_eq!(keys, [json!("task-9/lead"), json!("task-9/lead"), Value::Null, Value::Null]);
    req.cache_key = None;
    let body = serde_json::to_value(OpenAiClient::new("http://127.0.0.1:9/v1", None).body(&req)).unwrap();
    assert!(body.get("prompt_cache_key").is_none(), "no key, no field");
}
