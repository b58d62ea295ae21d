//! Every method of the socket protocol, declared once: its name on the wire, its params type, its
//! result type, whether a subscription follows it, and its HTTP route if it has one. Everything
//! else is generated from the one table in this file —
//!
//! - [`Request`], the typed request: one variant per method holding its params, so a request that
//!   reads is one the daemon can act on;
//! - [`Method`], the bare name a line names before its params are read ([`Method::ALL`],
//!   [`Method::name`], [`Method::parse`]), and each method's [`Route`] ([`ROUTES`]);
//! - a marker type per method in [`method`], implementing [`RpcMethod`], which ties the params type
//!   to the result type: a client calls `call::<method::TaskStatus>(TaskRef { … })` and gets a
//!   [`TaskStatus`] back, nothing else;
//! - [`Handlers`], what a server implements — one [`Handle`] per method, each answering with that
//!   method's result type — and [`Request::dispatch`], which calls the right one;
//! - the schemas of each method's params and result, for the JSON Schema and the OpenAPI document.
//!
//! Adding a method is one line in the table below and one `Handle` implementation in the daemon;
//! the compiler asks for the handler, and `tests/schema.rs` checks that the schema, the OpenAPI
//! document and the route table name it.

use super::changes::{DiffParams, DiffResult, RevertParams, RevertResult};
use super::daemon::{ClockParams, ClockResult, DaemonStatus, ReloadResult};
use super::evidence::{EvidenceListParams, EvidenceReadParams, EvidenceRef, VerifyResult};
use super::inspect::{ContextParams, ContextResult, LogParams, LogResult};
use super::memory::{NoteChanged, NoteDetail, NoteEditParams, NoteRef, UndoParams};
use super::settings::{ProbeResult, RoleParams, SettingParams, SettingResult};
use super::task::{
    CompactParams, CompactResult, EventsParams, EventsResult, MessageParams, PermitParams, PermitResult,
    ResumeParams, StateResult, SubmitParams, Submitted, SubscribeParams, Subscribed, TaskRef, TaskStatus,
    TaskSummary,
};
use crate::evidence::{EvidenceMeta, Page};
use crate::memory::{Note, NoteFilter};
use crate::route::{boolean, integer, text, QueryParam, Verb, API_PREFIX};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::future::Future;

/// One method, as the types see it: a marker type in [`method`] per method.
pub trait RpcMethod {
    /// Its name.
    const METHOD: Method;
    /// What it takes.
    type Params: Serialize + DeserializeOwned + JsonSchema + Send + 'static;
    /// What it answers.
    type Result: Serialize + DeserializeOwned + JsonSchema + Send + 'static;
    /// The request that calls it with `params`.
    fn request(params: Self::Params) -> Request;
}

/// A server of the protocol: the error its handlers answer with.
pub trait Server: Sync {
    /// A handler's refusal; a result that cannot be written as JSON becomes one too.
    type Error: From<serde_json::Error> + Send;
}

/// The handler of method `M`: takes its params, answers its result type.
pub trait Handle<M: RpcMethod>: Server {
    /// Answers one call.
    fn handle(&self, params: M::Params) -> impl Future<Output = Result<M::Result, Self::Error>> + Send;
}

/// One HTTP route: a verb and a path that call one method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Route {
    /// The method the route calls.
    pub method: Method,
    /// `GET` or `POST`.
    pub verb: Verb,
    /// The path below [`API_PREFIX`]; `{name}` segments are params of that name.
    pub path: &'static str,
    /// The query parameters the route reads.
    pub query: &'static [QueryParam],
    /// Whether the route reads a JSON object body into the params (path segments win over it).
    pub body: bool,
    /// One line for the route's documentation.
    pub summary: &'static str,
}

impl Route {
    /// The names of the route's `{name}` path segments, in order.
    pub fn path_params(&self) -> impl Iterator<Item = &'static str> {
        self.path.split('/').filter_map(|seg| seg.strip_prefix('{')?.strip_suffix('}'))
    }

    /// The full path, with [`API_PREFIX`].
    pub fn full_path(&self) -> String {
        format!("{API_PREFIX}{}", self.path)
    }

    /// Whether the route answers with a stream of Server-Sent Events instead of one JSON value.
    pub fn is_event_stream(&self) -> bool {
        self.method.streams()
    }
}

