//! (c) The compaction plan (`agentd_policies::compaction::plan`) over the history measured in (a),
//! with every message's tokens precomputed as the compactor has them, in a window where the history
//! sits just at the trigger: with the synthesised messages already cached, and with a fresh counter.

use crate::common::{group, median, ms};
use crate::gen::Gen;
use crate::refit::Measured;
use crate::{table, MODEL, PLAN_COLD_RUNS, PLAN_RUNS};
use agentd_engine::counter::TokenCounter;
use agentd_policies::compaction::{plan, PlanInput, WorkingFile};
use agentd_policies::Thresholds;
use agentd_protocol::{Message, Tokens};
use std::time::{Duration, Instant};

/// Measures (c) and prints its table.
pub fn measure(g: &mut Gen, measured: &mut Measured) {
    let Measured { req, objective, stats, cold_count, warm } = measured;
    println!("(c) Compaction plan over the ~1M-token history (per-message tokens precomputed)");
    // Drop the re-fit messages: plan the history as it was measured in (a).
    req.messages.truncate(stats.messages);
    let history = &req.messages;
    let fixed = (cold_count.system + cold_count.tools).tokens + Tokens(3);
    // A window in which this history sits just at the trigger (80 %), with a 32K answer reserve.
    let window = Tokens(cold_count.total.tokens.0 * 100 / 80);
    let thresholds = Thresholds::new(window, 80, Tokens(32_000));
    let reserve = Tokens((window.0 / 10).clamp(256, 4096)); // compactor::summary_reserve
    let working_files: Vec<WorkingFile> = (0..6)
        .map(|_| {
            let text = {
                let n = 6_000 + g.below(20_000);
                g.code(n)
            };
            let tokens = warm.count_text(&text).tokens;
            WorkingFile { path: g.path(), text, tokens }
        })
        .collect();

    let t = Instant::now();
    let message_tokens: Vec<Tokens> = history.iter().map(|m| warm.count_message(m).tokens).collect();
    let precompute = t.elapsed();

    let run_plan = |counter: &TokenCounter| {
        let count = |m: &Message| counter.count_message(m).tokens;
        let input = PlanInput {
            pinned: &[],
            history,
            message_tokens: &message_tokens,
            fixed,
            objective,
            destination: thresholds.destination,
            working_files: &working_files,
            keep_rounds_limit: None,
            summary_reserve: reserve,
            count: &count,
            pricing: None,
        };
        let t = Instant::now();
        let p = plan(&input);
        (t.elapsed(), p)
    };
    // Warm: the synthesised messages (objective, checkpoint skeleton, observations, working files) are
    // already in the counter's cache, as on a retry with fewer rounds.
    let (_, the_plan) = run_plan(warm);
    let mut plan_warm: Vec<Duration> = (0..PLAN_RUNS).map(|_| run_plan(warm).0).collect();
    // Cold synthesised messages: a counter that knows nothing yet, as on the first plan of a compaction
    // (the history's own tokens are precomputed either way).
    let mut plan_cold: Vec<Duration> =
        (0..PLAN_COLD_RUNS).map(|_| run_plan(&TokenCounter::new(MODEL)).0).collect();
    let kept_tokens: u64 = message_tokens[the_plan.keep_from_message..].iter().map(|t| t.0).sum();
    let rows = [
        ("window / trigger / destination", format!(
            "{} / {} / {}",
            group(window.0),
            group(thresholds.trigger.0),
            group(thresholds.destination.0)
        )),
        ("rounds in history", group(agentd_policies::rounds::rounds(history).len() as u64)),
        ("unresolved observations", format!("{}", agentd_policies::observations::unresolved(history).len())),
        ("working files offered / kept", format!("{} / {}", working_files.len(), the_plan.files.len())),
        ("plan: messages summarised", group(the_plan.summarise.len() as u64)),
        ("plan: rounds kept / their tokens", format!("{} / {}", group(the_plan.kept_rounds as u64), group(kept_tokens))),
        ("per-message tokens from warm cache", ms(precompute)),
        (
            "plan(), synthesised msgs cached",
            format!(
                "median {} | min {} | max {}  (n={PLAN_RUNS})",
                ms(median(&mut plan_warm)),
                ms(*plan_warm.iter().min().expect("runs")),
                ms(*plan_warm.iter().max().expect("runs"))
            ),
        ),
        (
            "plan(), fresh counter",
            format!(
                "median {} | min {} | max {}  (n={PLAN_COLD_RUNS}; tokenises objective, checkpoint, observations, files)",
                ms(median(&mut plan_cold)),
                ms(*plan_cold.iter().min().expect("runs")),
                ms(*plan_cold.iter().max().expect("runs"))
            ),
        ),
    ];
    table(&rows);
    println!();
}
