//! What a resume knows of the branches a stop interrupted: read from the task's log by
//! `crate::task`, continued by `super::branches`.

use agentd_protocol::Role;
use std::collections::BTreeMap;

/// A branch of the lead's last answer that a resume continues: what its `delegated` event said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    /// The agent it ran on.
    pub instance: Role,
    /// Its working copy, if it had one.
    pub working_copy: Option<String>,
    /// Whether its agent had logged the handoff (so it continues from its history rather than being
    /// handed the objective again).
    pub handed_over: bool,
    /// Its budget and deadline, as its `delegated` event set them, with what it spent before the stop.
    pub limit: super::limits::Limit,
}

/// What a resume knows of the lead's interrupted answer: its calls with no result, and the branches
/// that had started, by call id.
#[derive(Debug, Clone, Default)]
pub struct Resumed {
    /// The `delegate` calls of the lead's last answer that have no result, in call order.
    pub pending: Vec<String>,
    /// The branches that had started, by the call they answer.
    pub started: BTreeMap<String, Started>,
}
