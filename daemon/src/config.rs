//! `agentd.toml`: the daemon's configuration, parsed strictly. Unknown keys and bad values are errors
//! that name the key and the file. The context window is deliberately absent: it is measured.

pub use crate::schedule::{Schedule, Zone};
use agentd_agents::roles::ALL_TOOLS;
use agentd_agents::tools::{SandboxMode, SandboxPolicy};
use agentd_engine::team::{RoleConfig, TeamConfig};
use agentd_policies::retry::RetryPolicy;
use agentd_protocol::{Role, ToolName};
use agentd_providers::Deadlines;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why `agentd.toml` was not accepted. Each variant names the file; a bad value names its key too
/// (`team.lead.compact_at`).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The configuration file.
        path: PathBuf,
        /// Why it could not be read.
        source: std::io::Error,
    },
    /// The file is not TOML of the expected shape (a syntax error, an unknown key, a wrong type).
    #[error("{path}: {message}")]
    Parse {
        /// The configuration file.
        path: PathBuf,
        /// The TOML parser's message, on one line.
        message: String,
    },
    /// A key has a value agentd does not accept.
    #[error("{path}: key `{key}`: {message}")]
    Invalid {
        /// The configuration file.
        path: PathBuf,
        /// The key, dotted (`providers.local.base_url`).
        key: String,
        /// What is wrong with its value.
        message: String,
    },
    /// A provider's `api_key_env` names a variable the daemon's environment does not set (or sets
    /// empty): every request would fail authentication, so `serve` refuses to start.
    #[error(
        "{path}: key `providers.{provider}.api_key_env`: provider {provider:?} takes its API key from \
         the environment variable {var}, which is not set (or empty) for agentd serve; export {var} \
         before starting the daemon, or remove api_key_env if the server needs no key"
    )]
    UnsetKey {
        /// The config file.
        path: PathBuf,
        /// The provider's name (`[providers.NAME]`).
        provider: String,
        /// The variable it names.
        var: String,
    },
}

/// The text `agentd init` writes: every key commented, so a user sees what exists.
pub const DEFAULT_CONFIG: &str = r#"# agentd configuration. The context window is never set here: agentd probes it from the provider,
# learns it from a refusal's stated limit and corrects it from usage reports.

[providers.local]
kind = "openai"                     # openai | ollama | anthropic (openai: vLLM, llama.cpp, Ollama …)
base_url = "http://127.0.0.1:8000/v1"
# api_key_env = "OPENAI_API_KEY"    # optional: the name of an environment variable holding the key

[team.lead]
provider = "local"
model = "qwen3-coder"
# compact_at = 80                   # percent of the window at which a request is rebuilt
# max_output_tokens = 4096          # optional: the most an answer may take; the trigger makes room for it
# thinking_budget = 4096            # optional, >= 1024: extended thinking tokens (sent only to anthropic)

[team.coder]
provider = "local"
model = "qwen3-coder"
# verify = "cargo test"             # optional: the coder's finish is rejected while this command fails

# [team.specialists.reviewer]
# provider = "local"
# model = "qwen3-coder"
# prompt = "You review diffs for correctness."
# tools = ["read_file", "list_dir", "search"]

# [scheduler]
# idle_thinking_cleanup_after = "1h"   # a new request after this much idleness clears old thinking
# idle_thinking_clear_at_least = 512   # tokens: a cleanup that would free fewer is skipped (it would
#                                      # throw the provider's prompt cache away for little)
# tz = "UTC"                           # the zone of the cron expressions: UTC, +02:00, or local ($TZ)
# [[scheduler.jobs]]
# name = "verify-evidence"
# cron = "0 3 * * *"                   # min hour day month weekday (or 6 fields, seconds first)
# action = "evidence.verify"           # or "logs.export"

# [retry]
# rate_limit = { attempts = 10, delay = "60s" }     # Retry-After wins when the server sends it
# stream_anomaly = { attempts = 2, delay = "2s" }   # incremental: 2s, then 4s
# server_error = { attempts = 3, delay = "2s" }     # exponential: 2s, 4s, 8s
# overloaded = { attempts = 5, delay = "5s" }       # 529: incremental 5s, 10s, … (Retry-After wins)

# [secrets]
# env = ["GITHUB_TOKEN"]  # variables whose values are redacted from every tool result (provider keys always are)

# [requests]
# idle_timeout = "60s"    # a stream with no event for this long is cut (comments/keep-alives are not events)
# timeout = "10m"         # a whole model request, from sending to the last event

# The dashboard and HTTP API (off unless listen is set, or `agentd serve --http ADDR`). Every request
# needs the token in <home>/http.token; `agentd dashboard` prints the URL that logs a browser in.
# [http]
# listen = "127.0.0.1:7878"         # a port alone means 127.0.0.1; another address must be named

[tools]
command_timeout = "120s"

# The kernel sandbox of run_command and `verify` (Landlock, plus network and mount namespaces and no
# capabilities where the daemon may make them). Commands write only beneath the workspace and a
# temp dir of their own ($TMPDIR, also $HOME, removed after the call), read the system's
# directories, never see the daemon's home, and get only PATH LANG LC_ALL TERM TZ USER from its
# environment. On a kernel without Landlock, commands are refused unless mode = "off".
# [tools.sandbox]
# mode = "workspace-write"          # workspace-write | read-only (the workspace too) | off (no sandbox)
# network = false                   # true: allow TCP (and keep the daemon's network namespace)
# env = ["CARGO_HOME"]              # more variables passed through; never a provider's api_key_env
# read = ["/root/.cargo"]           # more paths commands may read (absolute)

# MCP servers whose tools the roles get, each named to the model as mcp__SERVER__TOOL. A stdio server
# is started for a task when one of its roles first needs it (in the task's workspace, in the sandbox
# above, with only the env names below passed from the daemon's environment) and stopped when the
# task ends; a crashed one is restarted at its next use, after a backoff.
# [mcp.servers.git]
# command = "mcp-server-git"        # a stdio server: the program, found on PATH
# args = ["--repository", "."]
# env = ["GIT_AUTHOR_NAME"]         # variables passed through (never a provider's api_key_env)
# roles = ["coder"]                 # who sees its tools (default: the coder)
# tools = ["git_status", "git_diff"] # only these of its tools (default: all)
# timeout = "60s"                   # one tool call, from sending to its result
# network = true                    # override [tools.sandbox] network for this server
# [mcp.servers.docs]
# url = "http://127.0.0.1:8931/mcp" # a streamable HTTP server
# bearer_env = "DOCS_TOKEN"         # optional: sent as `Authorization: Bearer …`, redacted like a secret
# roles = ["lead", "coder"]
"#;

