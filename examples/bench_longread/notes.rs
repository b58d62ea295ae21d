//! The workspace: deterministic, varied design notes of a given size (by the server's o200k count)
//! about an invented ledger service — prose with identifiers, numbers and code blocks — and a
//! `check.sh` that fails with the line the task is about.

use crate::common::{Result, Rng};
use crate::scenarios::Scenario;
use crate::FAILING_LINE;
use agentd_test_support::count_text_tokens;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

const NOUNS: &[&str] = &[
    "ledger",
    "batch",
    "worker",
    "queue",
    "snapshot",
    "schema",
    "retry budget",
    "payload",
    "checkpoint",
    "shard",
    "cursor",
    "lease",
    "replica",
    "index",
    "journal",
    "manifest",
    "watermark",
    "timeout",
    "handshake",
    "backlog",
    "migration",
    "tenant",
    "quota",
    "digest",
    "scheduler",
    "write-ahead log",
];
const ADJECTIVES: &[&str] = &[
    "pending",
    "stale",
    "durable",
    "partial",
    "idle",
    "oversized",
    "replayed",
    "sealed",
    "orphaned",
    "throttled",
    "fresh",
    "corrupt",
    "deferred",
    "primary",
    "expired",
    "unacknowledged",
];
/// (third person, base form)
const VERBS: &[(&str, &str)] = &[
    ("commits", "commit"),
    ("rejects", "reject"),
    ("replays", "replay"),
    ("flushes", "flush"),
    ("splits", "split"),
    ("merges", "merge"),
    ("drops", "drop"),
    ("renews", "renew"),
    ("verifies", "verify"),
    ("compacts", "compact"),
    ("forwards", "forward"),
    ("records", "record"),
    ("throttles", "throttle"),
    ("rebuilds", "rebuild"),
];
const CONNECTIVES: &[&str] =
    &["when", "after", "before", "unless", "as soon as", "only if", "while", "because"];
const REASONS: &[&str] = &[
    "so that a restart never replays work that was already acknowledged",
    "which keeps the recovery path short even after a long outage",
    "because the storage layer cannot promise ordering across shards",
    "and the operators asked for this to be visible on the dashboard",
    "since the old behaviour lost updates under heavy contention",
    "to keep the tail latency predictable for the largest tenants",
];
const TYPES: &[&str] = &["Ledger", "Batch", "Cursor", "Lease", "Shard", "Journal", "Manifest", "Quota"];

/// `a` or `an`, as the word needs.
fn a(word: &str) -> String {
    let article = if word.starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" };
    format!("{article} {word}")
}

fn ident(rng: &mut Rng, file: usize) -> String {
    let noun = rng.pick(NOUNS).replace([' ', '-'], "_");
    format!("{noun}_{file:02}_{:03x}", rng.below(4096))
}

fn verb(rng: &mut Rng) -> (&'static str, &'static str) {
    VERBS[rng.below(VERBS.len() as u64) as usize]
}

fn sentence(rng: &mut Rng, file: usize) -> String {
    let n = rng.below(9_000) + 10;
    let (adj, noun, other) = (rng.pick(ADJECTIVES), rng.pick(NOUNS), rng.pick(NOUNS));
    match rng.below(7) {
        0 => format!(
            "The {adj} {noun} {} the {other} {} the {} reaches {n} entries.",
            verb(rng).0,
            rng.pick(CONNECTIVES),
            rng.pick(NOUNS)
        ),
        1 => format!(
            "`{}` {} every {adj} {noun} within {n} ms, and logs error E{:04} otherwise.",
            ident(rng, file),
            verb(rng).0,
            rng.below(10_000)
        ),
        2 => format!(
            "In release {}.{}.{}, {} {noun} was seen {n} times an hour on shard {}; the fix keeps the {other} intact.",
            rng.below(5),
            rng.below(30),
            rng.below(10),
            a(adj),
            rng.below(64)
        ),
        3 => format!(
            "Operators should check `{}` before they {} the {noun}, since {} {other} costs about {n} bytes.",
            ident(rng, file),
            verb(rng).1,
            a(adj)
        ),
        4 => format!("We {} the {adj} {noun} first, {}.", verb(rng).1, rng.pick(REASONS)),
        5 => format!(
            "Nothing in the {noun} path may {} {} {other}; the scheduler retries it later instead, {}.",
            verb(rng).1,
            a(adj),
            rng.pick(REASONS)
        ),
        _ => format!(
            "If the {noun} is {adj}, the worker {} it {} the {other} has been {} for the tenant.",
            verb(rng).0,
            rng.pick(CONNECTIVES),
            rng.pick(ADJECTIVES)
        ),
    }
}

