//! The team's settings: what each role runs with (its provider, model, trigger, tools …) and what
//! every turn of the team shares (the command timeout, the sandbox, retries, the idle thinking
//! cleanup). The daemon reads them from its configuration file; the engine only reads them.

use crate::blocks::BlocksConfig;
use agentd_agents::tools::SandboxPolicy;
use agentd_policies::retry::RetryPolicy;
use agentd_protocol::{Role, Tokens, ToolName};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// One role's table (`[team.lead]`, `[team.coder]`, `[team.specialists.NAME]`).
#[derive(Debug, Clone, PartialEq)]
pub struct RoleConfig {
    /// The name of the provider (a `[providers.NAME]` table) the role's requests go to.
    pub provider: String,
    /// The model to ask, as the provider names it.
    pub model: String,
    /// The compaction trigger as a percentage of the window (1–100); `None` for the default, 80. A
    /// `settings.set` wins over it.
    pub compact_at: Option<u8>,
    /// The coder's check (`verify = "cargo test"`): its `finish` is rejected while this command fails. Only
    /// the coder takes it.
    pub verify: Option<String>,
    /// More instructions for the role's system prompt: a specialist's own prompt, appended as "Additional
    /// instructions" for the lead and the coder.
    pub prompt: Option<String>,
    /// A specialist's tools; `None` for the default, read-only tools plus `finish`. Only specialists take a
    /// list (the lead's and coder's are fixed), and never `delegate`.
    pub tools: Option<Vec<ToolName>>,
    /// Extended thinking's token budget (at least 1024). Accepted for any provider, sent only to
    /// Anthropic: the OpenAI wire has no such field.
    pub thinking_budget: Option<u32>,
    /// The most tokens an answer may take (`max_tokens` on the wire); the trigger is lowered so it fits.
    pub max_output_tokens: Option<u32>,
    /// The model that summarises this role's compactions (`compaction = { provider, model }`); `None`:
    /// the role's own.
    pub summariser: Option<Summariser>,
    /// How many agents of this role one task may run at once (`max_instances`, default 1): a lead's
    /// answer with two `delegate` calls to the coder runs `coder` and `coder#2` side by side when
    /// this is 2 or more, one after the other when it is 1. The lead is always one.
    pub max_instances: u16,
    /// A delegation to this role stops once its requests have used this many tokens
    /// (`delegation_budget_tokens`), unless the `delegate` call names its own `budget_tokens`.
    pub delegation_budget_tokens: Option<u64>,
    /// A delegation to this role stops once it has run this long (`delegation_deadline`), unless the
    /// `delegate` call names its own `deadline`.
    pub delegation_deadline: Option<std::time::Duration>,
}

impl RoleConfig {
    /// How many agents of the role a task may run at once: `max_instances`, never fewer than one.
    pub fn instances(&self) -> u16 {
        self.max_instances.max(1)
    }
}

/// A role's summariser: a (cheaper) model its compactions' summary requests go to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summariser {
    /// The provider (a `[providers.NAME]` table).
    pub provider: String,
    /// The model, as the provider names it.
    pub model: String,
}

/// The settings of a whole team (`[team]`, `[tools]`, `[retry]`, `[thinking]` of the daemon's
/// configuration).
#[derive(Debug, Clone, PartialEq)]
pub struct TeamConfig {
    /// The lead's settings (`[team.lead]`).
    pub lead: RoleConfig,
    /// The coder's settings (`[team.coder]`).
    pub coder: RoleConfig,
    /// Keyed by name: every key is a `Role::Specialist`.
    pub specialists: BTreeMap<String, RoleConfig>,
    /// How long `run_command` (and `verify`) may run when the call names no timeout (`tools.command_timeout`,
    /// default 120 s).
    pub command_timeout: Duration,
    /// `[tools.sandbox]`, with the home as the path commands must not reach.
    pub sandbox: SandboxPolicy,
    /// How each kind of failed model request is retried (`[retry]`).
    pub retry: RetryPolicy,
    /// A new user request after this long since an agent's last answer clears its old thinking.
    pub idle_thinking_cleanup_after: Duration,
    /// A thinking cleanup that would free fewer tokens than this is skipped.
    pub idle_thinking_clear_at_least: Tokens,
    /// The blocks every request starts with: the project's instructions and the memory notes
    /// (`[instructions]`, `[memory]`).
    pub blocks: Arc<BlocksConfig>,
    /// Each model's prices (`[prices."MODEL"]`), by the model's name: what gives a response and a
    /// compaction their cost.
    pub prices: Arc<BTreeMap<String, agentd_policies::cost::Price>>,
    /// The budgets every task is held to (`[budgets]`).
    pub budgets: crate::spending::Budgets,
    /// When an agent counts as going in circles (`[team.stall]`).
    pub stall: agentd_policies::stall::StallPolicy,
    /// The folder working copies are made in (`tools.copies`): one folder per task beneath it, one
    /// working copy per parallel writer, removed once its changes are merged back.
    pub copies: std::path::PathBuf,
    /// `[checkpoints] max_bytes`: the file bytes one task's workspace checkpoints keep (past it a file
    /// is recorded by its sha256 alone); 0 turns checkpoints off.
    pub checkpoint_bytes: u64,
    /// `[telemetry] include_content`: the traces carry a request's newest message and its answer, a
    /// call's arguments and result — bounded and redacted. Off by default: sizes and ids only.
    pub trace_content: bool,
}

impl TeamConfig {
    /// The settings of a role: the lead, the coder or a configured specialist.
    pub fn role(&self, role: &Role) -> Option<&RoleConfig> {
        let config = match role.base() {
            Role::Lead => Some(&self.lead),
            Role::Coder => Some(&self.coder),
            Role::Specialist(name) => self.specialists.get(name),
            Role::Instance(_) => None,
        }?;
        // An instance exists only up to its role's `max_instances`.
        (role.number() <= config.instances()).then_some(config)
    }

    /// Every agent a task of this team may have: each role, then each instance its `max_instances`
    /// allows (`coder#2` …).
    pub fn agents(&self) -> impl Iterator<Item = Role> + '_ {
        self.roles().flat_map(move |role| {
            let max = self.role(&role).map_or(1, RoleConfig::instances);
            (1..=max).map(move |n| role.instance(n))
        })
    }

    /// Whether `role`'s agents can change the workspace: its tools include `write_file`, `edit_file`
    /// or `run_command`. Two such teammates running at once each get a working copy of their own.
    pub fn writes(&self, role: &Role) -> bool {
        match self.role(role).and_then(|r| r.tools.as_ref()) {
            Some(tools) => tools.iter().any(ToolName::writes),
            None => agentd_agents::roles::default_tools(role).iter().any(ToolName::writes),
        }
    }

    /// Every role of the team: the lead, the coder, then the specialists by name.
    pub fn roles(&self) -> impl Iterator<Item = Role> + '_ {
        [Role::Lead, Role::Coder]
            .into_iter()
            .chain(self.specialists.keys().map(|n| Role::Specialist(n.clone())))
    }
}
