//! What does measuring a request cost? Three figures, printed (this is a benchmark, not a test).
//!
//! ```text
//! cargo run --release --example bench_fitter
//! ```
//!
//! (a) Re-fit vs cold recount. A realistic coder history of about 1,000,000 o200k tokens (user turns,
//!     assistant turns with thinking, text and tool calls with JSON arguments, tool results holding
//!     source files, search hits, command output and JSON) is counted whole with a fresh
//!     `TokenCounter` (cold: every message tokenised; median of 3). Then, on a counter that has seen
//!     the history, one new ~200-token message is appended and the whole request counted again (the
//!     fitter's re-fit: only the new message is tokenised, the rest are cache hits by content hash),
//!     200 times, each with a distinct new message. The target is re-fit ≤ 1/100 of a cold count.
//! (b) Cold counting throughput: ~20 MB of distinct text (Rust-like source, English prose, JSON) through
//!     `count_text` (no cache involved), MB/s per kind and overall. MB = 10^6 bytes.
//! (c) The compaction plan (`agentd_policies::compaction::plan`) over the same history with every
//!     message's tokens precomputed, as the compactor calls it.
//!
//! All text is generated from a fixed seed, so runs are comparable.

// A benchmark or demo, not the daemon: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use agentd_engine::counter::{Fingerprint, TokenCounter};
use agentd_policies::compaction::{plan, PlanInput, WorkingFile};
use agentd_policies::Thresholds;
use agentd_protocol::ChatRequest;
use agentd_protocol::{Message, Part, Speaker, Tokens};
use common::{group, mb, median, ms, percentile, ratio, us};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

const MODEL: &str = "gpt-4o";
const TARGET_HISTORY_TOKENS: u64 = 1_000_000;
const COLD_RUNS: usize = 3;
const REFIT_ITERATIONS: usize = 200;
/// Bytes of generated text per kind for the throughput run (three kinds: ~21 MB in all).
const THROUGHPUT_BYTES_PER_KIND: usize = 7_000_000;
const PLAN_RUNS: usize = 20;
const PLAN_COLD_RUNS: usize = 5;

