//! What a task's parts share: the [`Engine`] every task of the daemon runs on, and one task's
//! [`TaskCtx`] — its id, workspace, cancellation, tool servers — with the few questions every part
//! of a task asks of them (a role's settings snapshot, its model, its system prompt).

use crate::clock::now_rfc3339;
use crate::error::TurnError;
use crate::fitter::{Fitter, Requested};
use crate::spending::{Calendar, Gate, Ledger, UtcDays};
use crate::storage::{Settings, Storage, StorageError};
use crate::team::TeamConfig;
use crate::tool_servers::ToolServers;
use agentd_agents::roles::default_tools;
use agentd_agents::workspace::Workspace;
use agentd_policies::budget::DEFAULT_COMPACT_AT;
use agentd_policies::redact::Redactor;
use agentd_policies::settings::{CompactAt, CompactAtOn};
use agentd_protocol::{Budget, Model, Role, TaskState, ToolName, TurnSettings};
use parking_lot::{Mutex, RwLock};
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// What every task of one engine shares, set up once by the daemon: where everything is kept, the
/// fitter every request passes through, the team's settings, a model per configured provider and
/// the redactor of secrets. Its parts are reached through methods, each by what needs it.
///
/// The configured parts (team, models, redactor) are swapped whole by [`Engine::reconfigure`]
/// (`agentd reload`): what reads them holds the set it read — a turn's settings snapshot, a task's
/// checkpoint limits — and the next read gets the new one.
pub struct Engine {
    storage: Arc<dyn Storage>,
    fitter: Fitter,
    configured: RwLock<Arc<Configured>>,
    ledger: Arc<Ledger>,
}

/// The engine's parts that come from the configuration, as one set.
pub struct Configured {
    /// The team's settings.
    pub team: TeamConfig,
    /// A model per configured provider, by the provider's name.
    pub models: HashMap<String, Arc<dyn Model>>,
    /// The redactor of the providers' keys and the configured secrets.
    pub redactor: Redactor,
}

/// One part of the [`Configured`] set read at one moment: it stays that set's, whatever a reload
/// swaps in meanwhile.
pub struct Read<T: 'static> {
    set: Arc<Configured>,
    part: fn(&Configured) -> &T,
}

impl<T> std::ops::Deref for Read<T> {
    type Target = T;

    fn deref(&self) -> &T {
        (self.part)(&self.set)
    }
}

impl Engine {
    /// An engine over `storage` for a team with these settings, its providers' models by name, and
    /// the secrets to redact from every tool result.
    pub fn new(
        storage: Arc<dyn Storage>,
        team: TeamConfig,
        models: HashMap<String, Arc<dyn Model>>,
        redactor: Redactor,
    ) -> Engine {
        let fitter = Fitter::new(storage.clone(), team.retry, team.prices.clone());
        let ledger = Arc::new(Ledger::new(Arc::new(UtcDays)));
        let configured = RwLock::new(Arc::new(Configured { team, models, redactor }));
        Engine { storage, fitter, configured, ledger }
    }

    /// This engine, its budgets' days read by `calendar` (`[scheduler] tz`) rather than in UTC.
    pub fn with_calendar(self, calendar: Arc<dyn Calendar>) -> Engine {
        Engine { ledger: Arc::new(Ledger::new(calendar)), ..self }
    }

    /// Puts a new configured set in place: every later read (a turn starting, a task's run, the
    /// fitter's next retry schedule and prices) gets it; what holds the old one keeps it.
    pub fn reconfigure(&self, configured: Configured) {
        self.fitter.set_policies(configured.team.retry, configured.team.prices.clone());
        *self.configured.write() = Arc::new(configured);
    }

    /// The configured set as it is now.
    pub fn configured(&self) -> Arc<Configured> {
        self.configured.read().clone()
    }

    /// What the tasks spent, by task and by day: what the budgets are held against.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// The budgets' check of `role`'s requests in `task_id`, whose own budget is `budget` (its
    /// record's, read when its run began: it changes only while the task is stopped).
    pub fn gate(&self, task_id: &str, role: &Role, budget: Option<Budget>) -> Gate {
        let team = self.team();
        Gate {
            storage: self.storage.clone(),
            ledger: self.ledger.clone(),
            prices: team.prices.clone(),
            task_budget: team.budgets.for_task(budget),
            day_budget: team.budgets.day,
            task_id: task_id.to_string(),
            role: role.clone(),
        }
    }