fn paragraph(rng: &mut Rng, file: usize) -> String {
    let sentences: Vec<String> = (0..3 + rng.below(4)).map(|_| sentence(rng, file)).collect();
    format!("{}\n\n", sentences.join(" "))
}

fn code_block(rng: &mut Rng, file: usize) -> String {
    let f = ident(rng, file);
    let ty = rng.pick(TYPES);
    let mut out = format!("```rust\npub fn {f}(ctx: &mut Context, limit: u32) -> Result<{ty}, Error> {{\n");
    for _ in 0..3 + rng.below(6) {
        let v = ident(rng, file);
        out.push_str(&match rng.below(3) {
            0 => format!(
                "    let {v} = ctx.{}(\"{}-{:05}\", {})?;\n",
                verb(rng).1,
                rng.pick(NOUNS).replace(' ', "-"),
                rng.below(100_000),
                rng.below(512)
            ),
            1 => format!(
                "    if {v}.len() > limit as usize {{ return Err(Error::{}({})); }}\n",
                rng.pick(TYPES),
                rng.below(10_000)
            ),
            _ => format!("    // {}\n", sentence(rng, file)),
        });
    }
    out.push_str(&format!("    Ok({ty}::new(ctx.id(), {}))\n}}\n```\n\n", rng.below(1 << 20)));
    out
}

/// Note `file`: prose paragraphs with a code block every fourth chunk, until it reaches `target`
/// tokens by the server's count (summed chunk by chunk; the whole is measured by the caller).
fn note(file: usize, target: u64) -> String {
    let mut rng = Rng(0x5eed_0000 + file as u64);
    let mut text = format!("# Design note {file:02}: the {} {}\n\n", rng.pick(ADJECTIVES), rng.pick(NOUNS));
    let mut tokens = count_text_tokens(&text);
    let mut n = 0;
    while tokens < target {
        let chunk = if n % 4 == 3 { code_block(&mut rng, file) } else { paragraph(&mut rng, file) };
        tokens += count_text_tokens(&chunk);
        text.push_str(&chunk);
        n += 1;
    }
    text
}

pub fn note_path(i: usize) -> String {
    format!("notes/note_{:02}.md", i + 1)
}

/// Writes the notes and `check.sh`; answers each note's tokens (the server's count) and bytes.
pub fn workspace(dir: &Path, s: &Scenario) -> Result<Vec<(u64, usize)>> {
    let notes = dir.join("notes");
    std::fs::create_dir_all(&notes).map_err(|e| format!("cannot create {}: {e}", notes.display()))?;
    let mut sizes = Vec::new();
    for i in 0..s.files {
        let text = note(i, s.file_tokens);
        let path = dir.join(note_path(i));
        std::fs::write(&path, &text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        sizes.push((count_text_tokens(&text), text.len()));
    }
    let check = dir.join("check.sh");
    std::fs::write(&check, format!("#!/bin/sh\necho '{FAILING_LINE}'\nexit 1\n"))
        .map_err(|e| format!("cannot write {}: {e}", check.display()))?;
    std::fs::set_permissions(&check, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("cannot make {} executable: {e}", check.display()))?;
    Ok(sizes)
}
