//! The counter's tests: tokenizer choice, framing, the per-message cache, endpoint learning and
//! fall-back, fingerprints, and the speed of hashing a large history.

use super::hash::message_key;
use super::measure::Entry;
use super::token_counter::CACHE_LIMIT;
use super::*;
use agentd_protocol::Tokens;
use agentd_protocol::{ChatRequest, ToolSchema};
use agentd_protocol::{Count, CountSource, Message, Part, Speaker};
use serde_json::json;

fn request(messages: Vec<Message>) -> ChatRequest {
    ChatRequest {
        model: "gpt-4o".into(),
        system: "You are terse.".into(),
        messages,
        tools: vec![ToolSchema {
            name: "read_file".into(),
            description: "Read a file".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        }],
        tool_choice_none: false,
        max_tokens: None,
        thinking_budget: None,
        cache_key: None,
    }
}

#[test]
fn tokenizer_by_model_name() {
    for m in [
        "gpt-4o",
        "gpt-4o-mini",
        "gpt-4.1-nano",
        "gpt-5",
        "gpt-5.1-codex",
        "o1",
        "o3-mini",
        "o4-mini",
        "chatgpt-4o-latest",
        "openai/GPT-4o",
    ] {
        assert_eq!(tokenizer_for(m), Tokenizer::O200k, "{m}");
    }
    for m in ["gpt-4", "gpt-4-turbo", "gpt-3.5-turbo", "text-embedding-3-small"] {
        assert_eq!(tokenizer_for(m), Tokenizer::Cl100k, "{m}");
    }
    for m in ["qwen3-coder", "llama3.1:8b", "o1x", "olmo-2", "deepseek-chat", ""] {
        assert_eq!(tokenizer_for(m), Tokenizer::Estimate, "{m}");
    }
}

#[test]
fn hello_world_is_two_o200k_tokens() {
    let c = TokenCounter::new("gpt-4o");
    assert_eq!(c.tokenizer(), Tokenizer::O200k);
    assert_eq!(c.count_text("hello world"), Count::measured(2));
    let c = TokenCounter::new("gpt-4");
    assert_eq!(c.count_text("hello world"), Count::measured(2));
}

#[test]
fn estimates_are_marked() {
    let c = TokenCounter::new("qwen3-coder");
    assert_eq!(c.tokenizer(), Tokenizer::Estimate);
    let n = c.count_text("hello world");
    assert!(n.estimated);
    assert_eq!(n.tokens, Tokens(4)); // 11 bytes / 3, rounded up
    let m = c.count_message(&Message::user("hello world"));
    assert!(m.estimated);
    // framing 4 + "user" 2 + text 4
    assert_eq!(m.tokens, Tokens(10));
    assert!(c.count_request(&request(vec![Message::user("x")])).total.estimated);
}

