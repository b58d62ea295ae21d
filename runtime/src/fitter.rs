//! The fitter: the one owner of "how big is this request and does it fit".
//!
//! Every request of every agent passes through this actor. It knows the window of each server/model
//! (probed on first use, learned from refusals, persisted), counts the fully materialised request with
//! the model's tokenizer (or a marked estimate), and keeps the last measurement of each task and role
//! as the gauge that `context` and `status` show — one measurement, one owner, so the events and the
//! gauge cannot disagree.

use crate::bus::EventBus;
use crate::clock::now_rfc3339;
use crate::compactor::{compact, CompactError, Compacted, Job};
use crate::counter::{prepare, CountSource, RequestCount, TokenCounter};
use crate::provider::{ChatRequest, Client};
use actix::prelude::*;
use agentd_agents::workspace::Workspace;
use agentd_evidence::{Store, StoreError};
use agentd_policies::compaction::{
    WorkingFile, CHECKPOINT_HEADER, FILES_HEADER, OBJECTIVE_PREFIX, OBSERVATIONS_HEADER,
};
use agentd_policies::retry::RetryPolicy;
use agentd_policies::usage::{correct_window, Correction};
use agentd_policies::{Count, EventKind, Role, Thresholds, Tokens, Usage, Window, WindowSource};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

