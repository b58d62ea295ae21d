//! Assembling a streamed Anthropic Messages answer (SSE events `message_start`,
//! `content_block_start/delta/stop`, `message_delta`, `message_stop`, `ping`, `error`) into one
//! [`ChatResponse`], and telling a complete answer from a stream that went wrong.
//!
//! Thinking blocks keep their text and `signature` exactly as streamed (concatenated deltas, no
//! trimming), so they can be sent back byte-identical; `redacted_thinking` keeps its `data`.

use super::refusals::classify_anthropic_error;
use crate::sse::{anomaly, parse_json, Assemble, Flow};
use agentd_protocol::{AnomalyKind, ChatResponse, ProviderError};
use agentd_protocol::{Figure, Message, Part, RawUsage, Speaker};
use serde_json::Value;
use std::collections::BTreeMap;

/// A server that ignored `stream: true` and answered with one `message` object.
pub(crate) fn from_json_body(body: &str) -> Result<ChatResponse, ProviderError> {
    let value = parse_json("the response", body)?;
    if value.get("type").and_then(Value::as_str) == Some("error") {
        return Err(classify_anthropic_error(value.get("error").unwrap_or(&Value::Null)));
    }
    let mut asm = Assembler { events: 1, ..Assembler::default() };
    for (index, block) in value.get("content").and_then(Value::as_array).into_iter().flatten().enumerate() {
        asm.start_block(index as u64, block);
    }
    asm.push_message_delta(&value);
    if let Some(usage) = value.get("usage") {
        asm.push_usage(usage);
    }
    asm.finish()
}

/// One content block as it is being streamed.
#[derive(Debug)]
enum Block {
    Text(String),
    Thinking {
        text: String,
        signature: String,
    },
    Redacted(String),
    ToolUse {
        id: String,
        name: String,
        /// The concatenated `partial_json` pieces.
        json: String,
        /// The `input` given at the block's start (`{}` when streamed; the whole input in a
        /// non-streamed body).
        input: Value,
    },
    /// A block type agentd does not use (server tools …): ignored.
    Other,
}

/// The state of one streamed answer, fed by [`drive`](crate::sse::drive) to `message_stop` (or
/// until the connection closes).
#[derive(Debug, Default)]
pub(crate) struct Assembler {
    /// By the provider's `index`.
    blocks: BTreeMap<u64, Block>,
    stop_reason: Option<String>,
    /// The usage figures said so far, as said (judged later, against the request).
    usage: Option<RawUsage>,
    events: usize,
}

impl Assembler {
    fn start_block(&mut self, index: u64, block: &Value) {
        let str_of = |key: &str| block.get(key).and_then(Value::as_str).unwrap_or("").to_string();
        let new = match block.get("type").and_then(Value::as_str).unwrap_or("") {
            "text" => Block::Text(str_of("text")),
            "thinking" => Block::Thinking { text: str_of("thinking"), signature: str_of("signature") },
            "redacted_thinking" => Block::Redacted(str_of("data")),
            "tool_use" => Block::ToolUse {
                id: str_of("id"),
                name: str_of("name"),
                json: String::new(),
                input: block.get("input").cloned().unwrap_or(Value::Null),
            },
            _ => Block::Other,
        };
        self.blocks.insert(index, new);
    }

    fn push_delta(&mut self, index: u64, delta: &Value) {
        let piece = |key: &str| delta.get(key).and_then(Value::as_str).unwrap_or("");
        let kind = delta.get("type").and_then(Value::as_str).unwrap_or("");
        // A delta for a block whose start was not seen opens a block of the delta's kind.
        let block = self.blocks.entry(index).or_insert_with(|| match kind {
            "text_delta" => Block::Text(String::new()),
            "thinking_delta" | "signature_delta" => {
                Block::Thinking { text: String::new(), signature: String::new() }
            }
            "input_json_delta" => Block::ToolUse {
                id: String::new(),
                name: String::new(),
                json: String::new(),
                input: Value::Null,
            },
            _ => Block::Other,
        });
        match (kind, block) {
            ("text_delta", Block::Text(text)) => text.push_str(piece("text")),
            ("thinking_delta", Block::Thinking { text, .. }) => text.push_str(piece("thinking")),
            ("signature_delta", Block::Thinking { signature, .. }) => signature.push_str(piece("signature")),
            ("input_json_delta", Block::ToolUse { json, .. }) => json.push_str(piece("partial_json")),
            (kind, _) => tracing::debug!(index, kind, "ignoring a content delta that does not fit its block"),
        }
    }