    /// Where the engine keeps everything.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    /// The fitter every request passes through.
    pub fn fitter(&self) -> &Fitter {
        &self.fitter
    }

    /// The team's settings, as configured now.
    pub fn team(&self) -> Read<TeamConfig> {
        Read { set: self.configured(), part: |c| &c.team }
    }

    /// The model of the provider named `provider`, if one is configured.
    pub fn model(&self, provider: &str) -> Option<Arc<dyn Model>> {
        self.configured.read().models.get(provider).cloned()
    }

    /// The redactor of the providers' keys and the configured secrets.
    pub fn redactor(&self) -> Read<Redactor> {
        Read { set: self.configured(), part: |c| &c.redactor }
    }
}

/// The effective `compact_at` of a role: pair-specific setting, then role setting, then config, then 80.
pub fn effective_compact_at(
    engine: &Engine,
    role: &Role,
    server: &str,
    model: &str,
) -> Result<u8, StorageError> {
    let on_pair = engine.storage.get(&CompactAtOn { role, server, model })?;
    let set = match on_pair.filter(|v| (1..=100).contains(v)) {
        Some(v) => Some(v),
        None => engine.storage.get(&CompactAt { role })?,
    };
    if let Some(v) = set.filter(|v| (1..=100).contains(v)) {
        return Ok(v as u8);
    }
    Ok(engine.team().role(role).and_then(|r| r.compact_at).unwrap_or(DEFAULT_COMPACT_AT))
}

/// One task's context, shared by its agents: its id, its workspace, its cancellation, its tool
/// servers and the engine.
pub struct TaskCtx {
    /// The task's id.
    pub task_id: String,
    /// The task's workspace, opened once; every tool call is confined to it.
    pub workspace: Workspace,
    /// Fires when the task is cancelled (or the daemon shuts down): every model request, wait and tool call
    /// of the task stops.
    pub cancel: CancellationToken,
    /// What every task of the engine shares.
    pub engine: Arc<Engine>,
    /// The task's tool servers (MCP): started when a role that gets their tools first needs them,
    /// closed when the task's run ends.
    pub servers: Arc<dyn ToolServers>,
    /// The task's own budget, as its record held it when the run began (`task.resume` changes it
    /// only while the task is stopped, and a run reads it afresh).
    pub budget: Option<Budget>,
    /// The run's workspace checkpoints (`crate::checkpoints`): what its snapshotter knows, and the
    /// byte budget.
    pub checkpoints: Arc<crate::checkpoints::Checkpoints>,
    /// Where the run's working copies are made (`[tools] copies` when it began: a reload meanwhile
    /// does not move the copies of branches in flight).
    pub copies: std::path::PathBuf,
    /// Compactions the user asked for while the task runs, by role: each made before the role's next
    /// request, or when the run ends if the role makes none.
    requested: Mutex<BTreeMap<Role, Requested>>,
    /// The tools its client approves calls of, and the calls waiting for an answer.
    pub permissions: crate::permissions::Permissions,
}

impl TaskCtx {
    /// A task's context, its team not formed yet: [`launch`] forms it once the agents are started.
    /// Its budget is read from its record here, once for the run.
    pub fn new(
        task_id: String,
        workspace: Workspace,
        cancel: CancellationToken,
        engine: Arc<Engine>,
        servers: Arc<dyn ToolServers>,
    ) -> Result<TaskCtx, StorageError> {
        let meta = engine.storage.task(&task_id)?;
        let (budget, ask) = meta.map_or((None, Vec::new()), |m| (m.budget, m.ask));
        let (max_bytes, secrets) = (engine.team().checkpoint_bytes, engine.redactor().clone());
        let checkpoints = Arc::new(crate::checkpoints::Checkpoints::new(max_bytes, secrets));
        let copies = engine.team().copies.clone();
        Ok(TaskCtx {
            task_id,
            workspace,
            cancel,
            engine,
            servers,
            budget,
            checkpoints,
            copies,
            requested: Mutex::default(),
            permissions: crate::permissions::Permissions::new(ask),
        })
    }

    /// Asks for a compaction of `role`'s history, made before its next request (a later ask for the
    /// same role replaces the focus of one not made yet).
    pub fn request_compaction(&self, role: Role, requested: Requested) {
        self.requested.lock().insert(role, requested);
    }

