//! The model seam: what a chat request and its answer are to agentd, the errors a provider answers
//! with (already sorted by what the caller should do about them), and [`Model`], the one trait a
//! provider client implements for the engine.
//!
//! It sits here, in the vocabulary every room shares, because two rooms meet at it that must not
//! know each other: `agentd-providers` (wire formats over HTTP) implements [`Model`], and
//! `agentd-engine` (the turn loop and the fitter) calls it without depending on any HTTP client.
//! Nothing here does IO: the trait only names the calls, and its futures are plain boxed futures.

use crate::message::Message;
use crate::tokens::Tokens;
use crate::tool::ToolSchema;
use crate::usage::RawUsage;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// One request to a chat model, in agentd's terms; each wire format of `agentd-providers` shows it
/// in its own body.
#[derive(Debug, Clone)]
pub struct ChatRequest {
    /// The model to ask, as the provider names it.
    pub model: String,
    /// Sent as the first message (`role: system`); left out when empty.
    pub system: String,
    /// The conversation after the system prompt, in order.
    pub messages: Vec<Message>,
    /// The tools the model may call, as the agents describe them; each wire format wraps them.
    pub tools: Vec<ToolSchema>,
    /// Keep the tools (so the cached prompt prefix is reused) but forbid calling them
    /// (`tool_choice: "none"`), as a summarisation request does.
    pub tool_choice_none: bool,
    /// The most tokens the answer may take (`max_tokens` on the wire); `None` leaves it to the server, except
    /// where a wire format requires one.
    pub max_tokens: Option<u32>,
    /// Extended thinking's token budget (the role's `thinking_budget`). Sent only to Anthropic
    /// (`thinking: {type: enabled, budget_tokens}`, with `max_tokens` raised above it); the
    /// OpenAI wire has no such field and ignores it.
    pub thinking_budget: Option<u32>,
    /// A key the server may route on so that requests sharing a prefix land on the same prompt
    /// cache (OpenAI's `prompt_cache_key`): an agent's requests carry `{task}/{role}`, which stays
    /// the same across restarts and takeovers. Sent by the formats whose servers read it; `None`
    /// sends nothing.
    pub cache_key: Option<String>,
}

/// A complete answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatResponse {
    /// Speaker `Assistant`. Parts in order: `Thinking` (the provider's reasoning) first if any, then
    /// `Text` if any, then the `ToolCall`s in the provider's index order.
    pub message: Message,
    /// Why the model stopped, in OpenAI's words (`stop`, `tool_calls`, `length`, …); Anthropic's stop reasons
    /// are mapped to them.
    pub finish_reason: String,
    /// The provider's usage report as it said it, when it sent one: every figure kept, none
    /// believed yet (the engine judges it against the request with `agentd_policies::reported`).
    pub usage: Option<RawUsage>,
}

/// What went wrong with a stream that was accepted by the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AnomalyKind {
    /// The stream ended (closed or `[DONE]`) after some output but without a finish reason.
    NoFinishReason,
    /// Nothing usable came back: no text and no tool call.
    Empty,
    /// The connection failed in the middle of the stream.
    Cut,
    /// A data line was not valid JSON (or an event's bytes were not UTF-8).
    Parse,
    /// A 2xx answer that is not the protocol at all (an HTML page from a proxy or a portal).
    NotProtocol,
    /// No part of an event within the idle deadline (comments and keep-alives are not progress),
    /// or the whole answer not within the request deadline.
    Stalled,
    /// One event of the stream was bigger than agentd reads (64 MiB): the same request would be
    /// answered the same, so it is not resent.
    TooLarge,
}

impl AnomalyKind {
    /// The kind's name, as error messages and logs show it (`no_finish_reason`, `stalled`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            AnomalyKind::NoFinishReason => "no_finish_reason",
            AnomalyKind::Empty => "empty",
            AnomalyKind::Cut => "cut",
            AnomalyKind::Parse => "parse",
            AnomalyKind::NotProtocol => "not_protocol",
            AnomalyKind::Stalled => "stalled",
            AnomalyKind::TooLarge => "too_large",
        }
    }
}

impl fmt::Display for AnomalyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The longest wait a provider's header is taken at: 30 days. A server that asks for longer (a
/// misconfigured proxy, a hostile one, `Retry-After: 18446744073709551615`) is waited this long, and
/// the wait says it was capped ([`RetryAfter::capped`]); `task.resume` goes on sooner.
pub const MAX_PROVIDER_WAIT: Duration = Duration::from_secs(30 * 86_400);

