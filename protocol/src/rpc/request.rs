//! The request: which method a line calls and with what. [`Request`] is the typed request — one
//! variant per method, holding that method's params type, so a request that reads is one the daemon
//! can act on — and [`Method`] is the bare name, what a line names before its params are read (and
//! what the HTTP route table and error messages speak of). A method that takes no params takes
//! [`NoParams`]; every other params type lives beside its method's result, in the sibling modules.

use super::daemon::ClockParams;
use super::evidence::{EvidenceListParams, EvidenceReadParams, EvidenceRef};
use super::inspect::{ContextParams, LogParams};
use super::memory::{NoteEditParams, NoteRef, UndoParams};
use super::settings::{RoleParams, SettingParams};
use super::task::{
    CompactParams, EventsParams, MessageParams, ResumeParams, SubmitParams, SubscribeParams, TaskRef,
};
use crate::memory::NoteFilter;
// The result types, for the links in [`Request`]'s docs (which the schema carries as they are).
#[cfg(doc)]
use super::{
    daemon::{ClockResult, DaemonStatus},
    evidence::VerifyResult,
    inspect::{ContextResult, LogResult},
    memory::{NoteChanged, NoteDetail},
    notification::Notification,
    settings::{ProbeResult, SettingResult},
    task::{CompactResult, EventsResult, StateResult, Submitted, Subscribed, TaskStatus, TaskSummary},
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A request's method and params. On the wire: `{"jsonrpc": "2.0", "id": …, "method": …, "params": …}`;
/// absent or `null` params read as `{}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "method", content = "params")]
pub enum Request {
    /// Starts a task → [`Submitted`].
    #[serde(rename = "task.submit")]
    TaskSubmit(SubmitParams),
    /// Every task → `Vec<`[`TaskSummary`]`>`.
    #[serde(rename = "task.list")]
    TaskList(NoParams),
    /// One task, with each role's last measured request → [`TaskStatus`].
    #[serde(rename = "task.status")]
    TaskStatus(TaskRef),
    /// Stops a task → [`StateResult`].
    #[serde(rename = "task.cancel")]
    TaskCancel(TaskRef),
    /// Continues an interrupted, failed, waiting or paused task from its log, optionally with a new
    /// budget → [`StateResult`].
    #[serde(rename = "task.resume")]
    TaskResume(ResumeParams),
    /// A follow-up request for a task that has stopped → [`StateResult`].
    #[serde(rename = "task.message")]
    TaskMessage(MessageParams),
    /// Compacts a role's history now (a stopped task) or before its next request (a running one), with an
    /// optional focus for the summariser → [`CompactResult`].
    #[serde(rename = "task.compact")]
    TaskCompact(CompactParams),
    /// Follows a task's events → [`Subscribed`], then [`Notification`]s.
    #[serde(rename = "task.subscribe")]
    TaskSubscribe(SubscribeParams),
    /// A page of a task's events after a seq, and its state → [`EventsResult`]: for a client that
    /// polls instead of holding a subscription open.
    #[serde(rename = "task.events")]
    TaskEvents(EventsParams),
    /// A role's context gauge → [`ContextResult`].
    #[serde(rename = "context.get")]
    ContextGet(ContextParams),
    /// A task's log records → [`LogResult`].
    #[serde(rename = "log.get")]
    LogGet(LogParams),
    /// The evidence archive, or one task's part of it → `Vec<`[`EvidenceMeta`](crate::evidence::EvidenceMeta)`>`.
    #[serde(rename = "evidence.list")]
    EvidenceList(EvidenceListParams),
    /// One evidence item's metadata → [`EvidenceMeta`](crate::evidence::EvidenceMeta).
    #[serde(rename = "evidence.get")]
    EvidenceGet(EvidenceRef),
    /// One page of an evidence item → [`Page`](crate::evidence::Page).
    #[serde(rename = "evidence.read")]
    EvidenceRead(EvidenceReadParams),
    /// Re-hashes every blob → [`VerifyResult`].
    #[serde(rename = "evidence.verify")]
    EvidenceVerify(NoParams),
    /// The memory notes the filter shows → `Vec<`[`Note`](crate::memory::Note)`>`.
    #[serde(rename = "memory.list")]
    MemoryList(NoteFilter),
    /// One memory note with its changes → [`NoteDetail`].
    #[serde(rename = "memory.get")]
    MemoryGet(NoteRef),
    /// Replaces a note's text → [`NoteChanged`].
    #[serde(rename = "memory.edit")]
    MemoryEdit(NoteEditParams),
    /// Deletes a note (kept, so the deletion can be undone) → [`NoteChanged`].
    #[serde(rename = "memory.delete")]
    MemoryDelete(NoteRef),
    /// Undoes the latest change of a note, or of any note → [`NoteChanged`].
    #[serde(rename = "memory.undo")]
    MemoryUndo(UndoParams),
    /// A role's setting → [`SettingResult`].
    #[serde(rename = "settings.get")]
    SettingsGet(SettingParams),
    /// Sets a role's setting, from its next turn → [`SettingResult`].
    #[serde(rename = "settings.set")]
    SettingsSet(SettingParams),
    /// Asks a role's server for its window again → [`ProbeResult`].
    #[serde(rename = "models.probe")]
    ModelsProbe(RoleParams),
    /// The daemon's own state → [`DaemonStatus`].
    #[serde(rename = "daemon.status")]
    DaemonStatus(NoParams),
    /// Moves a manual clock forward (tests) → [`ClockResult`].
    #[serde(rename = "clock.advance")]
    ClockAdvance(ClockParams),
}

/// The methods, by name: what a request line names before its params are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum Method {
    /// `task.submit`: starts a task.
    #[serde(rename = "task.submit")]
    TaskSubmit,
    /// `task.list`: every task, a summary line each.
    #[serde(rename = "task.list")]
    TaskList,
    /// `task.status`: one task, with each role's last measured request.
    #[serde(rename = "task.status")]
    TaskStatus,
    /// `task.cancel`: stops a task.
    #[serde(rename = "task.cancel")]
    TaskCancel,
    /// `task.resume`: continues an interrupted or failed task.
    #[serde(rename = "task.resume")]
    TaskResume,
    /// `task.message`: a follow-up request for a stopped task.
    #[serde(rename = "task.message")]
    TaskMessage,
    /// `task.compact`: compacts a role's history on request.
    #[serde(rename = "task.compact")]
    TaskCompact,
    /// `task.subscribe`: follows a task's events.
    #[serde(rename = "task.subscribe")]
    TaskSubscribe,
    /// `task.events`: a page of events and the task's state.
    #[serde(rename = "task.events")]
    TaskEvents,
    /// `context.get`: a role's context gauge.
    #[serde(rename = "context.get")]
    ContextGet,
    /// `log.get`: a task's log records.
    #[serde(rename = "log.get")]
    LogGet,
    /// `evidence.list`: the evidence archive's items.
    #[serde(rename = "evidence.list")]
    EvidenceList,
    /// `evidence.get`: one evidence item's metadata.
    #[serde(rename = "evidence.get")]
    EvidenceGet,
    /// `evidence.read`: a page of one evidence item.
    #[serde(rename = "evidence.read")]
    EvidenceRead,
    /// `evidence.verify`: re-hashes every blob.
    #[serde(rename = "evidence.verify")]
    EvidenceVerify,
    /// `memory.list`: the memory notes.
    #[serde(rename = "memory.list")]
    MemoryList,
    /// `memory.get`: one note with its changes.
    #[serde(rename = "memory.get")]
    MemoryGet,
    /// `memory.edit`: replaces a note's text.
    #[serde(rename = "memory.edit")]
    MemoryEdit,
    /// `memory.delete`: deletes a note.
    #[serde(rename = "memory.delete")]
    MemoryDelete,
    /// `memory.undo`: undoes the latest change.
    #[serde(rename = "memory.undo")]
    MemoryUndo,
    /// `settings.get`: a role's setting.
    #[serde(rename = "settings.get")]
    SettingsGet,
    /// `settings.set`: changes a role's setting.
    #[serde(rename = "settings.set")]
    SettingsSet,
    /// `models.probe`: asks a role's server for its window again.
    #[serde(rename = "models.probe")]
    ModelsProbe,
    /// `daemon.status`: the daemon's own state.
    #[serde(rename = "daemon.status")]
    DaemonStatus,
    /// `clock.advance`: moves a manual clock forward (tests).
    #[serde(rename = "clock.advance")]
    ClockAdvance,
}

