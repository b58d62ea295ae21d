//! Events: what happened to a task, persisted before it is published, numbered from 1 per task.
//! The wire shape is flat: `{seq, task_id, role, at, kind, ...fields}`.

use crate::role::Role;
use crate::tokens::{Measured, Tokens};
use crate::tool::ToolName;
use crate::window::WindowSource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Event {
    /// The event's number in its task, from 1, without gaps.
    pub seq: u64,
    pub task_id: String,
    /// The role it happened to (task-level events are the lead's).
    pub role: Role,
    /// RFC 3339, milliseconds, UTC.
    pub at: String,
    #[serde(flatten)]
    pub kind: EventKind,
}

/// Token usage reported by a provider for one response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EventKind {
    TaskStarted {
        objective: String,
    },
    RequestSent {
        tokens: Tokens,
        estimated: bool,
        window: Tokens,
        window_source: WindowSource,
        trigger_tokens: Tokens,
        /// Where a compaction at this window would land the request: with `trigger_tokens`, the two
        /// lines a chart of the role's requests draws. Absent in events logged before it was recorded.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        destination_tokens: Option<Tokens>,
        /// The measure: the counter's source and how many usage reports calibrated it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        measured_by: Option<Measured>,
    },
    ResponseReceived {
        finish_reason: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Usage>,
    },
    ToolCalled {
        tool: ToolName,
        call_id: String,
    },
    ToolFinished {
        tool: ToolName,
        call_id: String,
        ok: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        evidence_id: Option<String>,
        /// The result's size and the limit it was kept whole under (or paged above), by the measure
        /// named, when it was measured.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result_tokens: Option<Tokens>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        whole_limit: Option<Tokens>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        measured_by: Option<Measured>,
        /// The call never finished: the task stopped (a crash, a shutdown, a cancel) while it ran.
        /// Its effect on the workspace is unknown.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        interrupted: bool,
    },
    CompactionStarted {
        tokens_before: Tokens,
        trigger_tokens: Tokens,
        destination_tokens: Tokens,
        window: Tokens,
    },
    CompactionFinished {
        tokens_before: Tokens,
        tokens_after: Tokens,
        archive_id: String,
        batches: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        measured_by: Option<Measured>,
    },
    CompactionFailed {
        reason: String,
    },
    RetryScheduled {
        reason: String,
        attempt: u32,
        max_attempts: u32,
        delay_ms: u64,
    },
    WindowLearned {
        old_window: Tokens,
        new_window: Tokens,
        source: WindowSource,
    },
    ThinkingCleared {
        blocks_removed: u32,
        tokens_freed: Tokens,
        idle_ms: u64,
    },
    Delegated {
        to_role: Role,
        objective: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        receipts_id: Option<String>,
        /// The handoff's bound and the measure it was checked with.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        budget_tokens: Option<Tokens>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        measured_by: Option<Measured>,
    },
    DelegationReturned {
        from_role: Role,
        summary: String,
    },
    FinishRejected {
        reason: String,
    },
    TaskFinished {
        summary: String,
    },
    TaskFailed {
        error: String,
    },
    TaskCancelled {},
    TaskInterrupted {},
    /// An interrupted or failed task was resumed from its log.
    TaskResumed {},
    /// A follow-up request for a task that had stopped: the lead takes it as a new user message.
    TaskMessage {
        text: String,
    },
}

/// The tool calls in `events` that were called and never finished, in order: (role, tool, call id).
pub fn unfinished_calls<'e>(events: impl IntoIterator<Item = &'e Event>) -> Vec<(Role, ToolName, String)> {
    let mut open: Vec<(Role, ToolName, String)> = Vec::new();
    for e in events {
        match &e.kind {
            EventKind::ToolCalled { tool, call_id } => {
                open.push((e.role.clone(), tool.clone(), call_id.clone()))
            }
            EventKind::ToolFinished { call_id, .. } => open.retain(|(_, _, id)| id != call_id),
            _ => {}
        }
    }
    open
}

