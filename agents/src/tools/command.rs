//! `run_command`: `sh -c COMMAND` in the workspace root, with a timeout and a cap on captured output.
//!
//! The shell runs in a process group of its own. At the timeout, or when the call is dropped before
//! the shell exits (a cancelled task), the whole group is killed with SIGKILL, so pipelines and
//! children die with the shell. The group is signalled with `sh -c "kill -KILL -PGID"`, since this
//! crate has no libc binding. Processes that leave the group (`setsid`) are not reached. When the shell
//! exits normally, background jobs it left behind are not killed; if they keep the output pipes open,
//! reading stops after a short grace period and the result is marked incomplete.

use super::args::Args;
use super::{ToolContext, ToolOutcome};
use crate::error::ToolError;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
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
                tool: "run_command".into(),
                message: "`command` must not be empty".into(),
            });
        }
        Ok(CommandArgs { command, timeout: args.opt_seconds("timeout_s")? })
    }
}

pub(crate) async fn run_command(ctx: &ToolContext, args: &Args) -> Result<ToolOutcome, ToolError> {
    let CommandArgs { command, timeout } = CommandArgs::parse(args)?;
    let timeout = timeout.unwrap_or(ctx.command_timeout);

    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(ctx.workspace.root())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| ToolError::Failed(format!("could not start sh: {e}")))?;
    // Declared after `child`, so it is dropped first: the group is killed while the shell is not yet
    // reaped and its pid (the group id) cannot have been reused.
    let mut group = GroupGuard { pgid: child.id() };

    let capture = Capture::new(ctx.max_output_bytes);
    let mut readers =
        [child.stdout.take().map(|r| capture.drain(r, 0)), child.stderr.take().map(|r| capture.drain(r, 1))];

    let deadline = Instant::now() + timeout;
    let status = match tokio::time::timeout_at(deadline, child.wait()).await {
        Ok(Ok(status)) => {
            group.disarm();
            Some(status)
        }
        Ok(Err(e)) => return Err(ToolError::Failed(format!("waiting for the command failed: {e}"))),
        Err(_) => {
            group.kill().await;
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

/// Kills the process group when dropped, unless disarmed.
struct GroupGuard {
    pgid: Option<u32>,
}

impl GroupGuard {
    fn disarm(&mut self) {
        self.pgid = None;
    }

    async fn kill(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            let _ = tokio::process::Command::new("sh")
                .args(["-c", &kill_script(pgid)])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .await;
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            let _ = std::process::Command::new("sh")
                .args(["-c", &kill_script(pgid)])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

fn kill_script(pgid: u32) -> String {
    format!("kill -KILL -{pgid}")
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
                    lock(&buffers[index]).extend_from_slice(&chunk[..keep]);
                }
                if keep < n {
                    overflow.store(true, Ordering::SeqCst);
                }
            }
        })
    }

    fn take(&self) -> (Vec<u8>, Vec<u8>) {
        (std::mem::take(&mut *lock(&self.buffers[0])), std::mem::take(&mut *lock(&self.buffers[1])))
    }
}

fn lock(m: &Mutex<Vec<u8>>) -> std::sync::MutexGuard<'_, Vec<u8>> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
