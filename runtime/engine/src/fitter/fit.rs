//! The fit itself: measure a request against its window, compact the history when it is past the
//! role's trigger, and accept it — or refuse it when even then it does not fit.
//!
//! `State::fit` only strings the steps together:
//!
//! 1. `scale`: the server/model's window, counter, meter and the role's thresholds in that window,
//!    after the endpoint (if any) has counted what is new in the request.
//! 2. `measure`: the raw count and fingerprint in one pass, calibrated — from the server's own
//!    figure when the request extends the last one it answered for this role. The gauge shows it.
//! 3. `compact_history`: past the trigger (or when the user asked for it, aimed lower, see
//!    `agentd_policies::compaction::requested`), the history is compacted (`compaction_started`, then
//!    `compaction_finished` or `compaction_failed`) and the rebuilt request measured again; it is
//!    the gauge now.
//! 4. `accept`: over the window, the request is refused; else it is remembered as the role's
//!    pending request (what its usage report will be paired with) and handed back to be sent.

use super::{Fitter, LastRequest, Opening, RoleKey, State};
use crate::blocks::{blocks, BlocksConfig, BlocksFor};
use crate::clock::now_rfc3339;
use crate::compactor::{compact, CompactError, CompactedHistory, Job, SummariserJob};
use crate::counter::{prepare, Fingerprint, RequestCount, TokenCounter};
use crate::meter::{Measurement, Meter};
use crate::storage::{Settings, StorageError};
use agentd_agents::workspace::Workspace;
use agentd_policies::budget::{summary_reserve, WORKING_FILES, WORKING_FILE_BYTES};
use agentd_policies::calibration::Basis;
use agentd_policies::compaction::price::{next_trigger, Outlook};
use agentd_policies::compaction::{requested, NothingToCompact, SentPrefix, WorkingFile};
use agentd_policies::settings::{Priced, PricedTrigger};
use agentd_policies::Thresholds;
use agentd_protocol::gauge::GaugeCache;
use agentd_protocol::model::PromptCache;
use agentd_protocol::task::EVIDENCE_FOLDER;
use agentd_protocol::{ChatRequest, Model, Role};
use agentd_protocol::{Count, EventKind, Tokens, Window};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

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
    #[error("compaction failed: {0}")]
    Compaction(String),
    /// A compaction asked for made no candidate small enough (`compaction_refused` was emitted;
    /// nothing was written); holds its reason.
    #[error("compaction refused: {0}; nothing was written, the history is as it was")]
    Refused(String),
    /// The task was cancelled while the fitter compacted.
    #[error("cancelled")]
    Cancelled,
    /// A summary request must wait for a usage limit, or would cross a budget: the task stops
    /// (`waiting`, `paused`) and compacts again when it goes on.
    #[error("{0}")]
    Halted(Box<crate::halt::Halt>),
    /// A compaction was asked for ([`Fit::requested`]) and there is nothing to compact.
    #[error("{0}")]
    NothingToCompact(#[from] NothingToCompact),
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
    /// The role's trigger and destination in that window (the trigger as the last compaction
    /// priced it, when the provider declares a prompt cache).
    pub thresholds: Thresholds,
    /// The request to send: the one asked about, or its compacted rebuild.
    pub request: ChatRequest,
    /// Set when the history was compacted: the new active history and its archive.
    pub compacted: Option<CompactedHistory>,
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
    /// The blocks a rebuilt request starts with (instructions, memory), made afresh by a compaction.
    pub blocks: Arc<BlocksConfig>,
    /// A compaction the user asked for (`agentd compact`): made now, whatever the trigger says.
    pub requested: Option<Requested>,
    /// The role's summariser, if it has one (`compaction = {provider, model}`): its client and model.
    pub summariser: Option<(Arc<dyn Model>, String)>,
    /// The budgets' check every summary request passes; `None`: no check (a stopped task compacted
    /// on request).
    pub gate: Option<crate::spending::Gate>,
}

