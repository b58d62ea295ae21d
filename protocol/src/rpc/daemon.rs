//! The daemon's own state: `daemon.status` (version, uptime, running tasks, the cron jobs and their
//! runs, the store's health, where the HTTP API listens) and `clock.advance`, which moves a manual
//! clock forward so tests can drive waits and schedules.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `clock.advance`'s params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ClockParams {
    /// Milliseconds to move the clock forward.
    pub ms: u64,
}

/// What a scheduled job does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
pub enum JobAction {
    /// Re-hash every evidence blob.
    #[default]
    #[serde(rename = "evidence.verify")]
    VerifyEvidence,
    /// Write every task's log as JSON lines under `<home>/exports/`.
    #[serde(rename = "logs.export")]
    ExportLogs,
}

impl JobAction {
    /// The action's name in the configuration and in `daemon.status`.
    pub fn as_str(self) -> &'static str {
        match self {
            JobAction::VerifyEvidence => "evidence.verify",
            JobAction::ExportLogs => "logs.export",
        }
    }

    /// The action a configuration names, if any.
    pub fn parse(name: &str) -> Option<JobAction> {
        [JobAction::VerifyEvidence, JobAction::ExportLogs].into_iter().find(|a| a.as_str() == name)
    }
}

/// A cron job and how its runs went.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct JobStatus {
    /// The job's name in the configuration.
    pub name: String,
    /// The job's schedule: a cron expression with seconds (`0 0 3 * * *` is 03:00 every day).
    pub cron: String,
    /// What the job runs.
    pub action: JobAction,
    /// How many times the job has run, across restarts.
    pub runs: u64,
    /// When the last run started, RFC 3339; absent before the first.
    pub last_run_at: Option<String>,
    /// Whether the last run succeeded; absent before the first.
    pub last_ok: Option<bool>,
    /// What the last run said, in words: its summary or its error.
    pub last_outcome: Option<String>,
    /// When the job runs next, RFC 3339; absent when its schedule never fires again.
    pub next_run_at: Option<String>,
}

/// Whether the store takes writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct StorageStatus {
    /// True when the store takes writes.
    pub ok: bool,
    /// Why it does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Since when (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// Task ends held in memory until the store takes them.
    pub unrecorded_ends: u64,
}

/// `daemon.status`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DaemonStatus {
    /// The daemon's version.
    pub version: String,
    /// How long the daemon has run, in seconds.
    pub uptime_s: u64,
    /// How many tasks are being run now: started, and their runner not yet ended.
    pub tasks_running: u64,
    /// The scheduled jobs, with their last and next runs.
    pub jobs: Vec<JobStatus>,
    /// The daemon's clock, RFC 3339.
    pub clock: String,
    /// The time zone the jobs' cron expressions are read in (`[scheduler] tz`): `UTC`, a fixed
    /// offset such as `+02:00`, or `local (TZ=Europe/Paris, +02:00 now)`. Run times (`next_run_at`,
    /// `last_run_at`) are instants in RFC 3339 whatever the zone.
    pub tz: String,
    /// Whether the store takes writes, and since when it has not.
    pub storage: StorageStatus,
    /// Where the HTTP API and dashboard listen; absent when the daemon serves none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpServing>,
    /// In a fleet (`[cluster]`): this node, NATS, the live nodes and the streams' replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterStatus>,
    /// Each configured MCP server (`[mcp.servers.NAME]`), in name order, with its last start on this
    /// daemon.
    #[serde(default)]
    pub mcp: Vec<McpServerStatus>,
    /// What every task spent today (the day in `[scheduler] tz`) on this daemon's count, and the
    /// day's budget (`[budgets] day_tokens` / `day_cost`).
    #[serde(default)]
    pub today: DaySpending,
    /// The configuration the daemon runs, and whether the file on disk still says the same.
    #[serde(default)]
    pub config: ConfigStatus,
    /// Each configured provider (`[providers.NAME]`), in name order, as the daemon found it at its
    /// start (or its last reload): whether its `base_url` answers as its kind's API.
    #[serde(default)]
    pub providers: Vec<ProviderStatus>,
    /// Traces over OTLP (`[telemetry] otlp_endpoint`): where they go and how the exports fare;
    /// absent when none are exported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telemetry: Option<TelemetryStatus>,
}

/// The exports of traces to an OTLP collector since the daemon started, in `daemon.status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TelemetryStatus {
    /// Where the traces go (the whole URL, `…/v1/traces`).
    pub endpoint: String,
    /// Batches of spans the collector took.
    pub exports_ok: u64,
    /// Batches that could not be exported: the collector unreachable, or refusing them (an HTTP
    /// error); their spans are lost.
    pub exports_failed: u64,
    /// What the exporter said of the last failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// When it failed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error_at: Option<String>,
}

/// The configuration the daemon runs, in `daemon.status`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ConfigStatus {
    /// The file, `<home>/agentd.toml`.
    pub path: String,
    /// When the daemon read it (its start, or the last `agentd reload`), RFC 3339.
    pub read_at: String,
    /// True when the file on disk no longer says what the daemon runs: `agentd reload` applies it.
    pub differs: bool,
}

