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
//!
//! The module, one concept a file:
//!
//! - here: the [`Fitter`] handle, its shared state and the measure of a server/model (its counter
//!   under its calibration, [`MeterOf`]);
//! - `fit`: the fit itself ([`Fit`]) — measure, compact when past the trigger, accept;
//! - `windows`: each server/model's window — probed, learned from refusals ([`Learn`]), persisted;
//! - `gauge`: the last measurement of each task's role ([`GaugeOf`]);
//! - `usage`: a usage report paired with the request it answers ([`Observe`]), and a refusal of a
//!   request counted as fitting ([`Underestimated`]).

mod fit;
mod gauge;
#[cfg(test)]
mod tests;
mod usage;
mod windows;

pub use fit::{Fit, FitError, Fitted, Requested, RequestedDone};
pub use gauge::GaugeOf;
pub use usage::{CacheNews, Observe, Observed, Underestimated};
pub use windows::{Learn, WindowOf};

use crate::counter::{Fingerprint, TokenCounter};
use crate::meter::Meter;
use crate::storage::{Settings, Storage, StorageError};
use agentd_policies::cache::Learned;
use agentd_policies::calibration::{Basis, Calibration};
use agentd_policies::cost::Price;
use agentd_policies::retry::RetryPolicy;
use agentd_policies::settings::{LearnedPromptCache, PairCalibration, Priced};
use agentd_protocol::model::PromptCache;
use agentd_protocol::CountSource;
use agentd_protocol::Role;
use agentd_protocol::{Count, EventKind, Gauge, Tokens, Usage, Window};
use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

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
    /// The framing its messages were counted with ([`framing`](crate::counter::framing)).
    framing: Tokens,
    /// What made the raw count.
    source: CountSource,
    /// The basis it was counted from, if it extended an earlier reported request.
    basis: Option<Basis>,
    /// Its calibrated count.
    counted: Tokens,
    /// The server's count, once its usage report came back.
    reported: Option<Tokens>,
    /// Whether its usage report may teach the server's prompt cache (none is declared, and learning
    /// is not turned off).
    learns: bool,
}

type RoleKey = (String, Role);

struct State {
    storage: Arc<dyn Storage>,
    /// How summary requests are retried, and each model's prices (for the cost of a response or a
    /// compaction): the configuration's, replaced by a reload.
    policies: RwLock<(RetryPolicy, Arc<BTreeMap<String, Price>>)>,
    counters: Mutex<HashMap<String, Arc<TokenCounter>>>,
    calibrations: Mutex<HashMap<String, Calibration>>,
    windows: Mutex<HashMap<(String, String), Window>>,
    gauges: Mutex<HashMap<RoleKey, Gauge>>,
    /// Per task and role: the request last measured, waiting for its answer.
    pending: Mutex<HashMap<RoleKey, LastRequest>>,
    /// Per task and role: the last request the server answered.
    answered: Mutex<HashMap<RoleKey, LastRequest>>,
    /// Per task and role: where its last compaction priced the next one, on which server/model
    /// (`None`: known to have none); persisted, so a restart or a takeover goes on with it.
    priced: Mutex<HashMap<RoleKey, Option<Priced>>>,
    /// Per server/model: what its usage reports taught of its prompt cache (`None`: nothing);
    /// persisted like a learned window.
    caches: Mutex<HashMap<(String, String), Option<Learned>>>,
    /// Per task and role, until its first compaction: the size of its first request, of its last,
    /// and how many it made — what its first cycle is priced from.
    openings: Mutex<HashMap<RoleKey, Opening>>,
}

