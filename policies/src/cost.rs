//! What a request cost: its usage — the uncached prompt, the part the provider's prompt cache served,
//! the part written to it, the answer — at a model's prices (`[prices."MODEL"]`, USD per million
//! tokens). A cache figure without a price of its own is charged at the input price, so a missing
//! price never makes a request look cheaper than it was.

use agentd_protocol::rpc::Spent;
use agentd_protocol::{Event, EventKind, Role, Usage};
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

/// The cost of one response's `usage` at `price`, in USD.
pub fn cost(usage: &Usage, price: &Price) -> f64 {
    let per_token = |per_million: f64| per_million / 1_000_000.0;
    usage.uncached_input() as f64 * per_token(price.input)
        + usage.cache_read_tokens as f64 * per_token(price.cached_input.unwrap_or(price.input))
        + usage.cache_write_tokens as f64 * per_token(price.cache_write.unwrap_or(price.input))
        + usage.completion_tokens as f64 * per_token(price.output)
}

/// What a task's requests spent, in all and by role, summed from its events: each
/// `response_received` with a usage report, each `compaction_finished`'s summary requests.
pub fn spent<'e>(events: impl IntoIterator<Item = &'e Event>) -> (Spent, BTreeMap<Role, Spent>) {
    let mut total = Spent::default();
    let mut by_role: BTreeMap<Role, Spent> = BTreeMap::new();
    for e in events {
        let role = by_role.entry(e.role.clone()).or_default();
        for s in [&mut total, role] {
            match &e.kind {
                EventKind::ResponseReceived { usage: Some(u), cost_usd, .. } => add(s, u, 1, *cost_usd),
                EventKind::CompactionFinished { summary_usage, batches, cost_usd, .. } => {
                    s.compaction.compactions += 1;
                    s.compaction.requests += u64::from(*batches);
                    if let Some(u) = summary_usage {
                        add(s, u, u64::from(*batches), *cost_usd);
                        s.compaction.tokens += u.prompt_tokens + u.completion_tokens;
                    }
                    if let Some(c) = cost_usd {
                        *s.compaction.cost_usd.get_or_insert(0.0) += c;
                    }
                }
                _ => {}
            }
        }
    }
    by_role.retain(|_, s| *s != Spent::default());
    (total, by_role)
}

fn add(s: &mut Spent, u: &Usage, requests: u64, cost: Option<f64>) {
    s.requests += requests;
    s.prompt_tokens += u.prompt_tokens;
    s.cache_read_tokens += u.cache_read_tokens;
    s.cache_write_tokens += u.cache_write_tokens;
    s.completion_tokens += u.completion_tokens;
    if let Some(c) = cost {
        *s.cost_usd.get_or_insert(0.0) += c;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(role: Role, kind: EventKind) -> Event {
        Event { seq: 1, task_id: "t".into(), role, at: String::new(), kind }
    }

    #[test]
    fn responses_and_compactions_are_summed_in_all_and_by_role() {
        let response = |p, c, read, cost| EventKind::ResponseReceived {
            finish_reason: "stop".into(),
            usage: Some(Usage { cache_read_tokens: read, ..Usage::new(p, c) }),
            model: Some("m".into()),
            cost_usd: cost,
        };
        let events = [
            event(Role::Lead, response(1_000, 50, 0, Some(0.01))),
            event(Role::Coder, response(2_000, 100, 1_500, Some(0.02))),
            event(
                Role::Coder,
                EventKind::ResponseReceived {
                    finish_reason: "stop".into(),
                    usage: None,
                    model: None,
                    cost_usd: None,
                },
            ),
            event(
                Role::Coder,
                EventKind::CompactionFinished {
                    tokens_before: agentd_protocol::Tokens(9_000),
                    tokens_after: agentd_protocol::Tokens(3_000),
                    archive_id: "ev".into(),
                    batches: 2,
                    measured_by: None,
                    summary_model: Some("m".into()),
                    summary_usage: Some(Usage::new(8_000, 400)),
                    cost_usd: Some(0.005),
                },
            ),
            event(Role::Lead, EventKind::TaskFinished { summary: "s".into() }),
        ];
        let (total, by_role) = spent(&events);
        assert_eq!((total.requests, total.prompt_tokens, total.completion_tokens), (4, 11_000, 550));
        assert_eq!(total.cache_read_tokens, 1_500);
        assert!((total.cost_usd.unwrap() - 0.035).abs() < 1e-12);
        assert_eq!(
            (total.compaction.compactions, total.compaction.requests, total.compaction.tokens),
            (1, 2, 8_400)
        );
        assert_eq!(by_role[&Role::Lead].requests, 1);
        assert_eq!(by_role[&Role::Coder].requests, 3);
        assert_eq!(by_role[&Role::Coder].compaction.cost_usd, Some(0.005));
        assert_eq!(by_role.len(), 2);
    }

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
