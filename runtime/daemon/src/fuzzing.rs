//! Entry points for the fuzz targets (`fuzz/`) and the property tests (`tests/fuzz_props.rs`): thin
//! wrappers that feed untrusted bytes through the code the daemon really runs — the socket's line
//! framing and request decoding, the SSE driver with each protocol's assembler, the config parser —
//! and nothing else: no socket, no network, no filesystem. Not an API; hidden from the docs.

use crate::config::{Config, ConfigError};
use crate::socket::{decode_request, error_response, framing_error, Frame, Lines};
use agentd_protocol::Request;
use agentd_protocol::{ErrorCode, RpcError};
use serde_json::Value;
use std::path::Path;

/// What the socket makes of one request line.
#[derive(Debug, Clone, PartialEq)]
pub enum LineOutcome {
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
pub fn decode_rpc_lines(bytes: &[u8], max_line: usize, piece: usize) -> Vec<LineOutcome> {
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
pub fn decode_rpc_line(text: &[u8]) -> LineOutcome {
    match decode_request(text) {
        Ok((id, request)) => LineOutcome::Request { id, request },
        Err((id, e)) => error(id, e),
    }
}

fn error(id: Value, e: RpcError) -> LineOutcome {
    let line = error_response(id.clone(), &e);
    LineOutcome::Error { id, error: e, line }
}

/// `text` as the daemon's config file (named `agentd.toml` in errors).
pub fn parse_config(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text, Path::new("agentd.toml"))
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
            LineOutcome::Request { request, .. } => {
                // What is dispatched reads back as itself: the typed request is the whole request.
                let (method, params) = request.to_wire();
                let again = serde_json::json!({"method": method, "params": params});
                if serde_json::from_value::<Request>(again).ok().as_ref() != Some(request) {
                    return Err(format!("request {request:?} does not read back from its wire form"));
                }
            }
            LineOutcome::Error { id, error, line } => {
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

fn is_oversized(d: &LineOutcome) -> bool {
    matches!(d, LineOutcome::Error { error, .. }
        if error.code == ErrorCode::InvalidRequest && error.message.starts_with("request line over"))
}

/// `bytes` as an HTTP API request: the first byte picks the route, then up to the first `\n` the
/// path segments (`/`-separated, as many as the route has), up to the next the query string, the
/// rest the body — decoded as the server decodes it ([`crate::http::decode_route`]). A decoded
/// request calls the route's method with the path's values (they win over the body); an error is a
/// decoding code (-32700, -32600, -32602), never an internal one, and names what was wrong; the
/// same request over the socket decodes to the same [`Request`].
pub fn check_http_request(bytes: &[u8]) -> Result<(), String> {
    use agentd_protocol::rpc::ROUTES;
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

/// `bytes` as a provider's 429 headers (`name: value` per line), taken the whole way a wait goes
/// to the log: read ([`agentd_providers::fuzzing::check_retry_headers`]: at most the 30-day
/// ceiling), judged by the default retry policy, and when it is waited out, the task's halt and its
/// resume time written as `record_halt` writes them. No step panics; the resume time written reads
/// back, no earlier than now and no later than the ceiling allows.
pub fn check_provider_wait(bytes: &[u8]) -> Result<(), String> {
    use agentd_engine::clock::{later, parse_rfc3339, rfc3339};
    use agentd_policies::retry::{decide, Decision, Failure, RetryPolicy};
    use agentd_protocol::{ProviderError, Role, MAX_PROVIDER_WAIT};
    use std::time::Duration;
    let now = agentd_engine::clock::clock().now();
    let Some(after) = agentd_providers::fuzzing::check_retry_headers(bytes, now)? else { return Ok(()) };
    let error = ProviderError::RateLimited { retry_after: Some(after), message: "slow down".into() };
    let Some(failure) = Failure::of(&error) else { return Err(format!("{error:?} is no failure")) };
    let delay_ms = match decide(&RetryPolicy::default(), failure, 1) {
        Decision::WaitOut { delay_ms } | Decision::Retry { delay_ms, .. } => delay_ms,
        Decision::GiveUp => return Err(format!("a first rate limit given up: {after:?}")),
    };
    if u128::from(delay_ms) != after.delay.as_millis() {
        return Err(format!("the policy waits {delay_ms} ms for {after:?}"));
    }
    let wait = agentd_engine::retry::WaitOut {
        delay: Duration::from_millis(delay_ms),
        header: after.header,
        capped: after.capped,
        reason: failure.reason(),
        error: &error,
    };
    let halt = wait.halt(Role::Lead);
    let agentd_engine::halt::Halt::UsageLimit { resume_at, .. } = &halt else {
        return Err(format!("a usage limit's halt is {halt:?}"));
    };
    let _ = halt.to_string();
    let written = rfc3339(*resume_at);
    let read = parse_rfc3339(&written).ok_or_else(|| format!("{written} does not read back"))?;
    // The written time is to the millisecond: allow it, and the clock moving while this runs.
    let latest = later(agentd_engine::clock::clock().now(), MAX_PROVIDER_WAIT + Duration::from_millis(1));
    if read + Duration::from_millis(1) < now || read > latest {
        return Err(format!("{written} is outside now .. now + the ceiling for {after:?}"));
    }
    Ok(())
}