/// The smallest extended-thinking budget Anthropic accepts.
pub const MIN_THINKING_BUDGET: i64 = 1024;

/// Defined with the wire formats, where the kind names are parsed.
pub use agentd_providers::ProviderKind;

/// One `[providers.NAME]` table: a server the roles' requests go to.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderConfig {
    /// The provider's name, the `NAME` in `[providers.NAME]`, which roles name as their `provider`.
    pub name: String,
    /// Which wire format the server speaks (`kind`: `openai`, `ollama` or `anthropic`).
    pub kind: ProviderKind,
    /// The server's base URL (`http://` or `https://`, a trailing `/` removed), such as
    /// `http://127.0.0.1:8000/v1`. Windows, calibrations and `compact_at` are remembered per base URL and
    /// model.
    pub base_url: String,
    /// The name of the environment variable that holds the API key, if the server needs one. The key itself
    /// never goes in the file, and its value is redacted from every tool result.
    pub api_key_env: Option<String>,
}

/// The daemon's configuration, read from `<home>/agentd.toml` and validated as a whole: every role names a
/// configured provider, and every value is in range.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The file it was read from (in error messages).
    pub path: PathBuf,
    /// The providers, by name.
    pub providers: BTreeMap<String, ProviderConfig>,
    /// The team's settings: the roles, the command timeout, the sandbox, retries, the idle
    /// thinking cleanup.
    pub team: TeamConfig,
    /// How long a model request may take, and how long its stream may go without an event.
    pub deadlines: Deadlines,
    /// Environment variables whose values are secrets: redacted from every tool result, like the
    /// providers' keys.
    pub secret_env: Vec<String>,
    /// The maintenance jobs of `[[scheduler.jobs]]`, in file order.
    pub jobs: Vec<JobConfig>,
    /// `[scheduler] tz`: the zone the jobs' cron expressions are read in (UTC unless set).
    pub tz: Zone,
    /// `[http] listen`: where the dashboard and HTTP API listen; `None` (the default) serves none.
    pub http_listen: Option<SocketAddr>,
    /// `[mcp.servers.NAME]`, by name.
    pub mcp: BTreeMap<String, McpServerConfig>,
}

/// Reads an HTTP listen address: `PORT` (on 127.0.0.1), `IP:PORT` or `[IPv6]:PORT`. Only an address
/// the user names is ever off loopback; a host name is refused, since what it resolves to could be.
pub fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    let text = text.trim();
    if let Ok(port) = text.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    text.parse::<SocketAddr>().map_err(|_| {
        format!("expected PORT, IP:PORT or [IPv6]:PORT (such as \"127.0.0.1:7878\"), got {text:?}")
    })
}

/// How long one MCP tool call may take, when `timeout` is not set.
pub const DEFAULT_MCP_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// How long an MCP server may take to start and answer `initialize` and `tools/list`.
pub const MCP_STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// One `[mcp.servers.NAME]` table: an MCP server whose tools some roles get.
///
/// Its tools reach a model as `mcp__NAME__TOOL` ([`agentd_protocol::McpTool`]); the runtime's
/// `mcp` module starts the server, lists and calls its tools.
#[derive(Debug, Clone, PartialEq)]
pub struct McpServerConfig {
    /// The table's name: the `SERVER` of `mcp__SERVER__TOOL` (checked by
    /// [`McpTool::valid_server`](agentd_protocol::McpTool::valid_server)).
    pub name: String,
    /// How agentd reaches it.
    pub transport: McpTransport,
    /// The roles that get its tools (`roles`; default: the coder). Every one is in the team.
    pub roles: Vec<Role>,
    /// Only these of its tools, by the server's names (`tools`); `None`: every tool it lists.
    pub tools: Option<Vec<String>>,
    /// How long one tool call may take (`timeout`, default [`DEFAULT_MCP_CALL_TIMEOUT`]); past it the
    /// call is cancelled and the model gets an error.
    pub call_timeout: Duration,
}

impl McpServerConfig {
    /// Whether `role` gets this server's tools.
    pub fn serves(&self, role: &Role) -> bool {
        self.roles.contains(role)
    }

    /// Whether the server's tool named `tool` is offered (the `tools` filter).
    pub fn offers(&self, tool: &str) -> bool {
        self.tools.as_ref().is_none_or(|only| only.iter().any(|t| t == tool))
    }
}

/// How agentd talks to an MCP server.
#[derive(Debug, Clone, PartialEq)]
pub enum McpTransport {
    /// A program agentd starts for each task that uses it, speaking MCP over its stdin and stdout.
    Stdio {
        /// The program (`command`), looked up on `PATH` unless it is a path.
        command: String,
        /// Its arguments (`args`).
        args: Vec<String>,
        /// Names of the daemon's environment variables it gets besides the sandbox's allowlist
        /// (`env`). Never a provider's `api_key_env`.
        env: Vec<String>,
        /// `network`: overrides `[tools.sandbox] network` for this server.
        network: Option<bool>,
    },
    /// A server already running, spoken to by streamable HTTP.
    Http {
        /// The endpoint (`url`, `http://` or `https://`).
        url: String,
        /// The variable holding a bearer token (`bearer_env`), sent as `Authorization: Bearer …`.
        /// Its value is redacted from every tool result, like `[secrets] env`.
        bearer_env: Option<String>,
    },
}

/// A maintenance job the scheduler runs on a cron schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct JobConfig {
    /// The job's name (`name`), unique, which `daemon.status` shows.
    pub name: String,
    /// The expression as written (5 fields: min hour day month weekday, or 6 with seconds first).
    pub cron: String,
    /// The expression, read in `[scheduler] tz` (see [`crate::schedule`]).
    pub schedule: Schedule,
    /// What the job runs (`action`: `evidence.verify` or `logs.export`).
    pub action: JobAction,
}

pub use agentd_protocol::rpc::JobAction;

impl Config {
    /// The provider a role's configuration names. Every role's provider exists (the configuration is
    /// validated when it is loaded), so this does not fail for a role of this configuration.
    pub fn provider_of(&self, role: &RoleConfig) -> &ProviderConfig {
        // Validated at load: every role names a configured provider.
        &self.providers[&role.provider]
    }

