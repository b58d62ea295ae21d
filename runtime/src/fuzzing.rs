//! Entry points for the fuzz targets (`fuzz/`) and the property tests (`tests/fuzz_props.rs`): thin
//! wrappers that feed untrusted bytes through the code the daemon really runs — the socket's line
//! framing and request decoding, the SSE driver with each protocol's assembler, the config parser —
//! and nothing else: no socket, no network, no filesystem. Not an API; hidden from the docs.

use crate::config::{Config, ConfigError};
use crate::provider::sse::drive_within;
use crate::provider::{anthropic, openai, ChatResponse, ProviderError};
pub use crate::rpc::Request;
use crate::rpc::{ErrorCode, RpcError};
use crate::socket::{decode_request, error_response, framing_error, Frame, Lines};
use serde_json::Value;
use std::path::Path;

/// What the socket makes of one request line.
#[derive(Debug, Clone, PartialEq)]
pub enum Decoded {
    /// A well-formed request of a known method with params of its type: it would be dispatched.
    Request { id: Value, request: Request },
    /// The error the socket answers with, and the response line it sends.
    Error { id: Value, error: RpcError, line: String },
}

/// Splits `bytes` into request lines as a connection does — the same framing
/// ([`crate::framing`], a length-capped `LinesCodec`) with a line limit of `max_line` bytes, the
/// socket's being [`crate::socket::MAX_LINE`] — feeding it pieces of at most `piece` bytes (0: all
/// at once), and decodes each line. A line not ended by `\n` is never decoded, as on the socket;
/// a line over the limit is refused as soon as the limit is passed.
pub fn decode_rpc_lines(bytes: &[u8], max_line: usize, piece: usize) -> Vec<Decoded> {
    let mut lines = Lines::new(max_line);
    let mut out = Vec::new();
    let pieces: Vec<&[u8]> = if piece == 0 { vec![bytes] } else { bytes.chunks(piece).collect() };
    for buf in pieces {
        lines.extend(buf);
        while let Some(frame) = lines.next_frame() {
            match (&frame, framing_error(&frame, max_line)) {
                (Frame::Line(text), _) => out.push(decode_rpc_line(text.as_bytes())),
                (_, Some(refusal)) => out.push(error(Value::Null, refusal)),
                (_, None) => {}
            }
        }
    }
    out
}

/// One request line (without its `\n`) as the socket decodes it: framing, method, typed params.
pub fn decode_rpc_line(text: &[u8]) -> Decoded {
    match decode_request(text) {
        Ok((id, request)) => Decoded::Request { id, request },
        Err((id, e)) => error(id, e),
    }
}

fn error(id: Value, e: RpcError) -> Decoded {
    let line = error_response(id.clone(), &e);
    Decoded::Error { id, error: e, line }
}

/// How a fuzzed stream arrives.
#[derive(Debug, Clone, Copy, Default)]
pub struct Delivery {
    /// Chunks of at most this many bytes (0: one chunk), so events and UTF-8 sequences split anywhere.
    pub piece: usize,
    /// The connection breaks after the last chunk instead of closing cleanly.
    pub reset: bool,
}

/// `bytes` as an OpenAI chat-completions SSE stream, through the real driver and assembler.
pub fn assemble_openai_sse(bytes: &[u8], delivery: Delivery) -> Result<ChatResponse, ProviderError> {
    block_on(drive_within(chunks(bytes, delivery), openai::stream::Assembler::default(), None))
}

/// `bytes` as an Anthropic Messages SSE stream, through the real driver and assembler.
pub fn assemble_anthropic_sse(bytes: &[u8], delivery: Delivery) -> Result<ChatResponse, ProviderError> {
    block_on(drive_within(chunks(bytes, delivery), anthropic::stream::Assembler::default(), None))
}

/// `body` as a non-streamed OpenAI answer (a server that ignored `stream: true`).
pub fn openai_json_body(body: &str) -> Result<ChatResponse, ProviderError> {
    openai::stream::from_json_body(body)
}

/// `body` as a non-streamed Anthropic answer.
pub fn anthropic_json_body(body: &str) -> Result<ChatResponse, ProviderError> {
    anthropic::stream::from_json_body(body)
}

/// `text` as the daemon's config file (named `agentd.toml` in errors).
pub fn parse_config(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text, Path::new("agentd.toml"))
}

type Chunk = Result<Vec<u8>, std::io::Error>;

fn chunks(bytes: &[u8], delivery: Delivery) -> futures_util::stream::Iter<std::vec::IntoIter<Chunk>> {
    let mut pieces: Vec<Chunk> = if delivery.piece == 0 {
        vec![Ok(bytes.to_vec())]
    } else {
        bytes.chunks(delivery.piece).map(|c| Ok(c.to_vec())).collect()
    };
    if delivery.reset {
        pieces
            .push(Err(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "connection reset by peer")));
    }
    futures_util::stream::iter(pieces)
}

