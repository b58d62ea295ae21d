//! The HTTP API: the socket's methods as routes under [`API_PREFIX`], with the same params, the same
//! results and the same error codes — no second vocabulary.
//!
//! Each [`Route`] names the [`Method`] it calls. A route's params are gathered into one JSON object
//! — its path segments (`{task_id}`), its declared query parameters ([`Route::query`]) and, for a
//! route that takes one, the JSON object of its body — and read exactly as a socket line's params
//! are. The answer is the method's result type as JSON; an error is an [`ErrorBody`] with the
//! socket's [`ErrorCode`] and the HTTP status [`status_of`] gives it. `tasks/{task_id}/events` is
//! `task.subscribe` as Server-Sent Events: each `task.event` notification is an SSE message
//! `event: task.event` whose `id` is the event's `seq` and whose `data` is the event, and the stream
//! ends with `event: task.end` (data: [`TaskEnd`](crate::rpc::TaskEnd)); a `Last-Event-ID` header
//! (or `after_seq`) resumes after that seq with no gap and no repeat.
//!
//! Every request carries the daemon's token, as `Authorization: Bearer TOKEN` or as the
//! [`TOKEN_COOKIE`] a browser gets in exchange for `GET /?token=TOKEN` — all but the OpenAPI
//! document's ([`OPENAPI_PATH`]), which is the same for every daemon of a version. A refusal of the token is
//! HTTP 401 with -32600, the code of the socket's refusal of another user's connection.
//! [`crate::openapi`] describes all of it as an OpenAPI 3.1 document.

use crate::rpc::{ErrorCode, Method, RpcError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where the API's routes live; [`Route::path`] is relative to it.
pub const API_PREFIX: &str = "/api/v1";

/// The cookie that carries the token for a browser: `HttpOnly`, `SameSite=Strict`, path `/`.
pub const TOKEN_COOKIE: &str = "agentd_token";

/// The query parameter the dashboard's URL carries the token in, exchanged once for the cookie.
pub const TOKEN_QUERY: &str = "token";

/// The HTTP verb of a route: `GET` reads, `POST` acts (and takes a body where [`Route::body`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    /// Reads; never changes anything.
    Get,
    /// Submits, cancels, resumes, sends a follow-up, verifies.
    Post,
}

impl Verb {
    /// The verb as HTTP spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "GET",
            Verb::Post => "POST",
        }
    }
}

/// What a query parameter's text is read as before it joins the params: an integer parameter must
/// be digits (`?after_seq=12`), anything else is taken as a string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ParamKind {
    /// Taken as it is.
    String,
    /// A non-negative integer; other text is refused with -32602 naming the parameter.
    Integer,
    /// `true` or `false`; other text is refused with -32602 naming the parameter.
    Boolean,
}

/// A query parameter a route reads into its method's params (others are ignored, as unknown params
/// are on the socket).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QueryParam {
    /// The name in the query string and in the method's params.
    pub name: &'static str,
    /// How its text is read.
    pub kind: ParamKind,
}

const fn text(name: &'static str) -> QueryParam {
    QueryParam { name, kind: ParamKind::String }
}

const fn integer(name: &'static str) -> QueryParam {
    QueryParam { name, kind: ParamKind::Integer }
}

const fn boolean(name: &'static str) -> QueryParam {
    QueryParam { name, kind: ParamKind::Boolean }
}

/// One route of the API: a verb and a path that call one method of the socket protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Route {
    /// `GET` or `POST`.
    pub verb: Verb,
    /// The path below [`API_PREFIX`]; `{name}` segments are params of that name.
    pub path: &'static str,
    /// The socket method the route calls.
    pub method: Method,
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
        self.method == Method::TaskSubscribe
    }
}

