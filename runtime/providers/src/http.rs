//! The HTTP client every wire format sends with ([`Http`]: one server's pooled connections, API
//! root, key and deadlines), and the parts of a call they share: its cancellation and deadlines, a
//! refusal's status and `Retry-After`, a connection that failed (with its causes), a short probe or
//! count exchange, and a server that answers a streaming request in one JSON piece. How the key is
//! sent, and what the bodies and answers mean, is each wire format's business.

use super::error::truncate_chars;
use agentd_protocol::{AnomalyKind, ChatResponse, ProviderError, RetryAfter};
use reqwest::header::{HeaderMap, CONTENT_TYPE, RETRY_AFTER};
use reqwest::RequestBuilder;
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
const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// A client whose connecting times out after 10 s and whose stream may run as long as it keeps
/// sending (a read waits at most 300 s); idle pooled connections are dropped after 4 s.
// Building fails only when the TLS backend cannot initialise (no input is involved): there is no
// client at all then, and the daemon cannot talk to any model.
#[allow(clippy::expect_used)]
fn http_client() -> reqwest::Client {
    install_tls_provider();
    reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .read_timeout(READ_TIMEOUT)
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .build()
        .expect("the HTTP client (TLS backend) could not be initialised")
}

/// Makes *ring* the process's TLS cryptography provider, if none is yet: the one provider in the
/// dependency tree (async-nats uses it too; aws-lc-rs, reqwest's default, compiles C with cmake).
/// Every HTTPS client of the process (a model's, an MCP server's) needs one before it connects;
/// calling this again does nothing.
pub fn install_tls_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Another thread may have installed one in between: either way there is one.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// One server as every wire format talks to it: a pooled client, the API root (without a trailing
/// slash, e.g. `http://127.0.0.1:8000/v1`), the key when there is one, and the request deadlines.
/// Clones share the connection pool.
#[derive(Debug, Clone)]
pub(crate) struct Http {
    client: reqwest::Client,
    base_url: String,
    api_key: Option<String>,
    deadlines: Deadlines,
}

impl Http {
    /// `base_url` is the API root including its version; an empty key is no key. The deadlines
    /// are the defaults until [`with_deadlines`](Self::with_deadlines).
    pub(crate) fn new(base_url: &str, api_key: Option<String>) -> Http {
        Http {
            client: http_client(),
            base_url: base_url.trim_end_matches('/').to_string(),
            api_key: api_key.filter(|k| !k.is_empty()),
            deadlines: Deadlines::default(),
        }
    }

    pub(crate) fn with_deadlines(self, deadlines: Deadlines) -> Http {
        Http { deadlines, ..self }
    }

    pub(crate) fn base_url(&self) -> &str {
        &self.base_url
    }

    /// `{base}{path}`, `path` starting with `/`.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }

    pub(crate) fn api_key(&self) -> Option<&str> {
        self.api_key.as_deref()
    }

    pub(crate) fn deadlines(&self) -> Deadlines {
        self.deadlines
    }

    pub(crate) fn get(&self, url: &str) -> RequestBuilder {
        self.client.get(url)
    }

    pub(crate) fn post(&self, url: &str) -> RequestBuilder {
        self.client.post(url)
    }
}

/// A request to `url` that got no answer (connection refused, DNS, TLS, timeout, a broken read).
pub(crate) fn transport(url: &str, e: &reqwest::Error) -> ProviderError {
    if refused(e) {
        return ProviderError::ConnectionRefused { url: url.to_string() };
    }
    ProviderError::Transport { url: url.to_string(), message: error_chain(e) }
}

/// Whether the connection was refused: nothing listens at the address (an I/O error of that kind
/// somewhere in the error's causes).
fn refused(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
        {
            return true;
        }
        cause = c.source();
    }
    false
}

/// How long a model request may take: `total` from sending to the last event, `idle` between two
/// pieces of its stream that bring part of an event (SSE comments and keep-alives are none: a
/// server that only sends those is stalled; see `sse`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    /// The longest a stream may go without bringing any part of an event (`requests.idle_timeout`,
    /// default 60 s).
    pub idle: Duration,
    /// The longest a whole request may take, from sending to its last event (`requests.timeout`, default 10
    /// min).
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
    request: RequestBuilder,
    url: &str,
    classify: fn(u16, Option<RetryAfter>, &str) -> ProviderError,
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
                truncate_chars(body.trim(), 200)
            ),
        });
    }
    Ok(Answer::Stream(response))
}

/// Sends a chat request that asks for one JSON answer: its body text. A non-2xx answer is the error
/// `classify` makes of its status, `Retry-After` and body.
pub(crate) async fn send_whole(
    request: RequestBuilder,
    url: &str,
    classify: fn(u16, Option<RetryAfter>, &str) -> ProviderError,
) -> Result<String, ProviderError> {
    let response = request.send().await.map_err(|e| transport(url, &e))?;
    let status = response.status();
    let retry_after = retry_after(response.headers(), SystemTime::now());
    let text = whole_body(response).await?;
    if !status.is_success() {
        return Err(classify(status.as_u16(), retry_after, &text));
    }
    Ok(text)
}

