//! The turn loop, one small step per function.
//!
//! [`Agent::run_turn`] only strings the steps together:
//!
//! 1. [`start`](Agent::start): take the settings snapshot and log it, stop at once when a resumed
//!    turn's end is already in the history, log the new input, and fix what the whole turn shares
//!    (the client, the system prompt, the tool schemas — [`tool_specs`]).
//! 2. [`fit`](Agent::fit): build the request from the history and pass it through the fitter; a
//!    compaction it made becomes the active history through a checkpoint; `request_sent`.
//! 3. [`send`](Agent::send): the request to the model, retried by [`crate::retry`]; a retry is
//!    announced as `retry_scheduled` with the task `waiting_retry` while the scheduler waits.
//! 4. On a context-overflow refusal, [`Refusals::lesson`] decides what it teaches and
//!    [`learn`](Agent::learn) teaches the fitter (a stated window, or a calibration that counted too
//!    low), and the step is measured again.
//! 5. [`record_usage`](Agent::record_usage): the answer's usage report, judged against what was
//!    sent ([`crate::reported`]; refused: `usage_refused`, and our count stands in), calibrates the
//!    count (or corrects the window), `response_received`.
//! 6. [`run_tools`](Agent::run_tools): the answer is logged, each call it makes is run and its
//!    result logged (sized by [`super::results`]) with a receipt and `tool_finished`.
//!
//! The loop ends when the model answers without a tool call or an accepted `finish`, when the task is
//! cancelled, or after [`MAX_STEPS_PER_TURN`] round-trips.

use super::refusals::{Lesson, Refusals};
use super::servers::unavailable_notice;
use super::{Agent, LastFit, MAX_STEPS_PER_TURN};
use crate::clock::clock;
use crate::error::{TurnError, TurnResult};
use crate::fitter::{Fit, FitError, Fitted, Learn, Observe, Requested, RequestedDone, Underestimated};
use crate::reported::{refused_event, verdict, Request};
use crate::retry::{ask, wait, with_retries, Pause, Scheduled, WaitOut, Waited};
use crate::spending::{Admitted, Gate};
use crate::tool_servers::RoleTools;
use agentd_agents::receipts::receipt;
use agentd_agents::tools as agent_tools;
use agentd_policies::reported::Judged;
use agentd_protocol::ToolSchema;
use agentd_protocol::TurnSettings;
use agentd_protocol::{ChatRequest, ChatResponse, Model, ProviderError};
use agentd_protocol::{CheckpointKind, MessageKind, Role, ToolName};
use agentd_protocol::{EventKind, Message, Part, Record, Speaker, TaskState, Tokens, Usage};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// What stays fixed for a whole turn: its settings and what every request of it carries.
pub(super) struct Turn {
    pub snapshot: TurnSettings,
    pub client: Arc<dyn Model>,
    pub system: String,
    pub tools: Vec<ToolSchema>,
}

/// How a turn begins.
pub(super) enum Started {
    /// A resumed turn whose end was already stored: its summary.
    Over(String),
    Run(Turn),
}

/// A tool call of an answer.
#[derive(Debug, Clone)]
pub(super) struct Call {
    pub id: String,
    pub name: ToolName,
    pub arguments: String,
}

/// The tools of a role as the provider gets them; an unknown tool name is a team error.
pub(super) fn tool_specs(role: &Role, tools: &[ToolName]) -> Result<Vec<ToolSchema>, TurnError> {
    // An MCP tool's schema is its server's, from `TaskServers::tools_for`: only built-ins here.
    let builtin: Vec<ToolName> = tools.iter().filter(|t| t.mcp().is_none()).cloned().collect();
    agentd_agents::schema::schemas(&builtin)
        .map_err(|e| TurnError::UnknownTool { role: role.clone(), tool: e.0 })
}

impl Agent {
    pub(super) async fn run_turn(&mut self, input: Option<String>) -> TurnResult {
        let span = crate::spans::turn(&self.task.task_id, self.name());
        self.turn_steps(input).instrument(span).await
    }

