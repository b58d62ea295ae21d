//! `agentd doctor`: a setup checked the way a user needs before a long task, each finding a line
//! that says what holds, or what fails and which key or command changes it.
//!
//! The checks run in the doctor's own process, as the daemon would run the same things: the config
//! is loaded by the daemon's loader; each provider must answer `GET {base_url}/models` as its kind's
//! API does (a 404, an HTML page, a refused connection or a TLS error fails naming
//! `providers.NAME.base_url`); each role's provider is asked for the role's model's window and
//! whether it counts tokens, and the model must answer a one-token request (unless `--no-probe`); each MCP server is started by a task's own client, under the sandbox a
//! task in the given workspace would use, and its tools listed; the kernel is asked what the sandbox
//! can enforce. The home, its free space and the daemon's socket close the list. Nothing is written
//! but an MCP launcher's cache.

use crate::config::{Config, McpTransport, ProviderConfig};
use crate::daemon::Home;
use crate::mcp::{McpError, McpHealth, TaskServers};
use crate::provider_health::{reach, within, Reach};
use agentd_agents::tools::sandbox;
use agentd_agents::tools::SandboxMode;
use agentd_engine::counter::{tokenizer_for, Tokenizer};
use agentd_protocol::{ChatRequest, Message};
use agentd_providers::{Client, ProviderKind};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Below this much free space in the home, a long task may fill the disk.
const LOW_DISK: u64 = 1 << 30;
/// Below this much, the store soon refuses writes.
const NO_DISK: u64 = 100 << 20;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// It holds.
    Ok,
    /// It holds, with less than a user may expect (a degraded sandbox, the daemon not running).
    Warn,
    /// It does not hold: a task would fail or go without something.
    Fail,
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Check {
    /// What was checked: `config`, `home`, `disk`, `daemon`, `provider`, `model`, `mcp`, `workspace`,
    /// `sandbox`.
    pub area: &'static str,
    /// Which one: a provider's, role's or server's name, or the area's own.
    pub name: String,
    /// How it came out.
    pub verdict: Verdict,
    /// What was found, in words.
    pub detail: String,
    /// What to change when it fails or is degraded: a key of `agentd.toml` or a command.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Check {
    fn new(
        area: &'static str,
        name: impl Into<String>,
        verdict: Verdict,
        detail: impl Into<String>,
    ) -> Check {
        Check { area, name: name.into(), verdict, detail: detail.into(), fix: None }
    }

    fn fix(mut self, fix: impl Into<String>) -> Check {
        self.fix = Some(fix.into());
        self
    }
}

/// Every finding, in the order checked.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// True when no check failed.
    pub ok: bool,
    /// The home checked.
    pub home: String,
    /// The findings.
    pub checks: Vec<Check>,
}

impl Report {
    /// The failed checks.
    pub fn failures(&self) -> impl Iterator<Item = &Check> {
        self.checks.iter().filter(|c| c.verdict == Verdict::Fail)
    }
}

/// [`run`] on a runtime of its own, for a caller that has none (the `agentd doctor` command).
pub fn run_blocking(home: &Home, workspace: &Path, probe: bool) -> std::io::Result<Report> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    Ok(runtime.block_on(run(home, workspace, probe)))
}

/// Checks the setup of `home`, starting MCP servers as a task in `workspace` would; with `probe`,
/// each role's model answers a one-token request.
pub async fn run(home: &Home, workspace: &Path, probe: bool) -> Report {
    let mut checks = Vec::new();
    let config = match Config::load(&home.config()) {
        Ok(config) => {
            checks.push(Check::new(
                "config",
                home.config().display().to_string(),
                Verdict::Ok,
                format!(
                    "parses: {}, {}, {}",
                    counted(config.team.roles().count(), "role"),
                    counted(config.providers.len(), "provider"),
                    counted(config.mcp.len(), "MCP server")
                ),
            ));
            Some(config)
        }
        Err(e) => {
            // The finding is named by the file: the error need not say it again.
            let path = home.config().display().to_string();
            let said = e.to_string();
            let detail =
                said.strip_prefix(&format!("{path}:")).map_or(said.as_str(), str::trim_start).to_string();
            checks.push(
                Check::new("config", path, Verdict::Fail, detail)
                    .fix("`agentd init` writes a commented default; fix the key the error names"),
            );
            None
        }
    };
    checks.extend(home_checks(home));
    if let Some(config) = &config {
        if let Err(e) = config.check_keys(|name| std::env::var_os(name)) {
            checks.push(
                Check::new("provider", "keys", Verdict::Fail, e.to_string()).fix(
                    "export the variable before `agentd serve` (the key itself never goes in agentd.toml)",
                ),
            );
        }
        checks.extend(model_checks(config, probe).await);
        checks.extend(mcp_checks(config, workspace).await);
        checks.push(workspace_check(workspace));
        checks.extend(sandbox_checks(config));
    }
    let ok = !checks.iter().any(|c| c.verdict == Verdict::Fail);
    Report { ok, home: home.dir.display().to_string(), checks }
}

