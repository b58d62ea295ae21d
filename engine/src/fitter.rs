//! The fitter: the one owner of "how big is this request and does it fit".
//!
//! Every request of every agent passes through it (a handle, called on the agent's own task). It knows the window of each server/model
//! (probed on first use, learned from refusals, persisted), counts the fully materialised request with
//! the model's tokenizer (or a marked estimate) calibrated by that server's usage reports
//! ([`crate::meter`]), and keeps the last measurement of each task and role as the gauge that
//! `context` and `status` show — one measurement, one owner, so the events and the gauge cannot
//! disagree.
//!
//! Calibration: the fitter remembers, per task and role, the request it last measured (its content
//! fingerprint and raw count). When the usage report for it comes back ([`Observe`]), the pair teaches
//! the server/model's calibration (persisted), and the request becomes the basis of the next one: a
//! request that extends it is counted as the server's figure plus a calibrated count of what was
//! appended. The same remembered request is what a compaction's first summary continues, so the
//! provider's cached prefix serves it.

use crate::clock::now_rfc3339;
use crate::compactor::{compact, CompactError, Compacted, Job};
use crate::counter::{prepare, CountSource, Fingerprint, RequestCount, TokenCounter};
use crate::meter::Meter;
use crate::storage::{Storage, StorageError};
use agentd_agents::workspace::Workspace;
use agentd_policies::budget::{WORKING_FILES, WORKING_FILE_BYTES};
use agentd_policies::calibration::{Basis, Calibration, Observed, Raw};
use agentd_policies::compaction::{SentPrefix, WorkingFile};
use agentd_policies::retry::RetryPolicy;
use agentd_policies::settings::SettingKey;
use agentd_policies::usage::{correct_window, Correction, Expected};
use agentd_policies::{Count, EventKind, Thresholds, Tokens, Usage, Window, WindowSource};
use agentd_protocol::task::EVIDENCE_FOLDER;
use agentd_protocol::{ChatRequest, Model};
use agentd_protocol::{MessageKind, Role};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Why a request may not be sent.
#[derive(Debug, thiserror::Error)]
pub enum FitError {
    /// Even after compacting (or with nothing left to compact), the request is larger than the window.
    #[error(
        "the request is {count} tokens, over the {window}-token window of {model} ({window_source}); \
         it was not sent"
    )]
    OverWindow {
        /// The request's calibrated size (marked when estimated).
        count: Count,
        /// The window it does not fit, in tokens.
        window: Tokens,
        /// Where the window came from (`declared`, `error`, `usage`, `assumed`).
        window_source: &'static str,
        /// The model the request was for.
        model: String,
    },
    /// The compaction failed (`compaction_failed` was emitted); holds its reason.
    #[error("{0}")]
    Compaction(String),
    /// The task was cancelled while the fitter compacted.
    #[error("cancelled")]
    Cancelled,
    /// The store could not take an event, the gauge's record or a learned window.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// A measured request that may be sent.
#[derive(Debug, Clone)]
pub struct Fitted {
    /// Calibrated: what every decision about this request uses.
    pub count: RequestCount,
    /// The measure it was made with (the same one pages and handoffs use).
    pub meter: Meter,
    /// The model's window the request was fitted into.
    pub window: Window,
    /// The role's trigger and destination in that window.
    pub thresholds: Thresholds,
    /// The request to send: the one asked about, or its compacted rebuild.
    pub request: ChatRequest,
    /// Set when the history was compacted: the new active history and its archive.
    pub compacted: Option<Compacted>,
}

pub use agentd_protocol::gauge::{Categories, Gauge};

/// The request the fitter last measured for a task's role: what its usage report is paired with, and
/// what the next request may extend.
#[derive(Debug, Clone)]
struct LastRequest {
    server: String,
    model: String,
    fingerprint: Fingerprint,
    /// The counter's raw count of it.
    raw: Count,
    /// The raw count of its fixed part (system prompt, tools, priming).
    raw_fixed: Tokens,
    /// What made the raw count.
    source: CountSource,
    /// The basis it was counted from, if it extended an earlier reported request.
    basis: Option<Basis>,
    /// Its calibrated count.
    counted: Tokens,
    /// The server's count, once its usage report came back.
    reported: Option<Tokens>,
}

type RoleKey = (String, Role);

struct State {
    storage: Arc<dyn Storage>,
    retry: RetryPolicy,
    counters: Mutex<HashMap<String, Arc<TokenCounter>>>,
    calibrations: Mutex<HashMap<String, Calibration>>,
    windows: Mutex<HashMap<(String, String), Window>>,
    gauges: Mutex<HashMap<RoleKey, Gauge>>,
    /// Per task and role: the request last measured, waiting for its answer.
    pending: Mutex<HashMap<RoleKey, LastRequest>>,
    /// Per task and role: the last request the server answered.
    answered: Mutex<HashMap<RoleKey, LastRequest>>,
}

