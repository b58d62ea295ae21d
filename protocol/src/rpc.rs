//! The socket protocol: JSON-RPC 2.0, one object a line, over the daemon's Unix socket.
//!
//! A request is a [`Request`] — its `method` names the variant and its `params` are that variant's
//! params type — and every method answers with its own result type (the table in
//! [`Request::method`]'s docs). Errors carry an [`ErrorCode`]. A subscription is followed by
//! [`Notification`]s. `docs/protocol.schema.json` is generated from these types
//! ([`crate::schema::protocol_schema`]) and a test fails when it is stale.

use crate::event::{EndKind, Event};
use crate::evidence::{Problem, Unit};
use crate::record::Record;
use crate::role::Role;
use crate::task::TaskState;
use crate::tokens::{CountSource, Standing, Tokens};
use crate::window::WindowSource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// A request's method and params. On the wire: `{"jsonrpc": "2.0", "id": …, "method": …, "params": …}`;
/// absent or `null` params read as `{}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "method", content = "params")]
pub enum Request {
    /// Starts a task → [`Submitted`].
    #[serde(rename = "task.submit")]
    TaskSubmit(SubmitParams),
    /// Every task → `Vec<`[`TaskSummary`]`>`.
    #[serde(rename = "task.list")]
    TaskList(NoParams),
    /// One task, with each role's last measured request → [`TaskStatus`].
    #[serde(rename = "task.status")]
    TaskStatus(TaskRef),
    /// Stops a task → [`StateResult`].
    #[serde(rename = "task.cancel")]
    TaskCancel(TaskRef),
    /// Continues an interrupted or failed task from its log → [`StateResult`].
    #[serde(rename = "task.resume")]
    TaskResume(TaskRef),
    /// A follow-up request for a task that has stopped → [`StateResult`].
    #[serde(rename = "task.message")]
    TaskMessage(MessageParams),
    /// Follows a task's events → [`Subscribed`], then [`Notification`]s.
    #[serde(rename = "task.subscribe")]
    TaskSubscribe(SubscribeParams),
    /// A page of a task's events after a seq, and its state → [`EventsResult`]: for a client that
    /// polls instead of holding a subscription open.
    #[serde(rename = "task.events")]
    TaskEvents(EventsParams),
    /// A role's context gauge → [`ContextResult`].
    #[serde(rename = "context.get")]
    ContextGet(ContextParams),
    /// A task's log records → [`LogResult`].
    #[serde(rename = "log.get")]
    LogGet(LogParams),
    /// The evidence archive, or one task's part of it → `Vec<`[`EvidenceMeta`](crate::evidence::EvidenceMeta)`>`.
    #[serde(rename = "evidence.list")]
    EvidenceList(EvidenceListParams),
    /// One evidence item's metadata → [`EvidenceMeta`](crate::evidence::EvidenceMeta).
    #[serde(rename = "evidence.get")]
    EvidenceGet(EvidenceRef),
    /// One page of an evidence item → [`Page`](crate::evidence::Page).
    #[serde(rename = "evidence.read")]
    EvidenceRead(EvidenceReadParams),
    /// Re-hashes every blob → [`VerifyResult`].
    #[serde(rename = "evidence.verify")]
    EvidenceVerify(NoParams),
    /// A role's setting → [`SettingResult`].
    #[serde(rename = "settings.get")]
    SettingsGet(SettingParams),
    /// Sets a role's setting, from its next turn → [`SettingResult`].
    #[serde(rename = "settings.set")]
    SettingsSet(SettingParams),
    /// Asks a role's server for its window again → [`ProbeResult`].
    #[serde(rename = "models.probe")]
    ModelsProbe(RoleParams),
    /// The daemon's own state → [`DaemonStatus`].
    #[serde(rename = "daemon.status")]
    DaemonStatus(NoParams),
    /// Moves a manual clock forward (tests) → [`ClockResult`].
    #[serde(rename = "clock.advance")]
    ClockAdvance(ClockParams),
}

