//! The long-read run, like for like: the real `agentd` daemon against a scripted server that counts,
//! enforces and declares its window and reports usage and prompt caching like a real provider.
//!
//! The model is `qwen3-coder`, which tiktoken does not know, so agentd cannot use a tokenizer of its
//! own: it estimates (bytes / 3, marked estimated) or, where the server has one, asks its `/tokenize`
//! endpoint. The workspace holds N distinct design notes of about T tokens each (by the server's
//! o200k count) and a `check.sh` that fails. The lead delegates once; the coder runs `./check.sh`,
//! then reads the notes one per step and reads every page it is offered (a result over an eighth of
//! the window is stored as evidence and paged: while the last tool result says "Read on with
//! read_evidence {…}", the next step is that call), then finishes. Summaries are a fixed ~300-token
//! text. Each scenario is its own daemon and server.
//!
//! Each shape (documents at 2 %, 5 %, 9 % and 14 % of the window) runs in both counting modes, each
//! twice: without the provider's prompt cache declared (today's rule: a compaction keeps as many
//! recent rounds as fit below the destination) and with it (`cache = { read_factor, min_tokens }`:
//! the compaction prices where it lands and when the next one comes), so the two rules are compared in
//! one sitting.
//!
//! `cargo run --release --example bench_longread [FILTER]` (FILTER: run only the scenarios whose
//! name holds it, e.g. `14%` or `priced`). With `BENCH_DUMP=DIR` each scenario's requests are written
//! to `DIR/<scenario>.tsv`, one a line: index, kind, the server's count, of it cached, cache-weighted,
//! messages — where a run's cost went, request by request.

// A benchmark or demo, not the daemon: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use agentd_test_support::daemon::with_prompt_cache;
use agentd_test_support::*;
use common::{agentd_binary, group, team_config, Daemon, Result, Rng};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const MODEL: &str = "qwen3-coder";
const TASK: &str = "Find out why ./check.sh fails; have the coder read the design notes first";
const OBJECTIVE: &str =
    "Run ./check.sh, then read every design note under notes/ in order, every page of each, and report why the check fails";
const FAILING_LINE: &str = "FAILED: test adds_two_numbers (expected 5, got -1)";
/// What a cached prompt token costs, relative to an uncached one (OpenAI and Anthropic: about 10 %).
const CACHE_PRICE: f64 = 0.1;
/// The count error is taken over the requests sent after this many responses.
const SKIP_RESPONSES: usize = 3;
/// Waiting longer than this for any one event of a task is a failure.
const QUIET: Duration = Duration::from_secs(120);
const SUMMARY: &str = "Summary of the work so far. The coder ran ./check.sh first; it fails with the line \
FAILED: test adds_two_numbers (expected 5, got -1), which is the failure the task is about and is \
still unresolved. Since then the coder has been reading the design notes under notes/ in order, one \
note per step, following every evidence page it was offered with read_evidence until the page said \
it was the end, and only then moving on to the next note. The notes read so far describe the ledger \
service: how batches are staged, retried and committed, the limits on queue depth and payload size, \
the error codes returned by the sync workers, and the migration plan for the storage schema. None of \
the notes read so far mentions the adds_two_numbers test or the arithmetic helpers it exercises, so \
the cause of the failure has not been found yet. No file was changed; no command other than \
./check.sh was run. Next: keep reading the remaining notes in order, then look at the arithmetic \
helper that adds_two_numbers calls, since the observed value -1 for an expected 5 suggests that the \
operands are subtracted instead of added, or that one operand is negated before the addition. \
Open questions: whether the notes describe the arithmetic helpers at all, and whether the check \
exercises code under notes/ or elsewhere. Identifiers to keep: adds_two_numbers, check.sh, notes/, \
read_evidence, read_file.";

/// The documents' shape: how many, how large, in which window.
struct Shape {
    files: usize,
    file_tokens: u64,
    window: u64,
}

impl Shape {
    /// A document's size as a share of the window, in percent.
    fn percent(&self) -> f64 {
        100.0 * self.file_tokens as f64 / self.window as f64
    }
}

/// Documents at 2 %, 5 %, 9 % and 14 % of the window, each about 80–110k tokens in all.
const SHAPES: [Shape; 4] = [
    Shape { files: 60, file_tokens: 1_300, window: 65_536 },
    Shape { files: 50, file_tokens: 1_640, window: 32_768 },
    Shape { files: 30, file_tokens: 3_000, window: 32_768 },
    Shape { files: 12, file_tokens: 9_000, window: 65_536 },
];

