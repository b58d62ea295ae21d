//! Looking inside a task: `context.get` (a role's context gauge — what its last request held, by
//! category, against its window) and `log.get` (the task's log records, numbered, in order).

use crate::record::Record;
use crate::role::Role;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `context.get`'s params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ContextParams {
    /// The task whose gauge to read.
    pub task_id: String,
    /// Default: the lead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
}

/// `log.get`'s params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LogParams {
    /// The task whose log to read.
    pub task_id: String,
    /// Only this role's records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// Records after this seq (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_seq: Option<u64>,
    /// At most this many records (default 10,000, at most 100,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
}

/// `context.get`'s answer: the gauge, or a note that the role has not been measured yet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ContextResult {
    /// The role's last measured request.
    Measured(Box<crate::gauge::Gauge>),
    /// The role has not been measured since the daemon started.
    Unmeasured(Unmeasured),
}

/// A role that has made no request since the daemon started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Unmeasured {
    /// The role asked about.
    pub role: Role,
    /// Always false.
    pub measured: bool,
    /// Why there is no gauge, in words.
    pub note: String,
}

/// One record of a task's log, with its number. Checkpoints show as `{type: "system", subtype, …}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LogEntry {
    /// The record's number in the task's log, from 1 (the log numbers records apart from events); give the
    /// last one seen as `log.get`'s `after_seq` to read on.
    pub seq: u64,
    /// The record itself; its fields sit beside `seq` on the wire.
    #[serde(flatten)]
    pub record: Record,
}

/// `log.get`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LogResult {
    /// The records, in log order, at most the `limit` asked for; fewer (or none) at the log's end.
    pub records: Vec<LogEntry>,
}
