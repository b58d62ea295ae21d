//! What can go wrong between agentd and JetStream, each naming what it was doing.

/// A call to NATS that failed, or an answer that made no sense.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The client's runtime could not be started.
    #[error("cannot start the NATS client's runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The client's runtime is gone (the storage is being dropped).
    #[error("the NATS client has stopped")]
    Stopped,
    /// No NATS server answered at any of the URLs.
    #[error("cannot connect to NATS at {urls}: {message}")]
    Connect {
        /// The URLs tried, comma-separated.
        urls: String,
        /// Why.
        message: String,
    },
    /// A JetStream operation failed.
    #[error("{what}: {message}")]
    JetStream {
        /// What was being done (`appending to the log of task T`, `creating bucket B` …).
        what: String,
        /// The client's error.
        message: String,
    },
    /// Another writer appended to the task's log since this one last read it: the append is
    /// refused, so the log keeps one order (the fencing of a fleet rests on it).
    #[error("the log of task {task_id} moved on under another writer (expected it at {expected}); nothing was appended")]
    Conflict {
        /// The task.
        task_id: String,
        /// The stream sequence this writer expected last on the task's subject.
        expected: u64,
    },
    /// The task was taken over by a writer with a newer lease: this one may not append to it again.
    #[error(
        "task {task_id} was taken over (lease epoch {newer}, this writer's {epoch}); nothing was appended"
    )]
    Fenced {
        /// The task.
        task_id: String,
        /// This writer's lease epoch.
        epoch: u64,
        /// The newer epoch in the log.
        newer: u64,
    },
    /// The lease is held by another node and has not lapsed.
    #[error("task {task_id} is leased to {holder} until {until_ms} ms since the epoch")]
    Held {
        /// The task.
        task_id: String,
        /// The node holding it.
        holder: String,
        /// When its lease lapses unless renewed.
        until_ms: u64,
    },
    /// The lease was lost: it lapsed and another node took it (or it was released).
    #[error("the lease on task {task_id} was lost (epoch {epoch})")]
    LeaseLost {
        /// The task.
        task_id: String,
        /// The epoch this node held.
        epoch: u64,
    },
    /// Another daemon runs under this node name (its heartbeat is fresh).
    #[error("node name {node:?} is taken: another daemon of the fleet runs under it (its heartbeat at {at_ms} ms since the epoch); give this one another [cluster] node")]
    NodeTaken {
        /// The name.
        node: String,
        /// When the other daemon last beat.
        at_ms: u64,
    },
    /// A stored value that does not decode.
    #[error("corrupt {what}: {source}")]
    Corrupt {
        /// What it was (`record 3 of task T`, `task T` …).
        what: String,
        /// Why it does not decode.
        source: serde_json::Error,
    },
    /// Stored bytes that no longer hash to their name.
    #[error("{what} is altered: its bytes hash to {actual}")]
    Altered {
        /// What it was (`checkpoint object …`).
        what: String,
        /// The sha256 its bytes hash to.
        actual: String,
    },
}

impl ClusterError {
    /// Whether this is trouble that passes by itself: a request that timed out, or found no
    /// responders (a server down, a stream's leader being elected). What the client says is all
    /// there is to judge by: its error kinds differ per call.
    pub fn is_passing(&self) -> bool {
        self.jetstream_says(&[
            "timed out",
            "no responders",
            "503",
            "disconnected",
            "connection",
            "no stream found",
        ])
    }

    /// No NATS server answered at the URLs (refused, timed out, a name that does not resolve yet) —
    /// servers still starting, as at a reboot — rather than one that answered and refused the login,
    /// the TLS or the URL itself.
    pub fn is_unreachable(&self) -> bool {
        match self {
            ClusterError::Connect { message, .. } => !says(
                message,
                &["authoriz", "not a nats server url", "tls", "certificate", "credential", "permission"],
            ),
            _ => false,
        }
    }

    /// A cluster still forming: not all its servers have met yet ("no suitable peers for placement",
    /// 10005, with fewer servers known than replicas asked), JetStream not up or without a meta
    /// leader yet ("temporarily unavailable", 10008). Steady, it would be a configuration that asks
    /// for more replicas than servers: waited out for the start's limit, then said.
    pub fn is_forming(&self) -> bool {
        self.jetstream_says(&[
            "10005",
            "no suitable peers",
            "10008",
            "temporarily unavailable",
            "jetstream not enabled",
        ])
    }

    /// Another daemon is making the same stream or bucket at this moment (JetStream's 10058, "stream
    /// name already in use with a different configuration", while its change lands): reading it again
    /// finds the one configuration.
    pub fn is_converging(&self) -> bool {
        self.jetstream_says(&["10058", "already in use"])
    }

    /// A JetStream failure whose message says one of `words` (lower case).
    fn jetstream_says(&self, words: &[&str]) -> bool {
        matches!(self, ClusterError::JetStream { message, .. } if says(message, words))
    }

    /// A JetStream failure while doing `what`.
    pub fn js(what: impl Into<String>, e: impl std::fmt::Display) -> ClusterError {
        ClusterError::JetStream { what: what.into(), message: e.to_string() }
    }
}

/// Whether `message` says one of `words` (lower case), whatever its case.
fn says(message: &str, words: &[&str]) -> bool {
    let m = message.to_ascii_lowercase();
    words.iter().any(|w| m.contains(w))
}