/// How long a server asked to wait before the next request, and the header that said so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryAfter {
    /// The wait, from when the answer arrived: at most [`MAX_PROVIDER_WAIT`].
    pub delay: Duration,
    /// The header it was read from, lower case: `retry-after-ms`, `retry-after`,
    /// `x-ratelimit-reset-requests`, `x-ratelimit-reset-tokens`, `anthropic-ratelimit-tokens-reset`, ….
    pub header: &'static str,
    /// The server asked for longer than [`MAX_PROVIDER_WAIT`], and `delay` is that ceiling.
    pub capped: bool,
}

impl RetryAfter {
    /// A wait said by `header`, capped at [`MAX_PROVIDER_WAIT`].
    pub fn new(delay: Duration, header: &'static str) -> RetryAfter {
        let capped = delay > MAX_PROVIDER_WAIT;
        RetryAfter { delay: delay.min(MAX_PROVIDER_WAIT), header, capped }
    }

    /// A wait of `secs` seconds (fractions allowed) said by `header`: `None` when `secs` is no
    /// duration (not a number, or below 0); any finite or infinite amount above the ceiling is the
    /// ceiling. Never panics, whatever the number.
    pub fn of_secs(secs: f64, header: &'static str) -> Option<RetryAfter> {
        if secs.is_nan() || secs < 0.0 {
            return None;
        }
        let delay = Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX);
        Some(RetryAfter::new(delay, header))
    }

    /// The wait in whole milliseconds (it always fits: the ceiling is 30 days).
    pub fn millis(&self) -> u64 {
        u64::try_from(self.delay.as_millis()).unwrap_or(u64::MAX)
    }
}

/// A provider failure, classified by what the caller should do: wait and resend
/// (`RateLimited`, `Server`, `StreamAnomaly`), compact and resend (`ContextOverflow`), or give up
/// with the provider's words (`Rejected`, `Transport`); `Cancelled` is the caller's own doing.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProviderError {
    /// HTTP 429. `retry_after` is the server's `Retry-After`, when it sent one.
    #[error("rate limited by the provider: {message}")]
    RateLimited {
        /// How long the server asked to wait, and which header said so, when one did.
        retry_after: Option<RetryAfter>,
        /// What the provider said: its error object's message, else the body (`HTTP 503 with an empty body`).
        message: String,
    },
    /// HTTP 529 (or Anthropic's `overloaded_error`): the provider is overloaded, briefly; its own
    /// shorter schedule, `Retry-After` honoured.
    #[error("the provider is overloaded: {message}")]
    Overloaded {
        /// How long the server asked to wait, and which header said so, when one did.
        retry_after: Option<RetryAfter>,
        /// What the provider said: its error object's message, else the body (`HTTP 503 with an empty body`).
        message: String,
    },
    /// HTTP 5xx, or an error object inside an accepted stream.
    #[error("provider server error {status}: {message}")]
    Server {
        /// The HTTP status (500 for an error inside an accepted stream).
        status: u16,
        /// What the provider said: its error object's message, else the body (`HTTP 503 with an empty body`).
        message: String,
    },
    /// The request does not fit the model's window. `limit` is the window the refusal states.
    #[error("context window exceeded: {message}")]
    ContextOverflow {
        /// The window the refusal states, when it states one.
        limit: Option<Tokens>,
        /// What the provider said: its error object's message, else the body (`HTTP 503 with an empty body`).
        message: String,
    },
    /// An accepted stream that broke, stalled or carried no usable answer: resent by the `stream_anomaly`
    /// schedule.
    #[error("stream anomaly ({kind}): {message}")]
    StreamAnomaly {
        /// What went wrong with the stream.
        kind: AnomalyKind,
        /// What was seen, in words.
        message: String,
    },
    /// The account's quota or credit is used up (OpenAI's 429 `insufficient_quota`, Anthropic's
    /// `billing_error`): it will not come back by waiting, so the request is never resent.
    #[error("the provider's quota is used up ({status}): {message}")]
    QuotaExhausted {
        /// The HTTP status.
        status: u16,
        /// What the provider said.
        message: String,
    },
    /// Any other 4xx (bad key, unknown model, malformed request …): resending will not help.
    #[error("provider refused the request ({status}): {message}")]
    Rejected {
        /// The HTTP status.
        status: u16,
        /// What the provider said: its error object's message, else the body (`HTTP 503 with an empty body`).
        message: String,
    },
    /// Nothing listens at the server's address: the connection was refused. Never resent — a
    /// server that is not running, or a `base_url` with the wrong port, does not come back by
    /// waiting; the task fails at once saying so, where a retry schedule would take minutes.
    #[error("connection refused: is the server at {url} running? (`agentd doctor` checks each provider)")]
    ConnectionRefused {
        /// The URL the request went to.
        url: String,
    },
    /// No answer at all: DNS, TLS, timeout, a connection reset.
    #[error("cannot reach the provider at {url}: {message}")]
    Transport {
        /// The URL the request went to.
        url: String,
        /// The transport error and its causes, in words.
        message: String,
    },
    /// The caller's cancellation token fired: the call to `url` was dropped unanswered.
    #[error("the request to {url} was cancelled")]
    Cancelled {
        /// The URL the request went to.
        url: String,
    },
}

