//! Why a diff or a revert could not be made ([`ChangesError`]).

use super::store::Failure;
use crate::storage::StorageError;
use agentd_policies::changes::PlanError;

/// Why `task.diff` or `task.revert` could not be answered. The refusals (`Plan`, `ChangedSince`,
/// `NotKept`) change nothing; a failure in the middle of a revert says which files were put back.
#[derive(Debug, thiserror::Error)]
pub enum ChangesError {
    /// A revert must name exactly one of `to` and `call`.
    #[error("a revert names exactly one of `to` (a seq: every change after it) and `call` (a seq: that call's change)")]
    Target,
    /// The storage failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A checkpoint could not be read, taken or restored.
    #[error(transparent)]
    Checkpoint(Box<Failure>),
    /// What the revert names cannot be taken back (no such change, a working copy's, later changes
    /// in the way).
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// Files the user changed since the task last did; nothing was written.
    #[error("the user changed {} since the task did: not reverted (--force overwrites them)", .0.join(", "))]
    ChangedSince(Vec<String>),
    /// Files whose bytes the checkpoints did not keep; nothing was written.
    #[error("the checkpoints did not keep the bytes of {} ([checkpoints] max_bytes): not reverted", .0.join(", "))]
    NotKept(Vec<String>),
    /// A revert that failed part way: what was put back before the failure stays put back (and is
    /// recorded).
    #[error("the revert stopped at {path}: {source}; put back before it: {}", if done.is_empty() { "nothing".to_string() } else { done.join(", ") })]
    Partly {
        /// The file it stopped at.
        path: String,
        /// Files put back before it.
        done: Vec<String>,
        /// Why.
        #[source]
        source: Box<Failure>,
    },
}

impl From<Failure> for ChangesError {
    fn from(e: Failure) -> ChangesError {
        match e {
            agentd_agents::checkpoints::CheckpointError::Store(s) => ChangesError::Storage(s),
            other => ChangesError::Checkpoint(Box::new(other)),
        }
    }
}
