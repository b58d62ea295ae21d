//! The one place domain errors become the socket's [`ErrorCode`]s: every error a handler meets
//! converts into a [`Refusal`] carrying its code, so the handlers use `?` on anything. A storage
//! failure is answered by its kind ([`StorageError`]'s variants), wherever it surfaced.

use crate::supervisor::SupervisorError;
use actix::MailboxError;
use agentd_engine::checkpoints::ChangesError;
use agentd_engine::error::TurnError;
use agentd_engine::fitter::FitError;
use agentd_engine::storage::StorageError;
use agentd_engine::task::TaskError;
use agentd_protocol::{ErrorCode, RpcError};

/// An error on its way to the socket, with its code.
#[derive(Debug)]
pub struct Refusal(pub RpcError);

/// The socket's answer to a supervisor's refusal or failure.
impl From<SupervisorError> for Refusal {
    fn from(e: SupervisorError) -> Refusal {
        use SupervisorError as E;
        // A storage failure is answered by its kind, wherever it surfaced.
        let storage = match &e {
            E::Storage(s)
            | E::Task(TaskError::Storage(s))
            | E::Compaction(TurnError::Storage(s) | TurnError::Fit(FitError::Storage(s)))
            | E::Changes(ChangesError::Storage(s)) => Some(s),
            _ => None,
        };
        if let Some(s) = storage {
            let code = storage_code(s);
            return Refusal(RpcError::new(code, e.to_string()));
        }
        let code = match &e {
            E::EmptyObjective
            | E::EmptyText
            | E::UnknownTeam(_)
            | E::InvalidBudget(_)
            | E::InvalidTaskId(_)
            | E::UnaskableTool(_) => ErrorCode::InvalidParams,
            E::UnknownRole(_) => ErrorCode::UnknownRole,
            // A compaction the user asked for that cannot be made — nothing to compact, a history that
            // cannot shrink below its destination, a summary the model would not give, a budget or
            // a usage limit in the way — is a refusal with its reason (its storage failing was
            // answered above, by its kind).
            E::Compaction(_) => ErrorCode::NotAllowed,
            E::FocusTooLong { .. } => ErrorCode::InvalidParams,
            E::UnknownTask(_) => ErrorCode::UnknownTask,
            // Not absolute: a malformed parameter. Not a directory there: -32004 (HTTP 404). A
            // directory agentd will not work in: -32007 (HTTP 403).
            E::RelativeWorkspace(_) => ErrorCode::InvalidParams,
            E::Workspace { .. } => ErrorCode::BadWorkspace,
            E::RefusedWorkspace { .. } => ErrorCode::RefusedWorkspace,
            E::ShuttingDown
            | E::AlreadyRunning(_)
            | E::NotResumable { .. }
            | E::StillActive { .. }
            | E::WasCancelled(_)
            | E::AlreadyEnded { .. }
            | E::NoQuestion { .. }
            | E::TaskIdTaken(_)
            | E::EndNotRecorded { .. } => ErrorCode::NotAllowed,
            E::CancelTimedOut | E::Fleet(_) | E::Task(TaskError::NoLead) => ErrorCode::Internal,
            // Answered above, by the storage failure's kind.
            E::Storage(_) | E::Task(TaskError::Storage(_)) => ErrorCode::Internal,
            E::RunningElsewhere { .. } | E::RevertWhileActive { .. } => ErrorCode::NotAllowed,
            E::Changes(c) => changes_code(c),
        };
        Refusal(RpcError::new(code, e.to_string()))
    }
}

/// The socket's answer to a diff or a revert that could not be made.
impl From<ChangesError> for Refusal {
    fn from(e: ChangesError) -> Refusal {
        let code = match &e {
            ChangesError::Storage(s) => storage_code(s),
            other => changes_code(other),
        };
        Refusal(RpcError::new(code, e.to_string()))
    }
}

/// The code of a diff or revert refused or failed (a storage failure aside).
fn changes_code(e: &ChangesError) -> ErrorCode {
    match e {
        ChangesError::Storage(s) => storage_code(s),
        ChangesError::Target => ErrorCode::InvalidParams,
        // Refused, nothing written: no such change, or the files, the checkpoints or later changes
        // are in the way.
        ChangesError::Plan(_) | ChangesError::ChangedSince(_) | ChangesError::NotKept(_) => {
            ErrorCode::NotAllowed
        }
        ChangesError::Checkpoint(_) | ChangesError::Partly { .. } => ErrorCode::Internal,
    }
}

