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
//! 5. [`record_usage`](Agent::record_usage): the answer's usage report calibrates the count (or
//!    corrects the window), `response_received`.
//! 6. [`run_tools`](Agent::run_tools): the answer is logged, each call it makes is run and its
//!    result logged (sized by [`super::results`]) with a receipt and `tool_finished`.
//!
//! The loop ends when the model answers without a tool call or an accepted `finish`, when the task is
//! cancelled, or after [`MAX_STEPS_PER_TURN`] round-trips.

use super::{Agent, LastFit, Snapshot, TurnError, TurnResult};
use crate::clock::clock;
use crate::fitter::{Fit, FitError, Fitted, Learn, Observe, Underestimated};
use crate::provider::{ChatRequest, ChatResponse, Client, ProviderError, ToolSpec};
use crate::retry::{with_retries, Pause, Scheduled};
use crate::scheduler::{Wait, Waited};
use agentd_agents::receipts::Receipt;
use agentd_agents::tools as agent_tools;
use agentd_policies::budget::refusal_bound;
use agentd_policies::{EventKind, Message, Record, TaskState, Tokens, Window, WindowSource};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// A turn may take at most this many model round-trips before it is failed as a runaway loop.
pub const MAX_STEPS_PER_TURN: usize = 400;

/// What stays fixed for a whole turn: its settings and what every request of it carries.
pub(super) struct Turn {
    pub snapshot: Snapshot,
    pub client: Arc<Client>,
    pub system: String,
    pub tools: Vec<ToolSpec>,
}

/// How a turn begins.
pub(super) enum Started {
    /// A resumed turn whose end was already stored: its summary.
    Over(String),
    Run(Turn),
}

/// What the refusals since the last answer already taught: each lesson is learned once between two
/// answers, so a model that keeps refusing fails the turn instead of looping.
#[derive(Debug, Default)]
pub(super) struct Refusals {
    learned: bool,
    underestimated: bool,
}

/// What a context-overflow refusal teaches.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Lesson {
    /// The window is not what the fitter believed: this one (stated, or bounded just below what was
    /// refused).
    Window(Window),
    /// Refused at the window the fitter knows: the calibrated count was too low for this window.
    Underestimated { window: Tokens },
}

impl Refusals {
    /// The lesson of a refusal of a request counted as `sent` tokens against a `window`, `stated` the
    /// limit the refusal names; `None` when there is nothing (left) to learn and the turn must fail.
    pub(super) fn lesson(
        &mut self,
        stated: Option<Tokens>,
        window: Tokens,
        sent: Tokens,
        calibrated: bool,
    ) -> Option<Lesson> {
        if !self.learned && stated != Some(window) {
            // The refusal states the real window: remember it. One that states none still proves
            // this request did not fit: just below it is the bound.
            self.learned = true;
            let tokens = stated.unwrap_or_else(|| refusal_bound(sent));
            return Some(Lesson::Window(Window { tokens, source: WindowSource::Error }));
        }
        if !self.underestimated && calibrated {
            self.underestimated = true;
            return Some(Lesson::Underestimated { window });
        }
        None
    }
}

/// A tool call of an answer.
pub(super) struct Call {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// The tools of a role as the provider gets them; an unknown tool name is a team error.
pub(super) fn tool_specs(role: &str, tools: &[String]) -> Result<Vec<ToolSpec>, TurnError> {
    let schemas = agentd_agents::schema::schemas(tools)
        .map_err(|e| TurnError::Team(format!("role {role}: unknown tool {}", e.0)))?;
    Ok(schemas
        .into_iter()
        .map(|s| ToolSpec { name: s.name, description: s.description, parameters: s.parameters })
        .collect())
}

impl Agent {
    pub(super) async fn run_turn(&mut self, input: Option<String>) -> TurnResult {
        let turn = match self.start(input).await? {
            Started::Over(summary) => return Ok(summary),
            Started::Run(turn) => turn,
        };
        let mut refusals = Refusals::default();
        for _step in 0..MAX_STEPS_PER_TURN {
            if self.task.cancel.is_cancelled() {
                return Err(TurnError::Cancelled);
            }
            let fitted = self.fit(&turn).await?;
            let response = match self.send(&turn, &fitted.request).await {
                Ok(r) => r,
                Err(TurnError::Provider(ProviderError::ContextOverflow { limit, message })) => {
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
            self.record_usage(&turn, &response).await?;
            let message = response.message;
            self.persist(message.clone())?;
            if message.tool_calls().next().is_none() {
                return Ok(message.text());
            }
            if let Some(summary) = self.run_tools(&turn, &fitted, &message).await? {
                return Ok(summary);
            }
        }
        Err(TurnError::Runaway { role: self.name().to_string(), steps: MAX_STEPS_PER_TURN })
    }

    /// The settings snapshot (logged), the new input (logged, after an idle spell's thinking
    /// cleanup), and what the turn's requests share.
    pub(super) async fn start(&mut self, input: Option<String>) -> Result<Started, TurnError> {
        let snapshot = self.task.snapshot(&self.role)?;
        let record = Record::Settings {
            role: self.name().to_string(),
            settings: serde_json::to_value(&snapshot).unwrap_or_default(),
        };
        self.task.shared.store.append(&self.task.task_id, &record)?;
        if input.is_none() {
            if let Some(summary) = self.already_finished() {
                // Resumed after the turn's end was stored: it is over.
                return Ok(Started::Over(summary));
            }
        }
        if let Some(text) = input {
            self.clear_idle_thinking(&snapshot).await?;
            self.objective = Some(text.clone());
            self.persist(Message::user(text))?;
        }
        let client = self.task.client(&snapshot.provider)?;
        let tools = tool_specs(self.name(), &snapshot.tools)?;
        let system = self.task.system_prompt(&self.role);
        Ok(Started::Run(Turn { snapshot, client, system, tools }))
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
        }
    }

    /// Passes the request through the fitter: measured, compacted past the trigger (the compacted
    /// history becomes the active one, as a checkpoint), refused over the window. What it was
    /// measured with is kept for sizing the results it will bring, and `request_sent` says so.
    pub(super) async fn fit(&mut self, turn: &Turn) -> Result<Fitted, TurnError> {
        let fit = Fit {
            task_id: self.task.task_id.clone(),
            role: self.name().to_string(),
            client: turn.client.clone(),
            request: self.request(turn),
            compact_at: turn.snapshot.compact_at,
            objective: self.objective(),
            changed_files: self.changed_files.iter().rev().cloned().collect(),
            workspace: self.task.workspace.clone(),
            cancel: self.task.cancel.clone(),
        };
        let fitted = match self.ask_fitter(fit).await? {
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
        Ok(fitted)
    }

    /// Sends a request, retrying rate limits, overloads, server errors and stream anomalies by the
    /// retry policy. A retry resends the same request: nothing of a failed attempt was stored.
    pub(super) async fn send(&self, turn: &Turn, request: &ChatRequest) -> Result<ChatResponse, TurnError> {
        let cancel = &self.task.cancel;
        let mut pause = TurnPause { agent: self };
        let call = || turn.client.chat(request, cancel);
        Ok(with_retries(&self.task.shared.retry, cancel, &mut pause, call).await?)
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
                let learn =
                    Learn { server: turn.client.base_url().to_string(), model: model.clone(), window };
                let old = self.ask_fitter(learn).await??;
                self.emit(EventKind::WindowLearned {
                    old_window: old.tokens,
                    new_window: window.tokens,
                    source: window.source,
                })?;
                tracing::info!(%model, limit = %window.tokens, %message, "window learned from a refusal");
            }
            Lesson::Underestimated { window } => {
                // The calibration widens its margin; measured again, the request is compacted.
                self.ask_fitter(Underestimated {
                    task_id: self.task.task_id.clone(),
                    role: self.name().to_string(),
                    window,
                })
                .await?;
                tracing::warn!(%model, %message, "refused although counted as fitting; measuring again");
            }
        }
        Ok(())
    }