/// Every route of the API. The dashboard uses nothing else.
pub const ROUTES: &[Route] = &[
    Route {
        verb: Verb::Get,
        path: "/tasks",
        method: Method::TaskList,
        query: &[],
        body: false,
        summary: "Every task",
    },
    Route {
        verb: Verb::Post,
        path: "/tasks",
        method: Method::TaskSubmit,
        query: &[],
        body: true,
        summary: "Submit a task",
    },
    Route {
        verb: Verb::Get,
        path: "/tasks/{task_id}",
        method: Method::TaskStatus,
        query: &[],
        body: false,
        summary: "A task, with each role's last measured request",
    },
    Route {
        verb: Verb::Post,
        path: "/tasks/{task_id}/cancel",
        method: Method::TaskCancel,
        query: &[],
        body: false,
        summary: "Stop a task",
    },
    Route {
        verb: Verb::Post,
        path: "/tasks/{task_id}/resume",
        method: Method::TaskResume,
        query: &[],
        body: false,
        summary: "Continue an interrupted or failed task from its log",
    },
    Route {
        verb: Verb::Post,
        path: "/tasks/{task_id}/message",
        method: Method::TaskMessage,
        query: &[],
        body: true,
        summary: "A follow-up request for a task that has stopped",
    },
    Route {
        verb: Verb::Post,
        path: "/tasks/{task_id}/compact",
        method: Method::TaskCompact,
        query: &[],
        body: true,
        summary: "Compact a role's history now (body {\"role\"?, \"focus\"?})",
    },
    Route {
        verb: Verb::Get,
        path: "/tasks/{task_id}/context/{role}",
        method: Method::ContextGet,
        query: &[],
        body: false,
        summary: "A role's context gauge",
    },
    Route {
        verb: Verb::Get,
        path: "/tasks/{task_id}/log",
        method: Method::LogGet,
        query: &[text("role"), integer("after_seq"), integer("limit")],
        body: false,
        summary: "A task's log records: messages, checkpoints, settings, receipts and events",
    },
    Route {
        verb: Verb::Get,
        path: "/tasks/{task_id}/events",
        method: Method::TaskSubscribe,
        query: &[integer("after_seq")],
        body: false,
        summary: "A task's events as Server-Sent Events, from after Last-Event-ID (or after_seq) to its end",
    },
    Route {
        verb: Verb::Get,
        path: "/evidence",
        method: Method::EvidenceList,
        query: &[text("task_id")],
        body: false,
        summary: "The evidence archive, or one task's part of it",
    },
    Route {
        verb: Verb::Post,
        path: "/evidence/verify",
        method: Method::EvidenceVerify,
        query: &[],
        body: false,
        summary: "Re-hash every blob and name each one missing or altered",
    },
    Route {
        verb: Verb::Get,
        path: "/evidence/{id}",
        method: Method::EvidenceGet,
        query: &[],
        body: false,
        summary: "One evidence item's metadata",
    },
    Route {
        verb: Verb::Get,
        path: "/evidence/{id}/read",
        method: Method::EvidenceRead,
        query: &[integer("offset"), integer("limit"), text("unit")],
        body: false,
        summary: "One page of an evidence item, in bytes or lines",
    },
    Route {
        verb: Verb::Get,
        path: "/memory",
        method: Method::MemoryList,
        query: &[text("workspace"), boolean("user"), boolean("deleted")],
        body: false,
        summary: "The memory notes: a workspace's, the user's, or all; deleted ones with deleted=true",
    },
    Route {
        verb: Verb::Post,
        path: "/memory/undo",
        method: Method::MemoryUndo,
        query: &[],
        body: true,
        summary: "Undo the latest change of a note (body {\"id\"}), or of any note",
    },
    Route {
        verb: Verb::Get,
        path: "/memory/{id}",
        method: Method::MemoryGet,
        query: &[],
        body: false,
        summary: "One memory note with every change made to it",
    },
    Route {
        verb: Verb::Post,
        path: "/memory/{id}/edit",
        method: Method::MemoryEdit,
        query: &[],
        body: true,
        summary: "Replace a note's text (body {\"text\"})",
    },
    Route {
        verb: Verb::Post,
        path: "/memory/{id}/delete",
        method: Method::MemoryDelete,
        query: &[],
        body: false,
        summary: "Delete a note (kept, so the deletion can be undone)",
    },
    Route {
        verb: Verb::Get,
        path: "/daemon",
        method: Method::DaemonStatus,
        query: &[],
        body: false,
        summary: "The daemon's version, uptime, jobs, storage and HTTP address",
    },
];

/// The path of the API's OpenAPI document ([`crate::openapi::openapi_document`]).
pub const OPENAPI_PATH: &str = "/api/v1/openapi.json";

/// The HTTP status of an error code: malformed or invalid input 400, an unknown task, evidence,
/// note, role or route 404, a request the task's state does not allow 409, the daemon's own failure 500. (A
/// missing or wrong token is 401 with [`ErrorCode::InvalidRequest`], decided before any method.)
pub fn status_of(code: ErrorCode) -> u16 {
    match code {
        ErrorCode::ParseError | ErrorCode::InvalidRequest | ErrorCode::InvalidParams => 400,
        ErrorCode::RefusedWorkspace => 403,
        ErrorCode::MethodNotFound
        | ErrorCode::BadWorkspace
        | ErrorCode::UnknownTask
        | ErrorCode::UnknownEvidence
        | ErrorCode::UnknownNote
        | ErrorCode::UnknownRole => 404,
        ErrorCode::NotAllowed => 409,
        ErrorCode::Internal => 500,
    }
}

/// An error answer of the HTTP API: `{"error": {"code": -32001, "message": "unknown task …"}}`, the
/// socket's error object, with the status [`status_of`] its code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorBody {
    /// The same object a socket error answer carries.
    pub error: RpcError,
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(ROUTES.iter().filter(|r| r.is_event_stream()).count() == 1);
    }

    #[test]
    fn client_errors_are_4xx_and_the_daemons_are_5xx() {
        assert_eq!(status_of(ErrorCode::UnknownTask), 404);
        assert_eq!(status_of(ErrorCode::InvalidParams), 400);
        assert_eq!(status_of(ErrorCode::NotAllowed), 409);
        assert_eq!(status_of(ErrorCode::Internal), 500);
        let body = ErrorBody { error: RpcError::new(ErrorCode::UnknownTask, "unknown task t") };
        let v = serde_json::to_value(&body).unwrap();
        assert_eq!(v, serde_json::json!({"error": {"code": -32001, "message": "unknown task t"}}));
    }
}
