//! The `task.*` methods' params and results: submitting a task, listing and inspecting tasks,
//! stopping, resuming and following one up, and reading its events — by subscription
//! (`task.subscribe`, then notifications) or by polling (`task.events`).

use crate::budget::{cost_sum, Amount, Budget};
use crate::event::{Event, EventKind};
use crate::role::Role;
use crate::task::TaskState;
use crate::tokens::{CountSource, Standing, Tokens};
use crate::usage::Usage;
use crate::window::WindowSource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `task.submit`'s params: what to do, and where.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SubmitParams {
    /// What the team is to do; not empty.
    #[schemars(length(min = 1), pattern(crate::text::NOT_BLANK))]
    pub objective: String,
    /// An absolute, existing directory that is not the root, a system directory or agentd's home.
    #[schemars(pattern(crate::text::ABSOLUTE_PATH))]
    pub workspace: String,
    /// A team name, kept with the task: `default`, the one team a daemon runs (another is refused
    /// with -32602).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["default", null]))]
    pub team: Option<String>,
    /// The task's budget, over `[budgets] task_tokens` / `task_cost`: its next request is not sent when
    /// it would cross it, and the task is `paused`. Each figure above 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// The id the task is to have, when the client names it before the task exists (an editor's
    /// session, `agentd acp`): a hyphenated UUID, refused with -32602 when malformed and -32003
    /// when already a task's.
    /// Absent: the daemon makes one (a UUID v7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "uuid"), pattern(crate::text::UUID))]
    pub task_id: Option<String>,
    /// Tools whose calls wait for the client's answer before they run: each such call is a
    /// `permission_asked` event, answered with `task.permit` (unanswered within 10 minutes, it is
    /// refused). For a client that can ask its user, as `agentd acp` does with `[acp] ask`.
    /// Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("items" = {"type": "string", "pattern": crate::text::ASKABLE_TOOL_PATTERN, "maxLength": 64}))]
    pub ask: Vec<crate::tool::ToolName>,
}

/// `task.resume`'s params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ResumeParams {
    /// The task's id; an unknown one is refused with -32001.
    pub task_id: String,
    /// A new budget for the task (each figure given replaces the task's; above what it spent): how a
    /// task `paused` on its budget goes on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
}

/// Params naming one task (`task.status`, `task.cancel`, `task.resume`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TaskRef {
    /// The task's id, as `task.submit` returned it; an unknown one is refused with -32001.
    pub task_id: String,
}

/// `task.message`'s params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MessageParams {
    /// The stopped task to follow up (finished, failed or interrupted; a cancelled task is refused with
    /// -32003).
    pub task_id: String,
    /// The follow-up, taken by the lead as a new user message; not empty.
    #[schemars(length(min = 1), pattern(crate::text::NOT_BLANK))]
    pub text: String,
}

/// `task.permit`'s params: the answer to a `permission_asked`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PermitParams {
    /// The running task; an unknown one is refused with -32001.
    pub task_id: String,
    /// The call waiting, as its `permission_asked` names it; one that waits for no answer (never
    /// asked, answered already, or its wait over) is refused with -32003.
    pub call_id: String,
    /// Whether the call may run.
    pub allow: bool,
    /// Why not, for the model to read (default: `rejected by the user`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `task.permit`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PermitResult {
    /// The call answered.
    pub call_id: String,
    /// What it was answered.
    pub allowed: bool,
}

/// The longest focus a compaction takes, in characters: it goes into every summary request.
pub const MAX_FOCUS_CHARS: usize = 2_000;

/// `task.compact`'s params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CompactParams {
    /// The task.
    pub task_id: String,
    /// Whose history to compact (default: the lead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// What the summary is to keep in particular ("keep the parser details"), given to the summariser;
    /// at most [`MAX_FOCUS_CHARS`] characters (-32602 naming `focus` past it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_FOCUS_CHARS))]
    pub focus: Option<String>,
}

/// `task.compact`'s result: the compaction made (a stopped task), or scheduled (a running one: made
/// before the role's next request, or when the run ends if it makes none — `compaction_finished` or
/// `compaction_failed` says how it went).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CompactResult {
    /// The role compacted.
    pub role: Role,
    /// True when the task is running and the compaction is yet to be made.
    pub scheduled: bool,
    /// The request's size before, when made now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_before: Option<Tokens>,
    /// The rebuilt request's size, when made now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_after: Option<Tokens>,
    /// The evidence holding what left the request, when made now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive_id: Option<String>,
}