/// The in-memory key of a server/model pair (counters, calibrations).
fn pair_key(server: &str, model: &str) -> String {
    format!("{server}\n{model}")
}

impl State {
    /// The counter of a model on a server: tiktoken when it knows the model, else the server's own
    /// counting endpoint, else a marked estimate. Keyed by server too: one server's missing endpoint
    /// says nothing about another's.
    fn counter(&self, server: &str, model: &str) -> Arc<TokenCounter> {
        let mut counters = self.counters.lock();
        counters
            .entry(pair_key(server, model))
            .or_insert_with(|| Arc::new(TokenCounter::with_endpoint(model)))
            .clone()
    }

    /// The calibration of a server/model: in memory, else as persisted, else none yet.
    fn calibration(&self, server: &str, model: &str) -> Calibration {
        let key = pair_key(server, model);
        if let Some(c) = self.calibrations.lock().get(&key) {
            return c.clone();
        }
        let stored = self
            .storage
            .setting(&SettingKey::Calibration { server, model })
            .ok()
            .flatten()
            .and_then(|v| serde_json::from_value::<Calibration>(v).ok())
            .unwrap_or_default();
        self.calibrations.lock().entry(key).or_insert(stored).clone()
    }

    /// Applies `update` to a server/model's calibration and keeps the result (persisted: a restarted
    /// daemon starts calibrated).
    fn update_calibration<R>(
        &self,
        server: &str,
        model: &str,
        update: impl FnOnce(&mut Calibration) -> R,
    ) -> R {
        let mut c = self.calibration(server, model);
        let out = update(&mut c);
        if let Ok(value) = serde_json::to_value(&c) {
            if let Err(e) = self.storage.cache_setting(&SettingKey::Calibration { server, model }, &value) {
                tracing::warn!(error = %e, "could not keep the calibration");
            }
        }
        self.calibrations.lock().insert(pair_key(server, model), c);
        out
    }

    /// The measure of a server/model: its counter under its calibration as it stands.
    fn meter(&self, server: &str, model: &str) -> Meter {
        Meter::new(self.counter(server, model), self.calibration(server, model))
    }

    fn known_window(&self, server: &str, model: &str) -> Result<Option<Window>, StorageError> {
        let key = (server.to_string(), model.to_string());
        if let Some(w) = self.windows.lock().get(&key) {
            return Ok(Some(*w));
        }
        let stored = self.storage.window(server, model)?;
        if let Some(w) = stored {
            self.windows.lock().insert(key, w);
        }
        Ok(stored)
    }

    fn set_window(&self, server: &str, model: &str, window: Window) -> Result<(), StorageError> {
        self.storage.set_window(server, model, window)?;
        self.windows.lock().insert((server.to_string(), model.to_string()), window);
        Ok(())
    }

    /// The window of a server/model: remembered, or probed from the server, or assumed.
    async fn window(&self, client: &dyn Model, model: &str) -> Result<Window, StorageError> {
        let server = client.server();
        if let Some(w) = self.known_window(server, model)? {
            return Ok(w);
        }
        let window = match client.probe_window(model).await {
            Ok(Some(tokens)) => Window { tokens, source: WindowSource::Declared },
            Ok(None) => Window::assumed(),
            Err(e) => {
                tracing::warn!(server, model, error = %e, "window probe failed; assuming the default");
                Window::assumed()
            }
        };
        self.set_window(server, model, window)?;
        Ok(window)
    }
}

/// The one measurer of every request: a cheap handle (clones share the state) that each task's agents
/// call directly from their own tokio task. It is not an actor: it holds no state of its own beyond
/// locked maps, so a mailbox would only funnel every task's counting through one thread.
#[derive(Clone)]
pub struct Fitter {
    state: Arc<State>,
}

impl Fitter {
    /// A fitter that keeps windows, calibrations and gauges in `storage`, emits compaction events there,
    /// and retries summary requests by `retry`.
    pub fn new(storage: Arc<dyn Storage>, retry: RetryPolicy) -> Fitter {
        Fitter {
            state: Arc::new(State {
                storage,
                retry,
                counters: Mutex::new(HashMap::new()),
                calibrations: Mutex::new(HashMap::new()),
                windows: Mutex::new(HashMap::new()),
                gauges: Mutex::new(HashMap::new()),
                pending: Mutex::new(HashMap::new()),
                answered: Mutex::new(HashMap::new()),
            }),
        }
    }
}

