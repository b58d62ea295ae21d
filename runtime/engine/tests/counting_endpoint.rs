//! Counting with the provider's own endpoint (vLLM / llama.cpp `POST /tokenize`) for a model tiktoken
//! does not know, against the scripted server over real HTTP.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use agentd_engine::counter::{prepare, TokenCounter, Tokenizer};
use agentd_protocol::CountSource;
use agentd_protocol::{Count, Message};
use agentd_providers::{Client, OpenAiClient};
use agentd_test_support::chat_request as request;
use agentd_test_support::{count_text_tokens, ScriptedServer};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const MODEL: &str = "qwen3-coder";

fn client(base_url: &str) -> Client {
    Client::from(OpenAiClient::new(base_url, None))
}

fn tokenize_bodies(server: &ScriptedServer) -> Vec<Value> {
    server
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path == "/tokenize")
        .map(|r| r.body)
        .collect()
}

#[tokio::test]
async fn the_servers_counts_are_measurements() {
    let server = ScriptedServer::builder().model(MODEL).tokenize_endpoint(true).start().await;
    let client = client(&server.base_url());
    let text = "fn main() { println!(\"hello, world\"); }";
    assert_eq!(client.count_text(MODEL, text).await.unwrap(), Some(count_text_tokens(text)));
    assert_eq!(client.count_text(MODEL, "").await.unwrap(), Some(0), "nothing to ask");
    // One body both vLLM and llama.cpp read, without special tokens.
    assert_eq!(
        tokenize_bodies(&server),
        [json!({
            "model": MODEL,
            "prompt": text,
            "add_special_tokens": false,
            "content": text,
            "add_special": false,
        })]
    );

    let counter = TokenCounter::with_endpoint(MODEL);
    assert_eq!(counter.tokenizer(), Tokenizer::Endpoint);
    let mut req =
        request(MODEL, vec![Message::user(text), Message::assistant_text("Done."), Message::user(text)]);
    let guess = counter.count_request(&req);
    assert!(guess.total.estimated, "before the endpoint has answered, a count is a guess");

    let asked = tokenize_bodies(&server).len();
    assert_eq!(prepare(&counter, &client, MODEL, &req).await, CountSource::Endpoint);
    assert!(counter.missing_texts(&req).is_empty(), "all learned");
    // system, "You are terse.", the tool, user, the text, assistant, "Done." — each asked once.
    assert_eq!(tokenize_bodies(&server).len(), asked + 7);

    let n = counter.count_request(&req);
    assert!(!n.total.estimated && !n.messages.estimated && !n.system.estimated && !n.tools.estimated);
    assert_eq!(counter.count_text(text), Count::measured(count_text_tokens(text)));
    // The server counts with o200k: the same numbers as tiktoken's own counter, framing included.
    assert_eq!(n, TokenCounter::new("gpt-4o").count_request(&req));

    // A re-fit after one new message asks only for its new text.
    req.messages.push(Message::assistant_text("All tests pass."));
    let asked = tokenize_bodies(&server).len();
    assert_eq!(prepare(&counter, &client, MODEL, &req).await, CountSource::Endpoint);
    let bodies = tokenize_bodies(&server);
    assert_eq!(bodies.len(), asked + 1);
    assert_eq!(bodies.last().unwrap()["prompt"], "All tests pass.");
    assert!(!counter.count_request(&req).total.estimated);
    // Nothing new: nothing asked.
    assert_eq!(prepare(&counter, &client, MODEL, &req).await, CountSource::Endpoint);
    assert_eq!(tokenize_bodies(&server).len(), asked + 1);
    assert!(server.chat_requests().is_empty());
}

#[tokio::test]
async fn without_an_endpoint_the_count_is_an_estimate_for_good() {
    let server = ScriptedServer::builder().model(MODEL).start().await;
    let client = client(&server.base_url());
    assert_eq!(client.count_text(MODEL, "hello").await.unwrap(), None);

    let counter = TokenCounter::with_endpoint(MODEL);
    let req = request(MODEL, vec![Message::user("hello world")]);
    assert_eq!(prepare(&counter, &client, MODEL, &req).await, CountSource::Estimate);
    assert_eq!(counter.tokenizer(), Tokenizer::Estimate);
    let n = counter.count_request(&req);
    assert!(n.total.estimated && n.system.estimated && n.tools.estimated && n.messages.estimated);
    assert_eq!(n, TokenCounter::new(MODEL).count_request(&req), "the plain estimate");

    // Given up for good: the next fit does not ask again.
    let asked = tokenize_bodies(&server).len();
    let mut more = req.clone();
    more.messages.push(Message::assistant_text("new text"));
    assert_eq!(prepare(&counter, &client, MODEL, &more).await, CountSource::Estimate);
    assert_eq!(tokenize_bodies(&server).len(), asked);

    // A model tiktoken knows never asks.
    let counter = TokenCounter::with_endpoint("gpt-4o");
    assert_eq!(prepare(&counter, &client, "gpt-4o", &req).await, CountSource::Tiktoken);
    assert_eq!(tokenize_bodies(&server).len(), asked);
}

