//! A chat request, either protocol, answered from the script: the server counts it, records the
//! count and what its prompt cache served, refuses it when it is over the window, else takes the
//! next step (waiting out a delay unless the client hangs up) and sends the reply with its usage, or
//! the scripted fault.

use serde_json::Value;

use super::faults::fault_response;
use super::send::{send_stream, send_trickled, Pace};
use crate::anthropic;
use crate::http::Conn;
use crate::openai::{self, Frame};
use crate::responses;
use crate::script::{with_raw_usage, Config, Reply, State, Step, Usage};

/// The wire protocol of a chat request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Protocol {
    /// `POST /v1/chat/completions`.
    OpenAi,
    /// `POST /v1/messages`.
    Anthropic,
    /// `POST /v1/responses`.
    Responses,
}

/// Answers a chat request (either protocol) from the script.
pub(super) async fn chat(conn: &mut Conn, state: &State, body: &Value, protocol: Protocol) {
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    // A Responses body is counted, cached and answered as the chat body of its conversation.
    let chat_body = match protocol {
        Protocol::Responses => std::borrow::Cow::Owned(responses::as_chat(body)),
        Protocol::OpenAi | Protocol::Anthropic => std::borrow::Cow::Borrowed(body),
    };
    let parts = crate::count::Parts::of(&chat_body);
    let counted = parts.total();
    let over = state.config.window.is_some_and(|w| counted > w);
    let cached = state.record_count(&parts, crate::cache::Prompt::of(&chat_body), over);
    if let (true, Some(limit)) = (over, state.config.window) {
        let step = crate::context_length_exceeded(limit, counted);
        let Step::Fault(fault) = step else { return };
        let frame = Frame { id: "chatcmpl-refused", model: &state.config.model };
        let _ = fault_response(conn, &frame, &fault, stream, body, protocol).await;
        return;
    }
    let Some(mut step) = state.next_step(&chat_body) else {
        let exhausted = match protocol {
            Protocol::OpenAi | Protocol::Responses => openai::script_exhausted(),
            Protocol::Anthropic => anthropic::script_exhausted(),
        };
        let _ = conn.send_json(500, &[], &exhausted).await;
        return;
    };
    let mut id = state.next_completion_id();
    match protocol {
        Protocol::Anthropic => id = id.replacen("chatcmpl-", "msg_scripted_", 1),
        Protocol::Responses => id = id.replacen("chatcmpl-", "resp_scripted_", 1),
        Protocol::OpenAi => {}
    }
    let frame = Frame { id: &id, model: &state.config.model };
    let mut pace = None;
    loop {
        match step {
            Step::Delayed(delay, inner) => {
                tokio::select! {
                    _ = tokio::time::sleep(delay) => step = *inner,
                    // The client gave up while we were "thinking".
                    _ = conn.wait_for_disconnect() => return,
                }
            }
            Step::Trickled { bytes, every, step: inner } => {
                pace = Some(Pace { bytes, every });
                step = *inner;
            }
            Step::Respond(reply) => {
                let usage = usage_of(&state.config, &reply, counted, cached);
                let _ = respond(conn, &frame, &reply, usage, stream, protocol, pace).await;
                return;
            }
            Step::Fault(fault) => {
                let _ = fault_response(conn, &frame, &fault, stream, body, protocol).await;
                return;
            }
        }
    }
}

/// The usage a reply reports: the scripted one; with `report_usage`, the server's own count of the
/// prompt and what its cache served, with the scripted completion figure (else the reply's own
/// tokens); under silent truncation, the prompt as cut (the truth a usage report tells).
fn usage_of(config: &Config, reply: &Reply, counted: u64, cached: u64) -> Option<Usage> {
    let mut usage = Usage::scripted(reply);
    if reply.raw_usage.is_some() {
        return usage;
    }
    if config.report_usage {
        let completion = reply
            .usage
            .map_or_else(|| crate::count::reply_tokens(&reply.chunks), |(_, completion)| completion);
        usage = Some(Usage { prompt: counted, completion, cached: Some(cached), raw: false });
    }
    if let Some(cut) = config.silent_truncation_at {
        let prompt = counted.min(cut);
        let cached = usage.and_then(|u| u.cached).map(|c| c.min(prompt));
        usage = Some(Usage { prompt, completion: usage.map_or(8, |u| u.completion), cached, raw: false });
    }
    usage
}

async fn respond(
    conn: &mut Conn,
    frame: &Frame<'_>,
    reply: &Reply,
    usage: Option<Usage>,
    stream: bool,
    protocol: Protocol,
    pace: Option<Pace>,
) -> std::io::Result<()> {
    let (body, events) = match (protocol, stream) {
        (Protocol::Anthropic, false) => (Some(anthropic::message(frame, reply, usage)), Vec::new()),
        (Protocol::Anthropic, true) => (None, anthropic::stream_events(frame, reply, usage)),
        (Protocol::Responses, false) => (Some(responses::response(frame, reply, usage)), Vec::new()),
        (Protocol::Responses, true) => (None, responses::stream_events(frame, reply, usage)),
        (Protocol::OpenAi, false) => (Some(openai::completion(frame, reply, usage)), Vec::new()),
        (Protocol::OpenAi, true) => (None, openai::stream_events(frame, reply, usage)),
    };
    match body {
        Some(body) => {
            let text = with_raw_usage(body.to_string(), reply);
            conn.send_response(200, "application/json", &[], text.as_bytes()).await
        }
        None => {
            let events = events.into_iter().map(|e| with_raw_usage(e, reply)).collect();
            match pace {
                None => send_stream(conn, events).await,
                Some(pace) => send_trickled(conn, events, pace).await,
            }
        }
    }
}
