//! One agent actor per role per task: it owns that role's history and runs its turns.
//!
//! A turn takes a settings snapshot when it starts (a `settings.set` applies from the next turn, never
//! mid-turn), then loops: build the request, pass it through the fitter, send it, persist the answer,
//! run the tools it called and persist their results — until the model calls `finish` or answers
//! without a tool call. Every message is in the task's log before anything depending on it happens.

use crate::clock::{clock, now_rfc3339};
use crate::fitter::{Fit, FitError, Fitter, Learn, MeterOf, Observe, Underestimated, WindowOf};
use crate::meter::Meter;
use crate::provider::{ChatRequest, ChatResponse, Client, ProviderError, ToolSpec};
use crate::retry::{with_retries, Pause, RetryError, Scheduled};
use crate::scheduler::{Wait, Waited};
use crate::task::TaskCtx;
use actix::prelude::*;
use agentd_agents::receipts::Receipt;
use agentd_agents::roles::RoleKind;
use agentd_agents::tools::{self as agent_tools, ToolContext, ToolOutcome};
use agentd_evidence::{NewEvidence, Source, StoreError, Stored, Unit};
use agentd_policies::budget::{handoff_budget, refusal_bound};
use agentd_policies::compaction::OBJECTIVE_PREFIX;
use agentd_policies::thinking;
use agentd_policies::{
    EventKind, Measured, Message, Part, Record, Role, TaskState, Thresholds, Tokens, Window, WindowSource,
};
use serde::Deserialize;
use std::sync::Arc;
use std::time::SystemTime;
use tokio_util::sync::CancellationToken;

/// A turn may take at most this many model round-trips before it is failed as a runaway loop.
pub const MAX_STEPS_PER_TURN: usize = 400;

