//! Hidden entry points for the fuzz targets and the property tests (`fuzz/`,
//! `runtime/providers/tests/fuzz_props.rs`): the real SSE driver and each wire format's assembler, fed
//! arbitrary bytes in arbitrary pieces, and the oracle that judges what comes out. Compiled only
//! with the `fuzzing` feature, which no release build enables.

use crate::sse::drive_within;
use crate::{anthropic, openai, responses};
use agentd_protocol::{AnomalyKind, ChatResponse, ProviderError, RetryAfter, Speaker, MAX_PROVIDER_WAIT};
use std::time::SystemTime;

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

/// `bytes` as an OpenAI Responses API SSE stream, through the real driver and assembler.
pub fn assemble_responses_sse(bytes: &[u8], delivery: Delivery) -> Result<ChatResponse, ProviderError> {
    block_on(drive_within(chunks(bytes, delivery), responses::stream::Assembler::default(), None))
}

/// `body` as a non-streamed OpenAI answer (a server that ignored `stream: true`).
pub fn openai_json_body(body: &str) -> Result<ChatResponse, ProviderError> {
    openai::stream::from_json_body(body)
}

/// `body` as a non-streamed Anthropic answer.
pub fn anthropic_json_body(body: &str) -> Result<ChatResponse, ProviderError> {
    anthropic::stream::from_json_body(body)
}

/// `body` as a non-streamed Responses API answer (the whole response object).
pub fn responses_json_body(body: &str) -> Result<ChatResponse, ProviderError> {
    responses::stream::from_json_body(body)
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

// The oracle the fuzz targets and property tests share: it runs an input through the entry
// points above in several ways and says what is wrong, if anything. A panic anywhere is a bug too.

/// Which protocol [`check_sse`] drives.
#[derive(Debug, Clone, Copy)]
pub enum Protocol {
    /// OpenAI chat completions.
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
    /// OpenAI's Responses API.
    Responses,
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
        Protocol::Responses => assemble_responses_sse(bytes, delivery),
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
        (Ok(_), Err(ProviderError::StreamAnomaly { kind: AnomalyKind::Cut, .. })) => {}
        (Err(_), Err(_)) => {}
        // The stream ended inside a UTF-8 sequence: closed, that is bad bytes; cut, it is a cut
        // after a complete answer, which is kept.
        (Err(ProviderError::StreamAnomaly { kind: AnomalyKind::Parse, message }), Ok(_))
            if message.contains("UTF-8") => {}
        _ => return Err(format!("a reset turned {whole:?} into {reset:?}")),
    }
    if let Ok(text) = std::str::from_utf8(bytes) {
        well_formed(&match protocol {
            Protocol::OpenAi => openai_json_body(text),
            Protocol::Anthropic => anthropic_json_body(text),
            Protocol::Responses => responses_json_body(text),
        })?;
    }
    Ok(())
}

fn well_formed(r: &Result<ChatResponse, ProviderError>) -> Result<(), String> {
    match r {
        Ok(answer) => {
            if answer.finish_reason.is_empty()
                || answer.message.parts.is_empty()
                || answer.message.role != Speaker::Assistant
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

/// `bytes` as a provider's response headers, one `name: value` per line (lines that are no header
/// are skipped, as the HTTP client would refuse them), read by the real [`crate::http::retry_after`]
/// at `now`.
pub fn retry_after_of(bytes: &[u8], now: SystemTime) -> Option<RetryAfter> {
    let mut headers = reqwest::header::HeaderMap::new();
    for line in bytes.split(|b| *b == b'\n') {
        let Some(colon) = line.iter().position(|b| *b == b':') else { continue };
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        let (Ok(name), Ok(value)) = (
            reqwest::header::HeaderName::from_bytes(name),
            reqwest::header::HeaderValue::from_bytes(value.trim_ascii()),
        ) else {
            continue;
        };
        headers.append(name, value);
    }
    crate::http::retry_after(&headers, now)
}

/// The header oracle: whatever the headers say, reading them does not panic, the wait is at most
/// [`MAX_PROVIDER_WAIT`], a capped wait is exactly the ceiling, and its milliseconds fit. The wait
/// read, for the callers that take it further (the fuzz target formats its resume time as the
/// engine records it).
pub fn check_retry_headers(bytes: &[u8], now: SystemTime) -> Result<Option<RetryAfter>, String> {
    let Some(after) = retry_after_of(bytes, now) else { return Ok(None) };
    if after.delay > MAX_PROVIDER_WAIT {
        return Err(format!("a wait past the ceiling: {after:?}"));
    }
    if after.capped && after.delay != MAX_PROVIDER_WAIT {
        return Err(format!("a capped wait that is not the ceiling: {after:?}"));
    }
    if u128::from(after.millis()) != after.delay.as_millis() {
        return Err(format!("milliseconds that do not fit: {after:?}"));
    }
    Ok(Some(after))
}
