//! The file as it is written: one serde struct per table of `agentd.toml`, every field as the user
//! typed it. Unknown keys are refused here (`deny_unknown_fields`), wrong types too; whether a value
//! is acceptable is each section's validation's question, answered when the raw file becomes a
//! [`Config`](super::Config).

use agentd_protocol::{Role, ToolName};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The whole file: `team` is required, every other table optional.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    #[serde(default)]
    pub(super) providers: BTreeMap<String, RawProvider>,
    pub(super) team: RawTeam,
    #[serde(default)]
    pub(super) retry: RawRetry,
    #[serde(default)]
    pub(super) scheduler: Option<RawScheduler>,
    #[serde(default)]
    pub(super) tools: RawTools,
    #[serde(default)]
    pub(super) requests: RawRequests,
    #[serde(default)]
    pub(super) secrets: RawSecrets,
    #[serde(default)]
    pub(super) http: RawHttp,
    #[serde(default)]
    pub(super) mcp: RawMcp,
    #[serde(default)]
    pub(super) instructions: RawInstructions,
    #[serde(default)]
    pub(super) memory: RawMemory,
    #[serde(default)]
    pub(super) cluster: Option<RawCluster>,
    #[serde(default)]
    pub(super) prices: BTreeMap<String, RawPrice>,
    #[serde(default)]
    pub(super) budgets: RawBudgets,
    #[serde(default)]
    pub(super) checkpoints: RawCheckpoints,
    #[serde(default)]
    pub(super) acp: RawAcp,
    #[serde(default)]
    pub(super) telemetry: RawTelemetry,
}

/// `[telemetry]`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTelemetry {
    pub(super) otlp_endpoint: Option<String>,
    pub(super) include_content: Option<bool>,
}

/// `[acp]`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAcp {
    #[serde(default)]
    pub(super) ask: Vec<String>,
}

/// `[checkpoints]`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCheckpoints {
    pub(super) max_bytes: Option<i64>,
}

/// `[budgets]`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBudgets {
    pub(super) task_tokens: Option<i64>,
    pub(super) task_cost: Option<f64>,
    pub(super) day_tokens: Option<i64>,
    pub(super) day_cost: Option<f64>,
}

/// `[prices."MODEL"]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPrice {
    pub(super) input: Option<f64>,
    pub(super) cached_input: Option<f64>,
    pub(super) cache_write: Option<f64>,
    pub(super) output: Option<f64>,
}

/// `[cluster]`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCluster {
    pub(super) nats: Option<Vec<String>>,
    pub(super) node: Option<String>,
    pub(super) max_tasks: Option<u64>,
    pub(super) workspaces: Option<Vec<PathBuf>>,
    pub(super) replicas: Option<u64>,
    pub(super) lease: Option<String>,
    pub(super) start_timeout: Option<String>,
    pub(super) credentials: Option<PathBuf>,
    pub(super) token_env: Option<String>,
    pub(super) user: Option<String>,
    pub(super) password_env: Option<String>,
    pub(super) tls_ca: Option<PathBuf>,
    pub(super) tls_cert: Option<PathBuf>,
    pub(super) tls_key: Option<PathBuf>,
    pub(super) tls_required: Option<bool>,
}

/// `[instructions]`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawInstructions {
    pub(super) files: Option<Vec<String>>,
    pub(super) max_percent: Option<u8>,
}

/// `[memory]`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMemory {
    pub(super) enabled: Option<bool>,
    pub(super) max_percent: Option<u8>,
    pub(super) max_note_chars: Option<i64>,
}

/// `[http]`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHttp {
    pub(super) listen: Option<String>,
    pub(super) keep_alive: Option<String>,
    pub(super) metrics_public: Option<bool>,
}

/// `[mcp]`: its servers, by name.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMcp {
    #[serde(default)]
    pub(super) servers: BTreeMap<String, RawMcpServer>,
}

