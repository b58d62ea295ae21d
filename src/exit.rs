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
/// Interrupted by Ctrl-C (128 + SIGINT, the shell's convention): the command stopped, not the task.
pub const INTERRUPTED: u8 = 130;

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
        fail(code, format!("{}{hint}", in_the_flags_typed(&e.to_string())))
    }
}

/// The protocol's parameter names in a refusal (``param `focus` ``, `budget.tokens`), as the
/// command line spells them (`--focus`, `--budget-tokens`): the message names what the user typed.
fn in_the_flags_typed(message: &str) -> String {
    const NAMES: [(&str, &str); 16] = [
        ("param `budget.tokens`", "`--budget-tokens`"),
        ("param `budget.cost`", "`--budget-cost`"),
        ("budget.tokens", "--budget-tokens"),
        ("budget.cost", "--budget-cost"),
        ("param `focus`", "`--focus`"),
        ("param `role`", "`--role`"),
        ("param `workspace`", "`--workspace`"),
        ("param `since`", "`--since`"),
        ("param `call`", "`--call`"),
        ("param `to`", "`--to`"),
        ("param `offset`", "`--offset`"),
        ("param `limit`", "`--limit`"),
        ("param `value`", "VALUE"),
        ("param `objective`", "OBJECTIVE"),
        ("param `text`", "TEXT"),
        ("param `task_id`", "TASK"),
    ];
    NAMES.iter().fold(message.to_string(), |text, (param, flag)| text.replace(param, flag))
}

/// A failure with exit code `code` (one of this module's constants) and `message`.
pub fn fail(code: u8, message: impl Into<String>) -> Failure {
    Failure { code, message: message.into(), logged: false }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_the_flag_the_user_typed() {
        assert_eq!(
            in_the_flags_typed("budget.tokens 100 is not above what task t spent (500 tokens)"),
            "--budget-tokens 100 is not above what task t spent (500 tokens)"
        );
        assert_eq!(
            in_the_flags_typed("param `focus`: at most 2000 characters"),
            "`--focus`: at most 2000 characters"
        );
        assert_eq!(in_the_flags_typed("param `value`: expected 1 to 100"), "VALUE: expected 1 to 100");
        assert_eq!(in_the_flags_typed("unknown task t"), "unknown task t");
    }
}