impl Method {
    /// The method a name on the wire means, if any.
    pub fn parse(name: &str) -> Option<Method> {
        serde_json::from_value(serde_json::Value::String(name.to_string())).ok()
    }

    /// The method's name on the wire.
    pub fn name(self) -> String {
        match serde_json::to_value(self) {
            Ok(serde_json::Value::String(name)) => name,
            _ => String::new(),
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl Request {
    /// The method this request calls.
    pub fn method(&self) -> Method {
        match self {
            Request::TaskSubmit(_) => Method::TaskSubmit,
            Request::TaskList(_) => Method::TaskList,
            Request::TaskStatus(_) => Method::TaskStatus,
            Request::TaskCancel(_) => Method::TaskCancel,
            Request::TaskResume(_) => Method::TaskResume,
            Request::TaskMessage(_) => Method::TaskMessage,
            Request::TaskCompact(_) => Method::TaskCompact,
            Request::TaskSubscribe(_) => Method::TaskSubscribe,
            Request::TaskEvents(_) => Method::TaskEvents,
            Request::ContextGet(_) => Method::ContextGet,
            Request::LogGet(_) => Method::LogGet,
            Request::EvidenceList(_) => Method::EvidenceList,
            Request::EvidenceGet(_) => Method::EvidenceGet,
            Request::EvidenceRead(_) => Method::EvidenceRead,
            Request::EvidenceVerify(_) => Method::EvidenceVerify,
            Request::MemoryList(_) => Method::MemoryList,
            Request::MemoryGet(_) => Method::MemoryGet,
            Request::MemoryEdit(_) => Method::MemoryEdit,
            Request::MemoryDelete(_) => Method::MemoryDelete,
            Request::MemoryUndo(_) => Method::MemoryUndo,
            Request::SettingsGet(_) => Method::SettingsGet,
            Request::SettingsSet(_) => Method::SettingsSet,
            Request::ModelsProbe(_) => Method::ModelsProbe,
            Request::DaemonStatus(_) => Method::DaemonStatus,
            Request::ClockAdvance(_) => Method::ClockAdvance,
        }
    }

    /// The request as a JSON-RPC `(method, params)` pair, as a client sends it.
    pub fn to_wire(&self) -> (String, serde_json::Value) {
        let params = match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(mut o)) => o.remove("params").unwrap_or(serde_json::Value::Null),
            _ => serde_json::Value::Null,
        };
        (self.method().name(), params)
    }
}

/// Params of a method that takes none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NoParams {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::role::Role;
    use serde_json::json;

    fn read(method: &str, params: serde_json::Value) -> Result<Request, serde_json::Error> {
        serde_json::from_value(json!({"method": method, "params": params}))
    }

    #[test]
    fn requests_read_from_the_wire_and_back() {
        let r = read("task.submit", json!({"objective": "x", "workspace": "/w"})).unwrap();
        assert_eq!(r.method(), Method::TaskSubmit);
        assert_eq!(r.to_wire(), ("task.submit".to_string(), json!({"objective": "x", "workspace": "/w"})));
        let r = read("context.get", json!({"task_id": "t", "role": "reviewer"})).unwrap();
        assert_eq!(
            r,
            Request::ContextGet(ContextParams {
                task_id: "t".into(),
                role: Some(Role::specialist("reviewer"))
            })
        );
        assert!(read("task.status", json!({})).is_err());
        assert!(read("task.status", json!({"task_id": 7})).is_err());
    }

    #[test]
    fn every_method_has_a_name_that_parses_back() {
        for m in [Method::TaskSubmit, Method::LogGet, Method::ClockAdvance, Method::EvidenceVerify] {
            assert_eq!(Method::parse(&m.name()), Some(m));
        }
        assert_eq!(Method::parse("task.explode"), None);
    }
}