#[test]
fn message_count_is_framing_role_and_parts() {
    let c = TokenCounter::new("gpt-4o");
    let text = |s: &str| c.count_text(s).tokens.0;
    let m = Message::new(
        Speaker::Assistant,
        vec![
            Part::Thinking { text: "let me look".into(), signature: Some("sig".into()), redacted: false },
            Part::Text { text: "Reading it.".into() },
            Part::ToolCall {
                id: "c1".into(),
                name: "read_file".into(),
                arguments: r#"{"path":"a.rs"}"#.into(),
            },
        ],
    );
    let expected = 4
        + text("assistant")
        + text("let me look")
        + text("sig")
        + text("Reading it.")
        + text("read_file")
        + text(r#"{"path":"a.rs"}"#)
        + 8;
    assert_eq!(c.count_message(&m), Count::measured(expected));
    let r = Message::tool_result("c1", "fn main() {}", false);
    assert_eq!(
        c.count_message(&r),
        Count::measured(4 + text("tool") + text("c1") + text("fn main() {}") + 4)
    );
    // Images follow the provider's rule and are estimates.
    let img = Message::new(
        Speaker::User,
        vec![Part::Image { media_type: "image/png".into(), data: "AAAA".into() }],
    );
    let n = c.count_message(&img);
    assert!(n.estimated);
    assert_eq!(n.tokens, Tokens(4 + text("user") + 765));
}

#[test]
fn request_count_by_category() {
    let c = TokenCounter::new("gpt-4o");
    let thinking = Message::new(
        Speaker::Assistant,
        vec![
            Part::Thinking { text: "hmm, think".into(), signature: None, redacted: false },
            Part::Text { text: "ok".into() },
        ],
    );
    let req = request(vec![Message::user("hi"), thinking.clone()]);
    let n = c.count_request(&req);
    assert_eq!(n.system, c.count_message(&Message::system("You are terse.")));
    let tool_tokens = c.count_text(&serde_json::to_string(&req.tools[0]).unwrap()).tokens.0 + 8;
    assert_eq!(n.tools, Count::measured(tool_tokens));
    let messages = c.count_message(&Message::user("hi")) + c.count_message(&thinking);
    assert_eq!(n.messages, messages);
    assert_eq!(n.thinking, c.count_text("hmm, think"));
    assert_eq!(n.total.tokens, n.system.tokens + n.tools.tokens + n.messages.tokens + Tokens(3));
    assert!(!n.total.estimated);
    // No system prompt, no tools: nothing counted for them (nothing is sent).
    let mut bare = req.clone();
    bare.system.clear();
    bare.tools.clear();
    let b = c.count_request(&bare);
    assert_eq!((b.system, b.tools), (Count::default(), Count::default()));
    assert_eq!(b.total.tokens, n.messages.tokens + Tokens(3));
}

#[test]
fn one_pass_gives_the_count_and_the_fingerprint() {
    let c = TokenCounter::new("gpt-4o");
    let req = request((0..20).map(|i| Message::user(format!("message {i}"))).collect());
    let (count, fingerprint) = c.count_and_fingerprint(&req);
    assert_eq!(count, c.count_request(&req));
    assert_eq!(fingerprint, Fingerprint::of(&req));
    let mut longer = req.clone();
    longer.messages.push(Message::assistant_text("more"));
    assert!(Fingerprint::of(&longer).extends(&fingerprint));
    assert!(!fingerprint.extends(&Fingerprint::of(&longer)));
    let mut other_tools = longer.clone();
    other_tools.tool_choice_none = true;
    assert!(!Fingerprint::of(&other_tools).extends(&fingerprint), "the head covers tools and tool_choice");
}

#[test]
fn appending_one_message_measures_only_it() {
    let c = TokenCounter::new("gpt-4o");
    let mut history: Vec<Message> = (0..500).map(|i| Message::user(format!("message number {i}"))).collect();
    let first = c.count_request(&request(history.clone()));
    let cached = c.cached();
    assert_eq!(cached, 500 + 2, "every message, the system prompt and the tool");
    history.push(Message::assistant_text("one more"));
    let second = c.count_request(&request(history.clone()));
    assert_eq!(c.cached(), cached + 1, "only the new message was measured");
    assert_eq!(
        second.total.tokens,
        first.total.tokens + c.count_message(&Message::assistant_text("one more")).tokens
    );
    // The same content is the same key; different content is not.
    assert_eq!(message_key(&Message::user("a")), message_key(&Message::user("a")));
    assert_ne!(message_key(&Message::user("a")), message_key(&Message::assistant_text("a")));
    assert_ne!(message_key(&Message::user("a")), message_key(&Message::user("a\0")));
    // Long texts (the four-lane path): one changed byte anywhere changes the key.
    let long = "0123456789abcdef".repeat(40);
    let base = message_key(&Message::user(long.clone()));
    for at in [0, 17, 64, 100, 300, 639] {
        let mut changed = long.clone().into_bytes();
        changed[at] = b'#';
        let changed = String::from_utf8(changed).unwrap();
        assert_ne!(message_key(&Message::user(changed)), base, "byte {at}");
    }
}

/// Teaches an endpoint counter what the endpoint would answer: here, o200k counts.
fn teach(c: &TokenCounter, texts: &[String]) {
    for t in texts {
        c.learn(t, tiktoken_rs::o200k_base_singleton().encode_ordinary(t).len() as u64);
    }
}

#[test]
fn endpoint_mode_is_for_models_tiktoken_does_not_know() {
    assert_eq!(TokenCounter::with_endpoint("qwen3-coder").tokenizer(), Tokenizer::Endpoint);
    assert_eq!(TokenCounter::with_endpoint("gpt-4o").tokenizer(), Tokenizer::O200k);
    assert_eq!(TokenCounter::with_endpoint("gpt-4").tokenizer(), Tokenizer::Cl100k);
    assert_eq!(TokenCounter::new("qwen3-coder").tokenizer(), Tokenizer::Estimate);
    assert_eq!(TokenCounter::with_endpoint("qwen3-coder").source(), CountSource::Endpoint);
    assert_eq!(TokenCounter::new("gpt-4o").source(), CountSource::Tiktoken);
    assert_eq!(serde_json::to_value(CountSource::Tiktoken).unwrap(), json!("tiktoken"));
    assert_eq!(serde_json::to_value(CountSource::Endpoint).unwrap(), json!("endpoint"));
    assert_eq!(serde_json::to_value(CountSource::Estimate).unwrap(), json!("estimate"));
    // Only an endpoint counter asks for anything.
    let req = request(vec![Message::user("hi")]);
    assert!(TokenCounter::new("gpt-4o").missing_texts(&req).is_empty());
    assert!(TokenCounter::new("qwen3-coder").missing_texts(&req).is_empty());
}

#[test]
fn missing_texts_then_learn_then_measured() {
    let c = TokenCounter::with_endpoint("qwen3-coder");
    let call = Message::new(
        Speaker::Assistant,
        vec![
            Part::Thinking { text: "look".into(), signature: Some("sig".into()), redacted: false },
            Part::ToolCall { id: "c1".into(), name: "read_file".into(), arguments: r#"{"path":"a"}"#.into() },
        ],
    );
    let result = Message::tool_result("c1", "fn main() {}", false);
    let req = request(vec![Message::user("hi"), Message::user("hi"), call, result]);
    let missing = c.missing_texts(&req);
    let tool = serde_json::to_string(&req.tools[0]).unwrap();
    let expected = [
        "system",
        "You are terse.",
        tool.as_str(),
        "user",
        "hi",
        "assistant",
        "look",
        "sig",
        "read_file",
        r#"{"path":"a"}"#,
        "tool",
        "c1",
        "fn main() {}",
    ];
    assert_eq!(missing, expected, "every distinct text, once, in request order");

    // Not learned yet: a guess, marked, and not cached (it is measured again once learned).
    let guessed = c.count_request(&req);
    assert!(guessed.total.estimated && guessed.messages.estimated && guessed.system.estimated);
    assert_eq!(c.cached(), 0);
    assert!(c.count_text("hi").estimated);
    assert!(c.count_message(&Message::user("hi")).estimated);

    teach(&c, &missing);
    assert!(c.missing_texts(&req).is_empty(), "nothing left to ask");
    let measured = c.count_request(&req);
    assert!(!measured.total.estimated);
    assert_eq!(c.count_text("hi"), Count::measured(1));
    // With o200k as the endpoint's tokenizer, the same numbers as tiktoken's own counter.
    assert_eq!(measured, TokenCounter::new("gpt-4o").count_request(&req));
    assert_eq!(c.cached(), 1 + 1 + 3, "system, tool, three distinct messages");

    // One appended message: only its new texts are asked for.
    let mut longer = req.clone();
    longer.messages.push(Message::assistant_text("one more"));
    assert_eq!(c.missing_texts(&longer), ["one more"]);
    // A text learned before the message was cached is not asked again either.
    c.learn("one more", 2);
    assert!(c.missing_texts(&longer).is_empty());
    let n = c.count_request(&longer);
    assert!(!n.total.estimated);
    assert_eq!(n.total.tokens, measured.total.tokens + Tokens(4 + 1 + 2));
}

#[test]
fn one_unknown_text_makes_the_whole_count_an_estimate() {
    let c = TokenCounter::with_endpoint("qwen3-coder");
    let req = request(vec![Message::user("hi")]);
    teach(&c, &c.missing_texts(&req));
    assert!(!c.count_request(&req).total.estimated);
    let mut more = req.clone();
    more.messages.push(Message::user("something new"));
    let n = c.count_request(&more);
    assert!(n.total.estimated && n.messages.estimated);
    assert!(!n.system.estimated && !n.tools.estimated, "the categories that were measured stay so");
    // An image is the provider's rule, never a measurement, whatever the texts.
    let img = Message::new(
        Speaker::User,
        vec![Part::Image { media_type: "image/png".into(), data: "AAAA".into() }],
    );
    let n = c.count_message(&img);
    assert!(n.estimated);
    assert_eq!(n.tokens, Tokens(4 + 1 + 765));
}

#[test]
fn falling_back_estimates_everything_for_good() {
    let c = TokenCounter::with_endpoint("qwen3-coder");
    let req = request(vec![Message::user("hello world")]);
    teach(&c, &c.missing_texts(&req));
    let measured = c.count_request(&req);
    assert!(!measured.total.estimated);
    assert!(c.cached() > 0);
    c.fall_back_to_estimate();
    assert_eq!(c.tokenizer(), Tokenizer::Estimate);
    assert_eq!(c.source(), CountSource::Estimate);
    assert_eq!(c.cached(), 0, "endpoint counts are not mixed with estimates");
    assert!(c.missing_texts(&req).is_empty());
    let n = c.count_request(&req);
    assert!(n.total.estimated && n.system.estimated && n.tools.estimated && n.messages.estimated);
    assert_eq!(n, TokenCounter::new("qwen3-coder").count_request(&req));
    // Learning after the fall-back changes nothing.
    c.learn("hello world", 1);
    assert_eq!(c.count_text("hello world"), Count::estimate_bytes(11));
    // A tiktoken counter has nothing to fall back from.
    let t = TokenCounter::with_endpoint("gpt-4o");
    t.fall_back_to_estimate();
    assert_eq!(t.tokenizer(), Tokenizer::O200k);
}

#[test]
fn cache_is_bounded() {
    let c = TokenCounter::new("qwen");
    let many: Vec<(u64, Entry)> = (0..CACHE_LIMIT as u64)
        .map(|k| (k, Entry { total: Count::default(), thinking: Count::default() }))
        .collect();
    c.store(c.tokenizer(), &many);
    assert_eq!(c.cached(), CACHE_LIMIT);
    c.count_message(&Message::user("x"));
    assert_eq!(c.cached(), 1);
}

#[test]
fn hashing_is_fast_enough_for_a_large_history() {
    // ~4 MB (about a million tokens) in 2,000 messages.
    let history: Vec<Message> =
        (0..2000).map(|i| Message::user(format!("{i} {}", "lorem ipsum ".repeat(170)))).collect();
    let start = std::time::Instant::now();
    let keys: Vec<u64> = history.iter().map(message_key).collect();
    let elapsed = start.elapsed();
    assert_eq!(keys.len(), 2000);
    // Generous: unoptimised test builds are far slower than release.
    assert!(elapsed < std::time::Duration::from_millis(250), "{elapsed:?}");
}

#[test]
fn the_framing_is_what_a_count_adds_around_the_texts() {
    let call = Message::new(
        Speaker::Assistant,
        vec![
            Part::Text { text: "reading".into() },
            Part::ToolCall { id: "c1".into(), name: "read_file".into(), arguments: "{}".into() },
            Part::ToolCall { id: "c2".into(), name: "read_file".into(), arguments: "{}".into() },
        ],
    );
    let results = Message::new(
        Speaker::Tool,
        vec![
            Part::ToolResult { call_id: "c1".into(), content: "a".into(), is_error: false },
            Part::ToolResult { call_id: "c2".into(), content: "b".into(), is_error: false },
        ],
    );
    assert_eq!(framing(&[]), Tokens(0));
    assert_eq!(framing(&[Message::user("hi")]), Tokens(4));
    assert_eq!(framing(&[Message::user("go"), call, results]), Tokens(4 + (4 + 16) + (4 + 8)));
}