/// Measure a request and say whether it may be sent; past the trigger, compact the history first.
pub struct Fit {
    /// The task the request belongs to.
    pub task_id: String,
    /// The role making the request.
    pub role: Role,
    /// The role's provider client: the window is probed through it and summary requests go to it.
    pub client: Arc<dyn Model>,
    /// The request as the agent built it.
    pub request: ChatRequest,
    /// The role's `compact_at` for this turn, percent of the window.
    pub compact_at: u8,
    /// The objective of the role's current turn: first in every rebuilt request.
    pub objective: String,
    /// The files the role changed in this task, newest first: its working files (the coder's).
    pub changed_files: Vec<String>,
    /// The task's workspace: the coder's working files are read from it, and evidence falls back to
    /// its `.agentd-evidence/` folder when the database cannot take it.
    pub workspace: Workspace,
    /// Fires when the task is cancelled: a compaction in progress stops.
    pub cancel: CancellationToken,
}

impl Fitter {
    /// Measures the request of `msg` against its window; past the trigger, compacts the history and
    /// measures the candidate again. Runs on the caller's task: two tasks' fits never wait on each
    /// other.
    pub async fn fit(&self, msg: Fit) -> Result<Fitted, FitError> {
        self.state.fit(msg).await
    }
}

impl State {
    async fn fit(&self, msg: Fit) -> Result<Fitted, FitError> {
        let window = self.window(msg.client.as_ref(), &msg.request.model).await?;
        let server = msg.client.server().to_string();
        let model = msg.request.model.clone();
        let counter = self.counter(&server, &model);
        let mut request = msg.request;
        tokio::select! {
            _ = prepare(&counter, msg.client.as_ref(), &request.model, &request) => {}
            _ = msg.cancel.cancelled() => return Err(FitError::Cancelled),
        }
        let meter = self.meter(&server, &model);
        let key = (msg.task_id.clone(), msg.role.clone());
        let (raw, mut fingerprint) = meter.count_raw(&request);
        // The last request of this role the server answered, if this one extends it.
        let extended = self
            .answered
            .lock()
            .get(&key)
            .filter(|l| l.server == server && l.model == model && fingerprint.extends(&l.fingerprint))
            .cloned();
        let mut basis =
            extended.as_ref().and_then(|l| l.reported.map(|actual| Basis { raw: l.raw.tokens, actual }));
        let mut measurement = meter.calibrate(raw, basis);
        tracing::debug!(
            task = %msg.task_id, role = %msg.role, raw = %measurement.raw.tokens, raw_fixed = %measurement.raw_fixed,
            ?basis, counted = %measurement.count.total.tokens, "measured"
        );
        let reserve = msg.client.output_reserve(&request);
        let thresholds = Thresholds::new(window.tokens, msg.compact_at, reserve);
        let mut compacted = None;
        let gauge = |request: &ChatRequest, count: &RequestCount| {
            self.record_gauge(
                &msg.task_id,
                &msg.role,
                request,
                count,
                &meter,
                window,
                thresholds,
                msg.compact_at,
            )
        };
        gauge(&request, &measurement.count);
        if thresholds.crosses_trigger(measurement.count.total.tokens) {
            let count = measurement.count;
            let before = count.total.tokens;
            self.emit(
                &msg.task_id,
                &msg.role,
                EventKind::CompactionStarted {
                    tokens_before: before,
                    trigger_tokens: thresholds.trigger,
                    destination_tokens: thresholds.destination,
                    window: window.tokens,
                },
            )?;
            // System prompt + tool schemas + reply priming.
            let fixed = count.total.tokens.saturating_sub(count.messages.tokens);
            let working_files = if msg.role == Role::Coder {
                working_files(&msg.changed_files, &msg.workspace, &meter)
            } else {
                Vec::new()
            };
            let sent_prefix = extended.as_ref().map(|l| SentPrefix {
                messages: l.fingerprint.messages.len(),
                tokens: l.reported.unwrap_or(l.counted),
            });
            let job = Job {
                task_id: &msg.task_id,
                role: &msg.role,
                client: msg.client.as_ref(),
                meter: &meter,
                storage: self.storage.as_ref(),
                request: &request,
                objective: &msg.objective,
                fixed,
                before,
                before_estimated: count.total.estimated,
                sent_prefix,
                thresholds,
                working_files,
                fallback_dir: msg.workspace.root().join(EVIDENCE_FOLDER),
                retry: self.retry,
                cancel: &msg.cancel,
                at: now_rfc3339(),
            };
            match compact(job).await {
                Ok(done) => {
                    request.messages = done.history.clone();
                    prepare(&counter, msg.client.as_ref(), &request.model, &request).await;
                    // A rebuilt request extends nothing the server has seen.
                    basis = None;
                    let (raw, rebuilt) = meter.count_raw(&request);
                    fingerprint = rebuilt;
                    measurement = meter.calibrate(raw, None);
                    self.emit(
                        &msg.task_id,
                        &msg.role,
                        EventKind::CompactionFinished {
                            tokens_before: before,
                            tokens_after: measurement.count.total.tokens,
                            archive_id: done.archive_id.clone(),
                            batches: done.batches,
                            measured_by: Some(meter.measured()),
                        },
                    )?;
                    compacted = Some(done);
                }
                Err(CompactError::Cancelled) => return Err(FitError::Cancelled),
                Err(e) => {
                    let reason = e.to_string();
                    self.emit(
                        &msg.task_id,
                        &msg.role,
                        EventKind::CompactionFailed { reason: reason.clone() },
                    )?;
                    return Err(FitError::Compaction(reason));
                }
            }
            // The rebuilt request is what is sent: it is the gauge now.
            gauge(&request, &measurement.count);
        }
        if thresholds.over_window(measurement.count.total.tokens) {
            return Err(FitError::OverWindow {
                count: measurement.count.total,
                window: window.tokens,
                window_source: window.source.as_str(),
                model: request.model.clone(),
            });
        }
        self.pending.lock().insert(
            key,
            LastRequest {
                server,
                model,
                fingerprint,
                raw: measurement.raw,
                raw_fixed: measurement.raw_fixed,
                source: meter.source(),
                basis,
                counted: measurement.count.total.tokens,
                reported: None,
            },
        );
        Ok(Fitted { count: measurement.count, meter, window, thresholds, request, compacted })
    }

