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
            let acts = matches!(
                ToolName::parse(name),
                ToolName::WriteFile | ToolName::EditFile | ToolName::RunCommand | ToolName::Mcp(_)
            );
            Some(Seen { tool: name, arguments, result, ok: *ok, acts })
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
                if let Verdict::Stalled { .. } = watch.answered(&seen_of(&self.history, at)) {
                    // Told only if the notice made it into the log before any stop.
                    let told = self.history[at + 1..]
                        .iter()
                        .take_while(|m| m.role != Speaker::Assistant)
                        .any(|m| m.kind == MessageKind::Notice);
                    if !told {
                        watch.untold();
                    }
                }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Rig;
    use agentd_protocol::Role;
    use agentd_test_support::ScriptedServer;
    use std::sync::Weak;

    fn make(id: &str) -> Message {
        Message::new(
            Speaker::Assistant,
            vec![Part::ToolCall {
                id: id.into(),
                name: "run_command".into(),
                arguments: r#"{"command":"make"}"#.into(),
            }],
        )
    }

    /// A turn resumed after a stop is where it was: three identical failing calls and the notice in
    /// the log, the watch rebuilt from them ends the turn at the next identical call — and without the
    /// notice logged, the rebuilt watch tells it (once) instead.
    #[tokio::test]
    async fn a_resumed_turn_rebuilds_its_watch_from_the_history() {
        let rig = Rig::start(ScriptedServer::start(vec![]).await).await;
        let task = rig.task("Fix it");
        let mut history = vec![Message::user("Fix it").with_kind(MessageKind::Objective)];
        for i in 0..3 {
            history.push(make(&format!("c{i}")));
            history.push(Message::tool_result(
                format!("c{i}"),
                "exit code: 2\nmake: *** [all] Error 1",
                true,
            ));
        }
        let fresh = |history: Vec<Message>| {
            let mut agent =
                Agent::new(Role::Coder, history, Vec::new(), Vec::new(), None, task.clone(), Weak::new());
            agent.watch_from_history();
            agent
        };
        // Stalled by the third call while the daemon ran: told, then the stop came.
        let mut told = history.clone();
        told.push(Message::user("[agentd] You … going in circles").with_kind(MessageKind::Notice));
        let mut agent = fresh(told);
        agent.history.push(make("c3"));
        agent.history.push(Message::tool_result("c3", "exit code: 2\nmake: *** [all] Error 1", true));
        let ended = agent.watch_answer().unwrap_err();
        assert!(matches!(ended, TurnError::Stalled { .. }), "{ended}");
        assert!(ended
            .to_string()
            .starts_with("coder is going in circles and was stopped: it made the same call 4 times"));

        // Stalled by the third call, but stopped before the notice was logged: told now, not stopped.
        let mut agent = fresh(history.clone());
        agent.history.push(make("c3"));
        agent.history.push(Message::tool_result("c3", "exit code: 2\nmake: *** [all] Error 1", true));
        agent.watch_answer().unwrap();
        assert_eq!(agent.history.last().map(|m| m.kind), Some(MessageKind::Notice));

        // Two calls before the stop: the third, after the resume, is the one that tells.
        let mut agent = fresh(history[..5].to_vec());
        agent.history.push(make("c2"));
        agent.history.push(Message::tool_result("c2", "exit code: 2\nmake: *** [all] Error 1", true));
        agent.watch_answer().unwrap();
        let last = agent.history.last().unwrap();
        assert_eq!(last.kind, MessageKind::Notice);
        assert!(last.text().contains("made the same call 3 times"), "{}", last.text());
    }
}
