//! Calls a task's client approves before they run (`task.submit`'s `ask`: `agentd acp` asks the
//! editor's user). A call of a tool on the list waits for `task.permit`'s answer, at most
//! [`PERMISSION_WAIT`]; nobody answering is a refusal, so a client that went away cannot hold a
//! task for ever, and a cancel ends the wait like any other.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::Duration;
use tokio::sync::oneshot;

/// How long a call waits for its client's answer before it is refused.
pub const PERMISSION_WAIT: Duration = Duration::from_secs(600);

/// The refusal a call reads when the client said no without saying why.
pub const REJECTED: &str = "rejected by the user";

/// An answer: the call may run, or why not.
pub type Answer = Result<(), String>;

/// One task's tools to ask about and its calls waiting for an answer.
#[derive(Debug, Default)]
pub struct Permissions {
    ask: Vec<agentd_protocol::ToolName>,
    waiting: Mutex<HashMap<String, oneshot::Sender<Answer>>>,
}

/// Why an answer found no call to answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("call {0} waits for no answer (never asked, answered already, or its wait is over)")]
pub struct NotWaiting(pub String);

impl Permissions {
    /// A task whose calls of `ask` wait for an answer.
    pub fn new(ask: Vec<agentd_protocol::ToolName>) -> Permissions {
        Permissions { ask, waiting: Mutex::default() }
    }

    /// Whether a call of `tool` waits for an answer.
    pub fn asks(&self, tool: &agentd_protocol::ToolName) -> bool {
        self.ask.contains(tool)
    }

    /// Starts waiting for the answer about `call_id`: what receives it.
    pub fn wait_for(&self, call_id: &str) -> oneshot::Receiver<Answer> {
        let (tx, rx) = oneshot::channel();
        self.waiting.lock().insert(call_id.to_string(), tx);
        rx
    }

    /// Stops waiting for `call_id` (answered, timed out, cancelled).
    pub fn forget(&self, call_id: &str) {
        self.waiting.lock().remove(call_id);
    }

    /// Answers the call `call_id` waits with.
    pub fn answer(&self, call_id: &str, answer: Answer) -> Result<(), NotWaiting> {
        let waiting = self.waiting.lock().remove(call_id);
        match waiting {
            Some(tx) => tx.send(answer).map_err(|_| NotWaiting(call_id.to_string())),
            None => Err(NotWaiting(call_id.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentd_protocol::ToolName;

    #[tokio::test]
    async fn an_answer_reaches_the_call_waiting_once() {
        let p = Permissions::new(vec![ToolName::EditFile]);
        assert!(p.asks(&ToolName::EditFile) && !p.asks(&ToolName::ReadFile));
        let rx = p.wait_for("c1");
        assert_eq!(p.answer("c2", Ok(())), Err(NotWaiting("c2".into())));
        assert_eq!(p.answer("c1", Err(REJECTED.into())), Ok(()));
        assert_eq!(rx.await, Ok(Err(REJECTED.to_string())));
        assert!(p.answer("c1", Ok(())).is_err(), "answered already");
        let _rx = p.wait_for("c3");
        p.forget("c3");
        assert!(p.answer("c3", Ok(())).is_err(), "its wait is over");
    }
}
