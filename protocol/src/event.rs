//! Events: what happened to a task, persisted before it is published, numbered from 1 per task.
//! The wire shape is flat: `{seq, task_id, role, at, kind, ...fields}`.

use crate::checkpoint::{Change, NotHeld};
use crate::memory::MemoryScope;
use crate::role::Role;
use crate::tokens::{Measured, Tokens};
use crate::tool::ToolName;
use crate::usage::{RawUsage, Usage};
use crate::window::WindowSource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One thing that happened to a task, as the log keeps it and `task.event` notifications carry it. It is
/// stored before it is published, so a subscriber that replays the log and then follows live events sees
/// every event once, in `seq` order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Event {
    /// The event's number in its task, from 1, without gaps.
    pub seq: u64,
    /// The task it happened to: the UUID v7 `task.submit` returned.
    pub task_id: String,
    /// The role it happened to (task-level events are the lead's).
    pub role: Role,
    /// RFC 3339, milliseconds, UTC.
    pub at: String,
    /// What happened, with the fields of that kind of event; on the wire its `kind` and fields sit beside
    /// `seq`, `task_id`, `role` and `at` in one flat object.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// A file a teammate's patch changed that the three-way merge could not settle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PatchConflict {
    /// The file, relative to the workspace.
    pub path: String,
    /// Why: `both_changed`, `changed_here_deleted_there`, `deleted_here_changed_there`,
    /// `both_added` or `binary`.
    pub kind: String,
    /// The first line (1-based, in the workspace's file) of each conflicting hunk.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lines: Vec<u64>,
    /// The evidence item holding the teammate's version of the file whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence_id: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Declares [`EventKind`] with each variant's wire name written once, beside it