/// Runs a future that never waits on a timer or IO (the streams here are all ready).
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    thread_local! {
        static RUNTIME: tokio::runtime::Runtime = match tokio::runtime::Builder::new_current_thread().build() {
            Ok(rt) => rt,
            Err(e) => panic!("cannot build the fuzzing runtime: {e}"),
        };
    }
    RUNTIME.with(|rt| rt.block_on(future))
}

// The oracles the fuzz targets and property tests share: each runs an input through the entry
// points above in several ways and says what is wrong, if anything. A panic anywhere is a bug too.

/// [`decode_rpc_lines`] on `bytes`: every error is a standard code answered with a well-formed
/// response line that carries the request's id (or `null` when the line had none or was not JSON);
/// every request has params that are an object or null; and the result does not depend on how the
/// bytes arrive, nor does a small line limit change the lines within it.
pub fn check_rpc_lines(bytes: &[u8]) -> Result<(), String> {
    let whole = decode_rpc_lines(bytes, crate::socket::MAX_LINE, 0);
    let lines = bytes.iter().filter(|&&b| b == b'\n').count();
    // Every frame ends at a line end, but for a refusal of a line over the limit (which is
    // refused before its end arrives).
    let ended = whole.iter().filter(|d| !is_oversized(d)).count();
    if ended > lines {
        return Err(format!("{ended} frames from {lines} line ends"));
    }
    for d in &whole {
        match d {
            Decoded::Request { request, .. } => {
                // What is dispatched reads back as itself: the typed request is the whole request.
                let (method, params) = request.to_wire();
                let again = serde_json::json!({"method": method, "params": params});
                if serde_json::from_value::<Request>(again).ok().as_ref() != Some(request) {
                    return Err(format!("request {request:?} does not read back from its wire form"));
                }
            }
            Decoded::Error { id, error, line } => {
                let standard = [
                    ErrorCode::ParseError,
                    ErrorCode::InvalidRequest,
                    ErrorCode::MethodNotFound,
                    ErrorCode::InvalidParams,
                ];
                if !standard.contains(&error.code) {
                    return Err(format!("non-standard code {} for a decoding error", error.code.code()));
                }
                let v: Value = serde_json::from_str(line).map_err(|e| format!("response {line:?}: {e}"))?;
                if v["jsonrpc"] != "2.0" || v["id"] != *id || v["error"]["code"] != error.code.code() {
                    return Err(format!("malformed response {line}"));
                }
                if error.code == ErrorCode::ParseError && !id.is_null() {
                    return Err(format!("a parse error answered with id {id}"));
                }
            }
        }
    }
    for piece in [1, 7] {
        if decode_rpc_lines(bytes, crate::socket::MAX_LINE, piece) != whole {
            return Err(format!("the result changed when the bytes came {piece} at a time"));
        }
    }
    // With a small limit a long line is answered with an oversize error instead: never lost.
    let small = decode_rpc_lines(bytes, 64, 5);
    if small.len() < whole.len() {
        return Err(format!("a 64-byte limit gave {} frames, no limit {}", small.len(), whole.len()));
    }
    Ok(())
}

fn is_oversized(d: &Decoded) -> bool {
    matches!(d, Decoded::Error { error, .. }
        if error.code == ErrorCode::InvalidRequest && error.message.starts_with("request line over"))
}

/// `bytes` as an HTTP API request: the first byte picks the route, then up to the first `\n` the
/// path segments (`/`-separated, as many as the route has), up to the next the query string, the
/// rest the body — decoded as the server decodes it ([`crate::http::decode_route`]). A decoded
/// request calls the route's method with the path's values (they win over the body); an error is a
/// decoding code (-32700, -32600, -32602), never an internal one, and names what was wrong; the
/// same request over the socket decodes to the same [`Request`].
pub fn check_http_request(bytes: &[u8]) -> Result<(), String> {
    use agentd_protocol::http::ROUTES;
    let Some((&pick, rest)) = bytes.split_first() else { return Ok(()) };
    let route = &ROUTES[pick as usize % ROUTES.len()];
    let mut parts = rest.splitn(3, |&b| b == b'\n');
    let path_text = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
    let query = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
    let body = parts.next().unwrap_or_default();
    let mut segments = path_text.split('/').map(str::to_string);
    let path: Vec<String> = route.path_params().map(|_| segments.next().unwrap_or_default()).collect();
    match crate::http::decode_route(route, &path, &query, body) {
        Ok(request) => {
            if request.method() != route.method {
                return Err(format!(
                    "{} {} decoded as {:?}",
                    route.verb.as_str(),
                    route.path,
                    request.method()
                ));
            }
            let (method, params) = request.to_wire();
            for (name, value) in route.path_params().zip(&path) {
                if params.get(name).and_then(Value::as_str) != Some(value.as_str()) {
                    return Err(format!("path param {name} = {value:?} became {params}"));
                }
            }
            let line = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
            match decode_request(line.to_string().as_bytes()) {
                Ok((_, again)) if again == request => Ok(()),
                other => Err(format!("over the socket {request:?} decodes as {other:?}")),
            }
        }
        Err(e) => {
            let decoding = [ErrorCode::ParseError, ErrorCode::InvalidRequest, ErrorCode::InvalidParams];
            if !decoding.contains(&e.code) || e.message.trim().is_empty() {
                return Err(format!("a decoding error {e:?} for {} {}", route.verb.as_str(), route.path));
            }
            Ok(())
        }
    }
}

