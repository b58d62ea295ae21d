//! Which tokenizer measures a model's text, and the count of one bare text by it.
//!
//! Known OpenAI models have their own BPE (tiktoken-rs singletons, `encode_ordinary`); any other
//! model is counted through its server's endpoint when it has one, or estimated at one token per
//! three bytes — marked, so that a guess never certifies that a request fits.

use agentd_protocol::Count;

/// Which tokenizer measures a model's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tokenizer {
    /// GPT-4o, GPT-4.1, GPT-5, o1/o3/o4.
    O200k,
    /// GPT-4, GPT-3.5, text-embedding-3.
    Cl100k,
    /// The provider's own counting endpoint: texts it has counted are measured, the others estimated
    /// (and marked) until [`prepare`] has asked for them.
    Endpoint,
    /// No tokenizer of ours knows the model: bytes / 3, rounded up, marked estimated.
    Estimate,
}

impl Tokenizer {
    /// The tokenizer's name in logs (`o200k_base`, `cl100k_base`, `endpoint`, `estimate`).
    pub fn as_str(self) -> &'static str {
        match self {
            Tokenizer::O200k => "o200k_base",
            Tokenizer::Cl100k => "cl100k_base",
            Tokenizer::Endpoint => "endpoint",
            Tokenizer::Estimate => "estimate",
        }
    }

    /// Where this tokenizer's counts come from.
    pub fn source(self) -> CountSource {
        match self {
            Tokenizer::O200k | Tokenizer::Cl100k => CountSource::Tiktoken,
            Tokenizer::Endpoint => CountSource::Endpoint,
            Tokenizer::Estimate => CountSource::Estimate,
        }
    }

    /// A text by this tokenizer alone. (`Endpoint` needs what the endpoint taught: see [`Texts`].)
    pub(super) fn count(self, text: &str) -> Count {
        match self {
            Tokenizer::O200k => {
                Count::measured(tiktoken_rs::o200k_base_singleton().encode_ordinary(text).len() as u64)
            }
            Tokenizer::Cl100k => {
                Count::measured(tiktoken_rs::cl100k_base_singleton().encode_ordinary(text).len() as u64)
            }
            Tokenizer::Endpoint | Tokenizer::Estimate => Count::estimate_bytes(text.len()),
        }
    }

    /// A fixed number of framing tokens, marked as this tokenizer marks its counts.
    pub(super) fn fixed(self, tokens: u64) -> Count {
        match self {
            Tokenizer::Estimate => Count::estimated(tokens),
            _ => Count::measured(tokens),
        }
    }
}

use agentd_protocol::CountSource;

/// The tokenizer for a model name (a `provider/` prefix, as in `openai/gpt-4o`, is ignored).
pub fn tokenizer_for(model: &str) -> Tokenizer {
    let name = model.trim();
    let name = name.rsplit('/').next().unwrap_or(name).to_ascii_lowercase();
    let o_series = ["o1", "o3", "o4"]
        .iter()
        .any(|p| name == *p || name.strip_prefix(p).is_some_and(|rest| rest.starts_with(['-', '.', '_'])));
    if o_series || ["gpt-4o", "gpt-4.1", "gpt-5", "chatgpt-4o"].iter().any(|p| name.starts_with(p)) {
        Tokenizer::O200k
    } else if ["gpt-4", "gpt-3.5", "text-embedding-3"].iter().any(|p| name.starts_with(p)) {
        Tokenizer::Cl100k
    } else {
        Tokenizer::Estimate
    }
}
