//! An agent keeping to its delegation's limits (see [`super::limits`]): checked before each request,
//! spent after each answer, and what it did told when it stops.

use super::Agent;
use crate::clock::clock;
use crate::error::TurnError;
use agentd_protocol::{Tokens, Usage};

impl Agent {
    /// Before a request of `next` tokens: the end of the turn when its delegation's limit is reached.
    pub(super) fn within_limit(&self, next: Tokens) -> Result<(), TurnError> {
        let Some(why) = self.limit.as_ref().and_then(|l| l.reached(next, clock().now())) else {
            return Ok(());
        };
        Err(TurnError::OverLimit { role: self.role.clone(), why, partial: self.partial() })
    }

    /// After an answer: what its request used, counted against the delegation's budget.
    pub(super) fn spent_on(&mut self, usage: Option<Usage>, sent: Tokens) {
        if let Some(limit) = self.limit.as_mut() {
            let used = usage.map_or(sent.0, |u| u.prompt_tokens.saturating_add(u.completion_tokens));
            limit.spent = limit.spent.saturating_add(used);
        }
    }

    /// What the teammate did before it stopped: its last words and its calls this turn.
    fn partial(&self) -> String {
        let last = self
            .history
            .iter()
            .rev()
            .find(|m| m.role == agentd_protocol::Speaker::Assistant && !m.text().trim().is_empty())
            .map(|m| m.text());
        let from = self.limit.as_ref().map_or(0, |l| l.from);
        let calls: Vec<String> = self
            .receipts
            .iter()
            .skip(from)
            .map(|r| format!("{} {} → {}", r.tool, r.arguments, if r.ok { "ok" } else { "failed" }))
            .collect();
        let mut out = match last {
            Some(text) => format!("Its last words: {}", text.trim()),
            None => "It said nothing yet.".to_string(),
        };
        if calls.is_empty() {
            out.push_str(" It made no calls.");
        } else {
            out.push_str(&format!(" Its {} call(s): {}", calls.len(), calls.join("; ")));
        }
        out
    }
}