/// Which protocol [`check_sse`] drives.
#[derive(Debug, Clone, Copy)]
pub enum Protocol {
    OpenAi,
    Anthropic,
}

/// `bytes` as a stream of `protocol`: an answer is well-formed (an assistant message with at least
/// one part and a finish reason) or an error with a message; the result does not depend on where
/// the chunks split (beyond an error's wording); a reset after the last chunk keeps a complete
/// answer or turns it into a `Cut`, and never turns an error into an answer. The bytes are also
/// tried as a non-streamed JSON body.
pub fn check_sse(protocol: Protocol, bytes: &[u8]) -> Result<(), String> {
    let run = |delivery| match protocol {
        Protocol::OpenAi => assemble_openai_sse(bytes, delivery),
        Protocol::Anthropic => assemble_anthropic_sse(bytes, delivery),
    };
    let whole = run(Delivery::default());
    well_formed(&whole)?;
    let split = (bytes.len() % 13) + 1;
    for piece in [1, split] {
        let r = run(Delivery { piece, reset: false });
        if shape(&r) != shape(&whole) {
            return Err(format!("pieces of {piece} gave {r:?}, all at once {whole:?}"));
        }
    }
    let reset = run(Delivery { piece: split, reset: true });
    well_formed(&reset)?;
    match (&whole, &reset) {
        (Ok(a), Ok(b)) if a == b => {}
        (Ok(_), Err(ProviderError::StreamAnomaly { kind: crate::provider::AnomalyKind::Cut, .. })) => {}
        (Err(_), Err(_)) => {}
        // The stream ended inside a UTF-8 sequence: closed, that is bad bytes; cut, it is a cut
        // after a complete answer, which is kept.
        (Err(ProviderError::StreamAnomaly { kind: crate::provider::AnomalyKind::Parse, message }), Ok(_))
            if message.contains("UTF-8") => {}
        _ => return Err(format!("a reset turned {whole:?} into {reset:?}")),
    }
    if let Ok(text) = std::str::from_utf8(bytes) {
        well_formed(&match protocol {
            Protocol::OpenAi => openai_json_body(text),
            Protocol::Anthropic => anthropic_json_body(text),
        })?;
    }
    Ok(())
}

fn well_formed(r: &Result<ChatResponse, ProviderError>) -> Result<(), String> {
    match r {
        Ok(answer) => {
            if answer.finish_reason.is_empty()
                || answer.message.parts.is_empty()
                || answer.message.role != agentd_policies::Speaker::Assistant
            {
                return Err(format!("malformed answer {answer:?}"));
            }
            Ok(())
        }
        Err(e) if e.to_string().trim().is_empty() => Err(format!("an error without a message: {e:?}")),
        Err(_) => Ok(()),
    }
}

/// A result without an error's wording (which may name a byte offset).
fn shape(r: &Result<ChatResponse, ProviderError>) -> String {
    match r {
        Ok(answer) => format!("{answer:?}"),
        Err(ProviderError::StreamAnomaly { kind, .. }) => format!("anomaly {kind}"),
        Err(e) => format!("{e}"),
    }
}

/// `text` as a config file: it parses, or the error names the file and, when the TOML is well
/// formed, the key at fault.
pub fn check_config(text: &str) -> Result<(), String> {
    match parse_config(text) {
        Ok(_) => Ok(()),
        Err(e) => {
            let shown = e.to_string();
            if !shown.starts_with("agentd.toml") {
                return Err(format!("an error that does not name the file: {shown}"));
            }
            match &e {
                ConfigError::Invalid { key, message, .. } if key.is_empty() || message.is_empty() => {
                    Err(format!("an invalid value without its key or reason: {e:?}"))
                }
                ConfigError::Parse { message, .. } if message.is_empty() => {
                    Err(format!("a parse error without a message: {e:?}"))
                }
                _ => Ok(()),
            }
        }
    }
}
