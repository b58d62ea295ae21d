//! Events and gauges as lines a person reads (`watch`, `submit --wait`, `context`, the demo).

use agentd_protocol::text::truncate_chars;
use agentd_protocol::{Event, EventKind};

/// `text` as one line of at most `max` characters: each run of whitespace (newlines too) becomes one
/// space, then a longer line is cut by [`truncate_chars`] — the ellipsis counts toward `max`, and for
/// `max == 0` the line is empty.
pub fn one_line(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    truncate_chars(&flat, max)
}

/// A cost in USD, to a precision that shows a single cheap request (`$0.0042`, `$1.27`).
pub fn usd(cost: f64) -> String {
    if cost >= 1.0 {
        format!("${cost:.2}")
    } else {
        format!("${cost:.4}")
    }
}

/// `~` before an estimated count.
pub fn estimate_mark(estimated: bool) -> &'static str {
    if estimated {
        "~"
    } else {
        ""
    }
}

/// A budget in words: `50000 tokens`, `$2.00`, `50000 tokens, $2.00`.
pub fn budget_text(b: &agentd_protocol::Budget) -> String {
    let mut parts = Vec::new();
    if let Some(t) = b.tokens {
        parts.push(format!("{t} tokens"));
    }
    if let Some(c) = b.cost {
        parts.push(usd(c));
    }
    if parts.is_empty() {
        "none".to_string()
    } else {
        parts.join(", ")
    }
}

/// An amount in words: `48210 tokens` or `48210 tokens, $1.93`.
pub fn amount_text(a: &agentd_protocol::Amount) -> String {
    match a.cost {
        Some(c) => format!("{} tokens, {}", a.tokens, usd(c)),
        None => format!("{} tokens", a.tokens),
    }
}

/// Paths not held and why, as part of a line: the first five, then how many more.
fn not_held_text(not_held: &[agentd_protocol::NotHeld]) -> String {
    agentd_protocol::NotHeld::listed(not_held, 5)
}

