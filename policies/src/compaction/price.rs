//! What a compaction's landing costs over the turns that follow it, priced the way a provider with a
//! prompt cache bills them: the cheapest of the landings a plan may choose ([`cheapest`]) and where
//! the next compaction should come ([`next_trigger`]).
//!
//! A rebuilt request is new from its first changed message on: after the system prompt and tools
//! (`fixed`, which the cache still holds) it is sent uncached once. Part of it the model has not read
//! yet (`unseen`: the results of its last call, which it has not answered): that part is sent for
//! the first time whatever the compaction does, like every token a later request adds, so it is
//! work, not the compaction's cost. Each later request until the next compaction re-reads the one
//! before it from the cache — at the cache's `read_factor` when it is at least `min_tokens`, in
//! full otherwise. The next compaction's summary continues the last request sent (a cached re-read
//! at the trigger) and writes a summary. A landing `L`, with the next compaction at `T` and requests
//! that grow by `g`, so reads `T − L + unseen` tokens for the first time at an overhead of
//!
//! ```text
//!   (L − fixed − unseen) + reread(fixed)      the rebuilt request, uncached after `fixed`
//! + Σ reread(L + i·g), i = 0 … n−1, n = ⌈(T − L) / g⌉   re-reading it as it grows to the trigger
//! + reread(T) + summary                       the next compaction's summary request and answer
//! ```
//!
//! and its [`price_at`] `T` is that overhead per token read. A token kept verbatim is paid again —
//! sent uncached once, re-read on every request until the next compaction — and brings that
//! compaction nearer, so a round the model has already answered is rarely worth its price: a read
//! document the model has answered leaves as evidence (the checkpoint names its archive and
//! summarises it) rather than verbatim. The sum is not smooth — a prefix under the cache's minimum is
//! read in full, and a landing one growth step higher saves a whole request — so the price, not a
//! rule, decides. The plan still keeps the round the model has not answered yet, and every rule that
//! does not move (the objective first, unresolved observations verbatim, the coder's changed files,
//! call/result pairs whole, nothing dropped that is not archived); [`cheapest`] chooses among the
//! landings those rules allow.
//!
//! The trigger is priced too. Coming late, a compaction's fixed costs are shared by more tokens read,
//! but every request re-reads a longer prefix; coming early, the reverse. [`next_trigger`] is where
//! the price of the landing is lowest, between the destination (`floor`: a compaction lands below
//! it, so it never comes lower) and the role's trigger (the latest, which leaves the answer its
//! room). Within one growth step the number of requests is the same and the price falls as `T`
//! rises, so only whole steps above the landing, and the role's trigger, need pricing.
//!
//! The price has no constant of its own: the cache's figures are the provider's, the growth is
//! measured from the history, the summary's size is the reserve the compaction already uses, the
//! floor and ceiling are the role's destination and trigger.

use agentd_protocol::model::PromptCache;
use agentd_protocol::tokens::Tokens;

/// What the turns after a compaction look like, for pricing where it lands and where the next one
/// comes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outlook {
    /// How the provider's prompt cache bills a prefix it has seen.
    pub cache: PromptCache,
    /// System prompt + tool schemas + reply priming: unchanged by a compaction, so still cached.
    pub fixed: Tokens,
    /// The earliest the next compaction may come: the destination, which a compaction lands below.
    pub floor: Tokens,
    /// The latest the next compaction may come: the role's trigger.
    pub trigger: Tokens,
    /// How much each request adds to the one before it, measured from the history (at least 1).
    pub growth: Tokens,
    /// Tokens of the landing the model has not read yet (the results it has not answered): sent for
    /// the first time whatever the landing.
    pub unseen: Tokens,
    /// What the next compaction's summary costs besides re-reading the request: its answer, the
    /// room reserved for it.
    pub summary: Tokens,
}

