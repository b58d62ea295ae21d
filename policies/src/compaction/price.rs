//! What a compaction's landing costs over the turns that follow it, priced the way a provider with a
//! prompt cache bills them, and the cheapest of the landings a plan may choose ([`cheapest`]).
//!
//! A rebuilt request is new from its first changed message on: after the system prompt and tools
//! (`fixed`, which the cache still holds) it is sent uncached once. Each later request until the next
//! compaction re-reads the one before it from the cache — at the cache's `read_factor` when it is at
//! least `min_tokens`, in full otherwise — and adds what it adds: the next tool result, the same
//! whatever the landing, so it is left out of the comparison. The next compaction's summary continues
//! the last request sent (a cached re-read at the trigger) and writes a summary. A landing `L`, with
//! a trigger `T` and requests that grow by `g`, so buys `T − L` tokens of room for
//!
//! ```text
//!   (L − fixed) + reread(fixed)              the rebuilt request, uncached after `fixed`
//! + Σ reread(L + i·g), i = 0 … n−1, n = ⌈(T − L) / g⌉   re-reading it as it grows to the trigger
//! + reread(T) + summary                       the next compaction's summary request and answer
//! ```
//!
//! and its [`price`] is that sum per token of room. A token kept verbatim is paid again — sent
//! uncached once, re-read on every request until the next compaction — and brings that compaction
//! nearer, so a round the model has already answered is rarely worth its price: a read document the
//! model has answered leaves as evidence (the checkpoint names its archive and summarises it) rather
//! than verbatim. The sum is not smooth — a prefix under the cache's minimum is read in full, and a
//! landing one growth step higher saves a whole request — so the price, not a rule, decides. The plan still keeps the round the
//! model has not answered yet, and every rule that does not move (the objective first, unresolved
//! observations verbatim, the coder's changed files, call/result pairs whole, nothing dropped that
//! is not archived); [`cheapest`] chooses among the landings those rules allow.
//!
//! The price has no constant of its own: the cache's figures are the provider's, the growth is
//! measured from the history, the summary's size is the reserve the compaction already uses.

use agentd_protocol::model::PromptCache;
use agentd_protocol::tokens::Tokens;

/// What the turns after a compaction look like, for pricing where it lands.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outlook {
    /// How the provider's prompt cache bills a prefix it has seen.
    pub cache: PromptCache,
    /// System prompt + tool schemas + reply priming: unchanged by a compaction, so still cached.
    pub fixed: Tokens,
    /// Where the next compaction comes: the role's trigger.
    pub trigger: Tokens,
    /// How much each request adds to the one before it, measured from the history (at least 1).
    pub growth: Tokens,
    /// What the next compaction's summary costs besides re-reading the request: its answer, the
    /// room reserved for it.
    pub summary: Tokens,
}

/// What landing at `landing` tokens costs until the next compaction, in uncached prompt tokens:
/// the rebuilt request, the cached re-reads as it grows to the trigger, and the next summary.
pub fn cycle_cost(landing: Tokens, outlook: &Outlook) -> f64 {
    let cache = &outlook.cache;
    let fixed = outlook.fixed.min(landing);
    let rebuilt = (landing - fixed).0 as f64 + cache.reread(fixed);
    let growth = outlook.growth.0.max(1);
    let requests = outlook.trigger.saturating_sub(landing).0.div_ceil(growth);
    rebuilt
        + rereads(landing, growth, requests, cache)
        + cache.reread(outlook.trigger)
        + outlook.summary.0 as f64
}

/// Σ `cache.reread(landing + i·growth)` for `i` in `0..requests`, in closed form (a small growth under
/// a large trigger is many requests): the prefixes under the cache's minimum in full, the rest at the
/// read factor.
fn rereads(landing: Tokens, growth: u64, requests: u64, cache: &PromptCache) -> f64 {
    // Σ (landing + i·growth) for i in from..to.
    let span = |from: u64, to: u64| -> f64 {
        let (from, to) = (from as f64, to as f64);
        (to - from) * landing.0 as f64 + growth as f64 * (to * (to - 1.0) - from * (from - 1.0)) / 2.0
    };
    let uncached = cache.min_tokens.0.saturating_sub(landing.0).div_ceil(growth).min(requests);
    span(0, uncached) + cache.read_factor * span(uncached, requests)
}

/// The price of landing at `landing`: [`cycle_cost`] per token of room it leaves below the trigger
/// (infinite when it leaves none).
pub fn price(landing: Tokens, outlook: &Outlook) -> f64 {
    let room = outlook.trigger.saturating_sub(landing);
    if room == Tokens::ZERO {
        return f64::INFINITY;
    }
    cycle_cost(landing, outlook) / room.0 as f64
}