/// A role's requests before its first compaction.
#[derive(Debug, Clone, Copy)]
struct Opening {
    first: Tokens,
    last: Tokens,
    requests: u64,
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
        let stored = self.storage.get(&PairCalibration { server, model }).ok().flatten().unwrap_or_default();
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
        if let Err(e) = self.storage.cache(&PairCalibration { server, model }, &c) {
            tracing::warn!(error = %e, "could not keep the calibration");
        }
        self.calibrations.lock().insert(pair_key(server, model), c);
        out
    }

    /// What the usage reports taught of a server/model's prompt cache: in memory, else as persisted.
    fn learned_cache(&self, server: &str, model: &str) -> Option<Learned> {
        let key = (server.to_string(), model.to_string());
        if let Some(known) = self.caches.lock().get(&key) {
            return known.clone();
        }
        let stored = self.storage.get(&LearnedPromptCache { server, model }).ok().flatten().flatten();
        self.caches.lock().entry(key).or_insert(stored).clone()
    }

    /// Keeps what a server/model's cache is now known to be (`None`: forgotten).
    fn keep_cache(&self, server: &str, model: &str, learned: Option<Learned>) -> Result<(), StorageError> {
        self.storage.put(&LearnedPromptCache { server, model }, &learned)?;
        self.caches.lock().insert((server.to_string(), model.to_string()), learned);
        Ok(())
    }

    /// The prompt cache a request to `client`'s server for `model` is priced with: the declared one,
    /// else (unless learning is off) the one its usage reports taught.
    fn prompt_cache(
        &self,
        client: &dyn agentd_protocol::Model,
        server: &str,
        model: &str,
    ) -> Option<PromptCache> {
        if let Some(declared) = client.prompt_cache() {
            return Some(declared);
        }
        client.learns_prompt_cache().then(|| self.learned_cache(server, model)).flatten().map(|l| l.cache())
    }

    /// The read factor `model`'s prices say, if they say one.
    fn price_factor(&self, model: &str) -> Option<f64> {
        let prices = self.prices();
        let price = prices.get(model)?;
        agentd_policies::cache::price_factor(price.input, price.cached_input)
    }

    /// The measure of a server/model: its counter under its calibration as it stands.
    fn meter(&self, server: &str, model: &str) -> Meter {
        Meter::new(self.counter(server, model), self.calibration(server, model))
    }

    /// What `usage` of `model` cost, when the model has prices and the server reported usage.
    fn cost(&self, model: &str, usage: Option<Usage>) -> Option<f64> {
        agentd_policies::cost::priced(&self.prices(), model, &usage?)
    }

    /// The summary requests' retry schedules, as configured now.
    fn retry(&self) -> RetryPolicy {
        self.policies.read().0
    }

    /// Each model's prices, as configured now.
    fn prices(&self) -> Arc<BTreeMap<String, Price>> {
        self.policies.read().1.clone()
    }

    /// Emits a compaction event of a task's role into the store.
    fn emit(&self, task_id: &str, role: &Role, kind: EventKind) -> Result<(), StorageError> {
        self.storage.emit(task_id, role, kind).map(|_| ())
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
    /// From now on, summary requests are retried by `retry` and priced by `prices` (a reload).
    pub fn set_policies(&self, retry: RetryPolicy, prices: Arc<BTreeMap<String, Price>>) {
        *self.state.policies.write() = (retry, prices);
    }

    /// A fitter that keeps windows, calibrations and gauges in `storage`, emits compaction events there,
    /// retries summary requests by `retry` and prices them by `prices`.
    pub fn new(
        storage: Arc<dyn Storage>,
        retry: RetryPolicy,
        prices: Arc<BTreeMap<String, Price>>,
    ) -> Fitter {
        Fitter {
            state: Arc::new(State {
                storage,
                policies: RwLock::new((retry, prices)),
                counters: Mutex::new(HashMap::new()),
                calibrations: Mutex::new(HashMap::new()),
                windows: Mutex::new(HashMap::new()),
                gauges: Mutex::new(HashMap::new()),
                pending: Mutex::new(HashMap::new()),
                answered: Mutex::new(HashMap::new()),
                priced: Mutex::new(HashMap::new()),
                caches: Mutex::new(HashMap::new()),
                openings: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// What `usage` of `model` cost in USD at its `[prices]`; `None` without prices or usage.
    pub fn cost(&self, model: &str, usage: Option<Usage>) -> Option<f64> {
        self.state.cost(model, usage)
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
