//! What an editor is shown of a task: each record of its log (`log.get`) as ACP `session/update`s,
//! and where a prompt's turn ends — a pure fold, the same for a prompt that runs and for
//! `session/load`, which replays the whole log through it.
//!
//! | record | update |
//! |---|---|
//! | the lead's text | `agent_message_chunk` |
//! | its reasoning; a teammate's text and reasoning (`coder: …`) | `agent_thought_chunk` |
//! | a tool call (not `delegate`, `finish`) | `tool_call`: its kind, title, arguments and locations (absolute paths, 1-based lines), `pending` |
//! | `tool_called` | `tool_call_update` `in_progress` |
//! | the call's result | `tool_call_update` `completed` / `failed`, the result bounded to [`RESULT_BYTES`] |
//! | `delegated`, `delegation_returned` | `plan`: one entry per delegation, `in_progress` then `completed` |
//! | a compaction, a learned window, a failed MCP server, the task's end | `agent_message_chunk` the user reads (`[agentd] …`) |
//! | a retry, a teammate going in circles | `agent_thought_chunk` |
//! | `task_started`, `task_message` (only when replaying) | `user_message_chunk` |
//!
//! Where a turn ends ([`Turn::stop`]): `task_finished`, `task_failed`, `task_interrupted` and
//! `usage_limit_wait` end it as `end_turn` (the message says what happened and what to type);
//! `task_cancelled` as `cancelled`; `budget_reached` as `max_tokens`.

use agent_client_protocol::v1::schema::{
    ContentBlock, ContentChunk, Plan, PlanEntry, PlanEntryPriority, PlanEntryStatus, SessionUpdate,
    StopReason, TextContent, ToolCall, ToolCallContent, ToolCallLocation, ToolCallStatus, ToolCallUpdate,
    ToolCallUpdateFields, ToolKind,
};
use agentd_policies::args::{arguments_object, Args};
use agentd_protocol::event::EventKind;
use agentd_protocol::message::{Part, Speaker};
use agentd_protocol::record::Record;
use agentd_protocol::usage::Usage;
use agentd_protocol::{Role, ToolName};
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The most of a tool's result a `tool_call_update` carries, in bytes; the rest is cut with a note
/// (the whole result is in the task's log, or its evidence).
pub const RESULT_BYTES: usize = 4096;

/// The longest objective a plan entry shows, in characters.
const PLAN_CHARS: usize = 160;

/// A task's log read as an editor's session: what has been shown so far that later records refer
/// to (the open calls, the plan), and the turn being read.
#[derive(Debug)]
pub struct Replay {
    workspace: PathBuf,
    /// Whether the user's own words are shown (a replay) or already on the editor's screen (a prompt).
    show_user: bool,
    /// The editor's id of each call shown, by the role that made it and the model's id.
    calls: HashMap<(Role, String), String>,
    /// How many calls have been shown: the editor's ids are numbered by it.
    shown_calls: u64,
    /// The delegations so far, as plan entries, by the `delegate` call they answer.
    plan: Vec<(Option<String>, PlanEntry)>,
    turn: Turn,
}

/// What the turn read so far came to: its token usage and cost, and its end once it is read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Turn {
    /// The usage of every answer in the turn, summed.
    pub usage: Usage,
    /// What the answers cost in USD, where prices are known.
    pub cost_usd: f64,
    /// How many model answers the turn had.
    pub answers: u64,
    /// How the turn ended, once a record ended it.
    pub stop: Option<StopReason>,
}

impl Replay {
    /// A reading of a task in `workspace`; `show_user`: replay the user's messages too.
    pub fn new(workspace: &Path, show_user: bool) -> Replay {
        Replay {
            workspace: workspace.to_path_buf(),
            show_user,
            calls: HashMap::new(),
            shown_calls: 0,
            plan: Vec::new(),
            turn: Turn::default(),
        }
    }

    /// The turn read so far.
    pub fn turn(&self) -> &Turn {
        &self.turn
    }

