//! A role's active history, rebuilt from the task's log. The log is append-only: a role's messages
//! are appended one by one, and a checkpoint record (a compaction, a thinking cleanup, a repair)
//! replaces everything the role had before it. So the history is the latest checkpoint of the role
//! plus every later message record of that role; other roles' records and non-message records
//! (settings, events, receipts) do not take part.

use agentd_protocol::message::Message;
use agentd_protocol::record::Record;
use agentd_protocol::Role;

/// Rebuilds a role's active history from its records: the latest checkpoint, then every later message.
pub fn history_of<'a>(role: &Role, records: impl IntoIterator<Item = &'a Record>) -> Vec<Message> {
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
    use agentd_protocol::record::CheckpointKind;

    #[test]
    fn checkpoint_replaces_earlier_messages() {
        let records = vec![
            Record::Message { role: Role::Lead, message: Message::user("a") },
            Record::Message { role: Role::Coder, message: Message::user("x") },
            Record::Checkpoint {
                role: Role::Lead,
                subtype: CheckpointKind::Compaction,
                history: vec![Message::user("summary")],
                archive_id: None,
            },
            Record::Message { role: Role::Lead, message: Message::assistant_text("b") },
        ];
        let h = history_of(&Role::Lead, &records);
        assert_eq!(h, vec![Message::user("summary"), Message::assistant_text("b")]);
        assert_eq!(history_of(&Role::Coder, &records), vec![Message::user("x")]);
    }
}
