//! agentd's main job, end to end, in one command:
//!
//! ```text
//! cargo run --release --example team_demo
//! ```
//!
//! A scripted OpenAI-compatible model server plays the models; the real `agentd` daemon runs in a
//! temporary home against a small bookkeeping crate, written into a temporary directory, whose
//! monthly totals all come out negated. The lead reads the crate's README and delegates to the coder,
//! which runs `./check.sh` (it stands in for `cargo test`: it prints the report `cargo test` gives
//! for the crate's current `src/money.rs`, so no compiler is needed), reads the failing modules one
//! by one (~2,500 tokens each), finds that `money::add` subtracts, fixes it and runs the check again.
//!
//! The history that builds up is what agentd exists for. The server declares a 32,768-token window
//! but takes only 16,384 (as a server that lists the model's full length but runs it with a smaller
//! context does): the coder's first request over 16,384 is refused with the provider's HTTP 400
//! `context_length_exceeded`, agentd learns the window from it (`window_learned`), compacts the
//! history and resends; later requests compact at the learned window's trigger. Summaries are
//! written by the same scripted model, from what each summary request carries; the scripted team,
//! too, decides each step from what its request holds (a compacted history included). One rate limit
//! (HTTP 429 with `Retry-After: 1`) is thrown in as well.
//!
//! The demo prints every event as it happens (each compaction: tokens before → after, summary
//! batches and the evidence id of what left the request), then the task's status, the diff, the
//! compactions and the refusal, the lead's and the coder's context gauges, the `agentd evidence read`
//! command for an archive with the first lines it prints, and the tail of the log. Exit code 0 only
//! when the task finished, the bug is fixed, the coder compacted at least twice and a window was
//! learned from a refusal; otherwise it says which of these did not happen and exits 1.
//!
//! With the dashboard (`cargo run --release --example team_demo -- --dashboard [ADDR]`, or
//! `AGENTD_DASHBOARD=1` / `AGENTD_DASHBOARD=ADDR`; ADDR defaults to a free port on 127.0.0.1) the
//! daemon also serves its web dashboard, the demo prints the login URL (`agentd dashboard`) and the
//! scripted model takes a second per answer, so the run and its chart can be watched live. On a
//! terminal it waits for Enter before submitting and again before stopping the daemon.

// A benchmark or demo, not the daemon: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use agentd_client::render::{event_line, one_line};
use agentd_test_support::*;
use common::{agentd_binary, is_terminal, team_config, Daemon, Result};
use serde_json::{json, Value};
use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const OBJECTIVE: &str = "The monthly report's totals are all wrong: find out why and make ./check.sh pass";
/// What the lead hands to the coder.
const CODER_OBJECTIVE: &str = "Run ./check.sh, trace the wrong totals through the modules whose tests \
                               fail, fix the cause and run ./check.sh again until it passes";
/// The window the server declares (`max_model_len` in `/v1/models`) and the one it really takes.
const DECLARED_WINDOW: u64 = 32_768;
const REAL_WINDOW: u64 = 16_384;
/// The modules with failing tests, in the order `./check.sh` reports them (and the coder reads them).
const MODULES: &[(&str, &str)] = &[
    ("report", "The monthly report"),
    ("ledger", "The general ledger"),
    ("invoice", "Invoices"),
    ("payroll", "Payroll"),
    ("tax", "Tax provisions"),
    ("budget", "Budgets"),
    ("expenses", "Expense claims"),
    ("accounts", "Account balances"),
    ("forecast", "Cash forecasts"),
    ("audit", "The audit trail"),
    ("receivables", "Accounts receivable"),
    ("payables", "Accounts payable"),
    ("assets", "Fixed assets"),
    ("inventory", "Inventory valuation"),
];
/// The shared helper the coder reads last: where the bug is.
const MONEY: &str = "src/money.rs";
const BUGGY_ADD: &str = "pub fn add(a: Cents, b: Cents) -> Cents {\n    a - b\n}";
const FIXED_ADD: &str = "pub fn add(a: Cents, b: Cents) -> Cents {\n    a + b\n}";
/// Accounts each module has functions for (three per account): the size of a module.
const ACCOUNTS_PER_MODULE: u32 = 9;

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("team_demo: {e}");
            ExitCode::from(2)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The workspace: a bookkeeping crate whose `money::add` subtracts.