/// `task.subscribe`'s params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SubscribeParams {
    /// The task to follow.
    pub task_id: String,
    /// Replay starts after this event (0 or absent: from the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_seq: Option<u64>,
}

/// `task.events`' params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EventsParams {
    /// The task.
    pub task_id: String,
    /// Events after this seq (0 or absent: from the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_seq: Option<u64>,
    /// At most this many events (default 100, at most 1,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
}

/// `task.submit`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Submitted {
    /// A UUID v7.
    pub task_id: String,
}

/// One line of `task.list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskSummary {
    /// The task's id (a UUID v7).
    pub task_id: String,
    /// The task's state: the real one, even while its end is not recorded.
    pub state: TaskState,
    /// What the team was asked to do.
    pub objective: String,
    /// When the task was submitted, RFC 3339.
    pub created_at: String,
    /// False while the task's end is held in memory because the store could not take it.
    pub recorded: bool,
    /// With `recorded: false`: the task's error and why its end is not recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// In a fleet: the node running the task, or that last ran it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// What the task spent: tokens and, where priced, cost.
    #[serde(default)]
    pub spent: Amount,
    /// The task's budget in force (its own over `[budgets]`'s); absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// While the task runs (or waits): the agents running its open delegations (`coder`, `coder#2`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub branches: Vec<Role>,
}

/// A role's last measured request, in `task.status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RoleStatus {
    /// The request's size as the fitter measured it (calibrated when usage reports exist).
    pub tokens: Tokens,
    /// True when no tokenizer of the model's own measured it; shown as `~`.
    pub estimated: bool,
    /// The model's context window, in tokens.
    pub window: Tokens,
    /// Where `window` came from.
    pub window_source: WindowSource,
    /// What counted the request: `tiktoken`, `endpoint` or `estimate`.
    pub count_source: CountSource,
    /// How the server's usage reports have calibrated the count; absent until one has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<Standing>,
    /// The measure in words.
    #[serde(default)]
    pub measured_by: String,
}

/// `task.status`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskStatus {
    /// The task's id (a UUID v7).
    pub task_id: String,
    /// The task's state: the real one, even while its end is not recorded.
    pub state: TaskState,
    /// What the team was asked to do.
    pub objective: String,
    /// The workspace directory, absolute, as submitted.
    pub workspace: String,
    /// When the task was submitted, RFC 3339.
    pub created_at: String,
    /// When the task's record last changed, RFC 3339.
    pub updated_at: String,
    /// The roles that have made a request since the daemon started.
    pub roles: BTreeMap<Role, RoleStatus>,
    /// The lead's `finish` summary, once the task finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// What made the task fail, while it is `failed`; with `recorded: false`, also why its end is not
    /// recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// False while the task's end is held in memory because the store could not take it.
    pub recorded: bool,
    /// With `recorded: false`: why the end could not be recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record_error: Option<String>,
    /// In a fleet: the node running the task, or that last ran it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// In a fleet, while the task is `queued`: why no node has taken it yet (`no live node reaches
    /// /srv/w`, `every node that reaches /srv/w is full`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_because: Option<String>,
    /// In a fleet, a task `waiting` because the node running it stopped it when the fleet could not
    /// be written (its lease could not be renewed: JetStream without a quorum): on which node, since
    /// when, why — until a node takes it again (`task_resumed` says so). Its record still says
    /// `running` meanwhile (it cannot be changed), so only that node knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_because: Option<String>,
    /// The task's MCP servers that are down now (failed to start or stopped, not started again since),
    /// as the node running it knows them; their tools are left out or answer that they are down.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_down: Vec<McpDown>,
    /// While the task runs (or waits): the delegations that have not returned — its running branches,
    /// several at once when the lead delegated several parts in one answer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub branches: Vec<crate::event::OpenBranch>,
    /// While the task runs (or waits): the agents told, in their current turn, that they are going in
    /// circles (`agent_stalled`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stalled: Vec<crate::event::Stalled>,
    /// What the task spent, from the providers' usage reports: every role's requests and compactions.
    #[serde(default)]
    pub spent: Spent,
    /// The same by role (each role that made a request).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub spent_by_role: BTreeMap<Role, Spent>,
    /// The task's budget in force (its own over `[budgets]`'s); absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// While `waiting`, or `paused` on a day's budget: when the task goes on by itself, RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_at: Option<String>,
}

impl Spent {
    /// Tokens and cost, as a budget counts them: prompt (cached or not) and completion tokens.
    pub fn amount(&self) -> Amount {
        Amount { tokens: self.prompt_tokens.saturating_add(self.completion_tokens), cost: self.cost_usd }
    }