    /// The gauge is the fitter's last measurement of a role: what `context` and `status` show.
    #[allow(clippy::too_many_arguments)]
    fn record_gauge(
        &self,
        task_id: &str,
        role: &Role,
        request: &ChatRequest,
        count: &RequestCount,
        meter: &Meter,
        window: Window,
        thresholds: Thresholds,
        compact_at: u8,
    ) {
        let gauge = Gauge {
            role: role.clone(),
            model: request.model.clone(),
            count_source: meter.source(),
            calibration: meter.standing(),
            measured_by: meter.describe(),
            window: window.tokens,
            window_source: window.source,
            tokens: count.total.tokens,
            estimated: count.total.estimated,
            categories: categories(request, count, meter),
            compact_at,
            trigger_tokens: thresholds.trigger,
            destination_tokens: thresholds.destination,
            free_tokens: window.tokens.saturating_sub(count.total.tokens),
        };
        // The gauge survives a restart: `status` and `context` show the last measurement until the
        // role measures again.
        if let Ok(value) = serde_json::to_value(&gauge) {
            if let Err(e) = self.storage.cache_setting(&SettingKey::Gauge { task_id, role }, &value) {
                tracing::warn!(error = %e, "could not keep the gauge");
            }
        }
        self.gauges.lock().insert((task_id.to_string(), role.clone()), gauge);
    }

    fn emit(&self, task_id: &str, role: &Role, kind: EventKind) -> Result<(), StorageError> {
        self.storage.emit(task_id, role, kind).map(|_| ())
    }
}

/// The gauge's categories: the request's messages sorted by what they are, scaled so that they add
/// up to the (calibrated) count of the messages.
fn categories(request: &ChatRequest, count: &RequestCount, meter: &Meter) -> Categories {
    let mut c = Categories {
        system: count.system.tokens,
        tools: count.tools.tokens,
        objective: Tokens::ZERO,
        checkpoint: Tokens::ZERO,
        observations: Tokens::ZERO,
        files: Tokens::ZERO,
        messages: Tokens::ZERO,
        thinking: count.thinking.tokens,
    };
    let each: Vec<Tokens> = request.messages.iter().map(|m| meter.count_message(m).tokens).collect();
    let sum: Tokens = each.iter().copied().sum();
    let factor = if sum.0 == 0 { 1.0 } else { count.messages.tokens.0 as f64 / sum.0 as f64 };
    for (m, tokens) in request.messages.iter().zip(each) {
        let slot = match m.kind {
            MessageKind::Checkpoint => &mut c.checkpoint,
            MessageKind::Observations => &mut c.observations,
            MessageKind::WorkingFiles => &mut c.files,
            MessageKind::Objective => &mut c.objective,
            MessageKind::Plain => continue,
        };
        *slot += Tokens((tokens.0 as f64 * factor).round() as u64);
    }
    let named = c.objective + c.checkpoint + c.observations + c.files + c.thinking;
    c.messages = count.messages.tokens.saturating_sub(named);
    c
}

