//! A long-running program in the sandbox of `run_command`: what an MCP server started over stdio
//! runs in.
//!
//! [`Service::spawn`] starts `program args…` in the task's workspace with the same preparation as a
//! command ([`super::sandbox`]): Landlock (writes only beneath the workspace and a temp dir of its
//! own, reads of the system's directories and the `read` paths), the network rule of the policy,
//! the daemon's home hidden, no capabilities, its own session, process group and (where the daemon
//! may make one) cgroup. Unlike a command it is not waited for: its stdin and stdout are pipes the
//! caller speaks over, its stderr a pipe the caller may read, and it runs until the [`Service`] is
//! dropped — then its whole group and cgroup are killed and its temp dir removed.
//!
//! The environment is always scrubbed, with the sandbox off too: the [`ENV_ALLOWLIST`] and the
//! policy's `env` names, plus `HOME` and `TMPDIR` (the temp dir; with the sandbox off, the
//! daemon's own). A provider's key reaches the program only if it is named there, which the
//! configuration refuses.
//!
//! ```no_run
//! # async fn demo(workspace: &std::path::Path) -> Result<(), agentd_agents::tools::service::ServiceError> {
//! use agentd_agents::tools::{service::Service, SandboxPolicy};
//! let mut server = Service::spawn(&SandboxPolicy::default(), workspace, "mcp-server-git", &[])?;
//! let (stdout, stdin) = server.stdio().expect("taken once");
//! // … speak MCP over them; dropping `server` kills the program and everything it started.
//! # let _ = (stdout, stdin); Ok(()) }
//! ```

use super::command::GroupGuard;
use super::sandbox::{Prepared, SandboxError, SandboxMode, SandboxPolicy, ENV_ALLOWLIST};
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout};

/// Why a program could not be started.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The sandbox cannot be set up for it (no Landlock, a protected path exposed, …).
    #[error("{program} refused: {source}")]
    Sandbox {
        /// The program, as configured.
        program: String,
        /// What the sandbox could not do.
        #[source]
        source: SandboxError,
    },
    /// The program could not be executed (not found, not executable, refused by Landlock).
    #[error("cannot start {program}: {source}")]
    Spawn {
        /// The program, as configured.
        program: String,
        /// The error of the spawn.
        #[source]
        source: std::io::Error,
    },
}

/// A program running in the sandbox; killed with everything it started when dropped.
pub struct Service {
    // Dropped in this order: the group first (while the child is not reaped, so its pid — the
    // group's id — cannot have been reused), then the child, then the temp dir.
    group: GroupGuard,
    child: Child,
    _prepared: Prepared,
}

impl Service {
    /// Starts `program` with `args` in `workspace` (its working directory) under `policy`, with
    /// stdin, stdout and stderr piped.
    pub fn spawn(
        policy: &SandboxPolicy,
        workspace: &Path,
        program: &str,
        args: &[String],
    ) -> Result<Service, ServiceError> {
        let mut prepared = Prepared::new(policy, workspace)
            .map_err(|source| ServiceError::Sandbox { program: program.to_string(), source })?;
        let mut command = tokio::process::Command::new(program);
        command
            .args(args)
            .current_dir(workspace)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        prepared.apply(&mut command);
        if policy.mode == SandboxMode::Off {
            // No sandbox, but still no secret: only the allowlist, the policy's names and the
            // daemon's HOME and TMPDIR.
            let names = ENV_ALLOWLIST.iter().copied().chain(policy.env.iter().map(String::as_str));
            let env: Vec<(String, std::ffi::OsString)> = names
                .chain(["HOME", "TMPDIR"])
                .filter_map(|name| std::env::var_os(name).map(|v| (name.to_string(), v)))
                .chain(policy.set_env.iter().cloned())
                .collect();
            command.env_clear().envs(env);
        }
        let spawned = command.spawn();
        prepared.spawned();
        let child = match spawned {
            Ok(child) => child,
            Err(source) => {
                if let Some(cgroup) = prepared.cgroup.take() {
                    cgroup.discard();
                }
                return Err(ServiceError::Spawn { program: program.to_string(), source });
            }
        };
        let cgroup = match (prepared.cgroup.take(), child.id()) {
            (Some(cgroup), Some(pid)) if cgroup.holds(pid) => Some(cgroup),
            (Some(cgroup), _) => {
                cgroup.discard();
                None
            }
            (None, _) => None,
        };
        Ok(Service { group: GroupGuard { pgid: child.id(), cgroup }, child, _prepared: prepared })
    }

