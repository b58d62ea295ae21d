//! The first message of a delegation: the objective and everything the delegating agent knows was
//! done (its inherited and own receipts), bounded to a tenth of the receiver's window by the
//! receiver's measure. A list too long for that is archived whole as evidence and read back before
//! the handoff goes; the handoff then names the archive.

use super::Agent;
use crate::clock::now_rfc3339;
use crate::error::{ArchiveFailure, TurnError};
use crate::fitter::{MeterOf, WindowOf};
use agentd_policies::budget::handoff_budget;
use agentd_protocol::task::EVIDENCE_FOLDER;
use agentd_protocol::{Measured, Tokens};
use agentd_protocol::{NewEvidence, Source, Stored, Unit};
use agentd_protocol::{Producer, Role};

/// A delegation's first message, and how it was bounded.
pub(super) struct Handoff {
    pub text: String,
    pub receipts_id: Option<String>,
    pub budget: Tokens,
    pub measured_by: Measured,
}

impl Agent {
    /// The handoff to `to`: the objective and everything this agent knows was done (inherited and
    /// own receipts), bounded to a tenth of the receiver's window by the receiver's measure. A list too
    /// long for that is archived whole as evidence, and read back before the handoff goes: if the
    /// archive cannot be written or read, the delegation fails loudly rather than drop receipts.
    pub(super) async fn handoff(&self, to: &Role, objective: &str) -> Result<Handoff, TurnError> {
        let mut receipts = self.inherited.clone();
        receipts.extend(self.receipts.iter().cloned());
        let team = self.task.engine.team();
        let rc = team.role(to).ok_or_else(|| TurnError::UnknownRole(to.clone()))?;
        let client = self.task.model(&rc.provider)?;
        let server = client.server().to_string();
        let fitter = &self.task.engine.fitter();
        let window = fitter.window_of(WindowOf { client, model: rc.model.clone(), fresh: false }).await?;
        let budget = handoff_budget(window.tokens);
        let meter = fitter.meter_of(MeterOf { server, model: rc.model.clone() });
        let measured_by = meter.measured();
        let count = |t: &str| meter.count_text(t).tokens.0;
        let from = self.role.clone();
        if agentd_agents::handoff::fits_whole(&from, &receipts, budget.0, &count) {
            return Ok(Handoff {
                text: agentd_agents::handoff::handoff(objective, &from, &receipts, budget.0, &count, None)
                    .text,
                receipts_id: None,
                budget,
                measured_by,
            });
        }
        let fail = |why: ArchiveFailure| TurnError::Handoff {
            from: from.clone(),
            to: to.clone(),
            receipts: receipts.len(),
            budget,
            why,
        };
        let data = agentd_agents::handoff::archive_lines(&receipts);
        let stored = self
            .task
            .engine
            .storage()
            .put_evidence(
                NewEvidence {
                    data: data.as_bytes(),
                    media_type: "application/x-ndjson",
                    source: Source {
                        task_id: self.task.task_id.clone(),
                        role: from.clone(),
                        tool: Producer::Receipts,
                        call_id: None,
                        detail: Some(format!("receipts of {from} handed to {to}")),
                    },
                    complete: true,
                    incomplete_reason: None,
                    created_at: &now_rfc3339(),
                },
                &self.task.workspace.root().join(EVIDENCE_FOLDER),
            )
            .map_err(|e| fail(ArchiveFailure::NotWritten(e)))?;
        let id = match stored {
            Stored::InStore(meta) => {
                // Read it back: an archive nobody can read is no archive.
                self.task
                    .engine
                    .storage()
                    .read_evidence(&meta.id, 0, 1, Unit::Lines)
                    .map_err(|source| fail(ArchiveFailure::Unreadable { id: meta.id.clone(), source }))?;
                meta.id
            }
            Stored::Fallback { path, .. } => return Err(fail(ArchiveFailure::Fallback(path))),
        };
        let view = agentd_agents::handoff::handoff(objective, &from, &receipts, budget.0, &count, Some(&id));
        Ok(Handoff { text: view.text, receipts_id: Some(id), budget, measured_by })
    }
}
