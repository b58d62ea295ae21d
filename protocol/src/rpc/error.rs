//! Error answers. JSON-RPC's own codes (-32700 … -32603) and agentd's application codes (-32001 …)
//! are one enum, [`ErrorCode`], written on the wire as its number; an error answer is an
//! [`RpcError`]: the code and a message in words. Only the socket layer picks a code — the rooms
//! behind it return their own error enums, which it maps to these.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The error codes of the socket (JSON-RPC's own and agentd's application errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(into = "i64", try_from = "i64")]
#[schemars(with = "i64")]
pub enum ErrorCode {
    /// -32700: the line is not JSON.
    ParseError,
    /// -32600: not a JSON-RPC 2.0 request object, or a line over the limit.
    InvalidRequest,
    /// -32601: no such method.
    MethodNotFound,
    /// -32602: params missing, of the wrong type, or out of range.
    InvalidParams,
    /// -32603: the daemon failed (storage, an actor gone).
    Internal,
    /// -32001: no task with that id.
    UnknownTask,
    /// -32002: no evidence with that id.
    UnknownEvidence,
    /// -32003: not allowed in the task's state (or the daemon's).
    NotAllowed,
    /// -32004: no directory at the workspace's path (missing, or not a directory).
    BadWorkspace,
    /// -32005: no memory note with that id.
    UnknownNote,
    /// -32006: no role of that name in the team (the roles are the configuration's, so a schema
    /// cannot list them).
    UnknownRole,
    /// -32007: the workspace is a directory agentd will not work in (`/`, a system directory, its
    /// own home): refused, whoever asks.
    RefusedWorkspace,
    /// -32008: `agentd.toml` as it is on disk does not load (`daemon.reload`): the message names the
    /// file, the key and why; the daemon goes on with what it runs.
    InvalidConfig,
}

impl ErrorCode {
    /// Every code, in the order of their numbers' meaning (JSON-RPC's, then agentd's).
    pub const ALL: [ErrorCode; 13] = [
        ErrorCode::ParseError,
        ErrorCode::InvalidRequest,
        ErrorCode::MethodNotFound,
        ErrorCode::InvalidParams,
        ErrorCode::Internal,
        ErrorCode::UnknownTask,
        ErrorCode::UnknownEvidence,
        ErrorCode::NotAllowed,
        ErrorCode::BadWorkspace,
        ErrorCode::UnknownNote,
        ErrorCode::UnknownRole,
        ErrorCode::RefusedWorkspace,
        ErrorCode::InvalidConfig,
    ];

    /// What the code means, in a few words (the HTTP API's documentation of its statuses).
    pub fn what(self) -> &'static str {
        match self {
            ErrorCode::ParseError => "not JSON",
            ErrorCode::InvalidRequest => "not a request",
            ErrorCode::MethodNotFound => "no such method or route",
            ErrorCode::InvalidParams => "a parameter missing, of the wrong type or out of range, named",
            ErrorCode::Internal => "the daemon failed",
            ErrorCode::UnknownTask => "unknown task",
            ErrorCode::UnknownEvidence => "unknown evidence",
            ErrorCode::NotAllowed => "not allowed in the task's state (or the daemon's), with why",
            ErrorCode::BadWorkspace => "no directory at the workspace's path",
            ErrorCode::UnknownNote => "unknown memory note",
            ErrorCode::UnknownRole => {
                "no such role in the team (the roles are the configuration's, so no schema lists them)"
            }
            ErrorCode::RefusedWorkspace => {
                "a workspace agentd will not work in (`/`, a system directory, its home)"
            }
            ErrorCode::InvalidConfig => "agentd.toml does not load (file, key and why); nothing changed",
        }
    }

    /// The number on the wire.
    pub fn code(self) -> i64 {
        match self {
            ErrorCode::ParseError => -32700,
            ErrorCode::InvalidRequest => -32600,
            ErrorCode::MethodNotFound => -32601,
            ErrorCode::InvalidParams => -32602,
            ErrorCode::Internal => -32603,
            ErrorCode::UnknownTask => -32001,
            ErrorCode::UnknownEvidence => -32002,
            ErrorCode::NotAllowed => -32003,
            ErrorCode::BadWorkspace => -32004,
            ErrorCode::UnknownNote => -32005,
            ErrorCode::UnknownRole => -32006,
            ErrorCode::RefusedWorkspace => -32007,
            ErrorCode::InvalidConfig => -32008,
        }
    }

    /// The code a number means, if any.
    pub fn from_code(code: i64) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| c.code() == code)
    }
}

impl From<ErrorCode> for i64 {
    fn from(c: ErrorCode) -> i64 {
        c.code()
    }
}

impl TryFrom<i64> for ErrorCode {
    type Error = String;
    fn try_from(code: i64) -> Result<ErrorCode, String> {
        ErrorCode::from_code(code).ok_or_else(|| format!("unknown error code {code}"))
    }
}

/// An error answer: `{"code", "message"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema, thiserror::Error)]
#[error("{message} ({})", code.code())]
pub struct RpcError {
    /// Which error: the number on the wire.
    pub code: ErrorCode,
    /// What went wrong, in words; for -32602 it names the parameter.
    pub message: String,
}

impl RpcError {
    /// An error with this code and message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> RpcError {
        RpcError { code, message: message.into() }
    }

    /// -32602, naming what was wrong with the params.
    pub fn invalid_params(message: impl Into<String>) -> RpcError {
        RpcError::new(ErrorCode::InvalidParams, message)
    }

    /// -32603: the daemon failed; the message is the failure's.
    pub fn internal(e: impl fmt::Display) -> RpcError {
        RpcError::new(ErrorCode::Internal, e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn error_codes_are_numbers() {
        let e = RpcError::new(ErrorCode::UnknownTask, "unknown task t");
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v, json!({"code": -32001, "message": "unknown task t"}));
        assert_eq!(serde_json::from_value::<RpcError>(v).unwrap(), e);
        for c in ErrorCode::ALL {
            assert_eq!(ErrorCode::from_code(c.code()), Some(c));
        }
    }
}
