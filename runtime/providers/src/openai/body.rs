//! OpenAI chat completions on the wire, as serde structs: the body a [`ChatRequest`] is POSTed as to
//! `{base}/chat/completions`, and the small bodies of the window probe and the counting endpoints.
//! A field that is `None` (or an empty list where the wire has none) is left out, not sent as null.

use crate::wire::{data_url, pieces, Piece};
use agentd_protocol::ChatRequest;
use agentd_protocol::{Message, Part, Speaker};
use serde::Serialize;
use serde_json::Value;
use std::borrow::Cow;

/// The JSON [`OpenAiClient::chat`](super::OpenAiClient::chat) POSTs: `model`, the messages (the
/// system prompt first, when there is one), `stream` with `stream_options.include_usage`, the tools
/// (and `tool_choice: "none"` to keep but forbid them), `max_tokens` when the request names one,
/// `prompt_cache_key` when the request has a cache key and the server has not refused the field.
/// Extended thinking has no field here: the OpenAI wire ignores a thinking budget.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpenAiBody<'a> {
    pub(crate) model: &'a str,
    pub(crate) messages: Vec<WireMessage<'a>>,
    pub(crate) stream: bool,
    /// Asks for the usage in the stream's last chunk; not sent on an unstreamed request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) stream_options: Option<StreamOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tools: Option<Vec<WireTool<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tool_choice: Option<ToolChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) max_tokens: Option<u32>,
    /// The request's cache key, so that requests sharing a prefix reach the same cache (OpenAI).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) prompt_cache_key: Option<&'a str>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct StreamOptions {
    pub(crate) include_usage: bool,
}

/// `tool_choice`: only ever `"none"` (the default, `"auto"`, is not sent).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ToolChoice {
    None,
}

/// One chat message, tagged by its `role`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub(crate) enum WireMessage<'a> {
    System {
        content: Cow<'a, str>,
    },
    User {
        content: UserContent<'a>,
    },
    Assistant {
        /// `null` when the turn is only tool calls.
        content: Option<String>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<WireToolCall<'a>>,
        /// The turn's reasoning, sent back as vLLM and DeepSeek name it.
        #[serde(skip_serializing_if = "String::is_empty")]
        reasoning_content: String,
    },
    Tool {
        tool_call_id: &'a str,
        content: &'a str,
    },
}