    /// Starts reading a new turn: usage from zero, no end yet.
    pub fn next_turn(&mut self) -> Turn {
        std::mem::take(&mut self.turn)
    }

    /// The editor's id of the call `call_id` of `role`, while it is shown as running.
    pub fn shown_call(&self, role: &Role, call_id: &str) -> Option<String> {
        self.calls.get(&(role.clone(), call_id.to_string())).cloned()
    }

    /// The updates one record makes.
    pub fn record(&mut self, record: &Record) -> Vec<SessionUpdate> {
        match record {
            Record::Message { role, message } => match message.role {
                Speaker::Assistant => message.parts.iter().filter_map(|part| self.said(role, part)).collect(),
                Speaker::Tool => message.parts.iter().filter_map(|part| self.result(role, part)).collect(),
                Speaker::User | Speaker::System => Vec::new(),
            },
            Record::Event { event } => self.event(&event.role, &event.kind),
            Record::Checkpoint { .. } | Record::Settings { .. } | Record::Receipt { .. } => Vec::new(),
        }
    }

    fn said(&mut self, role: &Role, part: &Part) -> Option<SessionUpdate> {
        match part {
            Part::Text { text } if text.trim().is_empty() => None,
            Part::Text { text } if *role == Role::Lead => Some(message(text.clone())),
            Part::Text { text } => Some(thought(format!("{role}: {text}"))),
            Part::Thinking { redacted: true, .. } => None,
            Part::Thinking { text, .. } if text.trim().is_empty() => None,
            Part::Thinking { text, .. } if *role == Role::Lead => Some(thought(text.clone())),
            Part::Thinking { text, .. } => Some(thought(format!("{role}: {text}"))),
            Part::ToolCall { id, name, arguments } => self.call(role, id, name, arguments),
            Part::ToolResult { .. } | Part::Image { .. } => None,
        }
    }

    /// A call the model made, as the editor's `tool_call`: kind, title, arguments, locations.
    fn call(&mut self, role: &Role, id: &str, name: &str, arguments: &str) -> Option<SessionUpdate> {
        let tool = ToolName::parse(name);
        if matches!(tool, ToolName::Delegate | ToolName::Finish) {
            return None; // a delegation is a plan entry; `finish` ends the turn with its summary
        }
        self.shown_calls += 1;
        let acp_id = format!("{}:{role}:{id}", self.shown_calls);
        self.calls.insert((role.clone(), id.to_string()), acp_id.clone());
        let detail = agentd_policies::args::detail(name, arguments);
        let mut title = match &detail {
            Some(detail) => format!("{name} {detail}"),
            None => name.to_string(),
        };
        if *role != Role::Lead {
            title = format!("{role}: {title}");
        }
        let raw = arguments_object(name, arguments)
            .map(Value::Object)
            .unwrap_or_else(|_| Value::String(arguments.into()));
        let call = ToolCall::new(acp_id, title)
            .kind(kind(&tool))
            .status(ToolCallStatus::Pending)
            .locations(self.locations(&tool, arguments))
            .raw_input(raw);
        Some(SessionUpdate::ToolCall(call))
    }

    /// The files a call names, absolute, with the line it starts at where it names one.
    fn locations(&self, tool: &ToolName, arguments: &str) -> Vec<ToolCallLocation> {
        let Ok(args) = Args::parse(tool.as_str(), arguments) else { return Vec::new() };
        let Some(path) = args.opt_str("path").ok().flatten() else { return Vec::new() };
        let location = ToolCallLocation::new(self.workspace.join(path));
        let line = match tool {
            ToolName::ReadFile => args.opt_u64("offset").ok().flatten().map(|l| l.max(1)),
            _ => None,
        };
        vec![match line.and_then(|l| u32::try_from(l).ok()) {
            Some(line) => location.line(line),
            None => location,
        }]
    }