/// What landing at `landing` tokens costs until the next compaction at `at`, besides the tokens
/// read for the first time, in uncached prompt tokens: the rebuilt request, the cached re-reads as
/// it grows to `at`, and the next summary.
pub fn cycle_cost(landing: Tokens, at: Tokens, outlook: &Outlook) -> f64 {
    let cache = &outlook.cache;
    let fixed = outlook.fixed.min(landing);
    let rebuilt = landing.saturating_sub(fixed).saturating_sub(outlook.unseen).0 as f64 + cache.reread(fixed);
    let growth = outlook.growth.0.max(1);
    let requests = at.saturating_sub(landing).0.div_ceil(growth);
    rebuilt + rereads(landing, growth, requests, cache) + cache.reread(at) + outlook.summary.0 as f64
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

/// The price of landing at `landing` with the next compaction at `at`: [`cycle_cost`] per token read
/// for the first time until then (infinite when `at` leaves no room above the landing).
pub fn price_at(landing: Tokens, at: Tokens, outlook: &Outlook) -> f64 {
    let room = at.saturating_sub(landing);
    if room == Tokens::ZERO {
        return f64::INFINITY;
    }
    cycle_cost(landing, at, outlook) / (room + outlook.unseen).0 as f64
}

/// Where the next compaction should come after landing at `landing`: of the whole growth steps above
/// the landing between `floor` and `trigger`, and `trigger` itself, the one [`price_at`] prices
/// lowest; on a tie, the later (fewer compactions for the same price).
pub fn next_trigger(landing: Tokens, outlook: &Outlook) -> Tokens {
    let (trigger, growth) = (outlook.trigger, outlook.growth.0.max(1));
    let at = |steps: u64| landing + Tokens(steps * growth);
    let mut best = (trigger, price_at(landing, trigger, outlook));
    let lowest = outlook.floor.max(landing + Tokens(1));
    if lowest < trigger {
        let (first, last) =
            (lowest.saturating_sub(landing).0.div_ceil(growth), trigger.saturating_sub(landing).0 / growth);
        // Later candidates first, each replacing the best only when strictly cheaper: a tie keeps the later.
        let mut steps: Vec<u64> = lowest_priced_steps(landing, first, last, outlook);
        steps.sort_unstable_by(|a, b| b.cmp(a));
        for k in steps {
            let p = price_at(landing, at(k), outlook);
            if p < best.1 {
                best = (at(k), p);
            }
        }
    }
    best.0
}

/// The growth steps in `first..=last` among which the cheapest lies. The step at which the request
/// reaches the cache's minimum splits them in two; on each side the overhead is a quadratic in the
/// steps `k` (with a non-negative square term) over work that is linear in `k`, so the price has one
/// minimum there — where the derivative's numerator `γ·g·k² + 2γ·u·k + β·u − g·α` is zero — and the
/// ends of each side, with the integers around that minimum, are all that need pricing.
fn lowest_priced_steps(landing: Tokens, first: u64, last: u64, outlook: &Outlook) -> Vec<u64> {
    let growth = outlook.growth.0.max(1);
    let cost = |k: u64| cycle_cost(landing, landing + Tokens(k * growth), outlook);
    let split = outlook.cache.min_tokens.0.saturating_sub(landing.0).div_ceil(growth);
    let mut out = Vec::new();
    for (lo, hi) in [(first, last.min(split.saturating_sub(1))), (first.max(split), last)] {
        if lo > hi {
            continue;
        }
        if hi - lo < 3 {
            out.extend(lo..=hi);
            continue;
        }
        out.extend([lo, hi]);
        // The quadratic through three of its points (it is exact on one side of the split).
        let (c0, c1, c2) = (cost(lo), cost(lo + 1), cost(lo + 2));
        let gamma = (c2 - 2.0 * c1 + c0) / 2.0;
        let beta = c1 - c0 - gamma * (2 * lo + 1) as f64;
        let alpha = c0 - beta * lo as f64 - gamma * (lo * lo) as f64;
        let (g, u) = (growth as f64, outlook.unseen.0 as f64);
        let (a, b, c) = (gamma * g, 2.0 * gamma * u, beta * u - g * alpha);
        let vertex = if a > 0.0 {
            let disc = b * b - 4.0 * a * c;
            (disc >= 0.0).then(|| (-b + disc.sqrt()) / (2.0 * a))
        } else {
            None
        };
        if let Some(k) = vertex.filter(|k| k.is_finite()) {
            let k = k.floor().clamp(lo as f64, hi as f64) as u64;
            out.extend((k.saturating_sub(1)..=k + 2).filter(|s| (lo..=hi).contains(s)));
        }
    }
    out
}

/// The price of landing at `landing`: [`price_at`] its [`next_trigger`].
pub fn price(landing: Tokens, outlook: &Outlook) -> f64 {
    price_at(landing, next_trigger(landing, outlook), outlook)
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

    /// An outlook whose floor is the trigger (so the next compaction comes at the trigger) and whose
    /// landing the model has read all of.
    fn outlook(read_factor: f64, min: u64, fixed: u64, trigger: u64, growth: u64, summary: u64) -> Outlook {
        Outlook {
            cache: PromptCache { read_factor, min_tokens: Tokens(min) },
            fixed: Tokens(fixed),
            floor: Tokens(trigger),
            trigger: Tokens(trigger),
            growth: Tokens(growth),
            unseen: Tokens::ZERO,
            summary: Tokens(summary),
        }
    }

    #[test]
    fn a_cycle_is_the_rebuilt_request_its_cached_rereads_and_the_next_summary() {
        // Landing 10,000 with 2,000 fixed, trigger 16,000, growth 3,000: the rebuilt request is 8,000
        // uncached + 200; two re-reads (10,000 and 13,000) at 0.1; the summary re-reads 16,000 at 0.1
        // and writes 500.
        let o = outlook(0.1, 1024, 2_000, 16_000, 3_000, 500);
        let cost = cycle_cost(Tokens(10_000), Tokens(16_000), &o);
        assert!((cost - (8_000.0 + 200.0 + 1_000.0 + 1_300.0 + 1_600.0 + 500.0)).abs() < 1e-6, "{cost}");
        assert!((price(Tokens(10_000), &o) - cost / 6_000.0).abs() < 1e-9);
        // What the model has not read yet is work, not cost: 3,000 of the landing unseen leave 5,000
        // of it resent, and the 6,000 of room and the 3,000 are read for the first time.
        let unseen = Outlook { unseen: Tokens(3_000), ..o };
        assert!((cycle_cost(Tokens(10_000), Tokens(16_000), &unseen) - (cost - 3_000.0)).abs() < 1e-6);
        assert!((price(Tokens(10_000), &unseen) - (cost - 3_000.0) / 9_000.0).abs() < 1e-9);
        // A prefix under the cache's minimum is read in full.
        let small = outlook(0.1, 1024, 500, 2_000, 1_000, 0);
        // 300 + 500 rebuilt, re-reads of 800 (in full) and 1,800 (0.1), the summary re-reads 2,000.
        assert!(
            (cycle_cost(Tokens(800), Tokens(2_000), &small) - (300.0 + 500.0 + 800.0 + 180.0 + 200.0)).abs()
                < 1e-6
        );
        assert_eq!(price(Tokens(16_000), &o), f64::INFINITY);
    }

    #[test]
    fn large_answered_documents_are_not_worth_keeping_at_a_cached_price() {
        // A 64K window, trigger 52,428, documents of 9,000 tokens: keeping the last two read documents
        // verbatim costs more per token read than keeping only the one the model has not read yet.
        let o = Outlook { unseen: Tokens(9_000), ..outlook(0.1, 1024, 1_500, 52_428, 9_100, 4_096) };
        let landings = [Tokens(13_000), Tokens(22_100), Tokens(31_200)];
        assert_eq!(cheapest(&landings, &o), Some(0));
        assert_eq!(cheapest(&[], &o), None);
    }

    #[test]
    fn the_next_compaction_comes_where_rereading_outgrows_what_it_saves() {
        // A 32K window read 3,000 tokens a step from a landing of 5,000 (3,000 of it unread): at the
        // role's trigger (26,214) each request re-reads a long prefix; the price is lowest earlier, but
        // never below the destination (16,384), a whole number of steps above the landing.
        let o = Outlook {
            floor: Tokens(16_384),
            unseen: Tokens(3_000),
            ..outlook(0.1, 1024, 1_500, 26_214, 3_000, 300)
        };
        let at = next_trigger(Tokens(5_000), &o);
        assert_eq!(at, Tokens(17_000), "the first whole step over the destination");
        assert!(price_at(Tokens(5_000), at, &o) < price_at(Tokens(5_000), o.trigger, &o));
        // A small landing and a summary that costs much: later, to share it out.
        let dear = Outlook { summary: Tokens(20_000), ..o };
        assert!(next_trigger(Tokens(5_000), &dear) > Tokens(17_000));
        // A landing at or over the floor: the steps above it, else the trigger.
        assert_eq!(next_trigger(Tokens(26_000), &o), Tokens(26_214));
    }

    proptest! {
        /// The choice is one of the landings and no other is cheaper; a tie goes to the larger.
        #[test]
        fn the_cheapest_landing_is_never_undercut(
            read_factor in 0.0f64..=1.0,
            min in 0u64..4096,
            fixed in 0u64..4000,
            floor in 0u64..100_000,
            trigger in 1_000u64..100_000,
            growth in 1u64..20_000,
            landings in proptest::collection::vec(0u64..100_000, 1..12),
        ) {
            let o = Outlook { floor: Tokens(floor), ..outlook(read_factor, min, fixed, trigger, growth, 256) };
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

        /// The next trigger lies between the floor (or just over the landing) and the role's trigger,
        /// and no point of that range, priced one by one, is cheaper.
        #[test]
        fn the_next_trigger_is_never_undercut_by_any_point_between_floor_and_trigger(
            read_factor in 0.0f64..=1.0,
            min in 0u64..8192,
            fixed in 0u64..4000,
            landing in 0u64..30_000,
            floor in 0u64..40_000,
            trigger_gap in 1u64..40_000,
            growth in 50u64..8_000,
            unseen in 0u64..8_000,
            summary in 0u64..2_000,
        ) {
            let trigger = floor.max(landing) + trigger_gap;
            let o = Outlook {
                floor: Tokens(floor),
                unseen: Tokens(unseen.min(landing)),
                ..outlook(read_factor, min, fixed, trigger, growth, summary)
            };
            let at = next_trigger(Tokens(landing), &o);
            prop_assert!(at <= Tokens(trigger));
            prop_assert!(at == Tokens(trigger) || (at >= Tokens(floor) && at > Tokens(landing)), "{at}");
            let best = price_at(Tokens(landing), at, &o);
            for t in floor.max(landing + 1)..=trigger {
                let p = price_at(Tokens(landing), Tokens(t), &o);
                prop_assert!(best <= p + 1e-9 * p.abs().max(1.0), "{at} priced {best}, {t} priced {p}");
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
            let at = Tokens(trigger);
            prop_assert!(cycle_cost(Tokens(landing), at, &cached) <= cycle_cost(Tokens(landing), at, &uncached) + 1e-6);
        }
    }
}
