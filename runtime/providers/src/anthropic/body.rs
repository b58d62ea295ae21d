//! Anthropic Messages on the wire, as serde structs: the body a [`ChatRequest`] is POSTed as to
//! `{base}/messages` (and, without `max_tokens` and `stream`, to `{base}/messages/count_tokens`),
//! and the body that counts a bare text. Thinking blocks and their signatures go back exactly as
//! they came; tool results lead the user turn that follows the tool calls; roles alternate; prompt
//! cache breakpoints sit on the last tool, the system block and the last block of the last message.
//! A field that is `None` is left out, not sent as null.

use super::limits::{max_tokens, MAX_CACHE_BREAKPOINTS};
use agentd_protocol::ChatRequest;
use agentd_protocol::{Message, Part, Speaker};
use serde::Serialize;
use serde_json::{Map, Value};
use std::borrow::Cow;

/// The JSON [`AnthropicClient::chat`](super::AnthropicClient::chat) POSTs (`max_tokens` and `stream` set), or
/// [`AnthropicClient::count_tokens`](super::AnthropicClient::count_tokens) (both left out).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AnthropicBody<'a> {
    pub(crate) model: &'a str,
    /// One text block holding the system prompt; left out when the prompt is empty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) system: Option<[Block<'a>; 1]>,
    pub(crate) messages: Vec<Turn<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tools: Option<Vec<Tool<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tool_choice: Option<ToolChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) thinking: Option<Thinking>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) stream: Option<bool>,
}

/// One turn: `user` or `assistant`, never empty.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Turn<'a> {
    pub(crate) role: &'static str,
    pub(crate) content: Vec<Block<'a>>,
}

/// A content block, and the prompt-cache breakpoint it may carry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Block<'a> {
    #[serde(flatten)]
    pub(crate) kind: BlockKind<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) cache_control: Option<CacheControl>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum BlockKind<'a> {
    Text {
        text: Cow<'a, str>,
    },
    Image {
        source: ImageSource<'a>,
    },
    /// A thought with its signature, byte-identical to what the stream delivered.
    Thinking {
        thinking: &'a str,
        signature: &'a str,
    },
    RedactedThinking {
        data: &'a str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Value,
    },
    ToolResult {
        tool_use_id: &'a str,
        /// Left out when empty: the API refuses an empty text.
        #[serde(skip_serializing_if = "str::is_empty")]
        content: &'a str,
        is_error: bool,
    },
}

/// `{"type": "base64", "media_type", "data"}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename = "base64")]
pub(crate) struct ImageSource<'a> {
    pub(crate) media_type: &'a str,
    pub(crate) data: &'a str,
}

/// A prompt-cache breakpoint: the prefix up to and including the marked block is cached.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub(crate) enum CacheControl {
    Ephemeral,
}

/// `tool_choice`: only ever `{"type": "none"}` (the default, `auto`, is not sent).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub(crate) enum ToolChoice {
    None,
}

/// Extended thinking: `{"type": "enabled", "budget_tokens"}`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub(crate) enum Thinking {
    Enabled { budget_tokens: u32 },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Tool<'a> {
    pub(crate) name: &'a str,
    pub(crate) description: &'a str,
    pub(crate) input_schema: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) cache_control: Option<CacheControl>,
}

impl<'a> AnthropicBody<'a> {
    /// The streamed request for `req`. With a thinking budget, `max_tokens` is at least the budget
    /// plus [`THINKING_ANSWER_ROOM`](super::limits::THINKING_ANSWER_ROOM) (it must exceed the budget).
    pub(crate) fn chat(req: &'a ChatRequest) -> AnthropicBody<'a> {
        AnthropicBody { max_tokens: Some(max_tokens(req)), stream: Some(true), ..AnthropicBody::count(req) }
    }

    /// Everything but `max_tokens` and `stream`: what `count_tokens` reads. Prompt caching: a
    /// breakpoint on the last tool, on the system block and on the last block of the last message
    /// (three, within Anthropic's [`MAX_CACHE_BREAKPOINTS`]), so an append-only conversation
    /// reuses its prefix.
    pub(crate) fn count(req: &'a ChatRequest) -> AnthropicBody<'a> {
        let system = (!req.system.is_empty()).then(|| {
            [Block {
                kind: BlockKind::Text { text: Cow::Borrowed(&req.system) },
                cache_control: Some(CacheControl::Ephemeral),
            }]
        });
        let mut messages = wire_messages(&req.messages);
        let marked_message = mark_last_block(&mut messages);
        let mut tools: Option<Vec<Tool<'a>>> = (!req.tools.is_empty()).then(|| {
            req.tools
                .iter()
                .map(|t| Tool {
                    name: &t.name,
                    description: &t.description,
                    input_schema: &t.parameters,
                    cache_control: None,
                })
                .collect()
        });
        if let Some(last) = tools.as_mut().and_then(|t| t.last_mut()) {
            last.cache_control = Some(CacheControl::Ephemeral);
        }
        let breakpoints =
            usize::from(system.is_some()) + usize::from(marked_message) + usize::from(tools.is_some());
        debug_assert!(breakpoints <= MAX_CACHE_BREAKPOINTS);
        AnthropicBody {
            model: &req.model,
            system,
            messages,
            tool_choice: (tools.is_some() && req.tool_choice_none).then_some(ToolChoice::None),
            tools,
            thinking: req.thinking_budget.map(|budget_tokens| Thinking::Enabled { budget_tokens }),
            max_tokens: None,
            stream: None,
        }
    }
}