/// `n` things, in words.
fn counted(n: usize, thing: &str) -> String {
    format!("{n} {thing}{}", if n == 1 { "" } else { "s" })
}

/// The home: there and private, with room on its disk; the daemon's socket.
fn home_checks(home: &Home) -> Vec<Check> {
    let mut checks = Vec::new();
    let dir = home.dir.display().to_string();
    match std::fs::metadata(&home.dir) {
        Ok(m) if m.is_dir() => {
            let probe = home.dir.join(format!(".doctor-{}", std::process::id()));
            let writable = std::fs::write(&probe, b"").and_then(|()| std::fs::remove_file(&probe));
            checks.push(match (writable, home.loose_mode()) {
                (Err(e), _) => Check::new("home", &dir, Verdict::Fail, format!("not writable: {e}"))
                    .fix("give the daemon's user the home, or pass --home DIR"),
                (Ok(()), Some(mode)) => Check::new(
                    "home",
                    &dir,
                    Verdict::Warn,
                    format!("writable, but mode {mode:o} lets others in; the daemon makes it 0700"),
                )
                .fix(format!("chmod 700 {dir}")),
                (Ok(()), None) => Check::new("home", &dir, Verdict::Ok, "writable, private (0700)"),
            });
            checks.push(disk_check(&home.dir));
        }
        Ok(_) => checks.push(Check::new("home", &dir, Verdict::Fail, "is not a directory")),
        Err(_) => checks.push(
            Check::new(
                "home",
                &dir,
                Verdict::Warn,
                "does not exist yet; `agentd init` or `agentd serve` makes it",
            )
            .fix("agentd init"),
        ),
    }
    let socket = home.socket();
    checks.push(match std::os::unix::net::UnixStream::connect(&socket) {
        Ok(_) => {
            Check::new("daemon", socket.display().to_string(), Verdict::Ok, "running: its socket answers")
        }
        Err(e) if socket.exists() => Check::new(
            "daemon",
            socket.display().to_string(),
            Verdict::Warn,
            format!(
                "a socket is there but nothing answers ({e}): a daemon that died; `agentd serve` replaces it"
            ),
        )
        .fix("agentd serve"),
        Err(_) => Check::new("daemon", socket.display().to_string(), Verdict::Warn, "not running")
            .fix("agentd serve"),
    });
    checks
}

/// Free space on the home's filesystem.
fn disk_check(dir: &Path) -> Check {
    let name = dir.display().to_string();
    let Some(free) = free_bytes(dir) else {
        return Check::new("disk", name, Verdict::Warn, "the free space could not be read");
    };
    let shown = format!("{:.1} GiB free", free as f64 / (1u64 << 30) as f64);
    if free < NO_DISK {
        Check::new("disk", name, Verdict::Fail, format!("{shown}: the store will refuse writes"))
            .fix("free space on this filesystem, or move the home (--home)")
    } else if free < LOW_DISK {
        Check::new("disk", name, Verdict::Warn, format!("{shown}: a long task's evidence may fill it"))
            .fix("free space on this filesystem")
    } else {
        Check::new("disk", name, Verdict::Ok, shown)
    }
}

fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs writes into the zeroed struct it is given; the path is a valid C string.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(path.as_ptr(), &mut st) != 0 {
            return None;
        }
        Some((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
    }
}

