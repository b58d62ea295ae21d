//! Model providers: the wire formats agentd speaks to a model's server over HTTP, and the provider
//! kinds a config may name ([`ProviderKind`], the one place they are parsed).
//!
//! Three wire formats, all always streaming: OpenAI chat completions (OpenAI, vLLM, llama.cpp,
//! Ollama, LM Studio, DeepSeek …, see [`OpenAiClient`]), OpenAI's Responses API (reasoning models,
//! see [`ResponsesClient`]) and Anthropic Messages (see [`AnthropicClient`]). Each implements the seam, `wire::WireFormat` (`wire.rs`), over the shared
//! HTTP client in `http.rs`; [`Client`] is the one type the daemon holds, and it implements
//! `agentd_protocol::Model`, the trait the engine calls.
//!
//! What this room must not do: know the engine, the store, the socket or the daemon. It depends on
//! `agentd-protocol` alone (the request, the answer, the errors and the `Model` trait are there), so
//! the engine never links an HTTP client. A refusal's stated window is read here (`refusal`).

pub(crate) mod anthropic;
pub mod api_check;
mod client;
mod error;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod http;
mod non_finite;
pub(crate) mod openai;
mod optional;
mod refusal;
pub(crate) mod responses;
pub(crate) mod sse;
mod surface;
mod wire;

use http::Http;
use wire::WireFormat;

pub use anthropic::body::AnthropicBody;
pub use anthropic::AnthropicClient;
pub use client::Client;
pub use http::{install_tls_provider, Deadlines};
pub use openai::body::OpenAiBody;
pub use openai::OpenAiClient;
pub use responses::body::ResponsesBody;
pub use responses::ResponsesClient;

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
            /// Every kind, in the order of [`Self::NAMES`].
            pub const ALL: &'static [ProviderKind] = &[$(ProviderKind::$variant),+];

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
    /// OpenAI's Responses API (`/responses`): reasoning models, their reasoning kept encrypted.
    "openai-responses" => OpenAiResponses(ResponsesClient),
}

impl ProviderKind {
    /// The kind's name, as the config spells it.
    pub fn name(self) -> &'static str {
        let i = ProviderKind::ALL.iter().position(|k| *k == self).unwrap_or(0);
        ProviderKind::NAMES.get(i).copied().unwrap_or("")
    }

    /// The least `max_tokens` a request of this kind may ask: 16 on OpenAI's Responses API (its
    /// `max_output_tokens` minimum), 1 elsewhere.
    pub fn least_max_tokens(self) -> u32 {
        match self {
            ProviderKind::OpenAiResponses => 16,
            _ => 1,
        }
    }

    /// The kinds as an error message lists them: `"openai", "anthropic", "ollama" or "openai-responses"`.
    pub fn expected() -> String {
        let quoted: Vec<String> = ProviderKind::NAMES.iter().map(|n| format!("{n:?}")).collect();
        match quoted.split_last() {
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentd_protocol::{ChatRequest, Tokens};

    #[test]
    fn kinds_parse_by_name_and_connect_to_their_wire_format() {
        assert_eq!(ProviderKind::NAMES, ["openai", "anthropic", "ollama", "openai-responses"]);
        for name in ProviderKind::NAMES {
            let kind = ProviderKind::parse(name).unwrap();
            let client = kind.connect("http://127.0.0.1:9/v1/", None, Deadlines::default());
            assert_eq!(client.base_url(), "http://127.0.0.1:9/v1");
        }
        assert_eq!(ProviderKind::parse("anthropic"), Some(ProviderKind::Anthropic));
        assert_eq!(ProviderKind::parse("ollama"), Some(ProviderKind::Ollama));
        assert_eq!(ProviderKind::parse("OpenAI"), None, "names are exact");
        assert_eq!(ProviderKind::parse("gemini"), None);
        assert_eq!(ProviderKind::parse("openai-responses"), Some(ProviderKind::OpenAiResponses));
        assert_eq!(ProviderKind::expected(), r#""openai", "anthropic", "ollama" or "openai-responses""#);
        // The format is the kind's: Anthropic claims its default max_tokens, OpenAI nothing.
        let req = ChatRequest {
            model: "m".into(),
            system: String::new(),
            messages: vec![],
            tools: vec![],
            tool_choice_none: false,
            max_tokens: None,
            thinking_budget: None,
            cache_key: None,
        };
        let reserve =
            |kind: ProviderKind| kind.connect("http://h/v1", None, Deadlines::default()).output_reserve(&req);
        assert_eq!(reserve(ProviderKind::OpenAi), Tokens(0));
        assert_eq!(reserve(ProviderKind::Ollama), Tokens(0));
        assert_eq!(reserve(ProviderKind::OpenAiResponses), Tokens(0));
        assert_eq!(
            reserve(ProviderKind::Anthropic),
            Tokens(u64::from(anthropic::limits::DEFAULT_MAX_TOKENS))
        );
    }
}
