//! Events and gauges as lines a person reads (`watch`, `submit --wait`, `context`, the demo).

use serde_json::Value;

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn n(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

/// Shortens text to one line of at most `max` characters.
pub fn one_line(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        flat
    } else {
        let cut: String = flat.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}

/// One event as a line: `seq  role  what happened`.
pub fn event_line(e: &Value) -> String {
    let kind = s(e, "kind");
    let est = |e: &Value| {
        if e.get("estimated").and_then(Value::as_bool) == Some(true) {
            "~"
        } else {
            ""
        }
    };
    let what = match kind {
        "task_started" => format!("task started: {}", one_line(s(e, "objective"), 100)),
        "request_sent" => {
            let tokens = n(e, "tokens");
            let window = n(e, "window").max(1);
            let measure = match e.get("measured_by") {
                Some(m) if n(m, "calibrated_by") > 0 => {
                    format!(", {} calibrated by {}", s(m, "source"), n(m, "calibrated_by"))
                }
                Some(m) if m.is_object() => format!(", {}", s(m, "source")),
                _ => String::new(),
            };
            format!(
                "request sent: {}{} tokens, {:.0}% of the {} window ({}), trigger {}{measure}",
                est(e),
                tokens,
                tokens as f64 * 100.0 / window as f64,
                window,
                s(e, "window_source"),
                n(e, "trigger_tokens")
            )
        }
        "response_received" => match e.get("usage") {
            Some(u) if !u.is_null() => format!(
                "response: {} (prompt {} / completion {} tokens)",
                s(e, "finish_reason"),
                n(u, "prompt_tokens"),
                n(u, "completion_tokens")
            ),
            _ => format!("response: {}", s(e, "finish_reason")),
        },
        "tool_called" => format!("→ {} ({})", s(e, "tool"), s(e, "call_id")),
        "tool_finished" => {
            let size = match (e.get("result_tokens").and_then(Value::as_u64), e.get("evidence_id")) {
                (Some(t), Some(id)) if id.is_string() => {
                    format!(", paged: {t} tokens shown of evidence {}", s(e, "evidence_id"))
                }
                (Some(t), _) => format!(", {t} tokens whole"),
                _ => String::new(),
            };
            format!(
                "← {} {}{size}",
                s(e, "tool"),
                if e.get("ok").and_then(Value::as_bool) == Some(true) { "ok" } else { "failed" }
            )
        }
        "delegated" => format!("delegated to {}: {}", s(e, "to_role"), one_line(s(e, "objective"), 90)),
        "delegation_returned" => format!("{} returned: {}", s(e, "from_role"), one_line(s(e, "summary"), 90)),
        "retry_scheduled" => format!(
            "retry {}/{} in {} ms ({})",
            n(e, "attempt"),
            n(e, "max_attempts"),
            n(e, "delay_ms"),
            s(e, "reason")
        ),
        "window_learned" => {
            format!("window learned: {} → {} ({})", n(e, "old_window"), n(e, "new_window"), s(e, "source"))
        }
        "compaction_started" => format!("compaction started at {} tokens", n(e, "tokens_before")),
        "compaction_finished" => {
            format!("compacted {} → {} tokens", n(e, "tokens_before"), n(e, "tokens_after"))
        }
        "compaction_failed" => format!("compaction failed: {}", s(e, "reason")),
        "finish_rejected" => format!("finish rejected: {}", s(e, "reason")),
        "task_finished" => format!("task finished: {}", one_line(s(e, "summary"), 120)),
        "task_failed" => format!("task failed: {}", s(e, "error")),
        "task_cancelled" => "task cancelled".to_string(),
        "task_interrupted" => "task interrupted (resumable)".to_string(),
        "task_resumed" => "task resumed".to_string(),
        "task_message" => format!("follow-up: {}", one_line(s(e, "text"), 100)),
        "thinking_cleared" => format!(
            "cleared {} old thinking blocks ({} tokens) after {} s idle",
            n(e, "blocks_removed"),
            n(e, "tokens_freed"),
            n(e, "idle_ms") / 1000
        ),
        other => other.to_string(),
    };
    format!("{:>4}  {:<8} {}", n(e, "seq"), s(e, "role"), what)
}