fn main() {
    let started = Instant::now();
    println!("bench_fitter — model {MODEL} (o200k_base via tiktoken-rs), release build expected");
    println!();

    // The BPE singleton is loaded once per process; keep that out of every figure below.
    let t = Instant::now();
    let _ = TokenCounter::new(MODEL).count_text("warm up the o200k singleton");
    println!("o200k_base singleton load (once per process): {}", ms(t.elapsed()));
    println!();

    let mut g = Gen::new(0x5eed_a9e7_d000_0001);
    let system = agentd_agents::system_prompt(
        &agentd_protocol::Role::Coder,
        None,
        std::path::Path::new("/home/dev/projects/inventory-service"),
        &[],
    );
    let tools = agentd_agents::schemas(agentd_agents::CODER_TOOLS).expect("coder tool schemas");

    // ------------------------------------------------------------------------------------------
    // (a) re-fit vs cold recount
    let t = Instant::now();
    let (history, objective) = build_history(&mut g, TARGET_HISTORY_TOKENS);
    let build_time = t.elapsed();
    let mut req = ChatRequest {
        model: MODEL.into(),
        system,
        messages: history,
        tools,
        tool_choice_none: false,
        max_tokens: None,
        thinking_budget: None,
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
        let m = appended_message(&mut g, i);
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

    // ------------------------------------------------------------------------------------------
    // (b) cold counting throughput
    println!("(b) Cold counting throughput: count_text over distinct texts (no cache), MB = 10^6 bytes");
    let counter = TokenCounter::new(MODEL);
    let kinds: [(&str, TextMaker); 3] =
        [("source code", Gen::code), ("English prose", Gen::prose), ("JSON", Gen::json)];
    println!(
        "    {:<14} {:>8} {:>10} {:>12} {:>9} {:>10} {:>11}",
        "kind", "chunks", "MB", "tokens", "B/token", "seconds", "MB/s"
    );
    let (mut all_bytes, mut all_tokens, mut all_time) = (0usize, 0u64, Duration::ZERO);
    for (name, make) in kinds {
        let mut chunks = Vec::new();
        let mut bytes = 0usize;
        while bytes < THROUGHPUT_BYTES_PER_KIND {
            let size = 2_000 + g.below(30_000);
            let text = make(&mut g, size);
            bytes += text.len();
            chunks.push(text);
        }
        let mut tokens = 0u64;
        let t = Instant::now();
        for c in &chunks {
            tokens += counter.count_text(c).tokens.0;
        }
        let elapsed = t.elapsed();
        println!(
            "    {:<14} {:>8} {:>10.2} {:>12} {:>9.2} {:>10.3} {:>11.2}",
            name,
            chunks.len(),
            mb(bytes),
            group(tokens),
            bytes as f64 / tokens as f64,
            elapsed.as_secs_f64(),
            mb(bytes) / elapsed.as_secs_f64()
        );
        all_bytes += bytes;
        all_tokens += tokens;
        all_time += elapsed;
    }
    println!(
        "    {:<14} {:>8} {:>10.2} {:>12} {:>9.2} {:>10.3} {:>11.2}",
        "overall",
        "",
        mb(all_bytes),
        group(all_tokens),
        all_bytes as f64 / all_tokens as f64,
        all_time.as_secs_f64(),
        mb(all_bytes) / all_time.as_secs_f64()
    );
    println!(
        "    ({:.2} M tokens/s overall; single thread)",
        all_tokens as f64 / all_time.as_secs_f64() / 1e6
    );
    println!();

    // ------------------------------------------------------------------------------------------
    // (c) compaction plan
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
            objective: &objective,
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
    let (_, the_plan) = run_plan(&warm);
    let mut plan_warm: Vec<Duration> = (0..PLAN_RUNS).map(|_| run_plan(&warm).0).collect();
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
    println!("total run time: {:.1} s", started.elapsed().as_secs_f64());
}

// ---------------------------------------------------------------------------------------------
// The history

/// A coder's history of about `target` o200k tokens: the objective, then rounds (an occasional user
/// message; an assistant message with optional thinking and text and one or two tool calls; their
/// results). Returns the history and the objective.
fn build_history(g: &mut Gen, target: u64) -> (Vec<Message>, String) {
    // Sizing only: the measured figures use fresh counters.
    let sizer = TokenCounter::new(MODEL);
    let objective = format!(
        "The inventory service drops reservations when two orders for the same SKU arrive within a few \
         milliseconds. Find the race in the reservation path, fix it without a global lock, add a \
         regression test that reproduces the interleaving, and make sure `cargo test --workspace` and \
         `cargo clippy --all-targets -- -D warnings` pass. {}",
        g.prose(600)
    );
    let mut history = vec![Message::user(objective.clone())];
    let mut tokens = sizer.count_message(&history[0]).tokens.0;
    while tokens < target {
        let mut round = Vec::new();
        if g.below(14) == 0 {
            let text = match g.below(3) {
                0 => format!("Status? {}", {
                    let n = 150 + g.below(400);
                    g.prose(n)
                }),
                1 => format!("Also consider this log from production:\n{}", {
                    let n = 400 + g.below(2000);
                    g.command_output(n)
                }),
                _ => {
                    let n = 200 + g.below(1200);
                    g.prose(n)
                }
            };
            round.push(Message::user(text));
        }
        let mut parts = Vec::new();
        if g.below(3) == 0 {
            parts.push(Part::Thinking {
                text: {
                    let n = 300 + g.below(1500);
                    g.prose(n)
                },
                signature: None,
                redacted: false,
            });
        }
        if g.below(2) == 0 {
            parts.push(Part::Text {
                text: {
                    let n = 80 + g.below(600);
                    g.prose(n)
                },
            });
        }
        let calls = 1 + usize::from(g.below(4) == 0);
        let mut results = Vec::new();
        for _ in 0..calls {
            let id = g.call_id();
            let (name, arguments, content, is_error) = g.tool_exchange();
            parts.push(Part::ToolCall { id: id.clone(), name: name.into(), arguments });
            results.push(Message::tool_result(id, content, is_error));
        }
        round.push(Message::new(Speaker::Assistant, parts));
        round.extend(results);
        for m in round {
            tokens += sizer.count_message(&m).tokens.0;
            history.push(m);
        }
    }
    (history, objective)
}

/// The i-th appended message, about 200 tokens, distinct: alternately assistant prose and a short
/// tool result of code.
fn appended_message(g: &mut Gen, i: usize) -> Message {
    if i.is_multiple_of(2) {
        Message::assistant_text(format!("Step {i}: {}", g.prose(860)))
    } else {
        Message::tool_result(g.call_id(), g.code(720), false)
    }
}

fn message_bytes(m: &Message) -> usize {
    m.parts
        .iter()
        .map(|p| match p {
            Part::Text { text } => text.len(),
            Part::Thinking { text, signature, .. } => text.len() + signature.as_ref().map_or(0, String::len),
            Part::ToolCall { id, name, arguments } => id.len() + name.len() + arguments.len(),
            Part::ToolResult { call_id, content, .. } => call_id.len() + content.len(),
            Part::Image { data, .. } => data.len(),
        })
        .sum()
}

struct HistoryStats {
    messages: usize,
    user: usize,
    assistant: usize,
    tool: usize,
    tool_calls: usize,
    thinking: usize,
    bytes: usize,
}

impl HistoryStats {
    fn of(history: &[Message]) -> HistoryStats {
        let by = |r: Speaker| history.iter().filter(|m| m.role == r).count();
        HistoryStats {
            messages: history.len(),
            user: by(Speaker::User),
            assistant: by(Speaker::Assistant),
            tool: by(Speaker::Tool),
            tool_calls: history.iter().map(|m| m.tool_calls().count()).sum(),
            thinking: history.iter().filter(|m| m.has_thinking()).count(),
            bytes: history.iter().map(message_bytes).sum(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Text generation (deterministic)

const WORDS: &[&str] = &[
    "the",
    "a",
    "to",
    "of",
    "and",
    "in",
    "is",
    "that",
    "for",
    "it",
    "with",
    "as",
    "on",
    "this",
    "be",
    "by",
    "not",
    "are",
    "from",
    "or",
    "when",
    "which",
    "so",
    "then",
    "but",
    "if",
    "we",
    "each",
    "after",
    "before",
    "reservation",
    "order",
    "inventory",
    "service",
    "request",
    "handler",
    "lock",
    "queue",
    "worker",
    "stock",
    "count",
    "database",
    "transaction",
    "retry",
    "timeout",
    "error",
    "result",
    "function",
    "module",
    "test",
    "regression",
    "interleaving",
    "thread",
    "task",
    "future",
    "await",
    "connection",
    "pool",
    "cache",
    "entry",
    "value",
    "field",
    "struct",
    "method",
    "call",
    "caller",
    "returns",
    "reads",
    "writes",
    "updates",
    "checks",
    "compares",
    "increments",
    "decrements",
    "holds",
    "releases",
    "acquires",
    "drops",
    "fails",
    "passes",
    "looks",
    "seems",
    "probably",
    "because",
    "however",
    "therefore",
    "instead",
    "still",
    "already",
    "only",
    "never",
    "always",
    "again",
    "first",
    "second",
    "last",
    "next",
    "previous",
    "concurrent",
    "atomic",
    "optimistic",
    "version",
    "row",
    "column",
    "index",
    "query",
    "statement",
    "commit",
    "rollback",
    "isolation",
    "level",
    "snapshot",
    "serializable",
    "conflict",
    "window",
    "race",
    "condition",
    "between",
    "without",
    "within",
    "across",
    "small",
    "large",
    "quick",
    "careful",
    "obvious",
    "subtle",
    "important",
    "correct",
    "wrong",
    "stale",
    "fresh",
    "current",
    "expected",
    "actual",
    "observed",
    "reported",
    "production",
    "staging",
    "logs",
    "metrics",
    "latency",
    "throughput",
    "spike",
    "customer",
    "warehouse",
    "shipment",
    "SKU",
    "quantity",
];

const IDENTS: &[&str] = &[
    "order",
    "sku",
    "qty",
    "stock",
    "reservation",
    "warehouse",
    "item",
    "line",
    "batch",
    "tx",
    "conn",
    "pool",
    "cache",
    "entry",
    "key",
    "value",
    "version",
    "row",
    "result",
    "err",
    "ctx",
    "req",
    "resp",
    "handler",
    "store",
    "repo",
    "event",
    "queue",
    "worker",
    "lease",
    "hold",
    "slot",
    "count",
    "limit",
    "offset",
    "cursor",
    "page",
    "filter",
    "config",
    "client",
    "server",
    "state",
    "status",
    "retry",
    "deadline",
    "span",
    "metric",
    "label",
    "buffer",
    "chunk",
    "record",
    "schema",
    "table",
    "column",
];

const TYPES: &[&str] = &[
    "Order",
    "Sku",
    "Reservation",
    "Warehouse",
    "StockLevel",
    "Transaction",
    "Connection",
    "PgPool",
    "Cache",
    "Entry",
    "Version",
    "Row",
    "Error",
    "Context",
    "Request",
    "Response",
    "Handler",
    "Store",
    "Repository",
    "Event",
    "Queue",
    "Worker",
    "Lease",
    "Status",
    "Config",
    "Client",
    "Deadline",
    "Uuid",
    "String",
    "Vec<u8>",
    "HashMap<Sku, u32>",
    "Option<Version>",
    "Arc<Mutex<State>>",
];

const COMMANDS: &[&str] = &[
    "cargo test --workspace",
    "cargo test -p inventory --lib reservation",
    "cargo clippy --all-targets -- -D warnings",
    "cargo build --release",
    "cargo fmt --check",
    "git diff --stat",
    "git log --oneline -20",
    "rg -n \"reserve\" src",
    "cargo test -p inventory --test concurrent_reservations -- --nocapture",
    "sqlx migrate info",
];

/// A generator of about `n` bytes of one kind of text.
type TextMaker = fn(&mut Gen, usize) -> String;

struct Gen {
    state: u64,
    serial: u64,
}

impl Gen {
    fn new(seed: u64) -> Gen {
        Gen { state: seed, serial: 0 }
    }

    /// splitmix64.
    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len())]
    }

    fn serial(&mut self) -> u64 {
        self.serial += 1;
        self.serial
    }

    fn call_id(&mut self) -> String {
        const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        let mut id = String::from("call_");
        for _ in 0..24 {
            id.push(ALNUM[self.below(ALNUM.len())] as char);
        }
        id
    }

    fn ident(&mut self) -> String {
        match self.below(3) {
            0 => self.pick(IDENTS).to_string(),
            1 => format!("{}_{}", self.pick(IDENTS), self.pick(IDENTS)),
            _ => format!("{}_{}{}", self.pick(IDENTS), self.pick(IDENTS), self.below(10)),
        }
    }

    fn path(&mut self) -> String {
        let dir = ["src", "src/reservation", "src/store", "src/api", "tests", "crates/inventory/src"];
        let dir = dir[self.below(dir.len())];
        format!("{dir}/{}.rs", self.ident())
    }

    fn sentence(&mut self) -> String {
        let n = 6 + self.below(16);
        let mut s = String::new();
        for i in 0..n {
            let w = self.pick(WORDS);
            if i == 0 {
                let mut c = w.chars();
                if let Some(f) = c.next() {
                    s.extend(f.to_uppercase());
                    s.push_str(c.as_str());
                }
            } else {
                s.push(' ');
                match self.below(40) {
                    0 => write!(s, "`{}()`", self.ident()).unwrap(),
                    1 => write!(s, "{}", self.below(10_000)).unwrap(),
                    2 => s.push_str(&self.path()),
                    _ => s.push_str(w),
                }
                if self.below(12) == 0 {
                    s.push(',');
                }
            }
        }
        s.push(match self.below(10) {
            0 => '?',
            1 => ':',
            _ => '.',
        });
        s
    }

    /// English-like prose of about `bytes` bytes, in paragraphs.
    fn prose(&mut self, bytes: usize) -> String {
        let mut out = String::with_capacity(bytes + 200);
        while out.len() < bytes {
            if !out.is_empty() {
                out.push_str(if self.below(5) == 0 { "\n\n" } else { " " });
            }
            let s = self.sentence();
            out.push_str(&s);
        }
        out
    }

    /// Rust-like source of about `bytes` bytes: functions, structs, comments, tests.
    fn code(&mut self, bytes: usize) -> String {
        let mut out = String::with_capacity(bytes + 400);
        writeln!(out, "use crate::{}::{{{}, {}}};", self.ident(), self.pick(TYPES), self.pick(TYPES))
            .unwrap();
        writeln!(out, "use std::sync::Arc;\n").unwrap();
        while out.len() < bytes {
            match self.below(5) {
                0 => {
                    let ty = self.pick(TYPES).replace(['<', '>', ',', ' '], "");
                    writeln!(out, "/// {}", self.sentence()).unwrap();
                    writeln!(out, "#[derive(Debug, Clone, PartialEq)]\npub struct {ty}{} {{", self.serial())
                        .unwrap();
                    for _ in 0..2 + self.below(5) {
                        writeln!(out, "    pub {}: {},", self.ident(), self.pick(TYPES)).unwrap();
                    }
                    out.push_str("}\n\n");
                }
                1 => {
                    let name = self.ident();
                    writeln!(out, "#[tokio::test]\nasync fn {name}_{}() {{", self.serial()).unwrap();
                    writeln!(out, "    let store = test_store().await;").unwrap();
                    writeln!(
                        out,
                        "    let {} = store.reserve(Sku::new(\"SKU-{:05}\"), {}).await.unwrap();",
                        self.ident(),
                        self.below(100_000),
                        1 + self.below(50)
                    )
                    .unwrap();
                    writeln!(out, "    assert_eq!({}.{}, {});", self.ident(), self.ident(), self.below(1000))
                        .unwrap();
                    out.push_str("}\n\n");
                }
                _ => {
                    let name = self.ident();
                    writeln!(out, "    /// {}", self.sentence()).unwrap();
                    writeln!(
                        out,
                        "    pub async fn {name}_{}(&self, {}: &{}, {}: u32) -> Result<{}, Error> {{",
                        self.serial(),
                        self.ident(),
                        self.pick(TYPES),
                        self.ident(),
                        self.pick(TYPES)
                    )
                    .unwrap();
                    for _ in 0..2 + self.below(8) {
                        match self.below(6) {
                            0 => writeln!(out, "        // {}", self.sentence()).unwrap(),
                            1 => writeln!(
                                out,
                                "        if {}.len() > {} {{\n            return Err(Error::{}(\"{}\".into()));\n        }}",
                                self.ident(),
                                self.below(4096),
                                self.pick(TYPES).replace(['<', '>', ',', ' '], ""),
                                self.sentence()
                            )
                            .unwrap(),
                            2 => writeln!(
                                out,
                                "        let {} = sqlx::query_as!({}, \"SELECT * FROM {} WHERE {} = $1 FOR UPDATE\", {})\n            .fetch_optional(&mut *{})\n            .await?;",
                                self.ident(),
                                self.pick(TYPES).replace(['<', '>', ',', ' '], ""),
                                self.ident(),
                                self.ident(),
                                self.ident(),
                                self.ident()
                            )
                            .unwrap(),
                            3 => writeln!(
                                out,
                                "        for ({}, {}) in self.{}.iter().enumerate() {{\n            {} += {} * {};\n        }}",
                                self.ident(),
                                self.ident(),
                                self.ident(),
                                self.ident(),
                                self.ident(),
                                self.below(100)
                            )
                            .unwrap(),
                            _ => writeln!(
                                out,
                                "        let {} = self.{}.{}(&{}).await.map_err(|e| Error::{}(e.to_string()))?;",
                                self.ident(),
                                self.ident(),
                                self.ident(),
                                self.ident(),
                                self.pick(TYPES).replace(['<', '>', ',', ' '], "")
                            )
                            .unwrap(),
                        }
                    }
                    writeln!(out, "        Ok({})\n    }}\n", self.ident()).unwrap();
                }
            }
        }
        out
    }

    /// `read_file` output: the file's lines, numbered.
    fn numbered_code(&mut self, bytes: usize) -> String {
        let code = self.code(bytes);
        let mut out = String::with_capacity(code.len() + code.len() / 6);
        let start = 1 + self.below(400);
        for (i, line) in code.lines().enumerate() {
            writeln!(out, "{:>5}\t{line}", start + i).unwrap();
        }
        out
    }

    /// Pretty JSON of about `bytes` bytes: an array of records, as an API or a tool might return.
    fn json(&mut self, bytes: usize) -> String {
        let mut records = Vec::new();
        let mut size = 0usize;
        while size < bytes {
            let r = serde_json::json!({
                "id": format!("{:08x}-{:04x}-{:04x}", self.next() as u32, self.below(65536), self.below(65536)),
                "sku": format!("SKU-{:05}", self.below(100_000)),
                "warehouse": self.pick(&["FRA-1", "AMS-2", "DUB-1", "IAD-3", "SFO-2"]),
                "quantity": self.below(500),
                "reserved": self.below(50),
                "status": self.pick(&["pending", "reserved", "shipped", "cancelled", "failed"]),
                "updated_at": format!("2025-0{}-{:02}T{:02}:{:02}:{:02}.{:03}Z", 1 + self.below(9), 1 + self.below(28), self.below(24), self.below(60), self.below(60), self.below(1000)),
                "note": self.sentence(),
                "tags": [self.pick(IDENTS), self.pick(IDENTS)],
                "price": {"amount": self.below(100_000) as f64 / 100.0, "currency": self.pick(&["EUR", "USD", "GBP"])},
            });
            let s = serde_json::to_string_pretty(&r).expect("json");
            size += s.len() + 2;
            records.push(r);
        }
        serde_json::to_string_pretty(&records).expect("json")
    }

    /// Build or test output of about `bytes` bytes.
    fn command_output(&mut self, bytes: usize) -> String {
        let mut out = String::with_capacity(bytes + 200);
        while out.len() < bytes {
            match self.below(4) {
                0 => writeln!(
                    out,
                    "   Compiling {} v0.{}.{} (/home/dev/projects/inventory-service/crates/{})",
                    self.ident(),
                    self.below(10),
                    self.below(30),
                    self.ident()
                )
                .unwrap(),
                1 => writeln!(
                    out,
                    "test {}::{}::{} ... {}",
                    self.ident(),
                    self.ident(),
                    self.ident(),
                    self.pick(&["ok", "ok", "ok", "FAILED", "ignored"])
                )
                .unwrap(),
                2 => writeln!(
                    out,
                    "2025-06-{:02}T{:02}:{:02}:{:02}.{:06}Z {} inventory::{}: {} sku=SKU-{:05} order={}",
                    1 + self.below(28),
                    self.below(24),
                    self.below(60),
                    self.below(60),
                    self.below(1_000_000),
                    self.pick(&["INFO", "WARN", "ERROR", "DEBUG"]),
                    self.ident(),
                    self.sentence(),
                    self.below(100_000),
                    self.next() % 10_000_000
                )
                .unwrap(),
                _ => writeln!(
                    out,
                    "warning: unused variable: `{}`\n  --> {}:{}:{}\n   |",
                    self.ident(),
                    self.path(),
                    1 + self.below(900),
                    1 + self.below(80)
                )
                .unwrap(),
            }
        }
        out
    }

    /// One tool call and its result: (tool, JSON arguments, result content, is_error).
    fn tool_exchange(&mut self) -> (&'static str, String, String, bool) {
        match self.below(20) {
            0..=6 => {
                let path = self.path();
                let args =
                    serde_json::json!({"path": path, "offset": self.below(300), "limit": 400}).to_string();
                (
                    "read_file",
                    args,
                    {
                        let n = 1_500 + self.below(14_000);
                        self.numbered_code(n)
                    },
                    false,
                )
            }
            7..=9 => {
                let pattern = format!("fn {}", self.ident());
                let args =
                    serde_json::json!({"pattern": pattern, "path": "src", "max_results": 50}).to_string();
                let mut out = String::new();
                for _ in 0..5 + self.below(40) {
                    writeln!(
                        out,
                        "{}:{}:    pub async fn {}_{}(&self, {}: &{}) -> Result<(), Error> {{",
                        self.path(),
                        1 + self.below(900),
                        self.ident(),
                        self.serial(),
                        self.ident(),
                        self.pick(TYPES)
                    )
                    .unwrap();
                }
                ("search", args, out, false)
            }
            10..=13 => {
                let failed = self.below(5) == 0;
                // Most commands come back (and a later success resolves an earlier failure); a few
                // failing ones are one-offs that stay unresolved observations.
                let command = if failed && self.below(4) == 0 {
                    format!("cargo test -p inventory --test {}_{}", self.ident(), self.serial())
                } else {
                    self.pick(COMMANDS).to_string()
                };
                let args = serde_json::json!({"command": command, "timeout_secs": 300}).to_string();
                let mut out = {
                    let n = 300 + self.below(6_000);
                    self.command_output(n)
                };
                if failed {
                    write!(out, "error: test failed, to rerun pass `-p inventory --lib`\nexit status: 101\n")
                        .unwrap();
                } else {
                    out.push_str("exit status: 0\n");
                }
                ("run_command", args, out, failed)
            }
            14..=15 => {
                let args = serde_json::json!({
                    "path": self.path(),
                    "old_text": ({ let n = 150 + self.below(500); self.code(n) }),
                    "new_text": ({ let n = 150 + self.below(700); self.code(n) }),
                })
                .to_string();
                (
                    "edit_file",
                    args,
                    format!("edited {}: 1 replacement, {} bytes", self.path(), self.below(40_000)),
                    false,
                )
            }
            16 => {
                let args =
                    serde_json::json!({"path": self.path(), "content": ({ let n = 500 + self.below(3_000); self.code(n) })})
                        .to_string();
                ("write_file", args, format!("wrote {} bytes", self.below(10_000)), false)
            }
            17 => {
                let args = serde_json::json!({"path": "src"}).to_string();
                let mut out = String::new();
                for _ in 0..10 + self.below(40) {
                    writeln!(out, "{}  {}", self.pick(&["file", "dir "]), self.path()).unwrap();
                }
                ("list_dir", args, out, false)
            }
            _ => {
                let args = serde_json::json!({"id": format!("ev-{:032x}", self.next() as u128 * 7919), "offset": 0, "limit": 200, "unit": "lines"}).to_string();
                (
                    "read_evidence",
                    args,
                    {
                        let n = 1_000 + self.below(8_000);
                        self.json(n)
                    },
                    false,
                )
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Figures

/// This thread's CPU time (user + system), which does not advance while the thread waits to run.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer; CLOCK_THREAD_CPUTIME_ID is always available on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn table(rows: &[(&str, String)]) {
    let width = rows.iter().map(|(k, _)| k.chars().count()).max().unwrap_or(0);
    for (k, v) in rows {
        println!("    {k:<width$}  {v}");
    }
}
