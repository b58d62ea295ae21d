//! A call its task's client approves first (`crate::permissions`): the agent says it waits
//! (`permission_asked`), waits for the answer, its deadline or a cancel, and says what came of it
//! (`permission_answered`); a refusal is what the model reads as the call's error result.

use super::turn::Call;
use super::Agent;
use crate::clock::clock;
use crate::error::TurnError;
use crate::permissions::{Answer, PERMISSION_WAIT};
use agentd_protocol::EventKind;

impl Agent {
    /// Whether `call` may run: at once for a tool the client does not approve; else the client's
    /// answer, or a refusal when none comes within [`PERMISSION_WAIT`].
    pub(super) async fn permitted(&self, call: &Call) -> Result<Answer, TurnError> {
        let permissions = &self.task.permissions;
        if !permissions.asks(&call.name) {
            return Ok(Ok(()));
        }
        let answered = permissions.wait_for(&call.id);
        self.emit(EventKind::PermissionAsked { call_id: call.id.clone(), tool: call.name.clone() })?;
        let clock = clock();
        let answer = tokio::select! {
            answer = answered => answer.unwrap_or_else(|_| Err("the question was withdrawn".to_string())),
            _ = clock.sleep(PERMISSION_WAIT) => {
                Err(format!("no answer within {} minutes", PERMISSION_WAIT.as_secs() / 60))
            }
            _ = self.task.cancel.cancelled() => {
                permissions.forget(&call.id);
                return Err(TurnError::Cancelled);
            }
        };
        permissions.forget(&call.id);
        self.emit(EventKind::PermissionAnswered {
            call_id: call.id.clone(),
            allowed: answer.is_ok(),
            reason: answer.clone().err(),
        })?;
        Ok(answer)
    }
}