/// Puts a cache breakpoint on the last content block of the last message that may carry one
/// (thinking blocks cannot: the one before them is marked instead). True when one was marked.
fn mark_last_block(messages: &mut [Turn<'_>]) -> bool {
    let Some(last) = messages.last_mut() else { return false };
    let block = last
        .content
        .iter_mut()
        .rev()
        .find(|b| !matches!(b.kind, BlockKind::Thinking { .. } | BlockKind::RedactedThinking { .. }));
    match block {
        Some(block) => {
            block.cache_control = Some(CacheControl::Ephemeral);
            true
        }
        None => false,
    }
}

/// One turn while it is built: blocks that must come first (tool results in a user turn, thinking
/// in an assistant turn), then the rest in order.
struct Building<'a> {
    role: &'static str,
    first: Vec<Block<'a>>,
    rest: Vec<Block<'a>>,
}

fn block(kind: BlockKind<'_>) -> Block<'_> {
    Block { kind, cache_control: None }
}

/// agentd messages as Anthropic messages: roles alternate (consecutive user-side messages — user,
/// tool results, a mid-history system note — merge into one user turn, tool results first;
/// consecutive assistant messages merge too), and messages with nothing to send are left out.
fn wire_messages(messages: &[Message]) -> Vec<Turn<'_>> {
    let mut turns: Vec<Building<'_>> = Vec::with_capacity(messages.len());
    for message in messages {
        let turn = match message.role {
            Speaker::Assistant => assistant_turn(message),
            Speaker::User | Speaker::Tool | Speaker::System => user_turn(message),
        };
        if turn.first.is_empty() && turn.rest.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some(last) if last.role == turn.role => {
                last.first.extend(turn.first);
                last.rest.extend(turn.rest);
            }
            _ => turns.push(turn),
        }
    }
    turns
        .into_iter()
        .map(|t| {
            let mut content = t.first;
            content.extend(t.rest);
            Turn { role: t.role, content }
        })
        .collect()
}

/// Thinking blocks first, in their order (a signed thought byte-identical with its signature, a
/// redacted one as its `data`; an unsigned thought — another provider's reasoning — cannot be
/// verified by Anthropic and is not sent), then the text, then the tool calls.
fn assistant_turn(message: &Message) -> Building<'_> {
    let mut first = Vec::new();
    let mut rest = Vec::new();
    for part in &message.parts {
        match part {
            Part::Thinking { text, redacted: true, .. } => {
                first.push(block(BlockKind::RedactedThinking { data: text }));
            }
            Part::Thinking { text, signature: Some(signature), redacted: false } => {
                first.push(block(BlockKind::Thinking { thinking: text, signature }));
            }
            _ => {}
        }
    }
    let text = message.text();
    if !text.is_empty() {
        rest.push(block(BlockKind::Text { text: Cow::Owned(text) }));
    }
    for (id, name, arguments) in message.tool_calls() {
        rest.push(block(BlockKind::ToolUse { id, name, input: tool_input(arguments) }));
    }
    Building { role: "assistant", first, rest }
}

/// The `input` object of a tool call: its arguments parsed, or `{}` when they are not a JSON object
/// (the message keeps the raw text; the tool's answer tells the model what was wrong).
fn tool_input(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(v @ Value::Object(_)) => v,
        _ => Value::Object(Map::new()),
    }
}

