//! What a tool call runs with ([`ToolContext`]): the workspace it is confined to, and the limits
//! of the calls with their defaults.

use super::sandbox::SandboxPolicy;
use crate::workspace::Workspace;
use std::time::Duration;

/// How long `run_command` lets a command run when neither the call nor `tools.command_timeout` says.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(120);
/// The cap on output held in memory: a command's captured output, or the text `read_file` returns.
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 8 * 1024 * 1024;
/// What a tool call runs with: the workspace it is confined to and the limits of the calls.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The task's workspace, opened once; every file the tools touch is opened beneath it.
    pub workspace: Workspace,
    /// The `run_command` timeout when the call names none.
    pub command_timeout: Duration,
    /// See [`DEFAULT_MAX_OUTPUT_BYTES`].
    pub max_output_bytes: usize,
    /// The sandbox `run_command` runs in.
    pub sandbox: SandboxPolicy,
}

impl ToolContext {
    /// A context with the default timeout, output cap and sandbox (`workspace-write`, no network).
    pub fn new(workspace: Workspace) -> ToolContext {
        ToolContext {
            workspace,
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            sandbox: SandboxPolicy::default(),
        }
    }
}
