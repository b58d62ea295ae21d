//! Driving a server-sent-events byte stream through an answer's assembler, for every wire format:
//! the bytes are read into events by [`reader`] (in time linear in the bytes, one event at most
//! [`MAX_EVENT_BYTES`]), and the stream's own failures — a connection cut, an event that is not
//! UTF-8 or too large, a stream that stalls — become [`ProviderError::StreamAnomaly`]s; what the
//! events mean is the assembler's business.
//!
//! The idle deadline (`requests.idle_timeout`) is the longest the stream may go without bringing a
//! part of an event ([`Progress::Made`]): any byte of a `data:` or `event:` line restarts it, so a
//! big event arriving slowly is read to its end, while comments (keep-alives), blank lines and
//! ignored fields do not, so a server that sends only those is stalled.

mod reader;

use super::error::truncate_chars;
use super::http::error_chain;
use super::non_finite;
use agentd_protocol::{AnomalyKind, ChatResponse, ProviderError};
use futures_util::{Stream, StreamExt};
use reader::{Progress, ReadError, Reader, MAX_EVENT_BYTES};
use serde_json::Value;
use std::time::Duration;
use tokio::time::Instant;

/// Whether an assembler wants more events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    More,
    Done,
}

/// The state of one streamed answer, fed one SSE event at a time.
pub(crate) trait Assemble {
    /// One SSE event: its `event:` name and its `data:` payload.
    fn push(&mut self, event: &str, data: &str) -> Result<Flow, ProviderError>;
    /// The answer is complete: a stream cut now loses only what trails it.
    fn complete(&self) -> bool;
    /// The stream ended: the answer, or the anomaly that makes it unusable.
    fn finish(self) -> Result<ChatResponse, ProviderError>;
}

/// Reads an SSE byte stream until `asm` is done or the stream ends, and assembles the answer. A
/// connection cut is a `Cut` anomaly unless the answer was already complete; an event whose bytes
/// are not UTF-8 is a `Parse` anomaly, one over [`MAX_EVENT_BYTES`] a `TooLarge` one; with `idle`,
/// no part of an event for that long is a `Stalled` one.
pub(crate) async fn drive_within<S, B, E, A>(
    bytes: S,
    mut asm: A,
    idle: Option<Duration>,
) -> Result<ChatResponse, ProviderError>
where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
    E: std::error::Error + 'static,
    A: Assemble,
{
    futures_util::pin_mut!(bytes);
    let mut reader = Reader::new(MAX_EVENT_BYTES);
    let mut events = Vec::new();
    let mut deadline = idle.map(|idle| Instant::now() + idle);
    loop {
        let next = match (idle, deadline) {
            (Some(idle), Some(deadline)) => {
                tokio::time::timeout_at(deadline, bytes.next()).await.map_err(|_| stalled(idle))?
            }
            _ => bytes.next().await,
        };
        let Some(piece) = next else { break };
        let piece = match piece {
            Ok(piece) => piece,
            Err(e) => {
                let message = error_chain(&e);
                if asm.complete() {
                    tracing::warn!(error = %message, "stream cut after the answer was complete; keeping it");
                    break;
                }
                return Err(anomaly(AnomalyKind::Cut, format!("the stream broke off: {message}")));
            }
        };
        let read = reader.feed(piece.as_ref(), &mut events);
        // The events before a bad one are the answer's, wherever the pieces happened to split.
        for event in events.drain(..) {
            if asm.push(&event.name, &event.data)? == Flow::Done {
                return asm.finish();
            }
        }
        if read.map_err(unreadable)? == Progress::Made {
            deadline = idle.map(|idle| Instant::now() + idle);
        }
    }
    asm.finish()
}

/// A stream the reader gave up on, as the anomaly it is.
fn unreadable(error: ReadError) -> ProviderError {
    match error {
        ReadError::NotUtf8 { what, source } => {
            anomaly(AnomalyKind::Parse, format!("the stream is not valid UTF-8: an event's {what} ({source})"))
        }
        ReadError::TooLarge { cap, size } => anomaly(
            AnomalyKind::TooLarge,
            format!(
                "one event of the stream passed {} MiB, the most agentd reads of one event \
                 ({size} bytes of it had come); the same request would be answered the same, so it is not sent again",
                cap / (1024 * 1024)
            ),
        ),
    }
}

/// No part of an event within the idle deadline.
pub(crate) fn stalled(idle: Duration) -> ProviderError {
    anomaly(
        AnomalyKind::Stalled,
        format!(
            "the stream sent no event for {idle:?}, nor any part of one (requests.idle_timeout; SSE comments and keep-alives do not count)"
        ),
    )
}

pub(crate) fn anomaly(kind: AnomalyKind, message: String) -> ProviderError {
    ProviderError::StreamAnomaly { kind, message }
}

/// What one OpenAI-style `data:` payload is: nothing (blank), the `[DONE]` marker, or JSON.
pub(crate) enum Data {
    Blank,
    Done,
    Json(Value),
}

/// Reads one `data:` payload of an OpenAI-style stream (chat completions, the Responses API); a
/// payload that is not JSON is a `Parse` anomaly naming `what` it should have been.
pub(crate) fn read_data(what: &str, data: &str) -> Result<Data, ProviderError> {
    match data.trim() {
        "" => Ok(Data::Blank),
        "[DONE]" => Ok(Data::Done),
        data => parse_json(what, data).map(Data::Json),
    }
}

/// `text` as JSON, or a `Parse` anomaly: "`what` is not valid JSON (…): " and the text's start.
/// Python's bare `NaN`, `Infinity` and `-Infinity` read as strings ([`non_finite`]): a figure that
/// is not finite spoils that figure, never the answer.
pub(crate) fn parse_json(what: &str, text: &str) -> Result<Value, ProviderError> {
    serde_json::from_str(text).or_else(|e| {
        non_finite::quoted(text).and_then(|quoted| serde_json::from_str(&quoted).ok()).ok_or_else(|| {
            anomaly(
                AnomalyKind::Parse,
                format!("{what} is not valid JSON ({e}): {}", truncate_chars(text, 200)),
            )
        })
    })
}

/// Reads an SSE byte stream with no idle deadline: [`drive_within`] for the assemblers' tests.
#[cfg(test)]
pub(crate) async fn drive<S, B, E, A>(bytes: S, asm: A) -> Result<ChatResponse, ProviderError>
where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
    E: std::error::Error + 'static,
    A: Assemble,
{
    drive_within(bytes, asm, None).await
}

/// What the assemblers' tests share.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    pub(crate) type Chunk = Result<Vec<u8>, std::io::Error>;

    pub(crate) fn reset() -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::ConnectionReset, "connection reset by peer")
    }

    /// `bytes` cut into chunks that end at each of `cuts` (ascending, the last one the length).
    pub(crate) fn cut(bytes: &[u8], cuts: impl IntoIterator<Item = usize>) -> Vec<Chunk> {
        let mut pieces = Vec::new();
        let mut from = 0;
        for to in cuts {
            pieces.push(Chunk::Ok(bytes[from..to].to_vec()));
            from = to;
        }
        pieces
    }

    pub(crate) fn kind(r: Result<ChatResponse, ProviderError>) -> AnomalyKind {
        match r {
            Err(ProviderError::StreamAnomaly { kind, .. }) => kind,
            other => panic!("expected an anomaly, got {other:?}"),
        }
    }
}

#[cfg(test)]
mod tests;