/// Tool results first, then the text (consecutive text parts joined) and images in order. Empty
/// texts are left out: the API refuses them.
fn user_turn(message: &Message) -> Building<'_> {
    let mut first = Vec::new();
    let mut rest = Vec::new();
    let mut pending = String::new();
    let flush = |pending: &mut String, rest: &mut Vec<Block<'_>>| {
        if !pending.is_empty() {
            rest.push(block(BlockKind::Text { text: Cow::Owned(std::mem::take(pending)) }));
        }
    };
    for part in &message.parts {
        match part {
            Part::ToolResult { call_id, content, is_error } => {
                first.push(block(BlockKind::ToolResult {
                    tool_use_id: call_id,
                    content,
                    is_error: *is_error,
                }));
            }
            Part::Text { text } => pending.push_str(text),
            Part::Image { media_type, data } => {
                flush(&mut pending, &mut rest);
                rest.push(block(BlockKind::Image { source: ImageSource { media_type, data } }));
            }
            Part::Thinking { .. } | Part::ToolCall { .. } => {}
        }
    }
    flush(&mut pending, &mut rest);
    Building { role: "user", first, rest }
}

/// `count_tokens` for a bare text: one user message holding it as a plain string.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct CountTextBody<'a> {
    pub(crate) model: &'a str,
    pub(crate) messages: [TextTurn<'a>; 1],
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct TextTurn<'a> {
    pub(crate) role: &'static str,
    pub(crate) content: &'a str,
}

impl<'a> CountTextBody<'a> {
    pub(crate) fn new(model: &'a str, text: &'a str) -> CountTextBody<'a> {
        CountTextBody { model, messages: [TextTurn { role: "user", content: text }] }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentd_protocol::ToolSchema;
    use serde_json::json;

    /// The bodies as they were built before they had a type: `json!` values put together by hand.
    /// Kept verbatim, so the typed bodies are checked against the JSON agentd has always sent.
    mod legacy {
        use super::*;

        pub(super) fn body(req: &ChatRequest) -> Value {
            let mut body = count_body(req);
            body.insert("max_tokens".into(), json!(max_tokens(req)));
            body.insert("stream".into(), json!(true));
            Value::Object(body)
        }

        pub(super) fn count_tokens_body(req: &ChatRequest) -> Value {
            Value::Object(count_body(req))
        }

        fn count_body(req: &ChatRequest) -> Map<String, Value> {
            let mut body = Map::new();
            body.insert("model".into(), json!(req.model));
            if !req.system.is_empty() {
                body.insert(
                    "system".into(),
                    json!([{"type": "text", "text": req.system, "cache_control": ephemeral()}]),
                );
            }
            let mut messages = wire_messages(&req.messages);
            mark_last_block(&mut messages);
            body.insert("messages".into(), Value::Array(messages));
            if !req.tools.is_empty() {
                let mut tools: Vec<Value> = req
                    .tools
                    .iter()
                    .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
                    .collect();
                if let Some(Value::Object(last)) = tools.last_mut() {
                    last.insert("cache_control".into(), ephemeral());
                }
                body.insert("tools".into(), Value::Array(tools));
                if req.tool_choice_none {
                    body.insert("tool_choice".into(), json!({"type": "none"}));
                }
            }
            if let Some(budget) = req.thinking_budget {
                body.insert("thinking".into(), json!({"type": "enabled", "budget_tokens": budget}));
            }
            body
        }

        fn ephemeral() -> Value {
            json!({"type": "ephemeral"})
        }

        fn mark_last_block(messages: &mut [Value]) -> bool {
            let Some(Value::Array(content)) = messages.last_mut().and_then(|m| m.get_mut("content")) else {
                return false;
            };
            let block = content.iter_mut().rev().find(|b| {
                !matches!(b.get("type").and_then(Value::as_str), Some("thinking" | "redacted_thinking"))
            });
            match block {
                Some(Value::Object(block)) => {
                    block.insert("cache_control".into(), ephemeral());
                    true
                }
                _ => false,
            }
        }

        struct Turn {
            role: &'static str,
            first: Vec<Value>,
            rest: Vec<Value>,
        }