/// Where a compaction aims, and whether the user asked for it (then its failure is a refusal).
struct Aim<'a> {
    /// The thresholds it is aimed at: the role's, or lower when asked for.
    thresholds: Thresholds,
    /// What the summariser is to keep in particular (`--focus`).
    focus: Option<&'a str>,
    /// Asked for by the user, not made by the trigger.
    asked: bool,
}

/// A compaction the user asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requested {
    /// What the summariser is to keep in particular (`--focus`).
    pub focus: Option<String>,
}

/// What a compaction the user asked for did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestedDone {
    /// The request's size before, counted in full.
    pub tokens_before: Tokens,
    /// The rebuilt request's size, counted in full.
    pub tokens_after: Tokens,
    /// The evidence that holds what left the request.
    pub archive_id: String,
}

impl Fitter {
    /// Measures the request of `msg` against its window; past the trigger, compacts the history and
    /// measures the candidate again. Runs on the caller's task: two tasks' fits never wait on each
    /// other.
    pub async fn fit(&self, msg: Fit) -> Result<Fitted, FitError> {
        self.state.fit(msg).await
    }
}

/// What one fit measures against: the server/model, its counter and measure, its window and the
/// role's thresholds in it.
struct Scale {
    server: String,
    model: String,
    counter: Arc<TokenCounter>,
    meter: Meter,
    window: Window,
    /// What the request is fitted to: the role's thresholds, their trigger as the role's last
    /// compaction priced it when the provider declares a prompt cache.
    thresholds: Thresholds,
    /// The role's thresholds as its `compact_at` puts them: what a compaction aims at, and the
    /// latest it prices the next one at.
    unpriced: Thresholds,
    /// The prompt cache compactions are priced with: declared, or learned from usage reports.
    cache: Option<PromptCache>,
    /// Whether a compaction of the role priced its trigger (else its first cycle is priced).
    priced: bool,
    /// Whether `cache` is declared (else learned).
    declared: bool,
}

/// One measurement of the request: its fingerprint, the basis it was counted from (if it extended
/// a request the server answered) and its calibrated count.
struct Measured {
    fingerprint: Fingerprint,
    basis: Option<Basis>,
    measurement: Measurement,
}

impl State {
    pub(super) async fn fit(&self, mut msg: Fit) -> Result<Fitted, FitError> {
        let key = (msg.task_id.clone(), msg.role.clone());
        let mut scale = self.scale(&msg, &key).await?;
        let (mut measured, extended) = self.measure(&msg, &key, &scale);
        if !scale.priced {
            if let Some(at) = self.first_cycle(&key, &scale, &measured.measurement.count) {
                scale.thresholds = scale.unpriced.priced(at);
            }
        }
        self.show(&msg, &scale, &measured.measurement.count);
        let mut compacted = None;
        let before = measured.measurement.count.total.tokens;
        // Asked for: aimed lower than the trigger's compaction, refused before any event when nothing
        // can leave.
        let requested = match msg.requested.take() {
            Some(r) => match requested(scale.unpriced, before, &msg.request.messages) {
                Ok(aim) => Some((r, aim)),
                Err(nothing) => {
                    let refused = EventKind::CompactionRefused { reason: nothing.to_string() };
                    self.emit(&msg.task_id, &msg.role, refused)?;
                    return Err(FitError::NothingToCompact(nothing));
                }
            },
            None => None,
        };
        if requested.is_some() || scale.thresholds.crosses_trigger(before) {
            let count = measured.measurement.count;
            let aim = match &requested {
                Some((r, aim)) => Aim { thresholds: *aim, focus: r.focus.as_deref(), asked: true },
                None => Aim { thresholds: scale.unpriced, focus: None, asked: false },
            };
            let span = crate::spans::compaction(count.total.tokens.0);
            let (done, rebuilt) = self
                .compact_history(&mut msg, &scale, aim, extended.as_ref(), count)
                .instrument(span.clone())
                .await?;
            span.record("agentd.tokens_after", rebuilt.measurement.count.total.tokens.0);
            span.record("agentd.batches", done.batches);
            span.record("agentd.archive_id", done.archive_id.as_str());
            scale.thresholds = self.price_next(&key, &scale, done.next_trigger);
            measured = rebuilt;
            compacted = Some(done);
            // The rebuilt request is what is sent: it is the gauge now.
            self.show(&msg, &scale, &measured.measurement.count);
        }
        self.accept(msg, key, scale, measured, compacted)
    }