/// The socket's answer to a storage failure, by its kind.
impl From<StorageError> for Refusal {
    fn from(e: StorageError) -> Refusal {
        Refusal(RpcError::new(storage_code(&e), e.to_string()))
    }
}

/// The code of a storage failure, by its kind: the one `match` from kinds to codes.
fn storage_code(e: &StorageError) -> ErrorCode {
    use agentd_policies::memory::ChangeError as C;
    match e {
        StorageError::UnknownTask(_) => ErrorCode::UnknownTask,
        StorageError::UnknownEvidence(_) => ErrorCode::UnknownEvidence,
        StorageError::UnknownNote(_) => ErrorCode::UnknownNote,
        StorageError::RefusedChange(C::EmptyText | C::Unchanged(_)) => ErrorCode::InvalidParams,
        StorageError::RefusedChange(C::Deleted(_) | C::NothingToUndo(_)) => ErrorCode::NotAllowed,
        // Another node holds the task now: not this daemon's to change from here.
        StorageError::Conflict(_) | StorageError::Fenced(_) => ErrorCode::NotAllowed,
        StorageError::Unavailable(_) | StorageError::Failed(_) | StorageError::UnknownObject(_) => {
            ErrorCode::Internal
        }
    }
}

impl From<MailboxError> for Refusal {
    fn from(e: MailboxError) -> Refusal {
        Refusal(RpcError::internal(e))
    }
}

impl From<RpcError> for Refusal {
    fn from(e: RpcError) -> Refusal {
        Refusal(e)
    }
}

/// A result that cannot be written as JSON: the daemon's own failure.
impl From<serde_json::Error> for Refusal {
    fn from(e: serde_json::Error) -> Refusal {
        Refusal(RpcError::internal(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentd_protocol::TaskState;

    fn code(e: SupervisorError) -> ErrorCode {
        Refusal::from(e).0.code
    }

    #[test]
    fn only_the_socket_layer_turns_domain_errors_into_codes() {
        assert_eq!(code(SupervisorError::EmptyObjective), ErrorCode::InvalidParams);
        assert_eq!(code(SupervisorError::UnknownTask("t".into())), ErrorCode::UnknownTask);
        assert_eq!(code(SupervisorError::RelativeWorkspace("w".into())), ErrorCode::InvalidParams);
        let refused = SupervisorError::RefusedWorkspace { path: "/".into(), why: "the root".into() };
        assert_eq!(code(refused), ErrorCode::RefusedWorkspace);
        let cannot = FitError::Compaction("compacted request is 2429 tokens; destination 829".into());
        assert_eq!(code(SupervisorError::Compaction(TurnError::Fit(cannot))), ErrorCode::NotAllowed);
        assert_eq!(
            code(SupervisorError::FocusTooLong { chars: 9_000, max: 2_000 }),
            ErrorCode::InvalidParams
        );
        let ended = SupervisorError::AlreadyEnded { task_id: "t".into(), state: TaskState::Finished };
        assert_eq!(code(ended), ErrorCode::NotAllowed);
        assert_eq!(code(SupervisorError::CancelTimedOut), ErrorCode::Internal);
        let unknown = Refusal::from(StorageError::UnknownEvidence("ev-1".into())).0;
        assert_eq!(
            (unknown.code, unknown.message.as_str()),
            (ErrorCode::UnknownEvidence, "unknown evidence ev-1")
        );
        // Every kind of storage failure has its code, whichever backend said it.
        use agentd_policies::memory::ChangeError;
        let kinds = [
            (StorageError::UnknownTask("t".into()), ErrorCode::UnknownTask),
            (StorageError::UnknownNote("m1".into()), ErrorCode::UnknownNote),
            (StorageError::RefusedChange(ChangeError::EmptyText), ErrorCode::InvalidParams),
            (StorageError::RefusedChange(ChangeError::Deleted("m1".into())), ErrorCode::NotAllowed),
            (StorageError::conflict(std::fmt::Error), ErrorCode::NotAllowed),
            (StorageError::fenced(std::fmt::Error), ErrorCode::NotAllowed),
            (StorageError::unavailable(std::fmt::Error), ErrorCode::Internal),
            (StorageError::failed(std::fmt::Error), ErrorCode::Internal),
        ];
        for (e, code) in kinds {
            assert_eq!(Refusal::from(e).0.code, code);
        }
    }
}