/// One run: a shape, a counting mode, and whether the provider declares its prompt cache (the
/// compaction then prices where it lands) or not (today's rule: as many recent rounds as fit).
struct Scenario {
    name: String,
    files: usize,
    file_tokens: u64,
    window: u64,
    endpoint: bool,
    priced: bool,
}

/// Every shape in both counting modes, each without and with the cache declared.
fn scenarios() -> Vec<Scenario> {
    let mut out = Vec::new();
    for shape in &SHAPES {
        for endpoint in [false, true] {
            for priced in [false, true] {
                out.push(Scenario {
                    name: format!(
                        "{:>4.1}% {}×{} @{}K, {}, {}",
                        shape.percent(),
                        shape.files,
                        shape.file_tokens / 100 * 100,
                        shape.window / 1024,
                        if endpoint { "/tokenize" } else { "estimate" },
                        if priced { "priced" } else { "today" }
                    ),
                    files: shape.files,
                    file_tokens: shape.file_tokens,
                    window: shape.window,
                    endpoint,
                    priced,
                });
            }
        }
    }
    out
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("bench_longread: {e}");
            ExitCode::from(2)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The workspace: deterministic, varied design notes

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

fn note_path(i: usize) -> String {
    format!("notes/note_{:02}.md", i + 1)
}

/// Writes the notes and `check.sh`; answers each note's tokens (the server's count) and bytes.
fn workspace(dir: &Path, s: &Scenario) -> Result<Vec<(u64, usize)>> {
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

// ---------------------------------------------------------------------------------------------
// The models

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Lead,
    Coder,
    Summary,
}

/// A summary request: folding a batch (the summariser's own system prompt), or in place (the role's
/// own request with tools forbidden).
fn kind_of(body: &Value) -> Kind {
    if is_summary_request(body) {
        Kind::Summary
    } else if is_lead_request(body) {
        Kind::Lead
    } else {
        Kind::Coder
    }
}

/// The page an evidence header offers next: `[evidence ID: …. Read on with read_evidence {"id": "ID",
/// "offset": K}.]` → `(ID, K)`; `None` for a whole result or a last page ("This is the end.").
fn offered_page(tool_result: &str) -> Option<(String, u64)> {
    let header = tool_result.strip_prefix("[evidence ")?.lines().next()?;
    let rest = header.split_once("Read on with read_evidence ")?.1;
    let args: Value = serde_json::from_str(&rest[..=rest.find('}')?]).ok()?;
    Some((args["id"].as_str()?.to_string(), args["offset"].as_u64()?))
}

#[derive(Default)]
struct Coder {
    checked: bool,
    /// Notes asked for so far.
    next_note: usize,
    /// The page the last tool result offered.
    offer: Option<(String, u64)>,
    /// Evidence pages seen that said "This is the end.".
    last_pages: usize,
    /// Steps decided with no tool result last in the request (right after a compaction that kept no
    /// round): they follow the page remembered from the last tool result seen.
    blind: usize,
}

fn coder_step(coder: &Mutex<Coder>, notes: usize, body: &Value) -> Step {
    let mut c = coder.lock().unwrap_or_else(|e| e.into_inner());
    let last = body["messages"].as_array().and_then(|m| m.last());
    match last {
        Some(m) if m["role"] == "tool" => {
            let content = m["content"].as_str().unwrap_or("");
            c.offer = offered_page(content);
            if content.starts_with("[evidence ")
                && content.lines().next().is_some_and(|h| h.contains("This is the end."))
            {
                c.last_pages += 1;
            }
        }
        _ if c.checked => c.blind += 1,
        _ => {
            c.checked = true;
            return sse(vec![
                text("First, the failing check."),
                tool_call("run_command", json!({"command": "./check.sh"})),
            ]);
        }
    }
    if let Some((id, offset)) = c.offer.clone() {
        return sse(vec![
            text("Reading on."),
            tool_call("read_evidence", json!({"id": id, "offset": offset})),
        ]);
    }
    if c.next_note < notes {
        let path = note_path(c.next_note);
        c.next_note += 1;
        return sse(vec![text(&format!("Reading {path}.")), tool_call("read_file", json!({"path": path}))]);
    }
    sse(vec![finish(&format!(
        "Read all {notes} notes, every page. ./check.sh still fails: {FAILING_LINE}; no note explains it."
    ))])
}

/// The team's script as a function of each request.
fn responder(notes: usize, coder: Arc<Mutex<Coder>>) -> impl Fn(&Value) -> Step + Send + Sync + 'static {
    move |body: &Value| match kind_of(body) {
        Kind::Summary => sse(vec![text(SUMMARY)]),
        Kind::Lead => {
            let returned = body["messages"].as_array().is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
            if returned {
                sse(vec![finish("The coder read every note; ./check.sh still fails as reported.")])
            } else {
                sse(vec![delegate("coder", OBJECTIVE)])
            }
        }
        Kind::Coder => coder_step(&coder, notes, body),
    }
}