/// (`TaskStarted as "task_started" { … }`): the macro hands that one literal to serde, as the
/// variant's `#[serde(rename)]`, and to [`EventKind::name`], so the `kind` on the wire and the name
/// agentd shows cannot drift apart. (The enum inside is not indented, so its docs — which the schema
/// carries line for line — keep their width.)
macro_rules! event_kinds {
    (
        $(#[$attr:meta])*
        pub enum EventKind {
            $(
                $(#[$variant_attr:meta])*
                $variant:ident as $wire:literal { $($fields:tt)* }
            ),* $(,)?
        }
    ) => {
        $(#[$attr])*
        pub enum EventKind {
            $(
                $(#[$variant_attr])*
                #[serde(rename = $wire)]
                $variant { $($fields)* },
            )*
        }

        impl EventKind {
            /// The event's `kind` as it is on the wire, in snake case (`tool_finished`).
            pub fn name(&self) -> &'static str {
                match self {
                    $(EventKind::$variant { .. } => $wire,)*
                }
            }
        }
    };
}

event_kinds! {
/// Every kind of event and the fields each carries; `kind` on the wire is the variant's name in snake case
/// (`task_started`, `request_sent`, …).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind")]
pub enum EventKind {
    /// The task was accepted and its team is starting work. Always the task's first event.
    TaskStarted as "task_started" {
        /// The objective as it was submitted.
        objective: String,
    },
    /// A model request passed the fitter (compacted first if it had to be) and goes to the provider. A retry
    /// resends the same request without a second `request_sent`.
    RequestSent as "request_sent" {
        /// The request's size as the fitter measured it: the role's counter, calibrated when usage reports
        /// exist, with the calibration's margin added.
        tokens: Tokens,
        /// True when no tokenizer of the model's own measured the request (the one-token-per-three-bytes
        /// estimate, not yet confirmed by usage reports); shown as `~` by the CLI.
        estimated: bool,
        /// The model's context window the request was fitted into, in tokens.
        window: Tokens,
        /// Where `window` came from: declared by the server, stated by a refusal, corrected from a usage
        /// report, or assumed.
        window_source: WindowSource,
        /// The compaction trigger in force, in tokens: a request above it is compacted before it is sent. It
        /// is `compact_at` percent of the window, lowered when needed to leave room for the answer's
        /// `max_output_tokens`.
        trigger_tokens: Tokens,
        /// Where a compaction at this window would land the request: with `trigger_tokens`, the two
        /// lines a chart of the role's requests draws. Absent in events logged before it was recorded.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        destination_tokens: Option<Tokens>,
        /// The measure: the counter's source and how many usage reports calibrated it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        measured_by: Option<Measured>,
    },
    /// The provider's answer to a request arrived whole and was stored in the role's history.
    ResponseReceived as "response_received" {
        /// Why the model stopped, in OpenAI's words: `stop`, `tool_calls`, `length`, or what the server said.
        /// Anthropic's stop reasons are mapped (`end_turn` → `stop`, `tool_use` → `tool_calls`, `max_tokens`
        /// → `length`).
        finish_reason: String,
        /// The server's token usage for this answer; absent when the server sent none. When agentd refused
        /// the report (`usage_refused` just before), the figures it counts instead.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Usage>,
        /// The model that answered, as the role's settings name it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        /// What the answer cost in USD, from `usage` at the model's `[prices."MODEL"]`; absent without
        /// prices or usage.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
    },
    /// A provider's usage report was not believed: a figure that is no count (negative, a fraction,
    /// `NaN`, a string, past 2^64 − 1, missing), a prompt far above what was sent and above the
    /// window, an answer longer than the request allowed, cached tokens above the prompt. The answer
    /// is kept; the report teaches no window, calibration or prompt cache, is priced at none of its
    /// refused figures, and what was sent is counted instead: the `usage` of the `response_received`
    /// that follows (for a compaction's summary request, its share of `summary_usage`).
    UsageRefused as "usage_refused" {
        /// The report as the server said it: each figure's key and text.
        reported: RawUsage,
        /// Why, one line per refused figure, with the numbers.
        reasons: Vec<String>,
        /// Our count of the request as it was sent, in tokens.
        sent_tokens: Tokens,
        /// What is counted instead: the report's believable figures, and our count (of the request,
        /// of the answer) in place of each refused one; a cache figure not believed counts 0.
        counted: Usage,
        /// Set when the report came with a compaction's summary request.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        summary: bool,
    },
    /// A model's tool call starts running. Every `tool_called` is followed by its `tool_finished` before the
    /// task's terminal event.
    ToolCalled as "tool_called" {
        /// The tool the model called.
        tool: ToolName,
        /// The call's id, as the model's answer gave it; the matching `tool_finished` carries the same id.
        call_id: String,
        /// For a writing call: the checkpoint of the workspace (or of the agent's working copy) taken
        /// before it ran, the sha256 of its root tree; its `files_changed` compares against it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        checkpoint: Option<String>,
    },
    /// A tool call ended, its result stored in the history (a normal end), or the task stopped while it ran
    /// (`interrupted`).
    ToolFinished as "tool_finished" {
        /// The tool that ran.
        tool: ToolName,
        /// The id of the call, as in its `tool_called`.
        call_id: String,
        /// Whether the tool succeeded. False for an error result (the model sees it as one) and for an
        /// interrupted call.
        ok: bool,
        /// Set when the result was too large to go into the history whole: the evidence item that holds all
        /// of it (`evidence.read` it); the model got its first page.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        evidence_id: Option<String>,
        /// The result's size as it went into the history — the whole result, or its first page when it was
        /// stored as evidence — by the measure in `measured_by`. Absent for a call whose result was not sized
        /// (a delegation's return, an interrupted call).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result_tokens: Option<Tokens>,
        /// The paging rule's limit for this result: a result up to this size goes into the history whole, a
        /// larger one is stored as evidence and paged. Absent when the result was not sized.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        whole_limit: Option<Tokens>,
        /// The measure `result_tokens` and `whole_limit` were taken with: the counter's source and how many
        /// usage reports had calibrated it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        measured_by: Option<Measured>,
        /// The call never finished: the task stopped (a crash, a shutdown, a cancel) while it ran.
        /// Its effect on the workspace is unknown.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        interrupted: bool,
    },
    /// A role's request crossed its trigger and is being compacted: older rounds are summarised into a
    /// checkpoint and archived as evidence.
    CompactionStarted as "compaction_started" {
        /// The request's size before the compaction, by the role's calibrated measure.
        tokens_before: Tokens,
        /// The trigger it crossed, in tokens.
        trigger_tokens: Tokens,
        /// The size the compaction aims for, in tokens: the rebuilt request should land at or under it.
        destination_tokens: Tokens,
        /// The model's context window, in tokens.
        window: Tokens,
    },
    /// A compaction succeeded: the role's history was replaced by a checkpoint and the rounds kept verbatim.
    CompactionFinished as "compaction_finished" {
        /// The request's size before the compaction, as in `compaction_started`.
        tokens_before: Tokens,
        /// The rebuilt request's size, counted in full (system prompt and tools included) by the same
        /// measure.
        tokens_after: Tokens,
        /// The evidence item that holds, whole, one message per JSON line, what the compaction removed from
        /// the request.
        archive_id: String,
        /// How many summary requests made the checkpoint's summary: 1 when one request summarised it all
        /// (often in place, reusing the cached prefix), more when the removed text was folded in token-sized
        /// batches.
        batches: u32,
        /// The measure the sizes were taken with.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        measured_by: Option<Measured>,
        /// The model the summary requests went to.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        summary_model: Option<String>,
        /// The summary requests' usage, summed over those the server reported one for.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        summary_usage: Option<Usage>,
        /// What the summary requests cost in USD, at the summary model's prices; absent without prices or
        /// usage.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
        /// Where the role's next compaction comes, when its provider declares a prompt cache: the
        /// trigger that prices this landing lowest over the coming requests, between the destination
        /// and the role's trigger (the gauge's `trigger_tokens` from now on, `trigger_priced`). Absent
        /// without a cache: at the role's trigger.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        next_trigger_tokens: Option<Tokens>,
    },
    /// A compaction failed: no rebuilt request passed its judgement, or the archive or a summary could not
    /// be made. The request is not sent and the turn fails with this reason.
    CompactionFailed as "compaction_failed" {
        /// Why, in words, with the numbers (for instance a summary request that would not fit the window).
        reason: String,
    },
    /// A compaction the user asked for (`agentd compact`, `task.compact`) was refused: nothing to
    /// compact, or no rebuilt request small enough. Nothing was written — no archive, no
    /// checkpoint — and the history is as it was; the task goes on (or stays stopped) as before.
    CompactionRefused as "compaction_refused" {
        /// Why, in plain words, with the numbers.
        reason: String,
    },
    /// A model request failed in a way worth retrying; the task is `waiting_retry` until the wait ends.
    RetryScheduled as "retry_scheduled" {
        /// The kind of failure: `rate_limit` (429), `overloaded` (529, Anthropic's `overloaded_error`),
        /// `server_error` (5xx, a broken connection) or `stream_anomaly` (a broken, stalled or malformed
        /// stream).
        reason: String,
        /// Which retry of this kind of failure this is, from 1.
        attempt: u32,
        /// How many retries of this kind the `[retry]` configuration allows.
        max_attempts: u32,
        /// How long the task waits before resending, in milliseconds: the server's `Retry-After` when it sent
        /// one, else the configured schedule's delay for this attempt.
        delay_ms: u64,
    },
    /// A provider's usage limit resets later than the retry policy's longest delay: the request is not
    /// retried (no attempt is spent) and the task is `waiting` until `resume_at`, when it goes on by
    /// itself — through a daemon restart too. `task.resume` goes on now; `task.cancel` stops it.
    UsageLimitWait as "usage_limit_wait" {
        /// When the task goes on, RFC 3339, on the daemon's clock.
        resume_at: String,
        /// The header that said when: `retry-after-ms`, `retry-after`, `x-ratelimit-reset-requests`,
        /// `x-ratelimit-reset-tokens` or `anthropic-ratelimit-*-reset`.
        source: String,
        /// The header asked for longer than the 30-day ceiling on a provider's wait: the task waits
        /// the ceiling (`task.resume` goes on sooner). Absent when false.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        capped: bool,
        /// The kind of failure: `rate_limit` or `overloaded`.
        reason: String,
        /// What the provider said.
        message: String,
    },
    /// The task's next request would have crossed a budget, so it was not sent: the task is `paused`.
    /// A task's budget is raised by `task.resume` with a `budget`; a day's budget goes on by itself at
    /// `resume_at`, when the day turns.
    BudgetReached as "budget_reached" {
        /// Which budget: `task` or `day`.
        scope: crate::budget::BudgetScope,
        /// The ceilings in force.
        budget: crate::budget::Budget,
        /// What was spent against it before the request (the day's: by every task of the day).
        spent: crate::budget::Amount,
        /// What requests already admitted against it may still spend (their usage not yet in the
        /// log: tasks running at once, or this task's summary requests): counted as spent, so
        /// tasks running at once cannot each take the last of a budget. Absent when nothing was.
        #[serde(default, skip_serializing_if = "crate::budget::Amount::is_nothing")]
        in_flight: crate::budget::Amount,
        /// The request that was not sent: its measured size plus its `max_tokens`, and their cost.
        request: crate::budget::Amount,
        /// For a day's budget: when the day turns and the task goes on, RFC 3339.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resume_at: Option<String>,
    },
    /// What agentd believed about a model's context window changed. The new window is kept per server and
    /// model in the database.
    WindowLearned as "window_learned" {
        /// The window believed before, in tokens.
        old_window: Tokens,
        /// The window now believed, in tokens.
        new_window: Tokens,
        /// What taught it: `error` (a refusal stated the limit), `usage` (a usage report showed the server
        /// silently truncating the request) or `declared` (the server's own listing).
        source: WindowSource,
    },
    /// A new request came to a role that had been idle for longer than
    /// `scheduler.idle_thinking_cleanup_after`, and every thinking block but the latest was cleared from its
    /// history (only done when it frees at least `scheduler.idle_thinking_clear_at_least` tokens).
    ThinkingCleared as "thinking_cleared" {
        /// How many thinking blocks were removed.
        blocks_removed: u32,
        /// How many tokens the removal freed, by the role's measure.
        tokens_freed: Tokens,
        /// How long the role had been idle (since its last answer), in milliseconds.
        idle_ms: u64,
    },
    /// An MCP server of the task started and listed its tools: at the first turn of a role that gets
    /// them, or again after a failure.
    McpServerStarted as "mcp_server_started" {
        /// The server (`[mcp.servers.NAME]`).
        server: String,
        /// How many of its tools are offered.
        tools: u32,
    },
    /// An MCP server of the task failed: it could not start (not found, refused by the sandbox, exited),
    /// did not answer the MCP handshake within 30 s, or stopped. A role's requests leave out the tools
    /// of a server that never listed any, and the model is told which server and why; `task.status`
    /// lists the server under `mcp_down` until it starts again.
    McpServerFailed as "mcp_server_failed" {
        /// The server (`[mcp.servers.NAME]`).
        server: String,
        /// What happened, in words, with the program's last lines on stderr when it wrote any.
        error: String,
        /// When it is started again at the earliest (at the next use after that), in milliseconds.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        will_retry_in_ms: Option<u64>,
    },
    /// The model saved a note to durable memory with `remember`, quoting the user. It is in the requests of
    /// later tasks (of this workspace, or of every workspace for `scope` `user`); `agentd memory undo ID`
    /// takes it back.
    MemorySaved as "memory_saved" {
        /// The note's id (`m17`).
        id: String,
        /// What is remembered.
        note: String,
        /// Where it applies: `workspace` or `user`.
        scope: MemoryScope,
    },
    /// The lead handed an objective to a teammate through the `delegate` tool. The teammate's first message
    /// is the objective followed by the lead's `[receipts]`.
    Delegated as "delegated" {
        /// The teammate that takes the objective: `coder`, a specialist's name, or an instance of one
        /// (`coder#2`) when several of a role run at once.
        to_role: Role,
        /// The lead's `delegate` call this delegation answers (absent in logs written before calls were
        /// named here).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call_id: Option<String>,
        /// The working copy the teammate works in, when it writes while another writer runs: made
        /// from the workspace as the delegation started, merged back when it returns.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        working_copy: Option<String>,
        /// The objective the caller wrote for the teammate.
        objective: String,
        /// The evidence item holding the caller's complete receipts list, when it was too large to hand over
        /// whole and the teammate got a bounded view of it instead.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        receipts_id: Option<String>,
        /// The bound the handoff (objective and receipts) was checked against, in tokens: a tenth of the
        /// receiver's window.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        budget_tokens: Option<Tokens>,
        /// The receiver's measure, which `budget_tokens` was checked with.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        measured_by: Option<Measured>,
        /// The delegation's own budget: its requests may use this many tokens (the `delegate` call's
        /// `budget_tokens`, else `[team.ROLE] delegation_budget_tokens`); past it the teammate's turn
        /// ends with what it has done, as a failure its caller reads. The task's budget holds above it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit_tokens: Option<u64>,
        /// The delegation's deadline, RFC 3339 (the call's `deadline` seconds, else `[team.ROLE]
        /// delegation_deadline`, from when it started); past it, the same.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        deadline: Option<String>,
        /// What the workspace holds that its working copy does not — FIFOs, sockets, devices, files
        /// over the size a copy carries — and why; the teammate is told in its handoff.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        not_copied: Vec<NotHeld>,
    },
    /// A delegated teammate finished; its summary goes back to the caller as the `delegate` call's result.
    DelegationReturned as "delegation_returned" {
        /// The teammate that finished.
        from_role: Role,
        /// The teammate's `finish` summary (or, when its turn failed, what failed).
        summary: String,
        /// The lead's `delegate` call this answers.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call_id: Option<String>,
        /// Set when the teammate's turn failed (its model, its window, a working copy that could not be
        /// made): `summary` says what, and the lead reads it as the call's error result.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        failed: bool,
        /// A teammate that worked in a working copy: the evidence item holding its changes whole, as a
        /// unified diff (`agentd evidence read ID`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        patch_evidence_id: Option<String>,
        /// Files its patch adds, modifies, deletes, renames or changes the mode of.
        #[serde(default, skip_serializing_if = "is_zero")]
        files_changed: u64,
        /// Lines its patch adds.
        #[serde(default, skip_serializing_if = "is_zero")]
        lines_added: u64,
        /// Lines its patch removes.
        #[serde(default, skip_serializing_if = "is_zero")]
        lines_removed: u64,
        /// Files the three-way merge could not settle: left as the workspace had them, the teammate's
        /// version kept as evidence, the lead told in the call's result.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        conflicts: Vec<PatchConflict>,
        /// What its working copy holds that its patch could not carry back — a FIFO, a socket or a
        /// device it made, a file it wrote over the size a copy carries — and why; the lead is told in
        /// the call's result.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        not_carried: Vec<NotHeld>,
    },
    /// A branch's changes are about to be merged into the workspace: the workspace's checkpoint
    /// before the merge, recorded before a file is written, so a merge a crash cuts short is still
    /// recorded whole: at the resume, what the workspace holds then against this checkpoint is the
    /// merge's `files_changed` (marked `interrupted`), and the merge repeated records the rest.
    MergeStarted as "merge_started" {
        /// The `delegate` call whose branch is merged (the event's role is the teammate's).
        call_id: String,
        /// The `seq` of that call's `tool_called`: what the merge's `files_changed` names.
        call_seq: u64,
        /// The workspace's checkpoint before the merge.
        checkpoint: String,
    },
    /// Files of the workspace that have other hard links (maybe outside it), found as the task
    /// started: a command writing one in place writes the others too, and a revert puts back the
    /// workspace's name only.
    LinkedFiles as "linked_files" {
        /// Each file, and how many other links it has, in words.
        files: Vec<NotHeld>,
    },
    /// A writing call changed files (the event's role made it): its checkpoints before and after, and
    /// each file that differs. Follows the call's `tool_called`, before its `tool_finished` — or, for a
    /// call a stop cut short, at the resume that found its change. For a delegation that worked in a
    /// copy, this is its merge into the workspace.
    FilesChanged as "files_changed" {
        /// The call (or the `delegate` call whose merge this is).
        call_id: String,
        /// Its tool.
        tool: ToolName,
        /// The `seq` of the call's `tool_called`: what `agentd revert --call` and `agentd diff --call` name.
        call_seq: u64,
        /// The checkpoints and the files.
        #[serde(flatten)]
        change: Box<Change>,
        /// Set when the change was made in a working copy (the path): the workspace has it only once the
        /// delegation's merge (a `files_changed` of its own) brings it back.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        working_copy: Option<String>,
        /// Set for a call a stop cut short, whose change the resume found.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        interrupted: bool,
    },
    /// A server's usage report said it served part of a prompt from its cache, and no cache is declared
    /// for its provider: from now on this server/model's compactions are priced as if it were
    /// (persisted, like a learned window).
    CacheLearned as "cache_learned" {
        /// The provider's base URL.
        server: String,
        /// The model.
        model: String,
        /// What a cached prompt token costs relative to an uncached one.
        read_factor: f64,
        /// The shortest prefix it caches, in tokens: the smallest seen cached, at least 1,024.
        min_tokens: Tokens,
        /// Where `read_factor` comes from: `prices` (the model's `cached_input / input`) or `default`.
        source: String,
    },
    /// A learned prompt cache stopped showing in the usage reports (8 prompts in a row above its minimum
    /// with nothing served from the cache): its compactions go back to the unpriced rule.
    CacheForgotten as "cache_forgotten" {
        /// The provider's base URL.
        server: String,
        /// The model.
        model: String,
    },
    /// A checkpoint of the workspace around a writing call could not be taken (a file that could not
    /// be read, the store refusing): the call ran, and its change is not recorded — `agentd diff` and
    /// `agentd revert` do not know it.
    CheckpointFailed as "checkpoint_failed" {
        /// The call.
        call_id: String,
        /// What failed.
        error: String,
    },
    /// The user put files back as they were (`agentd revert`): each file, from what it was to what it is
    /// again. A revert is a change like any other: it can be reverted.
    Reverted as "reverted" {
        /// `--to SEQ`: every file the task changed after event SEQ put back.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        to_seq: Option<u64>,
        /// `--call SEQ`: the change of the call whose `tool_called` is event SEQ taken back.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call_seq: Option<u64>,
        /// Set when files the user had changed since were overwritten (`--force`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        forced: Vec<String>,
        /// What it did not put back, and why (a special file; the other hard links of a file).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        not_restored: Vec<NotHeld>,
        /// The checkpoints and the files.
        #[serde(flatten)]
        change: Box<Change>,
    },
    /// The agent (the event's role) is going in circles: the same call, or the same short loop of
    /// calls, with the same results again and again, or answers that get nowhere — a failed call is
    /// no progress (`[team.stall]`). Its next request tells it so, once; if it keeps on, its turn ends
    /// with a failure its caller reads.
    AgentStalled as "agent_stalled" {
        /// What it keeps doing, in words.
        why: String,
        /// The calls of the loop (its rounds × its length), or the answers with no progress.
        calls: u32,
    },
    /// A model called `finish` and agentd refused it; the model is told why and goes on.
    FinishRejected as "finish_rejected" {
        /// Why, in words: the role's configured `verify` command failed (``verification `cargo test`
        /// failed``); the model gets the command's output as the `finish` call's error result.
        reason: String,
    },
    /// A call of a tool the task's client asked to approve (`task.submit`'s `ask`) waits for its
    /// answer (`task.permit`) before it runs. Follows the call's `tool_called`.
    PermissionAsked as "permission_asked" {
        /// The call, as in its `tool_called`.
        call_id: String,
        /// Its tool.
        tool: ToolName,
    },
    /// The client answered a `permission_asked` (or nobody did in time): the call runs, or the model
    /// reads a refusal as its error result.
    PermissionAnswered as "permission_answered" {
        /// The call.
        call_id: String,
        /// Whether it may run.
        allowed: bool,
        /// Why it may not, in words (`rejected by the user`, `no answer within 10 minutes`): the
        /// error result the model reads. Absent when allowed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// The task ended well: the lead called `finish`. A terminal event.
    TaskFinished as "task_finished" {
        /// The lead's `finish` summary, which is also the task's `result`.
        summary: String,
    },
    /// The task ended in failure. A terminal event; `task.resume` may continue it.
    TaskFailed as "task_failed" {
        /// What went wrong, in words (a provider error, a compaction that could not fit, a storage failure…).
        error: String,
    },
    /// The task was cancelled by `task.cancel`. A terminal event: a cancelled task never runs again.
    TaskCancelled as "task_cancelled" {},
    /// The task stopped because the daemon shut down or crashed while it ran. A terminal event in the stream,
    /// but not an end state: `task.resume` continues it, after which `task_resumed` follows.
    TaskInterrupted as "task_interrupted" {},
    /// An interrupted or failed task was resumed from its log — by `task.resume`, or, in a fleet, by
    /// the node that took it over once the lease of the node running it lapsed.
    TaskResumed as "task_resumed" {
        /// In a fleet: the node that resumed it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        node: Option<String>,
        /// In a fleet, a task taken over from a node that did not end it: why (that node died, lost
        /// NATS, or stopped it while the fleet could not be written — then since when, and why).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        after: Option<String>,
    },
    /// A follow-up request for a task that had stopped: the lead takes it as a new user message.
    TaskMessage as "task_message" {
        /// The follow-up text, as the lead receives it.
        text: String,
    },
}
}

/// The tool calls in `events` that were called and never finished, in order: (role, tool, call id).
pub fn unfinished_calls<'e>(events: impl IntoIterator<Item = &'e Event>) -> Vec<(Role, ToolName, String)> {
    let mut open: Vec<(Role, ToolName, String)> = Vec::new();
    for e in events {
        match &e.kind {
            EventKind::ToolCalled { tool, call_id, .. } => {
                open.push((e.role.clone(), tool.clone(), call_id.clone()))
            }
            EventKind::ToolFinished { call_id, .. } => open.retain(|(_, _, id)| id != call_id),
            _ => {}
        }
    }
    open
}

/// A delegation that has not returned: the branch a teammate runs for the lead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct OpenBranch {
    /// The agent running it (`coder#2`).
    pub role: Role,
    /// The lead's `delegate` call it answers, when the log names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// What it was handed.
    pub objective: String,
    /// Its working copy, when it writes beside another writer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_copy: Option<String>,
    /// The `seq` of its `delegated` event.
    pub since_seq: u64,
}

/// The delegations in `events` that have not returned, in the order they started: a `delegated`
/// with no `delegation_returned` for its call (or, in a log that names no calls, its agent).
pub fn open_branches<'e>(events: impl IntoIterator<Item = &'e Event>) -> Vec<OpenBranch> {
    let mut open: Vec<OpenBranch> = Vec::new();
    for e in events {
        match &e.kind {
            EventKind::Delegated { to_role, call_id, working_copy, objective, .. } => open.push(OpenBranch {
                role: to_role.clone(),
                call_id: call_id.clone(),
                objective: objective.clone(),
                working_copy: working_copy.clone(),
                since_seq: e.seq,
            }),
            EventKind::DelegationReturned { from_role, call_id, .. } => {
                let at = open.iter().position(|b| match (call_id, &b.call_id) {
                    (Some(id), Some(open_id)) => id == open_id,
                    _ => b.role == *from_role,
                });
                if let Some(at) = at {
                    open.remove(at);
                }
            }
            _ => {}
        }
    }
    open
}

/// An agent told it is going in circles in its current turn: who, and what it keeps doing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Stalled {
    /// The agent.
    pub role: Role,
    /// What it keeps doing, as `agent_stalled` said.
    pub why: String,
}