/// A provider as the daemon found it, in `daemon.status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ProviderStatus {
    /// Its name (`[providers.NAME]`).
    pub name: String,
    /// Its kind (`openai`, `anthropic`, `ollama`, `openai-responses`).
    pub kind: String,
    /// Its `base_url`.
    pub base_url: String,
    /// Whether `GET {base_url}/models` answered as the kind's API; absent while it is being asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<bool>,
    /// What answered, in words (the models listed, or what was wrong).
    pub detail: String,
}

/// When a change to `agentd.toml` takes effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ConfigApplies {
    /// From the next turn of every task (a running turn keeps the settings it started with), and
    /// for every task started later.
    Now,
    /// At the daemon's next start: `[http]`, `[cluster]`, `[scheduler]` and `[telemetry]` set up
    /// what is made once.
    NextStart,
}

impl ConfigApplies {
    /// The name on the wire: `now` or `next_start`.
    pub fn as_str(self) -> &'static str {
        match self {
            ConfigApplies::Now => "now",
            ConfigApplies::NextStart => "next_start",
        }
    }
}

/// One key of `agentd.toml` that a reload found changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ConfigChange {
    /// The key, dotted (`providers.local.base_url`).
    pub key: String,
    /// Its value before, as TOML writes it; absent when the key is new.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
    /// Its value now; absent when the key was removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// When it takes effect.
    pub applies: ConfigApplies,
}

/// `daemon.reload`'s answer: the file read, and what changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ReloadResult {
    /// The file, `<home>/agentd.toml`.
    pub path: String,
    /// Each key whose value changed, in key order; empty when nothing did.
    pub changes: Vec<ConfigChange>,
}

/// A day's spending, in `daemon.status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DaySpending {
    /// The day, `YYYY-MM-DD`.
    pub day: String,
    /// Every task's requests that day: tokens and, where priced, cost.
    pub spent: crate::budget::Amount,
    /// The day's budget; absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::budget::Budget>,
    /// When the next day begins, RFC 3339: when tasks paused on the day's budget go on.
    #[serde(default)]
    pub next_day_at: String,
}

/// A configured MCP server, in `daemon.status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct McpServerStatus {
    /// Its name (`[mcp.servers.NAME]`).
    pub server: String,
    /// `stdio` (a program agentd starts per task) or `http` (a running server).
    pub transport: String,
    /// The command line, or the URL.
    pub target: String,
    /// The roles that get its tools.
    pub roles: Vec<crate::role::Role>,
    /// Its last start on this daemon; absent until a task has used it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_start: Option<McpStart>,
}

/// An MCP server's start, in `daemon.status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct McpStart {
    /// When, RFC 3339.
    pub at: String,
    /// The task it started for.
    pub task_id: String,
    /// Whether it started and listed its tools.
    pub ok: bool,
    /// How many tools it offers, when it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<u32>,
    /// Why it did not start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The fleet as one daemon sees it, in `daemon.status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ClusterStatus {
    /// This daemon's node name.
    pub node: String,
    /// The NATS servers configured (`[cluster] nats`).
    pub servers: Vec<String>,
    /// Whether the connection to NATS is up now.
    pub connected: bool,
    /// The live nodes (a heartbeat within one lease), by name.
    pub nodes: Vec<NodeStatus>,
    /// agentd's streams, each with its replicas' health.
    pub streams: Vec<StreamStatus>,
    /// Why the fleet could not be read just now (NATS down, JetStream without a quorum): appends and
    /// leases fail meanwhile, and running tasks stop until they can be resumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The daemon is still joining the fleet (`serve` waits for NATS and JetStream, up to `[cluster]
    /// start_timeout`): why not yet — what the last attempt met, and when the next one is. Every
    /// method but `daemon.status` is refused meanwhile (-32003, saying so). Absent once joined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starting: Option<String>,
}

/// A live node of the fleet, from its heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NodeStatus {
    /// Its name.
    pub node: String,
    /// How many tasks it runs.
    pub running: u64,
    /// How many it runs at once at most.
    pub max_tasks: u64,
    /// The workspace roots it reaches.
    pub workspaces: Vec<String>,
    /// Its last heartbeat, RFC 3339.
    pub seen_at: String,
}

/// One of agentd's JetStream streams, in `daemon.status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct StreamStatus {
    /// The stream (`AGENTD_LOG`).
    pub name: String,
    /// Replicas configured.
    pub replicas: u64,
    /// The server leading it, when clustered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<String>,
    /// Replicas (besides the leader) that are current.
    pub current: u64,
    /// Replicas (besides the leader) offline or behind, by server name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lagging: Vec<String>,
}

/// The daemon's HTTP server, in `daemon.status`: what `agentd dashboard` builds its URL from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct HttpServing {
    /// The address it is bound to (`127.0.0.1:7878`; the real port when port 0 was asked for).
    pub listen: String,
}

/// `clock.advance`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ClockResult {
    /// The daemon's clock after the move, RFC 3339.
    pub now: String,
}