/// The methods, by name: what a request line names before its params are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum Method {
    /// `task.submit`: starts a task.
    #[serde(rename = "task.submit")]
    TaskSubmit,
    /// `task.list`: every task, a summary line each.
    #[serde(rename = "task.list")]
    TaskList,
    /// `task.status`: one task, with each role's last measured request.
    #[serde(rename = "task.status")]
    TaskStatus,
    /// `task.cancel`: stops a task.
    #[serde(rename = "task.cancel")]
    TaskCancel,
    /// `task.resume`: continues an interrupted or failed task.
    #[serde(rename = "task.resume")]
    TaskResume,
    /// `task.message`: a follow-up request for a stopped task.
    #[serde(rename = "task.message")]
    TaskMessage,
    /// `task.subscribe`: follows a task's events.
    #[serde(rename = "task.subscribe")]
    TaskSubscribe,
    /// `task.events`: a page of events and the task's state.
    #[serde(rename = "task.events")]
    TaskEvents,
    /// `context.get`: a role's context gauge.
    #[serde(rename = "context.get")]
    ContextGet,
    /// `log.get`: a task's log records.
    #[serde(rename = "log.get")]
    LogGet,
    /// `evidence.list`: the evidence archive's items.
    #[serde(rename = "evidence.list")]
    EvidenceList,
    /// `evidence.get`: one evidence item's metadata.
    #[serde(rename = "evidence.get")]
    EvidenceGet,
    /// `evidence.read`: a page of one evidence item.
    #[serde(rename = "evidence.read")]
    EvidenceRead,
    /// `evidence.verify`: re-hashes every blob.
    #[serde(rename = "evidence.verify")]
    EvidenceVerify,
    /// `settings.get`: a role's setting.
    #[serde(rename = "settings.get")]
    SettingsGet,
    /// `settings.set`: changes a role's setting.
    #[serde(rename = "settings.set")]
    SettingsSet,
    /// `models.probe`: asks a role's server for its window again.
    #[serde(rename = "models.probe")]
    ModelsProbe,
    /// `daemon.status`: the daemon's own state.
    #[serde(rename = "daemon.status")]
    DaemonStatus,
    /// `clock.advance`: moves a manual clock forward (tests).
    #[serde(rename = "clock.advance")]
    ClockAdvance,
}

impl Method {
    /// The method a name on the wire means, if any.
    pub fn parse(name: &str) -> Option<Method> {
        serde_json::from_value(serde_json::Value::String(name.to_string())).ok()
    }

    /// The method's name on the wire.
    pub fn name(self) -> String {
        match serde_json::to_value(self) {
            Ok(serde_json::Value::String(name)) => name,
            _ => String::new(),
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl Request {
    /// The method this request calls.
    pub fn method(&self) -> Method {
        match self {
            Request::TaskSubmit(_) => Method::TaskSubmit,
            Request::TaskList(_) => Method::TaskList,
            Request::TaskStatus(_) => Method::TaskStatus,
            Request::TaskCancel(_) => Method::TaskCancel,
            Request::TaskResume(_) => Method::TaskResume,
            Request::TaskMessage(_) => Method::TaskMessage,
            Request::TaskSubscribe(_) => Method::TaskSubscribe,
            Request::TaskEvents(_) => Method::TaskEvents,
            Request::ContextGet(_) => Method::ContextGet,
            Request::LogGet(_) => Method::LogGet,
            Request::EvidenceList(_) => Method::EvidenceList,
            Request::EvidenceGet(_) => Method::EvidenceGet,
            Request::EvidenceRead(_) => Method::EvidenceRead,
            Request::EvidenceVerify(_) => Method::EvidenceVerify,
            Request::SettingsGet(_) => Method::SettingsGet,
            Request::SettingsSet(_) => Method::SettingsSet,
            Request::ModelsProbe(_) => Method::ModelsProbe,
            Request::DaemonStatus(_) => Method::DaemonStatus,
            Request::ClockAdvance(_) => Method::ClockAdvance,
        }
    }

    /// The request as a JSON-RPC `(method, params)` pair, as a client sends it.
    pub fn to_wire(&self) -> (String, serde_json::Value) {
        let params = match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(mut o)) => o.remove("params").unwrap_or(serde_json::Value::Null),
            _ => serde_json::Value::Null,
        };
        (self.method().name(), params)
    }
}

/// Params of a method that takes none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NoParams {}

/// `task.submit`'s params: what to do, and where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SubmitParams {
    /// What the team is to do; not empty.
    pub objective: String,
    /// An absolute, existing directory that is not the root, a system directory or agentd's home.
    pub workspace: String,
    /// A team name, kept with the task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
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
    /// The follow-up, taken by the lead as a new user message.
    pub text: String,
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

/// `context.get`'s params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ContextParams {
    /// The task whose gauge to read.
    pub task_id: String,
    /// Default: the lead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
}

/// `log.get`'s params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LogParams {
    /// The task whose log to read.
    pub task_id: String,
    /// Only this role's records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// Records after this seq (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_seq: Option<u64>,
    /// At most this many records (default 10,000, at most 100,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
}

/// `evidence.list`'s params.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EvidenceListParams {
    /// Only this task's evidence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
}

/// Params naming one evidence item (`evidence.get`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EvidenceRef {
    /// The item's id (`ev-…`); an unknown one is refused with -32002.
    pub id: String,
}