/// A one-route HTTP server for `/tokenize` answering with `answer(body)`; records the bodies.
async fn tokenize_server(
    answer: impl Fn(&Value) -> (u16, Value) + Send + Sync + 'static,
) -> (String, Arc<Mutex<Vec<Value>>>) {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (answer, record) = (Arc::new(answer), seen.clone());
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let (answer, record) = (answer.clone(), record.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut tmp = [0u8; 4096];
                let body = loop {
                    let n = stream.read(&mut tmp).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&tmp[..n]);
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else { continue };
                    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                    let len = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    if buf.len() >= end + 4 + len {
                        break serde_json::from_slice::<Value>(&buf[end + 4..end + 4 + len])
                            .unwrap_or(Value::Null);
                    }
                };
                record.lock().unwrap().push(body.clone());
                let (status, value) = answer(&body);
                let payload = value.to_string();
                let response = format!(
                    "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{payload}",
                    payload.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    (base_url, seen)
}

#[tokio::test]
async fn a_vllm_that_forbids_extra_fields_gets_its_own_body() {
    // Older vLLM: pydantic `extra = "forbid"` on its request models.
    let (base_url, seen) = tokenize_server(|body| {
        let known = ["model", "prompt", "add_special_tokens"];
        match body.as_object() {
            Some(o) if o.keys().all(|k| known.contains(&k.as_str())) => {
                let n = body["prompt"].as_str().map_or(0, count_text_tokens);
                (200, json!({"count": n, "tokens": vec![7; n as usize], "max_model_len": 4096}))
            }
            _ => (422, json!({"object": "error", "message": "extra fields not permitted", "code": 422})),
        }
    })
    .await;
    let client = client(&base_url);
    assert_eq!(client.count_text(MODEL, "hello world").await.unwrap(), Some(2));
    assert_eq!(client.count_text(MODEL, "hello").await.unwrap(), Some(1));
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3, "the refused body once, then vLLM's own, remembered");
    assert!(seen[0].get("content").is_some());
    assert_eq!(seen[1], json!({"model": MODEL, "prompt": "hello world", "add_special_tokens": false}));
    assert_eq!(seen[2], json!({"model": MODEL, "prompt": "hello", "add_special_tokens": false}));
}

#[tokio::test]
async fn llama_cpp_shapes_and_answers_that_are_not_counts() {
    // llama.cpp reads `content` and answers bare tokens.
    let (base_url, _) = tokenize_server(|body| {
        let n = body["content"].as_str().map_or(0, count_text_tokens);
        (200, json!({"tokens": vec![1; n as usize]}))
    })
    .await;
    assert_eq!(client(&base_url).count_text(MODEL, "hello world").await.unwrap(), Some(2));

    // A server that answers 200 with something that is not a count has no counting endpoint.
    let (base_url, _) = tokenize_server(|_| (200, json!({"tokens": []}))).await;
    assert_eq!(
        client(&base_url).count_text(MODEL, "hello world").await.unwrap(),
        None,
        "zero is not a count"
    );
    let (base_url, _) =
        tokenize_server(|_| (200, json!({"error": "Unexpected endpoint or method. (POST /tokenize)"}))).await;
    assert_eq!(client(&base_url).count_text(MODEL, "hello").await.unwrap(), None);
    for status in [404, 405, 501] {
        let (base_url, _) = tokenize_server(move |_| (status, json!({"detail": "Not Found"}))).await;
        assert_eq!(client(&base_url).count_text(MODEL, "hello").await.unwrap(), None, "{status}");
    }
}

#[tokio::test]
async fn a_failing_endpoint_estimates_then_gives_up_after_three() {
    let (base_url, seen) =
        tokenize_server(|_| (500, json!({"error": {"message": "tokenizer crashed"}}))).await;
    let client = client(&base_url);
    assert!(client.count_text(MODEL, "hello").await.is_err());

    let counter = TokenCounter::with_endpoint(MODEL);
    let req = request(MODEL, vec![Message::user("hello world")]);
    for _ in 0..2 {
        assert_eq!(prepare(&counter, &client, MODEL, &req).await, CountSource::Estimate);
        assert_eq!(counter.tokenizer(), Tokenizer::Endpoint, "an error may pass: still asking");
        assert!(counter.count_request(&req).total.estimated);
    }
    assert_eq!(prepare(&counter, &client, MODEL, &req).await, CountSource::Estimate);
    assert_eq!(counter.tokenizer(), Tokenizer::Estimate, "three in a row: given up");
    let asked = seen.lock().unwrap().len();
    assert_eq!(prepare(&counter, &client, MODEL, &req).await, CountSource::Estimate);
    assert_eq!(seen.lock().unwrap().len(), asked);
}
