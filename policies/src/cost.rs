//! What a request cost: its usage — the uncached prompt, the part the provider's prompt cache served,
//! the part written to it, the answer — at a model's prices (`[prices."MODEL"]`, USD per million
//! tokens). A cache figure without a price of its own is charged at the input price, so a missing
//! price never makes a request look cheaper than it was.

use agentd_protocol::Usage;
use std::collections::BTreeMap;

/// A model's prices, in USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    /// An uncached prompt token (`input`).
    pub input: f64,
    /// A prompt token the cache served (`cached_input`; default: `input`).
    pub cached_input: Option<f64>,
    /// A prompt token written to the cache (`cache_write`; default: `input`).
    pub cache_write: Option<f64>,
    /// An answer token, thinking included (`output`).
    pub output: f64,
}

/// The cost of one response's `usage` at `price`, in USD: always finite (at most `f64::MAX`), so no
/// sum of costs is ever infinite or not a number.
pub fn cost(usage: &Usage, price: &Price) -> f64 {
    let per_token = |per_million: f64| per_million / 1_000_000.0;
    let total = usage.uncached_input() as f64 * per_token(price.input)
        + usage.cache_read_tokens as f64 * per_token(price.cached_input.unwrap_or(price.input))
        + usage.cache_write_tokens as f64 * per_token(price.cache_write.unwrap_or(price.input))
        + usage.completion_tokens as f64 * per_token(price.output);
    // An infinity is the largest finite amount; a NaN (an infinite price times nothing) counts as
    // the most, never as free.
    if total.is_nan() {
        f64::MAX
    } else {
        total.clamp(f64::MIN, f64::MAX)
    }
}

/// The cost of `usage` of `model` at its prices in `prices` (`[prices."MODEL"]`, by model name);
/// `None` when the model has none.
pub fn priced(prices: &BTreeMap<String, Price>, model: &str, usage: &Usage) -> Option<f64> {
    Some(cost(usage, prices.get(model)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SONNET: Price =
        Price { input: 3.0, cached_input: Some(0.3), cache_write: Some(3.75), output: 15.0 };

    #[test]
    fn each_part_of_the_usage_is_charged_at_its_own_price() {
        let usage = Usage {
            prompt_tokens: 1_500_000,
            completion_tokens: 100_000,
            cache_read_tokens: 1_000_000,
            cache_write_tokens: 200_000,
        };
        // 300k uncached × $3 + 1M cached × $0.30 + 200k written × $3.75 + 100k out × $15.
        assert!((cost(&usage, &SONNET) - (0.9 + 0.3 + 0.75 + 1.5)).abs() < 1e-9);
        assert_eq!(cost(&Usage::default(), &SONNET), 0.0);
    }

    #[test]
    fn a_cache_figure_without_a_price_is_charged_as_input() {
        let plain = Price { cached_input: None, cache_write: None, ..SONNET };
        let cached = Usage { cache_read_tokens: 600, ..Usage::new(1_000, 0) };
        assert!((cost(&cached, &plain) - cost(&Usage::new(1_000, 0), &plain)).abs() < 1e-12);
        assert!(cost(&cached, &SONNET) < cost(&cached, &plain));
    }
}
