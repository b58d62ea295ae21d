//! Log records: the append-only per-task log holds messages, checkpoints, settings snapshots and events,
//! each tagged with the role it belongs to. Resume is "the latest checkpoint of a role plus every later
//! message record of that role".

use crate::event::Event;
use crate::message::Message;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Record {
    /// One message of a role's history.
    Message { role: String, message: Message },
    /// The role's whole active history replaced (compaction, thinking cleanup, repair).
    /// Shape per the design: `{type: system, subtype: compaction, history: [...]}` when exported.
    Checkpoint {
        role: String,
        subtype: String,
        history: Vec<Message>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        archive_id: Option<String>,
    },
    /// The settings a role's turn started with.
    Settings { role: String, settings: serde_json::Value },
    /// An event, also kept in the event index.
    Event { event: Event },
    /// What one operation of a role did (tool, arguments, outcome, evidence): its receipt.
    Receipt { role: String, receipt: serde_json::Value },
}

impl Record {
    pub fn role(&self) -> &str {
        match self {
            Record::Message { role, .. }
            | Record::Checkpoint { role, .. }
            | Record::Settings { role, .. }
            | Record::Receipt { role, .. } => role,
            Record::Event { event } => &event.role,
        }
    }
}

/// Rebuilds a role's active history from its records: the latest checkpoint, then every later message.
pub fn history_of<'a>(role: &str, records: impl IntoIterator<Item = &'a Record>) -> Vec<Message> {
    let mut history = Vec::new();
    for record in records {
        match record {
            Record::Message { role: r, message } if r == role => history.push(message.clone()),
            Record::Checkpoint { role: r, history: h, .. } if r == role => history = h.clone(),
            _ => {}
        }
    }
    history
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_replaces_earlier_messages() {
        let records = vec![
            Record::Message { role: "lead".into(), message: Message::user("a") },
            Record::Message { role: "coder".into(), message: Message::user("x") },
            Record::Checkpoint {
                role: "lead".into(),
                subtype: "compaction".into(),
                history: vec![Message::user("summary")],
                archive_id: None,
            },
            Record::Message { role: "lead".into(), message: Message::assistant_text("b") },
        ];
        let h = history_of("lead", &records);
        assert_eq!(h, vec![Message::user("summary"), Message::assistant_text("b")]);
        assert_eq!(history_of("coder", &records), vec![Message::user("x")]);
    }
}