/// What a short exchange (a window probe, a count) was answered with.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) retry_after: Option<RetryAfter>,
    pub(crate) body: String,
}

impl Reply {
    pub(crate) fn is_success(&self) -> bool {
        (200..=299).contains(&self.status)
    }
}

/// Sends a short request — a window probe, a count — within [`PROBE_TIMEOUT`] and reads its whole
/// answer, whatever its status; an answer that does not come (or breaks off) is a transport error.
pub(crate) async fn exchange(request: RequestBuilder, url: &str) -> Result<Reply, ProviderError> {
    let response = request.timeout(PROBE_TIMEOUT).send().await.map_err(|e| transport(url, &e))?;
    let status = response.status().as_u16();
    let retry_after = retry_after(response.headers(), SystemTime::now());
    let body = response.text().await.map_err(|e| transport(url, &e))?;
    Ok(Reply { status, retry_after, body })
}

/// A chat answer's whole body; a body that breaks off is a `Cut` anomaly.
pub(crate) async fn whole_body(response: reqwest::Response) -> Result<String, ProviderError> {
    response.text().await.map_err(|e| ProviderError::StreamAnomaly {
        kind: AnomalyKind::Cut,
        message: format!("the response broke off: {}", error_chain(&e)),
    })
}

/// An error and its sources, `: `-separated (reqwest's own message hides the cause).
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// The server's requested delay: `retry-after-ms` (OpenAI), else `Retry-After` in seconds or as an
/// HTTP date (relative to `now`; a date in the past means "now"), else when the rate limits reset:
/// the latest of OpenAI's `x-ratelimit-reset-requests` / `-tokens` (`6m0s`, `1.5s`, `20ms`) and
/// Anthropic's `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-reset` (RFC 3339).
pub(crate) fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<RetryAfter> {
    let header = |name| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.trim().parse::<f64>().ok()) {
        if let Some(after) = RetryAfter::of_secs(ms / 1000.0, "retry-after-ms") {
            return Some(after);
        }
    }
    if let Some(after) = header(RETRY_AFTER.as_str()).and_then(|v| parse_retry_after(v, now)) {
        return Some(RetryAfter::new(after, "retry-after"));
    }
    let openai = ["x-ratelimit-reset-requests", "x-ratelimit-reset-tokens"]
        .into_iter()
        .filter_map(|name| Some(RetryAfter::new(header(name).and_then(parse_reset_duration)?, name)));
    let anthropic = [
        "anthropic-ratelimit-requests-reset",
        "anthropic-ratelimit-tokens-reset",
        "anthropic-ratelimit-input-tokens-reset",
        "anthropic-ratelimit-output-tokens-reset",
    ]
    .into_iter()
    .filter_map(|name| {
        let at = humantime::parse_rfc3339_weak(header(name)?.trim()).ok()?;
        Some(RetryAfter::new(at.duration_since(now).unwrap_or(Duration::ZERO), name))
    });
    openai.chain(anthropic).max_by_key(|r| r.delay)
}

/// OpenAI's reset durations: `1s`, `6m0s`, `1h2m3.5s`, `20ms`.
pub(crate) fn parse_reset_duration(value: &str) -> Option<Duration> {
    let mut rest = value.trim();
    let mut total = 0.0f64;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).filter(|&n| n > 0)?;
        let number: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (unit, len) = if rest.starts_with("ms") {
            (0.001, 2)
        } else if rest.starts_with('h') {
            (3600.0, 1)
        } else if rest.starts_with('m') {
            (60.0, 1)
        } else if rest.starts_with('s') {
            (1.0, 1)
        } else {
            return None;
        };
        total += number * unit;
        rest = &rest[len..];
    }
    Some(saturating_secs(total))
}

/// `secs` (finite and at least 0, or +∞) as a duration, `Duration::MAX` when it is longer: a
/// header's number never panics the conversion. [`RetryAfter::new`] then caps it.
fn saturating_secs(secs: f64) -> Duration {
    Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX)
}