/// One event as a line: `seq  role  what happened`.
pub fn event_line(e: &Event) -> String {
    use EventKind as K;
    let what = match &e.kind {
        K::TaskStarted { objective } => format!("task started: {}", one_line(objective, 100)),
        K::RequestSent { tokens, estimated, window, window_source, trigger_tokens, measured_by, .. } => {
            let measure = match measured_by {
                Some(m) if m.calibrated_by > 0 => {
                    format!(", {} calibrated by {}", m.source.as_str(), m.calibrated_by)
                }
                Some(m) => format!(", {}", m.source.as_str()),
                None => String::new(),
            };
            format!(
                "request sent: {}{} tokens, {:.0}% of the {} window ({}), trigger {}{measure}",
                estimate_mark(*estimated),
                tokens,
                tokens.0 as f64 * 100.0 / window.0.max(1) as f64,
                window,
                window_source.as_str(),
                trigger_tokens
            )
        }
        K::ResponseReceived { finish_reason, usage, cost_usd, .. } => {
            let usage = match usage {
                Some(u) => {
                    let cache = match (u.cache_read_tokens, u.cache_write_tokens) {
                        (0, 0) => String::new(),
                        (read, 0) => format!(", {read} from the cache"),
                        (read, write) => format!(", {read} from the cache, {write} written to it"),
                    };
                    format!(" (prompt {}{cache} / completion {} tokens)", u.prompt_tokens, u.completion_tokens)
                }
                None => String::new(),
            };
            let cost = cost_usd.map(|c| format!(", {}", usd(c))).unwrap_or_default();
            format!("response: {finish_reason}{usage}{cost}")
        }
        K::UsageRefused { reasons, counted, summary, .. } => {
            let of = if *summary { "a summary request's" } else { "the answer's" };
            format!(
                "{of} usage report refused: {}; counted instead: prompt {} / completion {} tokens",
                one_line(&reasons.join("; "), 300),
                counted.prompt_tokens,
                counted.completion_tokens
            )
        }
        K::ToolCalled { tool, call_id, .. } => format!("→ {tool} ({call_id})"),
        K::FilesChanged { call_seq, change, working_copy, interrupted, tool, .. } => {
            let mut files: Vec<String> =
                change.files.iter().take(4).map(|f| format!("{} {}", f.change(), f.path)).collect();
            if change.files.len() > 4 {
                files.push(format!("{} more", change.files.len() - 4));
            }
            let place = if working_copy.is_some() { " in its working copy" } else { "" };
            let cut = if *interrupted { " (found after a stop)" } else { "" };
            let by = if *tool == agentd_protocol::ToolName::Delegate { "merge of call" } else { "call" };
            format!(
                "files changed{place} by {by} {call_seq}{cut}: {} (+{} -{}) — undo: agentd revert TASK --call {call_seq}",
                files.join(", "),
                change.lines_added,
                change.lines_removed
            )
        }
        K::Reverted { to_seq, call_seq, forced, not_restored, change } => {
            let what = match (to_seq, call_seq) {
                (Some(to), _) => format!("every change after {to}"),
                (_, Some(call)) => format!("call {call}"),
                _ => "changes".to_string(),
            };
            let forced = if forced.is_empty() { String::new() } else { format!(", overwriting {}", forced.join(", ")) };
            let not = if not_restored.is_empty() {
                String::new()
            } else {
                format!("; NOT put back: {}", not_held_text(not_restored))
            };
            format!("reverted {what}: {} file(s) put back{forced}{not}", change.files.len())
        }
        K::MergeStarted { call_id, call_seq, .. } => {
            format!("merging the working copy of call {call_seq} ({call_id}) into the workspace")
        }
        K::LinkedFiles { files } => format!("workspace files with other hard links: {}", not_held_text(files)),
        K::CacheLearned { server, model, read_factor, min_tokens, source } => format!(
            "prompt cache learned for {model} at {server}: a cached token costs {read_factor:.2} ({source}), prefixes of {min_tokens}+ tokens; compactions are priced by it"
        ),
        K::CacheForgotten { server, model } => {
            format!("prompt cache of {model} at {server} no longer seen: compactions go back to the unpriced rule")
        }
        K::CheckpointFailed { call_id, error } => {
            format!("checkpoint failed ({call_id}): {}; this change is not recorded", one_line(error, 100))
        }
        K::ToolFinished { tool, ok, evidence_id, result_tokens, .. } => {
            let size = match (result_tokens, evidence_id) {
                (Some(t), Some(id)) => format!(", paged: {t} tokens shown of evidence {id}"),
                (Some(t), None) => format!(", {t} tokens whole"),
                _ => String::new(),
            };
            format!("← {tool} {}{size}", if *ok { "ok" } else { "failed" })
        }
        K::Delegated { to_role, objective, working_copy, not_copied, .. } => {
            let copy = if working_copy.is_some() { " (in a working copy)" } else { "" };
            let not = if not_copied.is_empty() {
                String::new()
            } else {
                format!(" [not in its copy: {}]", not_held_text(not_copied))
            };
            format!("delegated to {to_role}{copy}: {}{not}", one_line(objective, 90))
        }
        K::AgentStalled { why, .. } => format!("stalled: it {}; told once, stopped if it keeps on", one_line(why, 100)),
        K::MemorySaved { id, note, scope } => {
            format!("remembered {id} ({scope}): {} — undo: agentd memory undo {id}", one_line(note, 90))
        }
        K::DelegationReturned {
            from_role,
            summary,
            failed,
            patch_evidence_id,
            files_changed,
            lines_added,
            lines_removed,
            conflicts,
            not_carried,
            ..
        } => {
            let verb = if *failed { "failed" } else { "returned" };
            let not = if not_carried.is_empty() {
                String::new()
            } else {
                format!(" [not carried back: {}]", not_held_text(not_carried))
            };
            let patch = match patch_evidence_id {
                Some(id) => format!(
                    " [patch {id}: {files_changed} file(s), +{lines_added} -{lines_removed}{}]",
                    match conflicts.len() {
                        0 => String::from(", merged"),
                        n => format!(
                            ", {n} conflict(s): {}",
                            conflicts.iter().map(|c| c.path.as_str()).collect::<Vec<_>>().join(", ")
                        ),
                    }
                ),
                None => String::new(),
            };
            format!("{from_role} {verb}: {}{patch}{not}", one_line(summary, 90))
        }
        K::RetryScheduled { reason, attempt, max_attempts, delay_ms } => {
            format!("retry {attempt}/{max_attempts} in {delay_ms} ms ({reason})")
        }
        K::UsageLimitWait { resume_at, source, reason, capped, .. } => {
            let capped = if *capped { ", which asked for longer than the 30-day ceiling" } else { "" };
            format!(
                "usage limit ({reason}): waiting until {resume_at} ({source}{capped}); `agentd resume` goes on now"
            )
        }
        K::BudgetReached { scope, budget, spent, in_flight, request, resume_at } => {
            let after = match (scope, resume_at) {
                (agentd_protocol::BudgetScope::Day, Some(at)) => format!("; goes on when the day turns, {at}"),
                _ => "; raise it with `agentd resume TASK --budget-tokens N` or `--budget-cost USD`".to_string(),
            };
            let flying =
                if in_flight.is_nothing() { String::new() } else { format!(" (+{} in flight)", amount_text(in_flight)) };
            format!(
                "PAUSED: the {} budget ({}) is reached: spent {}{flying}, the next request {}{after}",
                scope.as_str(),
                budget_text(budget),
                amount_text(spent),
                amount_text(request)
            )
        }
        K::WindowLearned { old_window, new_window, source } => {
            format!("window learned: {old_window} → {new_window} ({})", source.as_str())
        }
        K::CompactionStarted { tokens_before, trigger_tokens, destination_tokens, window } => format!(
            "compaction started at {tokens_before} tokens (trigger {trigger_tokens} of the {window} window), \
             aiming at {destination_tokens}"
        ),
        K::CompactionFinished {
            tokens_before, tokens_after, archive_id, batches, cost_usd, next_trigger_tokens, ..
        } => format!(
            "compacted {tokens_before} → {tokens_after} tokens ({batches} summary {}{}); what left is evidence \
             {archive_id}{}",
            if *batches == 1 { "batch" } else { "batches" },
            cost_usd.map(|c| format!(", {}", usd(c))).unwrap_or_default(),
            next_trigger_tokens.map(|t| format!("; next compaction past {t} tokens (priced by the cache)")).unwrap_or_default()
        ),
        K::CompactionFailed { reason } => format!("compaction failed: {reason}"),
        K::CompactionRefused { reason } => format!("compaction refused, nothing written: {reason}"),
        K::McpServerStarted { server, tools } => format!("MCP server {server} started: {tools} tools"),
        K::McpServerFailed { server, error, will_retry_in_ms } => {
            let retry = match will_retry_in_ms {
                Some(ms) => format!(" (tried again at its next use after {:.0} s)", *ms as f64 / 1000.0),
                None => String::new(),
            };
            format!("MCP server {server} FAILED: {}{retry}", one_line(error, 300))
        }
        K::FinishRejected { reason } => format!("finish rejected: {reason}"),
        K::PermissionAsked { call_id, tool } => {
            format!("{} {call_id} waits for the client's approval", tool.as_str())
        }
        K::PermissionAnswered { call_id, allowed: true, .. } => format!("{call_id} approved"),
        K::PermissionAnswered { call_id, reason, .. } => {
            format!("{call_id} refused: {}", reason.as_deref().unwrap_or("no reason given"))
        }
        K::TaskFinished { summary } => format!("task finished: {}", one_line(summary, 120)),
        K::TaskFailed { error } => format!("task failed: {error}"),
        K::TaskCancelled {} => "task cancelled".to_string(),
        K::TaskInterrupted {} => "task interrupted (resumable)".to_string(),
        K::TaskResumed { node: None, .. } => "task resumed".to_string(),
        K::TaskResumed { node: Some(node), after: None } => format!("task resumed on node {node}"),
        K::TaskResumed { node: Some(node), after: Some(why) } => format!("task resumed on node {node}: {why}"),
        K::TaskMessage { text } => format!("follow-up: {}", one_line(text, 100)),
        K::ThinkingCleared { blocks_removed, tokens_freed, idle_ms } => format!(
            "cleared {blocks_removed} old thinking blocks ({tokens_freed} tokens) after {} s idle",
            idle_ms / 1000
        ),
    };
    format!("{:>4}  {:<8} {}", e.seq, e.role.name(), what)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentd_protocol::{Measured, Role, Tokens, WindowSource};

    #[test]
    fn a_refused_usage_report_names_why_and_what_is_counted_instead() {
        let e = Event {
            seq: 9,
            task_id: "t".into(),
            role: Role::Coder,
            at: String::new(),
            kind: EventKind::UsageRefused {
                reported: agentd_protocol::RawUsage::default(),
                reasons: vec!["`prompt_tokens` is NaN, not a count of tokens".into()],
                sent_tokens: Tokens(1_712),
                counted: agentd_protocol::Usage::new(1_712, 40),
                summary: false,
            },
        };
        assert_eq!(
            event_line(&e),
            "   9  coder    the answer's usage report refused: `prompt_tokens` is NaN, not a count of \
             tokens; counted instead: prompt 1712 / completion 40 tokens"
        );
    }

    #[test]
    fn a_request_line_names_its_share_of_the_window_and_its_measure() {
        let e = Event {
            seq: 7,
            task_id: "t".into(),
            role: Role::Coder,
            at: String::new(),
            kind: EventKind::RequestSent {
                tokens: Tokens(4_000),
                estimated: true,
                window: Tokens(16_000),
                window_source: WindowSource::Declared,
                trigger_tokens: Tokens(12_800),
                destination_tokens: Some(Tokens(8_000)),
                measured_by: Some(Measured {
                    source: agentd_protocol::CountSource::Estimate,
                    calibrated_by: 3,
                }),
            },
        };
        assert_eq!(
            event_line(&e),
            "   7  coder    request sent: ~4000 tokens, 25% of the 16000 window (declared), trigger 12800, \
             estimate calibrated by 3"
        );
    }

    #[test]
    fn a_compaction_line_shows_its_figures_and_where_the_steps_went() {
        let at = |kind| Event { seq: 40, task_id: "t".into(), role: Role::Coder, at: String::new(), kind };
        let started = at(EventKind::CompactionStarted {
            tokens_before: Tokens(13_500),
            trigger_tokens: Tokens(13_107),
            destination_tokens: Tokens(8_192),
            window: Tokens(16_384),
        });
        assert_eq!(
            event_line(&started),
            "  40  coder    compaction started at 13500 tokens (trigger 13107 of the 16384 window), aiming \
             at 8192"
        );
        let finished = |batches| {
            at(EventKind::CompactionFinished {
                tokens_before: Tokens(13_500),
                tokens_after: Tokens(6_020),
                archive_id: "ev-1a2b".into(),
                batches,
                measured_by: None,
                summary_model: None,
                summary_usage: None,
                cost_usd: None,
                next_trigger_tokens: None,
            })
        };
        assert_eq!(
            event_line(&finished(1)),
            "  40  coder    compacted 13500 → 6020 tokens (1 summary batch); what left is evidence ev-1a2b"
        );
        assert!(event_line(&finished(3)).contains("(3 summary batches)"));
    }

    #[test]
    fn one_line_flattens_then_cuts_with_the_ellipsis_counted() {
        assert_eq!(one_line(" fix\n\tthe  bug ", 20), "fix the bug");
        assert_eq!(one_line("fix the bug", 11), "fix the bug");
        assert_eq!(one_line("fix the bug", 8), "fix the…");
        assert_eq!(one_line("héllo wörld", 4), "hél…");
    }
}
