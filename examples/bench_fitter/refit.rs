//! (a) Re-fit vs cold recount: the coder's request over a ~1M-token history counted whole by fresh
//! counters (cold), then re-counted by a warm counter after each of 200 appended messages (the
//! fitter's re-fit: only the new message is tokenised); also the floor of a re-fit (nothing new)
//! and count + fingerprint in one pass or two.

use crate::common::{group, mb, median, ms, percentile, ratio, us};
use crate::gen::Gen;
use crate::history::{appended_message, build_history, message_bytes, HistoryStats};
use crate::{table, thread_cpu, COLD_RUNS, MODEL, REFIT_ITERATIONS, TARGET_HISTORY_TOKENS};
use agentd_engine::counter::{Fingerprint, RequestCount, TokenCounter};
use agentd_protocol::ChatRequest;
use std::time::{Duration, Instant};

/// What (a) leaves for (c): the request (history plus the appended messages), the objective, the
/// history's shape, its cold count and the warm counter that has seen all of it.
pub struct Measured {
    pub req: ChatRequest,
    pub objective: String,
    pub stats: HistoryStats,
    pub cold_count: RequestCount,
    pub warm: TokenCounter,
}

/// Builds the history, measures (a) and prints its table.
pub fn measure(g: &mut Gen) -> Measured {
    let system = agentd_agents::system_prompt(
        &agentd_protocol::Role::Coder,
        None,
        std::path::Path::new("/home/dev/projects/inventory-service"),
        &[],
    );
    let tools = agentd_agents::schemas(agentd_agents::CODER_TOOLS).expect("coder tool schemas");

    let t = Instant::now();
    let (history, objective) = build_history(g, TARGET_HISTORY_TOKENS);
    let build_time = t.elapsed();
    let mut req = ChatRequest {
        model: MODEL.into(),
        system,
        messages: history,
        tools,
        tool_choice_none: false,
        max_tokens: None,
        thinking_budget: None,
        cache_key: None,
    };
    let stats = HistoryStats::of(&req.messages);

    let mut cold = Vec::new();
    let mut cold_count = None;
    for _ in 0..COLD_RUNS {
        let counter = TokenCounter::new(MODEL);
        let t = Instant::now();
        let n = counter.count_request(&req);
        cold.push(t.elapsed());
        cold_count = Some(n);
    }
    let cold_count = cold_count.expect("at least one cold run");
    let cold_median = median(&mut cold);

    // The warm counter: it has counted the history once (as the fitter has, turn after turn).
    let warm = TokenCounter::new(MODEL);
    let before = warm.count_request(&req);
    assert_eq!(before.total, cold_count.total, "warm and cold counters disagree");
    let mut refit = Vec::with_capacity(REFIT_ITERATIONS);
    // Thread CPU time too: on a shared machine the wall-clock tail is mostly time spent preempted.
    let mut refit_cpu = Vec::with_capacity(REFIT_ITERATIONS);
    let mut appended_tokens = 0u64;
    let mut appended_bytes = 0usize;
    let mut last = before;
    for i in 0..REFIT_ITERATIONS {
        let m = appended_message(g, i);
        appended_bytes += message_bytes(&m);
        req.messages.push(m);
        let (t, c) = (Instant::now(), thread_cpu());
        let n = warm.count_request(&req);
        refit_cpu.push(thread_cpu() - c);
        refit.push(t.elapsed());
        appended_tokens += n.total.tokens.0 - last.total.tokens.0;
        last = n;
    }
    // The re-fit result is exact: a fresh counter over the final request agrees.
    let check = TokenCounter::new(MODEL).count_request(&req);
    assert_eq!(check.total, last.total, "re-fit count differs from a full recount");
    let refit_median = median(&mut refit);
    let refit_p90 = percentile(&mut refit, 90.0);
    let refit_p99 = percentile(&mut refit, 99.0);
    let refit_max = *refit.iter().max().expect("iterations");
    let refit_cpu_median = median(&mut refit_cpu);
    let refit_cpu_p99 = percentile(&mut refit_cpu, 99.0);
    let refit_cpu_max = *refit_cpu.iter().max().expect("iterations");
    // The floor of a re-fit: the same request again, nothing new (hash every message, all cache hits).
    let mut hits: Vec<Duration> = (0..REFIT_ITERATIONS)
        .map(|_| {
            let t = Instant::now();
            let n = warm.count_request(&req);
            let d = t.elapsed();
            assert_eq!(n.total, last.total);
            d
        })
        .collect();
    let hits_median = median(&mut hits);
    let hits_p99 = percentile(&mut hits, 99.0);
    // What the fitter needs of every request: its count and its fingerprint (to find the request it
    // extends). Hashed twice (a count, then a separate fingerprint) or once (both from one pass).
    let timed = |f: &dyn Fn()| -> Duration {
        let mut runs: Vec<Duration> = (0..REFIT_ITERATIONS)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed()
            })
            .collect();
        median(&mut runs)
    };
    let twice = timed(&|| {
        let n = warm.count_request(&req);
        let f = Fingerprint::of(&req);
        assert_eq!((n.total, f.messages.len()), (last.total, req.messages.len()));
    });
    let once = timed(&|| {
        let (n, f) = warm.count_and_fingerprint(&req);
        assert_eq!((n.total, f.messages.len()), (last.total, req.messages.len()));
    });

    println!("(a) Re-fit after appending one message vs cold full recount");
    println!("    history generated in {}", ms(build_time));
    let rows = [
        ("messages in history", format!("{}", stats.messages)),
        ("  by role (user/assistant/tool)", format!("{}/{}/{}", stats.user, stats.assistant, stats.tool)),
        ("  tool calls / thinking parts", format!("{} / {}", stats.tool_calls, stats.thinking)),
        ("history text bytes", format!("{} ({:.2} MB)", group(stats.bytes as u64), mb(stats.bytes))),
        ("request tokens (o200k, measured)", group(cold_count.total.tokens.0)),
        ("  of which messages", group(cold_count.messages.tokens.0)),
        ("  of which system + tool schemas", group((cold_count.system + cold_count.tools).tokens.0)),
        (
            "  bytes per token (history)",
            format!("{:.2}", stats.bytes as f64 / cold_count.messages.tokens.0 as f64),
        ),
        (
            "cold full count, fresh counter",
            format!(
                "median {} of {COLD_RUNS} (runs: {})",
                ms(cold_median),
                cold.iter().map(|d| ms(*d)).collect::<Vec<_>>().join(", ")
            ),
        ),
        (
            "appended message (avg of 200)",
            format!(
                "{:.0} tokens, {:.0} bytes",
                appended_tokens as f64 / REFIT_ITERATIONS as f64,
                appended_bytes as f64 / REFIT_ITERATIONS as f64
            ),
        ),
        (
            "re-fit (count_request, warm)",
            format!(
                "median {} | p90 {} | p99 {} | max {}  (n={REFIT_ITERATIONS})",
                us(refit_median),
                us(refit_p90),
                us(refit_p99),
                us(refit_max)
            ),
        ),
        (
            "  thread CPU time of the same re-fits",
            format!(
                "median {} | p99 {} | max {}  (excludes time preempted)",
                us(refit_cpu_median),
                us(refit_cpu_p99),
                us(refit_cpu_max)
            ),
        ),
        (
            "  same request again, all cache hits",
            format!(
                "median {} | p99 {}  (hashes all {} messages: the floor of a re-fit)",
                us(hits_median),
                us(hits_p99),
                req.messages.len()
            ),
        ),
        (
            "  count + fingerprint, two passes",
            format!("median {}  (count_request, then Fingerprint::of)", us(twice)),
        ),
        (
            "  count + fingerprint, one pass",
            format!("median {}  (count_and_fingerprint: what the fitter runs per request)", us(once)),
        ),
        (
            "ratio re-fit / cold (median)",
            format!(
                "{:.5} = 1/{:.0}   target ≤ 1/100: {}",
                ratio(refit_median, cold_median),
                1.0 / ratio(refit_median, cold_median),
                if ratio(refit_median, cold_median) <= 0.01 { "MET" } else { "NOT MET" }
            ),
        ),
        (
            "ratio re-fit CPU p99 / cold (median)",
            format!(
                "{:.5} = 1/{:.0}",
                ratio(refit_cpu_p99, cold_median),
                1.0 / ratio(refit_cpu_p99, cold_median)
            ),
        ),
        (
            "ratio re-fit p99 / cold (median)",
            format!("{:.5} = 1/{:.0}", ratio(refit_p99, cold_median), 1.0 / ratio(refit_p99, cold_median)),
        ),
    ];
    table(&rows);
    println!();
    Measured { req, objective, stats, cold_count, warm }
}