    async fn turn_steps(&mut self, input: Option<String>) -> TurnResult {
        let turn = match self.start(input).await? {
            Started::Over(summary) => return Ok(summary),
            Started::Run(turn) => turn,
        };
        let mut refusals = Refusals::default();
        for _step in 0..MAX_STEPS_PER_TURN {
            if self.task.cancel.is_cancelled() {
                return Err(TurnError::Cancelled);
            }
            let (fitted, admitted) = self.fit(&turn).await?;
            self.within_limit(fitted.count.total.tokens)?;
            let measured = fitted.meter.measured();
            let span = crate::spans::request(
                &turn.snapshot.model,
                turn.client.server(),
                fitted.window.tokens.0,
                fitted.count.total.tokens.0,
                measured.source.as_str(),
            );
            let response = match self.send(&turn, &fitted.request).instrument(span.clone()).await {
                Ok(r) => r,
                Err(TurnError::Provider(ProviderError::ContextOverflow { limit, message })) => {
                    span.record("agentd.refused", true);
                    let calibrated = fitted.meter.calibration().is_calibrated();
                    let sent = fitted.count.total.tokens;
                    let Some(lesson) = refusals.lesson(limit, fitted.window.tokens, sent, calibrated) else {
                        return Err(ProviderError::ContextOverflow { limit, message }.into());
                    };
                    self.learn(&turn, lesson, &message).await?;
                    continue;
                }
                Err(e) => return Err(e),
            };
            // A later refusal in this turn may teach a new limit again.
            refusals = Refusals::default();
            let usage = self.record_usage(&turn, &response).await?;
            if let Some(u) = &usage {
                crate::spans::answered(&span, u.prompt_tokens, u.completion_tokens, u.cache_read_tokens);
            }
            if self.task.engine.team().trace_content {
                let redactor = self.task.engine.redactor();
                let newest = fitted.request.messages.last().map(Message::text).unwrap_or_default();
                crate::spans::content(&span, "gen_ai.prompt", &newest, &redactor);
                crate::spans::content(&span, "gen_ai.completion", &response.message.text(), &redactor);
            }
            self.spent_on(usage, fitted.count.total.tokens);
            // Its usage is in the log now (`response_received`): no longer in flight.
            drop(admitted);
            let message = response.message;
            self.persist(message.clone())?;
            if message.tool_calls().next().is_none() {
                return Ok(message.text());
            }
            if let Some(summary) = self.run_tools(&turn, &fitted, &message).await? {
                return Ok(summary);
            }
            self.watch_answer()?;
        }
        Err(TurnError::Runaway { role: self.name().to_string(), steps: MAX_STEPS_PER_TURN })
    }

    /// The settings snapshot (logged), the new input (logged, after an idle spell's thinking
    /// cleanup), and what the turn's requests share.
    pub(super) async fn start(&mut self, input: Option<String>) -> Result<Started, TurnError> {
        let mut snapshot = self.task.snapshot(&self.role)?;
        // Resumed after the turn's end was stored: it is over, and no MCP server need start for it.
        let over = if input.is_none() { self.already_finished() } else { None };
        let offer = match over {
            Some(_) => RoleTools::default(),
            None => self.task.servers.tools_for(&self.role, &self.task.cancel).await,
        };
        self.record_server_news()?;
        let mcp = offer.tools;
        self.unavailable = offer.unavailable;
        snapshot.tools.extend(mcp.iter().map(|t| t.name.clone()));
        let record = Record::Settings { role: self.role.clone(), settings: snapshot.clone() };
        self.task.engine.storage().append(&self.task.task_id, &record)?;
        if let Some(summary) = over {
            return Ok(Started::Over(summary));
        }
        if let Some(text) = input {
            self.clear_idle_thinking(&snapshot).await?;
            // A role's first request of the task opens with the instructions and the memory.
            if self.history.is_empty() {
                for block in self.opening_blocks(&snapshot).await? {
                    self.persist(block)?;
                }
            }
            self.objective = Some(text.clone());
            self.persist(Message::user(text).with_kind(MessageKind::Objective))?;
        }
        self.watch_from_history();
        let client = self.task.model(&snapshot.provider)?;
        // The built-in tools' schemas, then the MCP servers' own: one list, counted as one.
        let mut tools = tool_specs(&self.role, &snapshot.tools)?;
        tools.extend(mcp.into_iter().map(|t| t.schema));
        let mut system = self.task.system_prompt(&self.role, self.workspace());
        system.push_str(&unavailable_notice(&self.unavailable));
        Ok(Started::Run(Turn { snapshot, client, system, tools }))
    }

    /// The key this agent's requests share for the server's prompt cache: `{task}/{role}`, the same
    /// after a restart or a takeover, so the cache it filled is the one it reads.
    fn cache_key(&self) -> String {
        format!("{}/{}", self.task.task_id, self.name())
    }

    /// The request the history makes now.
    fn request(&self, turn: &Turn) -> ChatRequest {
        ChatRequest {
            model: turn.snapshot.model.clone(),
            system: turn.system.clone(),
            messages: self.history.clone(),
            tools: turn.tools.clone(),
            tool_choice_none: false,
            max_tokens: turn.snapshot.max_output_tokens,
            thinking_budget: turn.snapshot.thinking_budget,
            cache_key: Some(self.cache_key()),
        }
    }

