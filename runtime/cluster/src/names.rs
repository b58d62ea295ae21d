//! The one place each stream, bucket and subject of agentd on NATS is spelled, and how a task id or a
//! setting's key becomes a subject token or a bucket key.

/// The stream of every task's records and events.
pub const LOG_STREAM: &str = "AGENTD_LOG";
/// The subjects of [`LOG_STREAM`]: `agentd.log.<task>`.
pub const LOG_SUBJECTS: &str = "agentd.log.>";
/// Task records, by task id.
pub const TASKS_BUCKET: &str = "agentd_tasks";
/// Settings, by their key (escaped).
pub const SETTINGS_BUCKET: &str = "agentd_settings";
/// Learned windows, by server and model (escaped).
pub const WINDOWS_BUCKET: &str = "agentd_windows";
/// Evidence records, by evidence id.
pub const EVIDENCE_BUCKET: &str = "agentd_evidence";
/// Evidence bytes, by sha256.
pub const BLOBS_STORE: &str = "agentd_blobs";
/// The stream of memory changes, each with the note as it became.
pub const MEMORY_STREAM: &str = "AGENTD_MEMORY";
/// The one subject of [`MEMORY_STREAM`].
pub const MEMORY_SUBJECT: &str = "agentd.memory";
/// The header carrying a log message's record number in its task.
pub const SEQ_HEADER: &str = "Agentd-Seq";
/// The header carrying how many events a task's log holds once the message is in.
pub const EVENTS_HEADER: &str = "Agentd-Events";
/// The header carrying the lease epoch of the writer that appended the message (0: no lease).
pub const EPOCH_HEADER: &str = "Agentd-Epoch";
/// Leases on running tasks, by task id.
pub const LEASES_BUCKET: &str = "agentd_leases";
/// The work queue: tasks to start, resume or follow up, each taken by one node.
pub const QUEUE_STREAM: &str = "AGENTD_QUEUE";
/// The one subject of [`QUEUE_STREAM`].
pub const QUEUE_SUBJECT: &str = "agentd.queue";
/// The durable consumer every node pulls the queue through.
pub const QUEUE_CONSUMER: &str = "agentd-nodes";
/// The nodes' heartbeats, by node name: who is alive, what it reaches, how busy it is.
pub const NODES_BUCKET: &str = "agentd_nodes";

/// The subject a node answers requests to cancel a task it runs on.
pub fn cancel_subject(node: &str) -> String {
    format!("agentd.control.{}.cancel", token(node))
}

/// A string as a subject token or a bucket key: kept when it is only letters, digits, `-` and `_`
/// (task ids, evidence ids, note ids), else `x` and its bytes in hex — never two strings to one.
pub fn token(s: &str) -> String {
    let plain = !s.is_empty()
        && !s.starts_with('x')
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if plain {
        s.to_string()
    } else {
        let mut out = String::with_capacity(1 + 2 * s.len());
        out.push('x');
        for b in s.bytes() {
            out.push_str(&format!("{b:02x}"));
        }
        out
    }
}

/// The subject of a task's log.
pub fn log_subject(task_id: &str) -> String {
    format!("agentd.log.{}", token(task_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_plain_or_hex_and_never_collide() {
        assert_eq!(token("01a2-b_3"), "01a2-b_3");
        assert_eq!(
            token("compact_at/coder"),
            format!("x{}", "compact_at/coder".bytes().map(|b| format!("{b:02x}")).collect::<String>())
        );
        assert_ne!(token("x41"), "x41", "a plain string that looks escaped is escaped itself");
        assert_ne!(token("A"), token("x41"));
        assert_eq!(log_subject("t-1"), "agentd.log.t-1");
        assert!(!log_subject("a.b").trim_start_matches("agentd.log.").contains('.'));
    }
}
