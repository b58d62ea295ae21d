//! Clearing old thinking after an idle spell.
//!
//! A new user request after more than `idle_thinking_cleanup_after` since the agent last answered
//! drops every thinking part but the latest — once, and only when that frees at least
//! `idle_thinking_clear_at_least` tokens (less is not worth the provider's prompt cache it throws
//! away). The decisions are `policies::thinking`'s; this file does the IO.

use super::Agent;
use crate::clock::{clock, now_rfc3339};
use crate::error::TurnError;
use crate::storage::Settings;
use agentd_policies::settings::{LastThinkingCleanup, ThinkingLatch};
use agentd_policies::thinking;
use agentd_protocol::CheckpointKind;
use agentd_protocol::TurnSettings;
use agentd_protocol::{EventKind, Part, Record, Tokens};

impl Agent {
    /// A new user request after more than the idle threshold since this agent last answered: every
    /// thinking part but the latest goes, once. The cleaned history becomes the active one through a
    /// checkpoint (so the cleared blocks never return, through resume and restarts), and a latch in
    /// the store records it.
    pub(super) async fn clear_idle_thinking(&mut self, snapshot: &TurnSettings) -> Result<(), TurnError> {
        let Some(last) = self.last_answer_at else { return Ok(()) };
        let idle = clock().now().duration_since(last).unwrap_or_default();
        if !thinking::is_due(idle, self.task.engine.team().idle_thinking_cleanup_after) {
            return Ok(());
        }
        let Some((cleaned, removed)) = thinking::clear_outdated(&self.history) else { return Ok(()) };
        let meter = self.meter(snapshot);
        let mut freed = Tokens::ZERO;
        for part in &removed {
            if let Part::Thinking { text, signature, .. } = part {
                freed += meter.count_text(text).tokens;
                if let Some(sig) = signature {
                    freed += meter.count_text(sig).tokens;
                }
            }
        }
        let at_least = self.task.engine.team().idle_thinking_clear_at_least;
        if !thinking::worth_clearing(freed, at_least) {
            tracing::debug!(role = self.name(), %freed, %at_least, "Context GC: skipped, it would free too little");
            return Ok(());
        }
        let seq = self.task.engine.storage().append(
            &self.task.task_id,
            &Record::Checkpoint {
                role: self.role.clone(),
                subtype: CheckpointKind::ThinkingCleanup,
                history: cleaned.clone(),
                archive_id: None,
            },
        )?;
        self.history = cleaned;
        let latch = ThinkingLatch { checkpoint_seq: seq, blocks_removed: removed.len(), at: now_rfc3339() };
        self.task
            .engine
            .storage()
            .put(&LastThinkingCleanup { task_id: &self.task.task_id, role: &self.role }, &latch)?;
        tracing::debug!(role = self.name(), "Context GC: cleared {} outdated thinking blocks", removed.len());
        self.emit(EventKind::ThinkingCleared {
            blocks_removed: removed.len() as u32,
            tokens_freed: freed,
            idle_ms: idle.as_millis() as u64,
        })?;
        Ok(())
    }
}
