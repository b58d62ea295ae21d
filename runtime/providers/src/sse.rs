//! Driving a server-sent-events byte stream through an answer's assembler, for both wire
//! protocols: the stream's own failures (a connection cut, bytes that are not UTF-8 or not SSE)
//! become [`ProviderError::StreamAnomaly`]s; what the events mean is the assembler's business.

use super::error::truncate_chars;
use super::http::error_chain;
use super::non_finite;
use agentd_protocol::{AnomalyKind, ChatResponse, ProviderError};
use eventsource_stream::{EventStreamError, Eventsource};
use futures_util::{Stream, StreamExt};
use serde_json::Value;
use std::time::Duration;

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
/// connection cut is a `Cut` anomaly unless the answer was already complete; a stream that is not
/// UTF-8 or not SSE is a `Parse` anomaly.
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

/// [`drive`], with an idle deadline: no event within `idle` (comments and keep-alive lines are not
/// events) is a `Stalled` anomaly.
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
    let events = bytes.eventsource();
    futures_util::pin_mut!(events);
    loop {
        let next = match idle {
            None => events.next().await,
            Some(idle) => match tokio::time::timeout(idle, events.next()).await {
                Ok(next) => next,
                Err(_) => return Err(stalled(idle)),
            },
        };
        let Some(event) = next else { break };
        match event {
            Ok(event) => {
                if asm.push(&event.event, &event.data)? == Flow::Done {
                    break;
                }
            }
            Err(EventStreamError::Transport(e)) => {
                let message = error_chain(&e);
                if asm.complete() {
                    tracing::warn!(error = %message, "stream cut after the answer was complete; keeping it");
                    break;
                }
                return Err(anomaly(AnomalyKind::Cut, format!("the stream broke off: {message}")));
            }
            Err(EventStreamError::Utf8(e)) => {
                return Err(anomaly(AnomalyKind::Parse, format!("the stream is not valid UTF-8: {e}")));
            }
            Err(EventStreamError::Parser(e)) => {
                return Err(anomaly(
                    AnomalyKind::Parse,
                    format!("the stream is not valid server-sent events: {e}"),
                ));
            }
        }
    }
    asm.finish()
}

/// No event within the idle deadline.
pub(crate) fn stalled(idle: Duration) -> ProviderError {
    anomaly(
        AnomalyKind::Stalled,
        format!(
            "the stream sent no event for {idle:?} (requests.idle_timeout; SSE comments and keep-alives do not count)"
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
