//! The HTTP API: the socket's methods as routes under [`API_PREFIX`](crate::route::API_PREFIX), with the same params, the same
//! results and the same error codes — no second vocabulary.
//!
//! Each [`Route`](crate::rpc::Route) names the method it calls and is declared with it (the
//! table in `crate::rpc`, listed as [`ROUTES`](crate::rpc::ROUTES)). A route's params are
//! gathered into one JSON object — its path segments (`{task_id}`), its declared query parameters
//! ([`Route::query`](crate::rpc::Route::query)) and, for a
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

use crate::rpc::{ErrorCode, RpcError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The cookie that carries the token for a browser: `HttpOnly`, `SameSite=Strict`, path `/`.
pub const TOKEN_COOKIE: &str = "agentd_token";

/// The query parameter the dashboard's URL carries the token in, exchanged once for the cookie.
pub const TOKEN_QUERY: &str = "token";

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
        ErrorCode::InvalidConfig => 422,
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