    /// `message_delta.delta` (or a whole message): the stop reason.
    fn push_message_delta(&mut self, delta: &Value) {
        if let Some(reason) = delta.get("stop_reason").and_then(Value::as_str) {
            if !reason.is_empty() {
                self.stop_reason = Some(reason.to_string());
            }
        }
    }

    /// A usage object (`message_start.message.usage`, `message_delta.usage`): each figure present
    /// replaces the one said so far, except a `null` cache figure (the cache not involved in this
    /// event) over a known one. `input_tokens` is the uncached rest of the prompt: the cache figures
    /// are apart from it.
    fn push_usage(&mut self, usage: &Value) {
        if !usage.is_object() {
            return;
        }
        let raw = self.usage.get_or_insert_with(|| RawUsage { cache_apart: true, ..RawUsage::default() });
        for (key, slot) in [
            ("input_tokens", &mut raw.prompt),
            ("cache_read_input_tokens", &mut raw.cache_read),
            ("cache_creation_input_tokens", &mut raw.cache_write),
            ("output_tokens", &mut raw.completion),
        ] {
            match usage.get(key) {
                None => {}
                Some(v) if v.is_null() && key.starts_with("cache_") && slot.is_some() => {}
                Some(v) => *slot = Some(Figure::of(key, v)),
            }
        }
    }
}

impl Assemble for Assembler {
    fn push(&mut self, name: &str, data: &str) -> Result<Flow, ProviderError> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(Flow::More);
        }
        let value = parse_json("a stream event", data)?;
        self.events += 1;
        let kind = value.get("type").and_then(Value::as_str).unwrap_or(name);
        match kind {
            "message_start" => {
                if let Some(usage) = value.get("message").and_then(|m| m.get("usage")) {
                    self.push_usage(usage);
                }
            }
            "content_block_start" => {
                let index = index_of(&value);
                self.start_block(index, value.get("content_block").unwrap_or(&Value::Null));
            }
            "content_block_delta" => {
                let index = index_of(&value);
                self.push_delta(index, value.get("delta").unwrap_or(&Value::Null));
            }
            "message_delta" => {
                if let Some(delta) = value.get("delta") {
                    self.push_message_delta(delta);
                }
                if let Some(usage) = value.get("usage") {
                    self.push_usage(usage);
                }
            }
            "message_stop" => return Ok(Flow::Done),
            "error" => return Err(classify_anthropic_error(value.get("error").unwrap_or(&value))),
            // `content_block_stop`, `ping`, and event types added later.
            _ => {}
        }
        Ok(Flow::More)
    }

    /// The stop reason came: only `message_stop` can still be lost.
    fn complete(&self) -> bool {
        self.stop_reason.is_some()
    }

    fn finish(self) -> Result<ChatResponse, ProviderError> {
        let mut thinking = Vec::new();
        let mut text = String::new();
        let mut calls = Vec::new();
        let mut reasoning_chars = 0;
        for (index, block) in self.blocks {
            match block {
                Block::Text(t) => text.push_str(&t),
                Block::Thinking { text, signature } => {
                    if text.is_empty() && signature.is_empty() {
                        continue;
                    }
                    reasoning_chars += text.len();
                    let signature = (!signature.is_empty()).then_some(signature);
                    thinking.push(Part::Thinking { text, signature, redacted: false });
                }
                Block::Redacted(data) => {
                    if !data.is_empty() {
                        reasoning_chars += data.len();
                        thinking.push(Part::Thinking { text: data, signature: None, redacted: true });
                    }
                }
                Block::ToolUse { id, name, json, input } => {
                    let id = if id.is_empty() { format!("toolu_{index}") } else { id };
                    let arguments = if !json.is_empty() {
                        json
                    } else if input.is_null() {
                        "{}".to_string()
                    } else {
                        input.to_string()
                    };
                    calls.push(Part::ToolCall { id, name, arguments });
                }
                Block::Other => {}
            }
        }
        let has_output = !text.is_empty() || !calls.is_empty();
        let Some(stop_reason) = self.stop_reason else {
            if has_output || !thinking.is_empty() {
                return Err(anomaly(
                    AnomalyKind::NoFinishReason,
                    format!(
                        "the stream ended without a stop reason after {} chars of text, {} of thinking and {} tool call(s)",
                        text.len(),
                        reasoning_chars,
                        calls.len()
                    ),
                ));
            }
            return Err(anomaly(
                AnomalyKind::Empty,
                format!("the stream ended after {} event(s) without any output or stop reason", self.events),
            ));
        };
        if !has_output {
            return Err(anomaly(
                AnomalyKind::Empty,
                format!(
                    "the model stopped ({stop_reason}) without text or tool calls ({reasoning_chars} chars of thinking)"
                ),
            ));
        }
        let mut parts = thinking;
        if !text.is_empty() {
            parts.push(Part::Text { text });
        }
        parts.extend(calls);
        Ok(ChatResponse {
            message: Message::new(Speaker::Assistant, parts),
            finish_reason: finish_reason(&stop_reason),
            usage: self.usage,
        })
    }
}

