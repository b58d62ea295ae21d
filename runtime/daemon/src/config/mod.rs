//! `agentd.toml`: the daemon's configuration, parsed strictly. Unknown keys and bad values are errors
//! that name the key and the file. The context window is deliberately absent: it is measured.
//!
//! Reading the file takes two steps. First serde reads it into `raw` structs, the file as written,
//! refusing unknown keys and wrong types. Then each section is validated by its own module —
//! `providers`, `team`, `tools`, `secrets`, `requests`, `retry`, `scheduler`, `http`,
//! `mcp`, `cluster` — turning raw values into the daemon's types, each error naming its dotted key
//! ([`ConfigError`]). A [`Config`] exists only once every section is valid. The sections are checked
//! in a fixed order (the retry and scheduler tables, the providers, the roles that name them, then
//! the rest), so a file with several mistakes always reports the same first one. [`DEFAULT_CONFIG`]
//! is the commented file `agentd init` writes.

mod acp;
mod blocks;
mod budgets;
mod changes;
mod cluster;
mod default;
mod error;
mod http;
mod mcp;
mod prices;
mod providers;
mod raw;
mod requests;
mod retry;
mod scheduler;
mod secrets;
mod team;
mod tools;

pub use changes::changes;
pub use cluster::ClusterConfig;
pub use default::DEFAULT_CONFIG;
pub use error::ConfigError;
pub use http::parse_listen;
pub use mcp::{McpServerConfig, McpTransport, DEFAULT_MCP_CALL_TIMEOUT, MCP_STARTUP_TIMEOUT};
pub use providers::ProviderConfig;
pub use scheduler::JobConfig;
pub use team::MIN_THINKING_BUDGET;

use crate::schedule::Zone;
use agentd_engine::team::{RoleConfig, TeamConfig};
use agentd_providers::Deadlines;
use raw::RawConfig;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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
    /// How long a model request may take, and how long its stream may go without a part of an event.
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
    /// `[http] keep_alive`: how often an event stream with nothing to send writes a comment (15s
    /// unless set), so a client that went away is noticed and its connection closed.
    pub http_keep_alive: std::time::Duration,
    /// `[http] metrics_public`: `GET /metrics` answers without the token (false unless set).
    pub http_metrics_public: bool,
    /// `[mcp.servers.NAME]`, by name.
    pub mcp: BTreeMap<String, McpServerConfig>,
    /// `[cluster]`: this daemon as a node of a fleet on NATS JetStream; `None` runs it alone.
    pub cluster: Option<ClusterConfig>,
    /// `[acp] ask`: the tools whose calls `agentd acp` has the editor's user approve first.
    pub acp_ask: Vec<agentd_protocol::ToolName>,
    /// `[telemetry] otlp_endpoint`: the OTLP/HTTP collector traces go to (its base URL).
    pub otlp_endpoint: Option<String>,
}

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
    /// provider and the variable. So are `[cluster] token_env` and `password_env`.
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
        // The fleet's token or password: unset, every connection to NATS would be refused.
        let cluster = self
            .cluster
            .iter()
            .flat_map(|c| [("cluster.token_env", &c.token_env), ("cluster.password_env", &c.password_env)]);
        for (key, name) in cluster {
            let Some(name) = name else { continue };
            if var(name).is_none_or(|v| v.is_empty()) {
                return Err(ConfigError::Invalid {
                    path: self.path.clone(),
                    key: key.to_string(),
                    message: format!(
                        "names the environment variable {name}, which is not set (or empty) for agentd serve; export it before starting the daemon"
                    ),
                });
            }
        }
        Ok(())
    }

    /// Reads and validates the configuration file at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Config::read(path).map(|(config, _)| config)
    }

    /// Reads and validates the configuration file at `path`: the configuration and the text it
    /// was read from (what a reload compares with).
    pub fn read(path: &Path) -> Result<(Config, String), ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        Config::parse(&text, path).map(|config| (config, text))
    }

    /// Parses and validates `text` as a configuration; `path` is only named in errors (and its directory is
    /// the home the sandbox keeps out of commands' reach).
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text)
            .map_err(|e| ConfigError::Parse { path: path.to_path_buf(), message: error::toml_message(&e) })?;
        validate(raw, path)
    }
}

