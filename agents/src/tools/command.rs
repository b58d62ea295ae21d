//! `run_command`: `sh -c COMMAND` in the workspace root, with a timeout and a cap on captured output,
//! inside the sandbox of [`super::sandbox`] unless `tools.sandbox.mode = "off"`.
//!
//! The shell runs in a session and process group of its own (`setsid` before exec) and, where the
//! daemon may make cgroups, in a cgroup of its own. When the call ends — the shell exited, the timeout
//! passed, or the call was dropped before the shell exited (a cancelled task) — the whole group is
//! killed with `killpg(SIGKILL)` and the cgroup with `cgroup.kill`, so pipelines, background jobs and
//! processes that called `setsid` die with the call. Without a cgroup, a process that left the session
//! is not reached. After a normal exit, output pipes held open by background jobs are read for a short
//! grace period first; the result is then marked incomplete.

use super::context::ToolContext;
use super::outcome::ToolOutcome;
use super::sandbox::{Cgroup, Prepared};
use crate::error::ToolError;
use agentd_policies::args::Args;
use agentd_protocol::ToolName;
use parking_lot::Mutex;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// How long the output pipes may stay open after the shell exited or was killed.
const DRAIN_GRACE: Duration = Duration::from_secs(1);

/// `run_command`'s arguments, checked.
#[derive(Debug)]
pub(crate) struct CommandArgs<'a> {
    pub(crate) command: &'a str,
    /// `None`: the context's default.
    pub(crate) timeout: Option<Duration>,
}

impl<'a> CommandArgs<'a> {
    pub(crate) fn parse(args: &'a Args) -> Result<CommandArgs<'a>, ToolError> {
        let command = args.str("command")?;
        if command.trim().is_empty() {
            return Err(ToolError::InvalidArguments {
                tool: ToolName::RunCommand.into(),
                message: "`command` must not be empty".into(),
            });
        }
        Ok(CommandArgs { command, timeout: args.opt_seconds("timeout_s")? })
    }
}

pub(crate) async fn run_command(ctx: &ToolContext, args: &Args) -> Result<ToolOutcome, ToolError> {
    let CommandArgs { command, timeout } = CommandArgs::parse(args)?;
    let timeout = timeout.unwrap_or(ctx.command_timeout);

    let mut prepared = Prepared::new(&ctx.sandbox, ctx.workspace.root())
        .map_err(|e| ToolError::Failed(format!("run_command refused: {e}")))?;
    let mut shell = tokio::process::Command::new("sh");
    shell
        .arg("-c")
        .arg(command)
        .current_dir(ctx.workspace.root())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    prepared.apply(&mut shell);
    let spawned = shell.spawn();
    prepared.spawned();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            if let Some(cgroup) = prepared.cgroup.take() {
                cgroup.discard();
            }
            return Err(ToolError::Failed(format!("could not start sh: {e}")));
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
    // Declared after `child`, so it is dropped first: the group is killed while the shell is not yet
    // reaped and its pid (the group id) cannot have been reused.
    let mut group = GroupGuard { pgid: child.id(), cgroup };

    let capture = Capture::new(ctx.max_output_bytes);
    let mut readers =
        [child.stdout.take().map(|r| capture.drain(r, 0)), child.stderr.take().map(|r| capture.drain(r, 1))];

    let deadline = Instant::now() + timeout;
    let status = match tokio::time::timeout_at(deadline, child.wait()).await {
        Ok(Ok(status)) => Some(status),
        Ok(Err(e)) => return Err(ToolError::Failed(format!("waiting for the command failed: {e}"))),
        Err(_) => {
            group.kill();
            let _ = child.kill().await;
            None
        }
    };

    let drained = tokio::time::timeout(DRAIN_GRACE, async {
        for reader in readers.iter_mut().flatten() {
            let _ = reader.await;
        }
    })
    .await
    .is_ok();
    for reader in readers.iter().flatten() {
        reader.abort();
    }
    // Whatever the shell left behind ends with the call. The shell is reaped by now, but its pid
    // stays allocated as the group's id while any member lives; with none left, killpg finds no one
    // (unless the pid was reused as a new group leader within these milliseconds).
    group.kill();

    let killed = status.is_none();
    let mut content = match status {
        Some(status) => exit_line(status),
        None => format!("killed after {}s timeout", timeout.as_secs_f64()),
    };
    let (stdout, stderr) = capture.take();
    content.push_str(&render(&stdout, &stderr));
    let overflow = capture.overflow.load(Ordering::SeqCst);
    if overflow {
        content.push_str(&format!("\n[output cut at {} bytes]", ctx.max_output_bytes));
    }
    if !drained {
        content.push_str("\n[a background process kept the output open; stopped reading]");
    }
    Ok(ToolOutcome {
        ok: !killed && status.and_then(|s| s.code()) == Some(0),
        content,
        complete: !killed && !overflow && drained,
        overflow: None,
    })
}

fn exit_line(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code: {code}"),
        (None, Some(signal)) => format!("exit code: none (killed by signal {signal})"),
        (None, None) => "exit code: none".to_string(),
    }
}