#[derive(Debug, thiserror::Error)]
pub enum TurnError {
    #[error("cancelled")]
    Cancelled,
    #[error("{0}")]
    Provider(#[from] ProviderError),
    #[error("{0}")]
    Fit(#[from] FitError),
    #[error("storage: {0}")]
    Store(#[from] StoreError),
    #[error("{role} made {steps} model requests in one turn without finishing")]
    Runaway { role: String, steps: usize },
    #[error("{0}")]
    Team(String),
}

impl From<RetryError<TurnError>> for TurnError {
    fn from(e: RetryError<TurnError>) -> TurnError {
        match e {
            RetryError::Cancelled => TurnError::Cancelled,
            RetryError::Provider(e) => TurnError::Provider(e),
            RetryError::Pause(e) => e,
        }
    }
}

/// What a finished turn hands back: the `finish` summary (or the final text).
pub type TurnResult = Result<String, TurnError>;

/// Run one turn. `input` is the new user message (an objective or a delegation); `None` continues
/// from the history as it stands (resume).
#[derive(Message)]
#[rtype(result = "Result<String, TurnError>")]
pub struct RunTurn {
    pub input: Option<String>,
    /// The caller's receipts, inherited by a delegated agent.
    pub inherited: Vec<Receipt>,
}

pub struct AgentActor {
    agent: Arc<tokio::sync::Mutex<Agent>>,
}

impl AgentActor {
    pub fn new(
        role: RoleKind,
        history: Vec<Message>,
        receipts: Vec<Receipt>,
        changed_files: Vec<String>,
        last_answer_at: Option<SystemTime>,
        task: Arc<TaskCtx>,
    ) -> AgentActor {
        AgentActor {
            agent: Arc::new(tokio::sync::Mutex::new(Agent {
                role,
                history,
                task,
                objective: None,
                last_fit: None,
                receipts,
                changed_files,
                inherited: Vec::new(),
                last_answer_at,
            })),
        }
    }
}

impl Actor for AgentActor {
    type Context = Context<Self>;
}

impl Handler<RunTurn> for AgentActor {
    type Result = ResponseFuture<TurnResult>;

    fn handle(&mut self, msg: RunTurn, _: &mut Context<Self>) -> Self::Result {
        let agent = self.agent.clone();
        Box::pin(async move {
            // The turn runs on the multi-thread runtime, not on the actor's arbiter thread.
            let handle = tokio::spawn(async move {
                let mut agent = agent.lock().await;
                agent.inherited = msg.inherited;
                agent.run_turn(msg.input).await
            });
            match handle.await {
                Ok(result) => result,
                Err(e) => Err(TurnError::Team(format!("the turn stopped unexpectedly: {e}"))),
            }
        })
    }
}

/// A delegation the lead was waiting on when the daemon stopped has returned after a resume: store
/// its summary as the `delegate` call's result.
#[derive(Message)]
#[rtype(result = "Result<(), StoreError>")]
pub struct CompleteDelegation {
    pub call_id: String,
    pub from: String,
    pub summary: String,
}

impl Handler<CompleteDelegation> for AgentActor {
    type Result = ResponseFuture<Result<(), StoreError>>;

    fn handle(&mut self, msg: CompleteDelegation, _: &mut Context<Self>) -> Self::Result {
        let agent = self.agent.clone();
        Box::pin(async move {
            let mut agent = agent.lock().await;
            agent.emit(EventKind::DelegationReturned {
                from_role: msg.from.clone(),
                summary: msg.summary.clone(),
            })?;
            agent.persist(Message::tool_result(&msg.call_id, &msg.summary, false))?;
            agent.emit(EventKind::tool_ended("delegate", &msg.call_id, true, false))
        })
    }
}

/// The settings a turn runs with, taken when it starts.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Snapshot {
    pub provider: String,
    pub server: String,
    pub model: String,
    pub compact_at: u8,
    pub command_timeout_s: u64,
    pub verify: Option<String>,
    pub tools: Vec<String>,
    /// Extended thinking's budget (the role's `thinking_budget`), sent only to Anthropic.
    pub thinking_budget: Option<u32>,
    /// The role's `max_output_tokens`.
    pub max_output_tokens: Option<u32>,
}

struct Agent {
    role: RoleKind,
    history: Vec<Message>,
    task: Arc<TaskCtx>,
    /// The objective of the current turn (the task's, or the delegation's).
    objective: Option<String>,
    /// The last request's thresholds, size and measure: what a result or an evidence page is kept
    /// whole against.
    last_fit: Option<LastFit>,
    /// This role's own operations in this task, oldest first.
    receipts: Vec<Receipt>,
    /// The files this role wrote or edited in this task, newest last: its working files.
    changed_files: Vec<String>,
    /// What the delegating agent had done when it handed over.
    inherited: Vec<Receipt>,
    /// When this agent last answered (by the daemon's clock): idleness is measured from here.
    last_answer_at: Option<SystemTime>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FinishArgs {
    summary: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadEvidenceArgs {
    id: String,
    offset: Option<u64>,
    limit: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DelegateArgs {
    to: String,
    objective: String,
}

/// What a result is sized against: the thresholds of the request it answers, that request's size and
/// the measure it was counted with.
#[derive(Clone)]
struct LastFit {
    thresholds: Thresholds,
    tokens: Tokens,
    meter: Meter,
}

/// A tool result as it goes into the history.
struct Bounded {
    content: String,
    evidence_id: Option<String>,
    /// `content`, by the role's measure.
    tokens: Tokens,
}

/// A delegation's first message, and how it was bounded.
struct Handoff {
    text: String,
    receipts_id: Option<String>,
    budget: Tokens,
    measured_by: Measured,
}

/// What running one tool call produced.
struct CallOutcome {
    outcome: ToolOutcome,
    finished: Option<String>,
}

impl Agent {
    fn name(&self) -> &str {
        self.role.name()
    }

    /// The summary of a turn whose end is already in the history: a final answer with no tool call,
    /// or a `finish` call that was accepted.
    fn already_finished(&self) -> Option<String> {
        let (i, last) = self.history.iter().enumerate().rev().find(|(_, m)| m.role == Role::Assistant)?;
        if i + 1 == self.history.len() && last.tool_calls().next().is_none() {
            return Some(last.text());
        }
        let (id, _, args) = last.tool_calls().find(|(_, name, _)| *name == "finish")?;
        let accepted = self.history[i + 1..]
            .iter()
            .flat_map(|m| &m.parts)
            .any(|p| matches!(p, Part::ToolResult { call_id, is_error: false, .. } if call_id == id));
        if !accepted {
            return None;
        }
        let args: FinishArgs = serde_json::from_str(args).ok()?;
        Some(args.summary)
    }

    /// The current turn's objective; after a resume, the newest plain user message of the history.
    fn objective(&self) -> String {
        if let Some(o) = &self.objective {
            return o.clone();
        }
        self.history
            .iter()
            .rev()
            .filter(|m| m.role == Role::User)
            .map(|m| m.text())
            .find(|t| !t.starts_with('['))
            .map(|t| t.strip_prefix(OBJECTIVE_PREFIX).map(str::to_string).unwrap_or(t))
            .unwrap_or_default()
    }

    fn emit(&self, kind: EventKind) -> Result<(), StoreError> {
        self.task.shared.bus.emit(&self.task.task_id, self.role.name(), kind).map(|_| ())
    }

    fn persist(&mut self, message: Message) -> Result<(), StoreError> {
        let record = Record::Message { role: self.name().to_string(), message: message.clone() };
        self.task.shared.store.append(&self.task.task_id, &record)?;
        self.history.push(message);
        Ok(())
    }

    async fn run_turn(&mut self, input: Option<String>) -> TurnResult {
        let snapshot = self.task.snapshot(&self.role)?;
        let record = Record::Settings {
            role: self.name().to_string(),
            settings: serde_json::to_value(&snapshot).unwrap_or_default(),
        };
        self.task.shared.store.append(&self.task.task_id, &record)?;
        if input.is_none() {
            if let Some(summary) = self.already_finished() {
                // Resumed after the turn's end was stored: it is over.
                return Ok(summary);
            }
        }
        if let Some(text) = input {
            self.clear_idle_thinking(&snapshot).await?;
            self.objective = Some(text.clone());
            self.persist(Message::user(text))?;
        }
        let client = self.task.client(&snapshot.provider)?;
        let tools: Vec<ToolSpec> = agentd_agents::schema::schemas(&snapshot.tools)
            .map_err(|e| TurnError::Team(format!("role {}: unknown tool {}", self.name(), e.0)))?
            .into_iter()
            .map(|s| ToolSpec { name: s.name, description: s.description, parameters: s.parameters })
            .collect();
        let system = self.task.system_prompt(&self.role);
        let mut learned_once = false;
        let mut underestimated_once = false;
        for _step in 0..MAX_STEPS_PER_TURN {
            if self.task.cancel.is_cancelled() {
                return Err(TurnError::Cancelled);
            }

            let request = ChatRequest {
                model: snapshot.model.clone(),
                system: system.clone(),
                messages: self.history.clone(),
                tools: tools.clone(),
                tool_choice_none: false,
                max_tokens: snapshot.max_output_tokens,
                thinking_budget: snapshot.thinking_budget,
            };
            let fitted = match self
                .ask_fitter(Fit {
                    task_id: self.task.task_id.clone(),
                    role: self.name().to_string(),
                    client: client.clone(),
                    request,
                    compact_at: snapshot.compact_at,
                    objective: self.objective(),
                    changed_files: self.changed_files.iter().rev().cloned().collect(),
                    workspace: self.task.workspace.clone(),
                    cancel: self.task.cancel.clone(),
                })
                .await?
            {
                Ok(f) => f,
                Err(FitError::Cancelled) => return Err(TurnError::Cancelled),
                Err(e) => return Err(e.into()),
            };
            if let Some(done) = &fitted.compacted {
                // The accepted candidate becomes the active history, recorded as a checkpoint.
                self.task.shared.store.append(
                    &self.task.task_id,
                    &Record::Checkpoint {
                        role: self.name().to_string(),
                        subtype: "compaction".into(),
                        history: done.history.clone(),
                        archive_id: Some(done.archive_id.clone()),
                    },
                )?;
                self.history = done.history.clone();
            }
            let request = fitted.request.clone();
            self.last_fit = Some(LastFit {
                thresholds: fitted.thresholds,
                tokens: fitted.count.total.tokens,
                meter: fitted.meter.clone(),
            });
            self.emit(EventKind::RequestSent {
                tokens: fitted.count.total.tokens,
                estimated: fitted.count.total.estimated,
                window: fitted.window.tokens,
                window_source: fitted.window.source,
                trigger_tokens: fitted.thresholds.trigger,
                measured_by: Some(fitted.meter.measured()),
            })?;
            let response = match self.chat(&client, &request).await {
                Ok(r) => r,
                Err(TurnError::Provider(ProviderError::ContextOverflow { limit, message }))
                    if !learned_once && limit != Some(fitted.window.tokens) =>
                {
                    // The refusal states the real window: remember it and measure again. One that
                    // states none still proves this request did not fit: just below it is the bound.
                    learned_once = true;
                    let limit = limit.unwrap_or_else(|| refusal_bound(fitted.count.total.tokens));
                    let window = Window { tokens: limit, source: WindowSource::Error };
                    let old = self
                        .ask_fitter(Learn {
                            server: client.base_url().to_string(),
                            model: snapshot.model.clone(),
                            window,
                        })
                        .await??;
                    self.emit(EventKind::WindowLearned {
                        old_window: old.tokens,
                        new_window: limit,
                        source: WindowSource::Error,
                    })?;
                    tracing::info!(model = %snapshot.model, %limit, %message, "window learned from a refusal");
                    continue;
                }
                Err(TurnError::Provider(ProviderError::ContextOverflow { message, .. }))
                    if !underestimated_once && fitted.meter.calibration().is_calibrated() =>
                {
                    // Refused at the window we know: the calibrated count was too low. The
                    // calibration widens its margin; measured again, the request is compacted.
                    underestimated_once = true;
                    self.ask_fitter(Underestimated {
                        task_id: self.task.task_id.clone(),
                        role: self.name().to_string(),
                        window: fitted.window.tokens,
                    })
                    .await?;
                    tracing::warn!(model = %snapshot.model, %message, "refused although counted as fitting; measuring again");
                    continue;
                }
                Err(e) => return Err(e),
            };
            // The server took the request: its usage report calibrates the count, and it is the
            // basis of the next request.
            let observed = self
                .ask_fitter(Observe {
                    task_id: self.task.task_id.clone(),
                    role: self.name().to_string(),
                    usage: response.usage,
                })
                .await??;
            if let Some((old, new)) = observed {
                tracing::warn!(model = %snapshot.model, old = %old.tokens, new = %new.tokens, "window corrected from a usage report");
                self.emit(EventKind::WindowLearned {
                    old_window: old.tokens,
                    new_window: new.tokens,
                    source: new.source,
                })?;
            }
            // A later refusal in this turn may teach a new limit again.
            learned_once = false;
            underestimated_once = false;
            self.emit(EventKind::ResponseReceived {
                finish_reason: response.finish_reason.clone(),
                usage: response.usage,
            })?;
            self.last_answer_at = Some(clock().now());
            let message = response.message;
            let calls: Vec<(String, String, String)> = message
                .tool_calls()
                .map(|(id, name, args)| (id.to_string(), name.to_string(), args.to_string()))
                .collect();
            self.persist(message.clone())?;
            if calls.is_empty() {
                return Ok(message.text());
            }
            let mut finished = None;
            // What the next request carries before the results: this one and the answer.
            let mut carried = fitted.count.total.tokens + fitted.meter.count_message(&message).tokens;
            for (call_id, name, arguments) in calls {
                self.emit(EventKind::ToolCalled { tool: name.clone(), call_id: call_id.clone() })?;
                if let Some(path) = agent_tools::changed_path(&name, &arguments) {
                    self.changed_files.retain(|p| *p != path);
                    self.changed_files.push(path);
                }
                let mut result = self.call_tool(&snapshot, &name, &arguments).await?;
                // No secret reaches the history, the evidence, a receipt or the model.
                if let std::borrow::Cow::Owned(clean) =
                    self.task.shared.redactor.redact(&result.outcome.content)
                {
                    result.outcome.content = clean;
                }
                let limit = fitted.thresholds.whole_result_limit(carried);
                let bounded = self
                    .bounded(
                        &snapshot,
                        &client,
                        &fitted.meter,
                        limit,
                        &name,
                        &call_id,
                        &arguments,
                        &result.outcome,
                    )
                    .await?;
                carried += bounded.tokens;
                self.persist(Message::tool_result(&call_id, &bounded.content, !result.outcome.ok))?;
                self.receipt(Receipt::new(&name, &arguments, &result.outcome, bounded.evidence_id.clone()))?;
                self.emit(EventKind::ToolFinished {
                    tool: name.clone(),
                    call_id: call_id.clone(),
                    ok: result.outcome.ok,
                    evidence_id: bounded.evidence_id,
                    result_tokens: Some(bounded.tokens),
                    whole_limit: Some(limit),
                    measured_by: Some(fitted.meter.measured()),
                    interrupted: false,
                })?;
                if result.finished.is_some() {
                    finished = result.finished;
                }
            }
            if let Some(summary) = finished {
                return Ok(summary);
            }
        }
        Err(TurnError::Runaway { role: self.name().to_string(), steps: MAX_STEPS_PER_TURN })
    }

    async fn call_tool(
        &mut self,
        snapshot: &Snapshot,
        name: &str,
        arguments: &str,
    ) -> Result<CallOutcome, TurnError> {
        let plain = |outcome: ToolOutcome| Ok(CallOutcome { outcome, finished: None });
        if !snapshot.tools.iter().any(|t| t == name) {
            return plain(failure(format!(
                "tool {name:?} is not available to the {} role; available: {}",
                self.name(),
                snapshot.tools.join(", ")
            )));
        }
        match name {
            "finish" => {
                let args: FinishArgs = match parse_args(name, arguments) {
                    Ok(a) => a,
                    Err(outcome) => return plain(outcome),
                };
                if let Some(verify) = &snapshot.verify {
                    let ctx = self.tool_context(snapshot);
                    let check = serde_json::json!({ "command": verify }).to_string();
                    let outcome = self.cancellable(agent_tools::execute(&ctx, "run_command", &check)).await?;
                    if !outcome.ok {
                        let reason = format!("verification `{verify}` failed");
                        self.emit(EventKind::FinishRejected { reason: reason.clone() })?;
                        return plain(failure(format!(
                            "finish rejected: {reason}; fix it and call finish again.\n{}",
                            outcome.content
                        )));
                    }
                }
                Ok(CallOutcome {
                    outcome: ToolOutcome { ok: true, content: "finished".into(), complete: true },
                    finished: Some(args.summary),
                })
            }
            "delegate" => {
                let args: DelegateArgs = match parse_args(name, arguments) {
                    Ok(a) => a,
                    Err(outcome) => return plain(outcome),
                };
                let Some(target) = self.task.member(&args.to) else {
                    return plain(failure(format!(
                        "no team member {:?}; delegate to one of: {}",
                        args.to,
                        self.task.delegates().join(", ")
                    )));
                };
                if args.to == self.name() {
                    return plain(failure("an agent cannot delegate to itself".into()));
                }
                let handoff = self.handoff(&args.to, &args.objective).await?;
                self.emit(EventKind::Delegated {
                    to_role: args.to.clone(),
                    objective: args.objective.clone(),
                    receipts_id: handoff.receipts_id,
                    budget_tokens: Some(handoff.budget),
                    measured_by: Some(handoff.measured_by),
                })?;
                let mut inherited = self.inherited.clone();
                inherited.extend(self.receipts.iter().cloned());
                let summary = target
                    .send(RunTurn { input: Some(handoff.text), inherited })
                    .await
                    .map_err(|e| TurnError::Team(format!("{} is gone: {e}", args.to)))??;
                self.emit(EventKind::DelegationReturned {
                    from_role: args.to.clone(),
                    summary: summary.clone(),
                })?;
                plain(ToolOutcome { ok: true, content: summary, complete: true })
            }
            "read_evidence" => {
                let args: ReadEvidenceArgs = match parse_args(name, arguments) {
                    Ok(a) => a,
                    Err(outcome) => return plain(outcome),
                };
                let Some(last) = self.last_fit.clone() else {
                    return plain(failure("read_evidence before any request was measured".into()));
                };
                // A page is sized by the same rule as a whole result.
                let budget = last.thresholds.whole_result_limit(last.tokens);
                let client = self.task.client(&snapshot.provider)?;
                plain(
                    match self
                        .page(
                            snapshot,
                            &client,
                            &last.meter,
                            &args.id,
                            args.offset.unwrap_or(0),
                            args.limit,
                            budget,
                        )
                        .await
                    {
                        Ok(page) => ToolOutcome { ok: true, content: page, complete: true },
                        Err(e) => failure(e),
                    },
                )
            }
            _ => {
                let ctx = self.tool_context(snapshot);
                let outcome = self.cancellable(agent_tools::execute(&ctx, name, arguments)).await?;
                plain(outcome)
            }
        }
    }

    /// Sends a request, retrying rate limits, server errors and stream anomalies by the retry policy.
    /// A retry resends the same request: nothing of a failed attempt was stored.
    async fn chat(&self, client: &Client, request: &ChatRequest) -> Result<ChatResponse, TurnError> {
        let cancel = &self.task.cancel;
        let mut pause = TurnPause { agent: self };
        Ok(with_retries(&self.task.shared.retry, cancel, &mut pause, || client.chat(request, cancel)).await?)
    }

    /// A new user request after more than the idle threshold since this agent last answered: every
    /// thinking part but the latest goes, once. The cleaned history becomes the active one through a
    /// checkpoint (so the cleared blocks never return, through resume and restarts), and a latch in
    /// the store records it.
    async fn clear_idle_thinking(&mut self, snapshot: &Snapshot) -> Result<(), TurnError> {
        let Some(last) = self.last_answer_at else { return Ok(()) };
        let idle = clock().now().duration_since(last).unwrap_or_default();
        if !thinking::is_due(idle, self.task.shared.config.idle_thinking_cleanup_after) {
            return Ok(());
        }
        let Some((cleaned, removed)) = thinking::clear_outdated(&self.history) else { return Ok(()) };
        let meter = self.meter(snapshot).await?;
        let mut freed = Tokens::ZERO;
        for part in &removed {
            if let Part::Thinking { text, signature, .. } = part {
                freed += meter.count_text(text).tokens;
                if let Some(sig) = signature {
                    freed += meter.count_text(sig).tokens;
                }
            }
        }
        let at_least = self.task.shared.config.idle_thinking_clear_at_least;
        if !thinking::worth_clearing(freed, at_least) {
            tracing::debug!(role = self.name(), %freed, %at_least, "Context GC: skipped, it would free too little");
            return Ok(());
        }
        let seq = self.task.shared.store.append(
            &self.task.task_id,
            &Record::Checkpoint {
                role: self.name().to_string(),
                subtype: "thinking_cleanup".into(),
                history: cleaned.clone(),
                archive_id: None,
            },
        )?;
        self.history = cleaned;
        let latch =
            serde_json::json!({"checkpoint_seq": seq, "blocks_removed": removed.len(), "at": now_rfc3339()});
        self.task
            .shared
            .store
            .set_setting(&format!("thinking_latch/{}/{}", self.task.task_id, self.name()), &latch)?;
        tracing::debug!(role = self.name(), "Context GC: cleared {} outdated thinking blocks", removed.len());
        self.emit(EventKind::ThinkingCleared {
            blocks_removed: removed.len() as u32,
            tokens_freed: freed,
            idle_ms: idle.as_millis() as u64,
        })?;
        Ok(())
    }

    fn receipt(&mut self, receipt: Receipt) -> Result<(), StoreError> {
        let record = Record::Receipt {
            role: self.name().to_string(),
            receipt: serde_json::to_value(&receipt).unwrap_or_default(),
        };
        self.task.shared.store.append(&self.task.task_id, &record)?;
        self.receipts.push(receipt);
        Ok(())
    }

    /// The handoff to `to`: the objective and everything this agent knows was done (inherited and
    /// own receipts), bounded to a tenth of the receiver's window by the receiver's measure. A list too
    /// long for that is archived whole as evidence, and read back before the handoff goes: if the
    /// archive cannot be written or read, the delegation fails loudly rather than drop receipts.
    async fn handoff(&self, to: &str, objective: &str) -> Result<Handoff, TurnError> {
        let mut receipts = self.inherited.clone();
        receipts.extend(self.receipts.iter().cloned());
        let rc = self
            .task
            .shared
            .config
            .role(to)
            .ok_or_else(|| TurnError::Team(format!("no team member {to:?}")))?;
        let client = self.task.client(&rc.provider)?;
        let server = client.base_url().to_string();
        let window = self.ask_fitter(WindowOf { client, model: rc.model.clone(), fresh: false }).await??;
        let budget = handoff_budget(window.tokens);
        let meter = self.ask_fitter(MeterOf { server, model: rc.model.clone() }).await?;
        let measured_by = meter.measured();
        let count = |t: &str| meter.count_text(t).tokens.0;
        let from = self.name().to_string();
        if agentd_agents::handoff::fits_whole(&from, &receipts, budget.0, &count) {
            return Ok(Handoff {
                text: agentd_agents::handoff::handoff(objective, &from, &receipts, budget.0, &count, None)
                    .text,
                receipts_id: None,
                budget,
                measured_by,
            });
        }
        let fail = |why: String| {
            TurnError::Team(format!(
                "handoff to {to} failed: the {} receipts of {from} exceed the handoff budget of {budget} tokens \
                 and {why}; refusing to hand over with receipts dropped",
                receipts.len()
            ))
        };
        let data = agentd_agents::handoff::archive_lines(&receipts);
        let stored = self
            .task
            .shared
            .store
            .put_evidence(
                NewEvidence {
                    data: data.as_bytes(),
                    media_type: "application/x-ndjson",
                    source: Source {
                        task_id: self.task.task_id.clone(),
                        role: from.clone(),
                        tool: "receipts".into(),
                        call_id: None,
                        detail: Some(format!("receipts of {from} handed to {to}")),
                    },
                    complete: true,
                    incomplete_reason: None,
                    created_at: &now_rfc3339(),
                },
                &self.task.workspace.root().join(".agentd-evidence"),
            )
            .map_err(|e| fail(format!("their archive could not be written: {e}")))?;
        let id = match stored {
            Stored::InStore(meta) => {
                // Read it back: an archive nobody can read is no archive.
                self.task
                    .shared
                    .store
                    .read_evidence(&meta.id, 0, 1, Unit::Lines)
                    .map_err(|e| fail(format!("their archive {} cannot be read back: {e}", meta.id)))?;
                meta.id
            }
            Stored::Fallback { path, .. } => {
                return Err(fail(format!(
                    "the evidence database could not hold their archive (written whole to {} instead)",
                    path.display()
                )))
            }
        };
        let view = agentd_agents::handoff::handoff(objective, &from, &receipts, budget.0, &count, Some(&id));
        Ok(Handoff { text: view.text, receipts_id: Some(id), budget, measured_by })
    }

    /// The measure of this role's model (the fitter's: the same one every size decision uses).
    async fn meter(&self, snapshot: &Snapshot) -> Result<Meter, TurnError> {
        self.ask_fitter(MeterOf { server: snapshot.server.clone(), model: snapshot.model.clone() }).await
    }

    /// Sends `msg` to the fitter and waits for its answer; a fitter that is gone is a team error.
    async fn ask_fitter<M>(&self, msg: M) -> Result<M::Result, TurnError>
    where
        M: actix::Message + Send + 'static,
        M::Result: Send,
        Fitter: Handler<M>,
    {
        self.task
            .shared
            .fitter
            .send(msg)
            .await
            .map_err(|e| TurnError::Team(format!("the fitter is gone: {e}")))
    }

    /// A tool result as the model gets it: whole when it is within `limit` (by the role's measure;
    /// see `Thresholds::whole_result_limit`); otherwise stored whole as evidence, and the model gets
    /// the first page, the id, the size and how to read on.
    #[allow(clippy::too_many_arguments)]
    async fn bounded(
        &self,
        snapshot: &Snapshot,
        client: &Client,
        meter: &Meter,
        limit: Tokens,
        tool: &str,
        call_id: &str,
        arguments: &str,
        outcome: &ToolOutcome,
    ) -> Result<Bounded, TurnError> {
        let whole = |tokens: Tokens| Bounded { content: outcome.content.clone(), evidence_id: None, tokens };
        // An evidence page was sized when it was read.
        if tool == "read_evidence" {
            return Ok(whole(meter.count_text(&outcome.content).tokens));
        }
        let tokens = meter.measure_text(client, &snapshot.model, &outcome.content).await.tokens;
        if tokens <= limit {
            return Ok(whole(tokens));
        }
        let detail = serde_json::from_str::<serde_json::Value>(arguments).ok().and_then(|v| {
            v.get("path").or_else(|| v.get("command")).and_then(|p| p.as_str()).map(str::to_string)
        });
        let stored = self
            .task
            .shared
            .store
            .put_evidence(
                NewEvidence {
                    data: outcome.content.as_bytes(),
                    media_type: "text/plain",
                    source: Source {
                        task_id: self.task.task_id.clone(),
                        role: self.name().to_string(),
                        tool: tool.to_string(),
                        call_id: Some(call_id.to_string()),
                        detail,
                    },
                    complete: outcome.complete,
                    incomplete_reason: (!outcome.complete)
                        .then(|| "the producer was cut off (see the text)".into()),
                    created_at: &now_rfc3339(),
                },
                &self.task.workspace.root().join(".agentd-evidence"),
            )
            .map_err(|e| TurnError::Team(format!("cannot store a large {tool} result: {e}")))?;
        match stored {
            Stored::InStore(meta) => {
                let page = self
                    .page(snapshot, client, meter, &meta.id, 0, None, limit)
                    .await
                    .map_err(TurnError::Team)?;
                let tokens = meter.count_text(&page).tokens;
                Ok(Bounded { content: page, evidence_id: Some(meta.id), tokens })
            }
            Stored::Fallback { path, meta } => {
                // The database could not hold it: the whole text is in a file the model can read.
                let rel =
                    path.strip_prefix(self.task.workspace.root()).unwrap_or(&path).display().to_string();
                let mut head = outcome.content.clone();
                let mut cut = (limit.0 as usize).min(head.len());
                while !head.is_char_boundary(cut) {
                    cut -= 1;
                }
                head.truncate(cut);
                let content = format!(
                    "[the {tool} result ({} bytes) was too large for one request and the evidence \
                     database could not take it; it is stored whole in the workspace file {rel} — \
                     read it with read_file {{\"path\": \"{rel}\", \"offset\": N}}. Its beginning:]\n{head}",
                    meta.bytes
                );
                let tokens = meter.count_text(&content).tokens;
                Ok(Bounded { content, evidence_id: None, tokens })
            }
        }
    }

    /// One page of evidence, in lines from `offset`, no larger than `budget` tokens, with a header
    /// that says where it is and how to read on.
    #[allow(clippy::too_many_arguments)]
    async fn page(
        &self,
        snapshot: &Snapshot,
        client: &Client,
        meter: &Meter,
        id: &str,
        offset: u64,
        limit: Option<u64>,
        budget: Tokens,
    ) -> Result<String, String> {
        let store = &self.task.shared.store;
        let meta = store.evidence(id).map_err(|e| e.to_string())?;
        let mut lines = limit.unwrap_or(400).clamp(1, 100_000);
        loop {
            let page = store.read_evidence(id, offset, lines, Unit::Lines).map_err(|e| e.to_string())?;
            let fits = meter.measure_text(client, &snapshot.model, &page.data).await.tokens <= budget;
            if fits || lines == 1 {
                let mut data = page.data;
                let mut note = String::new();
                if !fits {
                    // One line longer than a page: show its beginning and say so.
                    let mut cut = ((budget.0 * 3) as usize).min(data.len());
                    while !data.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    data.truncate(cut);
                    note =
                        format!(" Line {} is longer than a page; only its beginning is shown.", offset + 1);
                }
                let end = page.offset + page.len;
                let next = match page.next_offset {
                    Some(n) => format!(" Read on with read_evidence {{\"id\": \"{id}\", \"offset\": {n}}}."),
                    None => " This is the end.".to_string(),
                };
                let complete =
                    if meta.complete { "" } else { " The producer was cut off: the evidence is incomplete." };
                return Ok(format!(
                    "[evidence {id}: {} bytes, {} lines; lines {}-{} shown.{next}{note}{complete}]\n{data}",
                    meta.bytes,
                    meta.lines,
                    page.offset + 1,
                    end
                ));
            }
            lines = (lines / 2).max(1);
        }
    }

    fn tool_context(&self, snapshot: &Snapshot) -> ToolContext {
        ToolContext {
            workspace: self.task.workspace.clone(),
            command_timeout: std::time::Duration::from_secs(snapshot.command_timeout_s),
            max_output_bytes: 8 << 20,
            sandbox: self.task.shared.config.sandbox.clone(),
        }
    }

    async fn cancellable<F: std::future::Future<Output = ToolOutcome>>(
        &self,
        f: F,
    ) -> Result<ToolOutcome, TurnError> {
        tokio::select! {
            outcome = f => Ok(outcome),
            _ = self.task.cancel.cancelled() => Err(TurnError::Cancelled),
        }
    }
}

/// How a turn waits for a retry: announced as `retry_scheduled`, the task `waiting_retry` meanwhile,
/// the wait itself the scheduler's.
struct TurnPause<'a> {
    agent: &'a Agent,
}

impl Pause for TurnPause<'_> {
    type Error = TurnError;

    async fn pause(
        &mut self,
        retry: &Scheduled<'_>,
        cancel: &CancellationToken,
    ) -> Result<Waited, TurnError> {
        let agent = self.agent;
        let (error, attempt, delay_ms) = (retry.error, retry.attempt, retry.delay_ms());
        tracing::info!(role = agent.name(), %error, attempt, delay_ms, "retry scheduled");
        agent.emit(EventKind::RetryScheduled {
            reason: retry.reason().to_string(),
            attempt,
            max_attempts: retry.max_attempts,
            delay_ms,
        })?;
        agent.task.set_state(TaskState::WaitingRetry)?;
        let waited = agent
            .task
            .shared
            .scheduler
            .send(Wait { delay: retry.delay, cancel: cancel.clone() })
            .await
            .map_err(|e| TurnError::Team(format!("the scheduler is gone: {e}")))?;
        if waited == Waited::Elapsed {
            agent.task.set_state(TaskState::Running)?;
        }
        Ok(waited)
    }
}

fn failure(content: String) -> ToolOutcome {
    ToolOutcome { ok: false, content, complete: true }
}

fn parse_args<T: serde::de::DeserializeOwned>(tool: &str, arguments: &str) -> Result<T, ToolOutcome> {
    serde_json::from_str(arguments).map_err(|e| failure(format!("invalid arguments for {tool}: {e}")))
}