    /// The window, counter, meter and thresholds of the request's server/model, once the endpoint
    /// (if the counter uses one) has counted what is new in the request.
    async fn scale(&self, msg: &Fit, key: &RoleKey) -> Result<Scale, FitError> {
        let window = self.window(msg.client.as_ref(), &msg.request.model).await?;
        let server = msg.client.server().to_string();
        let model = msg.request.model.clone();
        let counter = self.counter(&server, &model);
        tokio::select! {
            _ = prepare(&counter, msg.client.as_ref(), &msg.request.model, &msg.request) => {}
            _ = msg.cancel.cancelled() => return Err(FitError::Cancelled),
        }
        let meter = self.meter(&server, &model);
        let reserve = msg.client.output_reserve(&msg.request);
        let unpriced = Thresholds::new(window.tokens, msg.compact_at, reserve);
        let cache = self.prompt_cache(msg.client.as_ref(), &server, &model);
        // The trigger the role's last compaction priced, while its server still has a cache (declared
        // or learned) and the role still talks to the same server and model.
        let priced =
            self.priced_trigger(key).filter(|p| cache.is_some() && p.server == server && p.model == model);
        let thresholds = priced.as_ref().map_or(unpriced, |p| unpriced.priced(p.at));
        let declared = msg.client.prompt_cache().is_some();
        let priced = priced.is_some();
        Ok(Scale { server, model, counter, meter, window, thresholds, unpriced, cache, priced, declared })
    }

    /// Where the role's last compaction priced the next one: in memory, else as persisted.
    fn priced_trigger(&self, key: &RoleKey) -> Option<Priced> {
        if let Some(known) = self.priced.lock().get(key) {
            return known.clone();
        }
        let setting = PricedTrigger { task_id: &key.0, role: &key.1 };
        let stored = self.storage.get(&setting).ok().flatten().flatten();
        self.priced.lock().entry(key.clone()).or_insert(stored).clone()
    }

    /// Before the role's first compaction, with a prompt cache: its first request is the first
    /// cycle's landing, growing as its requests have grown (from its second request on), and its
    /// trigger is where that cycle is priced lowest ([`next_trigger`]), as a compaction prices the
    /// next one.
    fn first_cycle(&self, key: &RoleKey, scale: &Scale, count: &RequestCount) -> Option<Tokens> {
        let now = count.total.tokens;
        let opening = {
            let mut openings = self.openings.lock();
            let o = openings.entry(key.clone()).or_insert(Opening { first: now, last: now, requests: 0 });
            o.requests += 1;
            o.last = now;
            *o
        };
        // Counted from the role's first request, even while its server's cache is not known yet.
        let cache = scale.cache?;
        if opening.requests < 2 {
            return None;
        }
        let growth = opening.last.saturating_sub(opening.first).0 / (opening.requests - 1);
        let outlook = Outlook {
            cache,
            fixed: count.total.tokens.saturating_sub(count.messages.tokens),
            floor: scale.unpriced.destination,
            trigger: scale.unpriced.trigger,
            growth: Tokens(growth.max(1)),
            unseen: Tokens::ZERO,
            summary: summary_reserve(scale.window.tokens),
        };
        Some(next_trigger(opening.first, &outlook))
    }

