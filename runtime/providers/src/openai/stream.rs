//! Assembling a streamed chat completion (OpenAI SSE chunks) into one [`ChatResponse`], and telling
//! a complete answer from a stream that went wrong.

use super::refusals::classify_stream_error;
use crate::sse::{anomaly, parse_json, read_data, Assemble, Data, Flow};
use agentd_protocol::{AnomalyKind, ChatResponse, ProviderError};
use agentd_protocol::{Figure, Message, Part, RawUsage, Speaker};
use serde_json::Value;
use std::collections::BTreeMap;

/// A server that ignored `stream: true` and answered with one JSON body.
pub(crate) fn from_json_body(body: &str) -> Result<ChatResponse, ProviderError> {
    let value = parse_json("the response", body)?;
    let mut asm = Assembler::default();
    asm.push_chunk(&value, true)?;
    asm.finish()
}

#[derive(Debug, Default)]
struct ToolCallAcc {
    id: String,
    name: String,
    arguments: String,
}

/// The state of one streamed answer, fed by [`drive`](crate::sse::drive) to its end (connection
/// closed or `data: [DONE]`).
#[derive(Debug, Default)]
pub(crate) struct Assembler {
    content: String,
    reasoning: String,
    /// By the provider's `index`.
    tool_calls: BTreeMap<u64, ToolCallAcc>,
    /// The index the last tool-call delta went to, for servers that omit `index`.
    last_tool_index: Option<u64>,
    finish_reason: Option<String>,
    usage: Option<RawUsage>,
    chunks: usize,
}

impl Assembler {
    /// One chunk (`chat.completion.chunk`), or with `whole` a complete `chat.completion` whose
    /// choices carry `message` instead of `delta`.
    pub(crate) fn push_chunk(&mut self, chunk: &Value, whole: bool) -> Result<(), ProviderError> {
        self.chunks += 1;
        if let Some(error) = chunk.get("error").filter(|e| !e.is_null()) {
            return Err(classify_stream_error(error));
        }
        if let Some(u) = chunk.get("usage").and_then(parse_usage) {
            self.usage = Some(u);
        }
        let Some(choices) = chunk.get("choices").and_then(Value::as_array) else {
            return Ok(());
        };
        for choice in choices {
            // agentd asks for one choice; ignore any other.
            if choice.get("index").and_then(Value::as_u64).unwrap_or(0) != 0 {
                continue;
            }
            let delta = if whole { choice.get("message") } else { choice.get("delta") };
            if let Some(delta) = delta {
                self.push_delta(delta, whole);
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                if !reason.is_empty() {
                    self.finish_reason = Some(reason.to_string());
                }
            }
        }
        Ok(())
    }

    fn push_delta(&mut self, delta: &Value, whole: bool) {
        if let Some(text) = delta.get("content").and_then(Value::as_str) {
            self.content.push_str(text);
        }
        // vLLM/DeepSeek say `reasoning_content`; newer vLLM and others say `reasoning` (some send
        // both with the same text, so take one).
        let reasoning = delta
            .get("reasoning_content")
            .and_then(Value::as_str)
            .or_else(|| delta.get("reasoning").and_then(Value::as_str));
        if let Some(text) = reasoning {
            self.reasoning.push_str(text);
        }
        if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
            for (position, call) in calls.iter().enumerate() {
                self.push_tool_call(call, whole.then_some(position as u64));
            }
        }
    }

    fn push_tool_call(&mut self, call: &Value, position: Option<u64>) {
        let id = call.get("id").and_then(Value::as_str).filter(|s| !s.is_empty());
        let index = match call.get("index").and_then(Value::as_u64).or(position) {
            Some(index) => index,
            // No index: a new call when it brings an id we have not seen, else the current one.
            None => match (id, self.last_tool_index) {
                (Some(id), _) if !self.tool_calls.values().any(|c| c.id == id) => {
                    self.tool_calls.keys().next_back().map_or(0, |k| k + 1)
                }
                (Some(id), _) => {
                    *self.tool_calls.iter().find(|(_, c)| c.id == id).map(|(k, _)| k).unwrap_or(&0)
                }
                (None, Some(last)) => last,
                (None, None) => 0,
            },
        };
        self.last_tool_index = Some(index);
        let acc = self.tool_calls.entry(index).or_default();
        if let Some(id) = id {
            if acc.id.is_empty() {
                acc.id = id.to_string();
            }
        }
        if let Some(function) = call.get("function") {
            if let Some(name) = function.get("name").and_then(Value::as_str) {
                if acc.name.is_empty() {
                    acc.name = name.to_string();
                }
            }
            match function.get("arguments") {
                Some(Value::String(piece)) => acc.arguments.push_str(piece),
                // Some servers send the arguments as an object rather than its JSON text.
                Some(v @ Value::Object(_)) => acc.arguments.push_str(&v.to_string()),
                _ => {}
            }
        }
    }
}