    /// Passes the request through the fitter: measured, compacted past the trigger (the compacted
    /// history becomes the active one, as a checkpoint), refused over the window. What it was
    /// measured with is kept for sizing the results it will bring, and `request_sent` says so. The
    /// budgets' admission comes with it: the request is in flight until that is dropped.
    pub(super) async fn fit(&mut self, turn: &Turn) -> Result<(Fitted, Admitted), TurnError> {
        let requested = self.task.take_requested(&self.role);
        let asked = requested.is_some();
        let fitted = match self.fit_request(turn, requested).await {
            // A compaction the user asked for never costs the turn: refused or failed (said so in
            // an event), the request is fitted as it would have been.
            Err(TurnError::Fit(
                FitError::NothingToCompact(_) | FitError::Refused(_) | FitError::Compaction(_),
            )) if asked => self.fit_request(turn, None).await?,
            other => other?,
        };
        // Counted before it is sent: a request that would cross a budget is not.
        let admitted =
            self.gate().admit(&turn.snapshot.model, fitted.count.total.tokens, fitted.request.max_tokens)?;
        self.emit(EventKind::RequestSent {
            tokens: fitted.count.total.tokens,
            estimated: fitted.count.total.estimated,
            window: fitted.window.tokens,
            window_source: fitted.window.source,
            trigger_tokens: fitted.thresholds.trigger,
            destination_tokens: Some(fitted.thresholds.destination),
            measured_by: Some(fitted.meter.measured()),
        })?;
        Ok((fitted, admitted))
    }

    /// A compaction the user asked for, made now on the history as it stands, with no request sent
    /// after it: the request the role would make is built (its built-in tools: no MCP server is
    /// started for this) and fitted with [`Fit::requested`].
    pub(super) async fn compact_on_request(
        &mut self,
        requested: Requested,
    ) -> Result<RequestedDone, TurnError> {
        let snapshot = self.task.snapshot(&self.role)?;
        let client = self.task.model(&snapshot.provider)?;
        let tools = tool_specs(&self.role, &snapshot.tools)?;
        let system = self.task.system_prompt(&self.role, self.workspace());
        let turn = Turn { snapshot, client, system, tools };
        let fitted = self.fit_request(&turn, Some(requested)).await?;
        // A requested fit either compacts or fails; never a quiet nothing.
        let done = fitted
            .compacted
            .ok_or(TurnError::Fit(FitError::Compaction("the compaction made no new history".into())))?;
        Ok(RequestedDone {
            tokens_before: done.tokens_before,
            tokens_after: fitted.count.total.tokens,
            archive_id: done.archive_id,
        })
    }

    /// The fit of the request the history makes now (compacted first past the trigger or when
    /// `requested`); an accepted compaction becomes the active history, recorded as a checkpoint.
    async fn fit_request(&mut self, turn: &Turn, requested: Option<Requested>) -> Result<Fitted, TurnError> {
        let summariser = match self.task.engine.team().role(&self.role).and_then(|r| r.summariser.as_ref()) {
            Some(s) => Some((self.task.model(&s.provider)?, s.model.clone())),
            None => None,
        };
        let fit = Fit {
            summariser,
            task_id: self.task.task_id.clone(),
            role: self.role.clone(),
            client: turn.client.clone(),
            request: self.request(turn),
            compact_at: turn.snapshot.compact_at,
            objective: self.objective(),
            changed_files: self.changed_files.iter().rev().cloned().collect(),
            workspace: self.workspace().clone(),
            cancel: self.task.cancel.clone(),
            blocks: self.task.engine.team().blocks.clone(),
            requested,
            gate: Some(self.gate()),
        };
        let fitted = match self.task.engine.fitter().fit(fit).await {
            Ok(f) => f,
            Err(FitError::Cancelled) => return Err(TurnError::Cancelled),
            Err(e) => return Err(e.into()),
        };
        if let Some(done) = &fitted.compacted {
            // The accepted candidate becomes the active history, recorded as a checkpoint.
            self.task.engine.storage().append(
                &self.task.task_id,
                &Record::Checkpoint {
                    role: self.role.clone(),
                    subtype: CheckpointKind::Compaction,
                    history: done.history.clone(),
                    archive_id: Some(done.archive_id.clone()),
                },
            )?;
            self.history = done.history.clone();
            // What the agent saw has left its request: every result is new to it again.
            self.watch.compacted();
        }
        self.last_fit = Some(LastFit {
            thresholds: fitted.thresholds,
            tokens: fitted.count.total.tokens,
            meter: fitted.meter.clone(),
        });
        Ok(fitted)
    }

