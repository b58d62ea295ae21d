//! A scripted [`Fault`] on the wire, in the shapes of the protocol the request came in: OpenAI's
//! error bodies and `Retry-After` (the Responses API's too, with its own refusal over the window
//! and its own streams), or Anthropic's `{"type":"error",…}` bodies, `retry-after` and
//! "prompt is too long"; and streams cut, empty or silent as each provider's would be.

use serde_json::Value;

use super::chat::Protocol;
use super::send::{hang, html_body, keep_alive_only, send_events, send_half_json, send_stream};
use crate::anthropic;
use crate::http::Conn;
use crate::openai::{self, Frame};
use crate::responses;
use crate::script::{Fault, Reply};

/// The status line keeps a sane status even for odd scripted ones.
fn sane_status(status: u16) -> u16 {
    if (100..=999).contains(&status) {
        status
    } else {
        500
    }
}

pub(super) async fn fault_response(
    conn: &mut Conn,
    frame: &Frame<'_>,
    fault: &Fault,
    stream: bool,
    body: &Value,
    protocol: Protocol,
) -> std::io::Result<()> {
    match protocol {
        Protocol::Anthropic => return anthropic_fault(conn, frame, fault, stream).await,
        Protocol::Responses => {
            if let Some(sent) = responses_fault(conn, frame, fault, stream).await {
                return sent;
            }
        }
        Protocol::OpenAi => {}
    }
    match fault {
        Fault::RateLimited { retry_after } => {
            let headers: Vec<(&str, String)> =
                retry_after.iter().map(|v| ("Retry-After", v.clone())).collect();
            let error = openai::rate_limited(frame.model, retry_after.as_deref());
            conn.send_json(429, &headers, &error).await
        }
        Fault::QuotaExhausted => {
            let error = openai::error(
                "You exceeded your current quota, please check your plan and billing details.",
                "insufficient_quota",
                None,
                Some("insufficient_quota"),
            );
            conn.send_json(429, &[("Retry-After", "20".to_string())], &error).await
        }
        Fault::ServerError { status, message } => {
            let status = sane_status(*status);
            conn.send_json(status, &[], &openai::server_error(status, message)).await
        }
        Fault::ContextLengthExceeded { limit, requested } => {
            let error = openai::context_length_exceeded(*limit, *requested, body);
            conn.send_json(400, &[], &error).await
        }
        // No terminating chunk: the caller closes the connection.
        Fault::CutStream(chunks) if stream => {
            send_events(conn, openai::cut_stream_events(frame, chunks)).await
        }
        Fault::CutStream(chunks) => {
            let reply = Reply { chunks: chunks.clone(), ..Reply::default() };
            send_half_json(conn, &openai::completion(frame, &reply, None)).await
        }
        Fault::EmptyStream if stream => send_stream(conn, vec![openai::DONE.to_string()]).await,
        Fault::SilentStream if stream => send_stream(conn, Vec::new()).await,
        Fault::EmptyStream | Fault::SilentStream => {
            conn.send_json(200, &[], &openai::empty_completion(frame)).await
        }
        Fault::Hang => hang(conn, stream).await,
        Fault::KeepAliveOnly { every } => keep_alive_only(conn, stream, *every).await,
        Fault::HtmlBody => html_body(conn).await,
    }
}

/// A fault where the Responses API differs from chat completions: its refusal over the window
/// (which states no number), and its streams cut or empty; `None` for a fault both answer alike (the
/// same error bodies and headers).
async fn responses_fault(
    conn: &mut Conn,
    frame: &Frame<'_>,
    fault: &Fault,
    stream: bool,
) -> Option<std::io::Result<()>> {
    Some(match fault {
        Fault::ContextLengthExceeded { .. } => {
            conn.send_json(400, &[], &responses::context_length_exceeded()).await
        }
        // No terminating chunk: the caller closes the connection.
        Fault::CutStream(chunks) if stream => {
            send_events(conn, responses::cut_stream_events(frame, chunks)).await
        }
        Fault::CutStream(chunks) => {
            let reply = Reply { chunks: chunks.clone(), ..Reply::default() };
            send_half_json(conn, &responses::response(frame, &reply, None)).await
        }
        Fault::EmptyStream if stream => send_stream(conn, responses::empty_stream_events(frame)).await,
        Fault::EmptyStream | Fault::SilentStream if !stream => {
            conn.send_json(200, &[], &responses::empty_response(frame)).await
        }
        _ => return None,
    })
}

/// A fault in Anthropic's shapes: `{"type":"error","error":{…}}` bodies, `retry-after` on a 429, a
/// 529 `overloaded_error`, "prompt is too long", and streams cut or empty as Anthropic's would be.
async fn anthropic_fault(
    conn: &mut Conn,
    frame: &Frame<'_>,
    fault: &Fault,
    stream: bool,
) -> std::io::Result<()> {
    match fault {
        Fault::RateLimited { retry_after } => {
            let headers: Vec<(&str, String)> =
                retry_after.iter().map(|v| ("retry-after", v.clone())).collect();
            conn.send_json(429, &headers, &anthropic::rate_limited()).await
        }
        Fault::QuotaExhausted => {
            let error = anthropic::error(
                "billing_error",
                "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing.",
            );
            conn.send_json(402, &[], &error).await
        }
        Fault::ServerError { status, message } => {
            let status = sane_status(*status);
            conn.send_json(status, &[], &anthropic::server_error(status, message)).await
        }
        Fault::ContextLengthExceeded { limit, requested } => {
            conn.send_json(400, &[], &anthropic::prompt_too_long(*limit, *requested)).await
        }
        // No terminating chunk: the caller closes the connection.
        Fault::CutStream(chunks) if stream => {
            send_events(conn, anthropic::cut_stream_events(frame, chunks)).await
        }
        Fault::CutStream(chunks) => {
            let reply = Reply { chunks: chunks.clone(), ..Reply::default() };
            send_half_json(conn, &anthropic::message(frame, &reply, None)).await
        }
        Fault::SilentStream if stream => send_stream(conn, Vec::new()).await,
        Fault::EmptyStream if stream => send_stream(conn, anthropic::empty_stream_events(frame)).await,
        Fault::EmptyStream | Fault::SilentStream => {
            conn.send_json(200, &[], &anthropic::empty_message(frame)).await
        }
        Fault::Hang => hang(conn, stream).await,
        Fault::KeepAliveOnly { every } => keep_alive_only(conn, stream, *every).await,
        Fault::HtmlBody => html_body(conn).await,
    }
}