    /// Keeps where a compaction priced the role's next one (forgets it when it priced none), and
    /// the thresholds the request is fitted to from now on.
    fn price_next(&self, key: &RoleKey, scale: &Scale, next: Option<Tokens>) -> Thresholds {
        // Compacted: its first cycle is over.
        self.openings.lock().remove(key);
        let priced = next.map(|at| Priced { server: scale.server.clone(), model: scale.model.clone(), at });
        let setting = PricedTrigger { task_id: &key.0, role: &key.1 };
        if let Err(e) = self.storage.cache(&setting, &priced) {
            tracing::warn!(error = %e, "could not keep the priced trigger");
        }
        self.priced.lock().insert(key.clone(), priced);
        next.map_or(scale.unpriced, |at| scale.unpriced.priced(at))
    }

    /// The request's raw count and fingerprint, calibrated; from the server's own figure when it
    /// extends the last request of this role the server answered (returned too: a compaction's
    /// first summary continues it).
    fn measure(&self, msg: &Fit, key: &RoleKey, scale: &Scale) -> (Measured, Option<LastRequest>) {
        let (raw, fingerprint) = scale.meter.count_raw(&msg.request);
        let extended = self
            .answered
            .lock()
            .get(key)
            .filter(|l| {
                l.server == scale.server && l.model == scale.model && fingerprint.extends(&l.fingerprint)
            })
            .cloned();
        let basis =
            extended.as_ref().and_then(|l| l.reported.map(|actual| Basis { raw: l.raw.tokens, actual }));
        let measurement = scale.meter.calibrate(raw, basis);
        tracing::debug!(
            task = %msg.task_id, role = %msg.role, raw = %measurement.raw.tokens, raw_fixed = %measurement.raw_fixed,
            ?basis, counted = %measurement.count.total.tokens, "measured"
        );
        (Measured { fingerprint, basis, measurement }, extended)
    }

    /// Shows `count` of the request as the role's gauge.
    fn show(&self, msg: &Fit, scale: &Scale, count: &RequestCount) {
        self.record_gauge(
            &msg.task_id,
            &msg.role,
            &msg.request,
            count,
            &scale.meter,
            scale.window,
            scale.thresholds,
            msg.compact_at,
            scale.thresholds.trigger < scale.unpriced.trigger,
            scale.cache.map(|c| GaugeCache {
                read_factor: c.read_factor,
                min_tokens: c.min_tokens,
                source: if scale.declared { "declared" } else { "learned" }.to_string(),
            }),
        );
    }

