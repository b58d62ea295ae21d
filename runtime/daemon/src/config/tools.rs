//! `[tools]`: how the roles' commands run. `command_timeout` bounds one `run_command` (or `verify`);
//! `[tools.sandbox]` is the kernel sandbox they run in: its `mode`, whether it allows the network,
//! the variables passed through beyond its allowlist (`env`, never a provider's key nor the `HOME`
//! and `TMPDIR` it sets itself), and more paths to read (`read`, absolute). The daemon's home — the
//! directory of `agentd.toml` — is always out of reach.

use super::error::ConfigError;
use super::error::Invalid;
use super::providers::key_owner;
use super::providers::ProviderConfig;
use super::raw::RawSandbox;
use agentd_agents::tools::{SandboxMode, SandboxPolicy};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long one command may run when `command_timeout` is not set.
const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(120);

/// `tools.command_timeout`, longer than 0s.
pub(super) fn command_timeout(raw: Option<String>, invalid: Invalid) -> Result<Duration, ConfigError> {
    let command_timeout = match raw {
        None => DEFAULT_COMMAND_TIMEOUT,
        Some(v) => humantime::parse_duration(&v)
            .map_err(|e| invalid("tools.command_timeout".into(), format!("{e}: {v:?}")))?,
    };
    if command_timeout.is_zero() {
        return Err(invalid("tools.command_timeout".into(), "must be longer than 0s".into()));
    }
    Ok(command_timeout)
}

/// Where working copies are made when `tools.copies` names no folder: beneath `/var/tmp` (kept across
/// a restart, unlike `/tmp` on many systems), one folder per user.
pub fn default_copies() -> PathBuf {
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    PathBuf::from(format!("/var/tmp/agentd-copies-{uid}"))
}

/// `tools.copies`: the folder parallel writers' working copies are made in (absolute, and not inside
/// the daemon's home, which commands must not reach).
pub(super) fn copies(raw: Option<PathBuf>, path: &Path, invalid: Invalid) -> Result<PathBuf, ConfigError> {
    let Some(dir) = raw else { return Ok(default_copies()) };
    if !dir.is_absolute() {
        return Err(invalid("tools.copies".into(), format!("must be an absolute path, got {dir:?}")));
    }
    let home = match path.parent() {
        Some(h) if !h.as_os_str().is_empty() => h.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let home = home.canonicalize().unwrap_or(home);
    if dir.starts_with(&home) {
        return Err(invalid(
            "tools.copies".into(),
            format!(
                "{} lies inside the daemon's home {}, which commands must not reach",
                dir.display(),
                home.display()
            ),
        ));
    }
    Ok(dir)
}

/// `[tools.sandbox]` checked; `path` is the configuration file, whose directory the sandbox protects.
pub(super) fn sandbox_policy(
    raw: RawSandbox,
    providers: &BTreeMap<String, ProviderConfig>,
    path: &Path,
    invalid: Invalid,
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
        if let Some(p) = key_owner(providers, name) {
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
    use super::super::tests::parse;
    use super::super::DEFAULT_CONFIG;
    use agentd_agents::tools::SandboxMode;
    use std::path::PathBuf;

    #[test]
    fn the_copies_folder_is_absolute_and_outside_the_home() {
        let c = parse(DEFAULT_CONFIG).unwrap();
        assert_eq!(c.team.copies, super::default_copies());
        let with =
            |dir: &str| DEFAULT_CONFIG.replacen("[tools]\n", &format!("[tools]\ncopies = \"{dir}\"\n"), 1);
        assert_eq!(parse(&with("/srv/copies")).unwrap().team.copies, PathBuf::from("/srv/copies"));
        for (bad, why) in [("copies", "absolute"), ("/h/copies", "inside the daemon's home")] {
            let e = parse(&with(bad)).unwrap_err().to_string();
            assert!(e.contains("tools.copies") && e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn bad_duration_is_named() {
        let text = DEFAULT_CONFIG.replace("\"120s\"", "\"soon\"");
        let e = parse(&text).unwrap_err().to_string();
        assert!(e.contains("tools.command_timeout"), "{e}");
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
        // run_command's writes stay in the workspace: no key sets more (only an MCP server's launcher
        // cache is written beyond it, added per server by `mcp::reach`).
        assert!(c.team.sandbox.write.is_empty() && c.team.sandbox.set_env.is_empty());
        let e = parse(&on.replace("read = [\"/opt/x\"]", "write = [\"/opt/x\"]")).unwrap_err().to_string();
        assert!(e.contains("write"), "{e}");
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
}
