//! Why a task stops without ending: a provider's usage limit to wait out, or a budget reached. The
//! task's runner records it ([`crate::end::record_halt`]) as `waiting` or `paused` with the moment it
//! goes on; the daemon wakes it then.

use agentd_policies::spending::Ceiling;
use agentd_protocol::{Amount, Role};
use std::time::SystemTime;

/// Why a task stopped without ending: it waits for a provider's usage limit, or a budget is
/// reached.
#[derive(Debug, Clone, PartialEq)]
pub enum Halt {
    /// A usage limit resets later than the retry policy's longest delay.
    UsageLimit {
        /// The role whose request was refused.
        role: Role,
        /// When the limit resets, on the daemon's clock.
        resume_at: SystemTime,
        /// The header that said when.
        source: String,
        /// The header asked for longer than [`agentd_protocol::MAX_PROVIDER_WAIT`], the wait taken.
        capped: bool,
        /// `rate_limit` or `overloaded`.
        reason: String,
        /// What the provider said.
        message: String,
    },
    /// The next request would cross a budget.
    Budget {
        /// The role whose request it was.
        role: Role,
        /// The budget and what was spent against it.
        ceiling: Ceiling,
        /// The request not sent.
        request: Amount,
        /// A day's budget: when the day turns.
        resume_at: Option<SystemTime>,
    },
}

impl std::fmt::Display for Halt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Halt::UsageLimit { resume_at, source, .. } => write!(
                f,
                "waiting for the provider's usage limit until {} ({source})",
                crate::clock::rfc3339_seconds(*resume_at)
            ),
            Halt::Budget { ceiling, .. } => write!(f, "the {} budget is reached", ceiling.scope.as_str()),
        }
    }
}