/// One module of the crate: per account a total, a largest entry and a count, and a test of each.
fn module_source(name: &str, about: &str, index: u32) -> String {
    let mut s = format!(
        "//! {about}: per account, the total, the largest entry and the number of entries of a period.\n\
         //!\n\
         //! Amounts are in cents ([`Cents`]); every sum goes through [`crate::money::add`], so the\n\
         //! rounding and overflow rules live in one place.\n\n\
         use crate::money::{{add, Cents}};\n\
         use crate::Entry;\n\n"
    );
    for k in 0..ACCOUNTS_PER_MODULE {
        let account = 100 * (index + 1) + 3 * k + 1;
        s.push_str(&format!(
            "/// {about}: the total of account {account} in `period`, in cents (every entry of the account\n\
             /// booked in that period, credits positive, debits negative).\n\
             pub fn {name}_total_{account}(entries: &[Entry], period: u32) -> Cents {{\n    \
                 entries\n        .iter()\n        .filter(|e| e.account == {account} && e.period == period)\n        \
                 .fold(0, |sum, e| add(sum, e.amount))\n\
             }}\n\n\
             /// {about}: the largest single entry of account {account} in `period`, or 0 when there is none.\n\
             pub fn {name}_largest_{account}(entries: &[Entry], period: u32) -> Cents {{\n    \
                 entries\n        .iter()\n        .filter(|e| e.account == {account} && e.period == period)\n        \
                 .map(|e| e.amount)\n        .max()\n        .unwrap_or(0)\n\
             }}\n\n\
             /// {about}: how many entries account {account} has in `period`.\n\
             pub fn {name}_count_{account}(entries: &[Entry], period: u32) -> usize {{\n    \
                 entries.iter().filter(|e| e.account == {account} && e.period == period).count()\n\
             }}\n\n"
        ));
    }
    let first = 100 * (index + 1) + 1;
    s.push_str(&format!(
        "#[cfg(test)]\nmod tests {{\n    use super::*;\n\n    \
             fn entries() -> Vec<Entry> {{\n        vec![\n            \
                 Entry {{ account: {first}, period: 1, amount: 500 }},\n            \
                 Entry {{ account: {first}, period: 1, amount: 700 }},\n            \
                 Entry {{ account: {first}, period: 2, amount: 900 }},\n        ]\n    }}\n\n    \
             #[test]\n    fn total_of_account_{first}() {{\n        \
                 assert_eq!({name}_total_{first}(&entries(), 1), 1200);\n    }}\n\n    \
             #[test]\n    fn largest_of_account_{first}() {{\n        \
                 assert_eq!({name}_largest_{first}(&entries(), 1), 700);\n    }}\n\n    \
             #[test]\n    fn count_of_account_{first}() {{\n        \
                 assert_eq!({name}_count_{first}(&entries(), 1), 2);\n    }}\n\
         }}\n"
    ));
    s
}

/// `./check.sh`'s output: what `cargo test` prints for this crate, with `add` broken or fixed.
fn test_report(broken: bool) -> String {
    let mut out = format!("running {} tests\n", MODULES.len() * 3 + 2);
    let mut failures = String::new();
    for (i, (name, _)) in MODULES.iter().enumerate() {
        let first = 100 * (i + 1) + 1;
        for (test, fails) in [("count", false), ("largest", false), ("total", broken)] {
            let result = if fails { "FAILED" } else { "ok" };
            out.push_str(&format!("test {name}::tests::{test}_of_account_{first} ... {result}\n"));
        }
        if broken {
            // The line of the failing assertion in the generated module.
            let call = format!("{name}_total_{first}(&entries()");
            let line =
                module_source(name, "", i as u32).lines().position(|l| l.contains(&call)).unwrap_or(0) + 1;
            failures.push_str(&format!(
                "\n---- {name}::tests::total_of_account_{first} stdout ----\n\
                 thread '{name}::tests::total_of_account_{first}' panicked at src/{name}.rs:{line}:9:\n\
                 assertion `left == right` failed\n  left: -1200\n right: 1200\n"
            ));
        }
    }
    out.push_str(
        "test money::tests::sub_subtracts ... ok\ntest money::tests::sum_of_nothing_is_zero ... ok\n",
    );
    let total = MODULES.len() * 3 + 2;
    if broken {
        out.push_str(&format!("\nfailures:\n{failures}\nfailures:\n"));
        for (i, (name, _)) in MODULES.iter().enumerate() {
            out.push_str(&format!("    {name}::tests::total_of_account_{}\n", 100 * (i + 1) + 1));
        }
        out.push_str(&format!(
            "\ntest result: FAILED. {} passed; {} failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.02s\n",
            total - MODULES.len(),
            MODULES.len()
        ));
    } else {
        out.push_str(&format!(
            "\ntest result: ok. {total} passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.02s\n"
        ));
    }
    out
}

