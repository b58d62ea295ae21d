//! `GET /metrics`: the daemon's counters in the Prometheus text format (OpenMetrics 1.0, written by
//! the `prometheus-client` crate), for the monitoring a team already runs.
//!
//! The counters are a fold over the events this daemon publishes, from its start (a restart starts
//! them again, as Prometheus expects of a counter); the tasks by state are read from the store at
//! each scrape.
//!
//! | metric | labels | from |
//! |---|---|---|
//! | `agentd_tasks` (gauge) | `state` | the store, at the scrape |
//! | `agentd_requests_total` | `role` | `request_sent` |
//! | `agentd_responses_total` | `model`, `role` | `response_received` |
//! | `agentd_tokens_total` | `model`, `role`, `kind` (`prompt`, `cached`, `completion`) | `response_received`'s usage, and a compaction's summary usage (`role` the compacted one) |
//! | `agentd_cost_usd_total` | `model`, `role` | the answers' and summaries' `cost_usd` |
//! | `agentd_compactions_total` | `role`, `outcome` (`finished`, `failed`) | `compaction_finished`, `compaction_failed` |
//! | `agentd_windows_learned_total` | `source` (`declared`, `error`, `usage`) | `window_learned` (a refusal's stated limit is `error`) |
//! | `agentd_retries_total` | `reason` | `retry_scheduled` |
//! | `agentd_usage_limit_waits_total` | `reason` | `usage_limit_wait` |
//! | `agentd_budget_pauses_total` | `scope` | `budget_reached` |
//! | `agentd_tool_calls_total` | `tool`, `ok` | `tool_finished` (MCP tools as `mcp`) |
//! | `agentd_mcp_server_failures_total` | `server` | `mcp_server_failed` |
//! | `agentd_permission_refusals_total` | — | `permission_answered` with `allowed: false` |
//! | `agentd_fleet_takeovers_total` | — | `task_resumed` on another node (with `after`) |
//! | `agentd_otlp_exports_total` | — | batches of spans the OTLP collector took (`[telemetry]`; [`crate::telemetry::Exports`]) |
//! | `agentd_otlp_export_failures_total` | — | batches that could not be exported: the collector unreachable or refusing them |

use agentd_protocol::event::{Event, EventKind};
use agentd_protocol::task::TaskMeta;
use agentd_protocol::usage::Usage;
use agentd_protocol::TaskState;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::broadcast;