impl Assemble for Assembler {
    /// One SSE `data:` payload (the event name is not used).
    fn push(&mut self, _event: &str, data: &str) -> Result<Flow, ProviderError> {
        match read_data("a stream chunk", data)? {
            Data::Blank => Ok(Flow::More),
            Data::Done => Ok(Flow::Done),
            Data::Json(value) => self.push_chunk(&value, false).map(|()| Flow::More),
        }
    }

    /// The finish reason came: only the trailer (usage, `[DONE]`) can still be lost.
    fn complete(&self) -> bool {
        self.finish_reason.is_some()
    }

    fn finish(self) -> Result<ChatResponse, ProviderError> {
        let has_output = !self.content.is_empty() || !self.tool_calls.is_empty();
        let Some(finish_reason) = self.finish_reason else {
            if has_output || !self.reasoning.is_empty() {
                return Err(anomaly(
                    AnomalyKind::NoFinishReason,
                    format!(
                        "the stream ended without a finish reason after {} chars of text, {} of reasoning and {} tool call(s)",
                        self.content.len(),
                        self.reasoning.len(),
                        self.tool_calls.len()
                    ),
                ));
            }
            return Err(anomaly(
                AnomalyKind::Empty,
                format!(
                    "the stream ended after {} chunk(s) without any output or finish reason",
                    self.chunks
                ),
            ));
        };
        if !has_output {
            return Err(anomaly(
                AnomalyKind::Empty,
                format!(
                    "the model finished ({finish_reason}) without text or tool calls ({} chars of reasoning)",
                    self.reasoning.len()
                ),
            ));
        }
        let mut parts = Vec::with_capacity(2 + self.tool_calls.len());
        if !self.reasoning.is_empty() {
            parts.push(Part::Thinking { text: self.reasoning, signature: None, redacted: false });
        }
        if !self.content.is_empty() {
            parts.push(Part::Text { text: self.content });
        }
        for (index, call) in self.tool_calls {
            let id = if call.id.is_empty() { format!("call_{index}") } else { call.id };
            parts.push(Part::ToolCall { id, name: call.name, arguments: call.arguments });
        }
        Ok(ChatResponse {
            message: Message::new(Speaker::Assistant, parts),
            finish_reason,
            usage: self.usage,
        })
    }
}