/// The index of the cheapest of `landings` by [`price`]; on a tie, the larger landing (more kept
/// verbatim for the same price). `None` when there are none.
pub fn cheapest(landings: &[Tokens], outlook: &Outlook) -> Option<usize> {
    let mut best: Option<(usize, f64)> = None;
    for (i, &landing) in landings.iter().enumerate() {
        let p = price(landing, outlook);
        let better = match best {
            None => true,
            Some((b, bp)) => p < bp || (p == bp && landing > landings[b]),
        };
        if better {
            best = Some((i, p));
        }
    }
    best.map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn outlook(read_factor: f64, min: u64, fixed: u64, trigger: u64, growth: u64, summary: u64) -> Outlook {
        Outlook {
            cache: PromptCache { read_factor, min_tokens: Tokens(min) },
            fixed: Tokens(fixed),
            trigger: Tokens(trigger),
            growth: Tokens(growth),
            summary: Tokens(summary),
        }
    }

    #[test]
    fn a_cycle_is_the_rebuilt_request_its_cached_rereads_and_the_next_summary() {
        // Landing 10,000 with 2,000 fixed, trigger 16,000, growth 3,000: the rebuilt request is 8,000
        // uncached + 200; two re-reads (10,000 and 13,000) at 0.1; the summary re-reads 16,000 at 0.1
        // and writes 500.
        let o = outlook(0.1, 1024, 2_000, 16_000, 3_000, 500);
        let cost = cycle_cost(Tokens(10_000), &o);
        assert!((cost - (8_000.0 + 200.0 + 1_000.0 + 1_300.0 + 1_600.0 + 500.0)).abs() < 1e-6, "{cost}");
        assert!((price(Tokens(10_000), &o) - cost / 6_000.0).abs() < 1e-9);
        // A prefix under the cache's minimum is read in full.
        let small = outlook(0.1, 1024, 500, 2_000, 1_000, 0);
        // 300 + 500 rebuilt, re-reads of 800 (in full) and 1,800 (0.1), the summary re-reads 2,000.
        assert!((cycle_cost(Tokens(800), &small) - (300.0 + 500.0 + 800.0 + 180.0 + 200.0)).abs() < 1e-6);
        assert_eq!(price(Tokens(16_000), &o), f64::INFINITY);
    }

    #[test]
    fn large_answered_documents_are_not_worth_keeping_at_a_cached_price() {
        // A 64K window, trigger 52,428, documents of 9,000 tokens: keeping the last two read documents
        // verbatim costs more per token of room than keeping only the one the model has not read yet.
        let o = outlook(0.1, 1024, 1_500, 52_428, 9_100, 4_096);
        let landings = [Tokens(13_000), Tokens(22_100), Tokens(31_200)];
        assert_eq!(cheapest(&landings, &o), Some(0));
        assert_eq!(cheapest(&[], &o), None);
    }

    proptest! {
        /// The choice is one of the landings and no other is cheaper; a tie goes to the larger.
        #[test]
        fn the_cheapest_landing_is_never_undercut(
            read_factor in 0.0f64..=1.0,
            min in 0u64..4096,
            fixed in 0u64..4000,
            trigger in 1_000u64..100_000,
            growth in 1u64..20_000,
            landings in proptest::collection::vec(0u64..100_000, 1..12),
        ) {
            let o = outlook(read_factor, min, fixed, trigger, growth, 256);
            let landings: Vec<Tokens> = landings.into_iter().map(Tokens).collect();
            let i = cheapest(&landings, &o).unwrap_or(usize::MAX);
            prop_assert!(i < landings.len());
            let p = price(landings[i], &o);
            for &l in &landings {
                let q = price(l, &o);
                prop_assert!(p <= q);
                prop_assert!(p < q || l <= landings[i]);
            }
        }

        /// The closed form of the re-reads is their sum, request by request.
        #[test]
        fn the_rereads_are_summed_in_closed_form(
            read_factor in 0.0f64..=1.0,
            min in 0u64..4096,
            landing in 0u64..10_000,
            growth in 1u64..3_000,
            requests in 0u64..200,
        ) {
            let cache = PromptCache { read_factor, min_tokens: Tokens(min) };
            let summed: f64 = (0..requests).map(|i| cache.reread(Tokens(landing + i * growth))).sum();
            let closed = rereads(Tokens(landing), growth, requests, &cache);
            prop_assert!((summed - closed).abs() <= 1e-6 * summed.max(1.0), "{summed} vs {closed}");
        }

        /// Without a discount (read factor 1) the cycle costs every request in full: a cache never
        /// makes a landing look dearer than sending it uncached would be.
        #[test]
        fn a_cache_never_makes_a_cycle_dearer(
            read_factor in 0.0f64..=1.0,
            min in 0u64..4096,
            fixed in 0u64..4000,
            trigger in 1_000u64..100_000,
            growth in 1u64..20_000,
            landing in 0u64..100_000,
        ) {
            let cached = outlook(read_factor, min, fixed, trigger, growth, 256);
            let uncached = Outlook { cache: PromptCache { read_factor: 1.0, min_tokens: Tokens(0) }, ..cached };
            prop_assert!(cycle_cost(Tokens(landing), &cached) <= cycle_cost(Tokens(landing), &uncached) + 1e-6);
        }
    }
}