/// `evidence.read`'s params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EvidenceReadParams {
    /// The item's id (`ev-…`); an unknown one is refused with -32002.
    pub id: String,
    /// Where to start, in `unit`s (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// How much, in `unit`s (default 64 KiB of bytes; at most 4 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// `bytes` (default) or `lines`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<Unit>,
}

/// A setting a client may read and set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SettingKey {
    /// The compaction trigger, percent of the window (1–100).
    CompactAt,
}

impl SettingKey {
    /// The key's name on the wire and in the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            SettingKey::CompactAt => "compact_at",
        }
    }
}

/// `settings.get`'s and `settings.set`'s params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SettingParams {
    /// The role whose setting it is: `lead`, `coder` or a specialist's name from the configuration.
    pub role: Role,
    /// Which setting.
    pub key: SettingKey,
    /// `settings.set` only: the new value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<serde_json::Value>,
}

/// Params naming one role (`models.probe`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RoleParams {
    /// The role, as the configuration names it; a role the team lacks is refused with -32602.
    pub role: Role,
}

/// `clock.advance`'s params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ClockParams {
    /// Milliseconds to move the clock forward.
    pub ms: u64,
}

/// `task.submit`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Submitted {
    /// A UUID v7.
    pub task_id: String,
}

/// One line of `task.list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
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

/// `context.get`'s answer: the gauge, or a note that the role has not been measured yet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ContextResult {
    /// The role's last measured request.
    Measured(Box<crate::gauge::Gauge>),
    /// The role has not been measured since the daemon started.
    Unmeasured(Unmeasured),
}

/// A role that has made no request since the daemon started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Unmeasured {
    /// The role asked about.
    pub role: Role,
    /// Always false.
    pub measured: bool,
    /// Why there is no gauge, in words.
    pub note: String,
}

/// One record of a task's log, with its number. Checkpoints show as `{type: "system", subtype, …}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LogEntry {
    /// The record's number in the task's log, from 1 (the log numbers records apart from events); give the
    /// last one seen as `log.get`'s `after_seq` to read on.
    pub seq: u64,
    /// The record itself; its fields sit beside `seq` on the wire.
    #[serde(flatten)]
    pub record: Record,
}

/// `log.get`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LogResult {
    /// The records, in log order, at most the `limit` asked for; fewer (or none) at the log's end.
    pub records: Vec<LogEntry>,
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

/// `evidence.verify`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct VerifyResult {
    /// Evidence items checked.
    pub checked: u64,
    /// Each one missing or altered.
    pub problems: Vec<Problem>,
}

/// `settings.get` / `settings.set`'s answer: the value in effect for the role's server and model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SettingResult {
    /// The role the setting is for.
    pub role: Role,
    /// The setting.
    pub key: SettingKey,
    /// The value in effect, a percentage from 1 to 100: the one set for the role on its current server and
    /// model, else the one set for the role, else the role's `compact_at` in the configuration, else 80.
    pub value: u8,
    /// The base URL of the role's provider, which the value is remembered for.
    pub server: String,
    /// The role's model, which the value is remembered for.
    pub model: String,
}

/// `models.probe`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ProbeResult {
    /// The role probed.
    pub role: Role,
    /// The base URL of the role's provider.
    pub server: String,
    /// The model probed.
    pub model: String,
    /// The window now believed, in tokens.
    pub window: Tokens,
    /// Where it came from: `declared` when the server declared it, else the window learned before (or
    /// `assumed`).
    pub window_source: WindowSource,
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
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

/// A notification the daemon sends on a subscribed connection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "method", content = "params")]
pub enum Notification {
    /// One event, in order, no gap, no repeat.
    #[serde(rename = "task.event")]
    TaskEvent(Event),
    /// The subscription is over: the task reached an end nothing follows.
    #[serde(rename = "task.end")]
    TaskEnd(TaskEnd),
}

/// `task.end`: which event ended the stream; with `recorded: false`, an end the store could not take.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TaskEnd {
    /// The task the stream followed.
    pub task_id: String,
    /// The terminal event's seq (unrecorded: the last event sent).
    pub seq: u64,
    /// Which end it was.
    pub kind: EndKind,
    /// With `recorded: false`: the task's real state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<TaskState>,
    /// Absent (true) unless the end could not be recorded.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub recorded: bool,
    /// With `recorded: false`: the task's error, and why its end could not be recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

/// The error codes of the socket (JSON-RPC's own and agentd's application errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(into = "i64", try_from = "i64")]
#[schemars(with = "i64")]
pub enum ErrorCode {
    /// -32700: the line is not JSON.
    ParseError,
    /// -32600: not a JSON-RPC 2.0 request object, or a line over the limit.
    InvalidRequest,
    /// -32601: no such method.
    MethodNotFound,
    /// -32602: params missing, of the wrong type, or out of range.
    InvalidParams,
    /// -32603: the daemon failed (storage, an actor gone).
    Internal,
    /// -32001: no task with that id.
    UnknownTask,
    /// -32002: no evidence with that id.
    UnknownEvidence,
    /// -32003: not allowed in the task's state (or the daemon's).
    NotAllowed,
    /// -32004: the workspace is not one a task may use.
    BadWorkspace,
}