/// The coder's working files, newest first: the files it wrote or edited in this task (`changed`,
/// newest first, from its log), as they are in the workspace now. A file it only read is reference,
/// not work: it stays in the rounds that read it, or in the summary and the archive.
fn working_files(changed: &[String], workspace: &Workspace, meter: &Meter) -> Vec<WorkingFile> {
    let mut files = Vec::new();
    for path in changed.iter().take(WORKING_FILES) {
        // Opened beneath the workspace root like the file tools do: no symlink out, no hard link.
        if let Ok(text) = workspace.read_text(path, WORKING_FILE_BYTES) {
            let tokens = meter.count_text(&text).tokens;
            files.push(WorkingFile { path: path.clone(), text, tokens });
        }
    }
    files
}

/// A refusal stated the window: remember it. Returns the window believed before.
pub struct Learn {
    /// The server's base URL.
    pub server: String,
    /// The model refused.
    pub model: String,
    /// The window the refusal stated, marked `error`.
    pub window: Window,
}

impl Fitter {
    /// Remembers the window a refusal stated; returns the window believed before.
    pub fn learn(&self, msg: Learn) -> Result<Window, StorageError> {
        let old = self.state.known_window(&msg.server, &msg.model)?.unwrap_or_else(Window::assumed);
        self.state.set_window(&msg.server, &msg.model, msg.window)?;
        Ok(old)
    }
}

/// Probe (or recall) the window of a server/model without counting anything.
pub struct WindowOf {
    /// The provider client of the server to probe.
    pub client: Arc<dyn Model>,
    /// The model whose window to learn.
    pub model: String,
    /// Ask the server again even when a window is remembered (`models probe`).
    pub fresh: bool,
}

impl Fitter {
    /// The window of a server/model: remembered, or probed (`fresh`: probed again).
    pub async fn window_of(&self, msg: WindowOf) -> Result<Window, StorageError> {
        if msg.fresh {
            if let Ok(Some(tokens)) = msg.client.probe_window(&msg.model).await {
                let w = Window { tokens, source: WindowSource::Declared };
                self.state.set_window(msg.client.server(), &msg.model, w)?;
                return Ok(w);
            }
        }
        self.state.window(msg.client.as_ref(), &msg.model).await
    }
}

/// The last measurement of a task's role, if it has made a request.
pub struct GaugeOf {
    /// The task whose gauge to read.
    pub task_id: String,
    /// The role measured.
    pub role: Role,
}

impl Fitter {
    /// The gauge of a task's role: its last measurement, kept across restarts.
    pub fn gauge_of(&self, msg: GaugeOf) -> Option<Gauge> {
        if let Some(g) = self.state.gauges.lock().get(&(msg.task_id.clone(), msg.role.clone())) {
            return Some(g.clone());
        }
        let key = SettingKey::Gauge { task_id: &msg.task_id, role: &msg.role };
        let stored = self.state.storage.setting(&key).ok().flatten()?;
        let gauge: Gauge = serde_json::from_value(stored).ok()?;
        self.state.gauges.lock().insert((msg.task_id, msg.role), gauge.clone());
        Some(gauge)
    }
}

/// The server answered the request last fitted for a task's role (with its usage report, when it
/// sent one). The report corrects the window when it shows a silent truncation, and otherwise teaches
/// the server/model's calibration; the answered request becomes the basis of the next one. Returns
/// the window correction, if any.
pub struct Observe {
    /// The task whose role's request was answered.
    pub task_id: String,
    /// The role that made it.
    pub role: Role,
    /// The server's usage report for the answer; `None` when it sent none, and nothing is learned.
    pub usage: Option<Usage>,
}

