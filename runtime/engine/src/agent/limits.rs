//! A delegation's own budget and deadline: a teammate that reaches either stops, and its caller
//! reads what it did.
//!
//! A `delegate` call may name `budget_tokens` (the tokens the teammate's requests may use) and
//! `deadline` (seconds it may run); each defaults to the delegated role's `[team.ROLE]
//! delegation_budget_tokens` / `delegation_deadline`. Both are fixed when the branch starts, on its
//! `delegated` event (the deadline as a moment), so a resume keeps them, and what the branch spent
//! before the stop counts.
//!
//! Checked before each of the teammate's requests, once the request is measured: when its tokens
//! spent so far (each answer's usage, prompt and completion; the measured request where a server
//! reports none) and the request would pass the budget, or the deadline has passed, the turn ends
//! with [`TurnError::OverLimit`]: its last words and the calls it made, which the caller reads as
//! the `delegate` call's error result (`super::limited`). The task's own budget is checked as always,
//! above it: a delegation budget never lets a task spend more than its own.

use crate::clock::{clock, later, rfc3339};
use agentd_protocol::Tokens;
use std::time::{Duration, SystemTime};

/// The limits a `delegate` call asks for, before the branch starts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Asked {
    /// Tokens its requests may use.
    pub tokens: Option<u64>,
    /// How long it may run.
    pub deadline: Option<Duration>,
}

impl Asked {
    /// The limit of a branch starting now.
    pub(super) fn starting_now(self) -> Limit {
        Limit {
            tokens: self.tokens,
            deadline: self.deadline.map(|d| later(clock().now(), d)),
            spent: 0,
            from: 0,
        }
    }
}

/// A running branch's limits and what it has spent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Limit {
    /// Tokens its requests may use.
    pub tokens: Option<u64>,
    /// When it must stop.
    pub deadline: Option<SystemTime>,
    /// Tokens its requests have used so far.
    pub spent: u64,
    /// Where this turn's receipts start (what it did is told from there).
    pub(crate) from: usize,
}

impl Limit {
    /// Whether there is anything to keep to.
    pub fn is_set(&self) -> bool {
        self.tokens.is_some() || self.deadline.is_some()
    }

    /// The deadline as the `delegated` event writes it.
    pub fn deadline_text(&self) -> Option<String> {
        self.deadline.map(rfc3339)
    }

    /// Why a request of `next` tokens may not be sent now, if it may not.
    pub(super) fn reached(&self, next: Tokens, now: SystemTime) -> Option<String> {
        if let Some(deadline) = self.deadline.filter(|d| now >= *d) {
            return Some(format!("its delegation deadline ({}) passed", rfc3339(deadline)));
        }
        match self.tokens {
            Some(budget) if self.spent.saturating_add(next.0) > budget => Some(format!(
                "its delegation budget of {budget} tokens was reached ({} spent, the next request {} more)",
                self.spent, next.0
            )),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_is_reached_by_the_request_that_would_pass_the_budget_or_by_the_deadline() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let budget = Limit { tokens: Some(1_000), deadline: None, spent: 600, from: 0 };
        assert_eq!(budget.reached(Tokens(400), now), None, "exactly the budget is within it");
        assert!(budget.reached(Tokens(401), now).unwrap().contains("budget of 1000 tokens"));
        let deadline = Limit { tokens: None, deadline: Some(now), spent: 0, from: 0 };
        assert!(deadline.reached(Tokens(1), now).unwrap().contains("deadline"));
        assert_eq!(deadline.reached(Tokens(1), now - Duration::from_secs(1)), None);
        assert!(!Limit::default().is_set());
    }
}