// ---------------------------------------------------------------------------------------------
// One scenario

struct Row {
    name: String,
    /// The documents' own tokens, by the server's count.
    docs: u64,
    ended: String,
    requests: usize,
    refused: usize,
    prompt: u64,
    weighted: f64,
    cached: u64,
    compactions: usize,
    summaries: usize,
    paged: usize,
    objective_pct: f64,
    failing_pct: f64,
    err_mean: f64,
    err_worst: f64,
    err_pairs: usize,
    wall: Duration,
    notes: Vec<String>,
}

fn of_kind<'a>(events: &'a [Value], kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    events.iter().filter(move |e| e["kind"] == kind)
}

/// The share of `bodies` from the first that contains `needle` on, that still contain it.
fn kept_pct(bodies: &[&Value], needle: &str) -> f64 {
    let texts: Vec<String> = bodies.iter().map(|b| b["messages"].to_string()).collect();
    let Some(first) = texts.iter().position(|t| t.contains(needle)) else { return 0.0 };
    let after = &texts[first..];
    100.0 * after.iter().filter(|t| t.contains(needle)).count() as f64 / after.len() as f64
}

fn run_scenario(bin: &Path, rt: &tokio::runtime::Runtime, s: &Scenario) -> Result<Row> {
    let coder = Arc::new(Mutex::new(Coder::default()));
    let server = rt.block_on(
        ScriptedServer::builder()
            .model(MODEL)
            .window(s.window)
            .max_model_len(Some(s.window))
            .tokenize_endpoint(s.endpoint)
            .report_usage(true)
            .responder(responder(s.files, coder.clone()))
            .start(),
    );
    let ws = tempfile::Builder::new()
        .prefix("agentd-longread-ws")
        .tempdir()
        .map_err(|e| format!("cannot create a temporary workspace: {e}"))?;
    let sizes = workspace(ws.path(), s)?;
    let config = team_config(&server.base_url(), MODEL, "");
    // The provider declares the server's prompt cache as the scripted server runs it.
    let config = if s.priced { with_prompt_cache(&config, CACHE_PRICE, MIN_CACHED_PREFIX) } else { config };
    let daemon = Daemon::start(bin, &config)?;
    let started = Instant::now();
    let task = daemon.submit(TASK, ws.path())?;
    let events = daemon.events_until_end(&task, QUIET)?;
    let wall = started.elapsed();
    let last = events.last().cloned().unwrap_or_default();
    let ended = match last["kind"].as_str() {
        Some("task_finished") => "finished".to_string(),
        Some(k) => format!("{k}: {}", last["error"].as_str().unwrap_or("")),
        None => "no events".to_string(),
    };

    let bodies = server.chat_requests();
    let counted = server.counted();
    let cached = server.cached();
    if counted.len() != bodies.len() || cached.len() != bodies.len() {
        return Err(format!(
            "{}: the server recorded {} chat requests but {} counts and {} cache figures",
            s.name,
            bodies.len(),
            counted.len(),
            cached.len()
        ));
    }
    let kinds: Vec<Kind> = bodies.iter().map(kind_of).collect();
    let prompt: u64 = counted.iter().sum();
    let cached_sum: u64 = cached.iter().sum();
    let weighted: f64 =
        counted.iter().zip(&cached).map(|(&n, &k)| (n - k) as f64 + CACHE_PRICE * k as f64).sum();
    if let Ok(dir) = std::env::var("BENCH_DUMP") {
        let mut out = String::new();
        for (i, ((n, k), kind)) in counted.iter().zip(&cached).zip(&kinds).enumerate() {
            let msgs = bodies[i]["messages"].as_array().map(|m| m.len()).unwrap_or(0);
            out.push_str(&format!(
                "{i}\t{kind:?}\t{n}\t{k}\t{:.0}\t{msgs}\n",
                (n - k) as f64 + CACHE_PRICE * *k as f64
            ));
        }
        let name: String = s.name.chars().map(|c| if c.is_alphanumeric() { c } else { '_' }).collect();
        std::fs::write(format!("{dir}/{name}.tsv"), out).unwrap();
    }
    let coder_bodies: Vec<&Value> =
        bodies.iter().zip(&kinds).filter(|(_, k)| **k == Kind::Coder).map(|(b, _)| b).collect();

    // agentd's count (request_sent) against the server's, paired per role in order. A refused request
    // has its own request_sent and its own server count, so it stays in both sequences, paired as is.
    let third_response = of_kind(&events, "response_received")
        .nth(SKIP_RESPONSES - 1)
        .and_then(|e| e["seq"].as_u64())
        .unwrap_or(u64::MAX);
    let mut errors: Vec<f64> = Vec::new();
    let mut per_role = Vec::new();
    let mut outliers = Vec::new();
    let compacted_at: Vec<(String, u64)> = of_kind(&events, "compaction_finished")
        .map(|e| (e["role"].as_str().unwrap_or("").to_string(), e["seq"].as_u64().unwrap_or(0)))
        .collect();
    for (role, kind) in [("lead", Kind::Lead), ("coder", Kind::Coder)] {
        let theirs: Vec<u64> =
            counted.iter().zip(&kinds).filter(|(_, k)| **k == kind).map(|(n, _)| *n).collect();
        let ours: Vec<(u64, u64)> = of_kind(&events, "request_sent")
            .filter(|e| e["role"] == role)
            .map(|e| (e["seq"].as_u64().unwrap_or(0), e["tokens"].as_u64().unwrap_or(0)))
            .collect();
        if theirs.len() != ours.len() {
            per_role.push(format!(
                "{role}: {} request_sent events but {} requests at the server (paired the first {})",
                ours.len(),
                theirs.len(),
                ours.len().min(theirs.len())
            ));
        }
        let role_errors: Vec<f64> = ours
            .iter()
            .zip(&theirs)
            .enumerate()
            .filter(|(_, ((seq, _), _))| *seq > third_response)
            .map(|(i, ((seq, ours), &theirs))| {
                let e = (*ours as f64 - theirs as f64) / theirs as f64;
                if e.abs() > 0.02 {
                    // Was it the first request after a compaction (a rebuilt one, counted whole)?
                    let previous = if i == 0 { 0 } else { ours_seq(&events, role, i - 1) };
                    let rebuilt = compacted_at.iter().any(|(r, c)| r == role && *c > previous && *c < *seq);
                    outliers.push(format!(
                        "{role}#{i} {:+.1}%{}",
                        e * 100.0,
                        if rebuilt { " (rebuilt)" } else { "" }
                    ));
                }
                e
            })
            .collect();
        if !role_errors.is_empty() {
            let mean = role_errors.iter().sum::<f64>() / role_errors.len() as f64;
            per_role.push(format!("{role} mean {:+.1}% over {}", mean * 100.0, role_errors.len()));
        }
        errors.extend(role_errors);
    }
    let err_mean = if errors.is_empty() {
        0.0
    } else {
        errors.iter().map(|e| e.abs()).sum::<f64>() / errors.len() as f64
    };
    let err_worst = errors.iter().copied().fold(0.0f64, |w, e| if e.abs() > w.abs() { e } else { w });

    let coder_events = |kind: &'static str, tool: &'static str| {
        of_kind(&events, kind).filter(move |e| e["role"] == "coder" && e["tool"] == tool)
    };
    let paged = coder_events("tool_called", "read_evidence").count();
    let stored = coder_events("tool_finished", "read_file").filter(|e| e["evidence_id"].is_string()).count();
    let read_files = coder_events("tool_called", "read_file").count();
    let tokens: Vec<u64> = sizes.iter().map(|s| s.0).collect();
    let bytes: usize = sizes.iter().map(|s| s.1).sum();
    let largest = counted.iter().max().copied().unwrap_or(0);
    let tokenize_calls = server.requests().iter().filter(|r| r.path_only() == TOKENIZE_PATH).count();
    let estimated = of_kind(&events, "request_sent").filter(|e| e["estimated"] == true).count();
    let sent = of_kind(&events, "request_sent").count();
    let trigger =
        of_kind(&events, "request_sent").last().map_or(0, |e| e["trigger_tokens"].as_u64().unwrap_or(0));
    let after: Vec<String> = of_kind(&events, "compaction_finished")
        .map(|e| group(e["tokens_after"].as_u64().unwrap_or(0)))
        .collect();
    let failed = of_kind(&events, "compaction_failed").count();
    let in_place = bodies.iter().filter(|b| b["tool_choice"] == "none").count();
    let (blind, last_pages) = coder.lock().map(|c| (c.blind, c.last_pages)).unwrap_or((0, 0));
    let mut notes = vec![
        format!(
            "notes: {} × {}–{} tokens (server's count), {:.2} bytes/token; smallest whole-result limit {} tokens (tool_finished.whole_limit)",
            s.files,
            group(*tokens.iter().min().unwrap_or(&0)),
            group(*tokens.iter().max().unwrap_or(&0)),
            bytes as f64 / tokens.iter().sum::<u64>().max(1) as f64,
            group(
                of_kind(&events, "tool_finished")
                    .filter_map(|e| e["whole_limit"].as_u64())
                    .min()
                    .unwrap_or(s.window / 8)
            )
        ),
        format!(
            "coder: {read_files} read_file calls, {stored} of them stored as evidence and paged; {paged} read_evidence \
             calls; {last_pages} last pages (\"This is the end.\") reached; {blind} steps decided with no tool result last"
        ),
        format!(
            "requests by kind: lead {}, coder {}, summary {} ({in_place} in place, with tool_choice none; the others \
             folding batches); largest {} ({:.0}% of the window); trigger {}",
            kinds.iter().filter(|k| **k == Kind::Lead).count(),
            coder_bodies.len(),
            kinds.iter().filter(|k| **k == Kind::Summary).count(),
            group(largest),
            100.0 * largest as f64 / s.window as f64,
            group(trigger)
        ),
        format!(
            "agentd counted {estimated} of {sent} requests as estimated; {tokenize_calls} /tokenize calls; \
             count error by role (ours − server's): {}",
            per_role.join("; ")
        ),
        format!(
            "compactions landed at [{}] tokens (agentd's count); {failed} compaction_failed",
            after.join(", ")
        ),
    ];
    let learned: Vec<String> = of_kind(&events, "window_learned")
        .map(|e| {
            format!(
                "{} → {} ({}) at seq {}",
                e["old_window"],
                e["new_window"],
                e["source"].as_str().unwrap_or(""),
                e["seq"]
            )
        })
        .collect();
    if !learned.is_empty() {
        notes.push(format!("windows learned: {}", learned.join(", ")));
    }
    if !outliers.is_empty() {
        notes.push(format!("requests counted more than 2% off the server: {}", outliers.join(", ")));
    }
    drop(daemon);
    Ok(Row {
        name: s.name.clone(),
        docs: tokens.iter().sum(),
        ended,
        requests: bodies.len(),
        refused: server.refused(),
        prompt,
        weighted,
        cached: cached_sum,
        compactions: of_kind(&events, "compaction_finished").count(),
        summaries: kinds.iter().filter(|k| **k == Kind::Summary).count(),
        paged,
        objective_pct: kept_pct(&coder_bodies, OBJECTIVE),
        failing_pct: kept_pct(&coder_bodies, FAILING_LINE),
        err_mean,
        err_worst,
        err_pairs: errors.len(),
        wall,
        notes,
    })
}