    /// The compaction asked for `role`, if any, taken: it is made now.
    pub fn take_requested(&self, role: &Role) -> Option<Requested> {
        self.requested.lock().remove(role)
    }

    /// Every compaction asked for and not made yet, taken.
    pub fn take_all_requested(&self) -> Vec<(Role, Requested)> {
        std::mem::take(&mut *self.requested.lock()).into_iter().collect()
    }

    /// Who the lead may delegate to: the coder and the configured specialists.
    pub fn delegates(&self) -> Vec<Role> {
        self.engine.team().roles().filter(|r| *r != Role::Lead).collect()
    }

    /// The model of the provider named `provider`, or a [`TurnError::UnknownProvider`] naming it when none is
    /// configured.
    pub fn model(&self, provider: &str) -> Result<Arc<dyn Model>, TurnError> {
        self.engine.model(provider).ok_or_else(|| TurnError::UnknownProvider(provider.to_string()))
    }

    /// The system prompt of `role` in this task: the role's own, the workspace, the teammates the lead may
    /// delegate to, and the configuration's `prompt`.
    pub fn system_prompt(&self, role: &Role, workspace: &Workspace) -> String {
        let team = self.engine.team();
        let custom = team.role(role).and_then(|r| r.prompt.as_deref());
        let delegates = if *role == Role::Lead { self.delegates() } else { Vec::new() };
        let mut prompt = agentd_agents::prompts::system_prompt(role, custom, workspace.root(), &delegates);
        if *role == Role::Lead {
            prompt.push_str(&self.parallel_note(&delegates));
        }
        prompt
    }

    /// What the lead is told of running teammates at once, when a role of the team can run more than
    /// once (`max_instances`); nothing otherwise, so a plain team's prompt stays as it was.
    fn parallel_note(&self, delegates: &[Role]) -> String {
        let several: Vec<String> = delegates
            .iter()
            .filter_map(|r| self.engine.team().role(r).map(|c| (r, c.instances())))
            .filter(|(_, n)| *n > 1)
            .map(|(r, n)| format!("{r} up to {n} ({r}, {})", r.instance(2)))
            .collect();
        if several.is_empty() {
            return String::new();
        }
        format!(
            "\n\nSeveral delegate calls in one answer run at once, each teammate on its own part; their \
             results come back in call order. More than one agent of a role can run at once: {}. Writers \
             that run at once each work in a copy of the workspace; their changes are merged back when \
             they return, and a file two of them changed in the same place is reported to you as a \
             conflict to settle.",
            several.join("; ")
        )
    }

    /// Records a state change of the running task (`running` ⇄ `waiting_retry`).
    pub fn set_state(&self, state: TaskState) -> Result<(), StorageError> {
        self.engine.storage.update_task(&self.task_id, &mut |t| {
            // Never overwrite an end state or a shutdown's `interrupted`.
            if t.state.is_active() {
                t.state = state;
                t.updated_at = now_rfc3339();
            }
        })
    }

    /// The settings a turn of `role` starts with.
    pub fn snapshot(&self, role: &Role) -> Result<TurnSettings, TurnError> {
        let team = self.engine.team();
        let rc = team.role(role).ok_or_else(|| TurnError::UnknownRole(role.clone()))?;
        let server = self.model(&rc.provider)?.server().to_string();
        let compact_at = effective_compact_at(&self.engine, role, &server, &rc.model)?;
        let mut tools = rc.tools.clone().unwrap_or_else(|| default_tools(role));
        // With memory turned off, `remember` is not offered at all (it would only be refused).
        if !self.engine.team().blocks.memory {
            tools.retain(|t| *t != ToolName::Remember);
        }
        // Every role can end its turn, whatever its `tools` list: one without `finish` would call it
        // and be refused for ever.
        if !tools.contains(&ToolName::Finish) {
            tools.push(ToolName::Finish);
        }
        Ok(TurnSettings {
            provider: rc.provider.clone(),
            server,
            model: rc.model.clone(),
            compact_at,
            command_timeout_s: team.command_timeout.as_secs().max(1),
            verify: rc.verify.clone(),
            tools,
            thinking_budget: rc.thinking_budget,
            max_output_tokens: rc.max_output_tokens,
        })
    }
}