        fn wire_messages(messages: &[Message]) -> Vec<Value> {
            let mut turns: Vec<Turn> = Vec::with_capacity(messages.len());
            for message in messages {
                let turn = match message.role {
                    Speaker::Assistant => assistant_turn(message),
                    Speaker::User | Speaker::Tool | Speaker::System => user_turn(message),
                };
                if turn.first.is_empty() && turn.rest.is_empty() {
                    continue;
                }
                match turns.last_mut() {
                    Some(last) if last.role == turn.role => {
                        last.first.extend(turn.first);
                        last.rest.extend(turn.rest);
                    }
                    _ => turns.push(turn),
                }
            }
            turns
                .into_iter()
                .map(|t| {
                    let mut content = t.first;
                    content.extend(t.rest);
                    json!({"role": t.role, "content": content})
                })
                .collect()
        }

        fn assistant_turn(message: &Message) -> Turn {
            let mut first = Vec::new();
            let mut rest = Vec::new();
            for part in &message.parts {
                match part {
                    Part::Thinking { text, redacted: true, .. } => {
                        first.push(json!({"type": "redacted_thinking", "data": text}));
                    }
                    Part::Thinking { text, signature: Some(signature), redacted: false } => {
                        first.push(json!({"type": "thinking", "thinking": text, "signature": signature}));
                    }
                    _ => {}
                }
            }
            let text = message.text();
            if !text.is_empty() {
                rest.push(json!({"type": "text", "text": text}));
            }
            for (id, name, arguments) in message.tool_calls() {
                rest.push(
                    json!({"type": "tool_use", "id": id, "name": name, "input": tool_input(arguments)}),
                );
            }
            Turn { role: "assistant", first, rest }
        }

        fn tool_input(arguments: &str) -> Value {
            match serde_json::from_str::<Value>(arguments) {
                Ok(v @ Value::Object(_)) => v,
                _ => json!({}),
            }
        }

        fn user_turn(message: &Message) -> Turn {
            let mut first = Vec::new();
            let mut rest = Vec::new();
            let mut pending = String::new();
            let flush = |pending: &mut String, rest: &mut Vec<Value>| {
                if !pending.is_empty() {
                    rest.push(json!({"type": "text", "text": std::mem::take(pending)}));
                }
            };
            for part in &message.parts {
                match part {
                    Part::ToolResult { call_id, content, is_error } => {
                        let mut block = Map::new();
                        block.insert("type".into(), json!("tool_result"));
                        block.insert("tool_use_id".into(), json!(call_id));
                        if !content.is_empty() {
                            block.insert("content".into(), json!(content));
                        }
                        block.insert("is_error".into(), json!(is_error));
                        first.push(Value::Object(block));
                    }
                    Part::Text { text } => pending.push_str(text),
                    Part::Image { media_type, data } => {
                        flush(&mut pending, &mut rest);
                        rest.push(json!({
                            "type": "image",
                            "source": {"type": "base64", "media_type": media_type, "data": data},
                        }));
                    }
                    Part::Thinking { .. } | Part::ToolCall { .. } => {}
                }
            }
            flush(&mut pending, &mut rest);
            Turn { role: "user", first, rest }
        }
    }

    fn value(body: &impl Serialize) -> Value {
        serde_json::to_value(body).unwrap()
    }

    fn tool(name: &str) -> ToolSchema {
        ToolSchema {
            name: name.into(),
            description: format!("{name} things"),
            parameters: json!({"properties": {"path": {"type": "string"}}, "type": "object"}),
        }
    }

    fn signed(text: &str, signature: &str) -> Part {
        Part::Thinking { text: text.into(), signature: Some(signature.into()), redacted: false }
    }