/// Every route of the HTTP API, in the order the methods are declared. The dashboard uses nothing
/// else.
pub static ROUTES: std::sync::LazyLock<Vec<Route>> =
    std::sync::LazyLock::new(|| Method::ALL.iter().filter_map(|m| m.route()).collect());

macro_rules! methods {
    (@route $m:expr;) => { None };
    (@route $m:expr; $verb:ident $path:literal, query: [$($q:expr),*], body: $body:literal, $summary:literal) => {
        Some(Route {
            method: $m,
            verb: Verb::$verb,
            path: $path,
            query: {
                const QUERY: &[QueryParam] = &[$($q),*];
                QUERY
            },
            body: $body,
            summary: $summary,
        })
    };
    (@streams) => { false };
    (@streams stream) => { true };
    (
        $(
            $(#[doc = $doc:literal])*
            $variant:ident $name:literal ($params:ty) -> $result:ty $(, $stream:ident)?
                { $($route:tt)* }
        )*
    ) => {
        /// A request's method and params. On the wire: `{"jsonrpc": "2.0", "id": …, "method": …,
        /// "params": …}`; absent or `null` params read as `{}`.
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
        #[serde(tag = "method", content = "params")]
        pub enum Request {
            $(
                $(#[doc = $doc])*
                #[doc = ""]
                #[doc = concat!("Answers `", stringify!($result), "`.")]
                #[serde(rename = $name)]
                $variant($params),
            )*
        }

        /// The methods, by name: what a request line names before its params are read.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Method {
            $(
                #[doc = concat!("`", $name, "`:")]
                $(#[doc = $doc])*
                $variant,
            )*
        }

        /// A marker type per method, naming it for [`RpcMethod`]: `method::TaskStatus` is
        /// `task.status`, which takes a `TaskRef` and answers a `TaskStatus`.
        pub mod method {
            $(
                #[doc = concat!("`", $name, "`:")]
                $(#[doc = $doc])*
                #[derive(Debug, Clone, Copy)]
                pub struct $variant;
            )*
        }

        $(
            impl RpcMethod for method::$variant {
                const METHOD: Method = Method::$variant;
                type Params = $params;
                type Result = $result;
                fn request(params: $params) -> Request {
                    Request::$variant(params)
                }
            }
        )*

        /// A server that handles every method: implemented for any type with a [`Handle`] for
        /// each, so a method without a handler does not compile.
        pub trait Handlers: $(Handle<method::$variant> +)* Server {}

        impl<T: $(Handle<method::$variant> +)* Server> Handlers for T {}

        impl Method {
            /// Every method, in the order they are declared.
            pub const ALL: &'static [Method] = &[$(Method::$variant),*];

            /// The method's name on the wire.
            pub fn name(self) -> &'static str {
                match self {
                    $(Method::$variant => $name,)*
                }
            }

            /// The method a name on the wire means, if any.
            pub fn parse(name: &str) -> Option<Method> {
                match name {
                    $($name => Some(Method::$variant),)*
                    _ => None,
                }
            }

            /// Whether the connection follows the answer with notifications (a subscription).
            pub fn streams(self) -> bool {
                match self {
                    $(Method::$variant => methods!(@streams $($stream)?),)*
                }
            }

            /// The method's HTTP route, if it has one.
            pub fn route(self) -> Option<Route> {
                match self {
                    $(Method::$variant => methods!(@route Method::$variant; $($route)*),)*
                }
            }

            /// The schema of the method's params type.
            pub fn params_schema(self, gen: &mut SchemaGenerator) -> Schema {
                match self {
                    $(Method::$variant => gen.subschema_for::<$params>(),)*
                }
            }

            /// The schema of the method's result type.
            pub fn result_schema(self, gen: &mut SchemaGenerator) -> Schema {
                match self {
                    $(Method::$variant => gen.subschema_for::<$result>(),)*
                }
            }
        }

        impl Request {
            /// The method this request calls.
            pub fn method(&self) -> Method {
                match self {
                    $(Request::$variant(_) => Method::$variant,)*
                }
            }

            /// Answers the request with `server`'s handler of its method, the result as JSON.
            pub async fn dispatch<H: Handlers>(self, server: &H) -> Result<serde_json::Value, H::Error> {
                match self {
                    $(
                        Request::$variant(params) => {
                            let result = <H as Handle<method::$variant>>::handle(server, params).await?;
                            Ok(serde_json::to_value(result)?)
                        }
                    )*
                }
            }
        }
    };
}

methods! {
    /// Starts a task.
    TaskSubmit "task.submit" (SubmitParams) -> Submitted
        { Post "/tasks", query: [], body: true, "Submit a task" }
    /// Every task, a summary line each.
    TaskList "task.list" (NoParams) -> Vec<TaskSummary>
        { Get "/tasks", query: [], body: false, "Every task" }
    /// One task, with each role's last measured request.
    TaskStatus "task.status" (TaskRef) -> TaskStatus
        { Get "/tasks/{task_id}", query: [], body: false, "A task, with each role's last measured request" }
    /// Stops a task.
    TaskCancel "task.cancel" (TaskRef) -> StateResult
        { Post "/tasks/{task_id}/cancel", query: [], body: false, "Stop a task" }
    /// Continues an interrupted, failed, waiting or paused task from its log, optionally with a new
    /// budget.
    TaskResume "task.resume" (ResumeParams) -> StateResult
        { Post "/tasks/{task_id}/resume", query: [], body: false,
          "Continue an interrupted or failed task from its log" }
    /// A follow-up request for a task that has stopped.
    TaskMessage "task.message" (MessageParams) -> StateResult
        { Post "/tasks/{task_id}/message", query: [], body: true,
          "A follow-up request for a task that has stopped" }
    /// Answers a `permission_asked`: the call runs, or the model reads the refusal.
    TaskPermit "task.permit" (PermitParams) -> PermitResult {}
    /// Compacts a role's history now (a stopped task) or before its next request (a running one),
    /// with an optional focus for the summariser.
    TaskCompact "task.compact" (CompactParams) -> CompactResult
        { Post "/tasks/{task_id}/compact", query: [], body: true,
          "Compact a role's history now (body {\"role\"?, \"focus\"?})" }
    /// Follows a task's events: `task.event` notifications follow the answer, then `task.end`.
    /// What a task changed in its workspace, from its checkpoints: each file and a unified diff.
    TaskDiff "task.diff" (DiffParams) -> DiffResult
        { Get "/tasks/{task_id}/diff", query: [integer("since"), text("role"), integer("call"), boolean("stat")],
          body: false, "What a task changed in its workspace, from its checkpoints" }
    /// Puts the files a stopped task changed back as they were (after event `to`, or one call's).
    TaskRevert "task.revert" (RevertParams) -> RevertResult
        { Post "/tasks/{task_id}/revert", query: [], body: true,
          "Put back what a stopped task changed (body {\"to\"} or {\"call\"}, and {\"force\"})" }
    TaskSubscribe "task.subscribe" (SubscribeParams) -> Subscribed, stream
        { Get "/tasks/{task_id}/events", query: [integer("after_seq")], body: false,
          "A task's events as Server-Sent Events, from after Last-Event-ID (or after_seq) to its end" }
    /// A page of a task's events after a seq, and its state: for a client that polls instead of
    /// holding a subscription open.
    TaskEvents "task.events" (EventsParams) -> EventsResult {}
    /// A role's context gauge.
    ContextGet "context.get" (ContextParams) -> ContextResult
        { Get "/tasks/{task_id}/context/{role}", query: [], body: false, "A role's context gauge" }
    /// A task's log records.
    LogGet "log.get" (LogParams) -> LogResult
        { Get "/tasks/{task_id}/log", query: [text("role"), integer("after_seq"), integer("limit")],
          body: false, "A task's log records: messages, checkpoints, settings, receipts and events" }
    /// The evidence archive, or one task's part of it.
    EvidenceList "evidence.list" (EvidenceListParams) -> Vec<EvidenceMeta>
        { Get "/evidence", query: [text("task_id")], body: false,
          "The evidence archive, or one task's part of it" }
    /// One evidence item's metadata.
    EvidenceGet "evidence.get" (EvidenceRef) -> EvidenceMeta
        { Get "/evidence/{id}", query: [], body: false, "One evidence item's metadata" }
    /// One page of an evidence item.
    EvidenceRead "evidence.read" (EvidenceReadParams) -> Page
        { Get "/evidence/{id}/read", query: [integer("offset"), integer("limit"), text("unit")],
          body: false, "One page of an evidence item, in bytes or lines" }
    /// Re-hashes every blob.
    EvidenceVerify "evidence.verify" (NoParams) -> VerifyResult
        { Post "/evidence/verify", query: [], body: false,
          "Re-hash every blob and name each one missing or altered" }
    /// The memory notes the filter shows.
    MemoryList "memory.list" (NoteFilter) -> Vec<Note>
        { Get "/memory", query: [text("workspace"), boolean("user"), boolean("deleted")], body: false,
          "The memory notes: a workspace's, the user's, or all; deleted ones with deleted=true" }
    /// One memory note with its changes.
    MemoryGet "memory.get" (NoteRef) -> NoteDetail
        { Get "/memory/{id}", query: [], body: false, "One memory note with every change made to it" }
    /// Replaces a note's text.
    MemoryEdit "memory.edit" (NoteEditParams) -> NoteChanged
        { Post "/memory/{id}/edit", query: [], body: true, "Replace a note's text (body {\"text\"})" }
    /// Deletes a note (kept, so the deletion can be undone).
    MemoryDelete "memory.delete" (NoteRef) -> NoteChanged
        { Post "/memory/{id}/delete", query: [], body: false,
          "Delete a note (kept, so the deletion can be undone)" }
    /// Undoes the latest change of a note, or of any note.
    MemoryUndo "memory.undo" (UndoParams) -> NoteChanged
        { Post "/memory/undo", query: [], body: true,
          "Undo the latest change of a note (body {\"id\"}), or of any note" }
    /// A role's setting.
    SettingsGet "settings.get" (SettingParams) -> SettingResult {}
    /// Sets a role's setting, from its next turn.
    SettingsSet "settings.set" (SettingParams) -> SettingResult {}
    /// Asks a role's server for its window again.
    ModelsProbe "models.probe" (RoleParams) -> ProbeResult {}
    /// The daemon's own state.
    DaemonStatus "daemon.status" (NoParams) -> DaemonStatus
        { Get "/daemon", query: [], body: false,
          "The daemon's version, uptime, jobs, storage and HTTP address" }
    /// Reads `agentd.toml` again and applies it to later turns: what changed, or why nothing did.
    DaemonReload "daemon.reload" (NoParams) -> ReloadResult
        { Post "/daemon/reload", query: [], body: false,
          "Read agentd.toml again, validated whole, and apply it to later turns; says what changed" }
    /// Moves a manual clock forward (tests).
    ClockAdvance "clock.advance" (ClockParams) -> ClockResult {}
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Request {
    /// The request as a JSON-RPC `(method, params)` pair, as a client sends it.
    pub fn to_wire(&self) -> (&'static str, serde_json::Value) {
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
        assert_eq!(r.to_wire(), ("task.submit", json!({"objective": "x", "workspace": "/w"})));
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
    fn every_method_has_one_name_that_parses_back_and_reads_as_its_request() {
        let mut names = std::collections::BTreeSet::new();
        for &m in Method::ALL {
            assert_eq!(Method::parse(m.name()), Some(m));
            assert!(names.insert(m.name()), "{m} twice");
            // The serde name of the Request variant is the declared name.
            let schema = serde_json::to_value(schemars::schema_for!(Request)).unwrap();
            assert!(schema.to_string().contains(&format!("\"{}\"", m.name())), "{m}");
        }
        assert_eq!(names.len(), 29);
        assert_eq!(Method::parse("task.explode"), None);
        let r = <method::TaskStatus as RpcMethod>::request(TaskRef { task_id: "t".into() });
        assert_eq!(r.method(), Method::TaskStatus);
        assert_eq!(r.to_wire(), ("task.status", json!({"task_id": "t"})));
    }

    #[test]
    fn routes_are_unique_and_name_their_path_params() {
        for (i, a) in ROUTES.iter().enumerate() {
            for b in &ROUTES[i + 1..] {
                assert!((a.verb, a.path) != (b.verb, b.path), "{a:?} twice");
            }
        }
        let read = ROUTES.iter().find(|r| r.method == Method::ContextGet).unwrap();
        assert_eq!(read.path_params().collect::<Vec<_>>(), ["task_id", "role"]);
        assert_eq!(read.full_path(), "/api/v1/tasks/{task_id}/context/{role}");
        assert_eq!(ROUTES.iter().filter(|r| r.is_event_stream()).count(), 1);
        assert_eq!(Method::ALL.iter().filter(|m| m.streams()).collect::<Vec<_>>(), [&Method::TaskSubscribe]);
    }
}
