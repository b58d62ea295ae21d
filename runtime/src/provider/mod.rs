//! Model providers: what a chat request and its answer look like to the rest of agentd, the errors
//! a provider can answer with (already sorted by what the caller should do about them), and the
//! provider kinds a config may name ([`ProviderKind`], the one place they are parsed).
//!
//! Two wire formats, both always streaming: OpenAI chat completions (OpenAI, vLLM, llama.cpp,
//! Ollama, LM Studio, DeepSeek …, see [`OpenAiClient`]) and Anthropic Messages (see
//! [`AnthropicClient`]). Each implements the seam, `wire::WireFormat` (`provider/wire.rs`), over
//! the shared HTTP client in `provider/http.rs`; [`Client`] is the one type the runtime holds.

pub(crate) mod anthropic;
mod client;
mod error;
mod http;
pub(crate) mod openai;
pub(crate) mod sse;
mod wire;

use agentd_agents::schema::ToolSchema;
use agentd_policies::retry::Failure;
use agentd_policies::{Message, Tokens, Usage};
use http::Http;
use std::fmt;
use std::time::Duration;
use wire::WireFormat;

pub use anthropic::body::AnthropicBody;
pub use anthropic::AnthropicClient;
pub use client::Client;
pub use http::Deadlines;
pub use openai::body::OpenAiBody;
pub use openai::OpenAiClient;

/// The provider kinds, as the config's `kind` names them, and the wire format each speaks. Each
/// line makes a [`ProviderKind`] variant, the name [`ProviderKind::parse`] reads and the client
/// [`ProviderKind::connect`] makes: a new wire format is its module and one line here.
macro_rules! kinds {
    ($($(#[$doc:meta])* $name:literal => $variant:ident($format:ty),)+) => {
        /// A provider's `kind` in the config: which wire format its server speaks.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum ProviderKind {
            $($(#[$doc])* $variant,)+
        }

        impl ProviderKind {
            /// Every kind's name, as the config spells it.
            pub const NAMES: &'static [&'static str] = &[$($name),+];

            /// The kind the config names `name`, if there is one.
            pub fn parse(name: &str) -> Option<ProviderKind> {
                match name {
                    $($name => Some(ProviderKind::$variant),)+
                    _ => None,
                }
            }

            /// A client for the server at `base_url` (the API root with its version, e.g.
            /// `http://127.0.0.1:8000/v1`) in this kind's wire format.
            pub fn connect(self, base_url: &str, api_key: Option<String>, deadlines: Deadlines) -> Client {
                let http = Http::new(base_url, api_key).with_deadlines(deadlines);
                match self {
                    $(ProviderKind::$variant => Client::new(<$format as WireFormat>::connect(http)),)+
                }
            }
        }
    };
}

kinds! {
    /// OpenAI chat completions: OpenAI, vLLM, llama.cpp, LM Studio, DeepSeek …
    "openai" => OpenAi(OpenAiClient),
    /// Anthropic Messages: `api_key_env` names the key sent as `x-api-key`.
    "anthropic" => Anthropic(AnthropicClient),
    /// Ollama, through its OpenAI-compatible API.
    "ollama" => Ollama(OpenAiClient),
}

impl ProviderKind {
    /// The kinds as an error message lists them: `"openai", "anthropic" or "ollama"`.
    pub fn expected() -> String {
        let quoted: Vec<String> = ProviderKind::NAMES.iter().map(|n| format!("{n:?}")).collect();
        match quoted.split_last() {
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        }
    }
}

/// One request to a chat model, in agentd's terms. [`OpenAiClient::body`] shows it on the wire.
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
    /// The provider's own count, when it reported a well-formed one. `prompt_tokens` is everything
    /// the model processed, cached or not (Anthropic: input + cache read + cache creation).
    pub usage: Option<Usage>,
    /// Prompt tokens read from the provider's prompt cache, when it reports them (Anthropic).
    pub cache_read_tokens: Option<u64>,
    /// Prompt tokens written to the provider's prompt cache, when it reports them (Anthropic).
    pub cache_creation_tokens: Option<u64>,
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
    /// A data line was not valid JSON (or the stream was not valid SSE/UTF-8).
    Parse,
    /// A 2xx answer that is not the protocol at all (an HTML page from a proxy or a portal).
    NotProtocol,
    /// No event within the idle deadline (comments and keep-alives are not progress), or the whole
    /// answer not within the request deadline.
    Stalled,
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
        }
    }
}