/// Writes the crate into `dir`.
fn write_workspace(dir: &Path) -> Result<()> {
    let write = |rel: &str, text: &str| -> Result<()> {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
    };
    write(
        "Cargo.toml",
        "[package]\nname = \"ledger\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n",
    )?;
    let mut lib = String::from("//! ledger: the bookkeeping behind the monthly report.\n\npub mod money;\n");
    for (name, _) in MODULES {
        lib.push_str(&format!("pub mod {name};\n"));
    }
    lib.push_str(
        "\n/// One booked amount.\n#[derive(Debug, Clone, Copy, PartialEq, Eq)]\npub struct Entry {\n    \
         pub account: u32,\n    pub period: u32,\n    pub amount: money::Cents,\n}\n",
    );
    write("src/lib.rs", &lib)?;
    write(
        MONEY,
        &format!(
            "//! Money in cents, and the arithmetic every module sums with.\n\n\
             /// An amount in cents: credits positive, debits negative.\npub type Cents = i64;\n\n\
             /// Adds two amounts.\n{BUGGY_ADD}\n\n\
             /// Subtracts `b` from `a`.\npub fn sub(a: Cents, b: Cents) -> Cents {{\n    a - b\n}}\n\n\
             /// The sum of `amounts`.\npub fn sum(amounts: &[Cents]) -> Cents {{\n    \
             amounts.iter().fold(0, |s, &a| add(s, a))\n}}\n\n\
             #[cfg(test)]\nmod tests {{\n    use super::*;\n\n    #[test]\n    fn sub_subtracts() {{\n        \
             assert_eq!(sub(5, 3), 2);\n    }}\n\n    #[test]\n    fn sum_of_nothing_is_zero() {{\n        \
             assert_eq!(sum(&[]), 0);\n    }}\n}}\n"
        ),
    )?;
    for (i, (name, about)) in MODULES.iter().enumerate() {
        write(&format!("src/{name}.rs"), &module_source(name, about, i as u32))?;
    }
    let modules: Vec<&str> = MODULES.iter().map(|(n, _)| *n).collect();
    write(
        "README.md",
        &format!(
            "# ledger\n\nThe bookkeeping behind the monthly report: one module per book ({}), all summing \
             amounts with `money::add` (`src/money.rs`).\n\nRun the tests with `./check.sh`.\n",
            modules.join(", ")
        ),
    )?;
    write(
        "check.sh",
        &format!(
            "#!/bin/sh\n\
             # The test suite. In this demo it stands in for `cargo test`, so that no compiler is needed:\n\
             # it prints the report `cargo test` gives for the current src/money.rs.\n\
             if grep -A2 'pub fn add' src/money.rs | grep -q 'a - b'; then\n\
             cat <<'EOF'\n{}EOF\nexit 101\nfi\ncat <<'EOF'\n{}EOF\n",
            test_report(true),
            test_report(false)
        ),
    )?;
    use std::os::unix::fs::PermissionsExt;
    let script = dir.join("check.sh");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("cannot make {} executable: {e}", script.display()))
}

// ---------------------------------------------------------------------------------------------
// The scripted team: each answer is decided from what the request carries.

