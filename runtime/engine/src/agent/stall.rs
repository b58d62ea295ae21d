//! An agent that goes in circles: after each answer's calls, [`agentd_policies::stall::Watch`]
//! judges; the first time it is stalled, `agent_stalled` and a notice in its next request (a
//! [`MessageKind::Notice`] message, logged like any); told already and still at it, its turn ends
//! ([`TurnError::Stalled`]) and its caller reads why. The watch is rebuilt from the history when a
//! turn starts, so a resumed turn is where it was.

use super::Agent;
use crate::error::TurnError;
use agentd_policies::stall::{Seen, Verdict, Watch};
use agentd_protocol::{EventKind, Message, MessageKind, Part, Speaker, ToolName};

/// The calls of the answer at `history[at]` with the results that follow it.
fn seen_of(history: &[Message], at: usize) -> Vec<Seen<'_>> {
    let results: Vec<(&str, &str, bool)> = history[at + 1..]
        .iter()
        .take_while(|m| m.role != Speaker::Assistant)
        .flat_map(|m| &m.parts)
        .filter_map(|p| match p {
            Part::ToolResult { call_id, content, is_error } => {
                Some((call_id.as_str(), content.as_str(), !is_error))
            }
            _ => None,
        })
        .collect();
    history[at]
        .tool_calls()
        .filter_map(|(id, name, arguments)| {
            let (_, result, ok) = results.iter().find(|(call, _, _)| *call == id)?;
            let writes = matches!(ToolName::parse(name), ToolName::WriteFile | ToolName::EditFile);
            Some(Seen { tool: name, arguments, result, ok: *ok, writes })
        })
        .collect()
}

impl Agent {
    /// A fresh watch for the turn, fed with the answers since the turn's objective.
    pub(super) fn watch_from_history(&mut self) {
        let mut watch = Watch::new(self.task.engine.team().stall);
        let from = self.history.iter().rposition(|m| m.kind == MessageKind::Objective).unwrap_or(0);
        for at in from..self.history.len() {
            if self.history[at].kind == MessageKind::Checkpoint {
                watch.compacted();
            }
            if self.history[at].role == Speaker::Assistant && self.history[at].tool_calls().next().is_some() {
                watch.answered(&seen_of(&self.history, at));
            }
        }
        self.watch = watch;
    }

    /// After an answer's calls have run and their results are logged: tells a stalled agent once,
    /// and ends the turn of one that keeps on.
    pub(super) fn watch_answer(&mut self) -> Result<(), TurnError> {
        let Some(at) = self.history.iter().rposition(|m| m.role == Speaker::Assistant) else { return Ok(()) };
        let verdict = self.watch.answered(&seen_of(&self.history, at));
        match verdict {
            Verdict::Going => Ok(()),
            Verdict::Stalled { why, calls } => {
                tracing::info!(task = %self.task.task_id, role = self.name(), %why, "agent stalled");
                self.emit(EventKind::AgentStalled { why: why.clone(), calls })?;
                let notice = format!(
                    "[agentd] You {why}. That is going in circles: change approach, or call finish with what \
                     you have and what is left. If you keep on, your turn ends here."
                );
                self.persist(Message::user(notice).with_kind(MessageKind::Notice))?;
                Ok(())
            }
            Verdict::StillStalled { why, .. } => Err(TurnError::Stalled { role: self.role.clone(), why }),
        }
    }
}
