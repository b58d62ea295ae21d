//! A server's prompt cache, learned from its usage reports rather than declared.
//!
//! A server that serves part of a prompt from its cache says so in its usage report (OpenAI-compatible
//! `prompt_tokens_details.cached_tokens`, Anthropic `cache_read_input_tokens`, vLLM and llama.cpp's
//! OpenAI-compatible servers where they report it): the report's `cache_read_tokens`. The first such
//! report teaches that the server/model caches ([`Lesson::Learned`]), and how:
//!
//! - **the shortest prefix it caches**: the smallest cached prefix seen so far, never below
//!   [`MIN_TOKENS_FLOOR`] (OpenAI's and Anthropic's own minimum; a server that caches shorter
//!   prefixes is priced a little high below it, never low);
//! - **what a cached token costs** relative to an uncached one: `cached_input / input` of the model's
//!   `[prices]` when it has them, else [`DEFAULT_READ_FACTOR`].
//!
//! From then on compactions are priced as if the cache were declared. A declared cache wins, and
//! `cache = false` turns learning off (the engine's choice, before it asks here).
//!
//! **Stale knowledge is dropped**: a report with no cached tokens for a prompt at least the learned
//! minimum is a miss (a new prefix misses too: a role's first request, a compaction's rebuild); after
//! [`FORGET_AFTER`] misses in a row the server is taken to cache no more ([`Lesson::Forgotten`]) and
//! its compactions go back to the unpriced rule until a report shows a cache again. Any hit resets
//! the count.
//!
//! Pure: the usage report and the price come in, the lesson goes out.

use agentd_protocol::model::PromptCache;
use agentd_protocol::{Tokens, Usage};
use serde::{Deserialize, Serialize};

/// The shortest prefix a learned cache is taken to cache, whatever smaller one a report shows.
pub const MIN_TOKENS_FLOOR: u64 = 1024;

/// What a cached prompt token costs relative to an uncached one when the model has no `[prices]`:
/// OpenAI's recent models' and Anthropic's figure.
pub const DEFAULT_READ_FACTOR: f64 = 0.1;

/// Misses in a row (reports of no cached tokens for a prompt at least the learned minimum) after which
/// a learned cache is forgotten.
pub const FORGET_AFTER: u32 = 8;

/// Where a learned cache's read factor comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FactorSource {
    /// The model's `[prices]`: `cached_input / input`.
    Prices,
    /// No prices: [`DEFAULT_READ_FACTOR`].
    Default,
}

impl FactorSource {
    /// Its name on the wire (`cache_learned`'s `source`).
    pub fn as_str(self) -> &'static str {
        match self {
            FactorSource::Prices => "prices",
            FactorSource::Default => "default",
        }
    }
}

/// What the usage reports taught of one server/model's prompt cache.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Learned {
    /// What a cached prompt token costs relative to an uncached one.
    pub read_factor: f64,
    /// Where `read_factor` comes from.
    pub source: FactorSource,
    /// The shortest prefix it caches, in tokens.
    pub min_tokens: u64,
    /// Misses in a row since the last hit.
    #[serde(default)]
    pub misses: u32,
}

impl Learned {
    /// The cache as the compactions price it.
    pub fn cache(&self) -> PromptCache {
        PromptCache { read_factor: self.read_factor, min_tokens: Tokens(self.min_tokens) }
    }
}

/// What one usage report teaches.
#[derive(Debug, Clone, PartialEq)]
pub enum Lesson {
    /// Nothing new.
    Nothing,
    /// The server/model caches: first learned now (said as `cache_learned`).
    Learned(Learned),
    /// What was known, updated (a smaller prefix seen cached, a miss counted, a new price): kept
    /// without a word.
    Kept(Learned),
    /// It cached and no longer does: forgotten.
    Forgotten,
}

/// The read factor of a model whose prices are `(input, cached_input)`, if they say one (a price of
/// an uncached token above 0, a cached one from 0 to it).
pub fn price_factor(input: f64, cached_input: Option<f64>) -> Option<f64> {
    let cached = cached_input?;
    (input > 0.0 && (0.0..=input).contains(&cached)).then(|| cached / input)
}