/// A provider's line: what [`reach`] found, its failure naming the key to change.
fn provider_line(p: &ProviderConfig, reach: Reach) -> Check {
    let verdict = if reach.ok { Verdict::Ok } else { Verdict::Fail };
    let mut check = Check::new("provider", p.name.clone(), verdict, reach.detail);
    check.fix = reach.fix;
    check
}

/// Whether `model` is among the models a server lists (Ollama's `NAME` is its `NAME:latest`).
fn is_listed(model: &str, listed: &[String]) -> bool {
    listed.iter().any(|m| m == model || m.strip_suffix(":latest") == Some(model))
}

/// Each provider's API ([`reach`]), then each role's model on it: the window it declares,
/// how its tokens are counted, its prompt cache, and — with `probe` — one request of a single
/// answer token, which must succeed.
async fn model_checks(config: &Config, probe: bool) -> Vec<Check> {
    let mut checks = Vec::new();
    let mut answering: BTreeMap<&str, (Client, Option<Vec<String>>)> = BTreeMap::new();
    for (name, p) in &config.providers {
        let client = p.connect(p.api_key(env_var), config.deadlines);
        let mut found = reach(p, &client).await;
        if found.ok {
            answering.insert(name.as_str(), (client, found.listed.take()));
        }
        checks.push(provider_line(p, found));
    }
    for role in config.team.roles() {
        let Some(rc) = config.team.role(&role) else { continue };
        let Some(p) = config.providers.get(&rc.provider) else { continue };
        let name = role.name().to_string();
        let Some((client, listed)) = answering.get(p.name.as_str()) else {
            checks.push(
                Check::new(
                    "model",
                    name,
                    Verdict::Fail,
                    format!(
                        "{} on {}: not checked, the provider does not answer as its API",
                        rc.model, p.name
                    ),
                )
                .fix(format!("providers.{}.base_url", p.name)),
            );
            continue;
        };
        // Which key was checked, by its variable's name (never its value).
        let keyed = match (&p.api_key_env, p.api_key(env_var)) {
            (Some(var), Some(_)) => format!("API key from ${var}"),
            (Some(var), None) => format!("API key ${var} NOT set"),
            (None, _) => "no API key (providers.NAME.api_key_env unset)".replace("NAME", &p.name),
        };
        let at = format!("{} on {} ({}, {keyed})", rc.model, p.name, p.base_url);
        let window = match within(client.probe_window(&rc.model)).await {
            None => {
                checks.push(
                    Check::new("model", name, Verdict::Fail, format!("{at}: no answer within 15 s"))
                        .fix(format!("providers.{}.base_url", p.name)),
                );
                continue;
            }
            Some(Err(e)) => {
                checks.push(
                    Check::new("model", name, Verdict::Fail, format!("{at}: {e}"))
                        .fix(format!("providers.{}.base_url / api_key_env, or start the server", p.name)),
                );
                continue;
            }
            Some(Ok(Some(w))) => format!("declares a {w}-token window"),
            Some(Ok(None)) => format!(
                "declares no window: {} tokens are assumed until a refusal or a usage report teaches it",
                agentd_protocol::window::ASSUMED_WINDOW
            ),
        };
        let counted = match tokenizer_for(&rc.model) {
            t @ (Tokenizer::O200k | Tokenizer::Cl100k) => format!("counted by tiktoken ({})", t.as_str()),
            _ => match within(client.count_text(&rc.model, "hello")).await {
                Some(Ok(Some(_))) => "counted by the server's endpoint".to_string(),
                Some(Ok(None)) => {
                    "estimated (bytes / 3), calibrated by the server's usage reports".to_string()
                }
                _ => "estimated: the counting endpoint did not answer".to_string(),
            },
        };
        let cache = match (client.prompt_cache(), client.learns_prompt_cache()) {
            (Some(c), _) => format!(
                "prompt cache declared (a cached token at {:.2}, prefixes of {}+ tokens)",
                c.read_factor, c.min_tokens
            ),
            (None, true) => "prompt cache learned from its usage reports once they show one \
                             (`agentd context` says when it is)"
                .to_string(),
            (None, false) => "no prompt cache (cache = false): compactions unpriced".to_string(),
        };
        let mut detail = format!("{at}: {window}; {counted}; {cache}");
        let mut verdict = Verdict::Ok;
        let mut fix = None;
        if probe {
            match within(client.chat(&probe_request(&rc.model, p.kind), &CancellationToken::new())).await {
                Some(Ok(answer)) => {
                    let used = match answer.usage.and_then(|u| u.prompt) {
                        Some(f) => match f.count() {
                            Some(n) => format!(" ({n} prompt tokens)"),
                            None => format!(" (its usage report's `{}` is {}, not a count)", f.key, f.said),
                        },
                        None => String::new(),
                    };
                    detail.push_str(&format!("; a one-token request answered{used}"));
                }
                Some(Err(e)) => {
                    (verdict, fix) = (
                        Verdict::Fail,
                        Some(format!("team.{name}.model, or providers.{}.base_url / api_key_env", p.name)),
                    );
                    detail = format!("{at}: a one-token request failed: {e}");
                }
                None => {
                    (verdict, fix) = (Verdict::Fail, Some(format!("providers.{}.base_url", p.name)));
                    detail = format!("{at}: a one-token request got no answer within 15 s");
                }
            }
        } else if listed.as_ref().is_some_and(|l| !l.is_empty() && !is_listed(&rc.model, l)) {
            verdict = Verdict::Warn;
            detail.push_str(&format!("; {} is not among the models the server lists", rc.model));
            fix = Some(format!("team.{name}.model"));
        }
        let mut check = Check::new("model", name, verdict, detail);
        check.fix = fix;
        checks.push(check);
    }
    checks
}