impl ErrorCode {
    const ALL: [ErrorCode; 9] = [
        ErrorCode::ParseError,
        ErrorCode::InvalidRequest,
        ErrorCode::MethodNotFound,
        ErrorCode::InvalidParams,
        ErrorCode::Internal,
        ErrorCode::UnknownTask,
        ErrorCode::UnknownEvidence,
        ErrorCode::NotAllowed,
        ErrorCode::BadWorkspace,
    ];

    /// The number on the wire.
    pub fn code(self) -> i64 {
        match self {
            ErrorCode::ParseError => -32700,
            ErrorCode::InvalidRequest => -32600,
            ErrorCode::MethodNotFound => -32601,
            ErrorCode::InvalidParams => -32602,
            ErrorCode::Internal => -32603,
            ErrorCode::UnknownTask => -32001,
            ErrorCode::UnknownEvidence => -32002,
            ErrorCode::NotAllowed => -32003,
            ErrorCode::BadWorkspace => -32004,
        }
    }

    /// The code a number means, if any.
    pub fn from_code(code: i64) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| c.code() == code)
    }
}

impl From<ErrorCode> for i64 {
    fn from(c: ErrorCode) -> i64 {
        c.code()
    }
}

impl TryFrom<i64> for ErrorCode {
    type Error = String;
    fn try_from(code: i64) -> Result<ErrorCode, String> {
        ErrorCode::from_code(code).ok_or_else(|| format!("unknown error code {code}"))
    }
}

/// An error answer: `{"code", "message"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema, thiserror::Error)]
#[error("{message} ({})", code.code())]
pub struct RpcError {
    /// Which error: the number on the wire.
    pub code: ErrorCode,
    /// What went wrong, in words; for -32602 it names the parameter.
    pub message: String,
}

impl RpcError {
    /// An error with this code and message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> RpcError {
        RpcError { code, message: message.into() }
    }

    /// -32602, naming what was wrong with the params.
    pub fn invalid_params(message: impl Into<String>) -> RpcError {
        RpcError::new(ErrorCode::InvalidParams, message)
    }

    /// -32603: the daemon failed; the message is the failure's.
    pub fn internal(e: impl fmt::Display) -> RpcError {
        RpcError::new(ErrorCode::Internal, e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(method: &str, params: serde_json::Value) -> Result<Request, serde_json::Error> {
        serde_json::from_value(json!({"method": method, "params": params}))
    }

    #[test]
    fn requests_read_from_the_wire_and_back() {
        let r = read("task.submit", json!({"objective": "x", "workspace": "/w"})).unwrap();
        assert_eq!(r.method(), Method::TaskSubmit);
        assert_eq!(r.to_wire(), ("task.submit".to_string(), json!({"objective": "x", "workspace": "/w"})));
        let r = read("context.get", json!({"task_id": "t", "role": "reviewer"})).unwrap();
        assert_eq!(
            r,
            Request::ContextGet(ContextParams {
                task_id: "t".into(),
                role: Some(Role::specialist("reviewer"))
            })
        );
        assert!(read("task.status", json!({})).is_err());
        assert!(read("task.status", json!({"task_id": 7})).is_err());
    }

    #[test]
    fn every_method_has_a_name_that_parses_back() {
        for m in [Method::TaskSubmit, Method::LogGet, Method::ClockAdvance, Method::EvidenceVerify] {
            assert_eq!(Method::parse(&m.name()), Some(m));
        }
        assert_eq!(Method::parse("task.explode"), None);
    }

    #[test]
    fn error_codes_are_numbers() {
        let e = RpcError::new(ErrorCode::UnknownTask, "unknown task t");
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v, json!({"code": -32001, "message": "unknown task t"}));
        assert_eq!(serde_json::from_value::<RpcError>(v).unwrap(), e);
        for c in ErrorCode::ALL {
            assert_eq!(ErrorCode::from_code(c.code()), Some(c));
        }
    }

    #[test]
    fn task_end_leaves_recorded_off_the_wire_unless_false() {
        let end = TaskEnd {
            task_id: "t".into(),
            seq: 9,
            kind: EndKind::TaskFinished,
            state: None,
            recorded: true,
            error: None,
        };
        let n = serde_json::to_value(Notification::TaskEnd(end)).unwrap();
        assert_eq!(
            n,
            json!({"method": "task.end", "params": {"task_id": "t", "seq": 9, "kind": "task_finished"}})
        );
    }
}