/// What a request shows was done: from the tool calls in its messages, from a summariser's
/// transcript of them (`[assistant → read_file] {"path": …}`) and from an earlier summary's lines
/// (`Files read: …`), so a compacted history tells the same story as the whole one.
#[derive(Debug, Default)]
struct Seen {
    read: BTreeSet<String>,
    ran_check: bool,
    edited: bool,
    /// The first failing assertion `./check.sh` printed.
    failing: Option<String>,
    /// The last `test result:` line seen.
    result: Option<String>,
    /// The modules whose tests `./check.sh` reported failing, in its order.
    failing_modules: Vec<String>,
    /// Whether `add`'s body `a - b` is in the request (`src/money.rs` as read).
    add_subtracts: bool,
    delegated: Vec<String>,
    returned: Option<String>,
}

impl Seen {
    fn of(body: &Value) -> Seen {
        let mut seen = Seen::default();
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        for m in &messages {
            for call in m["tool_calls"].as_array().into_iter().flatten() {
                let f = &call["function"];
                seen.call(f["name"].as_str().unwrap_or(""), f["arguments"].as_str().unwrap_or(""));
                if f["name"] == "delegate" {
                    seen.delegated.push(call["id"].as_str().unwrap_or("").to_string());
                }
            }
        }
        for m in &messages {
            let content = texts(&m["content"]);
            seen.add_subtracts |= content.contains(BUGGY_ADD);
            if m["role"] == "tool" && seen.delegated.iter().any(|id| m["tool_call_id"] == id.as_str()) {
                seen.returned = Some(content.clone());
            }
            for line in content.lines() {
                seen.line(line);
            }
        }
        seen
    }

    fn call(&mut self, name: &str, arguments: &str) {
        let args: Value = serde_json::from_str(arguments).unwrap_or(Value::Null);
        match name {
            "read_file" => {
                if let Some(p) = args["path"].as_str() {
                    self.read.insert(p.to_string());
                }
            }
            "edit_file" => self.edited |= args["path"] == MONEY,
            "run_command" => {
                self.ran_check |= args["command"].as_str().is_some_and(|c| c.contains("check.sh"))
            }
            _ => {}
        }
    }

    fn line(&mut self, line: &str) {
        // A summariser's transcript of a call: `[assistant → read_file] {"path":"src/report.rs"}`.
        if let Some((name, args)) = line.split_once("→ ").and_then(|(_, rest)| rest.split_once("] ")) {
            self.call(name, args);
        }
        if let Some(files) = after_marker(line, "Files read: ") {
            self.read.extend(files.split(", ").map(|f| f.trim().trim_end_matches('.').to_string()));
        }
        if after_marker(line, "Files changed: ").is_some_and(|f| f.contains(MONEY)) {
            self.edited = true;
        }
        if after_marker(line, "Commands run: ").is_some_and(|c| c.contains("./check.sh")) {
            self.ran_check = true;
        }
        if let Some(r) = after_marker(line, "test result: ") {
            self.result =
                Some(format!("test result: {}", r.split(';').take(2).collect::<Vec<_>>().join(";")));
        }
        if let (Some(at), None) = (line.find("thread '"), &self.failing) {
            if line.contains("panicked at") {
                self.failing = Some(line[at..].trim().to_string());
            }
        }
        // `test report::tests::total_of_account_101 ... FAILED`: a module whose test fails.
        if let Some(module) = line.strip_prefix("test ").filter(|l| l.ends_with("... FAILED")) {
            let module = module.split("::").next().unwrap_or("").to_string();
            if !self.failing_modules.contains(&module) {
                self.failing_modules.push(module);
            }
        }
    }

    fn passed(&self) -> bool {
        self.result.as_deref().is_some_and(|r| r.starts_with("test result: ok"))
    }

    /// The next file the coder has not read yet: each module whose test fails, in the order
    /// `./check.sh` named them, then the helper they all sum with.
    fn next_unread(&self) -> Option<String> {
        self.failing_modules
            .iter()
            .map(|name| format!("src/{name}.rs"))
            .chain(std::iter::once(MONEY.to_string()))
            .find(|p| !self.read.contains(p))
    }
}

fn after_marker<'a>(line: &'a str, marker: &str) -> Option<&'a str> {
    line.find(marker).map(|i| &line[i + marker.len()..])
}