/// The probe: a one-word question with room for a single answer token (16 on the Responses API,
/// its least), no tools, no thinking — a few prompt tokens billed per role.
fn probe_request(model: &str, kind: ProviderKind) -> ChatRequest {
    ChatRequest {
        model: model.to_string(),
        system: "You are being checked by agentd doctor.".to_string(),
        messages: vec![Message::user("Reply with OK.")],
        tools: Vec::new(),
        tool_choice_none: false,
        max_tokens: Some(kind.least_max_tokens()),
        thinking_budget: None,
        cache_key: None,
    }
}

/// The daemon's environment variable `name`, as the doctor reads a provider's key.
fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// What the workspace holds that checkpoints cannot fully stand for: files with other hard links (a
/// command writing one writes the others; a revert puts back this name only) — a warning — and
/// special files, named by checkpoints but never held.
fn workspace_check(workspace: &Path) -> Check {
    let name = workspace.display().to_string();
    let survey = match agentd_agents::checkpoints::survey(workspace) {
        Ok(survey) => survey,
        Err(e) => return Check::new("workspace", name, Verdict::Warn, format!("could not be walked: {e}")),
    };
    let listed =
        |found: &[agentd_protocol::NotHeld]| agentd_protocol::text::listed(found, 5, |n| n.path.clone());
    let specials = match survey.specials.len() {
        0 => String::new(),
        n => format!(
            "; {} (FIFOs, sockets, devices: checkpoints name them, never hold them): {}",
            counted(n, "special file"),
            listed(&survey.specials)
        ),
    };
    if survey.linked.is_empty() {
        return Check::new(
            "workspace",
            name,
            Verdict::Ok,
            format!("no file with other hard links{specials}"),
        );
    }
    Check::new(
        "workspace",
        name,
        Verdict::Warn,
        format!(
            "{} with other hard links: {} — a command writing one writes its other names too (maybe outside the workspace), and `agentd revert` puts back this name only{specials}",
            counted(survey.linked.len(), "file"),
            listed(&survey.linked)
        ),
    )
    .fix("to keep the team from writing through a link, give the file a copy of its own: cp FILE FILE.tmp && mv FILE.tmp FILE")
}

/// Each MCP server, started as a task in `workspace` starts it, with its tools listed.
async fn mcp_checks(config: &Config, workspace: &Path) -> Vec<Check> {
    let mut checks = Vec::new();
    let servers = TaskServers::new(config, "doctor", workspace, Arc::new(McpHealth::default()));
    for (name, server) in &config.mcp {
        let how = match &server.transport {
            McpTransport::Stdio { sandbox: false, .. } => "unconfined (sandbox = false)".to_string(),
            McpTransport::Stdio { .. } if config.team.sandbox.mode == SandboxMode::Off => {
                "unconfined ([tools.sandbox] mode = \"off\")".to_string()
            }
            McpTransport::Stdio { .. } => format!("in the sandbox, workspace {}", workspace.display()),
            McpTransport::Http { url, .. } => url.clone(),
        };
        checks.push(match servers.probe(name).await {
            Ok(tools) => {
                let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
                Check::new(
                    "mcp",
                    name,
                    Verdict::Ok,
                    format!("started {how}: {} tools ({})", names.len(), names.join(", ")),
                )
            }
            Err(e) => Check::new("mcp", name, Verdict::Fail, format!("{how}: {e}")).fix(mcp_fix(name, &e)),
        });
    }
    servers.shutdown().await;
    checks
}

