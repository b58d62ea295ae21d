//! What the daemon's surfaces share: the socket's methods, the HTTP API, the supervisor and the
//! storage checks each get the one [`Shared`] of the running daemon.

use crate::bus::EventBus;
use crate::config::Config;
use crate::ends::Ends;
use crate::scheduler::Scheduler;
use crate::storage::{DaemonStorage, SledStorage};
use actix::prelude::*;
use agentd_cluster::fleet::Fleet;
use agentd_engine::context::Engine;
use agentd_engine::tool_servers::ToolServers;
use agentd_evidence::Store;
use agentd_policies::redact::Redactor;
use agentd_protocol::{Event, Model};
use parking_lot::RwLock;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::broadcast;

/// Where the daemon keeps its tasks: its own sled database, or the fleet's JetStream.
pub enum Backing {
    /// One machine: the sled store in the home.
    Sled(Store),
    /// A node of a fleet (`[cluster]`).
    Fleet(Arc<Fleet>),
}

/// The running daemon's parts, as its surfaces reach them. The engine's own parts (fitter,
/// models, team settings) are the engine's, reached through it.
pub struct Shared {
    /// The daemon's home, canonical: never a workspace, never reachable from one.
    pub home: PathBuf,
    /// The durable store: tasks, logs, settings, windows, evidence and memory — sled, or the fleet's.
    pub storage: Arc<dyn DaemonStorage>,
    /// Every event, once stored, for live subscribers (`watch`, the event streams): a subscriber
    /// filters by task and replays what came before from `storage`. In a fleet, every node's events.
    pub live: broadcast::Sender<Event>,
    /// The fleet this daemon is a node of (`[cluster]`), if any.
    pub fleet: Option<Arc<Fleet>>,
    /// The configuration the daemon runs, the text it was read from and when: replaced whole by a
    /// reload ([`Shared::config`] reads it).
    loaded: RwLock<Arc<Loaded>>,
    /// How each provider answered at the start or the last reload.
    pub providers: Arc<crate::provider_health::ProviderHealth>,
    /// The team engine every task runs on.
    pub engine: Arc<Engine>,
    /// The scheduler that runs the cron jobs.
    pub scheduler: Addr<Scheduler>,
    /// Ends of tasks the store could not record yet (see [`crate::ends`]).
    pub ends: Arc<Ends>,
    /// How the configured MCP servers fare: their last starts, the servers down in each task.
    pub mcp: Arc<crate::mcp::McpHealth>,
    /// In a fleet: the tasks this node stopped because the fleet could not be written (no quorum),
    /// `waiting` until a node takes them again.
    pub stalls: Arc<crate::fleet::Stalls>,
    /// The counters `GET /metrics` writes, fed by every event published.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// How the exports of traces fare (`[telemetry]`), for `daemon.status` and `/metrics`.
    pub exports: crate::telemetry::Exports,
}

impl Shared {
    /// The daemon's parts over `backing`, for `config`, with the scheduler started on the running
    /// actix system. `env` reads the daemon's environment (the providers' keys and the secrets to
    /// redact): `std::env::var` for the daemon, a map in tests. `exports` counts the exports of
    /// traces, when the daemon's process exports them (`Exports::default()`: it does not).
    pub fn start(
        home: PathBuf,
        backing: Backing,
        config: Arc<Config>,
        env: impl Fn(&str) -> Option<String>,
        exports: crate::telemetry::Exports,
    ) -> Shared {
        let live = EventBus::channel();
        let ends = Arc::new(Ends::default());
        let (storage, fleet): (Arc<dyn DaemonStorage>, _) = match backing {
            Backing::Sled(store) => {
                let bus = EventBus::new(store.clone(), live.clone());
                (Arc::new(SledStorage::new(store, bus, ends.clone())), None)
            }
            Backing::Fleet(fleet) => {
                crate::fleet::follow_events(fleet.clone(), live.clone());
                (fleet.storage.clone(), Some(fleet))
            }
        };
        let models = models_of(&config, &env, None);
        let redactor = redactor_of(&config, &env);
        let engine = Engine::new(storage.clone(), config.team.clone(), models, redactor);
        let engine = Arc::new(engine.with_calendar(Arc::new(config.tz)));
        let scheduler = Scheduler::new(config.jobs.clone(), storage.clone(), home.clone()).start();
        let metrics = Arc::new(crate::metrics::Metrics::with_exports(&exports));
        metrics.clone().follow(live.subscribe());
        Shared {
            home,
            storage,
            live,
            fleet,
            loaded: RwLock::new(Arc::new(Loaded::of(config))),
            providers: Default::default(),
            engine,
            scheduler,
            ends,
            mcp: Default::default(),
            stalls: Default::default(),
            metrics,
            exports,
        }
    }

    /// The tool servers of task `task_id` in `workspace`: the configured MCP servers, none started yet.
    pub fn tool_servers(&self, task_id: &str, workspace: &Path) -> Arc<dyn ToolServers> {
        Arc::new(crate::mcp::TaskServers::new(&self.config(), task_id, workspace, self.mcp.clone()))
    }

    /// The configuration the daemon runs now.
    pub fn config(&self) -> Arc<Config> {
        self.loaded.read().config.clone()
    }

    /// The configuration the daemon runs, with its text and when it was read.
    pub fn loaded(&self) -> Arc<Loaded> {
        self.loaded.read().clone()
    }

    /// Puts a configuration read anew in place (`crate::reload`).
    pub(crate) fn set_loaded(&self, loaded: Loaded) {
        *self.loaded.write() = Arc::new(loaded);
    }
}

/// A configuration as the daemon read it.
pub struct Loaded {
    /// The configuration.
    pub config: Arc<Config>,
    /// The file's text it was read from (what `daemon.status` compares the file with).
    pub text: String,
    /// When it was read, RFC 3339.
    pub read_at: String,
}

impl Loaded {
    /// `config` as read now, its text read from its file (empty when it cannot be read).
    pub fn of(config: Arc<Config>) -> Loaded {
        let text = std::fs::read_to_string(&config.path).unwrap_or_default();
        Loaded { config, text, read_at: agentd_engine::clock::now_rfc3339() }
    }
}

/// A client per configured provider, by name, each with its key from `env`; a provider configured
/// as it was in `reuse` keeps its client there (what it learned of its server, its requests in
/// flight).
pub fn models_of(
    config: &Config,
    env: &impl Fn(&str) -> Option<String>,
    reuse: Option<(&Config, &agentd_engine::context::Configured)>,
) -> HashMap<String, Arc<dyn Model>> {
    let mut models: HashMap<String, Arc<dyn Model>> = HashMap::new();
    for (name, p) in &config.providers {
        let kept = reuse
            .filter(|(before, _)| {
                before.providers.get(name) == Some(p) && before.deadlines == config.deadlines
            })
            .and_then(|(_, configured)| configured.models.get(name).cloned());
        let model = kept.unwrap_or_else(|| Arc::new(p.connect(p.api_key(env), config.deadlines)));
        models.insert(name.clone(), model);
    }
    models
}

/// The redactor of the providers' keys and the configured secrets, by variable name, their values
/// read by `env`: redacted from every tool result.
pub fn redactor_of(config: &Config, env: &impl Fn(&str) -> Option<String>) -> Redactor {
    let secret_names =
        config.providers.values().filter_map(|p| p.api_key_env.clone()).chain(config.secret_env.clone());
    Redactor::new(secret_names.filter_map(|name| env(&name).map(|value| (name, value))))
}
