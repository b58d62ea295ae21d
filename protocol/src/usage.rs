//! Usage reports: as agentd counts them ([`Usage`]), and as the server said them ([`RawUsage`]),
//! before agentd believes any of it.
//!
//! A server's usage figures are JSON numbers, and a JSON number is anything: `5000000` for a
//! 1,700-token request, `18446744073709551615`, `-3`, `1.5`, `1e30`, a string, `null`, or Python's
//! non-standard `NaN`. The wire formats read each figure into a [`Figure`] that keeps what was said
//! (never failing the answer over it), and `agentd_policies::reported::judge` decides, against the
//! request that was sent, what of it is believed: a refused figure reaches no window, calibration,
//! cache or price, and what was sent is counted instead.

use crate::text::truncate_chars;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The most characters of a figure kept as said: a count has at most 20 digits, and a server that
/// puts a long text where a count belongs has said enough in this many.
pub const FIGURE_CHARS: usize = 40;

/// The token usage of one response as agentd counts it: the provider's report when it is believed;
/// where a figure of it is refused (`usage_refused`), our own count of what was sent in its place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub struct Usage {
    /// The tokens the server says it processed for the prompt. OpenAI-style servers report `prompt_tokens`;
    /// for Anthropic it is `input_tokens` plus `cache_read_input_tokens` plus `cache_creation_input_tokens`,
    /// so cached prefixes count too. This is the figure the calibration learns from (when believed;
    /// refused, it is our count of the request).
    pub prompt_tokens: u64,
    /// The tokens the server says it generated for the answer, thinking included (refused: our count
    /// of the answer).
    pub completion_tokens: u64,
    /// Of `prompt_tokens`, those the provider's prompt cache served (OpenAI
    /// `prompt_tokens_details.cached_tokens`, Anthropic `cache_read_input_tokens`); 0 when it reports none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_read_tokens: u64,
    /// Of `prompt_tokens`, those written to the provider's prompt cache (Anthropic
    /// `cache_creation_input_tokens`); 0 when it reports none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
}

impl Usage {
    /// A report of `prompt` and `completion` tokens with no cache figures.
    pub fn new(prompt_tokens: u64, completion_tokens: u64) -> Usage {
        Usage { prompt_tokens, completion_tokens, ..Usage::default() }
    }

    /// The prompt tokens neither read from nor written to the cache.
    pub fn uncached_input(&self) -> u64 {
        self.prompt_tokens.saturating_sub(self.cache_read_tokens).saturating_sub(self.cache_write_tokens)
    }
}

/// One figure of a usage report: the key it came under and what the server said there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Figure {
    /// The key, as the server's wire format names it (`prompt_tokens`, `input_tokens`,
    /// `prompt_tokens_details.cached_tokens`, `cache_read_input_tokens`, …).
    pub key: String,
    /// What it said, as JSON text, at most [`FIGURE_CHARS`] characters: `1712`, `-3`, `1.5`, `1e30`,
    /// `"12"`, `null`; the non-standard `NaN`, `Infinity` and `-Infinity` as they were written.
    pub said: String,
}

impl Figure {
    /// The figure `value` under `key`.
    pub fn of(key: &str, value: &Value) -> Figure {
        let said = match value {
            // Read leniently as strings (JSON has no such numbers): shown as the server wrote them.
            Value::String(s) if matches!(s.as_str(), "NaN" | "Infinity" | "-Infinity") => s.clone(),
            other => other.to_string(),
        };
        Figure { key: key.to_string(), said: truncate_chars(&said, FIGURE_CHARS) }
    }

    /// The count it says: a whole number from 0 to 2^64 − 1, written in digits alone. `None` for
    /// anything else (a sign, a fraction, an exponent, a string, `null`, a number past 2^64 − 1).
    pub fn count(&self) -> Option<u64> {
        let digits = !self.said.is_empty() && self.said.bytes().all(|b| b.is_ascii_digit());
        digits.then(|| self.said.parse().ok()).flatten()
    }

    /// Whether it is `null`: a cache figure a server leaves null when its cache was not involved.
    pub fn is_null(&self) -> bool {
        self.said == "null"
    }
}

/// A usage report as the server said it: each figure kept, none judged.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub struct RawUsage {
    /// The prompt (`prompt_tokens`; the Responses API's and Anthropic's `input_tokens`); absent when
    /// the report had none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<Figure>,
    /// The answer, thinking included (`completion_tokens`, `output_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion: Option<Figure>,
    /// The prompt tokens the server's cache served (`prompt_tokens_details.cached_tokens`,
    /// `input_tokens_details.cached_tokens`, `cache_read_input_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read: Option<Figure>,
    /// The prompt tokens written to the server's cache (`cache_creation_input_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<Figure>,
    /// The cache figures are apart from `prompt` (Anthropic: `input_tokens` is the uncached rest,
    /// and the whole prompt is the three summed); false when `prompt` counts them (OpenAI, the
    /// Responses API).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cache_apart: bool,
}

impl RawUsage {
    /// Each figure that was said, in the order prompt, completion, cache read, cache write.
    pub fn figures(&self) -> impl Iterator<Item = &Figure> {
        [&self.prompt, &self.completion, &self.cache_read, &self.cache_write].into_iter().flatten()
    }

    /// The figures as counts, when each one is (a cache figure left out or `null` is 0, and
    /// Anthropic's whole prompt sums without passing 2^64 − 1). Nothing here says the counts are
    /// believable for the request they answer: `agentd_policies::reported::judge` says that.
    pub fn counts(&self) -> Option<Usage> {
        let cache = |f: &Option<Figure>| match f {
            None => Some(0),
            Some(f) if f.is_null() => Some(0),
            Some(f) => f.count(),
        };
        let (read, write) = (cache(&self.cache_read)?, cache(&self.cache_write)?);
        let input = self.prompt.as_ref()?.count()?;
        let prompt_tokens =
            if self.cache_apart { input.checked_add(read)?.checked_add(write)? } else { input };
        Some(Usage {
            prompt_tokens,
            completion_tokens: self.completion.as_ref()?.count()?,
            cache_read_tokens: read,
            cache_write_tokens: write,
        })
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_figure_is_a_count_only_when_it_is_digits_that_fit() {
        let count = |v: Value| Figure::of("k", &v).count();
        assert_eq!(count(json!(1712)), Some(1712));
        assert_eq!(count(json!(u64::MAX)), Some(u64::MAX));
        assert_eq!(count(json!(-3)), None);
        assert_eq!(count(json!(1.0)), None);
        assert_eq!(count(json!(1e30)), None);
        assert_eq!(count(json!("12")), None);
        assert_eq!(count(Value::Null), None);
        let past: Value = serde_json::from_str("18446744073709551616").unwrap();
        assert_eq!(Figure::of("k", &past).count(), None);
        assert!(Figure::of("k", &Value::Null).is_null());
    }

    #[test]
    fn what_was_said_is_kept_short_and_non_finite_numbers_read_as_written() {
        assert_eq!(Figure::of("k", &json!("NaN")).said, "NaN");
        assert_eq!(Figure::of("k", &json!("-Infinity")).said, "-Infinity");
        assert_eq!(Figure::of("k", &json!("12")).said, "\"12\"");
        let long = Figure::of("k", &json!("x".repeat(500)));
        assert_eq!(long.said.chars().count(), FIGURE_CHARS);
    }
}