    /// The server took the request: its usage report calibrates the count (or corrects the window,
    /// `window_learned`), and it is the basis of the next request; `response_received`.
    pub(super) async fn record_usage(
        &mut self,
        turn: &Turn,
        response: &ChatResponse,
    ) -> Result<(), TurnError> {
        let observed = self
            .ask_fitter(Observe {
                task_id: self.task.task_id.clone(),
                role: self.name().to_string(),
                usage: response.usage,
            })
            .await??;
        if let Some((old, new)) = observed {
            let model = &turn.snapshot.model;
            tracing::warn!(%model, old = %old.tokens, new = %new.tokens, "window corrected from a usage report");
            self.emit(EventKind::WindowLearned {
                old_window: old.tokens,
                new_window: new.tokens,
                source: new.source,
            })?;
        }
        self.emit(EventKind::ResponseReceived {
            finish_reason: response.finish_reason.clone(),
            usage: response.usage,
        })?;
        self.last_answer_at = Some(clock().now());
        Ok(())
    }

    /// Runs the calls of an answer (already logged) in order; the `finish` summary when one was
    /// accepted.
    pub(super) async fn run_tools(
        &mut self,
        turn: &Turn,
        fitted: &Fitted,
        answer: &Message,
    ) -> Result<Option<String>, TurnError> {
        let calls: Vec<Call> = answer
            .tool_calls()
            .map(|(id, name, args)| Call {
                id: id.to_string(),
                name: name.to_string(),
                arguments: args.to_string(),
            })
            .collect();
        let mut finished = None;
        // What the next request carries before the results: this one and the answer.
        let mut carried = fitted.count.total.tokens + fitted.meter.count_message(answer).tokens;
        for call in calls {
            let ran = self.run_call(turn, fitted, carried, &call).await?;
            carried += ran.tokens;
            if ran.finished.is_some() {
                finished = ran.finished;
            }
        }
        Ok(finished)
    }

    /// One call: `tool_called`, the tool, its result (redacted, sized against what the next request
    /// already carries) logged with a receipt, `tool_finished`.
    async fn run_call(
        &mut self,
        turn: &Turn,
        fitted: &Fitted,
        carried: Tokens,
        call: &Call,
    ) -> Result<Ran, TurnError> {
        let Call { id, name, arguments } = call;
        self.emit(EventKind::ToolCalled { tool: name.clone(), call_id: id.clone() })?;
        if let Some(path) = agent_tools::changed_path(name, arguments) {
            self.changed_files.retain(|p| *p != path);
            self.changed_files.push(path);
        }
        let mut result = self.call_tool(&turn.snapshot, name, arguments).await?;
        // No secret reaches the history, the evidence, a receipt or the model.
        if let std::borrow::Cow::Owned(clean) = self.task.shared.redactor.redact(&result.outcome.content) {
            result.outcome.content = clean;
        }
        let limit = fitted.thresholds.whole_result_limit(carried);
        let bounded = self
            .bounded(&turn.snapshot, &turn.client, &fitted.meter, limit, name, id, arguments, &result.outcome)
            .await?;
        self.persist(Message::tool_result(id, &bounded.content, !result.outcome.ok))?;
        self.receipt(Receipt::new(name, arguments, &result.outcome, bounded.evidence_id.clone()))?;
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
struct Ran {
    tokens: Tokens,
    finished: Option<String>,
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

