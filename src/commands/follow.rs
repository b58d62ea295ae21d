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
    on_ctrl_c(task_id);
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

/// Ctrl-C while following leaves the task running (the daemon runs it, not this command): said on
/// stderr with the commands that follow it again or stop it, exit 130 (interrupted), as `docker
/// logs -f` and `gh run watch` leave their runs.
fn on_ctrl_c(task_id: &str) {
    let said = format!(
        "\nagentd: stopped following task {task_id}; it runs on. `agentd watch {task_id}` follows it \
         again, `agentd cancel {task_id}` stops it."
    );
    let waiting = std::thread::Builder::new().name("ctrl-c".into()).spawn(move || {
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
        if runtime.block_on(tokio::signal::ctrl_c()).is_ok() {
            crate::print::warn(&said);
            std::process::exit(i32::from(exit::INTERRUPTED));
        }
    });
    if let Err(e) = waiting {
        tracing::debug!(error = %e, "no Ctrl-C handler: an interrupt ends the command plainly");
    }
}