impl Fitter {
    /// Pairs a server's answer (and its usage report) with the request last fitted for the role: a
    /// window correction, if the report shows one.
    pub fn observe(&self, msg: Observe) -> Result<Option<(Window, Window)>, StorageError> {
        let state = &self.state;
        let key = (msg.task_id, msg.role);
        let Some(mut last) = state.pending.lock().remove(&key) else { return Ok(None) };
        let (server, model) = (last.server.clone(), last.model.clone());
        let mut corrected = None;
        let raw = Raw { total: last.raw.tokens, fixed: last.raw_fixed };
        if let Some(usage) = msg.usage {
            if let Some(window) = state.known_window(&server, &model)? {
                let before_key = SettingKey::WindowBeforeClamp { server: &server, model: &model };
                let before_clamp = state
                    .storage
                    .setting(&before_key)?
                    .and_then(|v| serde_json::from_value::<Window>(v).ok());
                // Truncation is judged against what the server should have counted: a confirmed
                // calibration's best prediction (margin excluded), else the raw count, with the
                // tolerance its kind of count needs.
                let calibration = state.calibration(&server, &model);
                let expected = match calibration.best(raw, last.basis) {
                    Some(best) if calibration.confirmed() => {
                        Expected::calibrated(Count::measured(best.ceil() as u64))
                    }
                    _ if last.source == CountSource::Tiktoken => Expected::exact(last.raw),
                    _ => Expected::approximate(last.raw),
                };
                match correct_window(window, before_clamp, expected, usage) {
                    Correction::None => {}
                    Correction::Clamp(new) => {
                        if window.source != WindowSource::Usage {
                            state.storage.set_setting(
                                &before_key,
                                &serde_json::to_value(window).unwrap_or_default(),
                            )?;
                        }
                        state.set_window(&server, &model, new)?;
                        corrected = Some((window, new));
                    }
                    Correction::Lift(new) => {
                        state.set_window(&server, &model, new)?;
                        corrected = Some((window, new));
                    }
                }
            }
            let clamped = matches!(corrected, Some((old, new)) if new.tokens < old.tokens);
            // A truncated prompt's report measures what the server kept, not what was sent.
            if !clamped && usage.prompt_tokens > 0 {
                let actual = Tokens(usage.prompt_tokens);
                let observed =
                    state.update_calibration(&server, &model, |c| c.observe(raw, last.basis, actual));
                if let Observed::Learned { error: Some(error) } = observed {
                    tracing::debug!(
                        server = %server, model = %model, counted = %last.counted, reported = %actual,
                        error = format!("{:+.2}%", error * 100.0), "usage report"
                    );
                }
                last.reported = Some(actual);
            }
        }
        state.answered.lock().insert(key, last);
        Ok(corrected)
    }
}

/// The server refused as too long a request the fitter had measured as fitting its known window: the
/// calibrated count was too low. The calibration records an error of that size (its margin grows and
/// it is no longer confirmed), so the request measured again is compacted before it is resent.
pub struct Underestimated {
    /// The task whose request was refused.
    pub task_id: String,
    /// The role that made it.
    pub role: Role,
    /// The window the request was refused at: the one the fitter believed it fitted.
    pub window: Tokens,
}

impl Fitter {
    /// A request counted as fitting was refused as too long: widen the calibration's margin.
    pub fn underestimated(&self, msg: Underestimated) {
        let key = (msg.task_id, msg.role);
        let Some(last) = self.state.pending.lock().remove(&key) else { return };
        // The real size was over the window: at least that far above what was counted.
        self.state.update_calibration(&last.server, &last.model, |c| c.refused_at(msg.window, last.counted));
    }
}

/// The measure of a server/model, for size decisions outside a fit (tool results, evidence pages,
/// handoffs, thinking cleanup): the same counter and calibration the fitter uses.
pub struct MeterOf {
    /// The server's base URL.
    pub server: String,
    /// The model, as the role's configuration names it.
    pub model: String,
}