    /// The budgets' check of this role's requests.
    fn gate(&self) -> Gate {
        self.task.engine.gate(&self.task.task_id, &self.role, self.task.budget)
    }

    /// Sends a request, retrying rate limits, overloads, server errors and stream anomalies by the
    /// retry policy. A retry resends the same request: nothing of a failed attempt was stored.
    pub(super) async fn send(&self, turn: &Turn, request: &ChatRequest) -> Result<ChatResponse, TurnError> {
        let cancel = &self.task.cancel;
        let mut pause = TurnPause { agent: self };
        let call = || ask(turn.client.as_ref(), request, cancel);
        Ok(with_retries(&self.task.engine.team().retry, cancel, &mut pause, call).await?)
    }

    /// Teaches the fitter what a refusal showed, so that the request measured again fits.
    pub(super) async fn learn(
        &mut self,
        turn: &Turn,
        lesson: Lesson,
        message: &str,
    ) -> Result<(), TurnError> {
        let model = &turn.snapshot.model;
        match lesson {
            Lesson::Window(window) => {
                let learn = Learn { server: turn.client.server().to_string(), model: model.clone(), window };
                let old = self.task.engine.fitter().learn(learn)?;
                self.emit(EventKind::WindowLearned {
                    old_window: old.tokens,
                    new_window: window.tokens,
                    source: window.source,
                })?;
                tracing::info!(%model, limit = %window.tokens, %message, "window learned from a refusal");
            }
            Lesson::Underestimated { window } => {
                // The calibration widens its margin; measured again, the request is compacted.
                self.task.engine.fitter().underestimated(Underestimated {
                    task_id: self.task.task_id.clone(),
                    role: self.role.clone(),
                    window,
                });
                tracing::warn!(%model, %message, "refused although counted as fitting; measuring again");
            }
        }
        Ok(())
    }

    /// The server took the request last fitted: its usage report is judged against it (refused:
    /// `usage_refused`), and when believed calibrates the count (or corrects the window,
    /// `window_learned`) and is the basis of the next request; `response_received`, with what is
    /// counted (our count in place of a refused figure) and priced. The usage counted.
    pub(super) async fn record_usage(
        &mut self,
        turn: &Turn,
        response: &ChatResponse,
    ) -> Result<Option<Usage>, TurnError> {
        let judged = self.judge_usage(turn, response)?;
        let judged = judged.as_ref();
        let observed = self.task.engine.fitter().observe(Observe {
            task_id: self.task.task_id.clone(),
            role: self.role.clone(),
            usage: judged.and_then(|j| j.believed),
        })?;
        if let Some(news) = &observed.cache {
            tracing::info!(?news, "prompt cache learned from a usage report");
            self.emit(news.event())?;
        }
        if let Some((old, new)) = observed.window {
            let model = &turn.snapshot.model;
            tracing::warn!(%model, old = %old.tokens, new = %new.tokens, "window corrected from a usage report");
            self.emit(EventKind::WindowLearned {
                old_window: old.tokens,
                new_window: new.tokens,
                source: new.source,
            })?;
        }
        let model = &turn.snapshot.model;
        let counted = judged.map(|j| j.counted);
        self.emit(EventKind::ResponseReceived {
            finish_reason: response.finish_reason.clone(),
            usage: counted,
            model: Some(model.clone()),
            cost_usd: self.task.engine.fitter().cost(model, counted),
        })?;
        self.last_answer_at = Some(clock().now());
        Ok(counted)
    }

    /// The verdict on `response`'s usage report, against the request last fitted; a refusal said
    /// as `usage_refused`.
    fn judge_usage(&self, turn: &Turn, response: &ChatResponse) -> Result<Option<Judged>, TurnError> {
        let Some(fit) = &self.last_fit else { return Ok(None) };
        let request = Request {
            model: &turn.snapshot.model,
            max_output: turn.snapshot.max_output_tokens,
            sent: fit.tokens,
            window: fit.thresholds.window,
            meter: &fit.meter,
        };
        let judged = verdict(&request, response);
        if let Some(refused) = judged.as_ref().and_then(|j| refused_event(response, j, fit.tokens, false)) {
            self.emit(refused)?;
        }
        Ok(judged)
    }

