//! The HTTP client both wire protocols send with, and the parts of a chat call they share: its
//! cancellation, its refusals, and a server that answers a streaming request in one JSON piece.

use super::openai::{error_chain, retry_after};
use super::{AnomalyKind, ChatResponse, ProviderError};
use reqwest::header::CONTENT_TYPE;
use std::future::Future;
use std::time::{Duration, SystemTime};
use tokio_util::sync::CancellationToken;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Between two reads of a stream: a thinking model can be silent for a while, not for five minutes.
const READ_TIMEOUT: Duration = Duration::from_secs(300);
/// Servers close idle keep-alive connections after a few seconds (uvicorn: 5 s); reusing one then
/// fails with "connection closed before message completed".
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(4);
/// Each window probe or count request, as a whole.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(30);
/// How much of a provider's error text is kept.
pub(crate) const MAX_ERROR_CHARS: usize = 2000;

/// A client whose connecting times out after 10 s and whose stream may run as long as it keeps
/// sending (a read waits at most 300 s); idle pooled connections are dropped after 4 s.
pub(crate) fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .read_timeout(READ_TIMEOUT)
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .build()
        .expect("the HTTP client (TLS backend) could not be initialised")
}

/// A request to `url` that got no answer (connection refused, DNS, TLS, timeout, a broken read).
pub(crate) fn transport(url: &str, e: &reqwest::Error) -> ProviderError {
    ProviderError::Transport { url: url.to_string(), message: error_chain(e) }
}

/// How long a model request may take: `total` from sending to the last event, `idle` between two
/// events of its stream (SSE comments and keep-alives are not events: a server that only sends
/// those is stalled).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    pub idle: Duration,
    pub total: Duration,
}

impl Default for Deadlines {
    fn default() -> Deadlines {
        Deadlines { idle: Duration::from_secs(60), total: Duration::from_secs(600) }
    }
}

/// Runs `call` to its end, unless `cancel` fires first — then `call` is dropped at once and the
/// answer is [`ProviderError::Cancelled`] — or `total` passes first: a `Stalled`
/// anomaly naming the deadline.
pub(crate) async fn cancellable(
    url: String,
    cancel: &CancellationToken,
    total: Duration,
    call: impl Future<Output = Result<ChatResponse, ProviderError>>,
) -> Result<ChatResponse, ProviderError> {
    tokio::select! {
        biased;
        _ = cancel.cancelled() => Err(ProviderError::Cancelled { url }),
        result = call => result,
        _ = tokio::time::sleep(total) => Err(ProviderError::StreamAnomaly {
            kind: AnomalyKind::Stalled,
            message: format!("no complete answer from {url} within the request deadline of {total:?} (requests.timeout)"),
        }),
    }
}

/// What a server accepted a streaming chat request with.
pub(crate) enum Answer {
    /// The server ignored `stream: true` and answered in one JSON piece: its text.
    Whole(String),
    /// A stream, not read yet.
    Stream(reqwest::Response),
}

/// Sends a chat request that asks for a stream. A non-2xx answer is the error `classify` makes of
/// its status, `Retry-After` and body; an `application/json` answer is read whole.
pub(crate) async fn send_streaming(
    request: reqwest::RequestBuilder,
    url: &str,
    classify: fn(u16, Option<Duration>, &str) -> ProviderError,
) -> Result<Answer, ProviderError> {
    let response = request.send().await.map_err(|e| transport(url, &e))?;
    let status = response.status();
    if !status.is_success() {
        let retry_after = retry_after(response.headers(), SystemTime::now());
        let text = response.text().await.unwrap_or_default();
        return Err(classify(status.as_u16(), retry_after, &text));
    }
    let content_type = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|ct| ct.trim_start().to_ascii_lowercase())
        .unwrap_or_default();
    if content_type.starts_with("application/json") {
        return Ok(Answer::Whole(whole_body(response).await?));
    }
    // An event stream, or a server that names no type (some do); anything else — an HTML page from
    // a proxy or a login portal — is not the protocol, whatever its status says.
    if !content_type.is_empty() && !content_type.starts_with("text/event-stream") {
        let body = whole_body(response).await.unwrap_or_default();
        return Err(ProviderError::StreamAnomaly {
            kind: AnomalyKind::NotProtocol,
            message: format!(
                "{url} answered {} with {content_type}, not an event stream: {}",
                status.as_u16(),
                super::openai::truncate_chars(body.trim(), 200)
            ),
        });
    }
    Ok(Answer::Stream(response))
}

/// A chat answer's whole body; a body that breaks off is a `Cut` anomaly.
pub(crate) async fn whole_body(response: reqwest::Response) -> Result<String, ProviderError> {
    response.text().await.map_err(|e| ProviderError::StreamAnomaly {
        kind: AnomalyKind::Cut,
        message: format!("the response broke off: {}", error_chain(&e)),
    })
}