/// Turns the file as written into a [`Config`], section by section. The order is part of the
/// behaviour: it decides which of several mistakes is reported.
fn validate(raw: RawConfig, path: &Path) -> Result<Config, ConfigError> {
    let invalid = error::invalid_in(path);
    let invalid: error::Invalid = &invalid;
    let retry = retry::retry_policy(raw.retry, invalid)?;
    let scheduler = scheduler::scheduler(raw.scheduler, invalid)?;
    let providers = providers::providers(raw.providers, invalid)?;
    let roles = team::roles(raw.team, &providers, invalid)?;
    let command_timeout = tools::command_timeout(raw.tools.command_timeout, invalid)?;
    let mut secret_env = secrets::secret_env(raw.secrets, invalid)?;
    let deadlines = requests::deadlines(&raw.requests, invalid)?;
    let copies = tools::copies(raw.tools.copies, path, invalid)?;
    let checkpoint_bytes = match raw.checkpoints.max_bytes {
        None => agentd_engine::checkpoints::DEFAULT_MAX_BYTES,
        Some(n) => u64::try_from(n).map_err(|_| {
            invalid("checkpoints.max_bytes".into(), format!("must be 0 (no checkpoints) or more, got {n}"))
        })?,
    };
    let sandbox = tools::sandbox_policy(raw.tools.sandbox.unwrap_or_default(), &providers, path, invalid)?;
    let http_listen = http::http_listen(&raw.http, invalid)?;
    let http_keep_alive = http::http_keep_alive(&raw.http, invalid)?;
    let http_metrics_public = raw.http.metrics_public.unwrap_or(false);
    let blocks = blocks::blocks(raw.instructions, raw.memory, invalid)?;
    let mcp = mcp::mcp_servers(raw.mcp, &providers, &roles.all(), &mut secret_env, invalid)?;
    let cluster = cluster::cluster(raw.cluster, invalid)?;
    let prices = prices::prices(raw.prices, invalid)?;
    let budgets = budgets::budgets(raw.budgets, invalid)?;
    let acp_ask = acp::ask(raw.acp, invalid)?;
    let otlp_endpoint = match raw.telemetry.otlp_endpoint {
        Some(url) if !(url.starts_with("http://") || url.starts_with("https://")) => {
            return Err(invalid(
                "telemetry.otlp_endpoint".into(),
                format!("expected the collector's http:// or https:// URL (such as \"http://127.0.0.1:4318\"), got {url:?}"),
            ))
        }
        other => other,
    };
    secret_env.extend(cluster.iter().flat_map(|c| c.secret_env().cloned()));
    Ok(Config {
        path: path.to_path_buf(),
        providers,
        team: TeamConfig {
            lead: roles.lead,
            coder: roles.coder,
            specialists: roles.specialists,
            command_timeout,
            sandbox,
            retry,
            idle_thinking_cleanup_after: scheduler.idle_thinking_cleanup_after,
            idle_thinking_clear_at_least: scheduler.idle_thinking_clear_at_least,
            blocks: Arc::new(blocks),
            prices: Arc::new(prices),
            budgets,
            copies,
            checkpoint_bytes,
            trace_content: raw.telemetry.include_content.unwrap_or(false),
            stall: roles.stall,
        },
        deadlines,
        secret_env,
        jobs: scheduler.jobs,
        tz: scheduler.tz,
        http_listen,
        http_keep_alive,
        http_metrics_public,
        mcp,
        cluster,
        acp_ask,
        otlp_endpoint,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses `text` as `/h/agentd.toml`: every section's tests read errors naming that file.
    pub(super) fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("/h/agentd.toml"))
    }

    #[test]
    fn unknown_key_is_named_with_the_file() {
        let text = DEFAULT_CONFIG.replace("[tools]", "[tools]\ncolour = 1");
        let e = parse(&text).unwrap_err().to_string();
        assert!(e.contains("/h/agentd.toml"), "{e}");
        assert!(e.contains("colour"), "{e}");
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
}