/// The key to change for a server that did not start.
fn mcp_fix(name: &str, e: &McpError) -> String {
    let key = |k: &str| format!("mcp.servers.{name}.{k}");
    match e {
        McpError::NotFound { .. } => key("command"),
        McpError::Spawn { .. } => {
            format!("{} (what its program runs from), or {} = false", key("read"), key("sandbox"))
        }
        McpError::NoToken { .. } => format!("export the variable {} names", key("bearer_env")),
        McpError::Initialize { .. } | McpError::StartTimeout { .. } => format!(
            "{} / {}: the program must speak MCP on stdio (its stderr is quoted when it wrote any); {} if it \
             needs to download first",
            key("command"),
            key("args"),
            key("network")
        ),
        _ => key("command"),
    }
}

/// What the kernel lets the command sandbox enforce, as configured.
fn sandbox_checks(config: &Config) -> Vec<Check> {
    let policy = &config.team.sandbox;
    if policy.mode == SandboxMode::Off {
        return vec![Check::new(
            "sandbox",
            "mode",
            Verdict::Warn,
            "off: commands and MCP servers run with the daemon's rights",
        )
        .fix("tools.sandbox.mode = \"workspace-write\"")];
    }
    let abi = sandbox::kernel_abi();
    if abi < 1 {
        return vec![Check::new(
            "sandbox",
            "landlock",
            Verdict::Fail,
            "this kernel does not enforce Landlock: run_command, verify and stdio MCP servers are refused",
        )
        .fix("a kernel with Landlock (5.13+, `lsm=landlock`), or tools.sandbox.mode = \"off\"")];
    }
    let mut checks = vec![Check::new(
        "sandbox",
        "landlock",
        Verdict::Ok,
        format!("Landlock ABI {abi}, mode {}", policy.mode.as_str()),
    )];
    let netns = sandbox::can_unshare_network();
    checks.push(match (policy.network, abi >= 4, netns) {
        (true, _, _) => Check::new("sandbox", "network", Verdict::Ok, "commands may use the network (network = true)"),
        (false, _, true) => Check::new(
            "sandbox",
            "network",
            Verdict::Ok,
            "no network: an empty network namespace per command (TCP, UDP and raw sockets)",
        ),
        (false, true, false) => Check::new(
            "sandbox",
            "network",
            Verdict::Warn,
            "no TCP (Landlock), but UDP is not stopped: no network namespace can be made here",
        )
        .fix("run the daemon as root or with CAP_SYS_ADMIN for a namespace"),
        (false, false, false) => Check::new(
            "sandbox",
            "network",
            Verdict::Fail,
            format!("network = false cannot be enforced: Landlock ABI {abi} has no TCP rules and no namespace can be made"),
        )
        .fix("tools.sandbox.network = true, or a kernel with Landlock ABI 4 (6.7+)"),
    });
    checks.push(if sandbox::can_unshare_mounts() {
        Check::new(
            "sandbox",
            "home",
            Verdict::Ok,
            "the daemon's home is hidden from commands (a mount namespace)",
        )
    } else {
        Check::new(
            "sandbox",
            "home",
            Verdict::Warn,
            "no mount namespace: the home is unreadable to commands, but its socket can be connected (the \
             peer check still refuses other users)",
        )
    });
    checks.push(if sandbox::cgroup_available() {
        Check::new("sandbox", "cgroup", Verdict::Ok, "each command in a cgroup of its own, killed whole")
    } else {
        Check::new(
            "sandbox",
            "cgroup",
            Verdict::Warn,
            "no cgroup for commands: a process that calls setsid can outlive its call",
        )
        .fix("a writable cgroup v2 (systemd: Delegate=yes for the daemon's unit)")
    });
    checks
}