/// The agents whose current turn is stalled: an `agent_stalled` with no later start of a turn of
/// theirs (a `delegated` to them, or for the lead a `task_started`, `task_resumed` or follow-up),
/// and no later `delegation_returned` from them.
pub fn stalled_agents<'e>(events: impl IntoIterator<Item = &'e Event>) -> Vec<Stalled> {
    let mut stalled: Vec<Stalled> = Vec::new();
    for e in events {
        match &e.kind {
            EventKind::AgentStalled { why, .. } => {
                stalled.retain(|s| s.role != e.role);
                stalled.push(Stalled { role: e.role.clone(), why: why.clone() });
            }
            EventKind::Delegated { to_role, .. } => stalled.retain(|s| s.role != *to_role),
            EventKind::DelegationReturned { from_role, .. } => stalled.retain(|s| s.role != *from_role),
            EventKind::TaskStarted { .. } | EventKind::TaskResumed { .. } | EventKind::TaskMessage { .. } => {
                stalled.retain(|s| s.role != Role::Lead)
            }
            _ => {}
        }
    }
    stalled
}

impl EventKind {
    /// A `delegation_returned` of a teammate that changed nothing through a working copy.
    pub fn returned(from_role: Role, summary: impl Into<String>) -> EventKind {
        EventKind::DelegationReturned {
            from_role,
            summary: summary.into(),
            call_id: None,
            failed: false,
            patch_evidence_id: None,
            files_changed: 0,
            lines_added: 0,
            lines_removed: 0,
            conflicts: Vec::new(),
            not_carried: Vec::new(),
        }
    }