    /// Past the trigger: compacts the history of `msg`'s request (replaced by the rebuilt one) and
    /// measures it again, announcing the compaction's start and its end or failure.
    async fn compact_history(
        &self,
        msg: &mut Fit,
        scale: &Scale,
        aim: Aim<'_>,
        extended: Option<&LastRequest>,
        count: RequestCount,
    ) -> Result<(CompactedHistory, Measured), FitError> {
        let Aim { thresholds, focus, asked } = aim;
        let (window, meter) = (scale.window, &scale.meter);
        let before = count.total.tokens;
        self.emit(
            &msg.task_id,
            &msg.role,
            EventKind::CompactionStarted {
                tokens_before: before,
                trigger_tokens: scale.thresholds.trigger,
                destination_tokens: thresholds.destination,
                window: window.tokens,
            },
        )?;
        // System prompt + tool schemas + reply priming.
        let fixed = count.total.tokens.saturating_sub(count.messages.tokens);
        let working_files = if *msg.role.base() == Role::Coder {
            working_files(&msg.changed_files, &msg.workspace, meter)
        } else {
            Vec::new()
        };
        // A summariser of the role's own: its window (probed or learned like any) and its measure.
        let summariser = match &msg.summariser {
            Some((client, model)) => {
                let window = self.window(client.as_ref(), model).await?;
                Some((client.clone(), model.clone(), self.meter(client.server(), model), window.tokens))
            }
            None => None,
        };
        let sent_prefix = extended.map(|l| SentPrefix {
            messages: l.fingerprint.messages.len(),
            tokens: l.reported.unwrap_or(l.counted),
        });
        // The instructions and the memory as they read now: first in the rebuilt request, verbatim.
        let pinned = blocks(
            &msg.blocks,
            &BlocksFor {
                storage: self.storage.as_ref(),
                workspace: &msg.workspace,
                task_id: &msg.task_id,
                role: &msg.role,
                window: window.tokens,
                meter,
            },
        )?;
        let job = Job {
            task_id: &msg.task_id,
            role: &msg.role,
            client: msg.client.as_ref(),
            summariser: summariser.as_ref().map(|(client, model, meter, window)| SummariserJob {
                client: client.as_ref(),
                model,
                meter,
                window: *window,
            }),
            meter,
            storage: self.storage.as_ref(),
            request: &msg.request,
            objective: &msg.objective,
            pinned: &pinned,
            focus,
            fixed,
            before,
            before_estimated: count.total.estimated,
            sent_prefix,
            thresholds,
            cache: scale.cache,
            working_files,
            fallback_dir: msg.workspace.root().join(EVIDENCE_FOLDER),
            retry: self.retry(),
            cancel: &msg.cancel,
            gate: msg.gate.clone(),
            at: now_rfc3339(),
        };
        let summary_model = summariser.as_ref().map_or_else(|| msg.request.model.clone(), |s| s.1.clone());
        let done = match compact(job).await {
            Ok(done) => done,
            Err(CompactError::Cancelled) => return Err(FitError::Cancelled),
            Err(CompactError::Halted(h)) => return Err(FitError::Halted(h)),
            // Asked for and not made: refused, having written nothing (the machine archives only
            // what it accepts), the history as it was.
            Err(CompactError::Failed(reason)) if asked => {
                self.emit(&msg.task_id, &msg.role, EventKind::CompactionRefused { reason: reason.clone() })?;
                return Err(FitError::Refused(reason));
            }
            Err(e) => {
                let reason = match e {
                    CompactError::Failed(reason) => reason,
                    e => e.to_string(),
                };
                self.emit(&msg.task_id, &msg.role, EventKind::CompactionFailed { reason: reason.clone() })?;
                return Err(FitError::Compaction(reason));
            }
        };
        msg.request.messages = done.history.clone();
        prepare(&scale.counter, msg.client.as_ref(), &msg.request.model, &msg.request).await;
        // A rebuilt request extends nothing the server has seen.
        let (raw, fingerprint) = meter.count_raw(&msg.request);
        let measured = Measured { fingerprint, basis: None, measurement: meter.calibrate(raw, None) };
        self.emit(
            &msg.task_id,
            &msg.role,
            EventKind::CompactionFinished {
                tokens_before: before,
                tokens_after: measured.measurement.count.total.tokens,
                archive_id: done.archive_id.clone(),
                batches: done.batches,
                measured_by: Some(meter.measured()),
                summary_model: Some(summary_model.clone()),
                summary_usage: done.summary_usage,
                cost_usd: self.cost(&summary_model, done.summary_usage),
                next_trigger_tokens: done.next_trigger.map(|at| scale.unpriced.priced(at).trigger),
            },
        )?;
        Ok((done, measured))
    }

    /// Refuses a request over the window; else remembers it as the role's pending request (what its
    /// usage report will be paired with) and hands it back to be sent.
    fn accept(
        &self,
        msg: Fit,
        key: RoleKey,
        scale: Scale,
        measured: Measured,
        compacted: Option<CompactedHistory>,
    ) -> Result<Fitted, FitError> {
        let learns = msg.client.prompt_cache().is_none() && msg.client.learns_prompt_cache();
        let Scale { server, model, meter, window, thresholds, .. } = scale;
        let Measured { fingerprint, basis, measurement } = measured;
        if thresholds.over_window(measurement.count.total.tokens) {
            return Err(FitError::OverWindow {
                count: measurement.count.total,
                window: window.tokens,
                window_source: window.source.as_str(),
                model: msg.request.model.clone(),
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
                framing: crate::counter::framing(&msg.request.messages),
                source: meter.source(),
                basis,
                counted: measurement.count.total.tokens,
                reported: None,
                learns,
            },
        );
        let request = msg.request;
        Ok(Fitted { count: measurement.count, meter, window, thresholds, request, compacted })
    }
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