/// What `usage` teaches, given what was `known` of the server/model and the read factor its prices
/// say (if any).
pub fn learn(known: Option<&Learned>, usage: &Usage, price_factor: Option<f64>) -> Lesson {
    let (read_factor, source) = match price_factor {
        Some(f) => (f, FactorSource::Prices),
        None => (DEFAULT_READ_FACTOR, FactorSource::Default),
    };
    if usage.cache_read_tokens > 0 {
        let seen = usage.cache_read_tokens.max(MIN_TOKENS_FLOOR);
        let min_tokens = known.map_or(seen, |k| k.min_tokens.min(seen));
        let now = Learned { read_factor, source, min_tokens, misses: 0 };
        return match known {
            None => Lesson::Learned(now),
            Some(k) if *k == now => Lesson::Nothing,
            Some(_) => Lesson::Kept(now),
        };
    }
    match known {
        Some(k) if usage.prompt_tokens >= k.min_tokens => {
            let misses = k.misses.saturating_add(1);
            if misses >= FORGET_AFTER {
                Lesson::Forgotten
            } else {
                Lesson::Kept(Learned { misses, ..k.clone() })
            }
        }
        _ => Lesson::Nothing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn usage(prompt: u64, cached: u64) -> Usage {
        Usage { cache_read_tokens: cached, ..Usage::new(prompt, 10) }
    }

    #[test]
    fn the_first_cached_report_teaches_the_cache_and_its_price() {
        let Lesson::Learned(l) = learn(None, &usage(5_000, 3_072), Some(0.25)) else { panic!() };
        assert_eq!((l.read_factor, l.source, l.min_tokens), (0.25, FactorSource::Prices, 3_072));
        let Lesson::Learned(l) = learn(None, &usage(5_000, 200), None) else { panic!() };
        assert_eq!(
            (l.read_factor, l.source, l.min_tokens),
            (DEFAULT_READ_FACTOR, FactorSource::Default, 1_024)
        );
        assert_eq!(
            learn(None, &usage(5_000, 0), None),
            Lesson::Nothing,
            "a server that never caches: nothing"
        );
        assert_eq!(price_factor(3.0, Some(0.3)).map(|f| (f * 100.0).round()), Some(10.0));
        assert_eq!(price_factor(3.0, None), None);
        assert_eq!(price_factor(0.0, Some(0.0)), None);
    }

    #[test]
    fn a_smaller_cached_prefix_lowers_the_minimum_and_misses_in_a_row_forget_it() {
        let Lesson::Learned(known) = learn(None, &usage(9_000, 4_096), None) else { panic!() };
        let Lesson::Kept(lower) = learn(Some(&known), &usage(3_000, 2_048), None) else { panic!() };
        assert_eq!(lower.min_tokens, 2_048);
        assert_eq!(learn(Some(&lower), &usage(9_000, 4_096), None), Lesson::Nothing, "nothing new");
        // A short prompt that was not cached is no miss: it was under the minimum.
        assert_eq!(learn(Some(&lower), &usage(1_000, 0), None), Lesson::Nothing);
        let mut now = lower;
        for n in 1..FORGET_AFTER {
            let Lesson::Kept(k) = learn(Some(&now), &usage(5_000, 0), None) else { panic!("miss {n}") };
            assert_eq!(k.misses, n);
            now = k;
        }
        assert_eq!(learn(Some(&now), &usage(5_000, 0), None), Lesson::Forgotten);
        // A hit before that resets the count.
        let Lesson::Kept(hit) = learn(Some(&now), &usage(5_000, 3_000), None) else { panic!() };
        assert_eq!(hit.misses, 0);
    }

    proptest! {
        /// Whatever the reports, a learned minimum is never below the floor nor above the smallest
        /// cached prefix seen, and the factor is the price's or the default.
        #[test]
        fn the_learned_minimum_is_the_smallest_cached_prefix_above_the_floor(
            reports in proptest::collection::vec((0u64..20_000, 0u64..20_000), 1..40),
            factor in proptest::option::of(0.0f64..1.0),
        ) {
            let mut known: Option<Learned> = None;
            let mut smallest: Option<u64> = None;
            for (prompt, cached) in reports {
                let cached = cached.min(prompt);
                if cached > 0 {
                    smallest = Some(smallest.map_or(cached, |s| s.min(cached)));
                }
                match learn(known.as_ref(), &usage(prompt, cached), factor) {
                    Lesson::Learned(l) | Lesson::Kept(l) => known = Some(l),
                    Lesson::Forgotten => { known = None; smallest = None; }
                    Lesson::Nothing => {}
                }
                if let (Some(k), Some(s)) = (&known, smallest) {
                    prop_assert!(k.min_tokens >= MIN_TOKENS_FLOOR);
                    prop_assert!(k.min_tokens <= s.max(MIN_TOKENS_FLOOR));
                    prop_assert_eq!(k.read_factor, factor.unwrap_or(DEFAULT_READ_FACTOR));
                }
            }
        }
    }
}