    /// Checks that every provider's `api_key_env` names a variable `var` finds set and not empty
    /// (`var` is `std::env::var_os` for the daemon; a parameter so tests need not touch the
    /// process's environment). The first provider without its key is the error, naming the
    /// provider and the variable.
    pub fn check_keys(&self, var: impl Fn(&str) -> Option<std::ffi::OsString>) -> Result<(), ConfigError> {
        for p in self.providers.values() {
            let Some(name) = &p.api_key_env else { continue };
            if var(name).is_none_or(|v| v.is_empty()) {
                return Err(ConfigError::UnsetKey {
                    path: self.path.clone(),
                    provider: p.name.clone(),
                    var: name.clone(),
                });
            }
        }
        Ok(())
    }

    /// Reads and validates the configuration file at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        Config::parse(&text, path)
    }

    /// Parses and validates `text` as a configuration; `path` is only named in errors (and its directory is
    /// the home the sandbox keeps out of commands' reach).
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().replace('\n', " | "),
        })?;
        raw.validate(path)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    providers: BTreeMap<String, RawProvider>,
    team: RawTeam,
    #[serde(default)]
    retry: RawRetry,
    #[serde(default)]
    scheduler: Option<RawScheduler>,
    #[serde(default)]
    tools: RawTools,
    #[serde(default)]
    requests: RawRequests,
    #[serde(default)]
    secrets: RawSecrets,
    #[serde(default)]
    http: RawHttp,
    #[serde(default)]
    mcp: RawMcp,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawHttp {
    listen: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawMcp {
    #[serde(default)]
    servers: BTreeMap<String, RawMcpServer>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMcpServer {
    command: Option<String>,
    args: Option<Vec<String>>,
    env: Option<Vec<String>>,
    network: Option<bool>,
    url: Option<String>,
    bearer_env: Option<String>,
    roles: Option<Vec<Role>>,
    tools: Option<Vec<String>>,
    timeout: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawSecrets {
    #[serde(default)]
    env: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProvider {
    kind: String,
    base_url: String,
    api_key_env: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTeam {
    lead: RawRole,
    coder: RawRole,
    #[serde(default)]
    specialists: BTreeMap<String, RawRole>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRole {
    provider: String,
    model: String,
    compact_at: Option<i64>,
    verify: Option<String>,
    prompt: Option<String>,
    tools: Option<Vec<ToolName>>,
    thinking_budget: Option<i64>,
    max_output_tokens: Option<i64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawRetry {
    rate_limit: Option<RawSchedule>,
    stream_anomaly: Option<RawSchedule>,
    server_error: Option<RawSchedule>,
    overloaded: Option<RawSchedule>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawRequests {
    idle_timeout: Option<String>,
    timeout: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSchedule {
    attempts: Option<u32>,
    delay: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScheduler {
    idle_thinking_cleanup_after: Option<String>,
    idle_thinking_clear_at_least: Option<u64>,
    tz: Option<String>,
    #[serde(default)]
    jobs: Vec<RawJob>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJob {
    name: String,
    cron: String,
    action: String,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawTools {
    command_timeout: Option<String>,
    sandbox: Option<RawSandbox>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawSandbox {
    mode: Option<String>,
    network: Option<bool>,
    #[serde(default)]
    env: Vec<String>,
    #[serde(default)]
    read: Vec<PathBuf>,
}

impl RawConfig {
    fn validate(self, path: &Path) -> Result<Config, ConfigError> {
        let invalid =
            |key: String, message: String| ConfigError::Invalid { path: path.to_path_buf(), key, message };
        let mut retry = RetryPolicy::default();
        for (name, raw, slot) in [
            ("rate_limit", self.retry.rate_limit, &mut retry.rate_limit),
            ("stream_anomaly", self.retry.stream_anomaly, &mut retry.stream_anomaly),
            ("server_error", self.retry.server_error, &mut retry.server_error),
            ("overloaded", self.retry.overloaded, &mut retry.overloaded),
        ] {
            let Some(raw) = raw else { continue };
            if let Some(a) = raw.attempts {
                slot.attempts = a;
            }
            if let Some(d) = raw.delay {
                let delay = humantime::parse_duration(&d)
                    .map_err(|e| invalid(format!("retry.{name}.delay"), format!("{e}: {d:?}")))?;
                slot.delay_ms = delay.as_millis() as u64;
            }
        }
        let mut idle_thinking_cleanup_after = agentd_policies::thinking::DEFAULT_IDLE_THRESHOLD;
        let mut idle_thinking_clear_at_least = agentd_policies::thinking::DEFAULT_CLEAR_AT_LEAST;
        let mut jobs = Vec::new();
        let mut tz = Zone::Utc;
        if let Some(s) = self.scheduler {
            if let Some(v) = &s.tz {
                tz = Zone::parse(v).map_err(|e| invalid("scheduler.tz".into(), e))?;
            }
            if let Some(v) = s.idle_thinking_clear_at_least {
                idle_thinking_clear_at_least = agentd_policies::Tokens(v);
            }
            if let Some(v) = &s.idle_thinking_cleanup_after {
                idle_thinking_cleanup_after = humantime::parse_duration(v).map_err(|e| {
                    invalid("scheduler.idle_thinking_cleanup_after".into(), format!("{e}: {v:?}"))
                })?;
            }
            for (i, job) in s.jobs.into_iter().enumerate() {
                let key = format!("scheduler.jobs[{i}] ({:?})", job.name);
                if job.name.trim().is_empty() {
                    return Err(invalid(format!("scheduler.jobs[{i}].name"), "must not be empty".into()));
                }
                if jobs.iter().any(|j: &JobConfig| j.name == job.name) {
                    return Err(invalid(format!("{key}.name"), "two jobs share this name".into()));
                }
                let schedule = Schedule::parse(&job.cron, tz).map_err(|e| {
                    invalid(format!("{key}.cron"), format!("bad cron expression {:?}: {e}", job.cron))
                })?;
                let action = match JobAction::parse(&job.action) {
                    Some(action) => action,
                    None => {
                        let other = &job.action;
                        return Err(invalid(
                            format!("{key}.action"),
                            format!(
                                "unknown action {other:?}; expected \"evidence.verify\" or \"logs.export\""
                            ),
                        ));
                    }
                };
                jobs.push(JobConfig { name: job.name, cron: job.cron, schedule, action });
            }
        }
        let mut providers = BTreeMap::new();
        for (name, p) in self.providers {
            let Some(kind) = ProviderKind::parse(&p.kind) else {
                return Err(invalid(
                    format!("providers.{name}.kind"),
                    format!("unknown provider kind {:?}; expected {}", p.kind, ProviderKind::expected()),
                ));
            };
            if !(p.base_url.starts_with("http://") || p.base_url.starts_with("https://")) {
                return Err(invalid(
                    format!("providers.{name}.base_url"),
                    format!("must be an http:// or https:// URL, got {:?}", p.base_url),
                ));
            }
            providers.insert(
                name.clone(),
                ProviderConfig {
                    name,
                    kind,
                    base_url: p.base_url.trim_end_matches('/').to_string(),
                    api_key_env: p.api_key_env,
                },
            );
        }
        let role = |who: Role, r: RawRole| -> Result<RoleConfig, ConfigError> {
            let key = match &who {
                Role::Specialist(name) => format!("team.specialists.{name}"),
                fixed => format!("team.{fixed}"),
            };
            let is_specialist = !who.is_fixed();
            if !providers.contains_key(&r.provider) {
                return Err(invalid(
                    format!("{key}.provider"),
                    format!("no provider named {:?} in [providers]", r.provider),
                ));
            }
            if r.model.trim().is_empty() {
                return Err(invalid(format!("{key}.model"), "must not be empty".into()));
            }
            let compact_at = match r.compact_at {
                None => None,
                Some(v) if (1..=100).contains(&v) => Some(v as u8),
                Some(v) => {
                    return Err(invalid(
                        format!("{key}.compact_at"),
                        format!("must be a percentage from 1 to 100, got {v}"),
                    ))
                }
            };
            let thinking_budget = match r.thinking_budget {
                None => None,
                Some(v) if (MIN_THINKING_BUDGET..=i64::from(u32::MAX)).contains(&v) => Some(v as u32),
                Some(v) => {
                    return Err(invalid(
                        format!("{key}.thinking_budget"),
                        format!("must be a token count of at least {MIN_THINKING_BUDGET}, got {v}"),
                    ))
                }
            };
            let max_output_tokens = match r.max_output_tokens {
                None => None,
                Some(v) if (1..=i64::from(u32::MAX)).contains(&v) => Some(v as u32),
                Some(v) => {
                    return Err(invalid(
                        format!("{key}.max_output_tokens"),
                        format!("must be a positive token count, got {v}"),
                    ))
                }
            };
            if let Some(tools) = &r.tools {
                if !is_specialist {
                    return Err(invalid(
                        format!("{key}.tools"),
                        "only specialists take a tool list; the lead's and coder's are fixed".into(),
                    ));
                }
                for t in tools {
                    if !ALL_TOOLS.contains(t) || *t == ToolName::Delegate {
                        return Err(invalid(
                            format!("{key}.tools"),
                            format!("unknown tool {t:?} for a specialist"),
                        ));
                    }
                }
            }
            if r.verify.is_some() && who != Role::Coder {
                return Err(invalid(format!("{key}.verify"), "only the coder takes `verify`".into()));
            }
            Ok(RoleConfig {
                provider: r.provider,
                model: r.model,
                compact_at,
                verify: r.verify,
                prompt: r.prompt,
                tools: r.tools,
                thinking_budget,
                max_output_tokens,
            })
        };
        let lead = role(Role::Lead, self.team.lead)?;
        let coder = role(Role::Coder, self.team.coder)?;
        let mut specialists = BTreeMap::new();
        for (name, r) in self.team.specialists {
            if Role::parse(&name).is_fixed() {
                return Err(invalid(
                    format!("team.specialists.{name}"),
                    "a specialist may not be named lead or coder".into(),
                ));
            }
            let cfg = role(Role::Specialist(name.clone()), r)?;
            specialists.insert(name, cfg);
        }
        let command_timeout = match self.tools.command_timeout {
            None => Duration::from_secs(120),
            Some(v) => humantime::parse_duration(&v)
                .map_err(|e| invalid("tools.command_timeout".into(), format!("{e}: {v:?}")))?,
        };
        if command_timeout.is_zero() {
            return Err(invalid("tools.command_timeout".into(), "must be longer than 0s".into()));
        }
        let mut secret_env = Vec::new();
        for (i, name) in self.secrets.env.into_iter().enumerate() {
            let valid = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                return Err(invalid(
                    format!("secrets.env[{i}]"),
                    format!("{name:?} is not an environment variable name"),
                ));
            }
            secret_env.push(name);
        }
        let mut deadlines = Deadlines::default();
        for (key, value, slot) in [
            ("requests.idle_timeout", &self.requests.idle_timeout, &mut deadlines.idle),
            ("requests.timeout", &self.requests.timeout, &mut deadlines.total),
        ] {
            if let Some(v) = value {
                let d =
                    humantime::parse_duration(v).map_err(|e| invalid(key.into(), format!("{e}: {v:?}")))?;
                if d.is_zero() {
                    return Err(invalid(key.into(), "must be longer than 0s".into()));
                }
                *slot = d;
            }
        }
        if deadlines.idle > deadlines.total {
            return Err(invalid(
                "requests.idle_timeout".into(),
                format!("{:?} is longer than requests.timeout ({:?})", deadlines.idle, deadlines.total),
            ));
        }
        let sandbox = sandbox_policy(self.tools.sandbox.unwrap_or_default(), &providers, path, &invalid)?;
        let http_listen = match &self.http.listen {
            None => None,
            Some(text) => Some(parse_listen(text).map_err(|message| invalid("http.listen".into(), message))?),
        };
        let team: Vec<Role> = [Role::Lead, Role::Coder]
            .into_iter()
            .chain(specialists.keys().cloned().map(Role::Specialist))
            .collect();
        let mut mcp = BTreeMap::new();
        for (name, raw) in self.mcp.servers {
            let server = mcp_server(&name, raw, &providers, &team, &invalid)?;
            // A bearer token is a secret: redacted from every tool result.
            if let McpTransport::Http { bearer_env: Some(var), .. } = &server.transport {
                if !secret_env.contains(var) {
                    secret_env.push(var.clone());
                }
            }
            mcp.insert(name, server);
        }
        Ok(Config {
            path: path.to_path_buf(),
            providers,
            team: TeamConfig {
                lead,
                coder,
                specialists,
                command_timeout,
                sandbox,
                retry,
                idle_thinking_cleanup_after,
                idle_thinking_clear_at_least,
            },
            deadlines,
            secret_env,
            jobs,
            tz,
            http_listen,
            mcp,
        })
    }
}

fn is_env_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// One `[mcp.servers.NAME]` table, checked: errors name `mcp.servers.NAME.KEY`.
fn mcp_server(
    name: &str,
    raw: RawMcpServer,
    providers: &BTreeMap<String, ProviderConfig>,
    team: &[Role],
    invalid: &dyn Fn(String, String) -> ConfigError,
) -> Result<McpServerConfig, ConfigError> {
    let key = |k: &str| format!("mcp.servers.{name}.{k}");
    if !agentd_protocol::McpTool::valid_server(name) {
        return Err(invalid(
            format!("mcp.servers.{name}"),
            "a server name is ASCII letters, digits, `-` and `_`, without `__` and not ending with `_` \
             (its tools are named mcp__SERVER__TOOL)"
                .into(),
        ));
    }
    let provider_key = |var: &str| providers.values().find(|p| p.api_key_env.as_deref() == Some(var));
    let transport = match (raw.command, raw.url) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                key("url"),
                "a server has `command` (stdio) or `url` (HTTP), not both".into(),
            ))
        }
        (None, None) => {
            return Err(invalid(
                format!("mcp.servers.{name}"),
                "needs `command` (a stdio server) or `url` (a streamable HTTP server)".into(),
            ))
        }
        (Some(command), None) => {
            if command.trim().is_empty() {
                return Err(invalid(key("command"), "must not be empty".into()));
            }
            if raw.bearer_env.is_some() {
                return Err(invalid(
                    key("bearer_env"),
                    "only an HTTP server (`url`) takes a bearer token".into(),
                ));
            }
            let env = raw.env.unwrap_or_default();
            for var in &env {
                if !is_env_name(var) {
                    return Err(invalid(key("env"), format!("{var:?} is not an environment variable name")));
                }
                if matches!(var.as_str(), "HOME" | "TMPDIR") {
                    return Err(invalid(
                        key("env"),
                        format!("{var} is set by the sandbox (the server's temp dir)"),
                    ));
                }
                if let Some(p) = provider_key(var) {
                    return Err(invalid(
                        key("env"),
                        format!(
                            "{var:?} is the key of provider {:?} (providers.{}.api_key_env); provider keys never reach MCP servers",
                            p.name, p.name
                        ),
                    ));
                }
            }
            McpTransport::Stdio { command, args: raw.args.unwrap_or_default(), env, network: raw.network }
        }
        (None, Some(url)) => {
            for (k, set) in
                [("args", raw.args.is_some()), ("env", raw.env.is_some()), ("network", raw.network.is_some())]
            {
                if set {
                    return Err(invalid(key(k), "only a stdio server (`command`) takes this".into()));
                }
            }
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(invalid(key("url"), format!("must be an http:// or https:// URL, got {url:?}")));
            }
            if let Some(var) = &raw.bearer_env {
                if !is_env_name(var) {
                    return Err(invalid(
                        key("bearer_env"),
                        format!("{var:?} is not an environment variable name"),
                    ));
                }
                if let Some(p) = provider_key(var) {
                    return Err(invalid(
                        key("bearer_env"),
                        format!(
                            "{var:?} is the key of provider {:?} (providers.{}.api_key_env); provider keys never reach MCP servers",
                            p.name, p.name
                        ),
                    ));
                }
            }
            McpTransport::Http { url, bearer_env: raw.bearer_env }
        }
    };
    let roles = raw.roles.unwrap_or_else(|| vec![Role::Coder]);
    if roles.is_empty() {
        return Err(invalid(key("roles"), "must name at least one role".into()));
    }
    for role in &roles {
        if !team.contains(role) {
            let names: Vec<&str> = team.iter().map(Role::name).collect();
            return Err(invalid(
                key("roles"),
                format!("no role {:?} in the team; the team is {}", role.name(), names.join(", ")),
            ));
        }
    }
    if let Some(tools) = &raw.tools {
        if let Some(bad) = tools.iter().find(|t| agentd_protocol::McpTool::new(name, t).is_none()) {
            return Err(invalid(
                key("tools"),
                format!(
                    "{bad:?} cannot be offered as mcp__{name}__{bad}: a tool name is ASCII letters, digits, `_` and `-`, \
                     the whole at most {} bytes",
                    agentd_protocol::McpTool::MAX_LEN
                ),
            ));
        }
    }
    let call_timeout = match raw.timeout {
        None => DEFAULT_MCP_CALL_TIMEOUT,
        Some(v) => {
            let d =
                humantime::parse_duration(&v).map_err(|e| invalid(key("timeout"), format!("{e}: {v:?}")))?;
            if d.is_zero() {
                return Err(invalid(key("timeout"), "must be longer than 0s".into()));
            }
            d
        }
    };
    Ok(McpServerConfig { name: name.to_string(), transport, roles, tools: raw.tools, call_timeout })
}

fn sandbox_policy(
    raw: RawSandbox,
    providers: &BTreeMap<String, ProviderConfig>,
    path: &Path,
    invalid: &dyn Fn(String, String) -> ConfigError,
) -> Result<SandboxPolicy, ConfigError> {
    let mode = match raw.mode.as_deref() {
        None | Some("workspace-write") => SandboxMode::WorkspaceWrite,
        Some("read-only") => SandboxMode::ReadOnly,
        Some("off") => SandboxMode::Off,
        Some(other) => {
            return Err(invalid(
                "tools.sandbox.mode".into(),
                format!("unknown mode {other:?}; expected \"workspace-write\", \"read-only\" or \"off\""),
            ))
        }
    };
    for name in &raw.env {
        if name.is_empty() || name.contains('=') || name.contains('\0') {
            return Err(invalid("tools.sandbox.env".into(), format!("not a variable name: {name:?}")));
        }
        if matches!(name.as_str(), "HOME" | "TMPDIR") {
            return Err(invalid(
                "tools.sandbox.env".into(),
                format!("{name} is set by the sandbox (the command's temp dir)"),
            ));
        }
        if let Some(p) = providers.values().find(|p| p.api_key_env.as_deref() == Some(name.as_str())) {
            return Err(invalid(
                "tools.sandbox.env".into(),
                format!(
                    "{name:?} is the key of provider {:?} (providers.{}.api_key_env); provider keys never reach commands",
                    p.name, p.name
                ),
            ));
        }
    }
    for p in &raw.read {
        if !p.is_absolute() {
            return Err(invalid("tools.sandbox.read".into(), format!("must be an absolute path, got {p:?}")));
        }
    }
    let home = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok(SandboxPolicy {
        mode,
        network: raw.network.unwrap_or(false),
        env: raw.env,
        read: raw.read,
        protected: vec![home],
        ..SandboxPolicy::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("/h/agentd.toml"))
    }

    #[test]
    fn default_config_parses() {
        let c = parse(DEFAULT_CONFIG).unwrap();
        assert_eq!(c.team.lead.model, "qwen3-coder");
        assert_eq!(c.team.command_timeout, Duration::from_secs(120));
    }

    #[test]
    fn unknown_key_is_named_with_the_file() {
        let text = DEFAULT_CONFIG.replace("[tools]", "[tools]\ncolour = 1");
        let e = parse(&text).unwrap_err().to_string();
        assert!(e.contains("/h/agentd.toml"), "{e}");
        assert!(e.contains("colour"), "{e}");
    }

    #[test]
    fn bad_compact_at_is_named() {
        let text = DEFAULT_CONFIG.replace("# compact_at = 80", "compact_at = 180");
        let e = parse(&text).unwrap_err().to_string();
        assert!(e.contains("team.lead.compact_at"), "{e}");
    }

    #[test]
    fn unknown_provider_is_named() {
        let text = DEFAULT_CONFIG.replacen("provider = \"local\"", "provider = \"nope\"", 1);
        let e = parse(&text).unwrap_err().to_string();
        assert!(e.contains("team.lead.provider"), "{e}");
    }

    #[test]
    fn request_deadlines_parse_and_bad_ones_are_named() {
        let c = parse(DEFAULT_CONFIG).unwrap();
        assert_eq!(c.deadlines, Deadlines::default());
        assert_eq!(c.deadlines.idle, Duration::from_secs(60));
        assert_eq!(c.deadlines.total, Duration::from_secs(600));
        let text = format!("{DEFAULT_CONFIG}\n[requests]\nidle_timeout = \"5s\"\ntimeout = \"1m\"\n");
        let c = parse(&text).unwrap();
        assert_eq!((c.deadlines.idle, c.deadlines.total), (Duration::from_secs(5), Duration::from_secs(60)));
        for (bad, key) in [
            ("idle_timeout = \"soon\"", "requests.idle_timeout"),
            ("timeout = \"0s\"", "requests.timeout"),
            ("idle_timeout = \"20m\"", "requests.idle_timeout"),
            ("deadline = \"1s\"", "deadline"),
        ] {
            let text = format!("{DEFAULT_CONFIG}\n[requests]\n{bad}\n");
            let e = parse(&text).unwrap_err().to_string();
            assert!(e.contains(key), "{bad}: {e}");
        }
        let text = format!("{DEFAULT_CONFIG}\n[retry]\noverloaded = {{ attempts = 2, delay = \"1s\" }}\n");
        let c = parse(&text).unwrap();
        assert_eq!((c.team.retry.overloaded.attempts, c.team.retry.overloaded.delay_ms), (2, 1000));
    }

    #[test]
    fn retry_tables_parse_and_bad_delays_are_named() {
        let text = format!("{DEFAULT_CONFIG}\n[retry]\nrate_limit = {{ attempts = 3, delay = \"100ms\" }}\n");
        let c = parse(&text).unwrap();
        assert_eq!(c.team.retry.rate_limit.attempts, 3);
        assert_eq!(c.team.retry.rate_limit.delay_ms, 100);
        let bad = format!("{DEFAULT_CONFIG}\n[retry]\nstream_anomaly = {{ delay = \"often\" }}\n");
        let e = parse(&bad).unwrap_err().to_string();
        assert!(e.contains("retry.stream_anomaly.delay"), "{e}");
    }

    #[test]
    fn jobs_parse_and_bad_ones_are_named() {
        let ok = format!(
            "{DEFAULT_CONFIG}\n[scheduler]\nidle_thinking_cleanup_after = \"30m\"\n[[scheduler.jobs]]\nname = \"v\"\ncron = \"0 0 3 * * *\"\naction = \"evidence.verify\"\n"
        );
        let c = parse(&ok).unwrap();
        assert_eq!(c.jobs.len(), 1);
        assert_eq!(c.team.idle_thinking_cleanup_after, Duration::from_secs(1800));
        let bad_cron = ok.replace("0 0 3 * * *", "every night");
        let e = parse(&bad_cron).unwrap_err().to_string();
        assert!(e.contains("scheduler.jobs[0]") && e.contains("\"v\"") && e.contains("cron"), "{e}");
        let bad_action = ok.replace("evidence.verify", "coffee.make");
        let e = parse(&bad_action).unwrap_err().to_string();
        assert!(e.contains("action") && e.contains("coffee.make"), "{e}");
    }

    #[test]
    fn cron_takes_five_fields_and_the_zone_is_checked() {
        let c = parse(DEFAULT_CONFIG).unwrap();
        assert_eq!(c.tz, Zone::Utc);
        let ok = format!(
            "{DEFAULT_CONFIG}\n[scheduler]\ntz = \"+02:00\"\n[[scheduler.jobs]]\nname = \"v\"\ncron = \"30 3 * * MON-FRI\"\naction = \"logs.export\"\n"
        );
        let c = parse(&ok).unwrap();
        assert_eq!(c.tz, Zone::parse("+02:00").unwrap());
        assert_eq!(c.jobs[0].schedule.zone(), c.tz);
        assert_eq!(c.jobs[0].cron, "30 3 * * MON-FRI");
        let e = parse(&ok.replace("+02:00", "Mars/Olympus")).unwrap_err().to_string();
        assert!(
            e.contains("scheduler.tz") && e.contains("Mars/Olympus") && e.contains("/h/agentd.toml"),
            "{e}"
        );
        let e = parse(&ok.replace("30 3 * * MON-FRI", "30 3 * * 9")).unwrap_err().to_string();
        assert!(e.contains("scheduler.jobs[0]") && e.contains("\"9\""), "{e}");
    }

    #[test]
    fn bad_duration_is_named() {
        let text = DEFAULT_CONFIG.replace("\"120s\"", "\"soon\"");
        let e = parse(&text).unwrap_err().to_string();
        assert!(e.contains("tools.command_timeout"), "{e}");
    }

    #[test]
    fn anthropic_kind_parses_and_unknown_kinds_are_named() {
        let text = format!(
            "{DEFAULT_CONFIG}\n[providers.claude]\nkind = \"anthropic\"\nbase_url = \"https://api.anthropic.com/v1/\"\napi_key_env = \"ANTHROPIC_API_KEY\"\n"
        );
        let c = parse(&text).unwrap();
        let p = &c.providers["claude"];
        assert_eq!(p.kind, ProviderKind::Anthropic);
        assert_eq!(p.base_url, "https://api.anthropic.com/v1");
        assert_eq!(p.api_key_env.as_deref(), Some("ANTHROPIC_API_KEY"));
        let bad = DEFAULT_CONFIG.replace("kind = \"openai\"", "kind = \"gemini\"");
        let e = parse(&bad).unwrap_err().to_string();
        assert!(e.contains("providers.local.kind") && e.contains("gemini"), "{e}");
    }

    #[test]
    fn thinking_budget_parses_and_a_small_one_is_named() {
        let c = parse(DEFAULT_CONFIG).unwrap();
        assert_eq!(c.team.lead.thinking_budget, None);
        let text = DEFAULT_CONFIG.replace("# thinking_budget = 4096", "thinking_budget = 2048");
        let c = parse(&text).unwrap();
        assert_eq!(c.team.lead.thinking_budget, Some(2048));
        assert_eq!(c.team.coder.thinking_budget, None);
        for bad in ["1023", "0", "-5", "5000000000"] {
            let text =
                DEFAULT_CONFIG.replace("# thinking_budget = 4096", &format!("thinking_budget = {bad}"));
            let e = parse(&text).unwrap_err().to_string();
            assert!(e.contains("team.lead.thinking_budget") && e.contains(bad), "{e}");
        }
        let specialist = format!(
            "{DEFAULT_CONFIG}\n[team.specialists.rev]\nprovider = \"local\"\nmodel = \"m\"\nthinking_budget = 1024\n"
        );
        assert_eq!(parse(&specialist).unwrap().team.specialists["rev"].thinking_budget, Some(1024));
    }

    #[test]
    fn sandbox_defaults_parse_and_bad_values_are_named() {
        let c = parse(DEFAULT_CONFIG).unwrap();
        assert_eq!(c.team.sandbox.mode, SandboxMode::WorkspaceWrite);
        assert!(!c.team.sandbox.network);
        assert!(c.team.sandbox.env.is_empty());
        assert_eq!(c.team.sandbox.protected, vec![PathBuf::from("/h")]);
        let on = DEFAULT_CONFIG.replace(
            "# [tools.sandbox]\n# mode = \"workspace-write\"",
            "[tools.sandbox]\nmode = \"read-only\"\nnetwork = true\nenv = [\"CARGO_HOME\"]\nread = [\"/opt/x\"]\n# mode",
        );
        let c = parse(&on).unwrap();
        assert_eq!(c.team.sandbox.mode, SandboxMode::ReadOnly);
        assert!(c.team.sandbox.network);
        assert_eq!(c.team.sandbox.env, vec!["CARGO_HOME".to_string()]);
        assert_eq!(c.team.sandbox.read, vec![PathBuf::from("/opt/x")]);
        let text = |body: &str| format!("{DEFAULT_CONFIG}\n[tools.sandbox]\n{body}\n");
        let off = parse(&text("mode = \"off\"")).unwrap();
        assert_eq!(off.team.sandbox.mode, SandboxMode::Off);
        let e = parse(&text("mode = \"jail\"")).unwrap_err().to_string();
        assert!(
            e.contains("tools.sandbox.mode") && e.contains("jail") && e.contains("/h/agentd.toml"),
            "{e}"
        );
        let e = parse(&text("colour = 1")).unwrap_err().to_string();
        assert!(e.contains("colour"), "{e}");
        let e = parse(&text("read = [\"rel/path\"]")).unwrap_err().to_string();
        assert!(e.contains("tools.sandbox.read"), "{e}");
        let e = parse(&text("env = [\"HOME\"]")).unwrap_err().to_string();
        assert!(e.contains("tools.sandbox.env"), "{e}");
    }

    #[test]
    fn a_provider_key_in_the_sandbox_env_is_named_with_its_provider() {
        let text =
            DEFAULT_CONFIG.replace("# api_key_env = \"OPENAI_API_KEY\"", "api_key_env = \"OPENAI_API_KEY\"");
        let text = format!("{text}\n[tools.sandbox]\nenv = [\"LANGUAGE\", \"OPENAI_API_KEY\"]\n");
        let e = parse(&text).unwrap_err().to_string();
        assert!(e.contains("tools.sandbox.env"), "{e}");
        assert!(e.contains("OPENAI_API_KEY") && e.contains("providers.local.api_key_env"), "{e}");
    }

    const FIXTURE: &str = "[mcp.servers.fix]\ncommand = \"mcp-fixture\"\nargs = [\"stdio\"]\n";

    #[test]
    fn mcp_servers_parse_with_their_defaults() {
        let text = format!(
            "{DEFAULT_CONFIG}\n{FIXTURE}env = [\"GIT_AUTHOR_NAME\"]\ntools = [\"echo\"]\ntimeout = \"5s\"\n\
             [mcp.servers.docs]\nurl = \"http://127.0.0.1:9/mcp\"\nbearer_env = \"DOCS_TOKEN\"\nroles = [\"lead\", \"coder\"]\n"
        );
        let c = parse(&text).unwrap();
        let fix = &c.mcp["fix"];
        assert_eq!(
            fix.transport,
            McpTransport::Stdio {
                command: "mcp-fixture".into(),
                args: vec!["stdio".into()],
                env: vec!["GIT_AUTHOR_NAME".into()],
                network: None
            }
        );
        assert_eq!(fix.roles, [Role::Coder], "the coder by default");
        assert!(fix.serves(&Role::Coder) && !fix.serves(&Role::Lead));
        assert!(fix.offers("echo") && !fix.offers("crash"));
        assert_eq!(fix.call_timeout, Duration::from_secs(5));
        let docs = &c.mcp["docs"];
        assert_eq!(
            docs.transport,
            McpTransport::Http {
                url: "http://127.0.0.1:9/mcp".into(),
                bearer_env: Some("DOCS_TOKEN".into())
            }
        );
        assert!(docs.offers("anything"));
        assert_eq!(docs.call_timeout, DEFAULT_MCP_CALL_TIMEOUT);
        // A bearer token is redacted like a configured secret.
        assert!(c.secret_env.contains(&"DOCS_TOKEN".to_string()));
        assert!(parse(DEFAULT_CONFIG).unwrap().mcp.is_empty());
    }

    #[test]
    fn bad_mcp_servers_are_named_by_their_key() {
        let with_key =
            DEFAULT_CONFIG.replace("# api_key_env = \"OPENAI_API_KEY\"", "api_key_env = \"OPENAI_API_KEY\"");
        for (table, key, says) in [
            ("[mcp.servers.fix]\nargs = []\n", "mcp.servers.fix", "`command`"),
            ("[mcp.servers.fix]\ncommand = \"x\"\nurl = \"http://h/\"\n", "mcp.servers.fix.url", "not both"),
            ("[mcp.servers.fix]\ncommand = \" \"\n", "mcp.servers.fix.command", "empty"),
            ("[mcp.servers.a__b]\ncommand = \"x\"\n", "mcp.servers.a__b", "__"),
            (&format!("{FIXTURE}roles = [\"reviewer\"]\n"), "mcp.servers.fix.roles", "reviewer"),
            (&format!("{FIXTURE}roles = []\n"), "mcp.servers.fix.roles", "at least one"),
            (
                &format!("{FIXTURE}env = [\"OPENAI_API_KEY\"]\n"),
                "mcp.servers.fix.env",
                "providers.local.api_key_env",
            ),
            (&format!("{FIXTURE}env = [\"HOME\"]\n"), "mcp.servers.fix.env", "sandbox"),
            (&format!("{FIXTURE}env = [\"A=B\"]\n"), "mcp.servers.fix.env", "not an environment variable"),
            (&format!("{FIXTURE}bearer_env = \"T\"\n"), "mcp.servers.fix.bearer_env", "HTTP"),
            (&format!("{FIXTURE}timeout = \"soon\"\n"), "mcp.servers.fix.timeout", "soon"),
            (&format!("{FIXTURE}timeout = \"0s\"\n"), "mcp.servers.fix.timeout", "0s"),
            (&format!("{FIXTURE}tools = [\"log.oneline\"]\n"), "mcp.servers.fix.tools", "log.oneline"),
            (&format!("{FIXTURE}colour = 1\n"), "colour", "colour"),
            ("[mcp.servers.web]\nurl = \"ftp://h/\"\n", "mcp.servers.web.url", "ftp://"),
            ("[mcp.servers.web]\nurl = \"http://h/\"\nargs = [\"x\"]\n", "mcp.servers.web.args", "stdio"),
            (
                "[mcp.servers.web]\nurl = \"http://h/\"\nbearer_env = \"OPENAI_API_KEY\"\n",
                "mcp.servers.web.bearer_env",
                "provider keys",
            ),
        ] {
            let e = parse(&format!("{with_key}\n{table}")).unwrap_err().to_string();
            assert!(e.contains(key) && e.contains(says) && e.contains("/h/agentd.toml"), "{table}: {e}");
        }
        // A specialist named in `roles` exists once it is configured.
        let text = format!(
            "{DEFAULT_CONFIG}\n[team.specialists.reviewer]\nprovider = \"local\"\nmodel = \"m\"\n\n{FIXTURE}roles = [\"reviewer\"]\n"
        );
        assert_eq!(parse(&text).unwrap().mcp["fix"].roles, [Role::specialist("reviewer")]);
    }

    #[test]
    fn the_default_configs_mcp_example_parses_when_uncommented() {
        let start = DEFAULT_CONFIG.find("# [mcp.servers.git]").unwrap();
        let example: String = DEFAULT_CONFIG[start..]
            .lines()
            .map(|l| l.strip_prefix("# ").unwrap_or(l))
            .collect::<Vec<_>>()
            .join("\n");
        let c = parse(&format!("{}\n{example}\n", &DEFAULT_CONFIG[..start])).unwrap();
        assert_eq!(c.mcp.keys().collect::<Vec<_>>(), ["docs", "git"]);
    }

    #[test]
    fn an_unset_key_variable_names_the_provider_and_the_variable() {
        let text =
            DEFAULT_CONFIG.replace("# api_key_env = \"OPENAI_API_KEY\"", "api_key_env = \"OPENAI_API_KEY\"");
        let c = parse(&text).unwrap();
        let e = c.check_keys(|_| None).unwrap_err();
        assert!(
            matches!(&e, ConfigError::UnsetKey { provider, var, .. } if provider == "local" && var == "OPENAI_API_KEY")
        );
        let shown = e.to_string();
        assert!(shown.starts_with("/h/agentd.toml: key `providers.local.api_key_env`"), "{shown}");
        // Empty is as good as unset: the server would refuse it the same way.
        assert!(c.check_keys(|_| Some("".into())).is_err());
        assert!(c.check_keys(|v| (v == "OPENAI_API_KEY").then(|| "sk-1".into())).is_ok());
        // A provider without api_key_env needs nothing.
        assert!(parse(DEFAULT_CONFIG).unwrap().check_keys(|_| None).is_ok());
    }

    #[test]
    fn http_is_off_by_default_and_a_port_alone_is_loopback() {
        assert_eq!(parse(DEFAULT_CONFIG).unwrap().http_listen, None);
        let with = |listen: &str| parse(&format!("{DEFAULT_CONFIG}\n[http]\nlisten = \"{listen}\"\n"));
        assert_eq!(
            with("127.0.0.1:7878").unwrap().http_listen,
            Some(SocketAddr::from(([127, 0, 0, 1], 7878)))
        );
        assert_eq!(with("7878").unwrap().http_listen, Some(SocketAddr::from(([127, 0, 0, 1], 7878))));
        assert_eq!(with("[::1]:0").unwrap().http_listen.map(|a| a.ip().is_loopback()), Some(true));
        // Named explicitly, another address is the user's choice.
        assert_eq!(with("0.0.0.0:7878").unwrap().http_listen.map(|a| a.port()), Some(7878));
        for bad in ["localhost:7878", "7878x", ""] {
            let e = with(bad).unwrap_err().to_string();
            assert!(e.contains("http.listen") && e.contains("/h/agentd.toml"), "{bad}: {e}");
        }
        let e = parse(&format!("{DEFAULT_CONFIG}\n[http]\nport = 1\n")).unwrap_err().to_string();
        assert!(e.contains("port"), "{e}");
    }

    #[test]
    fn specialist_unknown_tool_is_named() {
        let text = format!(
            "{DEFAULT_CONFIG}\n[team.specialists.rev]\nprovider = \"local\"\nmodel = \"m\"\ntools = [\"read_file\", \"fly\"]\n"
        );
        let e = parse(&text).unwrap_err().to_string();
        assert!(e.contains("team.specialists.rev.tools"), "{e}");
        assert!(e.contains("fly"), "{e}");
    }
}