/// A message's text: a string, or the text parts of an array.
fn texts(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join("\n"),
        _ => String::new(),
    }
}

/// The scripted models: one answer per request, from what the request holds. `shown` gets a short
/// description of each tool call's arguments (by call id) for the event lines.
struct Team {
    shown: Arc<Mutex<HashMap<String, String>>>,
    calls: AtomicUsize,
}

impl Team {
    fn call(&self, role: &str, name: &str, args: Value, shown: &str) -> Chunk {
        let id = format!("{role}-{}", self.calls.fetch_add(1, Ordering::SeqCst) + 1);
        self.shown.lock().unwrap().insert(id.clone(), shown.to_string());
        tool_call_with_id(&id, name, args)
    }

    fn answer(&self, body: &Value) -> Step {
        let seen = Seen::of(body);
        if is_summary_request(body) {
            sse(vec![text(&summary(&seen))])
        } else if is_lead_request(body) {
            self.lead(&seen)
        } else {
            self.coder(&seen)
        }
    }

    fn lead(&self, seen: &Seen) -> Step {
        if let Some(returned) = &seen.returned {
            let summary = format!("The coder reports: {}", one_line(returned, 300));
            let said = if returned.contains("test result: ok") {
                "The coder found the cause and ./check.sh passes; done."
            } else {
                "The coder stopped before ./check.sh passed; reporting what it found."
            };
            return sse(vec![text(said), self.call("lead", "finish", json!({ "summary": summary }), "")]);
        }
        if !seen.read.contains("README.md") {
            return sse(vec![
                reasoning(
                    "Every total is wrong, so look at how the crate is laid out before deciding anything.",
                ),
                self.call("lead", "read_file", json!({"path": "README.md"}), "README.md"),
            ]);
        }
        sse(vec![
            reasoning(
                "All modules sum through money::add and ./check.sh runs the tests: a job for the coder.",
            ),
            self.call("lead", "delegate", json!({"to": "coder", "objective": CODER_OBJECTIVE}), "to coder"),
        ])
    }

    fn coder(&self, seen: &Seen) -> Step {
        if !seen.ran_check {
            return sse(vec![self.call(
                "coder",
                "run_command",
                json!({"command": "./check.sh"}),
                "./check.sh",
            )]);
        }
        if !seen.edited {
            if let Some(path) = seen.next_unread() {
                let why = if path == MONEY {
                    "Every failing total is the expected one negated, and every module sums with money::add: \
                     read src/money.rs."
                        .to_string()
                } else {
                    let module = path.trim_start_matches("src/").trim_end_matches(".rs");
                    format!("./check.sh reports {module}::tests::total_of_account_… failing: read {path}.")
                };
                return sse(vec![
                    reasoning(&why),
                    self.call("coder", "read_file", json!({ "path": path }), &path),
                ]);
            }
            if !seen.add_subtracts {
                let summary =
                    "Read every failing module and src/money.rs; found no cause of the wrong totals.";
                return sse(vec![self.call("coder", "finish", json!({ "summary": summary }), "")]);
            }
            return sse(vec![
                reasoning("money::add returns a - b: every sum subtracts, so each total comes out negated."),
                self.call(
                    "coder",
                    "edit_file",
                    json!({"path": MONEY, "old_text": BUGGY_ADD, "new_text": FIXED_ADD}),
                    "src/money.rs: add() a - b → a + b",
                ),
            ]);
        }
        if !seen.passed() {
            return sse(vec![
                text("Fixed add(); running the tests again."),
                self.call("coder", "run_command", json!({"command": "./check.sh"}), "./check.sh"),
            ]);
        }
        let result = seen.result.clone().unwrap_or_default();
        let summary = format!(
            "money::add (src/money.rs) returned a - b, so every total summed with it came out negated; it now \
             returns a + b and ./check.sh passes ({result})."
        );
        sse(vec![self.call("coder", "finish", json!({ "summary": summary }), "")])
    }
}

