//! What idle thinking cleanup saves, on a scripted multi-day session with long thinking blocks.
//!
//! Three ways to treat an agent's old reasoning, over the same session (every day a new request after
//! a night's idleness, then a chain of tool calls, each answer carrying a long thinking block):
//! - keep all: every thinking block goes back forever;
//! - drop after each tool call: no earlier thinking is ever sent back (the chain forgets why it
//!   called its tools, and every request rewrites the previous one, so the prompt cache misses);
//! - agentd's idle cleanup: thinking goes back unchanged through an active chain; a request after
//!   more than an hour idle drops all but the latest block, once.
//!
//! Printed: prompt tokens sent, and prompt tokens billed when a cached prefix costs a tenth (Anthropic
//! and OpenAI price cache reads at about 10 %; a cache lives about 5 minutes, so nothing is cached
//! across an idle night). Counts are the o200k tokenizer's.
//!
//! `cargo run --release --example bench_thinking`

// A benchmark or demo, not the daemon: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use agentd_engine::counter::TokenCounter;
use agentd_policies::thinking::clear_outdated;
use agentd_protocol::{Message, Part, Speaker};

const DAYS: usize = 5;
const CHAIN: usize = 12;
const CACHE_PRICE: f64 = 0.1;

fn thinking(day: usize, step: usize) -> String {
    let mut t = format!("Day {day}, step {step}: ");
    while t.len() < 6_000 {
        t.push_str("I should check how the parser handles nested blocks before changing the tokenizer; the failing test points at line offsets. ");
    }
    t
}

fn tool_result(day: usize, step: usize) -> String {
    let mut t = String::new();
    for line in 0..40 {
        t.push_str(&format!(
            "src/module_{step}.rs:{line}: fn item_{day}_{step}_{line}() -> Result<(), Error> {{ todo }}\n"
        ));
    }
    t
}

#[derive(Clone, Copy, PartialEq)]
enum Strategy {
    KeepAll,
    DropAfterToolCall,
    IdleCleanup,
}

struct Tally {
    sent: u64,
    billed: f64,
    requests: u64,
}

fn tokens(counter: &TokenCounter, messages: &[Message]) -> u64 {
    messages.iter().map(|m| counter.count_message(m).tokens.0).sum()
}

fn run(strategy: Strategy, counter: &TokenCounter) -> Tally {
    let mut history: Vec<Message> = Vec::new();
    let mut previous: Vec<Message> = Vec::new();
    let mut tally = Tally { sent: 0, billed: 0.0, requests: 0 };
    for day in 0..DAYS {
        // A night idle: nothing is cached any more.
        previous.clear();
        if strategy == Strategy::IdleCleanup {
            if let Some((cleaned, _)) = clear_outdated(&history) {
                history = cleaned;
            }
        }
        history.push(Message::user(format!("Day {day}: fix the next failing test in the parser.")));
        for step in 0..CHAIN {
            let request: Vec<Message> = match strategy {
                Strategy::DropAfterToolCall => history
                    .iter()
                    .map(|m| {
                        Message::new(
                            m.role,
                            m.parts.iter().filter(|p| !matches!(p, Part::Thinking { .. })).cloned().collect(),
                        )
                    })
                    .collect(),
                _ => history.clone(),
            };
            let total = tokens(counter, &request);
            let common = request.iter().zip(&previous).take_while(|(a, b)| a == b).count();
            let cached = tokens(counter, &request[..common]);
            tally.sent += total;
            tally.billed += (total - cached) as f64 + cached as f64 * CACHE_PRICE;
            tally.requests += 1;
            previous = request;
            let id = format!("call_{day}_{step}");
            history.push(Message::new(
                Speaker::Assistant,
                vec![
                    Part::Thinking {
                        text: thinking(day, step),
                        signature: Some(format!("sig{day}{step}")),
                        redacted: false,
                    },
                    Part::ToolCall {
                        id: id.clone(),
                        name: "read_file".into(),
                        arguments: format!("{{\"path\":\"src/module_{step}.rs\"}}"),
                    },
                ],
            ));
            history.push(Message::tool_result(id, tool_result(day, step), false));
        }
    }
    tally
}

fn main() {
    let counter = TokenCounter::new("gpt-4o");
    println!("idle thinking cleanup — {DAYS} days, a request each morning after a night idle, {CHAIN} tool calls a day,");
    println!("each answer with a ~1,100-token thinking block; cached prefix billed at {CACHE_PRICE}×\n");
    println!(
        "{:<32} {:>10} {:>16} {:>16} {:>12}",
        "strategy", "requests", "prompt tokens", "billed tokens", "vs keep all"
    );
    let keep = run(Strategy::KeepAll, &counter);
    for (name, s) in [
        ("keep all thinking", Strategy::KeepAll),
        ("drop after each tool call", Strategy::DropAfterToolCall),
        ("agentd idle cleanup (1 h)", Strategy::IdleCleanup),
    ] {
        let t = run(s, &counter);
        println!(
            "{:<32} {:>10} {:>16} {:>16.0} {:>11.1}%",
            name,
            t.requests,
            t.sent,
            t.billed,
            (t.billed / keep.billed - 1.0) * 100.0
        );
    }
    println!("\n(drop-after-each-call also sends the chain no reasoning at all, which the design rejects: the model");
    println!(
        " forgets why it called its tools; idle cleanup keeps the chain intact and the prefix cacheable)"
    );
}