    /// `other` added to this, every figure saturating and every cost finite.
    pub fn add(&mut self, other: &Spent) {
        let usage = Usage {
            prompt_tokens: other.prompt_tokens,
            completion_tokens: other.completion_tokens,
            cache_read_tokens: other.cache_read_tokens,
            cache_write_tokens: other.cache_write_tokens,
        };
        add_usage(self, &usage, other.requests, other.cost_usd);
        let (mine, theirs) = (&mut self.compaction, &other.compaction);
        mine.compactions = mine.compactions.saturating_add(theirs.compactions);
        mine.requests = mine.requests.saturating_add(theirs.requests);
        mine.tokens = mine.tokens.saturating_add(theirs.tokens);
        if let Some(c) = theirs.cost_usd {
            add_cost(&mut mine.cost_usd, c);
        }
    }
}

/// What requests spent, summed from the usage each response reported (`response_received`) and each
/// compaction's summary requests (`compaction_finished`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Spent {
    /// Model requests answered with a usage report, summary requests included.
    pub requests: u64,
    /// Their prompt tokens, cached or not.
    pub prompt_tokens: u64,
    /// Of those, served by the provider's prompt cache.
    pub cache_read_tokens: u64,
    /// Of those, written to the provider's prompt cache.
    pub cache_write_tokens: u64,
    /// Their answers' tokens, thinking included.
    pub completion_tokens: u64,
    /// Their cost in USD, at `[prices]`: the sum over the requests of a priced model; absent when none
    /// was priced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// The compactions' share of the above.
    #[serde(default)]
    pub compaction: CompactionSpent,
}

/// What a task's requests spent, in all and by role, summed from its events: each
/// `response_received` with a usage report, each `compaction_finished`'s summary requests.
pub fn spent<'e>(events: impl IntoIterator<Item = &'e Event>) -> (Spent, BTreeMap<Role, Spent>) {
    let mut total = Spent::default();
    let mut by_role: BTreeMap<Role, Spent> = BTreeMap::new();
    for e in events {
        let role = by_role.entry(e.role.clone()).or_default();
        for s in [&mut total, role] {
            match &e.kind {
                EventKind::ResponseReceived { usage: Some(u), cost_usd, .. } => add_usage(s, u, 1, *cost_usd),
                EventKind::CompactionFinished { summary_usage, batches, cost_usd, .. } => {
                    s.compaction.compactions += 1;
                    s.compaction.requests += u64::from(*batches);
                    if let Some(u) = summary_usage {
                        add_usage(s, u, u64::from(*batches), *cost_usd);
                        let tokens = u.prompt_tokens.saturating_add(u.completion_tokens);
                        s.compaction.tokens = s.compaction.tokens.saturating_add(tokens);
                    }
                    if let Some(c) = cost_usd {
                        add_cost(&mut s.compaction.cost_usd, *c);
                    }
                }
                _ => {}
            }
        }
    }
    by_role.retain(|_, s| *s != Spent::default());
    (total, by_role)
}

/// Every figure saturates: no log, however absurd a usage it holds, wraps a total.
fn add_usage(s: &mut Spent, u: &Usage, requests: u64, cost: Option<f64>) {
    s.requests = s.requests.saturating_add(requests);
    s.prompt_tokens = s.prompt_tokens.saturating_add(u.prompt_tokens);
    s.cache_read_tokens = s.cache_read_tokens.saturating_add(u.cache_read_tokens);
    s.cache_write_tokens = s.cache_write_tokens.saturating_add(u.cache_write_tokens);
    s.completion_tokens = s.completion_tokens.saturating_add(u.completion_tokens);
    if let Some(c) = cost {
        add_cost(&mut s.cost_usd, c);
    }
}

/// `cost` added to `sum`, which stays finite ([`cost_sum`]).
fn add_cost(sum: &mut Option<f64>, cost: f64) {
    let total = sum.get_or_insert(0.0);
    *total = cost_sum(*total, cost);
}

/// What compactions spent: their summary requests.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CompactionSpent {
    /// Compactions made.
    pub compactions: u64,
    /// Their summary requests (batches).
    pub requests: u64,
    /// The summary requests' tokens, prompt and completion.
    pub tokens: u64,
    /// Their cost in USD; absent when no summary model was priced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

/// An MCP server that is down in a task, in `task.status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct McpDown {
    /// The server (`[mcp.servers.NAME]`).
    pub server: String,
    /// Its last failure, in words.
    pub error: String,
    /// When that happened, RFC 3339.
    pub since: String,
    /// When it is started again at the earliest (at its next use after that), RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<String>,
}

