//! How a command ends: its exit code, the one number a script can tell apart without reading the
//! message (`docs/interface.md`).
//!
//! Every exit code is a constant here and nowhere else a literal: a handler returns `Ok(exit::OK)`
//! or `Ok(exit::FAILED)` when it ran, or `Err(`[`Failure`]`)` when it could not, and a failure's
//! code is chosen either where it happens ([`fail`] with a named code) or, for an error of the
//! client (the daemon unreachable, or its refusal), once for all commands by `Failure`'s
//! `From<ClientError>`.

use agentd_client::ClientError;
use agentd_protocol::ErrorCode;

/// Success.
pub const OK: u8 = 0;
/// The task failed or was cancelled, or the command could not do what it was asked.
pub const FAILED: u8 = 1;
/// Bad usage or bad config (the message names the argument, or the key and the file).
pub const USAGE: u8 = 2;
/// The daemon cannot be reached (the message names the socket).
pub const UNREACHABLE: u8 = 3;
/// No such task or evidence: the id names nothing the daemon knows.
pub const NOT_FOUND: u8 = 4;

/// A failure and the exit code it maps to (one of this module's constants).
#[derive(Debug)]
pub struct Failure {
    /// The exit code.
    pub code: u8,
    /// What went wrong, printed on stderr after `agentd: `.
    pub message: String,
    /// Already written to the log (`serve --log-format json`): not printed again.
    pub logged: bool,
}

impl From<ClientError> for Failure {
    /// The exit code of a daemon's refusal or of not reaching it, from the error's kind and code.
    fn from(e: ClientError) -> Failure {
        let code = match (&e, e.error_code()) {
            (ClientError::Connect { .. }, _) => UNREACHABLE,
            (ClientError::RequestTooLong { .. }, _) => USAGE,
            (_, Some(ErrorCode::UnknownTask | ErrorCode::UnknownEvidence | ErrorCode::UnknownNote)) => {
                NOT_FOUND
            }
            (
                _,
                Some(
                    ErrorCode::InvalidRequest
                    | ErrorCode::MethodNotFound
                    | ErrorCode::InvalidParams
                    | ErrorCode::BadWorkspace
                    | ErrorCode::RefusedWorkspace
                    | ErrorCode::InvalidConfig
                    | ErrorCode::UnknownRole,
                ),
            ) => USAGE,
            _ => FAILED,
        };
        let hint = match e.error_code() {
            Some(ErrorCode::UnknownTask) => {
                "; `agentd tasks` lists them (the first 6 or more characters of an id will do)"
            }
            Some(ErrorCode::UnknownEvidence) => "; `agentd evidence list` lists it",
            Some(ErrorCode::UnknownNote) => "; `agentd memory list` lists them",
            _ => "",
        };
        fail(code, format!("{e}{hint}"))
    }
}

/// A failure with exit code `code` (one of this module's constants) and `message`.
pub fn fail(code: u8, message: impl Into<String>) -> Failure {
    Failure { code, message: message.into(), logged: false }
}