    /// The program's stdout and stdin, to speak over; `None` once taken.
    pub fn stdio(&mut self) -> Option<(ChildStdout, ChildStdin)> {
        match (self.child.stdout.take(), self.child.stdin.take()) {
            (Some(out), Some(input)) => Some((out, input)),
            _ => None,
        }
    }

    /// The program's stderr, to read (log) it; `None` once taken. Unread, a chatty program blocks
    /// once the pipe is full.
    pub fn stderr(&mut self) -> Option<ChildStderr> {
        self.child.stderr.take()
    }

    /// The program's process id, while it runs.
    pub fn id(&self) -> Option<u32> {
        self.child.id()
    }

    /// How the program ended, if it has.
    pub fn try_exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.group.kill();
        let _ = self.child.start_kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::sandbox::kernel_abi;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    fn alive(pid: u32) -> bool {
        // SAFETY: signal 0 only checks that the process exists.
        unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
    }

    fn policy(mode: SandboxMode) -> SandboxPolicy {
        SandboxPolicy { mode, env: vec!["CARGO_PKG_NAME".into()], ..SandboxPolicy::default() }
    }

    /// A shell that answers each line with its environment's names and working directory.
    async fn ask(mode: SandboxMode) -> (String, Option<u32>) {
        let ws = tempfile::tempdir().unwrap();
        let script = "while read line; do echo \"$(env | cut -d= -f1 | sort | tr '\\n' ' ')| $(pwd) | $(touch /tmp/agentd-service-probe-$$ 2>/dev/null && echo wrote-tmp || echo no-tmp)\"; done";
        let mut service =
            Service::spawn(&policy(mode), ws.path(), "sh", &["-c".into(), script.into()]).unwrap();
        let (stdout, mut stdin) = service.stdio().unwrap();
        assert!(service.stdio().is_none(), "taken once");
        stdin.write_all(b"hello\n").await.unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).await.unwrap();
        let pid = service.id();
        drop(service);
        (line.replace(&ws.path().canonicalize().unwrap().display().to_string(), "WORKSPACE"), pid)
    }

    #[tokio::test]
    async fn a_service_runs_in_the_workspace_with_the_allowlist_only_and_dies_when_dropped() {
        // Cargo runs tests with CARGO_PKG_NAME (passed by the policy) and CARGO_MANIFEST_DIR (not).
        let under_cargo = std::env::var_os("CARGO_PKG_NAME").is_some();
        let modes: &[SandboxMode] = if kernel_abi() >= 1 {
            &[SandboxMode::WorkspaceWrite, SandboxMode::Off]
        } else {
            &[SandboxMode::Off]
        };
        for mode in modes {
            let (line, pid) = ask(*mode).await;
            assert!(line.contains("PATH "), "{mode:?}: {line}");
            assert!(!line.contains("CARGO_MANIFEST_DIR"), "{mode:?}: {line}");
            if under_cargo {
                assert!(line.contains("CARGO_PKG_NAME"), "{mode:?}: {line}");
            }
            assert!(line.contains("| WORKSPACE |"), "{mode:?}: {line}");
            if *mode == SandboxMode::WorkspaceWrite {
                assert!(line.contains("no-tmp"), "the sandbox holds: {line}");
            }
            let pid = pid.unwrap();
            for _ in 0..200 {
                if !alive(pid) {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            // A zombie until reaped by the runtime's child reaper: gone, or not running.
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            assert!(state.is_empty() || state.contains(") Z"), "{mode:?}: still running: {state}");
        }
    }

    #[tokio::test]
    async fn a_program_that_cannot_start_is_an_error_naming_it() {
        let ws = tempfile::tempdir().unwrap();
        let policy = SandboxPolicy { mode: SandboxMode::Off, ..SandboxPolicy::default() };
        let Err(e) = Service::spawn(&policy, ws.path(), "/nonexistent/mcp-server", &[]) else {
            panic!("spawned a program that does not exist")
        };
        assert!(matches!(e, ServiceError::Spawn { .. }));
        assert!(e.to_string().contains("/nonexistent/mcp-server"), "{e}");
    }
}