/// `task.cancel`, `task.resume` and `task.message` answer with the task's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct StateResult {
    /// The task's state after the call: `cancelled` after a cancel (or the end a running task reached first),
    /// `running` after a resume or a follow-up.
    pub state: TaskState,
}

/// `task.subscribe`'s answer, before the notifications.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Subscribed {
    /// Always true: `task.event` notifications follow on this connection.
    pub subscribed: bool,
}

/// `task.events`' answer: the events after `after_seq`, oldest first, the task's state, and whether
/// its runner is still at work. A client polls with `after_seq` = the last seq it has until
/// `running` is false and a page comes back empty: then it has every event up to the task's end.
/// (`state` turns `finished` a moment before the terminal event is stored and the runner lets go;
/// `running` is read first, so once it is false the page holds everything.)
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EventsResult {
    /// At most `limit` events, seqs ascending.
    pub events: Vec<Event>,
    /// The task's state as `task.status` shows it (an end held in memory included).
    pub state: TaskState,
    /// The seq of the task's newest event: more are waiting when it is past the page's last.
    pub last_seq: u64,
    /// Whether the task's runner is at work (more events may come; `task.message` and
    /// `task.resume` are refused meanwhile).
    pub running: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(role: Role, kind: EventKind) -> Event {
        Event { seq: 1, task_id: "t".into(), role, at: String::new(), kind }
    }

    #[test]
    fn responses_and_compactions_are_summed_in_all_and_by_role() {
        let response = |p, c, read, cost| EventKind::ResponseReceived {
            finish_reason: "stop".into(),
            usage: Some(Usage { cache_read_tokens: read, ..Usage::new(p, c) }),
            model: Some("m".into()),
            cost_usd: cost,
        };
        let events = [
            event(Role::Lead, response(1_000, 50, 0, Some(0.01))),
            event(Role::Coder, response(2_000, 100, 1_500, Some(0.02))),
            event(
                Role::Coder,
                EventKind::ResponseReceived {
                    finish_reason: "stop".into(),
                    usage: None,
                    model: None,
                    cost_usd: None,
                },
            ),
            event(
                Role::Coder,
                EventKind::CompactionFinished {
                    tokens_before: Tokens(9_000),
                    tokens_after: Tokens(3_000),
                    archive_id: "ev".into(),
                    batches: 2,
                    measured_by: None,
                    summary_model: Some("m".into()),
                    summary_usage: Some(Usage::new(8_000, 400)),
                    cost_usd: Some(0.005),
                    next_trigger_tokens: None,
                },
            ),
            event(Role::Lead, EventKind::TaskFinished { summary: "s".into() }),
        ];
        let (total, by_role) = spent(&events);
        assert_eq!((total.requests, total.prompt_tokens, total.completion_tokens), (4, 11_000, 550));
        assert_eq!(total.cache_read_tokens, 1_500);
        assert!((total.cost_usd.unwrap() - 0.035).abs() < 1e-12);
        assert_eq!(
            (total.compaction.compactions, total.compaction.requests, total.compaction.tokens),
            (1, 2, 8_400)
        );
        assert_eq!(by_role[&Role::Lead].requests, 1);
        assert_eq!(by_role[&Role::Coder].requests, 3);
        assert_eq!(by_role[&Role::Coder].compaction.cost_usd, Some(0.005));
        assert_eq!(by_role.len(), 2);
    }

    /// A log holding 2,000 + 2^64 − 1 prompt tokens (written before reports were judged) shows the
    /// most a total can hold, never 2,099 wrapped; a cost past counting stays finite.
    #[test]
    fn totals_saturate_and_costs_stay_finite() {
        let response = |p, cost| EventKind::ResponseReceived {
            finish_reason: "stop".into(),
            usage: Some(Usage::new(p, p)),
            model: None,
            cost_usd: Some(cost),
        };
        let events =
            [event(Role::Lead, response(2_000, 1.0)), event(Role::Lead, response(u64::MAX, f64::MAX))];
        let (mut total, _) = spent(&events);
        assert_eq!((total.prompt_tokens, total.completion_tokens), (u64::MAX, u64::MAX));
        assert_eq!(total.amount().tokens, u64::MAX);
        let once = total.clone();
        total.add(&once);
        assert_eq!((total.requests, total.prompt_tokens), (4, u64::MAX));
        assert!(total.cost_usd.is_some_and(f64::is_finite), "{total:?}");
    }
}
