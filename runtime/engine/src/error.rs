//! Why a turn ends without a `finish`: [`TurnError`], which the task's runner turns into the
//! task's end, and [`TurnResult`], what a finished turn hands back.

use crate::fitter::FitError;
use crate::retry::RetryError;
use crate::storage::StorageError;
use agentd_protocol::{ProviderError, Role, Tokens};

/// Why a turn ended without a `finish`. The task's runner turns it into the task's end: `cancelled` for
/// [`TurnError::Cancelled`], `failed` with this message otherwise.
#[derive(Debug, thiserror::Error)]
pub enum TurnError {
    /// The task was cancelled while the turn ran (or waited for a retry).
    #[error("cancelled")]
    Cancelled,
    /// The task stops without ending: a usage limit to wait out, or a budget reached. The runner
    /// records it (`waiting` or `paused`) and the daemon wakes the task when it is time.
    #[error("{0}")]
    Halted(Box<crate::halt::Halt>),
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
    /// The agent went in circles, was told so, and kept on (`agent_stalled`): its turn ends, and its
    /// caller reads why.
    #[error("{role} is going in circles and was stopped: it {why}")]
    Stalled {
        /// The agent whose turn it was.
        role: Role,
        /// What it kept doing.
        why: String,
    },
    /// A delegation's budget or deadline was reached: the teammate's turn ends, and its caller reads
    /// what it did.
    #[error("{role} stopped before finishing: {why}. {partial}")]
    OverLimit {
        /// The teammate.
        role: Role,
        /// Which limit, in words.
        why: String,
        /// What it had done: its last words and its calls.
        partial: String,
    },
    /// The role's configuration names a tool agentd does not have.
    #[error("role {role}: unknown tool {tool}")]
    UnknownTool {
        /// The role whose tools were being listed.
        role: Role,
        /// The name that is no tool.
        tool: String,
    },
    /// A role's configuration names a provider that is not configured.
    #[error("no provider named {0:?} is configured")]
    UnknownProvider(String),
    /// A role the turn needs (its own, or a delegation's) is not in the team.
    #[error("no role {:?} in the team", .0.name())]
    UnknownRole(Role),
    /// The turn's own tokio task panicked or was aborted: a failed turn, not a dead runner.
    #[error("the turn stopped unexpectedly: {0}")]
    Stopped(#[source] tokio::task::JoinError),
    /// A tool result (or one of its images) too large for the request could not be stored as evidence, so it
    /// can neither be sent nor kept.
    #[error("cannot store {what} {tool} result: {source}")]
    ResultNotStored {
        /// The tool whose result it was.
        tool: String,
        /// `"a large"` or `"an image of a"`: which part of the result.
        what: &'static str,
        /// Why the store refused it.
        #[source]
        source: StorageError,
    },
    /// A delegation's receipts exceed the handoff budget and their archive could not be stored and read
    /// back: the handoff is refused rather than made with receipts dropped.
    #[error(
        "handoff to {to} failed: the {receipts} receipts of {from} exceed the handoff budget of {budget} tokens \
         and {why}; refusing to hand over with receipts dropped"
    )]
    Handoff {
        /// The role handing over.
        from: Role,
        /// The role it delegates to.
        to: Role,
        /// How many receipts it has.
        receipts: usize,
        /// The handoff budget they exceed.
        budget: Tokens,
        /// What went wrong with their archive.
        why: ArchiveFailure,
    },
}

/// Why the archive of a delegation's receipts could not be used: part of [`TurnError::Handoff`].
#[derive(Debug, thiserror::Error)]
pub enum ArchiveFailure {
    /// The store refused it.
    #[error("their archive could not be written: {0}")]
    NotWritten(#[source] StorageError),
    /// It was stored but reading it back failed.
    #[error("their archive {id} cannot be read back: {source}")]
    Unreadable {
        /// The evidence id it was stored under.
        id: String,
        /// Why it could not be read.
        #[source]
        source: StorageError,
    },
    /// The evidence database could not take it; it went to a workspace file, which the handoff cannot cite.
    #[error("the evidence database could not hold their archive (written whole to {} instead)", .0.display())]
    Fallback(std::path::PathBuf),
}

impl TurnError {
    /// The halt this error is, directly or as the fitter's (a summary request that waits or would
    /// cross a budget).
    pub fn halt(&self) -> Option<&crate::halt::Halt> {
        match self {
            TurnError::Halted(h) | TurnError::Fit(FitError::Halted(h)) => Some(h.as_ref()),
            _ => None,
        }
    }
}

impl From<crate::spending::GateError> for TurnError {
    fn from(e: crate::spending::GateError) -> TurnError {
        match e {
            crate::spending::GateError::Halt(h) => TurnError::Halted(h),
            crate::spending::GateError::Storage(e) => TurnError::Storage(e),
        }
    }
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