impl fmt::Display for AnomalyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
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
        /// How long the server asked to wait (`Retry-After`), when it said.
        retry_after: Option<Duration>,
        /// What the provider said: its error object's message, else the body (`HTTP 503 with an empty body`).
        message: String,
    },
    /// HTTP 529 (or Anthropic's `overloaded_error`): the provider is overloaded, briefly; its own
    /// shorter schedule, `Retry-After` honoured.
    #[error("the provider is overloaded: {message}")]
    Overloaded {
        /// How long the server asked to wait (`Retry-After`), when it said.
        retry_after: Option<Duration>,
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
    /// Any other 4xx (bad key, unknown model, malformed request …): resending will not help.
    #[error("provider refused the request ({status}): {message}")]
    Rejected {
        /// The HTTP status.
        status: u16,
        /// What the provider said: its error object's message, else the body (`HTTP 503 with an empty body`).
        message: String,
    },
    /// No answer at all: connection refused, DNS, TLS, timeout.
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

    /// The failure the retry policy weighs, when waiting and resending may help: a rate limit (with
    /// the server's `Retry-After`), a server error, or a stream anomaly. A connection that broke or
    /// was refused is retried like a server error, but not a cancelled call. `None`: give up.
    pub fn retry_failure(&self) -> Option<Failure> {
        match self {
            ProviderError::RateLimited { retry_after, .. } => {
                Some(Failure::RateLimit { retry_after_ms: retry_after.map(|d| d.as_millis() as u64) })
            }
            ProviderError::Overloaded { retry_after, .. } => {
                Some(Failure::Overloaded { retry_after_ms: retry_after.map(|d| d.as_millis() as u64) })
            }
            ProviderError::Server { .. } | ProviderError::Transport { .. } => Some(Failure::ServerError),
            ProviderError::StreamAnomaly { .. } => Some(Failure::StreamAnomaly),
            ProviderError::ContextOverflow { .. }
            | ProviderError::Rejected { .. }
            | ProviderError::Cancelled { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_by_name_and_connect_to_their_wire_format() {
        assert_eq!(ProviderKind::NAMES, ["openai", "anthropic", "ollama"]);
        for name in ProviderKind::NAMES {
            let kind = ProviderKind::parse(name).unwrap();
            let client = kind.connect("http://127.0.0.1:9/v1/", None, Deadlines::default());
            assert_eq!(client.base_url(), "http://127.0.0.1:9/v1");
        }
        assert_eq!(ProviderKind::parse("anthropic"), Some(ProviderKind::Anthropic));
        assert_eq!(ProviderKind::parse("ollama"), Some(ProviderKind::Ollama));
        assert_eq!(ProviderKind::parse("OpenAI"), None, "names are exact");
        assert_eq!(ProviderKind::parse("gemini"), None);
        assert_eq!(ProviderKind::expected(), r#""openai", "anthropic" or "ollama""#);
        // The format is the kind's: Anthropic claims its default max_tokens, OpenAI nothing.
        let req = ChatRequest {
            model: "m".into(),
            system: String::new(),
            messages: vec![],
            tools: vec![],
            tool_choice_none: false,
            max_tokens: None,
            thinking_budget: None,
        };
        let reserve =
            |kind: ProviderKind| kind.connect("http://h/v1", None, Deadlines::default()).output_reserve(&req);
        assert_eq!(reserve(ProviderKind::OpenAi), Tokens(0));
        assert_eq!(reserve(ProviderKind::Ollama), Tokens(0));
        assert_eq!(reserve(ProviderKind::Anthropic), Tokens(u64::from(anthropic::DEFAULT_MAX_TOKENS)));
    }

    #[test]
    fn retry_failures() {
        let transport = |message: &str| ProviderError::Transport { url: "u".into(), message: message.into() };
        let rate_limited = |retry_after| ProviderError::RateLimited { retry_after, message: "m".into() };
        assert_eq!(
            rate_limited(Some(Duration::from_millis(1500))).retry_failure(),
            Some(Failure::RateLimit { retry_after_ms: Some(1500) })
        );
        assert_eq!(rate_limited(None).retry_failure(), Some(Failure::RateLimit { retry_after_ms: None }));
        let server = ProviderError::Server { status: 503, message: "m".into() };
        assert_eq!(server.retry_failure(), Some(Failure::ServerError));
        assert_eq!(transport("connection refused").retry_failure(), Some(Failure::ServerError));
        // A transport error that merely says "cancelled" is still a transport error: only the
        // variant means the caller cancelled.
        assert_eq!(transport("cancelled").retry_failure(), Some(Failure::ServerError));
        let cancelled = ProviderError::Cancelled { url: "u".into() };
        assert!(cancelled.is_cancelled() && !transport("cancelled").is_cancelled());
        assert_eq!(cancelled.retry_failure(), None);
        let anomaly = ProviderError::StreamAnomaly { kind: AnomalyKind::Cut, message: "m".into() };
        assert_eq!(anomaly.retry_failure(), Some(Failure::StreamAnomaly));
        let overflow = ProviderError::ContextOverflow { limit: None, message: "m".into() };
        assert_eq!(overflow.retry_failure(), None);
        assert_eq!(ProviderError::Rejected { status: 401, message: "m".into() }.retry_failure(), None);
    }
}
