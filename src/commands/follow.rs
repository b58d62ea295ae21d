//! Following a task: its events streamed as they happen until the task ends (`watch`, and
//! `submit --wait` and `message --wait`), each as a line (`agentd_client::render::event_line`) or
//! with `--json` as one JSON object a line.
//!
//! The exit code is the task's: 0 only when its real end is `task_finished`. An end in the history
//! that was later resumed or followed up is not the end — the daemon marks the real one — and an end
//! the daemon could not record is never a success.

use crate::exit::{self, Failure};
use crate::print::{raw, say};
use agentd_client::render::event_line;
use agentd_client::{Client, StreamItem};
use agentd_protocol::event::EndKind;
use agentd_protocol::rpc::method;
use agentd_protocol::rpc::{LogParams, LogResult, SubscribeParams};
use agentd_protocol::{EventKind, Record};

/// Streams a task's events until its terminal event; exit 0 only when it finished.
pub fn follow(client: &mut Client, task_id: &str, json: bool) -> Result<u8, Failure> {
    follow_from(client, task_id, json, false)
}

/// Like [`follow`]; with `latest`, from the last `task_message` on (a follow-up's own events).
pub fn follow_from(client: &mut Client, task_id: &str, json: bool, latest: bool) -> Result<u8, Failure> {
    let mut after = 0;
    if latest {
        let params = LogParams { task_id: task_id.to_string(), role: None, after_seq: None, limit: None };
        let log: LogResult = client.call::<method::LogGet>(params)?;
        for entry in &log.records {
            if let Record::Event { event } = &entry.record {
                if matches!(event.kind, EventKind::TaskMessage { .. }) {
                    after = event.seq.saturating_sub(1);
                }
            }
        }
    }
    client.call::<method::TaskSubscribe>(SubscribeParams {
        task_id: task_id.to_string(),
        after_seq: Some(after),
    })?;
    loop {
        // An end in the history that was later resumed or followed up is not the end: the daemon
        // marks the real one (`task.end`) after the terminal event that nothing follows.
        let event = match client.next_item()? {
            StreamItem::Event(event) => event,
            // An end the daemon could not record (its storage failed) is never a success.
            StreamItem::End(end) if !end.recorded => {
                crate::print::warn(&format!(
                    "task {task_id} ended {} but its end is not recorded: {}",
                    end.state.map_or("?", |s| s.as_str()),
                    end.error.as_deref().unwrap_or("")
                ));
                return Ok(exit::FAILED);
            }
            StreamItem::End(end) => {
                return Ok(if end.kind == EndKind::TaskFinished { exit::OK } else { exit::FAILED })
            }
        };
        if json {
            raw!("{}", serde_json::to_string(&event).unwrap_or_default());
        } else {
            say!("{}", event_line(&event));
        }
    }
}