impl ProviderError {
    /// True for the error a chat call returns when its cancellation token fired.
    pub fn is_cancelled(&self) -> bool {
        matches!(self, ProviderError::Cancelled { .. })
    }
}

/// How a server's prompt cache bills a request's prefix it has seen before: a cached prompt token
/// costs `read_factor` of an uncached one, and only a prefix of at least `min_tokens` is cached.
/// Declared per provider (`[providers.NAME] cache = { read_factor, min_tokens }`), Anthropic's
/// figures by default for `kind = "anthropic"`; a provider without one is priced as if it had no
/// cache, and its compactions keep today's rule (as many recent rounds as fit).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PromptCache {
    /// What a cached prompt token costs relative to an uncached one, in `[0, 1]` (0.1 at Anthropic
    /// and for OpenAI's recent models).
    pub read_factor: f64,
    /// The shortest prefix the server caches, in tokens (1,024 at Anthropic and OpenAI).
    pub min_tokens: Tokens,
}

impl PromptCache {
    /// Anthropic's prompt cache: reads at 0.1× the input price, prefixes of 1,024 tokens or more.
    pub const ANTHROPIC: PromptCache = PromptCache { read_factor: 0.1, min_tokens: Tokens(1024) };

    /// What re-reading a prefix of `tokens` costs, in uncached tokens: at the read factor when the
    /// prefix is long enough to be cached, in full otherwise.
    pub fn reread(&self, tokens: Tokens) -> f64 {
        if tokens >= self.min_tokens {
            self.read_factor * tokens.0 as f64
        } else {
            tokens.0 as f64
        }
    }
}

/// The future of a call to a model's server.
pub type ModelCall<'a, T> = Pin<Box<dyn Future<Output = Result<T, ProviderError>> + Send + 'a>>;

/// A model's server, whatever its wire format: what the engine sends requests to, probes windows
/// from and asks to count. Implemented by `agentd_providers::Client`.
///
/// A call is cancelled by dropping its future (the engine races it against the task's
/// cancellation and answers [`ProviderError::Cancelled`] itself).
pub trait Model: Send + Sync {
    /// The server's base URL: with the model name, the key windows and calibrations are kept under.
    fn server(&self) -> &str;
    /// Sends the request, streaming, and assembles the answer.
    fn chat<'a>(&'a self, req: &'a ChatRequest) -> ModelCall<'a, ChatResponse>;
    /// The output room a request claims inside the window: what the wire says the answer may take.
    fn output_reserve(&self, req: &ChatRequest) -> Tokens;
    /// The window the server declares for `model`, if it declares one.
    fn probe_window<'a>(&'a self, model: &'a str) -> ModelCall<'a, Option<Tokens>>;
    /// The tokens of `text` for `model` by the server's own count (no special tokens), when the
    /// server offers a counting endpoint; `None` when it has none.
    fn count_text<'a>(&'a self, model: &'a str, text: &'a str) -> ModelCall<'a, Option<u64>>;
    /// How the server's prompt cache bills a prefix it has seen, when it has one that was declared
    /// (or is known for its kind). `None`: priced as if uncached.
    fn prompt_cache(&self) -> Option<PromptCache> {
        None
    }
    /// Whether the server's prompt cache may be learned from its usage reports when none is declared
    /// (`cache = false` says no).
    fn learns_prompt_cache(&self) -> bool {
        true
    }
}