/// The summariser's answer: what the request it is given shows, in the summary's own lines (which a
/// later request, and a later summary, read back).
fn summary(seen: &Seen) -> String {
    let mut s = String::from("Summary of the work so far.\n");
    if let (Some(failing), false) = (&seen.failing, seen.passed()) {
        s.push_str(&format!("Facts: ./check.sh fails; the first failure: {failing}\n"));
    }
    if !seen.read.is_empty() {
        s.push_str(&format!("Files read: {}\n", seen.read.iter().cloned().collect::<Vec<_>>().join(", ")));
    }
    if seen.edited {
        s.push_str(&format!("Files changed: {MONEY} (add: a - b → a + b)\n"));
    }
    if seen.ran_check {
        s.push_str(&format!(
            "Commands run: ./check.sh — {}\n",
            seen.result.as_deref().unwrap_or("no result yet")
        ));
    }
    s.push_str(if seen.passed() {
        "Remaining: report the fix.\n"
    } else {
        "Remaining: find why the totals are wrong, fix it, run ./check.sh until it passes.\n"
    });
    s
}

// ---------------------------------------------------------------------------------------------
// The run.

/// The dashboard's address when one was asked for: `--dashboard [ADDR]` or `AGENTD_DASHBOARD`.
fn dashboard_address() -> Option<String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(i) = args.iter().position(|a| a == "--dashboard") {
        let addr = args.get(i + 1).filter(|a| !a.starts_with("--")).cloned();
        return Some(addr.unwrap_or_else(|| "127.0.0.1:0".to_string()));
    }
    match std::env::var("AGENTD_DASHBOARD") {
        Ok(v) if v.is_empty() || v == "0" => None,
        Ok(v) if v == "1" => Some("127.0.0.1:0".to_string()),
        Ok(v) => Some(v),
        Err(_) => None,
    }
}

/// On a terminal, waits for Enter (a person is watching); elsewhere, does not wait.
fn pause(prompt: &str) {
    // SAFETY: isatty only inspects the descriptor.
    if unsafe { libc::isatty(0) } == 1 {
        println!("{prompt}");
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
    }
}