/// The content type of the answer.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelRole {
    model: String,
    role: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenKind {
    model: String,
    role: String,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RoleOutcome {
    role: String,
    outcome: &'static str,
}

/// Label sets of one label each, named as the metric's table says.
macro_rules! one_label {
    ($($name:ident($label:ident)),* $(,)?) => {$(
        #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
        struct $name {
            $label: String,
        }
    )*};
}

one_label!(State(state), RoleOf(role), Source(source), Reason(reason), Scope(scope), Server(server));

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolOk {
    tool: String,
    ok: &'static str,
}

/// The daemon's counters, and the registry that writes them.
pub struct Metrics {
    registry: Registry,
    tasks: Family<State, Gauge>,
    requests: Family<RoleOf, Counter>,
    responses: Family<ModelRole, Counter>,
    tokens: Family<TokenKind, Counter>,
    cost: Family<ModelRole, Counter<f64, AtomicU64>>,
    compactions: Family<RoleOutcome, Counter>,
    windows: Family<Source, Counter>,
    retries: Family<Reason, Counter>,
    waits: Family<Reason, Counter>,
    budgets: Family<Scope, Counter>,
    usage_refused: Family<RoleOf, Counter>,
    tools: Family<ToolOk, Counter>,
    mcp: Family<Server, Counter>,
    refusals: Counter,
    takeovers: Counter,
}

/// Every state a task may be in, so that each is written (0 when no task is in it).
const STATES: [TaskState; 9] = [
    TaskState::Queued,
    TaskState::Running,
    TaskState::WaitingRetry,
    TaskState::Waiting,
    TaskState::Paused,
    TaskState::Finished,
    TaskState::Failed,
    TaskState::Cancelled,
    TaskState::Interrupted,
];

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// A metric registered under `name` with its help, and kept.
macro_rules! registered {
    ($registry:expr, $name:literal, $help:literal, $metric:expr) => {{
        let metric = $metric;
        $registry.register($name, $help, metric.clone());
        metric
    }};
}

impl Metrics {
    /// Every metric at zero, no traces exported.
    pub fn new() -> Metrics {
        Metrics::with_exports(&crate::telemetry::Exports::default())
    }

    /// Every metric at zero, and the counts of `exports` (0 while no traces are exported).
    pub fn with_exports(exports: &crate::telemetry::Exports) -> Metrics {
        let mut r = Registry::with_prefix("agentd");
        let (exported, failed) = exports.counters();
        r.register("otlp_exports", "Batches of spans the OTLP collector took", exported);
        r.register(
            "otlp_export_failures",
            "Batches of spans that could not be exported: the collector unreachable or refusing them",
            failed,
        );
        Metrics {
            tasks: registered!(
                r,
                "tasks",
                "Tasks by state, read from the store at the scrape",
                Family::default()
            ),
            requests: registered!(r, "requests", "Model requests sent, by role", Family::default()),
            responses: registered!(
                r,
                "responses",
                "Model answers received, by model and role",
                Family::default()
            ),
            tokens: registered!(
                r,
                "tokens",
                "Tokens by the providers' usage reports: prompt (cached included), cached, completion",
                Family::default()
            ),
            cost: registered!(
                r,
                "cost_usd",
                "What the answers and summaries cost, in USD",
                Family::default()
            ),
            compactions: registered!(r, "compactions", "Compactions, by role and outcome", Family::default()),
            windows: registered!(
                r,
                "windows_learned",
                "Context windows learned, by source",
                Family::default()
            ),
            retries: registered!(
                r,
                "retries",
                "Requests scheduled for a retry, by reason",
                Family::default()
            ),
            waits: registered!(
                r,
                "usage_limit_waits",
                "Tasks waiting out a provider's usage limit",
                Family::default()
            ),
            budgets: registered!(r, "budget_pauses", "Tasks paused at a budget, by scope", Family::default()),
            usage_refused: registered!(
                r,
                "usage_reports_refused",
                "Providers' usage reports not believed (what was sent counted instead), by role",
                Family::default()
            ),
            tools: registered!(
                r,
                "tool_calls",
                "Tool calls that ended, by tool and outcome",
                Family::default()
            ),
            mcp: registered!(r, "mcp_server_failures", "MCP server failures, by server", Family::default()),
            refusals: registered!(
                r,
                "permission_refusals",
                "Calls the task's client refused",
                Counter::default()
            ),
            takeovers: registered!(
                r,
                "fleet_takeovers",
                "Tasks taken over from another node",
                Counter::default()
            ),
            registry: r,
        }
    }

    /// Counts what `event` says.
    pub fn observe(&self, event: &Event) {
        let role = event.role.to_string();
        match &event.kind {
            EventKind::RequestSent { .. } => {
                self.requests.get_or_create(&RoleOf { role }).inc();
            }
            EventKind::ResponseReceived { usage, model, cost_usd, .. } => {
                let model = model.clone().unwrap_or_default();
                self.responses.get_or_create(&ModelRole { model: model.clone(), role: role.clone() }).inc();
                self.usage(&model, &role, usage.as_ref(), *cost_usd);
            }
            EventKind::CompactionFinished { summary_model, summary_usage, cost_usd, .. } => {
                self.compactions
                    .get_or_create(&RoleOutcome { role: role.clone(), outcome: "finished" })
                    .inc();
                self.usage(
                    &summary_model.clone().unwrap_or_default(),
                    &role,
                    summary_usage.as_ref(),
                    *cost_usd,
                );
            }
            EventKind::CompactionFailed { .. } => {
                self.compactions.get_or_create(&RoleOutcome { role, outcome: "failed" }).inc();
            }
            EventKind::CompactionRefused { .. } => {
                self.compactions.get_or_create(&RoleOutcome { role, outcome: "refused" }).inc();
            }
            EventKind::WindowLearned { source, .. } => {
                self.windows.get_or_create(&Source { source: source.as_str().into() }).inc();
            }
            EventKind::RetryScheduled { reason, .. } => {
                self.retries.get_or_create(&Reason { reason: reason.clone() }).inc();
            }
            EventKind::UsageLimitWait { reason, .. } => {
                self.waits.get_or_create(&Reason { reason: reason.clone() }).inc();
            }
            EventKind::UsageRefused { .. } => {
                self.usage_refused.get_or_create(&RoleOf { role }).inc();
            }
            EventKind::BudgetReached { scope, .. } => {
                self.budgets.get_or_create(&Scope { scope: scope.as_str().into() }).inc();
            }
            EventKind::ToolFinished { tool, ok, .. } => {
                let tool = if tool.mcp().is_some() { "mcp".to_string() } else { tool.as_str().to_string() };
                self.tools.get_or_create(&ToolOk { tool, ok: if *ok { "true" } else { "false" } }).inc();
            }
            EventKind::McpServerFailed { server, .. } => {
                self.mcp.get_or_create(&Server { server: server.clone() }).inc();
            }
            EventKind::PermissionAnswered { allowed: false, .. } => {
                self.refusals.inc();
            }
            EventKind::TaskResumed { after: Some(_), .. } => {
                self.takeovers.inc();
            }
            _ => {}
        }
    }

    fn usage(&self, model: &str, role: &str, usage: Option<&Usage>, cost: Option<f64>) {
        if let Some(u) = usage {
            for (kind, n) in [
                ("prompt", u.prompt_tokens),
                ("cached", u.cache_read_tokens),
                ("completion", u.completion_tokens),
            ] {
                let labels = TokenKind { model: model.to_string(), role: role.to_string(), kind };
                // Saturating: a counter that wrapped would read as a reset to a scraper.
                let counter = self.tokens.get_or_create(&labels);
                let _ = counter.inner().fetch_update(Ordering::Relaxed, Ordering::Relaxed, |total| {
                    Some(total.saturating_add(n))
                });
            }
        }
        if let Some(c) = cost.filter(|c| c.is_finite() && *c > 0.0) {
            self.cost
                .get_or_create(&ModelRole { model: model.to_string(), role: role.to_string() })
                .inc_by(c);
        }
    }

    /// The text of a scrape, with the tasks by state counted from `tasks`.
    pub fn render(&self, tasks: &[TaskMeta]) -> String {
        for state in STATES {
            let n = tasks.iter().filter(|t| t.state == state).count();
            self.tasks
                .get_or_create(&State { state: state.as_str().to_string() })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        let mut text = String::new();
        // Writing to a String does not fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }

    /// Counts every event published on `live` from now on, until the channel closes; a burst the
    /// counter could not keep up with is logged (the counters then undercount it).
    pub fn follow(self: Arc<Self>, mut live: broadcast::Receiver<Event>) {
        tokio::spawn(async move {
            loop {
                match live.recv().await {
                    Ok(event) => self.observe(&event),
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!(missed = n, "the metrics missed events in a burst")
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
    }
}

#[cfg(test)]
mod tests;
