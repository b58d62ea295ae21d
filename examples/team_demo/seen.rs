//! What a request shows was done, read back from the request alone: the tool calls in its
//! messages, a summariser's transcript of them, and an earlier summary's own lines. The scripted
//! team decides every answer from this, so a compacted history leads to the same next step.

use crate::{BUGGY_ADD, MONEY};
use serde_json::Value;
use std::collections::BTreeSet;

/// What a request shows was done: from the tool calls in its messages, from a summariser's
/// transcript of them (`[assistant → read_file] {"path": …}`) and from an earlier summary's lines
/// (`Files read: …`), so a compacted history tells the same story as the whole one.
#[derive(Debug, Default)]
pub struct Seen {
    pub read: BTreeSet<String>,
    pub ran_check: bool,
    pub edited: bool,
    /// The first failing assertion `./check.sh` printed.
    pub failing: Option<String>,
    /// The last `test result:` line seen.
    pub result: Option<String>,
    /// The modules whose tests `./check.sh` reported failing, in its order.
    pub failing_modules: Vec<String>,
    /// Whether `add`'s body `a - b` is in the request (`src/money.rs` as read).
    pub add_subtracts: bool,
    pub delegated: Vec<String>,
    pub returned: Option<String>,
}

impl Seen {
    pub fn of(body: &Value) -> Seen {
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

    pub fn call(&mut self, name: &str, arguments: &str) {
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

    pub fn line(&mut self, line: &str) {
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

    pub fn passed(&self) -> bool {
        self.result.as_deref().is_some_and(|r| r.starts_with("test result: ok"))
    }

    /// The next file the coder has not read yet: each module whose test fails, in the order
    /// `./check.sh` named them, then the helper they all sum with.
    pub fn next_unread(&self) -> Option<String> {
        self.failing_modules
            .iter()
            .map(|name| format!("src/{name}.rs"))
            .chain(std::iter::once(MONEY.to_string()))
            .find(|p| !self.read.contains(p))
    }
}

pub fn after_marker<'a>(line: &'a str, marker: &str) -> Option<&'a str> {
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
