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
//!
//! The modules: `refit` measures (a), `throughput` (b) and `compaction` (c); `history` builds the
//! coder's history and describes it; `gen` is the seeded text generator (prose, JSON, command
//! output) with `code` its Rust-like source, `tools` its tool calls and results and `words` its
//! vocabulary.

// A benchmark or demo, not the daemon: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

// The examples' shared helpers live beside this directory, not in it.
mod code;
#[path = "../common/mod.rs"]
mod common;
mod compaction;
mod gen;
mod history;
mod refit;
mod throughput;
mod tools;
mod words;

use agentd_engine::counter::TokenCounter;
use common::ms;
use gen::Gen;
use std::time::{Duration, Instant};

pub const MODEL: &str = "gpt-4o";
pub const TARGET_HISTORY_TOKENS: u64 = 1_000_000;
pub const COLD_RUNS: usize = 3;
pub const REFIT_ITERATIONS: usize = 200;
/// Bytes of generated text per kind for the throughput run (three kinds: ~21 MB in all).
pub const THROUGHPUT_BYTES_PER_KIND: usize = 7_000_000;
pub const PLAN_RUNS: usize = 20;
pub const PLAN_COLD_RUNS: usize = 5;

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
    let mut measured = refit::measure(&mut g);
    throughput::measure(&mut g);
    compaction::measure(&mut g, &mut measured);
    println!("total run time: {:.1} s", started.elapsed().as_secs_f64());
}

// ---------------------------------------------------------------------------------------------
// Figures

/// This thread's CPU time (user + system), which does not advance while the thread waits to run.
pub fn thread_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer; CLOCK_THREAD_CPUTIME_ID is always available on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Prints `rows` as two aligned columns, indented under a section heading.
pub fn table(rows: &[(&str, String)]) {
    let width = rows.iter().map(|(k, _)| k.chars().count()).max().unwrap_or(0);
    for (k, v) in rows {
        println!("    {k:<width$}  {v}");
    }
}