/// `Retry-After: 120` or `Retry-After: Wed, 21 Oct 2015 07:28:00 GMT`.
pub(crate) fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    if value.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        let secs = value.parse::<f64>().ok().filter(|s| *s >= 0.0)?;
        return Some(saturating_secs(secs));
    }
    // IMF-fixdate, and the obsolete RFC 850 and asctime forms (RFC 9110 §5.6.7).
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn the_rate_limits_reset_when_no_retry_after_says() {
        let now = UNIX_EPOCH + Duration::from_secs(1_764_658_800); // 2025-12-02T07:00:00Z
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.insert(*k, v.parse().unwrap());
            }
            h
        };
        assert_eq!(parse_reset_duration("6m0s"), Some(Duration::from_secs(360)));
        assert_eq!(parse_reset_duration("1h2m3.5s"), Some(Duration::from_millis(3_723_500)));
        assert_eq!(parse_reset_duration("20ms"), Some(Duration::from_millis(20)));
        assert_eq!(parse_reset_duration("soon"), None);
        assert_eq!(parse_reset_duration(""), None);
        let openai = headers(&[("x-ratelimit-reset-requests", "1s"), ("x-ratelimit-reset-tokens", "6m0s")]);
        assert_eq!(
            retry_after(&openai, now),
            Some(RetryAfter::new(Duration::from_secs(360), "x-ratelimit-reset-tokens")),
            "the later of the two"
        );
        let anthropic = headers(&[("anthropic-ratelimit-tokens-reset", "2025-12-02T10:00:00Z")]);
        assert_eq!(
            retry_after(&anthropic, now),
            Some(RetryAfter::new(Duration::from_secs(3 * 3600), "anthropic-ratelimit-tokens-reset"))
        );
        // Retry-After, when sent, says it first.
        let both =
            headers(&[("retry-after", "30"), ("anthropic-ratelimit-tokens-reset", "2025-12-02T10:00:00Z")]);
        assert_eq!(retry_after(&both, now), Some(RetryAfter::new(Duration::from_secs(30), "retry-after")));
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
    }

    #[test]
    fn retry_after_seconds_and_dates() {
        let now = UNIX_EPOCH + Duration::from_secs(1_445_412_480 - 90);
        assert_eq!(parse_retry_after("120", now), Some(Duration::from_secs(120)));
        assert_eq!(parse_retry_after(" 1.5 ", now), Some(Duration::from_millis(1500)));
        // 2015-10-21T07:28:00Z is 1445412480.
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now), Some(Duration::from_secs(90)));
        assert_eq!(
            parse_retry_after("Wednesday, 21-Oct-15 07:28:00 GMT", now),
            Some(Duration::from_secs(90))
        );
        assert_eq!(parse_retry_after("Wed Oct 21 07:28:00 2015", now), Some(Duration::from_secs(90)));
        // In the past: retry now.
        let later = UNIX_EPOCH + Duration::from_secs(1_445_412_480 + 5);
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", later), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-1", now), None);
        assert_eq!(parse_retry_after("Wed, 32 Oct 2015 07:28:00 GMT", now), None);
        // A weekday that does not fit the date is not a date.
        assert_eq!(parse_retry_after("Mon, 21 Oct 2015 07:28:00 GMT", now), None);
        let epoch = UNIX_EPOCH;
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", epoch),
            Some(Duration::from_secs(784_111_777))
        );
        assert_eq!(
            parse_retry_after("Thu, 29 Feb 2024 00:00:00 GMT", epoch),
            Some(Duration::from_secs(1_709_164_800))
        );
    }

    #[test]
    fn retry_after_headers() {
        let now = SystemTime::now();
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after(&headers, now), None);
        headers.insert(RETRY_AFTER, "7".parse().unwrap());
        assert_eq!(retry_after(&headers, now), Some(RetryAfter::new(Duration::from_secs(7), "retry-after")));
        headers.insert("retry-after-ms", "250".parse().unwrap());
        assert_eq!(
            retry_after(&headers, now),
            Some(RetryAfter::new(Duration::from_millis(250), "retry-after-ms"))
        );
    }

    /// A hostile server's waits are taken at the 30-day ceiling, marked capped, and never panic
    /// the conversion (they did: `from_secs_f64` on 1e300, a wrapping `as u64` on 2^64 s).
    #[test]
    fn a_wait_past_the_ceiling_is_the_ceiling_and_says_so() {
        let now = SystemTime::now();
        let ceiling = agentd_protocol::MAX_PROVIDER_WAIT;
        for (name, value) in [
            ("retry-after-ms", "1e300"),
            ("retry-after-ms", "inf"),
            ("retry-after", "99999999999999999999.5"),
            ("retry-after", "300000000000"),
            ("retry-after", "18446744073709551615"),
            ("retry-after", "18446744073709552"),
            ("retry-after", "184467440737095516150000"),
            ("x-ratelimit-reset-requests", "99999999999999999999999h"),
            ("x-ratelimit-reset-tokens", "1e400s"),
            ("anthropic-ratelimit-tokens-reset", "9999-12-31T23:59:59Z"),
        ] {
            let mut headers = HeaderMap::new();
            headers.insert(reqwest::header::HeaderName::from_static(name), value.parse().unwrap());
            let got = retry_after(&headers, now);
            if name == "x-ratelimit-reset-tokens" {
                // `1e400s` is no OpenAI duration (a letter inside the number).
                assert_eq!(got, None, "{name}: {value}");
                continue;
            }
            let got = got.unwrap_or_else(|| panic!("{name}: {value}"));
            assert_eq!((got.delay, got.capped, got.header), (ceiling, true, name), "{name}: {value}");
            assert_eq!(got.millis(), 30 * 86_400_000);
        }
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, "2592000".parse().unwrap());
        let exactly = retry_after(&headers, now).unwrap();
        assert_eq!((exactly.delay, exactly.capped), (ceiling, false), "the ceiling itself is no cap");
        for nonsense in ["NaN", "-1e300", "-inf", "1..2", ""] {
            let mut headers = HeaderMap::new();
            headers.insert("retry-after-ms", nonsense.parse().unwrap());
            assert_eq!(retry_after(&headers, now), None, "{nonsense}");
        }
    }
}