// ---------------------------------------------------------------------------------------------

fn run() -> Result<bool> {
    let bin = agentd_binary()?;
    let rt = common::runtime()?;
    println!(
        "agentd long-read run — {} against a scripted server (model {MODEL}: tiktoken does not know it)",
        bin.display()
    );
    println!(
        "the server enforces and declares the window, reports usage (its own count) and prompt caching \
         (longest message-level prefix shared with an earlier request, 0 under {} tokens);",
        group(MIN_CACHED_PREFIX)
    );
    println!(
        "lead delegates once; coder runs ./check.sh, reads N notes one per step, every page offered; summaries are a fixed {}-token text\n",
        count_text_tokens(SUMMARY)
    );
    println!("columns:");
    for line in [
        "reqs      chat requests the server got (lead, coder and summaries); over = refused as over the window",
        "prompt    total prompt tokens: the sum of the server's counts of every request",
        "weighted  cache-weighted prompt tokens: Σ per request (uncached + 0.1 × cached); cached% = Σ cached / prompt",
        "×docs     weighted / the documents' own tokens (the server's count of every note): what reading them cost",
        "comp      compactions (compaction_finished events); summ = summary requests",
        "pages     read_evidence calls the coder made (every page it was offered)",
        "obj% fail% of the coder's requests (not the lead's, not summaries) from the first that holds the objective",
        "          (resp. the FAILED line of ./check.sh) on, the share that still holds it",
        "err       agentd's request_sent.tokens vs the server's count of the same request, (ours − server's) / server's:",
        "          mean |error| and the worst (signed), over the requests sent after the first 3 responses; pairs:",
        "          a role's non-summary requests at the server in order ↔ that role's request_sent events in seq",
        "          order (a refused request has its own request_sent and server count: it stays in both, paired as is)",
        "wall      submit to the task's last event",
    ] {
        println!("  {line}");
    }
    println!();

    // `bench_longread 14%` runs the scenarios whose name holds "14%".
    let filter = std::env::args().nth(1).unwrap_or_default();
    let mut rows = Vec::new();
    for s in scenarios().iter().filter(|s| s.name.contains(&filter)) {
        eprintln!("running {} …", s.name);
        rows.push(run_scenario(&bin, &rt, s)?);
    }

    println!(
        "{:<42} {:>5} {:>4} {:>10} {:>10} {:>6} {:>7} {:>4} {:>4} {:>5} {:>6} {:>6} {:>7} {:>7} {:>7}",
        "scenario",
        "reqs",
        "over",
        "prompt",
        "weighted",
        "×docs",
        "cached%",
        "comp",
        "summ",
        "pages",
        "obj%",
        "fail%",
        "err",
        "worst",
        "wall"
    );
    for r in &rows {
        println!(
            "{:<42} {:>5} {:>4} {:>10} {:>10} {:>6.2} {:>6.1}% {:>4} {:>4} {:>5} {:>5.1}% {:>5.1}% {:>6.1}% {:>+6.1}% {:>6.1}s",
            r.name,
            r.requests,
            r.refused,
            group(r.prompt),
            group(r.weighted.round() as u64),
            r.weighted / r.docs.max(1) as f64,
            100.0 * r.cached as f64 / r.prompt.max(1) as f64,
            r.compactions,
            r.summaries,
            r.paged,
            r.objective_pct,
            r.failing_pct,
            100.0 * r.err_mean,
            100.0 * r.err_worst,
            r.wall.as_secs_f64()
        );
    }
    // Today's rule against the priced one, shape by shape and mode by mode, from this one sitting.
    println!("\ncache-weighted cost ÷ the documents' own tokens, today → priced:");
    for today in rows.iter().filter(|r| r.name.ends_with(", today")) {
        let shape = today.name.trim_end_matches(", today");
        if let Some(priced) = rows.iter().find(|r| r.name == format!("{shape}, priced")) {
            println!(
                "  {shape:<36} {:>5.2} → {:>5.2}  ({} → {} weighted, {:+.1}%)",
                today.weighted / today.docs.max(1) as f64,
                priced.weighted / priced.docs.max(1) as f64,
                group(today.weighted.round() as u64),
                group(priced.weighted.round() as u64),
                100.0 * (priced.weighted / today.weighted.max(1.0) - 1.0)
            );
        }
    }
    let mut all_finished = true;
    for r in &rows {
        println!("\n{} — task {} ({} count pairs)", r.name, r.ended, r.err_pairs);
        for n in &r.notes {
            println!("  {n}");
        }
        all_finished &= r.ended == "finished";
    }
    if !all_finished {
        eprintln!("bench_longread: a task did not finish (see above)");
    }
    Ok(all_finished)
}

/// The seq of a role's `n`-th request_sent event.
fn ours_seq(events: &[Value], role: &str, n: usize) -> u64 {
    events
        .iter()
        .filter(|e| e["kind"] == "request_sent" && e["role"] == role)
        .nth(n)
        .and_then(|e| e["seq"].as_u64())
        .unwrap_or(0)
}