    fn result(&mut self, role: &Role, part: &Part) -> Option<SessionUpdate> {
        let Part::ToolResult { call_id, content, is_error } = part else { return None };
        let acp_id = self.calls.remove(&(role.clone(), call_id.clone()))?;
        let status = if *is_error { ToolCallStatus::Failed } else { ToolCallStatus::Completed };
        let content = vec![ToolCallContent::from(ContentBlock::Text(TextContent::new(bounded(content))))];
        Some(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
            acp_id,
            ToolCallUpdateFields::new().status(status).content(content),
        )))
    }

    fn event(&mut self, role: &Role, kind: &EventKind) -> Vec<SessionUpdate> {
        let one = |update| vec![update];
        match kind {
            EventKind::TaskStarted { objective } if self.show_user => one(user(objective.clone())),
            EventKind::TaskMessage { text } if self.show_user => one(user(text.clone())),
            EventKind::ToolCalled { call_id, .. } => match self.calls.get(&(role.clone(), call_id.clone())) {
                Some(id) => one(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                    id.clone(),
                    ToolCallUpdateFields::new().status(ToolCallStatus::InProgress),
                ))),
                None => Vec::new(),
            },
            EventKind::ToolFinished { call_id, interrupted: true, .. } => {
                match self.calls.remove(&(role.clone(), call_id.clone())) {
                    Some(id) => one(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                        id,
                        ToolCallUpdateFields::new().status(ToolCallStatus::Failed).content(vec![
                            ToolCallContent::from(ContentBlock::Text(TextContent::new(
                                "interrupted: the task stopped while it ran",
                            ))),
                        ]),
                    ))),
                    None => Vec::new(),
                }
            }
            EventKind::ResponseReceived { usage, cost_usd, .. } => {
                self.turn.answers += 1;
                if let Some(u) = usage {
                    let sum = &mut self.turn.usage;
                    sum.prompt_tokens = sum.prompt_tokens.saturating_add(u.prompt_tokens);
                    sum.completion_tokens = sum.completion_tokens.saturating_add(u.completion_tokens);
                    sum.cache_read_tokens = sum.cache_read_tokens.saturating_add(u.cache_read_tokens);
                    sum.cache_write_tokens = sum.cache_write_tokens.saturating_add(u.cache_write_tokens);
                }
                self.turn.cost_usd += cost_usd.filter(|c| c.is_finite()).unwrap_or(0.0);
                Vec::new()
            }
            EventKind::Delegated { to_role, call_id, objective, .. } => {
                let entry = PlanEntry::new(
                    format!("{to_role}: {}", first_line(objective)),
                    PlanEntryPriority::Medium,
                    PlanEntryStatus::InProgress,
                );
                self.plan.push((call_id.clone(), entry));
                one(self.plan_update())
            }
            EventKind::DelegationReturned { from_role, call_id, failed, .. } => {
                let open = self.plan.iter_mut().find(|(id, entry)| {
                    entry.status == PlanEntryStatus::InProgress
                        && match (id, call_id) {
                            (Some(a), Some(b)) => a == b,
                            _ => entry.content.starts_with(&format!("{from_role}: ")),
                        }
                });
                if let Some((_, entry)) = open {
                    entry.status = PlanEntryStatus::Completed;
                    if *failed {
                        entry.content.push_str(" (failed)");
                    }
                }
                one(self.plan_update())
            }
            EventKind::CompactionFinished { tokens_before, tokens_after, archive_id, batches, .. } => {
                one(message(format!(
                    "\n[agentd] {role}'s context compacted: {tokens_before} → {tokens_after} tokens \
                     ({batches} summary request{}; what left it is archived as {archive_id})\n",
                    if *batches == 1 { "" } else { "s" }
                )))
            }
            EventKind::CompactionFailed { reason } => {
                one(message(format!("\n[agentd] {role}'s compaction failed: {reason}\n")))
            }
            EventKind::CompactionRefused { reason } => {
                one(message(format!("\n[agentd] {role}'s compaction refused, nothing written: {reason}\n")))
            }
            EventKind::WindowLearned { old_window, new_window, source } => one(message(format!(
                "\n[agentd] {role}'s model window learned ({}): {old_window} → {new_window} tokens\n",
                source.as_str()
            ))),
            EventKind::McpServerFailed { server, error, .. } => {
                one(message(format!("\n[agentd] MCP server {server} failed: {error}\n")))
            }
            EventKind::RetryScheduled { reason, attempt, max_attempts, delay_ms, .. } => {
                one(thought(format!(
                "{role}: the model's server failed ({reason}); retry {attempt} of {max_attempts} in {:.1} s",
                *delay_ms as f64 / 1000.0
            )))
            }
            EventKind::AgentStalled { why, .. } => one(thought(format!("{role} is going in circles: {why}"))),
            EventKind::TaskFinished { summary } => {
                self.turn.stop = Some(StopReason::EndTurn);
                one(message(format!("\n{summary}")))
            }
            EventKind::TaskFailed { error } => {
                self.turn.stop = Some(StopReason::EndTurn);
                one(message(format!(
                    "\n[agentd] the task failed: {error}\nSend another prompt to go on from here, or run `agentd resume`."
                )))
            }
            EventKind::TaskInterrupted {} => {
                self.turn.stop = Some(StopReason::EndTurn);
                one(message(
                    "\n[agentd] the daemon stopped while the task ran; send another prompt to go on from here."
                        .to_string(),
                ))
            }
            EventKind::UsageLimitWait { resume_at, message: said, .. } => {
                self.turn.stop = Some(StopReason::EndTurn);
                one(message(format!(
                    "\n[agentd] the provider's usage limit: the task waits until {resume_at} and goes on by \
                     itself ({said})."
                )))
            }
            EventKind::BudgetReached { scope, .. } => {
                self.turn.stop = Some(StopReason::MaxTokens);
                one(message(format!(
                    "\n[agentd] the {} budget is reached: the task is paused (`agentd resume --budget-tokens N` raises it).",
                    scope.as_str()
                )))
            }
            EventKind::TaskCancelled {} => {
                self.turn.stop = Some(StopReason::Cancelled);
                Vec::new()
            }
            _ => Vec::new(),
        }
    }

    fn plan_update(&self) -> SessionUpdate {
        SessionUpdate::Plan(Plan::new(self.plan.iter().map(|(_, entry)| entry.clone()).collect()))
    }
}