/// A usage object, each figure kept as said (judged later, against the request): `prompt_tokens`,
/// `completion_tokens`, and the prompt's cached part, `prompt_tokens_details.cached_tokens` (OpenAI,
/// vLLM). `null` or anything but an object is no report.
fn parse_usage(usage: &Value) -> Option<RawUsage> {
    usage.as_object()?;
    let figure = |key: &str, pointer: &str| usage.pointer(pointer).map(|v| Figure::of(key, v));
    Some(RawUsage {
        prompt: figure("prompt_tokens", "/prompt_tokens"),
        completion: figure("completion_tokens", "/completion_tokens"),
        cache_read: figure("prompt_tokens_details.cached_tokens", "/prompt_tokens_details/cached_tokens"),
        cache_write: None,
        cache_apart: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentd_protocol::Usage;

    #[test]
    fn the_cached_part_of_the_prompt_is_read_as_said() {
        let counts = |v: serde_json::Value| parse_usage(&v).and_then(|u| u.counts());
        let u = counts(serde_json::json!({"prompt_tokens": 100, "completion_tokens": 7,
            "prompt_tokens_details": {"cached_tokens": 64}}))
        .unwrap();
        assert_eq!(
            (u.prompt_tokens, u.cache_read_tokens, u.cache_write_tokens, u.uncached_input()),
            (100, 64, 0, 36)
        );
        // More cached than the prompt is said as it was: the engine's judge refuses it.
        let u = counts(serde_json::json!({"prompt_tokens": 10, "completion_tokens": 1,
            "prompt_tokens_details": {"cached_tokens": 64}}))
        .unwrap();
        assert_eq!(u.cache_read_tokens, 64);
        let u = counts(serde_json::json!({"prompt_tokens": 10, "completion_tokens": 1})).unwrap();
        assert_eq!(u, Usage::new(10, 1));
        assert_eq!(parse_usage(&serde_json::Value::Null), None, "null is no report");
    }
    use crate::sse::drive;
    use crate::sse::testing::{cut, kind, reset, Chunk};
    use agentd_protocol::Tokens;
    use futures_util::{stream, Stream};

    fn chunks(parts: &[&str]) -> impl Stream<Item = Chunk> {
        stream::iter(parts.iter().map(|p| Ok(p.as_bytes().to_vec())).collect::<Vec<_>>())
    }

    fn data(json: &str) -> String {
        format!("data: {json}\n\n")
    }

    async fn assemble(bytes: impl Stream<Item = Chunk>) -> Result<ChatResponse, ProviderError> {
        drive(bytes, Assembler::default()).await
    }

    async fn run(parts: &[&str]) -> Result<ChatResponse, ProviderError> {
        assemble(chunks(parts)).await
    }

    #[tokio::test]
    async fn text_split_across_byte_chunks() {
        let body = [
            data(r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"}}]}"#),
            data(r#"{"choices":[{"index":0,"delta":{"content":"lo ✓"}}]}"#),
            data(r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#),
            "data: [DONE]\n\n".to_string(),
        ]
        .concat();
        // Cut the bytes at awkward places, including inside the multi-byte ✓.
        let bytes = body.as_bytes();
        let tick = body.find('✓').unwrap() + 1;
        let pieces = cut(bytes, [7, 30, tick, tick + 1, 150, bytes.len()]);
        let r = assemble(stream::iter(pieces)).await.unwrap();
        assert_eq!(r.message, Message::assistant_text("Hello ✓"));
        assert_eq!(r.finish_reason, "stop");
        assert_eq!(r.usage, None);
    }

    #[tokio::test]
    async fn reasoning_then_text_then_calls_in_index_order() {
        let r = run(&[
            &data(r#"{"choices":[{"index":0,"delta":{"reasoning_content":"think ","reasoning":"think "}}]}"#),
            &data(r#"{"choices":[{"index":0,"delta":{"reasoning":"more"}}]}"#),
            &data(r#"{"choices":[{"index":0,"delta":{"content":"ok"}}]}"#),
            &data(
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"b","type":"function","function":{"name":"list_dir","arguments":""}}]}}]}"#,
            ),
            &data(
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"read_file","arguments":"{\"pa"}}]}}]}"#,
            ),
            &data(r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{\"path\":\".\"}"}}]}}]}"#),
            &data(r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"th\":\"a.rs\"}"}}]}}]}"#),
            &data(r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#),
            &data(r#"{"choices":[],"usage":{"prompt_tokens":120,"completion_tokens":30,"total_tokens":150}}"#),
            "data: [DONE]\n\n",
        ])
        .await
        .unwrap();
        assert_eq!(
            r.message.parts,
            vec![
                Part::Thinking { text: "think more".into(), signature: None, redacted: false },
                Part::Text { text: "ok".into() },
                Part::ToolCall {
                    id: "a".into(),
                    name: "read_file".into(),
                    arguments: r#"{"path":"a.rs"}"#.into()
                },
                Part::ToolCall {
                    id: "b".into(),
                    name: "list_dir".into(),
                    arguments: r#"{"path":"."}"#.into()
                },
            ]
        );
        assert_eq!(r.finish_reason, "tool_calls");
        assert_eq!(r.usage.and_then(|u| u.counts()), Some(Usage::new(120, 30)));
    }

    #[tokio::test]
    async fn tool_call_only_with_split_arguments() {
        let r = run(&[
            &data(
                r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"write_file","arguments":""}}]}}]}"#,
            ),
            &data(r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\":"}}]}}]}"#),
            &data(r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"x\"}"}}]}}]}"#),
            &data(r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":null}"#),
        ])
        .await
        .unwrap();
        assert_eq!(
            r.message.parts,
            vec![Part::ToolCall {
                id: "call_1".into(),
                name: "write_file".into(),
                arguments: r#"{"path":"x"}"#.into()
            }]
        );
        assert_eq!(r.usage, None);
    }

    #[tokio::test]
    async fn calls_without_index_are_told_apart_by_id() {
        let r = run(&[
            &data(r#"{"choices":[{"delta":{"tool_calls":[{"id":"x","function":{"name":"a","arguments":"{}"}}]}}]}"#),
            &data(r#"{"choices":[{"delta":{"tool_calls":[{"id":"y","function":{"name":"b","arguments":"{"}}]}}]}"#),
            &data(r#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"}"}}]}}]}"#),
            &data(r#"{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#),
        ])
        .await
        .unwrap();
        let calls: Vec<_> = r.message.tool_calls().collect();
        assert_eq!(calls, vec![("x", "a", "{}"), ("y", "b", "{}")]);
    }

    #[tokio::test]
    async fn usage_only_chunk_after_finish() {
        let r = run(&[
            &data(r#"{"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}"#),
            &data(r#"{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#),
            &data(r#"{"id":"x","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1}}"#),
            "data: [DONE]\n\n",
        ])
        .await
        .unwrap();
        assert_eq!(r.finish_reason, "length");
        assert_eq!(r.usage.and_then(|u| u.counts()), Some(Usage::new(5, 1)));
    }

    #[tokio::test]
    async fn null_negative_or_non_finite_usage_is_kept_as_said_and_the_answer_stands() {
        let r = run(&[
            &data(r#"{"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}"#),
            &data(r#"{"choices":[],"usage":{"prompt_tokens":null,"completion_tokens":1}}"#),
            &data(r#"{"choices":[],"usage":{"prompt_tokens":-3,"completion_tokens":1}}"#),
        ])
        .await
        .unwrap();
        let raw = r.usage.unwrap();
        assert_eq!((raw.prompt.as_ref().map(|f| f.said.as_str()), raw.counts()), (Some("-3"), None));
        // Python's json writes NaN: the chunk still parses, the figure is said as NaN.
        let r = run(&[
            &data(r#"{"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}"#),
            &data(r#"{"choices":[],"usage":{"prompt_tokens":NaN,"completion_tokens":1,"total_tokens":NaN}}"#),
        ])
        .await
        .unwrap();
        assert_eq!(r.message.text(), "hi");
        let prompt = r.usage.unwrap().prompt.unwrap();
        assert_eq!((prompt.key.as_str(), prompt.said.as_str()), ("prompt_tokens", "NaN"));
        // A usage of null is no report.
        let r = run(&[&data(
            r#"{"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}],"usage":null}"#,
        )])
        .await
        .unwrap();
        assert_eq!(r.usage, None);
    }

    #[tokio::test]
    async fn missing_finish_reason_is_an_anomaly() {
        let only_text = data(r#"{"choices":[{"index":0,"delta":{"content":"partial"}}]}"#);
        assert_eq!(kind(run(&[&only_text, "data: [DONE]\n\n"]).await), AnomalyKind::NoFinishReason);
        assert_eq!(kind(run(&[&only_text]).await), AnomalyKind::NoFinishReason);
    }

    #[tokio::test]
    async fn nothing_at_all_is_empty() {
        assert_eq!(kind(run(&[]).await), AnomalyKind::Empty);
        assert_eq!(kind(run(&["data: [DONE]\n\n"]).await), AnomalyKind::Empty);
        let role_only = data(r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#);
        assert_eq!(kind(run(&[&role_only, "data: [DONE]\n\n"]).await), AnomalyKind::Empty);
    }

    #[tokio::test]
    async fn finish_without_output_is_empty() {
        let r = run(&[
            &data(r#"{"choices":[{"index":0,"delta":{"reasoning_content":"hmm"}}]}"#),
            &data(r#"{"choices":[{"index":0,"delta":{"content":""},"finish_reason":"stop"}]}"#),
            "data: [DONE]\n\n",
        ])
        .await;
        assert_eq!(kind(r), AnomalyKind::Empty);
    }

    #[tokio::test]
    async fn bad_json_is_parse() {
        let r = run(&[
            &data(r#"{"choices":[{"index":0,"delta":{"content":"a"}}]}"#),
            "data: {\"choices\": [\n\n",
        ])
        .await;
        assert_eq!(kind(r), AnomalyKind::Parse);
    }

    #[tokio::test]
    async fn transport_error_mid_stream_is_cut() {
        let pieces: Vec<Chunk> =
            vec![Ok(data(r#"{"choices":[{"index":0,"delta":{"content":"a"}}]}"#).into_bytes()), Err(reset())];
        let r = assemble(stream::iter(pieces)).await;
        match r {
            Err(ProviderError::StreamAnomaly { kind: AnomalyKind::Cut, message }) => {
                assert!(message.contains("connection reset"), "{message}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn transport_error_after_finish_keeps_the_answer() {
        let pieces: Vec<Chunk> = vec![
            Ok(data(r#"{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}]}"#)
                .into_bytes()),
            Err(reset()),
        ];
        let r = assemble(stream::iter(pieces)).await.unwrap();
        assert_eq!(r.message, Message::assistant_text("a"));
    }

    #[tokio::test]
    async fn error_object_in_stream() {
        let overflow = data(
            r#"{"error":{"code":400,"message":"the request exceeds the available context size (2048 tokens), try increasing it","type":"exceed_context_size_error"}}"#,
        );
        match run(&[&overflow]).await {
            Err(ProviderError::ContextOverflow { limit, .. }) => {
                assert_eq!(limit, Some(Tokens(2048)))
            }
            other => panic!("{other:?}"),
        }
        let other = data(r#"{"error":{"message":"CUDA out of memory","type":"InternalServerError"}}"#);
        match run(&[&other]).await {
            Err(ProviderError::Server { status: 500, message }) => assert_eq!(message, "CUDA out of memory"),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn comments_and_event_names_are_ignored() {
        let r = run(&[
            ": keep-alive\n\n",
            "event: message\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"},\"finish_reason\":\"stop\"}]}\r\n\r\n",
        ])
        .await
        .unwrap();
        assert_eq!(r.message.text(), "x");
    }

    #[test]
    fn whole_json_body() {
        let body = r#"{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"done","reasoning_content":"r","tool_calls":[{"id":"t1","type":"function","function":{"name":"finish","arguments":"{\"summary\":\"s\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":9,"completion_tokens":4,"total_tokens":13}}"#;
        let r = from_json_body(body).unwrap();
        assert_eq!(r.message.parts.len(), 3);
        assert_eq!(r.message.tool_calls().next(), Some(("t1", "finish", r#"{"summary":"s"}"#)));
        assert_eq!(r.usage.and_then(|u| u.counts()), Some(Usage::new(9, 4)));
        assert_eq!(kind(from_json_body("<html>")), AnomalyKind::Parse);
    }
}