fn run() -> Result<bool> {
    let bin = agentd_binary()?;
    let rt = common::runtime()?;
    let dashboard = dashboard_address();
    let shown = Arc::new(Mutex::new(HashMap::new()));
    let team = Team { shown: shown.clone(), calls: AtomicUsize::new(0) };
    // Slow enough to watch with the dashboard: a second per answer.
    let delay = dashboard.as_ref().map(|_| Duration::from_secs(1));
    let server = rt.block_on(
        ScriptedServer::builder()
            .model("qwen3-coder")
            // Declares 32K, takes 16K: a request over 16K is refused with `context_length_exceeded`.
            .max_model_len(DECLARED_WINDOW)
            .window(REAL_WINDOW)
            // Like vLLM and llama.cpp: the server counts with the model's own tokenizer, and
            // reports the exact size of every request it answers (agentd calibrates from it).
            .tokenize_endpoint(true)
            .report_usage(true)
            // The first request meets a busy provider: 429 with Retry-After: 1 — the daemon waits
            // and sends the same request again.
            .script([rate_limited(Some("1"))])
            .responder(move |body| {
                let step = team.answer(body);
                match delay {
                    Some(d) => delayed(d, step),
                    None => step,
                }
            })
            .start(),
    );

    // The workspace: written into a temp dir, so nothing outside it is touched.
    let ws = tempfile::Builder::new()
        .prefix("agentd-demo-ws")
        .tempdir()
        .map_err(|e| format!("cannot create a temporary workspace: {e}"))?;
    write_workspace(ws.path())?;
    let money = ws.path().join(MONEY);
    let before = read(&money)?;

    let http = dashboard.as_ref().map(|addr| format!("[http]\nlisten = \"{addr}\"\n")).unwrap_or_default();
    let mut daemon = Daemon::start(&bin, &team_config(&server.base_url(), "qwen3-coder", &http))?;
    println!(
        "agentd team demo — scripted model at {} (declares a {DECLARED_WINDOW}-token window, takes \
         {REAL_WINDOW}), daemon home {}\nworkspace: a bookkeeping crate of {} modules whose totals all come \
         out negated (path in `status` below)",
        server.base_url(),
        daemon.home().display(),
        MODULES.len() + 1
    );
    if dashboard.is_some() {
        let url = cli_stdout(&daemon, &["dashboard"])?;
        println!("\ndashboard: open {}", url.trim());
        pause("press Enter to submit the task (the page shows it as it runs)");
    }

    let mut client = daemon.client()?;
    let submitted = client
        .call("task.submit", json!({"objective": OBJECTIVE, "workspace": ws.path()}))
        .map_err(|e| format!("task.submit failed: {e}"))?;
    let task_id = submitted["task_id"].as_str().ok_or("task.submit returned no task_id")?.to_string();
    println!("submitted \"{OBJECTIVE}\" → task {task_id}\n");

    // Follow the events: `[req (request_sent so far) spinner] elapsed  seq role what`.
    client.set_timeout(Some(Duration::from_secs(30)));
    client
        .call("task.subscribe", json!({"task_id": task_id, "after_seq": 0}))
        .map_err(|e| format!("task.subscribe failed: {e}"))?;
    let started = Instant::now();
    let mut requests = 0;
    const SPINNER: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
    let mut frame = 0;
    let mut last_kind = String::new();
    let mut ended = false;
    let mut events: Vec<Value> = Vec::new();
    while !ended {
        let n = client.next_notification().map_err(|e| {
            format!("no event for 30s ({e}); the daemon's log:\n{}", tail(&daemon.serve_log(), 20))
        })?;
        let e = &n["params"];
        last_kind = e["kind"].as_str().unwrap_or("").to_string();
        ended = is_terminal(e);
        let event: agentd_protocol::Event = serde_json::from_value(e.clone())
            .map_err(|err| format!("an event the demo cannot read: {err}: {e}"))?;
        events.push(e.clone());
        if last_kind == "request_sent" {
            requests += 1;
        }
        let mut line = event_line(&event);
        if last_kind == "tool_called" {
            let call_id = e["call_id"].as_str().unwrap_or("");
            if let Some(a) = shown.lock().unwrap().get(call_id).filter(|a| !a.is_empty()) {
                line.push_str(&format!(" {a}"));
            }
        }
        let spin = match last_kind.as_str() {
            "task_finished" => '✓',
            _ if ended => '✗',
            _ => SPINNER[frame % SPINNER.len()],
        };
        frame += 1;
        println!("[req {requests:>2} {spin}] {:>5.2}s {line}", started.elapsed().as_secs_f64());
        if last_kind == "window_learned" && e["source"] == "error" {
            println!(
                "                        ↳ the provider refused the request above (HTTP 400 \
                 context_length_exceeded, stating its {}-token limit): agentd keeps that window for this \
                 server and model",
                e["new_window"]
            );
        }
    }
    let finished = last_kind == "task_finished";
    let elapsed = started.elapsed();

    section("agentd status");
    print!("{}", cli_stdout(&daemon, &["status", &task_id])?);

    section("src/money.rs, before → after");
    let after = read(&money)?;
    print_diff(&before, &after);
    let fixed = after.contains(FIXED_ADD);

    let of_kind = |kind: &str| events.iter().filter(|e| e["kind"] == kind).collect::<Vec<_>>();
    let compactions = of_kind("compaction_finished");
    let coder_compactions = compactions.iter().filter(|e| e["role"] == "coder").count();
    let learned: Vec<&Value> =
        of_kind("window_learned").into_iter().filter(|e| e["source"] == "error").collect();

    section("the refusal the window was learned from");
    // What the provider said, as the daemon logged it.
    let log = strip_ansi(&daemon.serve_log());
    for l in log.lines().filter_map(|l| after_marker(l, "window learned from a refusal")) {
        println!("daemon log: window learned from a refusal {}", one_line(l, 400));
    }
    for e in &learned {
        println!(
            "window_learned: {} → {} tokens (source: {})",
            e["old_window"],
            e["new_window"],
            e["source"].as_str().unwrap_or("")
        );
    }
    if learned.is_empty() {
        println!("(no window was learned from a refusal)");
    }
    println!("the server refused {} request(s) as over its window", server.refused());

    section("compactions");
    for c in &compactions {
        let n = |k: &str| c[k].as_u64().unwrap_or(0);
        let batches = n("batches");
        println!(
            "seq {:>3}  {:<6} {:>6} → {:>5} tokens, {batches} summary {}, archive {}",
            n("seq"),
            c["role"].as_str().unwrap_or(""),
            n("tokens_before"),
            n("tokens_after"),
            if batches == 1 { "batch" } else { "batches" },
            c["archive_id"].as_str().unwrap_or("")
        );
    }
    if compactions.is_empty() {
        println!("(none)");
    }

    section("agentd context --role lead");
    print!("{}", cli_stdout(&daemon, &["context", &task_id, "--role", "lead"])?);
    section("agentd context --role coder");
    print!("{}", cli_stdout(&daemon, &["context", &task_id, "--role", "coder"])?);

    if let Some(archive) = compactions.first().and_then(|c| c["archive_id"].as_str()) {
        section("reading a compaction's archive back");
        let args = ["evidence", "read", archive, "--lines", "--limit", "4"];
        println!(
            "what the first compaction removed, one message per JSON line:\n$ {} --home {} {}",
            bin.display(),
            daemon.home().display(),
            args.join(" ")
        );
        for l in cli_stdout(&daemon, &args)?.lines() {
            println!("{}", one_line(l, 160));
        }
    }

    section("agentd log (last 8 lines)");
    let log = cli_stdout(&daemon, &["log", &task_id])?;
    for l in log.lines().rev().take(8).collect::<Vec<_>>().into_iter().rev() {
        println!("{}", one_line(l, 150));
    }

    if dashboard.is_some() {
        pause("\nthe dashboard stays up: press Enter to stop the daemon");
    }
    let code = daemon.stop();
    let asked = server.chat_requests().len();
    let rate_limited = of_kind("retry_scheduled").into_iter().filter(|e| e["reason"] == "rate_limit").count();
    let checks = [
        (finished, if finished { "task finished".to_string() } else { "TASK DID NOT FINISH".to_string() }),
        (fixed, if fixed { "add() fixed".to_string() } else { "add() NOT fixed".to_string() }),
        (coder_compactions >= 2, format!("coder compactions: {coder_compactions} (at least 2 expected)")),
        (
            !learned.is_empty() && server.refused() >= 1,
            format!("windows learned from a refusal: {} (at least 1 expected)", learned.len()),
        ),
        (
            code == Some(0),
            format!("daemon stopped with SIGTERM (exit {})", code.map_or("?".to_string(), |c| c.to_string())),
        ),
    ];
    println!(
        "\n{asked} model requests in {:.1}s ({rate_limited} answered 429, {} refused as too long); {}.",
        elapsed.as_secs_f64(),
        server.refused(),
        checks.iter().map(|(_, what)| what.as_str()).collect::<Vec<_>>().join("; ")
    );
    let failed: Vec<&str> = checks.iter().filter(|(ok, _)| !ok).map(|(_, what)| what.as_str()).collect();
    if !failed.is_empty() {
        println!("DEMO FAILED, not as expected: {}", failed.join("; "));
    }
    Ok(failed.is_empty())
}

/// `s` without its terminal colour sequences (`ESC [ … m`).
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn read(p: &Path) -> Result<String> {
    std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))
}

fn section(title: &str) {
    println!("\n── {title} {}", "─".repeat(60usize.saturating_sub(title.chars().count())));
}

fn cli_stdout(d: &Daemon, args: &[&str]) -> Result<String> {
    let out = d.cli(args)?;
    if !out.status.success() {
        return Err(format!(
            "agentd {} exited with {}: {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A minimal line diff (longest common subsequence; the files are small): changed lines only, numbered.
fn print_diff(before: &str, after: &str) {
    let a: Vec<&str> = before.lines().collect();
    let b: Vec<&str> = after.lines().collect();
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] { lcs[i + 1][j + 1] + 1 } else { lcs[i + 1][j].max(lcs[i][j + 1]) };
        }
    }
    let (mut i, mut j, mut changed) = (0, 0, false);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            println!("{:>4} - {}", i + 1, a[i]);
            i += 1;
            changed = true;
        } else {
            println!("{:>4} + {}", j + 1, b[j]);
            j += 1;
            changed = true;
        }
    }
    if !changed {
        println!("(no change)");
    }
}
