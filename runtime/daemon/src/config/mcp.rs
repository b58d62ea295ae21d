//! `[mcp.servers.NAME]`: MCP servers whose tools some roles get, each tool named to the model as
//! `mcp__NAME__TOOL`. A server is either a program agentd starts per task and speaks to over stdio
//! (`command`, `args`, `env`, `network`, `read`, `sandbox`) or one already running, spoken to by streamable HTTP
//! (`url`, `bearer_env`) — never both, and a key of one kind is refused on the other. Either kind
//! says who sees its tools (`roles`, the coder by default), which of them (`tools`) and how long one
//! call may take (`timeout`). Provider keys never reach a server; a bearer token is a secret.

use super::error::ConfigError;
use super::error::Invalid;
use super::providers::key_owner;
use super::providers::ProviderConfig;
use super::raw::{RawMcp, RawMcpServer};
use super::secrets::is_env_name;
use agentd_protocol::Role;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

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
    /// Whether its tools can change the workspace (`writes`, default false): a checkpoint is taken
    /// around each call of one, as around `run_command`.
    pub writes: bool,
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
        /// `network`: overrides `[tools.sandbox] network` for this server (by default a launcher
        /// that fetches on first use — `npx`, `uvx`, `pipx` — gets the network).
        network: Option<bool>,
        /// `read`: absolute paths the server may read besides what its program is found to need.
        read: Vec<PathBuf>,
        /// `sandbox` (default true): false runs the server unconfined (its environment still
        /// scrubbed), for a server whose needs cannot be listed.
        sandbox: bool,
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

/// Checks every server, in name order, against the providers (whose keys they may not get) and the
/// team (whose roles they name). A server's bearer token variable joins `secret_env`.
pub(super) fn mcp_servers(
    raw: RawMcp,
    providers: &BTreeMap<String, ProviderConfig>,
    team: &[Role],
    secret_env: &mut Vec<String>,
    invalid: Invalid,
) -> Result<BTreeMap<String, McpServerConfig>, ConfigError> {
    let mut mcp = BTreeMap::new();
    for (name, raw) in raw.servers {
        let server = mcp_server(&name, raw, providers, team, invalid)?;
        // A bearer token is a secret: redacted from every tool result.
        if let McpTransport::Http { bearer_env: Some(var), .. } = &server.transport {
            if !secret_env.contains(var) {
                secret_env.push(var.clone());
            }
        }
        mcp.insert(name, server);
    }
    Ok(mcp)
}

/// One `[mcp.servers.NAME]` table, checked: errors name `mcp.servers.NAME.KEY`.
fn mcp_server(
    name: &str,
    raw: RawMcpServer,
    providers: &BTreeMap<String, ProviderConfig>,
    team: &[Role],
    invalid: Invalid,
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
    let provider_key = |var: &str| key_owner(providers, var);
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
            let read = raw.read.unwrap_or_default();
            if let Some(bad) = read.iter().find(|p| !p.starts_with('/')) {
                return Err(invalid(key("read"), format!("must be an absolute path, got {bad:?}")));
            }
            McpTransport::Stdio {
                command,
                args: raw.args.unwrap_or_default(),
                env,
                network: raw.network,
                read: read.into_iter().map(PathBuf::from).collect(),
                sandbox: raw.sandbox.unwrap_or(true),
            }
        }
        (None, Some(url)) => {
            for (k, set) in [
                ("args", raw.args.is_some()),
                ("env", raw.env.is_some()),
                ("network", raw.network.is_some()),
                ("read", raw.read.is_some()),
                ("sandbox", raw.sandbox.is_some()),
            ] {
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
    let writes = raw.writes.unwrap_or(false);
    Ok(McpServerConfig { name: name.to_string(), transport, roles, tools: raw.tools, call_timeout, writes })
}

#[cfg(test)]
mod tests {
    use super::super::tests::parse;
    use super::super::DEFAULT_CONFIG;
    use super::{McpTransport, DEFAULT_MCP_CALL_TIMEOUT};
    use agentd_protocol::Role;
    use std::time::Duration;

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
                network: None,
                read: vec![],
                sandbox: true,
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
            (&format!("{FIXTURE}read = [\"venv\"]\n"), "mcp.servers.fix.read", "absolute"),
            ("[mcp.servers.web]\nurl = \"http://h/\"\nsandbox = false\n", "mcp.servers.web.sandbox", "stdio"),
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
}