#[derive(Debug, thiserror::Error)]
pub enum FitError {
    #[error(
        "the request is {count} tokens, over the {window}-token window of {model} ({window_source}); \
         it was not sent"
    )]
    OverWindow { count: Count, window: Tokens, window_source: &'static str, model: String },
    #[error("{0}")]
    Compaction(String),
    #[error("cancelled")]
    Cancelled,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A measured request that may be sent.
#[derive(Debug, Clone)]
pub struct Fitted {
    pub count: RequestCount,
    pub window: Window,
    pub thresholds: Thresholds,
    /// The request to send: the one asked about, or its compacted rebuild.
    pub request: ChatRequest,
    /// Set when the history was compacted: the new active history and its archive.
    pub compacted: Option<Compacted>,
}

/// The gauge of one role of one task: the last request the fitter measured for it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Gauge {
    pub role: String,
    pub model: String,
    /// What measured the request: the model's tokenizer, the server's counting endpoint, or an estimate.
    pub count_source: CountSource,
    pub window: Tokens,
    pub window_source: WindowSource,
    pub tokens: Tokens,
    pub estimated: bool,
    pub categories: Categories,
    pub compact_at: u8,
    pub trigger_tokens: Tokens,
    pub destination_tokens: Tokens,
    pub free_tokens: Tokens,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Categories {
    pub system: Tokens,
    pub tools: Tokens,
    pub objective: Tokens,
    pub checkpoint: Tokens,
    pub observations: Tokens,
    pub files: Tokens,
    /// Recent messages kept verbatim (thinking excluded).
    pub messages: Tokens,
    pub thinking: Tokens,
}

struct State {
    store: Store,
    bus: EventBus,
    retry: RetryPolicy,
    counters: Mutex<HashMap<String, Arc<TokenCounter>>>,
    windows: Mutex<HashMap<(String, String), Window>>,
    gauges: Mutex<HashMap<(String, String), Gauge>>,
}

impl State {
    /// The counter of a model on a server: tiktoken when it knows the model, else the server's own
    /// counting endpoint, else a marked estimate. Keyed by server too: one server's missing endpoint
    /// says nothing about another's.
    fn counter(&self, server: &str, model: &str) -> Arc<TokenCounter> {
        let mut counters = lock(&self.counters);
        counters
            .entry(format!("{server}\n{model}"))
            .or_insert_with(|| Arc::new(TokenCounter::with_endpoint(model)))
            .clone()
    }

    fn known_window(&self, server: &str, model: &str) -> Result<Option<Window>, StoreError> {
        let key = (server.to_string(), model.to_string());
        if let Some(w) = lock(&self.windows).get(&key) {
            return Ok(Some(*w));
        }
        let stored = self.store.window(server, model)?;
        if let Some(w) = stored {
            lock(&self.windows).insert(key, w);
        }
        Ok(stored)
    }

    fn set_window(&self, server: &str, model: &str, window: Window) -> Result<(), StoreError> {
        self.store.set_window(server, model, window)?;
        lock(&self.windows).insert((server.to_string(), model.to_string()), window);
        Ok(())
    }

    /// The window of a server/model: remembered, or probed from the server, or assumed.
    async fn window(&self, client: &Client, model: &str) -> Result<Window, StoreError> {
        let server = client.base_url();
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned lock means a panic elsewhere mid-update of a cache; the data is still usable.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub struct Fitter {
    state: Arc<State>,
}

impl Fitter {
    pub fn new(store: Store, bus: EventBus, retry: RetryPolicy) -> Fitter {
        Fitter {
            state: Arc::new(State {
                store,
                bus,
                retry,
                counters: Mutex::new(HashMap::new()),
                windows: Mutex::new(HashMap::new()),
                gauges: Mutex::new(HashMap::new()),
            }),
        }
    }
}

impl Actor for Fitter {
    type Context = Context<Self>;
}

/// Measure a request and say whether it may be sent; past the trigger, compact the history first.
#[derive(Message)]
#[rtype(result = "Result<Fitted, FitError>")]
pub struct Fit {
    pub task_id: String,
    pub role: String,
    pub client: Arc<Client>,
    pub request: ChatRequest,
    pub compact_at: u8,
    /// The objective of the role's current turn: first in every rebuilt request.
    pub objective: String,
    /// The task's workspace: the coder's working files are read from it, and evidence falls back to
    /// its `.agentd-evidence/` folder when the database cannot take it.
    pub workspace: Workspace,
    pub cancel: CancellationToken,
}

impl Handler<Fit> for Fitter {
    type Result = ResponseFuture<Result<Fitted, FitError>>;

    fn handle(&mut self, msg: Fit, _: &mut Context<Self>) -> Self::Result {
        let state = self.state.clone();
        Box::pin(async move { state.fit(msg).await })
    }
}

impl State {
    async fn fit(&self, msg: Fit) -> Result<Fitted, FitError> {
        let window = self.window(&msg.client, &msg.request.model).await?;
        let counter = self.counter(msg.client.base_url(), &msg.request.model);
        let mut request = msg.request;
        tokio::select! {
            _ = prepare(&counter, &msg.client, &request.model, &request) => {}
            _ = msg.cancel.cancelled() => return Err(FitError::Cancelled),
        }
        let mut count = counter.count_request(&request);
        let reserve = msg.client.output_reserve(&request);
        let thresholds = Thresholds::new(window.tokens, msg.compact_at, reserve);
        let mut compacted = None;
        let gauge = |request: &ChatRequest, count: &RequestCount| {
            self.record_gauge(
                &msg.task_id,
                &msg.role,
                request,
                count,
                &counter,
                window,
                thresholds,
                msg.compact_at,
            )
        };
        gauge(&request, &count);
        if thresholds.crosses_trigger(count.total.tokens) {
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
            let fixed = count.system.tokens
                + count.tools.tokens
                + (count.total.tokens - count.system.tokens - count.tools.tokens - count.messages.tokens);
            let working_files = if msg.role == "coder" {
                working_files(&request.messages, &msg.workspace, &counter)
            } else {
                Vec::new()
            };
            let job = Job {
                task_id: &msg.task_id,
                role: &msg.role,
                client: &msg.client,
                model: &request.model,
                counter: &counter,
                store: &self.store,
                history: &request.messages,
                system: &request.system,
                tools: &request.tools,
                objective: &msg.objective,
                fixed,
                before,
                window,
                thresholds,
                working_files,
                fallback_dir: msg.workspace.root().join(".agentd-evidence"),
                retry: self.retry,
                cancel: &msg.cancel,
                at: now_rfc3339(),
            };
            match compact(job).await {
                Ok(done) => {
                    request.messages = done.history.clone();
                    prepare(&counter, &msg.client, &request.model, &request).await;
                    count = counter.count_request(&request);
                    self.emit(
                        &msg.task_id,
                        &msg.role,
                        EventKind::CompactionFinished {
                            tokens_before: before,
                            tokens_after: count.total.tokens,
                            archive_id: done.archive_id.clone(),
                            batches: done.batches,
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
            gauge(&request, &count);
        }
        if thresholds.over_window(count.total.tokens) {
            return Err(FitError::OverWindow {
                count: count.total,
                window: window.tokens,
                window_source: window.source.as_str(),
                model: request.model.clone(),
            });
        }
        Ok(Fitted { count, window, thresholds, request, compacted })
    }

    /// The gauge is the fitter's last measurement of a role: what `context` and `status` show.
    #[allow(clippy::too_many_arguments)]
    fn record_gauge(
        &self,
        task_id: &str,
        role: &str,
        request: &ChatRequest,
        count: &RequestCount,
        counter: &TokenCounter,
        window: Window,
        thresholds: Thresholds,
        compact_at: u8,
    ) {
        let gauge = Gauge {
            role: role.to_string(),
            model: request.model.clone(),
            count_source: counter.source(),
            window: window.tokens,
            window_source: window.source,
            tokens: count.total.tokens,
            estimated: count.total.estimated,
            categories: categories(request, count, counter),
            compact_at,
            trigger_tokens: thresholds.trigger,
            destination_tokens: thresholds.destination,
            free_tokens: window.tokens.saturating_sub(count.total.tokens),
        };
        // The gauge survives a restart: `status` and `context` show the last measurement until the
        // role measures again.
        if let Ok(value) = serde_json::to_value(&gauge) {
            if let Err(e) = self.store.cache_setting(&gauge_key(task_id, role), &value) {
                tracing::warn!(error = %e, "could not keep the gauge");
            }
        }
        lock(&self.gauges).insert((task_id.to_string(), role.to_string()), gauge);
    }

    fn emit(&self, task_id: &str, role: &str, kind: EventKind) -> Result<(), StoreError> {
        self.bus.emit(task_id, role, kind).map(|_| ())
    }
}

/// The gauge's categories: the request's messages sorted by what they are.
fn categories(request: &ChatRequest, count: &RequestCount, counter: &TokenCounter) -> Categories {
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
    for (i, m) in request.messages.iter().enumerate() {
        let tokens = counter.count_message(m).tokens;
        let text = if m.role == Role::User { m.text() } else { String::new() };
        let slot = if text.starts_with(CHECKPOINT_HEADER) {
            &mut c.checkpoint
        } else if text.starts_with(OBSERVATIONS_HEADER) {
            &mut c.observations
        } else if text.starts_with(FILES_HEADER) {
            &mut c.files
        } else if text.starts_with(OBJECTIVE_PREFIX) || (i == 0 && m.role == Role::User) {
            &mut c.objective
        } else {
            &mut c.messages
        };
        *slot += tokens;
    }
    c.messages = c.messages.saturating_sub(c.thinking);
    c
}

/// The coder's working files, newest first: what it wrote or edited, then what it read, as they are
/// in the workspace now.
fn working_files(
    history: &[agentd_policies::Message],
    workspace: &Workspace,
    counter: &TokenCounter,
) -> Vec<WorkingFile> {
    const MAX_FILES: usize = 8;
    const MAX_BYTES: u64 = 256 << 10;
    let mut paths: Vec<String> = Vec::new();
    for pass in [&["write_file", "edit_file"][..], &["read_file"][..]] {
        for m in history.iter().rev() {
            for (_, name, args) in m.tool_calls() {
                if !pass.contains(&name) {
                    continue;
                }
                let path = serde_json::from_str::<serde_json::Value>(args)
                    .ok()
                    .and_then(|v| v.get("path").and_then(|p| p.as_str()).map(str::to_string));
                if let Some(p) = path {
                    if !paths.contains(&p) {
                        paths.push(p);
                    }
                }
            }
        }
    }
    let mut files = Vec::new();
    for path in paths.into_iter().take(MAX_FILES) {
        let Ok(abs) = workspace.resolve(&path) else {
            continue;
        };
        match std::fs::metadata(&abs) {
            Ok(meta) if meta.is_file() && meta.len() <= MAX_BYTES => {}
            _ => continue,
        }
        if let Ok(text) = std::fs::read_to_string(&abs) {
            let tokens = counter.count_text(&text).tokens;
            files.push(WorkingFile { path, text, tokens });
        }
    }
    files
}

/// A refusal stated the window: remember it. Returns the window believed before.
#[derive(Message)]
#[rtype(result = "Result<Window, StoreError>")]
pub struct Learn {
    pub server: String,
    pub model: String,
    pub window: Window,
}

impl Handler<Learn> for Fitter {
    type Result = Result<Window, StoreError>;

    fn handle(&mut self, msg: Learn, _: &mut Context<Self>) -> Self::Result {
        let old = self.state.known_window(&msg.server, &msg.model)?.unwrap_or_else(Window::assumed);
        self.state.set_window(&msg.server, &msg.model, msg.window)?;
        Ok(old)
    }
}

/// Probe (or recall) the window of a server/model without counting anything.
#[derive(Message)]
#[rtype(result = "Result<Window, StoreError>")]
pub struct WindowOf {
    pub client: Arc<Client>,
    pub model: String,
    /// Ask the server again even when a window is remembered (`models probe`).
    pub fresh: bool,
}

impl Handler<WindowOf> for Fitter {
    type Result = ResponseFuture<Result<Window, StoreError>>;

    fn handle(&mut self, msg: WindowOf, _: &mut Context<Self>) -> Self::Result {
        let state = self.state.clone();
        Box::pin(async move {
            if msg.fresh {
                if let Ok(Some(tokens)) = msg.client.probe_window(&msg.model).await {
                    let w = Window { tokens, source: WindowSource::Declared };
                    state.set_window(msg.client.base_url(), &msg.model, w)?;
                    return Ok(w);
                }
            }
            state.window(&msg.client, &msg.model).await
        })
    }
}

fn gauge_key(task_id: &str, role: &str) -> String {
    format!("gauge/{task_id}/{role}")
}

/// The last measurement of a task's role, if it has made a request.
#[derive(Message)]
#[rtype(result = "Option<Gauge>")]
pub struct GaugeOf {
    pub task_id: String,
    pub role: String,
}

impl Handler<GaugeOf> for Fitter {
    type Result = Option<Gauge>;

    fn handle(&mut self, msg: GaugeOf, _: &mut Context<Self>) -> Self::Result {
        if let Some(g) = lock(&self.state.gauges).get(&(msg.task_id.clone(), msg.role.clone())) {
            return Some(g.clone());
        }
        let stored = self.state.store.setting(&gauge_key(&msg.task_id, &msg.role)).ok().flatten()?;
        let gauge: Gauge = serde_json::from_value(stored).ok()?;
        lock(&self.state.gauges).insert((msg.task_id, msg.role), gauge.clone());
        Some(gauge)
    }
}

/// A usage report came back: compare what the server says it processed with what we counted.
#[derive(Message)]
#[rtype(result = "Result<Option<(Window, Window)>, StoreError>")]
pub struct Observe {
    pub server: String,
    pub model: String,
    pub sent: Count,
    pub usage: Usage,
}

impl Handler<Observe> for Fitter {
    type Result = Result<Option<(Window, Window)>, StoreError>;

    fn handle(&mut self, msg: Observe, _: &mut Context<Self>) -> Self::Result {
        let state = &self.state;
        let Some(window) = state.known_window(&msg.server, &msg.model)? else {
            return Ok(None);
        };
        let before_key = format!("window_before_clamp/{}/{}", msg.server, msg.model);
        let before_clamp =
            state.store.setting(&before_key)?.and_then(|v| serde_json::from_value::<Window>(v).ok());
        match correct_window(window, before_clamp, msg.sent, msg.usage) {
            Correction::None => Ok(None),
            Correction::Clamp(new) => {
                if window.source != WindowSource::Usage {
                    state
                        .store
                        .set_setting(&before_key, &serde_json::to_value(window).unwrap_or_default())?;
                }
                state.set_window(&msg.server, &msg.model, new)?;
                Ok(Some((window, new)))
            }
            Correction::Lift(new) => {
                state.set_window(&msg.server, &msg.model, new)?;
                Ok(Some((window, new)))
            }
        }
    }
}

/// Count a text with a model's tokenizer (tool results, evidence pages).
#[derive(Message)]
#[rtype(result = "Count")]
pub struct Measure {
    pub server: String,
    pub model: String,
    pub text: String,
}

impl Handler<Measure> for Fitter {
    type Result = MessageResult<Measure>;

    fn handle(&mut self, msg: Measure, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.state.counter(&msg.server, &msg.model).count_text(&msg.text))
    }
}