/// Which kind of tool an editor shows a call as.
pub fn kind(tool: &ToolName) -> ToolKind {
    match tool {
        ToolName::ReadFile | ToolName::ReadEvidence => ToolKind::Read,
        ToolName::ListDir | ToolName::Search => ToolKind::Search,
        ToolName::WriteFile | ToolName::EditFile => ToolKind::Edit,
        ToolName::RunCommand => ToolKind::Execute,
        ToolName::Remember => ToolKind::Think,
        ToolName::Mcp(t) if t.tool().contains("fetch") || t.tool().contains("navigate") => ToolKind::Fetch,
        ToolName::Delegate | ToolName::Finish | ToolName::Mcp(_) | ToolName::Other(_) => ToolKind::Other,
    }
}

fn text(text: String) -> ContentChunk {
    ContentChunk::new(ContentBlock::Text(TextContent::new(text)))
}

/// Text for the user to read.
pub fn message(s: String) -> SessionUpdate {
    SessionUpdate::AgentMessageChunk(text(s))
}

fn thought(s: String) -> SessionUpdate {
    SessionUpdate::AgentThoughtChunk(text(s))
}

fn user(s: String) -> SessionUpdate {
    SessionUpdate::UserMessageChunk(text(s))
}

/// `content`, cut to [`RESULT_BYTES`] at a character's edge with a note of what was left out.
fn bounded(content: &str) -> String {
    if content.len() <= RESULT_BYTES {
        return content.to_string();
    }
    let end = agentd_protocol::text::floor_boundary(content, RESULT_BYTES);
    format!("{}\n… ({} bytes more in the task's log)", &content[..end], content.len() - end)
}

fn first_line(s: &str) -> String {
    let line = s.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
    // At most PLAN_CHARS characters of the line, then the ellipsis.
    agentd_protocol::text::truncate_chars(line, PLAN_CHARS + 1)
}

#[cfg(test)]
mod tests;