impl Fitter {
    /// The measure of a server/model for a size decision outside a fit.
    pub fn meter_of(&self, msg: MeterOf) -> Meter {
        self.state.meter(&msg.server, &msg.model)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::TaskCtx;
    use crate::storage::Storage;
    use crate::testing::{Rig, PROVIDER};
    use agentd_policies::Message;
    use agentd_test_support::{sse, text, ScriptedServer};

    fn request(rig: &Rig, messages: Vec<Message>) -> ChatRequest {
        ChatRequest {
            model: rig.server.model().to_string(),
            system: "You are the coder.".into(),
            messages,
            tools: Vec::new(),
            tool_choice_none: false,
            max_tokens: None,
            thinking_budget: None,
        }
    }

    async fn fit(rig: &Rig, task: &TaskCtx, role: &str, messages: Vec<Message>) -> Result<Fitted, FitError> {
        let client = rig.engine.model(PROVIDER).unwrap();
        let objective = messages.first().map(Message::text).unwrap_or_default();
        let fit = Fit {
            task_id: task.task_id.clone(),
            role: Role::from(role),
            client,
            request: request(rig, messages),
            compact_at: 80,
            objective,
            changed_files: Vec::new(),
            workspace: task.workspace.clone(),
            cancel: task.cancel.clone(),
        };
        rig.engine.fitter().fit(fit).await
    }

    async fn meter(rig: &Rig) -> Meter {
        let of = MeterOf { server: rig.server.base_url(), model: rig.server.model().to_string() };
        rig.engine.fitter().meter_of(of)
    }

    async fn observe(rig: &Rig, task: &TaskCtx, role: &str, prompt_tokens: u64) -> Option<(Window, Window)> {
        let usage = Some(Usage { prompt_tokens, completion_tokens: 20 });
        let msg = Observe { task_id: task.task_id.clone(), role: Role::from(role), usage };
        rig.engine.fitter().observe(msg).unwrap()
    }

    fn long(words: usize) -> String {
        "the adder subtracts where it should add; ".repeat(words / 8)
    }

    #[tokio::test]
    async fn a_request_is_measured_against_the_declared_window_and_the_gauge_outlives_the_fitter() {
        let rig = Rig::start(ScriptedServer::builder().max_model_len(Some(32_000)).start().await).await;
        let task = rig.task("Fix the adder");
        let objective = Message::user("Fix the adder").with_kind(MessageKind::Objective);
        let fitted = fit(&rig, &task, "coder", vec![objective]).await.unwrap();
        assert_eq!(fitted.window, Window { tokens: Tokens(32_000), source: WindowSource::Declared });
        let reserve = rig.engine.model(PROVIDER).unwrap().output_reserve(&fitted.request);
        assert_eq!(fitted.thresholds, Thresholds::new(Tokens(32_000), 80, reserve));
        assert!(!fitted.count.total.estimated, "gpt-4o is counted by its own tokenizer");
        let known = rig.storage.window(&rig.server.base_url(), rig.server.model()).unwrap();
        assert_eq!(known, Some(fitted.window), "a probed window is remembered");

        let gauge_of = || GaugeOf { task_id: task.task_id.clone(), role: "coder".into() };
        let gauge = rig.engine.fitter().gauge_of(gauge_of()).unwrap();
        assert_eq!(gauge.tokens, fitted.count.total.tokens);
        assert_eq!(gauge.free_tokens, Tokens(32_000) - fitted.count.total.tokens);
        assert_eq!(gauge.trigger_tokens, fitted.thresholds.trigger);
        assert!(gauge.categories.objective > Tokens::ZERO, "the objective is counted as such");
        // A fitter started afresh (a restarted daemon) shows the same gauge until the role measures.
        let again = Fitter::new(rig.storage.clone(), rig.engine.team().retry);
        let kept = again.gauge_of(gauge_of()).unwrap();
        assert_eq!(
            (kept.tokens, kept.window, kept.trigger_tokens),
            (gauge.tokens, gauge.window, gauge.trigger_tokens)
        );
    }

    #[tokio::test]
    async fn past_the_trigger_the_history_is_compacted_before_it_is_sent() {
        let server = ScriptedServer::builder()
            .max_model_len(Some(4_000))
            .responder(|_| sse(vec![text("Summary: the files were read one by one.")]))
            .start()
            .await;
        let rig = Rig::start(server).await;
        let task = rig.task("Read the files");
        let fitted = fit(&rig, &task, "coder", crate::testing::rounds(12, 300)).await.unwrap();
        let done = fitted.compacted.as_ref().expect("compacted");
        assert_eq!(fitted.request.messages, done.history, "the rebuilt request is what is sent");
        assert!(fitted.count.total.tokens <= fitted.thresholds.trigger);
        assert_eq!(rig.kinds(&task.task_id), ["compaction_started", "compaction_finished"]);
        let gauge =
            rig.engine.fitter().gauge_of(GaugeOf { task_id: task.task_id.clone(), role: "coder".into() });
        assert_eq!(gauge.unwrap().tokens, fitted.count.total.tokens, "the gauge shows what is sent");
    }

    #[tokio::test]
    async fn a_request_no_compaction_can_bring_under_the_window_is_not_sent() {
        let rig = Rig::start(ScriptedServer::builder().max_model_len(Some(1_000)).start().await).await;
        let task = rig.task("x");
        let huge = "please consider this detail carefully. ".repeat(600);
        let error = fit(&rig, &task, "lead", vec![Message::user(huge)]).await.unwrap_err();
        let FitError::Compaction(reason) = &error else { panic!("{error:?}") };
        assert!(reason.contains("1000-token window"), "{reason}");
        assert_eq!(rig.kinds(&task.task_id), ["compaction_started", "compaction_failed"]);
        assert!(rig.server.chat_requests().is_empty());
    }

    #[tokio::test]
    async fn learn_keeps_a_refusals_window_and_answers_the_one_believed_before() {
        let rig = Rig::start(ScriptedServer::start(vec![]).await).await;
        let (server, model) = (rig.server.base_url(), rig.server.model().to_string());
        let learn = |tokens| Learn {
            server: server.clone(),
            model: model.clone(),
            window: Window { tokens: Tokens(tokens), source: WindowSource::Error },
        };
        assert_eq!(rig.engine.fitter().learn(learn(16_384)).unwrap(), Window::assumed());
        let old = rig.engine.fitter().learn(learn(8_192)).unwrap();
        assert_eq!(old, Window { tokens: Tokens(16_384), source: WindowSource::Error });
        let learned = Window { tokens: Tokens(8_192), source: WindowSource::Error };
        assert_eq!(rig.storage.window(&server, &model).unwrap(), Some(learned));
        let client = rig.engine.model(PROVIDER).unwrap();
        let known = rig.engine.fitter().window_of(WindowOf { client, model: model.clone(), fresh: false });
        assert_eq!(known.await.unwrap(), learned);
    }

    #[tokio::test]
    async fn a_usage_report_calibrates_the_count_and_is_the_basis_of_the_next_request() {
        let rig = Rig::start(ScriptedServer::builder().max_model_len(Some(100_000)).start().await).await;
        let task = rig.task("Fix the adder");
        let first = vec![Message::user("Fix the adder"), Message::assistant_text(long(400))];
        let a = fit(&rig, &task, "coder", first.clone()).await.unwrap();
        let raw_a = a.count.total.tokens;
        // This server counts twice what we do.
        assert_eq!(observe(&rig, &task, "coder", raw_a.0 * 2).await, None);
        let calibration = meter(&rig).await.calibration().clone();
        assert_eq!(calibration.reports(), 1);
        let server = rig.server.base_url();
        let key = SettingKey::Calibration { server: &server, model: rig.server.model() };
        assert!(rig.storage.setting(&key).unwrap().is_some(), "the calibration is kept");

        // Another role's first request extends nothing: counted at the server's ratio.
        let other = vec![Message::user(long(400))];
        let raw_other = a.meter.count_raw(&request(&rig, other.clone())).0.total.tokens;
        let counted = fit(&rig, &task, "lead", other).await.unwrap().count.total.tokens;
        assert!(counted.0 >= raw_other.0 * 2, "{counted} for a raw {raw_other}");
        // The coder's next request extends the answered one: the server's figure plus what was added.
        let mut next = first;
        next.push(Message::user(long(400)));
        let raw_next = a.meter.count_raw(&request(&rig, next.clone())).0.total.tokens;
        let counted = fit(&rig, &task, "coder", next).await.unwrap().count.total.tokens;
        let added = raw_next - raw_a;
        assert!(
            counted >= raw_a + raw_a + added,
            "{counted}: at least the server's {} plus {added}",
            raw_a.0 * 2
        );
        assert!(counted.0 < raw_next.0 * 2, "{counted}: the basis is the report, not a ratio of the whole");
    }

    #[tokio::test]
    async fn a_report_of_a_truncated_prompt_clamps_the_window_and_teaches_nothing_else() {
        let rig = Rig::start(ScriptedServer::builder().max_model_len(Some(32_000)).start().await).await;
        let task = rig.task("Fix the adder");
        let sent = fit(&rig, &task, "coder", vec![Message::user(long(3_000))]).await.unwrap();
        assert!(sent.count.total.tokens > Tokens(2_000));
        let (old, new) = observe(&rig, &task, "coder", 1_000).await.expect("a correction");
        assert_eq!(old, sent.window);
        assert_eq!(new, Window { tokens: Tokens(1_020), source: WindowSource::Usage });
        assert_eq!(rig.storage.window(&rig.server.base_url(), rig.server.model()).unwrap(), Some(new));
        assert_eq!(
            meter(&rig).await.calibration().reports(),
            0,
            "a cut prompt's report measures what was kept"
        );
        // Nothing is pending any more: a second report for the same request changes nothing.
        assert_eq!(observe(&rig, &task, "coder", 1_000).await, None);
    }

    #[tokio::test]
    async fn a_refusal_of_a_request_counted_as_fitting_widens_the_margin() {
        let rig = Rig::start(ScriptedServer::builder().max_model_len(Some(100_000)).start().await).await;
        let task = rig.task("Fix the adder");
        let mut history = vec![Message::user("Fix the adder")];
        for _ in 0..4 {
            history.push(Message::assistant_text(long(400)));
            let fitted = fit(&rig, &task, "coder", history.clone()).await.unwrap();
            let raw = fitted.meter.count_raw(&fitted.request).0.total.tokens;
            observe(&rig, &task, "coder", raw.0).await;
        }
        let before = meter(&rig).await.calibration().clone();
        let other = vec![Message::user(long(400))];
        let lead_before = fit(&rig, &task, "lead", other.clone()).await.unwrap().count.total.tokens;
        fit(&rig, &task, "coder", history).await.unwrap();
        let refused =
            Underestimated { task_id: task.task_id.clone(), role: "coder".into(), window: Tokens(100_000) };
        rig.engine.fitter().underestimated(refused);
        let after = meter(&rig).await.calibration().clone();
        assert!(after.margin() > before.margin(), "{} then {}", before.margin(), after.margin());
        assert!(!after.confirmed());
        let lead_after = fit(&rig, &task, "lead", other).await.unwrap().count.total.tokens;
        assert!(
            lead_after > lead_before,
            "measured again, the same request counts more: {lead_before} then {lead_after}"
        );
    }
}