    /// A `tool_finished` for a call whose result was not sized (a delegation's return, or a call the
    /// task stopped on: `interrupted`, its effect unknown, never `ok`).
    pub fn tool_ended(tool: &ToolName, call_id: &str, ok: bool, interrupted: bool) -> EventKind {
        EventKind::ToolFinished {
            tool: tool.clone(),
            call_id: call_id.to_string(),
            ok: ok && !interrupted,
            evidence_id: None,
            result_tokens: None,
            whole_limit: None,
            measured_by: None,
            interrupted,
        }
    }

    /// The event that ends a task's stream (a subscriber stops after it).
    /// The four ends are listed once, in [`EndKind::of`].
    pub fn is_terminal(&self) -> bool {
        EndKind::of(self).is_some()
    }
}

/// The terminal kinds of event, as `task.end` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EndKind {
    /// The task finished (`task_finished`).
    TaskFinished,
    /// The task failed (`task_failed`).
    TaskFailed,
    /// The task was cancelled (`task_cancelled`).
    TaskCancelled,
    /// The task was interrupted (`task_interrupted`) by a shutdown or a crash, and not resumed since.
    TaskInterrupted,
}

impl EndKind {
    /// The end an event is, if it is one.
    pub fn of(kind: &EventKind) -> Option<EndKind> {
        use EventKind as K;
        match kind {
            K::TaskFinished { .. } => Some(EndKind::TaskFinished),
            K::TaskFailed { .. } => Some(EndKind::TaskFailed),
            K::TaskCancelled {} => Some(EndKind::TaskCancelled),
            K::TaskInterrupted {} => Some(EndKind::TaskInterrupted),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unfinished_calls_are_the_ones_without_an_end() {
        let ev = |seq: u64, role: &str, kind: EventKind| Event {
            seq,
            task_id: "t".into(),
            role: role.into(),
            at: String::new(),
            kind,
        };
        let called = |id: &str, tool: &str| EventKind::ToolCalled {
            tool: tool.into(),
            call_id: id.into(),
            checkpoint: None,
        };
        let finished = |id: &str| EventKind::tool_ended(&"x".into(), id, true, false);
        let events = vec![
            ev(1, "lead", called("a", "delegate")),
            ev(2, "coder", called("b", "read_file")),
            ev(3, "coder", finished("b")),
            ev(4, "coder", called("c", "run_command")),
        ];
        assert_eq!(
            unfinished_calls(&events),
            vec![
                (Role::Lead, ToolName::Delegate, "a".to_string()),
                (Role::Coder, ToolName::RunCommand, "c".to_string())
            ]
        );
        // The interrupted flag is on the wire only when set.
        let v = serde_json::to_value(ev(5, "coder", finished("c"))).unwrap();
        assert!(v.get("interrupted").is_none(), "{v}");
    }

    #[test]
    fn wire_shape_is_flat() {
        let e = Event {
            seq: 3,
            task_id: "t".into(),
            role: "lead".into(),
            at: "2026-01-01T00:00:00.000Z".into(),
            kind: EventKind::ToolCalled { tool: "read_file".into(), call_id: "c1".into(), checkpoint: None },
        };
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["kind"], "tool_called");
        assert_eq!(v["tool"], "read_file");
        assert_eq!(v["seq"], 3);
        let back: Event = serde_json::from_value(v).unwrap();
        assert_eq!(back, e);
    }

    /// One event of every kind (the test below checks that none is missing).
    fn one_of_each() -> Vec<EventKind> {
        let t = Tokens(1);
        vec![
            EventKind::TaskStarted { objective: "o".into() },
            EventKind::RequestSent {
                tokens: t,
                estimated: false,
                window: t,
                window_source: WindowSource::Assumed,
                trigger_tokens: t,
                destination_tokens: None,
                measured_by: None,
            },
            EventKind::ResponseReceived {
                finish_reason: "stop".into(),
                usage: None,
                model: Some("m".into()),
                cost_usd: Some(0.5),
            },
            EventKind::UsageRefused {
                reported: RawUsage::default(),
                reasons: vec!["r".into()],
                sent_tokens: t,
                counted: Usage::new(1, 1),
                summary: true,
            },
            EventKind::ToolCalled { tool: ToolName::ReadFile, call_id: "c".into(), checkpoint: None },
            EventKind::tool_ended(&ToolName::ReadFile, "c", true, false),
            EventKind::CompactionStarted {
                tokens_before: t,
                trigger_tokens: t,
                destination_tokens: t,
                window: t,
            },
            EventKind::CompactionFinished {
                tokens_before: t,
                tokens_after: t,
                archive_id: "ev-1".into(),
                batches: 1,
                measured_by: None,
                summary_model: Some("m".into()),
                summary_usage: Some(Usage::new(10, 2)),
                cost_usd: Some(0.25),
                next_trigger_tokens: Some(t),
            },
            EventKind::CompactionFailed { reason: "r".into() },
            EventKind::CompactionRefused { reason: "r".into() },
            EventKind::RetryScheduled {
                reason: "rate_limit".into(),
                attempt: 1,
                max_attempts: 3,
                delay_ms: 1,
            },
            EventKind::UsageLimitWait {
                resume_at: "2026-01-01T03:00:00.000Z".into(),
                source: "retry-after".into(),
                capped: true,
                reason: "rate_limit".into(),
                message: "m".into(),
            },
            EventKind::BudgetReached {
                scope: crate::budget::BudgetScope::Task,
                budget: crate::budget::Budget { tokens: Some(10), cost: None },
                spent: crate::budget::Amount { tokens: 8, cost: None },
                in_flight: crate::budget::Amount { tokens: 1, cost: None },
                request: crate::budget::Amount { tokens: 3, cost: None },
                resume_at: None,
            },
            EventKind::WindowLearned { old_window: t, new_window: t, source: WindowSource::Usage },
            EventKind::ThinkingCleared { blocks_removed: 1, tokens_freed: t, idle_ms: 1 },
            EventKind::McpServerStarted { server: "s".into(), tools: 2 },
            EventKind::McpServerFailed {
                server: "s".into(),
                error: "e".into(),
                will_retry_in_ms: Some(1000),
            },
            EventKind::MemorySaved { id: "m1".into(), note: "n".into(), scope: MemoryScope::User },
            EventKind::Delegated {
                to_role: Role::Coder,
                call_id: None,
                working_copy: None,
                objective: "o".into(),
                receipts_id: None,
                budget_tokens: None,
                measured_by: None,
                limit_tokens: Some(5_000),
                deadline: Some("2026-01-01T00:00:00.000Z".into()),
                not_copied: vec![NotHeld { path: "run/app.sock".into(), why: "a socket".into() }],
            },
            EventKind::returned(Role::Coder, "s"),
            EventKind::AgentStalled { why: "w".into(), calls: 3 },
            EventKind::FilesChanged {
                call_id: "c".into(),
                tool: ToolName::RunCommand,
                call_seq: 4,
                change: Box::new(Change {
                    before: "b".into(),
                    after: "a".into(),
                    files: vec![crate::checkpoint::FileDelta {
                        path: "x".into(),
                        before: None,
                        after: Some(crate::checkpoint::FileState {
                            mode: 0o100644,
                            sha256: "s".into(),
                            unkept: true,
                        }),
                    }],
                    lines_added: 1,
                    lines_removed: 0,
                }),
                working_copy: Some("/w".into()),
                interrupted: true,
            },
            EventKind::Reverted {
                to_seq: Some(3),
                call_seq: None,
                forced: vec!["x".into()],
                not_restored: vec![NotHeld { path: "p".into(), why: "a FIFO".into() }],
                change: Box::default(),
            },
            EventKind::CheckpointFailed { call_id: "c".into(), error: "e".into() },
            EventKind::MergeStarted { call_id: "d1".into(), call_seq: 7, checkpoint: "0".repeat(64) },
            EventKind::LinkedFiles {
                files: vec![NotHeld { path: "notes.txt".into(), why: "1 other hard link".into() }],
            },
            EventKind::CacheLearned {
                server: "http://s".into(),
                model: "m".into(),
                read_factor: 0.1,
                min_tokens: Tokens(1024),
                source: "default".into(),
            },
            EventKind::CacheForgotten { server: "http://s".into(), model: "m".into() },
            EventKind::FinishRejected { reason: "r".into() },
            EventKind::PermissionAsked { call_id: "c".into(), tool: ToolName::EditFile },
            EventKind::PermissionAnswered { call_id: "c".into(), allowed: false, reason: Some("no".into()) },
            EventKind::TaskFinished { summary: "s".into() },
            EventKind::TaskFailed { error: "e".into() },
            EventKind::TaskCancelled {},
            EventKind::TaskInterrupted {},
            EventKind::TaskResumed { node: None, after: Some("taken over from node a".into()) },
            EventKind::TaskMessage { text: "t".into() },
        ]
    }

    #[test]
    fn every_kind_is_named_as_serde_writes_it() {
        // Every kind serde knows (read from the schema it derives), so a new kind without a sample
        // here fails this test rather than going unchecked.
        let schema = serde_json::to_value(schemars::schema_for!(EventKind)).unwrap();
        let mut known: Vec<&str> = schema["oneOf"]
            .as_array()
            .unwrap()
            .iter()
            .map(|variant| variant["properties"]["kind"]["const"].as_str().unwrap())
            .collect();
        known.sort();
        let samples = one_of_each();
        let mut named: Vec<&str> = samples.iter().map(EventKind::name).collect();
        named.sort();
        assert_eq!(named, known);
        for kind in samples {
            let wire = serde_json::to_value(&kind).unwrap();
            assert_eq!(wire["kind"], kind.name(), "{wire}");
            assert_eq!(serde_json::from_value::<EventKind>(wire).unwrap(), kind);
            // A task's end is named by `task.end` as its event is.
            if let Some(end) = EndKind::of(&kind) {
                assert_eq!(serde_json::to_value(end).unwrap(), kind.name());
            }
        }
    }

    #[test]
    fn unit_like_events_round_trip() {
        let v = serde_json::json!({"seq":1,"task_id":"t","role":"lead","at":"x","kind":"task_cancelled"});
        let e: Event = serde_json::from_value(v).unwrap();
        assert!(e.kind.is_terminal());
        assert_eq!(e.kind.name(), "task_cancelled");
    }
}
