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

use super::{Agent, LastFit};
use crate::clock::clock;
use crate::error::{TurnError, TurnResult};
use crate::fitter::{Fit, FitError, Fitted, Learn, Observe, Underestimated};
use crate::retry::{ask, wait, with_retries, Pause, Scheduled, Waited};
use agentd_agents::receipts::receipt;
use agentd_agents::tools as agent_tools;
use agentd_policies::budget::refusal_bound;
use agentd_policies::{EventKind, Message, Part, Record, Speaker, TaskState, Tokens, Window, WindowSource};
use agentd_protocol::ToolSchema;
use agentd_protocol::TurnSettings;
use agentd_protocol::{ChatRequest, ChatResponse, Model, ProviderError};
use agentd_protocol::{CheckpointKind, MessageKind, ToolName};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// A turn may take at most this many model round-trips before it is failed as a runaway loop.
pub const MAX_STEPS_PER_TURN: usize = 400;

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
    pub name: ToolName,
    pub arguments: String,
}

/// The tools of a role as the provider gets them; an unknown tool name is a team error.
pub(super) fn tool_specs(role: &str, tools: &[ToolName]) -> Result<Vec<ToolSchema>, TurnError> {
    // An MCP tool's schema is its server's, from `TaskServers::tools_for`: only built-ins here.
    let builtin: Vec<ToolName> = tools.iter().filter(|t| t.mcp().is_none()).cloned().collect();
    agentd_agents::schema::schemas(&builtin)
        .map_err(|e| TurnError::Team(format!("role {role}: unknown tool {}", e.0)))
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
        let mut snapshot = self.task.snapshot(&self.role)?;
        // Resumed after the turn's end was stored: it is over, and no MCP server need start for it.
        let over = if input.is_none() { self.already_finished() } else { None };
        let mcp = match over {
            Some(_) => Vec::new(),
            None => self.task.servers.tools_for(&self.role, &self.task.cancel).await,
        };
        snapshot.tools.extend(mcp.iter().map(|t| t.name.clone()));
        let record = Record::Settings { role: self.role.clone(), settings: snapshot.clone() };
        self.task.engine.storage().append(&self.task.task_id, &record)?;
        if let Some(summary) = over {
            return Ok(Started::Over(summary));
        }
        if let Some(text) = input {
            self.clear_idle_thinking(&snapshot).await?;
            self.objective = Some(text.clone());
            self.persist(Message::user(text).with_kind(MessageKind::Objective))?;
        }
        let client = self.task.model(&snapshot.provider)?;
        // The built-in tools' schemas, then the MCP servers' own: one list, counted as one.
        let mut tools = tool_specs(self.name(), &snapshot.tools)?;
        tools.extend(mcp.into_iter().map(|t| t.schema));
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
            role: self.role.clone(),
            client: turn.client.clone(),
            request: self.request(turn),
            compact_at: turn.snapshot.compact_at,
            objective: self.objective(),
            changed_files: self.changed_files.iter().rev().cloned().collect(),
            workspace: self.task.workspace.clone(),
            cancel: self.task.cancel.clone(),
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
            destination_tokens: Some(fitted.thresholds.destination),
            measured_by: Some(fitted.meter.measured()),
        })?;
        Ok(fitted)
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

    /// The server took the request: its usage report calibrates the count (or corrects the window,
    /// `window_learned`), and it is the basis of the next request; `response_received`.
    pub(super) async fn record_usage(
        &mut self,
        turn: &Turn,
        response: &ChatResponse,
    ) -> Result<(), TurnError> {
        let observed = self.task.engine.fitter().observe(Observe {
            task_id: self.task.task_id.clone(),
            role: self.role.clone(),
            usage: response.usage,
        })?;
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
                name: ToolName::parse(name),
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::TaskCtx;
    use crate::fitter::MeterOf;
    use crate::storage::Storage;
    use crate::testing::{rounds, Rig};
    use agentd_policies::{Event, Part};
    use agentd_protocol::Role;
    use agentd_test_support::{
        context_length_exceeded, hang, is_summary_request, rate_limited, sse, text, tool_call_with_id,
        ScriptedServer,
    };
    use serde_json::json;
    use std::time::{Duration, Instant};

    /// A turn's input as the agent logs it: the objective of the turn.
    fn objective(text: &str) -> Message {
        Message::user(text).with_kind(MessageKind::Objective)
    }

    fn agent(role: Role, history: Vec<Message>, task: &Arc<TaskCtx>) -> Agent {
        Agent::new(role, history, Vec::new(), Vec::new(), None, task.clone(), Arc::default())
    }

    fn of_kind<'a>(events: &'a [Event], kind: &str) -> Vec<&'a EventKind> {
        events.iter().filter(|e| e.kind.name() == kind).map(|e| &e.kind).collect()
    }

    async fn started(agent: &mut Agent, input: Option<&str>) -> Turn {
        match agent.start(input.map(str::to_string)).await.unwrap() {
            Started::Run(turn) => turn,
            Started::Over(summary) => panic!("the turn was over before it started: {summary}"),
        }
    }

    #[test]
    fn a_roles_tools_are_converted_and_an_unknown_one_is_named() {
        let specs = tool_specs("coder", &["read_file".into(), "finish".into()]).unwrap();
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["read_file", "finish"]);
        assert_eq!(specs[0].parameters["type"], "object");
        assert!(!specs[1].description.is_empty());
        let error = tool_specs("coder", &["read_file".into(), "teleport".into()]).unwrap_err();
        assert_eq!(error.to_string(), "role coder: unknown tool teleport");
    }

    #[test]
    fn each_refusal_lesson_is_learned_once_between_two_answers() {
        let error =
            |tokens| Some(Lesson::Window(Window { tokens: Tokens(tokens), source: WindowSource::Error }));
        // A stated limit other than the window believed is the window.
        let mut refusals = Refusals::default();
        assert_eq!(
            refusals.lesson(Some(Tokens(16_384)), Tokens(256_000), Tokens(20_000), false),
            error(16_384)
        );
        // Refused again before an answer, uncalibrated: nothing left to learn.
        assert_eq!(refusals.lesson(Some(Tokens(8_000)), Tokens(16_384), Tokens(15_000), false), None);
        // Refused at the window known, calibrated: the count was too low, once.
        let mut refusals = Refusals::default();
        let at_window = refusals.lesson(Some(Tokens(16_384)), Tokens(16_384), Tokens(15_000), true);
        assert_eq!(at_window, Some(Lesson::Underestimated { window: Tokens(16_384) }));
        assert_eq!(refusals.lesson(Some(Tokens(16_384)), Tokens(16_384), Tokens(15_000), true), None);
        // A refusal that states no limit bounds the window just below what was refused.
        let mut refusals = Refusals::default();
        assert_eq!(refusals.lesson(None, Tokens(256_000), Tokens(10_000), false), error(9_500));
        let after = refusals.lesson(None, Tokens(9_500), Tokens(9_000), true);
        assert_eq!(after, Some(Lesson::Underestimated { window: Tokens(9_500) }));
    }

    #[tokio::test]
    async fn start_logs_the_settings_and_the_input_and_a_stored_end_sends_nothing() {
        let rig = Rig::start(ScriptedServer::start(vec![]).await).await;
        let task = rig.task("Fix the adder");
        let mut lead = agent(Role::Lead, Vec::new(), &task);
        let turn = started(&mut lead, Some("Fix the adder")).await;
        assert_eq!(turn.snapshot.model, rig.server.model());
        let names: Vec<ToolName> = turn.tools.iter().map(|t| ToolName::parse(&t.name)).collect();
        assert_eq!(names, agentd_agents::roles::LEAD_TOOLS);
        assert_eq!(rig.history(&task.task_id, "lead"), [objective("Fix the adder")]);
        let settings = rig.records(&task.task_id).into_iter().find_map(|r| match r {
            Record::Settings { role: Role::Lead, settings } => Some(settings),
            _ => None,
        });
        assert_eq!(settings.unwrap().model, rig.server.model());

        // Resumed with the turn's answer already stored: over, and the model is not asked.
        let history = vec![Message::user("Fix the adder"), Message::assistant_text("fixed it")];
        let mut resumed = agent(Role::Lead, history, &task);
        assert_eq!(resumed.run_turn(None).await.unwrap(), "fixed it");
        assert!(rig.server.chat_requests().is_empty());
    }

    #[tokio::test]
    async fn fit_announces_the_request_and_keeps_its_measure() {
        let server = ScriptedServer::builder().max_model_len(Some(32_000)).start().await;
        let rig = Rig::start(server).await;
        let task = rig.task("Fix the adder");
        let mut lead = agent(Role::Lead, Vec::new(), &task);
        let turn = started(&mut lead, Some("Fix the adder")).await;
        let fitted = lead.fit(&turn).await.unwrap();
        assert_eq!(fitted.window, Window { tokens: Tokens(32_000), source: WindowSource::Declared });
        assert!(fitted.compacted.is_none());
        assert_eq!(fitted.request.messages, lead.history);
        let last = lead.last_fit.as_ref().unwrap();
        assert_eq!(last.tokens, fitted.count.total.tokens);
        assert_eq!(last.thresholds, fitted.thresholds);
        let events = rig.events(&task.task_id);
        let [EventKind::RequestSent { tokens, window, window_source, trigger_tokens, measured_by, .. }] =
            of_kind(&events, "request_sent")[..]
        else {
            panic!("one request_sent: {events:#?}")
        };
        assert_eq!(*tokens, fitted.count.total.tokens);
        assert_eq!((*window, *window_source), (Tokens(32_000), WindowSource::Declared));
        assert_eq!(*trigger_tokens, fitted.thresholds.trigger);
        assert!(measured_by.is_some());
    }

    #[tokio::test]
    async fn a_compaction_of_the_fit_becomes_the_active_history_through_a_checkpoint() {
        let server = ScriptedServer::builder()
            .max_model_len(Some(4_000))
            .responder(|_| sse(vec![text("Summary: the files were read one by one.")]))
            .start()
            .await;
        let rig = Rig::start(server).await;
        let task = rig.task("Read the files");
        let mut coder = agent(Role::Coder, rounds(12, 300), &task);
        let turn = started(&mut coder, None).await;
        let fitted = coder.fit(&turn).await.unwrap();
        let done = fitted.compacted.as_ref().expect("past the trigger the history is compacted");
        assert_eq!(coder.history, done.history);
        assert!(coder.history.len() < rounds(12, 300).len());
        assert!(fitted.count.total.tokens <= fitted.thresholds.trigger);
        let checkpoint = rig.records(&task.task_id).into_iter().find_map(|r| match r {
            Record::Checkpoint { role, subtype: CheckpointKind::Compaction, history, archive_id } => {
                Some((role, history, archive_id))
            }
            _ => None,
        });
        let (role, history, archive_id) = checkpoint.expect("a compaction checkpoint");
        assert_eq!((&role, &history), (&Role::Coder, &done.history));
        assert_eq!(archive_id.as_deref(), Some(done.archive_id.as_str()));
        // What a resume reads is the compacted history.
        assert_eq!(rig.history(&task.task_id, "coder"), done.history);
    }

    #[tokio::test]
    async fn a_refusal_with_a_stated_limit_lowers_the_window_and_the_retry_fits_under_it() {
        // The server enforces 2 400 tokens and says so when it refuses; nothing is declared, so the
        // fitter starts from the assumed window.
        let server = ScriptedServer::builder()
            .window(2_400)
            .responder(|body| {
                if is_summary_request(body) {
                    sse(vec![text("Summary: the files were read one by one.")])
                } else {
                    sse(vec![agentd_test_support::finish("read them all")])
                }
            })
            .start()
            .await;
        let rig = Rig::start(server).await;
        let task = rig.task("Read the files");
        let mut coder = agent(Role::Coder, rounds(10, 300), &task);
        assert_eq!(coder.run_turn(None).await.unwrap(), "read them all");

        assert_eq!(rig.server.refused(), 1, "one refusal, then never again");
        let events = rig.events(&task.task_id);
        let [EventKind::WindowLearned { old_window, new_window, source }] =
            of_kind(&events, "window_learned")[..]
        else {
            panic!("one window_learned: {events:#?}")
        };
        assert_eq!(
            (*old_window, *new_window, *source),
            (Window::assumed().tokens, Tokens(2_400), WindowSource::Error)
        );
        let known = rig.storage.window(&rig.server.base_url(), rig.server.model()).unwrap();
        assert_eq!(known, Some(Window { tokens: Tokens(2_400), source: WindowSource::Error }));
        assert_eq!(of_kind(&events, "compaction_finished").len(), 1);
        let sent = of_kind(&events, "request_sent");
        let Some(EventKind::RequestSent { tokens, window, trigger_tokens, .. }) = sent.last() else {
            panic!("{events:#?}")
        };
        assert_eq!(*window, Tokens(2_400));
        assert!(tokens <= trigger_tokens && *tokens < Tokens(2_400), "{tokens} over {trigger_tokens}");
        assert!(rig.server.counted().last().is_some_and(|&n| n <= 2_400), "{:?}", rig.server.counted());
    }

    #[tokio::test]
    async fn a_model_that_keeps_refusing_fails_the_turn_after_one_lesson() {
        let server = ScriptedServer::start(vec![
            context_length_exceeded(16_384, 20_000),
            context_length_exceeded(16_384, 20_000),
            sse(vec![text("never asked")]),
        ])
        .await;
        let rig = Rig::start(server).await;
        let task = rig.task("Fix it");
        let mut lead = agent(Role::Lead, Vec::new(), &task);
        let error = lead.run_turn(Some("Fix it".into())).await.unwrap_err();
        assert!(
            matches!(
                error,
                TurnError::Provider(ProviderError::ContextOverflow { limit: Some(Tokens(16_384)), .. })
            ),
            "{error:?}"
        );
        assert_eq!(rig.server.chat_requests().len(), 2);
        assert_eq!(rig.kinds(&task.task_id), ["request_sent", "window_learned", "request_sent"]);
    }

    #[tokio::test]
    async fn a_rate_limit_is_retried_after_the_scheduled_wait_and_the_retry_announced() {
        let server = ScriptedServer::start(vec![rate_limited(Some("1")), sse(vec![text("done")])]).await;
        let rig = Rig::start_with(server, |team| {
            team.retry.rate_limit = agentd_policies::retry::Schedule { attempts: 3, delay_ms: 60_000 }
        })
        .await;
        let task = rig.task("Fix it");
        let mut lead = agent(Role::Lead, Vec::new(), &task);
        let began = Instant::now();
        let turn = tokio::spawn(async move {
            let result = lead.run_turn(Some("Fix it".into())).await;
            (lead, result)
        });
        // While the retry waits, the task says so.
        let deadline = Instant::now() + Duration::from_secs(10);
        while rig.state(&task.task_id) != TaskState::WaitingRetry {
            assert!(Instant::now() < deadline, "the task never showed waiting_retry");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let (lead, result) = turn.await.unwrap();
        assert_eq!(result.unwrap(), "done");
        assert!(began.elapsed() >= Duration::from_secs(1), "Retry-After was not waited out");
        assert_eq!(rig.state(&task.task_id), TaskState::Running);
        let events = rig.events(&task.task_id);
        assert_eq!(rig.kinds(&task.task_id), ["request_sent", "retry_scheduled", "response_received"]);
        let [EventKind::RetryScheduled { reason, attempt, max_attempts, delay_ms }] =
            of_kind(&events, "retry_scheduled")[..]
        else {
            panic!("{events:#?}")
        };
        // Retry-After (1 s) wins over the configured 60 s.
        assert_eq!((reason.as_str(), *attempt, *max_attempts, *delay_ms), ("rate_limit", 1, 3, 1_000));
        let sent = rig.server.chat_requests();
        assert_eq!(sent.len(), 2);
        assert_eq!(sent[0]["messages"], sent[1]["messages"], "the same request, resent");
        assert_eq!(lead.history, [objective("Fix it"), Message::assistant_text("done")]);
    }

    #[tokio::test]
    async fn usage_reports_calibrate_the_measure() {
        let server = ScriptedServer::builder()
            .report_usage(true)
            .script(vec![
                sse(vec![tool_call_with_id("c1", "read_file", json!({"path": "notes.txt"}))]),
                sse(vec![text("read it")]),
            ])
            .start()
            .await;
        let rig = Rig::start(server).await;
        std::fs::write(rig.workspace.path().join("notes.txt"), "the adder subtracts\n").unwrap();
        let task = rig.task("Read the notes");
        let (base_url, model) = (rig.server.base_url(), rig.server.model().to_string());
        let meter = |rig: &Rig| {
            rig.engine.fitter().meter_of(MeterOf { server: base_url.clone(), model: model.clone() })
        };
        assert_eq!(meter(&rig).calibration().reports(), 0);
        let mut lead = agent(Role::Lead, Vec::new(), &task);
        assert_eq!(lead.run_turn(Some("Read the notes".into())).await.unwrap(), "read it");

        let events = rig.events(&task.task_id);
        let reported: Vec<u64> = of_kind(&events, "response_received")
            .into_iter()
            .map(|k| match k {
                EventKind::ResponseReceived { usage: Some(u), .. } => u.prompt_tokens,
                other => panic!("a response without its usage: {other:?}"),
            })
            .collect();
        assert_eq!(reported, rig.server.counted(), "each answer's usage is the server's count");
        let calibration = meter(&rig).calibration().clone();
        assert_eq!(calibration.reports(), 2, "both reports taught the calibration");
        assert!(calibration.is_calibrated());
        // Kept: a restarted daemon starts calibrated.
        let key = agentd_policies::settings::SettingKey::Calibration { server: &base_url, model: &model };
        assert!(rig.storage.setting(&key).unwrap().is_some());
        assert!(lead.last_answer_at.is_some());
    }

    #[tokio::test]
    async fn a_usage_report_of_a_truncated_prompt_clamps_the_window() {
        let server = ScriptedServer::builder()
            .silent_truncation_at(2_000)
            .script(vec![sse(vec![text("I saw part of it")])])
            .start()
            .await;
        let rig = Rig::start(server).await;
        let task = rig.task("Read the files");
        let mut coder = agent(Role::Coder, rounds(10, 300), &task);
        let turn = started(&mut coder, None).await;
        let fitted = coder.fit(&turn).await.unwrap();
        let response = coder.send(&turn, &fitted.request).await.unwrap();
        coder.record_usage(&turn, &response).await.unwrap();
        let events = rig.events(&task.task_id);
        let [EventKind::WindowLearned { old_window, new_window, source }] =
            of_kind(&events, "window_learned")[..]
        else {
            panic!("one window_learned: {events:#?}")
        };
        assert_eq!(*source, WindowSource::Usage);
        assert_eq!(*old_window, Window::assumed().tokens);
        assert!((Tokens(2_000)..Tokens(2_100)).contains(new_window), "{new_window}");
        let known = rig.storage.window(&rig.server.base_url(), rig.server.model()).unwrap();
        assert_eq!(known.map(|w| w.tokens), Some(*new_window));
        assert_eq!(rig.kinds(&task.task_id).last().map(String::as_str), Some("response_received"));
    }

    #[tokio::test]
    async fn an_image_past_the_limit_is_stored_as_evidence_and_named_instead() {
        let server = ScriptedServer::start(vec![]).await;
        let model = server.model().to_string();
        let rig = Rig::start(server).await;
        let task = rig.task("x");
        let coder = agent(Role::Coder, Vec::new(), &task);
        let meter = rig.engine.fitter().meter_of(MeterOf { server: rig.server.base_url(), model });
        // The bytes behind the image: what is stored when it does not fit.
        let png = vec![0u8; 70];
        let image = crate::tool_servers::Image {
            media_type: "image/png".into(),
            data: agentd_test_support::mcp::PIXEL_PNG.into(),
            bytes: png.clone(),
        };
        let tool = ToolName::parse("mcp__fix__image");
        let mut bounded = super::super::results::Bounded {
            content: "a 1x1 png:".into(),
            evidence_id: None,
            tokens: Tokens(5),
        };
        let parts =
            coder.bounded_images(&meter, Tokens(100), &tool, "c1", &mut bounded, vec![image]).unwrap();
        assert!(parts.is_empty(), "an image of 765 tokens does not fit 100");
        let id =
            bounded.content.split("stored as evidence ").nth(1).unwrap().trim_end_matches(']').to_string();
        assert!(bounded
            .content
            .starts_with("a 1x1 png:\n[an image (image/png, 70 bytes) of this result does not fit"));
        let meta = rig.storage.evidence(&id).unwrap();
        assert_eq!((meta.media_type.as_str(), meta.bytes), ("image/png", png.len() as u64));
        assert!(bounded.tokens > Tokens(5));
    }

    #[tokio::test]
    async fn a_tool_calls_result_is_logged_with_a_receipt_and_tool_finished() {
        let server = ScriptedServer::start(vec![
            sse(vec![tool_call_with_id("c1", "read_file", json!({"path": "notes.txt"}))]),
            sse(vec![tool_call_with_id("c2", "finish", json!({"summary": "read the notes"}))]),
        ])
        .await;
        let rig = Rig::start(server).await;
        std::fs::write(rig.workspace.path().join("notes.txt"), "the adder subtracts\n").unwrap();
        let task = rig.task("Read the notes");
        let mut coder = agent(Role::Coder, Vec::new(), &task);
        assert_eq!(coder.run_turn(Some("Read the notes".into())).await.unwrap(), "read the notes");

        let logged = rig.history(&task.task_id, "coder");
        assert_eq!(logged, coder.history);
        let Some(Part::ToolResult { call_id, content, is_error }) =
            logged.get(2).and_then(|m| m.parts.first())
        else {
            panic!("the read's result follows its call: {logged:#?}")
        };
        assert_eq!((call_id.as_str(), *is_error), ("c1", false));
        assert!(content.contains("the adder subtracts"), "{content}");
        // The model saw it in the next request.
        assert!(rig.server.chat_requests()[1].to_string().contains("the adder subtracts"));
        let tools: Vec<&str> = coder.receipts.iter().map(|r| r.tool.as_str()).collect();
        assert_eq!(tools, ["read_file", "finish"]);
        let events = rig.events(&task.task_id);
        assert_eq!(
            rig.kinds(&task.task_id),
            [
                "request_sent",
                "response_received",
                "tool_called",
                "tool_finished",
                "request_sent",
                "response_received",
                "tool_called",
                "tool_finished"
            ]
        );
        let EventKind::ToolFinished { tool, call_id, ok, evidence_id, result_tokens, whole_limit, .. } =
            of_kind(&events, "tool_finished")[0]
        else {
            unreachable!()
        };
        assert_eq!((tool.as_str(), call_id.as_str(), *ok, evidence_id), ("read_file", "c1", true, &None));
        assert!(result_tokens.is_some_and(|t| t > Tokens::ZERO && Some(t) <= *whole_limit));
    }

    #[tokio::test]
    async fn a_large_result_goes_to_evidence_and_the_model_gets_its_first_page() {
        let server = ScriptedServer::builder()
            .max_model_len(Some(8_000))
            .script(vec![
                sse(vec![tool_call_with_id("c1", "read_file", json!({"path": "big.log"}))]),
                sse(vec![text("too long to read whole")]),
            ])
            .start()
            .await;
        let rig = Rig::start(server).await;
        let lines: String = (0..3_000).map(|i| format!("line {i}: request handled in {i} ms\n")).collect();
        std::fs::write(rig.workspace.path().join("big.log"), &lines).unwrap();
        let task = rig.task("Read the log");
        let mut coder = agent(Role::Coder, Vec::new(), &task);
        coder.run_turn(Some("Read the log".into())).await.unwrap();

        let events = rig.events(&task.task_id);
        let EventKind::ToolFinished {
            evidence_id: Some(id),
            result_tokens: Some(tokens),
            whole_limit: Some(limit),
            ..
        } = of_kind(&events, "tool_finished")[0]
        else {
            panic!("the large result is evidence: {events:#?}")
        };
        assert!(tokens <= limit, "the page ({tokens}) fits the limit ({limit})");
        let meta = rig.storage.evidence(id).unwrap();
        assert!(meta.bytes as usize >= lines.len(), "stored whole: {} bytes", meta.bytes);
        let Some(Part::ToolResult { content, .. }) = coder.history[2].parts.first() else { panic!() };
        assert!(content.starts_with(&format!("[evidence {id}:")), "{content}");
        assert!(content.contains("read_evidence"), "it says how to read on: {content}");
        assert_eq!(coder.receipts[0].evidence_id.as_deref(), Some(id.as_str()));
    }

    #[tokio::test]
    async fn a_tool_the_role_lacks_is_an_error_the_model_sees() {
        let server = ScriptedServer::start(vec![
            sse(vec![tool_call_with_id("c1", "write_file", json!({"path": "a.txt", "content": "x"}))]),
            sse(vec![text("understood")]),
        ])
        .await;
        let rig = Rig::start(server).await;
        let task = rig.task("Write a file");
        let mut lead = agent(Role::Lead, Vec::new(), &task);
        assert_eq!(lead.run_turn(Some("Write a file".into())).await.unwrap(), "understood");
        let Some(Part::ToolResult { content, is_error: true, .. }) = lead.history[2].parts.first() else {
            panic!("{:#?}", lead.history)
        };
        assert!(content.contains("not available to the lead role"), "{content}");
        assert!(!rig.workspace.path().join("a.txt").exists());
        let events = rig.events(&task.task_id);
        assert!(matches!(of_kind(&events, "tool_finished")[0], EventKind::ToolFinished { ok: false, .. }));
    }

    #[tokio::test]
    async fn finish_is_rejected_while_verify_fails() {
        let server = ScriptedServer::start(vec![
            sse(vec![tool_call_with_id("c1", "finish", json!({"summary": "too early"}))]),
            sse(vec![tool_call_with_id("c2", "write_file", json!({"path": "done.txt", "content": "ok\n"}))]),
            sse(vec![tool_call_with_id("c3", "finish", json!({"summary": "verified"}))]),
        ])
        .await;
        let rig = Rig::start_with(server, |team| {
            team.coder.verify = Some("test -f done.txt".into());
            team.sandbox.mode = agentd_agents::tools::SandboxMode::Off;
        })
        .await;
        let task = rig.task("Make it pass");
        let mut coder = agent(Role::Coder, Vec::new(), &task);
        assert_eq!(coder.run_turn(Some("Make it pass".into())).await.unwrap(), "verified");
        let Some(Part::ToolResult { content, is_error: true, .. }) = coder.history[2].parts.first() else {
            panic!("{:#?}", coder.history)
        };
        assert!(content.starts_with("finish rejected: verification `test -f done.txt` failed"), "{content}");
        let events = rig.events(&task.task_id);
        let [EventKind::FinishRejected { reason }] = of_kind(&events, "finish_rejected")[..] else {
            panic!("{events:#?}")
        };
        assert_eq!(reason, "verification `test -f done.txt` failed");
        assert_eq!(coder.changed_files, ["done.txt"]);
    }

    #[tokio::test]
    async fn a_cancelled_turn_stops() {
        // Cancelled before it starts asking: no request goes out.
        let rig = Rig::start(ScriptedServer::start(vec![sse(vec![text("never")])]).await).await;
        let cancel = CancellationToken::new();
        cancel.cancel();
        let task = rig.task_with("Fix it", cancel);
        let mut lead = agent(Role::Lead, Vec::new(), &task);
        assert!(matches!(lead.run_turn(Some("Fix it".into())).await, Err(TurnError::Cancelled)));
        assert!(rig.server.chat_requests().is_empty());
        assert_eq!(lead.history, [objective("Fix it")], "the input is logged all the same");

        // Cancelled while the model thinks: the request is dropped at once and nothing is stored.
        let rig = Rig::start(ScriptedServer::start(vec![hang()]).await).await;
        let cancel = CancellationToken::new();
        let task = rig.task_with("Fix it", cancel.clone());
        let mut lead = agent(Role::Lead, Vec::new(), &task);
        // Cancelled once the server holds the request (whatever the first count costs).
        let cancel_when_sent = async {
            while rig.server.chat_requests().is_empty() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            cancel.cancel();
        };
        let began = Instant::now();
        let (ended, ()) = tokio::join!(lead.run_turn(Some("Fix it".into())), cancel_when_sent);
        assert!(matches!(ended, Err(TurnError::Cancelled)));
        assert!(began.elapsed() < Duration::from_secs(10));
        assert_eq!(rig.server.chat_requests().len(), 1);
        assert_eq!(rig.kinds(&task.task_id), ["request_sent"]);
        assert_eq!(lead.history.len(), 1);
    }
}