fn render(stdout: &[u8], stderr: &[u8]) -> String {
    if stdout.is_empty() && stderr.is_empty() {
        return "\n(no output)".to_string();
    }
    let mut out = String::new();
    for (label, bytes) in [("stdout", stdout), ("stderr", stderr)] {
        if bytes.is_empty() {
            continue;
        }
        out.push_str(&format!("\n--- {label} ---\n"));
        out.push_str(String::from_utf8_lossy(bytes).trim_end_matches('\n'));
    }
    out
}

/// Kills the process group (and the call's cgroup) when told to or when dropped.
pub(crate) struct GroupGuard {
    pub(crate) pgid: Option<u32>,
    pub(crate) cgroup: Option<Cgroup>,
}

impl GroupGuard {
    pub(crate) fn kill(&mut self) {
        if let Some(pgid) = self.pgid.take().and_then(|p| libc::pid_t::try_from(p).ok()) {
            // SAFETY: killpg on the group the shell leads; a group with no members gets ESRCH.
            unsafe { libc::killpg(pgid, libc::SIGKILL) };
        }
        if let Some(cgroup) = self.cgroup.take() {
            cgroup.kill();
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The captured stdout and stderr, sharing one byte budget. Bytes past the budget are read and
/// dropped, so the command never blocks on a full pipe.
struct Capture {
    buffers: Arc<[Mutex<Vec<u8>>; 2]>,
    budget: Arc<AtomicUsize>,
    overflow: Arc<AtomicBool>,
}

impl Capture {
    fn new(max_bytes: usize) -> Capture {
        Capture {
            buffers: Arc::new([Mutex::new(Vec::new()), Mutex::new(Vec::new())]),
            budget: Arc::new(AtomicUsize::new(max_bytes)),
            overflow: Arc::new(AtomicBool::new(false)),
        }
    }

    fn drain(&self, mut reader: impl AsyncRead + Unpin + Send + 'static, index: usize) -> JoinHandle<()> {
        let buffers = self.buffers.clone();
        let budget = self.budget.clone();
        let overflow = self.overflow.clone();
        tokio::spawn(async move {
            let mut chunk = vec![0u8; 16 * 1024];
            loop {
                let n = match reader.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                let left = budget
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| Some(left.saturating_sub(n)));
                let keep = left.unwrap_or(0).min(n);
                if keep > 0 {
                    buffers[index].lock().extend_from_slice(&chunk[..keep]);
                }
                if keep < n {
                    overflow.store(true, Ordering::SeqCst);
                }
            }
        })
    }

    fn take(&self) -> (Vec<u8>, Vec<u8>) {
        (std::mem::take(&mut *self.buffers[0].lock()), std::mem::take(&mut *self.buffers[1].lock()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentd_policies::observations::command_of;
    use proptest::prelude::*;

    fn arguments_text() -> impl Strategy<Value = String> {
        let object = (".{0,16}", any::<bool>()).prop_map(|(command, twice)| {
            let text = serde_json::json!({ "command": command, "timeout_s": 3 }).to_string();
            if twice {
                serde_json::Value::String(text).to_string()
            } else {
                text
            }
        });
        prop_oneof![object, ".{0,24}"]
    }

    proptest! {
        /// The command `run_command` runs is the key its failure is observed under, however the
        /// model encoded its arguments: a later success of the same command resolves the failure.
        #[test]
        fn the_command_run_is_the_observation_key(text in arguments_text()) {
            if let Ok(args) = Args::parse(ToolName::RunCommand.as_str(), &text) {
                if let Ok(CommandArgs { command, .. }) = CommandArgs::parse(&args) {
                    prop_assert_eq!(command_of(&text), command);
                }
            }
        }
    }
}