    /// A call begins: `tool_called` (naming the checkpoint taken before it, if one was), and a file it
    /// names to change becomes a working file. The event's `seq`.
    pub(super) fn begin_call(&mut self, call: &Call, checkpoint: Option<String>) -> Result<u64, TurnError> {
        let Call { id, name, arguments } = call;
        let called = EventKind::ToolCalled { tool: name.clone(), call_id: id.clone(), checkpoint };
        let seq = self.task.engine.storage().emit(&self.task.task_id, &self.role, called)?.seq;
        if let Some(path) = agent_tools::changed_path(name, arguments) {
            self.changed_files.retain(|p| *p != path);
            self.changed_files.push(path);
        }
        Ok(seq)
    }

    /// A call's result (redacted, sized against what the next request already carries) logged with a
    /// receipt, `tool_finished`.
    pub(super) async fn end_call(
        &mut self,
        turn: &Turn,
        fitted: &Fitted,
        carried: Tokens,
        call: &Call,
        mut result: super::tools::CallOutcome,
    ) -> Result<Ran, TurnError> {
        let Call { id, name, arguments } = call;
        // No secret reaches the history, the evidence, a receipt or the model.
        if let std::borrow::Cow::Owned(clean) = self.task.engine.redactor().redact(&result.outcome.content) {
            result.outcome.content = clean;
        }
        if let Some(overflow) = &mut result.outcome.overflow {
            if let std::borrow::Cow::Owned(clean) = self.task.engine.redactor().redact(&overflow.full) {
                overflow.full = clean;
            }
        }
        let limit = fitted.thresholds.whole_result_limit(carried);
        let mut bounded = self
            .bounded(
                &turn.snapshot,
                turn.client.as_ref(),
                &fitted.meter,
                limit,
                name,
                id,
                arguments,
                &result.outcome,
            )
            .await?;
        let images = self.bounded_images(&fitted.meter, limit, name, id, &mut bounded, result.images)?;
        let mut parts = vec![Part::ToolResult {
            call_id: id.clone(),
            content: bounded.content.clone(),
            is_error: !result.outcome.ok,
        }];
        parts.extend(images);
        self.persist(Message::new(Speaker::Tool, parts))?;
        self.receipt(receipt(name.clone(), arguments, &result.outcome, bounded.evidence_id.clone()))?;
        // The call's span, when it runs in one (`crate::spans::tool`).
        let span = tracing::Span::current();
        span.record("agentd.ok", result.outcome.ok);
        if let Some(id) = &bounded.evidence_id {
            span.record("agentd.evidence_id", id.as_str());
        }
        if self.task.engine.team().trace_content {
            let redactor = self.task.engine.redactor();
            crate::spans::content(&span, "agentd.arguments", arguments, &redactor);
            crate::spans::content(&span, "agentd.result", &bounded.content, &redactor);
        }
        self.emit(EventKind::ToolFinished {
            tool: name.clone(),
            call_id: id.clone(),
            ok: result.outcome.ok,
            evidence_id: bounded.evidence_id,
            result_tokens: Some(bounded.tokens),
            whole_limit: Some(limit),
            measured_by: Some(fitted.meter.measured()),
            interrupted: false,
        })?;
        Ok(Ran { tokens: bounded.tokens, finished: result.finished })
    }
}

/// What one call added to the next request, and the `finish` summary if it was an accepted finish.
pub(super) struct Ran {
    pub tokens: Tokens,
    pub finished: Option<String>,
}

/// The tool calls of an answer, in its order.
pub(super) fn calls_of(answer: &Message) -> Vec<Call> {
    answer
        .tool_calls()
        .map(|(id, name, args)| Call {
            id: id.to_string(),
            name: ToolName::parse(name),
            arguments: args.to_string(),
        })
        .collect()
}

/// How a turn waits for a retry: announced as `retry_scheduled`, the task `waiting_retry` meanwhile,
/// the wait on the daemon's clock.
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
        tracing::Span::current().record("agentd.retries", attempt);
        agent.emit(EventKind::RetryScheduled {
            reason: retry.reason().to_string(),
            attempt,
            max_attempts: retry.max_attempts,
            delay_ms,
        })?;
        agent.task.set_state(TaskState::WaitingRetry)?;
        let waited = wait(retry.delay, cancel).await;
        if waited == Waited::Elapsed {
            agent.task.set_state(TaskState::Running)?;
        }
        Ok(waited)
    }

    fn wait_out(&mut self, limit: &WaitOut<'_>) -> TurnError {
        tracing::info!(role = self.agent.name(), error = %limit.error, delay_s = limit.delay.as_secs(), "usage limit: the task waits");
        TurnError::Halted(Box::new(limit.halt(self.agent.role.clone())))
    }
}

#[cfg(test)]
mod tests;
