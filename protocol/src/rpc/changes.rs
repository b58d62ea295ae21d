//! `task.diff` and `task.revert`: what a task changed in its workspace, and taking it back. Both read
//! the task's `files_changed` and `reverted` events (see [`crate::checkpoint`]).

use crate::checkpoint::{FileDelta, NotHeld};
use crate::role::Role;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `task.diff`'s params: which changes to show.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DiffParams {
    /// The task's id; an unknown one is refused with -32001.
    pub task_id: String,
    /// Only the changes recorded after event SEQ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<u64>,
    /// Only the changes of this agent (`coder`, `coder#2`), its working copy's included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// Only the change of one call: the `seq` of its `tool_called` (a delegation's: its merge).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<u64>,
    /// Leave the unified diff out: the files and their line counts only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stat: bool,
}

/// One file of a diff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DiffFile {
    /// The file as it changed: from its first state in the changes shown to its last.
    #[serde(flatten)]
    pub delta: FileDelta,
    /// `added`, `deleted`, `modified` or `mode`.
    pub change: String,
    /// Whether either side is binary: its lines are not counted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub binary: bool,
    /// Lines added.
    pub lines_added: u64,
    /// Lines removed.
    pub lines_removed: u64,
    /// The `seq`s of the calls (and reverts) that changed it, in order.
    pub seqs: Vec<u64>,
}

/// `task.diff`'s result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DiffResult {
    /// The task.
    pub task_id: String,
    /// The files, sorted by path.
    pub files: Vec<DiffFile>,
    /// Lines added over all files.
    pub lines_added: u64,
    /// Lines removed over all files.
    pub lines_removed: u64,
    /// The whole diff as git writes it (`git apply` reads it); empty with `stat`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub unified: String,
    /// How many recorded changes (calls, merges, reverts) the diff spans.
    pub changes: u64,
    /// The files of the diff a checkpoint names but does not hold — FIFOs, sockets, devices — and
    /// what each is: a revert can remove one the task made, never make one again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_held: Vec<NotHeld>,
}

/// `task.revert`'s params: exactly one of `to` and `call` (a `null` one is absent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(extend("oneOf" = [
    {"required": ["to"], "properties": {"to": {"type": "integer", "minimum": 0, "maximum": u64::MAX}}},
    {"required": ["call"], "properties": {"call": {"type": "integer", "minimum": 0, "maximum": u64::MAX}}}
]))]
pub struct RevertParams {
    /// The task's id; an unknown one is refused with -32001; a running one with -32003.
    pub task_id: String,
    /// Put every file the task changed after event SEQ back as it was then.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "whole_seq")]
    #[schemars(range(max = u64::MAX))]
    pub to: Option<u64>,
    /// Take back the change of one call: the `seq` of its `tool_called` (or of a `reverted`, to
    /// revert a revert). Refused when a later change touched the same files.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "whole_seq")]
    #[schemars(range(max = u64::MAX))]
    pub call: Option<u64>,
    /// Overwrite files the user changed since the task last did (refused otherwise, naming them).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub force: bool,
}

/// An event's seq as JSON Schema's `integer` reads one: `45878` or `45878.0`.
fn whole_seq<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    crate::budget::whole_number(d, "a seq (a whole number)")
}

/// `task.revert`'s result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RevertResult {
    /// The task.
    pub task_id: String,
    /// The `seq` of the `reverted` event that records it (0 when nothing was to be put back).
    pub seq: u64,
    /// The files put back, each from what it was to what it is again.
    pub files: Vec<FileDelta>,
    /// The files the user had changed that `force` overwrote.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub forced: Vec<String>,
    /// What the revert did not put back, and why: a special file (a FIFO, a socket, a device) a
    /// checkpoint names but cannot make again; the other hard links of a file put back (this name is
    /// restored, the others keep what the task wrote through them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_restored: Vec<NotHeld>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_revert_reads_a_seq_written_as_a_whole_float_and_null_as_absent() {
        let p: RevertParams =
            serde_json::from_value(json!({"task_id": "t", "to": 45878.0, "call": null})).unwrap();
        assert_eq!((p.to, p.call, p.force), (Some(45_878), None, false));
        for bad in [json!(1.5), json!(-1), json!("7")] {
            let e = serde_json::from_value::<RevertParams>(json!({"task_id": "t", "call": bad})).unwrap_err();
            assert!(e.to_string().contains("a seq"), "{e}");
        }
    }
}
