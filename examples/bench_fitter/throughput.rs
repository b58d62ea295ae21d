//! (b) Cold counting throughput: ~7 MB of each kind of generated text (source, prose, JSON) in
//! chunks of 2–32 KB through `count_text` on one counter (distinct texts: no cache hits), MB/s per
//! kind and overall.

use crate::common::{group, mb};
use crate::gen::Gen;
use crate::gen::TextMaker;
use crate::{MODEL, THROUGHPUT_BYTES_PER_KIND};
use agentd_engine::counter::TokenCounter;
use std::time::{Duration, Instant};

/// Measures (b) and prints its table.
pub fn measure(g: &mut Gen) {
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
            let text = make(g, size);
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
}