/// A user message's content: a plain string, or items when it holds an image.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub(crate) enum UserContent<'a> {
    Text(String),
    Items(Vec<ContentItem<'a>>),
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum ContentItem<'a> {
    Text { text: Cow<'a, str> },
    ImageUrl { image_url: ImageUrl },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ImageUrl {
    /// A `data:` URL holding the image.
    pub(crate) url: String,
}

/// `{"id", "type": "function", "function": {"name", "arguments"}}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename = "function")]
pub(crate) struct WireToolCall<'a> {
    pub(crate) id: &'a str,
    pub(crate) function: FunctionCall<'a>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct FunctionCall<'a> {
    pub(crate) name: &'a str,
    /// The arguments' JSON text, as the model wrote it.
    pub(crate) arguments: &'a str,
}

/// `{"type": "function", "function": {"name", "description", "parameters"}}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename = "function")]
pub(crate) struct WireTool<'a> {
    pub(crate) function: Function<'a>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Function<'a> {
    pub(crate) name: &'a str,
    pub(crate) description: &'a str,
    pub(crate) parameters: &'a Value,
}

impl<'a> OpenAiBody<'a> {
    /// The streamed request for `req`.
    pub(crate) fn new(req: &'a ChatRequest) -> OpenAiBody<'a> {
        let mut messages = Vec::with_capacity(req.messages.len() + 1);
        if !req.system.is_empty() {
            messages.push(WireMessage::System { content: Cow::Borrowed(&req.system) });
        }
        for message in &req.messages {
            wire_messages(message, &mut messages);
        }
        let tools = (!req.tools.is_empty()).then(|| {
            req.tools
                .iter()
                .map(|t| WireTool {
                    function: Function {
                        name: &t.name,
                        description: &t.description,
                        parameters: &t.parameters,
                    },
                })
                .collect()
        });
        OpenAiBody {
            model: &req.model,
            messages,
            stream: true,
            stream_options: Some(StreamOptions { include_usage: true }),
            tool_choice: (tools.is_some() && req.tool_choice_none).then_some(ToolChoice::None),
            tools,
            max_tokens: req.max_tokens,
            prompt_cache_key: None,
        }
    }

    /// The same request with `prompt_cache_key`.
    pub(crate) fn with_cache_key(self, key: &'a str) -> OpenAiBody<'a> {
        OpenAiBody { prompt_cache_key: Some(key), ..self }
    }

    /// The same request without streaming (and so without `stream_options`).
    pub(crate) fn unstreamed(self) -> OpenAiBody<'a> {
        OpenAiBody { stream: false, stream_options: None, ..self }
    }
}

/// One agentd message as OpenAI chat messages (a tool message holding several results becomes one
/// `role: tool` message per result).
fn wire_messages<'a>(message: &'a Message, out: &mut Vec<WireMessage<'a>>) {
    match message.role {
        Speaker::System => out.push(WireMessage::System { content: Cow::Owned(message.text()) }),
        Speaker::Assistant => out.push(wire_assistant(message)),
        Speaker::User | Speaker::Tool => {
            for part in &message.parts {
                if let Part::ToolResult { call_id, content, .. } = part {
                    out.push(WireMessage::Tool { tool_call_id: call_id, content });
                }
            }
            // Whatever else the message says is the user's.
            if let Some(content) = user_content(message) {
                out.push(WireMessage::User { content });
            }
        }
    }
}

fn wire_assistant(message: &Message) -> WireMessage<'_> {
    let text = message.text();
    let tool_calls: Vec<WireToolCall<'_>> = message
        .tool_calls()
        .map(|(id, name, arguments)| WireToolCall { id, function: FunctionCall { name, arguments } })
        .collect();
    let mut reasoning_content = String::new();
    for part in &message.parts {
        if let Part::Thinking { text, redacted: false, .. } = part {
            reasoning_content.push_str(text);
        }
    }
    let content = if text.is_empty() && !tool_calls.is_empty() { None } else { Some(text) };
    WireMessage::Assistant { content, tool_calls, reasoning_content }
}

/// A user message's content: a string, or an array of text and image items when it holds an image.
/// `None` when it has neither text nor image (a message made only of tool results).
fn user_content(message: &Message) -> Option<UserContent<'_>> {
    let has_image = message.parts.iter().any(|p| matches!(p, Part::Image { .. }));
    let has_text = message.parts.iter().any(|p| matches!(p, Part::Text { .. }));
    if !has_image {
        return has_text.then(|| UserContent::Text(message.text()));
    }
    let items = pieces(message)
        .into_iter()
        .map(|piece| match piece {
            Piece::Text(text) => ContentItem::Text { text: Cow::Owned(text) },
            Piece::Image { media_type, data } => {
                ContentItem::ImageUrl { image_url: ImageUrl { url: data_url(media_type, data) } }
            }
        })
        .collect();
    Some(UserContent::Items(items))
}

/// Ollama's `POST {root}/api/show`: the model, under both names Ollama versions have read.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ShowBody<'a> {
    pub(crate) model: &'a str,
    pub(crate) name: &'a str,
}

/// `POST {root}/tokenize`: vLLM's fields (`model`, `prompt`, `add_special_tokens`), and unless
/// the server wants vLLM's alone, llama.cpp's (`content`, `add_special`) beside them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct TokenizeBody<'a> {
    pub(crate) model: &'a str,
    pub(crate) prompt: &'a str,
    pub(crate) add_special_tokens: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) add_special: Option<bool>,
}

impl<'a> TokenizeBody<'a> {
    /// The tokens of `text` without special tokens, in vLLM's fields alone.
    pub(crate) fn vllm(model: &'a str, text: &'a str) -> TokenizeBody<'a> {
        TokenizeBody { model, prompt: text, add_special_tokens: false, content: None, add_special: None }
    }

    /// The same, readable by vLLM and llama.cpp alike.
    pub(crate) fn both(model: &'a str, text: &'a str) -> TokenizeBody<'a> {
        TokenizeBody { content: Some(text), add_special: Some(false), ..TokenizeBody::vllm(model, text) }
    }
}