fn index_of(event: &Value) -> u64 {
    event.get("index").and_then(Value::as_u64).unwrap_or(0)
}

/// Anthropic's `stop_reason` in agentd's (OpenAI's) finish-reason words.
pub(crate) fn finish_reason(stop_reason: &str) -> String {
    match stop_reason {
        "end_turn" | "stop_sequence" => "stop",
        "tool_use" => "tool_calls",
        "max_tokens" => "length",
        other => other,
    }
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sse::drive;
    use crate::sse::testing::{cut, kind, reset, Chunk};
    use agentd_protocol::{Tokens, Usage};
    use futures_util::{stream, Stream};

    fn ev(name: &str, json: &str) -> String {
        format!("event: {name}\ndata: {json}\n\n")
    }

    fn start(input: u64, cache_read: u64, cache_creation: u64) -> String {
        ev(
            "message_start",
            &format!(
                r#"{{"type":"message_start","message":{{"id":"msg_1","type":"message","role":"assistant","model":"claude","content":[],"stop_reason":null,"stop_sequence":null,"usage":{{"input_tokens":{input},"cache_creation_input_tokens":{cache_creation},"cache_read_input_tokens":{cache_read},"output_tokens":1}}}}}}"#
            ),
        )
    }

    fn block_start(index: u64, block: &str) -> String {
        ev(
            "content_block_start",
            &format!(r#"{{"type":"content_block_start","index":{index},"content_block":{block}}}"#),
        )
    }

    fn delta(index: u64, delta: &str) -> String {
        ev(
            "content_block_delta",
            &format!(r#"{{"type":"content_block_delta","index":{index},"delta":{delta}}}"#),
        )
    }

    fn block_stop(index: u64) -> String {
        ev("content_block_stop", &format!(r#"{{"type":"content_block_stop","index":{index}}}"#))
    }

    fn message_delta(stop_reason: &str, output: u64) -> String {
        ev(
            "message_delta",
            &format!(
                r#"{{"type":"message_delta","delta":{{"stop_reason":"{stop_reason}","stop_sequence":null}},"usage":{{"output_tokens":{output}}}}}"#
            ),
        )
    }

    fn stop() -> String {
        ev("message_stop", r#"{"type":"message_stop"}"#)
    }

    async fn assemble(bytes: impl Stream<Item = Chunk>) -> Result<ChatResponse, ProviderError> {
        drive(bytes, Assembler::default()).await
    }

    async fn run(parts: &[String]) -> Result<ChatResponse, ProviderError> {
        let pieces: Vec<Chunk> = parts.iter().map(|p| Ok(p.clone().into_bytes())).collect();
        assemble(stream::iter(pieces)).await
    }

    #[tokio::test]
    async fn text_split_across_byte_chunks_with_ping() {
        let body = [
            start(25, 0, 0),
            block_start(0, r#"{"type":"text","text":""}"#),
            ev("ping", r#"{"type": "ping"}"#),
            delta(0, r#"{"type":"text_delta","text":"Hel"}"#),
            delta(0, r#"{"type":"text_delta","text":"lo ✓"}"#),
            block_stop(0),
            message_delta("end_turn", 15),
            stop(),
        ]
        .concat();
        let bytes = body.as_bytes();
        let tick = body.find('✓').unwrap() + 1;
        let mut cuts = vec![5, 40, 300, tick, tick + 1];
        cuts.sort_unstable();
        cuts.dedup();
        cuts.retain(|c| *c < bytes.len());
        cuts.push(bytes.len());
        let r = assemble(stream::iter(cut(bytes, cuts))).await.unwrap();
        assert_eq!(r.message, Message::assistant_text("Hello ✓"));
        assert_eq!(r.finish_reason, "stop");
        assert_eq!(r.usage.and_then(|u| u.counts()), Some(Usage::new(25, 15)));
    }

    #[tokio::test]
    async fn thinking_with_signature_is_kept_byte_identical() {
        let signature = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds+/=";
        let r = run(&[
            start(100, 0, 0),
            block_start(0, r#"{"type":"thinking","thinking":""}"#),
            delta(0, r#"{"type":"thinking_delta","thinking":"Let me think \"carefully\"\n"}"#),
            delta(0, r#"{"type":"thinking_delta","thinking":"  about 2 + 2…  "}"#),
            delta(0, &format!(r#"{{"type":"signature_delta","signature":"{signature}"}}"#)),
            block_stop(0),
            block_start(1, r#"{"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"}"#),
            block_stop(1),
            block_start(2, r#"{"type":"text","text":""}"#),
            delta(2, r#"{"type":"text_delta","text":"4"}"#),
            block_stop(2),
            message_delta("end_turn", 40),
            stop(),
        ])
        .await
        .unwrap();
        assert_eq!(
            r.message.parts,
            vec![
                Part::Thinking {
                    text: "Let me think \"carefully\"\n  about 2 + 2…  ".into(),
                    signature: Some(signature.into()),
                    redacted: false
                },
                Part::Thinking {
                    text: "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP".into(),
                    signature: None,
                    redacted: true
                },
                Part::Text { text: "4".into() },
            ]
        );
        assert_eq!(r.message.text(), "4", "thinking is not shown text");
    }

    #[tokio::test]
    async fn parallel_tool_use_with_split_partial_json_and_cache_usage() {
        let r = run(&[
            start(12, 3000, 500),
            block_start(0, r#"{"type":"text","text":""}"#),
            delta(0, r#"{"type":"text_delta","text":"Reading both."}"#),
            block_stop(0),
            block_start(1, r#"{"type":"tool_use","id":"toolu_a","name":"read_file","input":{}}"#),
            delta(1, r#"{"type":"input_json_delta","partial_json":""}"#),
            delta(1, r#"{"type":"input_json_delta","partial_json":"{\"pa"}"#),
            block_start(2, r#"{"type":"tool_use","id":"toolu_b","name":"list_dir","input":{}}"#),
            delta(2, r#"{"type":"input_json_delta","partial_json":"{\"path\":\".\"}"}"#),
            delta(1, r#"{"type":"input_json_delta","partial_json":"th\":\"a.rs\"}"}"#),
            block_stop(1),
            block_stop(2),
            block_start(3, r#"{"type":"tool_use","id":"toolu_c","name":"finish","input":{}}"#),
            block_stop(3),
            message_delta("tool_use", 77),
            stop(),
        ])
        .await
        .unwrap();
        assert_eq!(
            r.message.parts,
            vec![
                Part::Text { text: "Reading both.".into() },
                Part::ToolCall {
                    id: "toolu_a".into(),
                    name: "read_file".into(),
                    arguments: r#"{"path":"a.rs"}"#.into()
                },
                Part::ToolCall {
                    id: "toolu_b".into(),
                    name: "list_dir".into(),
                    arguments: r#"{"path":"."}"#.into()
                },
                Part::ToolCall { id: "toolu_c".into(), name: "finish".into(), arguments: "{}".into() },
            ]
        );
        assert_eq!(r.finish_reason, "tool_calls");
        let u = r.usage.and_then(|u| u.counts()).unwrap();
        assert_eq!((u.prompt_tokens, u.completion_tokens), (3512, 77));
        assert_eq!((u.cache_read_tokens, u.cache_write_tokens, u.uncached_input()), (3000, 500, 12));
    }

    #[tokio::test]
    async fn stop_reasons_map() {
        assert_eq!(finish_reason("max_tokens"), "length");
        assert_eq!(finish_reason("stop_sequence"), "stop");
        assert_eq!(finish_reason("refusal"), "refusal");
        let r = run(&[
            start(1, 0, 0),
            delta(0, r#"{"type":"text_delta","text":"cut"}"#),
            message_delta("max_tokens", 1),
            stop(),
        ])
        .await
        .unwrap();
        assert_eq!(r.finish_reason, "length");
        assert_eq!(r.message.text(), "cut", "a delta without its block start still counts");
    }

    #[tokio::test]
    async fn usage_without_cache_fields_or_with_bad_numbers() {
        let no_cache = ev(
            "message_start",
            r#"{"type":"message_start","message":{"usage":{"input_tokens":9,"output_tokens":1,"cache_read_input_tokens":null}}}"#,
        );
        let text = [block_start(0, r#"{"type":"text","text":"hi"}"#), message_delta("end_turn", 2), stop()];
        let r = run(&[vec![no_cache], text.to_vec()].concat()).await.unwrap();
        assert_eq!(r.usage.and_then(|u| u.counts()), Some(Usage::new(9, 2)));
        let negative = ev(
            "message_start",
            r#"{"type":"message_start","message":{"usage":{"input_tokens":-4,"output_tokens":1}}}"#,
        );
        // Kept as said, never a failed answer: the engine's judge refuses it by name.
        let raw = run(&[vec![negative], text.to_vec()].concat()).await.unwrap().usage.unwrap();
        assert_eq!((raw.prompt.as_ref().map(|f| f.said.as_str()), raw.counts()), (Some("-4"), None));
        let raw = run(&text).await.unwrap().usage.unwrap();
        assert_eq!((raw.counts(), raw.prompt), (None, None), "no input figure, no counts");
    }

    #[tokio::test]
    async fn overloaded_error_event_is_an_overload() {
        let r = run(&[
            start(5, 0, 0),
            block_start(0, r#"{"type":"text","text":""}"#),
            delta(0, r#"{"type":"text_delta","text":"par"}"#),
            ev("error", r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#),
        ])
        .await;
        assert_eq!(r, Err(ProviderError::Overloaded { retry_after: None, message: "Overloaded".into() }));
        let r = run(&[ev(
            "error",
            r#"{"type":"error","error":{"type":"api_error","message":"Internal server error"}}"#,
        )])
        .await;
        assert_eq!(r, Err(ProviderError::Server { status: 500, message: "Internal server error".into() }));
        let r = run(&[ev(
            "error",
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210034 tokens > 200000 maximum"}}"#,
        )])
        .await;
        assert!(
            matches!(r, Err(ProviderError::ContextOverflow { limit: Some(Tokens(200000)), .. })),
            "{r:?}"
        );
    }

    #[tokio::test]
    async fn missing_stop_is_an_anomaly() {
        let text = [
            start(5, 0, 0),
            block_start(0, r#"{"type":"text","text":""}"#),
            delta(0, r#"{"type":"text_delta","text":"partial"}"#),
        ];
        assert_eq!(kind(run(&text).await), AnomalyKind::NoFinishReason);
        // message_stop without a stop reason is no better.
        assert_eq!(kind(run(&[text.to_vec(), vec![stop()]].concat()).await), AnomalyKind::NoFinishReason);
        let thinking_only = [
            start(5, 0, 0),
            block_start(0, r#"{"type":"thinking","thinking":""}"#),
            delta(0, r#"{"type":"thinking_delta","thinking":"hmm"}"#),
        ];
        assert_eq!(kind(run(&thinking_only).await), AnomalyKind::NoFinishReason);
    }

    #[tokio::test]
    async fn nothing_at_all_is_empty() {
        assert_eq!(kind(run(&[]).await), AnomalyKind::Empty);
        assert_eq!(kind(run(&[start(5, 0, 0), stop()]).await), AnomalyKind::Empty);
        let thinking_then_stop = [
            start(5, 0, 0),
            block_start(0, r#"{"type":"thinking","thinking":"hmm","signature":"sig"}"#),
            message_delta("end_turn", 3),
            stop(),
        ];
        assert_eq!(kind(run(&thinking_then_stop).await), AnomalyKind::Empty);
    }

    #[tokio::test]
    async fn bad_json_is_parse() {
        let r = run(&[start(5, 0, 0), "event: content_block_delta\ndata: {\"type\": \n\n".to_string()]).await;
        assert_eq!(kind(r), AnomalyKind::Parse);
    }

    #[tokio::test]
    async fn transport_error_mid_stream_is_cut_but_after_the_stop_reason_keeps_the_answer() {
        let pieces: Vec<Chunk> = vec![
            Ok(start(5, 0, 0).into_bytes()),
            Ok(delta(0, r#"{"type":"text_delta","text":"a"}"#).into_bytes()),
            Err(reset()),
        ];
        match assemble(stream::iter(pieces)).await {
            Err(ProviderError::StreamAnomaly { kind: AnomalyKind::Cut, message }) => {
                assert!(message.contains("connection reset"), "{message}")
            }
            other => panic!("{other:?}"),
        }
        let pieces: Vec<Chunk> = vec![
            Ok(delta(0, r#"{"type":"text_delta","text":"a"}"#).into_bytes()),
            Ok(message_delta("end_turn", 1).into_bytes()),
            Err(reset()),
        ];
        let r = assemble(stream::iter(pieces)).await.unwrap();
        assert_eq!(r.message, Message::assistant_text("a"));
    }

    #[tokio::test]
    async fn events_after_message_stop_are_not_read() {
        let r = run(&[
            block_start(0, r#"{"type":"text","text":"x"}"#),
            message_delta("end_turn", 1),
            stop(),
            "data: not json\n\n".to_string(),
        ])
        .await
        .unwrap();
        assert_eq!(r.message.text(), "x");
    }

    #[test]
    fn whole_json_body() {
        let body = r#"{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"},{"type":"text","text":"done"},{"type":"tool_use","id":"toolu_1","name":"finish","input":{"summary":"s"}}],"stop_reason":"tool_use","usage":{"input_tokens":9,"output_tokens":4,"cache_read_input_tokens":2}}"#;
        let r = from_json_body(body).unwrap();
        assert_eq!(
            r.message.parts,
            vec![
                Part::Thinking { text: "t".into(), signature: Some("s".into()), redacted: false },
                Part::Text { text: "done".into() },
                Part::ToolCall {
                    id: "toolu_1".into(),
                    name: "finish".into(),
                    arguments: r#"{"summary":"s"}"#.into()
                },
            ]
        );
        assert_eq!(r.finish_reason, "tool_calls");
        assert_eq!(
            r.usage.and_then(|u| u.counts()),
            Some(Usage { cache_read_tokens: 2, ..Usage::new(11, 4) })
        );
        assert_eq!(kind(from_json_body("<html>")), AnomalyKind::Parse);
        assert!(matches!(
            from_json_body(r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#),
            Err(ProviderError::Overloaded { .. })
        ));
    }
}
