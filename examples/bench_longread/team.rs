//! The scripted team: each request is told apart (lead, coder, or a summary request) and answered
//! from what it carries. The lead delegates once and finishes when the coder returns; the coder runs
//! `./check.sh`, reads every page an evidence header offers, then the next note, then finishes;
//! every summary is the same fixed text.

use crate::notes::note_path;
use crate::{FAILING_LINE, OBJECTIVE, SUMMARY};
use agentd_test_support::*;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Lead,
    Coder,
    Summary,
}

/// A summary request: folding a batch (the summariser's own system prompt), or in place (the role's
/// own request with tools forbidden).
pub fn kind_of(body: &Value) -> Kind {
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
pub fn offered_page(tool_result: &str) -> Option<(String, u64)> {
    let header = tool_result.strip_prefix("[evidence ")?.lines().next()?;
    let rest = header.split_once("Read on with read_evidence ")?.1;
    let args: Value = serde_json::from_str(&rest[..=rest.find('}')?]).ok()?;
    Some((args["id"].as_str()?.to_string(), args["offset"].as_u64()?))
}

#[derive(Default)]
pub struct Coder {
    pub checked: bool,
    /// Notes asked for so far.
    pub next_note: usize,
    /// The page the last tool result offered.
    pub offer: Option<(String, u64)>,
    /// Evidence pages seen that said "This is the end.".
    pub last_pages: usize,
    /// Steps decided with no tool result last in the request (right after a compaction that kept no
    /// round): they follow the page remembered from the last tool result seen.
    pub blind: usize,
}

pub fn coder_step(coder: &Mutex<Coder>, notes: usize, body: &Value) -> Step {
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
pub fn responder(notes: usize, coder: Arc<Mutex<Coder>>) -> impl Fn(&Value) -> Step + Send + Sync + 'static {
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
