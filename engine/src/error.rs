//! Why a turn ends without a `finish`: [`TurnError`], which the task's runner turns into the
//! task's end, and [`TurnResult`], what a finished turn hands back.

use crate::fitter::FitError;
use crate::retry::RetryError;
use crate::storage::StorageError;
use agentd_protocol::ProviderError;

/// Why a turn ended without a `finish`. The task's runner turns it into the task's end: `cancelled` for
/// [`TurnError::Cancelled`], `failed` with this message otherwise.
#[derive(Debug, thiserror::Error)]
pub enum TurnError {
    /// The task was cancelled while the turn ran (or waited for a retry).
    #[error("cancelled")]
    Cancelled,
    /// The provider failed in a way the retry policy would not (or could no longer) retry.
    #[error("{0}")]
    Provider(#[from] ProviderError),
    /// The fitter could not make the request fit: a compaction failed, or the request is over the window even
    /// so.
    #[error("{0}")]
    Fit(#[from] FitError),
    /// The store could not take a message, a record or an event; the turn stops rather than go on unlogged.
    #[error("storage: {0}")]
    Storage(#[from] StorageError),
    /// The model kept calling tools without finishing for `MAX_STEPS_PER_TURN` requests.
    #[error("{role} made {steps} model requests in one turn without finishing")]
    Runaway {
        /// The role whose turn it was.
        role: String,
        /// How many model requests the turn made.
        steps: usize,
    },
    /// The team itself failed: a teammate, the fitter or the scheduler gone, an unknown tool or provider in
    /// the configuration, a large result that could not be stored. The message says which.
    #[error("{0}")]
    Team(String),
}

impl From<RetryError<TurnError>> for TurnError {
    fn from(e: RetryError<TurnError>) -> TurnError {
        match e {
            RetryError::Cancelled => TurnError::Cancelled,
            RetryError::Provider(e) => TurnError::Provider(e),
            RetryError::Pause(e) => e,
        }
    }
}

/// What a finished turn hands back: the `finish` summary (or the final text).
pub type TurnResult = Result<String, TurnError>;
