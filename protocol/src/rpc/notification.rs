//! What the daemon sends unasked on a subscribed connection: each event as a `task.event`
//! [`Notification`], in order, and a last `task.end` ([`TaskEnd`]) naming the end the stream
//! stopped at — or, with `recorded: false`, an end the store could not take yet.

use crate::event::{EndKind, Event};
use crate::task::TaskState;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A notification the daemon sends on a subscribed connection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "method", content = "params")]
pub enum Notification {
    /// One event, in order, no gap, no repeat.
    #[serde(rename = "task.event")]
    TaskEvent(Box<Event>),
    /// The subscription is over: the task reached an end nothing follows.
    #[serde(rename = "task.end")]
    TaskEnd(TaskEnd),
}

/// `task.end`: which event ended the stream; with `recorded: false`, an end the store could not take.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TaskEnd {
    /// The task the stream followed.
    pub task_id: String,
    /// The terminal event's seq (unrecorded: the last event sent).
    pub seq: u64,
    /// Which end it was.
    pub kind: EndKind,
    /// With `recorded: false`: the task's real state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<TaskState>,
    /// Absent (true) unless the end could not be recorded.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub recorded: bool,
    /// With `recorded: false`: the task's error, and why its end could not be recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn task_end_leaves_recorded_off_the_wire_unless_false() {
        let end = TaskEnd {
            task_id: "t".into(),
            seq: 9,
            kind: EndKind::TaskFinished,
            state: None,
            recorded: true,
            error: None,
        };
        let n = serde_json::to_value(Notification::TaskEnd(end)).unwrap();
        assert_eq!(
            n,
            json!({"method": "task.end", "params": {"task_id": "t", "seq": 9, "kind": "task_finished"}})
        );
    }
}