impl EventKind {
    /// A `tool_finished` for a call whose result was not sized (a delegation's return, or a call the
    /// task stopped on: `interrupted`, its effect unknown, never `ok`).
    pub fn tool_ended(tool: &ToolName, call_id: &str, ok: bool, interrupted: bool) -> EventKind {
        EventKind::ToolFinished {
            tool: tool.clone(),
            call_id: call_id.to_string(),
            ok: ok && !interrupted,
            evidence_id: None,
            result_tokens: None,
            whole_limit: None,
            measured_by: None,
            interrupted,
        }
    }

    /// The event that ends a task's stream (a subscriber stops after it).
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            EventKind::TaskFinished { .. }
                | EventKind::TaskFailed { .. }
                | EventKind::TaskCancelled {}
                | EventKind::TaskInterrupted {}
        )
    }

    pub fn name(&self) -> &'static str {
        match self {
            EventKind::TaskStarted { .. } => "task_started",
            EventKind::RequestSent { .. } => "request_sent",
            EventKind::ResponseReceived { .. } => "response_received",
            EventKind::ToolCalled { .. } => "tool_called",
            EventKind::ToolFinished { .. } => "tool_finished",
            EventKind::CompactionStarted { .. } => "compaction_started",
            EventKind::CompactionFinished { .. } => "compaction_finished",
            EventKind::CompactionFailed { .. } => "compaction_failed",
            EventKind::RetryScheduled { .. } => "retry_scheduled",
            EventKind::WindowLearned { .. } => "window_learned",
            EventKind::ThinkingCleared { .. } => "thinking_cleared",
            EventKind::Delegated { .. } => "delegated",
            EventKind::DelegationReturned { .. } => "delegation_returned",
            EventKind::FinishRejected { .. } => "finish_rejected",
            EventKind::TaskFinished { .. } => "task_finished",
            EventKind::TaskFailed { .. } => "task_failed",
            EventKind::TaskCancelled {} => "task_cancelled",
            EventKind::TaskInterrupted {} => "task_interrupted",
            EventKind::TaskResumed {} => "task_resumed",
            EventKind::TaskMessage { .. } => "task_message",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unfinished_calls_are_the_ones_without_an_end() {
        let ev = |seq: u64, role: &str, kind: EventKind| Event {
            seq,
            task_id: "t".into(),
            role: role.into(),
            at: String::new(),
            kind,
        };
        let called = |id: &str, tool: &str| EventKind::ToolCalled { tool: tool.into(), call_id: id.into() };
        let finished = |id: &str| EventKind::tool_ended(&"x".into(), id, true, false);
        let events = vec![
            ev(1, "lead", called("a", "delegate")),
            ev(2, "coder", called("b", "read_file")),
            ev(3, "coder", finished("b")),
            ev(4, "coder", called("c", "run_command")),
        ];
        assert_eq!(
            unfinished_calls(&events),
            vec![
                (Role::Lead, ToolName::Delegate, "a".to_string()),
                (Role::Coder, ToolName::RunCommand, "c".to_string())
            ]
        );
        // The interrupted flag is on the wire only when set.
        let v = serde_json::to_value(ev(5, "coder", finished("c"))).unwrap();
        assert!(v.get("interrupted").is_none(), "{v}");
    }

    #[test]
    fn wire_shape_is_flat() {
        let e = Event {
            seq: 3,
            task_id: "t".into(),
            role: "lead".into(),
            at: "2026-01-01T00:00:00.000Z".into(),
            kind: EventKind::ToolCalled { tool: "read_file".into(), call_id: "c1".into() },
        };
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["kind"], "tool_called");
        assert_eq!(v["tool"], "read_file");
        assert_eq!(v["seq"], 3);
        let back: Event = serde_json::from_value(v).unwrap();
        assert_eq!(back, e);
    }

    #[test]
    fn unit_like_events_round_trip() {
        let v = serde_json::json!({"seq":1,"task_id":"t","role":"lead","at":"x","kind":"task_cancelled"});
        let e: Event = serde_json::from_value(v).unwrap();
        assert!(e.kind.is_terminal());
        assert_eq!(e.kind.name(), "task_cancelled");
    }
}
