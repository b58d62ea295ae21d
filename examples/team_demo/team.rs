//! The scripted team: one answer per request, from what the request holds. The lead delegates to
//! the coder and finishes when the coder returns; the coder runs `./check.sh`, reads the failing
//! modules and `src/money.rs`, fixes `add` and runs the check again; the summariser writes back
//! what the request it is given shows.

use crate::seen::Seen;
use crate::{BUGGY_ADD, CODER_OBJECTIVE, FIXED_ADD, MONEY};
use agentd_client::render::one_line;
use agentd_test_support::*;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The scripted models: one answer per request, from what the request holds. `shown` gets a short
/// description of each tool call's arguments (by call id) for the event lines.
pub struct Team {
    pub shown: Arc<Mutex<HashMap<String, String>>>,
    pub calls: AtomicUsize,
}

impl Team {
    fn call(&self, role: &str, name: &str, args: Value, shown: &str) -> Chunk {
        let id = format!("{role}-{}", self.calls.fetch_add(1, Ordering::SeqCst) + 1);
        self.shown.lock().unwrap().insert(id.clone(), shown.to_string());
        tool_call_with_id(&id, name, args)
    }

    pub fn answer(&self, body: &Value) -> Step {
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