/// llama-cpp-python's `POST {root}/extras/tokenize/count`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ExtrasCountBody<'a> {
    pub(crate) input: &'a str,
    pub(crate) model: &'a str,
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentd_protocol::ToolSchema;
    use serde_json::json;

    /// The body as it was built before it had a type: `json!` values put together by hand. Kept
    /// verbatim, so the typed body is checked against the JSON agentd has always sent.
    mod legacy {
        use super::*;
        use serde_json::Map;

        pub(super) fn body(req: &ChatRequest) -> Value {
            let mut messages = Vec::with_capacity(req.messages.len() + 1);
            if !req.system.is_empty() {
                messages.push(json!({"role": "system", "content": req.system}));
            }
            for message in &req.messages {
                wire_messages(message, &mut messages);
            }
            let mut body = Map::new();
            body.insert("model".into(), json!(req.model));
            body.insert("messages".into(), Value::Array(messages));
            body.insert("stream".into(), json!(true));
            body.insert("stream_options".into(), json!({"include_usage": true}));
            if !req.tools.is_empty() {
                let tools: Vec<Value> = req
                    .tools
                    .iter()
                    .map(|t| {
                        json!({
                            "type": "function",
                            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
                        })
                    })
                    .collect();
                body.insert("tools".into(), Value::Array(tools));
                if req.tool_choice_none {
                    body.insert("tool_choice".into(), json!("none"));
                }
            }
            if let Some(max_tokens) = req.max_tokens {
                body.insert("max_tokens".into(), json!(max_tokens));
            }
            Value::Object(body)
        }

        pub(super) fn unstreamed(req: &ChatRequest) -> Value {
            let mut body = body(req);
            if let Some(o) = body.as_object_mut() {
                o.insert("stream".into(), Value::Bool(false));
                o.remove("stream_options");
            }
            body
        }

        fn wire_messages(message: &Message, out: &mut Vec<Value>) {
            match message.role {
                Speaker::System => out.push(json!({"role": "system", "content": message.text()})),
                Speaker::Assistant => out.push(wire_assistant(message)),
                Speaker::User | Speaker::Tool => {
                    for part in &message.parts {
                        if let Part::ToolResult { call_id, content, .. } = part {
                            out.push(json!({"role": "tool", "tool_call_id": call_id, "content": content}));
                        }
                    }
                    if let Some(content) = user_content(message) {
                        out.push(json!({"role": "user", "content": content}));
                    }
                }
            }
        }

        fn wire_assistant(message: &Message) -> Value {
            let text = message.text();
            let tool_calls: Vec<Value> = message
                .tool_calls()
                .map(|(id, name, arguments)| {
                    json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
                })
                .collect();
            let mut reasoning = String::new();
            for part in &message.parts {
                if let Part::Thinking { text, redacted: false, .. } = part {
                    reasoning.push_str(text);
                }
            }
            let mut wire = Map::new();
            wire.insert("role".into(), json!("assistant"));
            let content =
                if text.is_empty() && !tool_calls.is_empty() { Value::Null } else { Value::String(text) };
            wire.insert("content".into(), content);
            if !tool_calls.is_empty() {
                wire.insert("tool_calls".into(), Value::Array(tool_calls));
            }
            if !reasoning.is_empty() {
                wire.insert("reasoning_content".into(), Value::String(reasoning));
            }
            Value::Object(wire)
        }

        fn user_content(message: &Message) -> Option<Value> {
            let has_image = message.parts.iter().any(|p| matches!(p, Part::Image { .. }));
            let has_text = message.parts.iter().any(|p| matches!(p, Part::Text { .. }));
            if !has_image {
                return has_text.then(|| Value::String(message.text()));
            }
            let mut items: Vec<Value> = Vec::new();
            let mut pending = String::new();
            for part in &message.parts {
                match part {
                    Part::Text { text } => pending.push_str(text),
                    Part::Image { media_type, data } => {
                        if !pending.is_empty() {
                            items.push(json!({"type": "text", "text": std::mem::take(&mut pending)}));
                        }
                        items.push(json!({
                            "type": "image_url",
                            "image_url": {"url": format!("data:{media_type};base64,{data}")},
                        }));
                    }
                    _ => {}
                }
            }
            if !pending.is_empty() {
                items.push(json!({"type": "text", "text": pending}));
            }
            Some(Value::Array(items))
        }
    }

    fn value(body: &impl Serialize) -> Value {
        serde_json::to_value(body).unwrap()
    }

    fn tool(name: &str) -> ToolSchema {
        ToolSchema {
            name: name.into(),
            description: format!("{name} things"),
            parameters: json!({"properties": {"path": {"type": "string"}}, "required": ["path"], "type": "object"}),
        }
    }

    /// Requests that between them reach every branch of the mapping.
    fn corpus() -> Vec<ChatRequest> {
        let call = |id: &str, name: &str, arguments: &str| Part::ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        };
        let thought = |text: &str, redacted| Part::Thinking { text: text.into(), signature: None, redacted };
        let histories = vec![
            vec![],
            vec![Message::user("hi")],
            vec![
                Message::user("go"),
                Message::new(
                    Speaker::Assistant,
                    vec![
                        thought("look ", false),
                        thought("c2VjcmV0", true),
                        thought("first", false),
                        call("c1", "read_file", r#"{"path":"a"}"#),
                        call("c2", "list_dir", "{not json"),
                    ],
                ),
                Message::new(
                    Speaker::Tool,
                    vec![
                        Part::ToolResult {
                            call_id: "c1".into(),
                            content: "fn main() {}".into(),
                            is_error: false,
                        },
                        Part::ToolResult { call_id: "c2".into(), content: String::new(), is_error: true },
                    ],
                ),
                Message::new(
                    Speaker::Tool,
                    vec![
                        Part::ToolResult { call_id: "c3".into(), content: "r".into(), is_error: false },
                        Part::Text { text: "and a note".into() },
                    ],
                ),
                Message::assistant_text("done"),
                Message::new(Speaker::Assistant, vec![]),
                Message::new(
                    Speaker::Assistant,
                    vec![Part::Text { text: "so ".into() }, call("c4", "finish", "{}")],
                ),
                Message::system("a mid-history note"),
                Message::new(Speaker::System, vec![]),
            ],
            vec![
                Message::new(
                    Speaker::User,
                    vec![
                        Part::Text { text: "look".into() },
                        Part::Text { text: " here".into() },
                        Part::Image { media_type: "image/png".into(), data: "AAAA".into() },
                        Part::Image { media_type: "image/jpeg".into(), data: "BBBB".into() },
                        Part::Text { text: "and say".into() },
                    ],
                ),
                Message::new(
                    Speaker::User,
                    vec![Part::Image { media_type: "image/gif".into(), data: "R0lG".into() }],
                ),
                Message::new(Speaker::User, vec![Part::Text { text: String::new() }]),
                Message::new(Speaker::User, vec![]),
                Message::user("unicode ✓ \"quoted\" \\ \n"),
            ],
        ];
        let mut out = Vec::new();
        for messages in histories {
            for (system, tools, tool_choice_none, max_tokens, thinking_budget) in [
                ("be brief", vec![], false, None, None),
                ("", vec![tool("read_file")], true, Some(512), Some(4096)),
                ("sys", vec![tool("read_file"), tool("list_dir")], false, Some(1), None),
                ("sys", vec![], true, None, Some(1024)),
            ] {
                out.push(ChatRequest {
                    model: "m".into(),
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
    fn the_typed_body_is_the_json_that_was_always_sent() {
        for req in corpus() {
            assert_eq!(value(&OpenAiBody::new(&req)), legacy::body(&req), "{req:?}");
            assert_eq!(value(&OpenAiBody::new(&req).unstreamed()), legacy::unstreamed(&req), "{req:?}");
        }
    }

    #[test]
    fn snapshot_of_a_full_body() {
        let req = &corpus()[10];
        assert_eq!(
            serde_json::to_string(&OpenAiBody::new(req)).unwrap(),
            concat!(
                r#"{"model":"m","messages":[{"role":"system","content":"sys"},{"role":"user","content":"go"},"#,
                r#"{"role":"assistant","content":null,"tool_calls":["#,
                r#"{"type":"function","id":"c1","function":{"name":"read_file","arguments":"{\"path\":\"a\"}"}},"#,
                r#"{"type":"function","id":"c2","function":{"name":"list_dir","arguments":"{not json"}}],"#,
                r#""reasoning_content":"look first"},"#,
                r#"{"role":"tool","tool_call_id":"c1","content":"fn main() {}"},"#,
                r#"{"role":"tool","tool_call_id":"c2","content":""},"#,
                r#"{"role":"tool","tool_call_id":"c3","content":"r"},{"role":"user","content":"and a note"},"#,
                r#"{"role":"assistant","content":"done"},{"role":"assistant","content":""},"#,
                r#"{"role":"assistant","content":"so ","tool_calls":[{"type":"function","id":"c4","function":{"name":"finish","arguments":"{}"}}]},"#,
                r#"{"role":"system","content":"a mid-history note"},{"role":"system","content":""}],"#,
                r#""stream":true,"stream_options":{"include_usage":true},"#,
                r#""tools":[{"type":"function","function":{"name":"read_file","description":"read_file things","parameters":{"properties":{"path":{"type":"string"}},"required":["path"],"type":"object"}}},"#,
                r#"{"type":"function","function":{"name":"list_dir","description":"list_dir things","parameters":{"properties":{"path":{"type":"string"}},"required":["path"],"type":"object"}}}],"#,
                r#""max_tokens":1}"#,
            )
        );
    }

    #[test]
    fn probe_and_count_bodies() {
        assert_eq!(value(&ShowBody { model: "q", name: "q" }), json!({"model": "q", "name": "q"}));
        assert_eq!(
            value(&TokenizeBody::vllm("q", "hi")),
            json!({"model": "q", "prompt": "hi", "add_special_tokens": false})
        );
        assert_eq!(
            value(&TokenizeBody::both("q", "hi")),
            json!({"model": "q", "prompt": "hi", "add_special_tokens": false, "content": "hi", "add_special": false})
        );
        assert_eq!(value(&ExtrasCountBody { input: "hi", model: "q" }), json!({"input": "hi", "model": "q"}));
    }
}