    /// Requests that between them reach every branch of the mapping.
    fn corpus() -> Vec<ChatRequest> {
        let call = |id: &str, name: &str, arguments: &str| Part::ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        };
        let histories = vec![
            vec![],
            vec![Message::user("hi")],
            vec![
                Message::user("objective"),
                Message::user("checkpoint"),
                Message::new(
                    Speaker::Assistant,
                    vec![
                        Part::Text { text: "Reading.".into() },
                        signed("first", "sig1"),
                        call("a", "read_file", r#"{"path":"a"}"#),
                        Part::Thinking { text: "ZW5j".into(), signature: None, redacted: true },
                        Part::Thinking { text: "unsigned".into(), signature: None, redacted: false },
                        call("b", "list_dir", "{not json"),
                        call("c", "finish", "[1]"),
                    ],
                ),
                Message::tool_result("a", "fn main() {}", false),
                Message::user("also: hurry"),
                Message::tool_result("b", "", true),
                Message::system("a note"),
                Message::new(Speaker::User, vec![Part::Text { text: String::new() }]),
                Message::assistant_text("done"),
                Message::new(Speaker::Assistant, vec![]),
                Message::assistant_text("more"),
            ],
            vec![Message::new(
                Speaker::User,
                vec![
                    Part::Text { text: "look".into() },
                    Part::Text { text: " here".into() },
                    Part::Image { media_type: "image/png".into(), data: "AAAA".into() },
                    Part::Text { text: "and say ✓ \"this\"".into() },
                ],
            )],
            // A last turn that ends in thinking: the block before it is marked.
            vec![Message::new(
                Speaker::Assistant,
                vec![Part::Text { text: "so".into() }, signed("then", "s2")],
            )],
            // A last turn of thinking only: nothing to mark.
            vec![Message::user("q"), Message::new(Speaker::Assistant, vec![signed("hm", "s3")])],
            vec![Message::new(
                Speaker::User,
                vec![Part::Image { media_type: "image/gif".into(), data: "R0lG".into() }],
            )],
        ];
        let mut out = Vec::new();
        for messages in histories {
            for (system, tools, tool_choice_none, max_tokens, thinking_budget) in [
                ("be brief", vec![], false, None, None),
                ("", vec![tool("read_file")], true, Some(100), Some(1024)),
                (
                    "sys",
                    vec![tool("read_file"), tool("list_dir"), tool("finish")],
                    false,
                    Some(32_000),
                    Some(16_000),
                ),
                ("sys", vec![], true, None, Some(2048)),
            ] {
                out.push(ChatRequest {
                    model: "claude-x".into(),
                    system: system.into(),
                    messages: messages.clone(),
                    tools,
                    tool_choice_none,
                    max_tokens,
                    thinking_budget,
                    cache_key: None,
                });
            }
        }
        out
    }

    #[test]
    fn the_typed_bodies_are_the_json_that_was_always_sent() {
        for req in corpus() {
            assert_eq!(value(&AnthropicBody::chat(&req)), legacy::body(&req), "{req:?}");
            assert_eq!(value(&AnthropicBody::count(&req)), legacy::count_tokens_body(&req), "{req:?}");
        }
    }

    #[test]
    fn snapshot_of_a_full_body() {
        let req = &corpus()[10];
        assert_eq!(
            serde_json::to_string(&AnthropicBody::chat(req)).unwrap(),
            concat!(
                r#"{"model":"claude-x","system":[{"type":"text","text":"sys","cache_control":{"type":"ephemeral"}}],"#,
                r#""messages":[{"role":"user","content":[{"type":"text","text":"objective"},{"type":"text","text":"checkpoint"}]},"#,
                r#"{"role":"assistant","content":[{"type":"thinking","thinking":"first","signature":"sig1"},"#,
                r#"{"type":"redacted_thinking","data":"ZW5j"},{"type":"text","text":"Reading."},"#,
                r#"{"type":"tool_use","id":"a","name":"read_file","input":{"path":"a"}},"#,
                r#"{"type":"tool_use","id":"b","name":"list_dir","input":{}},"#,
                r#"{"type":"tool_use","id":"c","name":"finish","input":{}}]},"#,
                r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":"fn main() {}","is_error":false},"#,
                r#"{"type":"tool_result","tool_use_id":"b","is_error":true},"#,
                r#"{"type":"text","text":"also: hurry"},{"type":"text","text":"a note"}]},"#,
                r#"{"role":"assistant","content":[{"type":"text","text":"done"},{"type":"text","text":"more","cache_control":{"type":"ephemeral"}}]}],"#,
                r#""tools":[{"name":"read_file","description":"read_file things","input_schema":{"properties":{"path":{"type":"string"}},"type":"object"}},"#,
                r#"{"name":"list_dir","description":"list_dir things","input_schema":{"properties":{"path":{"type":"string"}},"type":"object"}},"#,
                r#"{"name":"finish","description":"finish things","input_schema":{"properties":{"path":{"type":"string"}},"type":"object"},"cache_control":{"type":"ephemeral"}}],"#,
                r#""thinking":{"type":"enabled","budget_tokens":16000},"max_tokens":32000,"stream":true}"#,
            )
        );
    }

    #[test]
    fn count_text_body() {
        assert_eq!(
            value(&CountTextBody::new("claude-x", "a")),
            json!({"model": "claude-x", "messages": [{"role": "user", "content": "a"}]})
        );
    }
}
