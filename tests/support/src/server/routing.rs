//! The accept loop and request routing: one task per connection reads one request (bounded in
//! time), records it, and answers it by method and path — the models list, the chat endpoints of
//! the three protocols, Anthropic's token count, and the optional `/tokenize`, `/api/show` and `/props`.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use super::chat::{chat, Protocol};
use crate::anthropic;
use crate::http::{Conn, ReadError, Request};
use crate::openai;
use crate::script::{strip_query, RecordedRequest, State};
use crate::{
    CHAT_PATH, COUNT_TOKENS_PATH, MESSAGES_PATH, MODELS_PATH, OLLAMA_SHOW_PATH, PROPS_PATH, RESPONSES_PATH,
    TOKENIZE_PATH,
};

/// How long a client may take to send a complete request.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Accepts connections until the server is dropped, each served by its own task (aborted with the
/// loop's `JoinSet`).
pub(super) async fn accept_loop(listener: TcpListener, state: Arc<State>) {
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        match listener.accept().await {
            Ok((stream, _)) => {
                connections.spawn(handle_connection(stream, state.clone()));
            }
            // E.g. EMFILE: back off instead of spinning.
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

async fn handle_connection(stream: TcpStream, state: Arc<State>) {
    let _guard = state.connection_guard();
    let mut conn = Conn::new(stream);
    let request = match tokio::time::timeout(READ_TIMEOUT, conn.read_request()).await {
        Err(_) | Ok(Err(ReadError::Closed)) => return,
        Ok(Err(ReadError::Malformed(msg))) => {
            let _ =
                conn.send_json(400, &[], &openai::bad_request(&format!("malformed request: {msg}"))).await;
            conn.close().await;
            return;
        }
        Ok(Err(ReadError::TooLarge { status, message })) => {
            let _ = conn.send_json(status, &[], &openai::bad_request(&message)).await;
            conn.close().await;
            return;
        }
        Ok(Ok(request)) => request,
    };

    let body: Option<Value> = serde_json::from_slice(&request.body).ok();
    state.record(RecordedRequest {
        method: request.method.clone(),
        path: request.target.clone(),
        headers: request.headers.clone(),
        body: body.clone().unwrap_or(Value::Null),
        received: std::time::Instant::now(),
    });

    route(&mut conn, &state, &request, body).await;
    conn.close().await;
}

async fn route(conn: &mut Conn, state: &State, request: &Request, body: Option<Value>) {
    let path = strip_query(&request.target);
    let method = request.method.as_str();
    let result = match (method, path) {
        ("GET", MODELS_PATH) => {
            let models = openai::models(&state.config.model, state.config.max_model_len);
            conn.send_json(200, &[], &models).await
        }
        ("POST", CHAT_PATH) => match body {
            Some(body @ Value::Object(_)) => {
                chat(conn, state, &body, Protocol::OpenAi).await;
                Ok(())
            }
            _ => conn.send_json(400, &[], &openai::invalid_json()).await,
        },
        ("POST", RESPONSES_PATH) => match body {
            Some(body @ Value::Object(_)) => {
                chat(conn, state, &body, Protocol::Responses).await;
                Ok(())
            }
            _ => conn.send_json(400, &[], &openai::invalid_json()).await,
        },
        ("POST", MESSAGES_PATH | COUNT_TOKENS_PATH)
            if !request.headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("anthropic-version")) =>
        {
            conn.send_json(400, &[], &anthropic::missing_version()).await
        }
        ("POST", MESSAGES_PATH) => match body {
            Some(body @ Value::Object(_)) => {
                chat(conn, state, &body, Protocol::Anthropic).await;
                Ok(())
            }
            _ => conn.send_json(400, &[], &anthropic::invalid_json()).await,
        },
        ("POST", COUNT_TOKENS_PATH) => match body {
            // The server's own count, as the window is enforced with (never refused, never scripted).
            Some(body @ Value::Object(_)) => {
                let n = crate::count::count_request(&body);
                conn.send_json(200, &[], &serde_json::json!({ "input_tokens": n })).await
            }
            _ => conn.send_json(400, &[], &anthropic::invalid_json()).await,
        },
        (_, MESSAGES_PATH | COUNT_TOKENS_PATH) => {
            conn.send_json(405, &[], &anthropic::method_not_allowed(method, path)).await
        }
        ("GET", p) if p.strip_prefix(MODELS_PATH).is_some_and(|id| id.len() > 1 && id.starts_with('/')) => {
            let id = &p[MODELS_PATH.len() + 1..];
            if id == state.config.model {
                let model = anthropic::model(&state.config.model, state.config.max_model_len);
                conn.send_json(200, &[], &model).await
            } else {
                conn.send_json(404, &[], &anthropic::not_found(method, path)).await
            }
        }
        ("POST", TOKENIZE_PATH) if state.config.tokenize_endpoint => {
            let (status, answer) = tokenize(state, body.as_ref());
            conn.send_json(status, &[], &answer).await
        }
        ("POST", OLLAMA_SHOW_PATH) if state.config.ollama_num_ctx.is_some() => {
            let show = serde_json::json!({
                "parameters": format!("num_ctx {}", state.config.ollama_num_ctx.unwrap_or_default()),
                "model_info": {"llama.context_length": 131072},
            });
            conn.send_json(200, &[], &show).await
        }
        ("GET", PROPS_PATH) if state.config.props_n_ctx.is_some() => {
            let props =
                serde_json::json!({"default_generation_settings": {"n_ctx": state.config.props_n_ctx}});
            conn.send_json(200, &[], &props).await
        }
        (_, MODELS_PATH | CHAT_PATH | RESPONSES_PATH) => {
            conn.send_json(405, &[], &openai::method_not_allowed(method, path)).await
        }
        _ => conn.send_json(404, &[], &openai::not_found(method, path)).await,
    };
    // A write error means the client is gone: nothing left to do.
    let _ = result;
}

/// vLLM's `POST /tokenize`: the o200k count of `prompt` (or llama.cpp's `content`).
fn tokenize(state: &State, body: Option<&Value>) -> (u16, Value) {
    let text = body.and_then(|b| b.get("prompt").or_else(|| b.get("content"))).and_then(Value::as_str);
    let Some(text) = text else {
        return (400, openai::bad_request("tokenize: `prompt` (a string) is required"));
    };
    let n = crate::count::tokens(text);
    let max_model_len = state.config.max_model_len.or(state.config.window);
    (
        200,
        serde_json::json!({"count": n, "tokens": (0..n).collect::<Vec<u64>>(), "max_model_len": max_model_len}),
    )
}