/// `[mcp.servers.NAME]`: a stdio server's keys and an HTTP server's, told apart when validated.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMcpServer {
    pub(super) command: Option<String>,
    pub(super) args: Option<Vec<String>>,
    pub(super) env: Option<Vec<String>>,
    pub(super) network: Option<bool>,
    pub(super) read: Option<Vec<String>>,
    pub(super) sandbox: Option<bool>,
    pub(super) url: Option<String>,
    pub(super) bearer_env: Option<String>,
    pub(super) roles: Option<Vec<Role>>,
    pub(super) tools: Option<Vec<String>>,
    pub(super) timeout: Option<String>,
    pub(super) writes: Option<bool>,
}

/// `[secrets]`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSecrets {
    #[serde(default)]
    pub(super) env: Vec<String>,
}

/// `[providers.NAME]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProvider {
    pub(super) kind: String,
    pub(super) base_url: String,
    pub(super) api_key_env: Option<String>,
    pub(super) cache: Option<RawCacheSetting>,
    pub(super) max_concurrent: Option<i64>,
}

/// `[providers.NAME] cache = { read_factor, min_tokens }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCache {
    pub(super) read_factor: f64,
    pub(super) min_tokens: Option<u64>,
}

/// A provider's `cache`: declared (`{ read_factor, min_tokens }`) or `false` (none at all).
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum RawCacheSetting {
    Off(bool),
    Declared(RawCache),
}

/// `[team]`: the two fixed roles and the specialists, by name.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTeam {
    pub(super) lead: RawRole,
    pub(super) coder: RawRole,
    #[serde(default)]
    pub(super) specialists: BTreeMap<String, RawRole>,
    pub(super) stall: Option<RawStall>,
}

/// `[team.stall]`: when an agent counts as going in circles.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStall {
    pub(super) repeats: Option<i64>,
    pub(super) idle_requests: Option<i64>,
}

/// `[team.lead]`, `[team.coder]` or `[team.specialists.NAME]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRole {
    pub(super) provider: String,
    pub(super) model: String,
    pub(super) compact_at: Option<i64>,
    pub(super) verify: Option<String>,
    pub(super) prompt: Option<String>,
    pub(super) tools: Option<Vec<ToolName>>,
    pub(super) thinking_budget: Option<i64>,
    pub(super) max_output_tokens: Option<i64>,
    pub(super) compaction: Option<RawSummariser>,
    pub(super) max_instances: Option<i64>,
    pub(super) delegation_budget_tokens: Option<i64>,
    pub(super) delegation_deadline: Option<String>,
}

/// A role's `compaction = { provider, model }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSummariser {
    pub(super) provider: String,
    pub(super) model: String,
}

/// `[retry]`: one schedule per kind of failure.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRetry {
    pub(super) rate_limit: Option<RawSchedule>,
    pub(super) stream_anomaly: Option<RawSchedule>,
    pub(super) server_error: Option<RawSchedule>,
    pub(super) overloaded: Option<RawSchedule>,
}

/// `[requests]`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRequests {
    pub(super) idle_timeout: Option<String>,
    pub(super) timeout: Option<String>,
}

/// One retry schedule, such as `rate_limit = { attempts = 10, delay = "60s" }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSchedule {
    pub(super) attempts: Option<u32>,
    pub(super) delay: Option<String>,
}

/// `[scheduler]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawScheduler {
    pub(super) idle_thinking_cleanup_after: Option<String>,
    pub(super) idle_thinking_clear_at_least: Option<u64>,
    pub(super) tz: Option<String>,
    #[serde(default)]
    pub(super) jobs: Vec<RawJob>,
}

/// One `[[scheduler.jobs]]` entry.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawJob {
    pub(super) name: String,
    pub(super) cron: String,
    pub(super) action: String,
}

/// `[tools]`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTools {
    pub(super) command_timeout: Option<String>,
    pub(super) sandbox: Option<RawSandbox>,
    pub(super) copies: Option<PathBuf>,
}

/// `[tools.sandbox]`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSandbox {
    pub(super) mode: Option<String>,
    pub(super) network: Option<bool>,
    #[serde(default)]
    pub(super) env: Vec<String>,
    #[serde(default)]
    pub(super) read: Vec<PathBuf>,
}
