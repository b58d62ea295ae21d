//! Tool execution, confined to the task's workspace.
//!
//! [`execute`] runs the tools that act on the workspace: `read_file`, `list_dir`, `search`,
//! `write_file`, `edit_file` and `run_command`. `delegate`, `finish` and `read_evidence` belong to the
//! runtime, which dispatches them itself; here they only get an error. Whatever the model sends,
//! `execute` answers with a [`ToolOutcome`] — bad arguments and refused paths are outcomes with
//! `ok: false` and a message naming the fault, never a panic.

mod command;
mod context;
mod files;
mod listing;
mod outcome;
pub mod sandbox;
pub(crate) mod search;
pub mod service;

use crate::error::ToolError;
use agentd_policies::args::Args;
use agentd_protocol::text::truncate_chars;
use agentd_protocol::ToolName;
pub use context::{ToolContext, DEFAULT_COMMAND_TIMEOUT, DEFAULT_MAX_OUTPUT_BYTES};
pub(crate) use listing::entries as dir_entries;
pub use outcome::{Overflow, ToolOutcome};
pub use sandbox::{SandboxMode, SandboxPolicy};

/// Tools the runtime executes itself.
pub const RUNTIME_TOOLS: &[ToolName] = &[ToolName::ReadEvidence, ToolName::Delegate, ToolName::Finish];

/// The workspace path a call changes, for the tools that change files (`write_file`, `edit_file`);
/// `None` for every other call, or when the arguments name no path.
pub fn changed_path(tool: &ToolName, arguments: &str) -> Option<String> {
    if !matches!(tool, ToolName::WriteFile | ToolName::EditFile) {
        return None;
    }
    // Read as the tool reads them (a double-encoded object included), so no change goes unnamed.
    let args = Args::parse(tool.as_str(), arguments).ok()?;
    args.opt_str("path").ok()?.map(str::to_string)
}

/// Runs `tool` with `arguments` (the JSON text the model produced) in `ctx`'s workspace. Only the workspace
/// tools run here; the engine's own (`read_evidence`, `remember`, `delegate`, `finish`) get an error outcome.
pub async fn execute(ctx: &ToolContext, tool: &ToolName, arguments: &str) -> ToolOutcome {
    let result = match tool {
        ToolName::ReadFile
        | ToolName::ListDir
        | ToolName::Search
        | ToolName::WriteFile
        | ToolName::EditFile => blocking(ctx, tool, arguments).await,
        ToolName::RunCommand => match Args::parse(tool.as_str(), arguments) {
            Ok(args) => command::run_command(ctx, &args).await,
            Err(e) => Err(e.into()),
        },
        ToolName::ReadEvidence
        | ToolName::Remember
        | ToolName::Delegate
        | ToolName::Finish
        | ToolName::Mcp(_) => Err(ToolError::Failed(format!("tool {tool} is handled by the runtime"))),
        ToolName::Other(name) => {
            Err(ToolError::Failed(format!("unknown tool {}", truncate_chars(name, 100))))
        }
    };
    result.unwrap_or_else(ToolOutcome::from)
}

/// Parses and checks `arguments` for tool `name` exactly as [`execute`] does before it acts, and
/// stops there: no filesystem or process effect. `Ok` means `execute` would go on to act. Only the
/// fuzz entry points ask (`crate::fuzzing`, with the `fuzzing` feature).
#[cfg(feature = "fuzzing")]
pub(crate) fn check_arguments(tool: &ToolName, arguments: &str) -> Result<(), ToolError> {
    if RUNTIME_TOOLS.contains(tool) || tool.mcp().is_some() {
        return Err(ToolError::Failed(format!("tool {tool} is handled by the runtime")));
    }
    if let ToolName::Other(name) = tool {
        return Err(ToolError::Failed(format!("unknown tool {}", truncate_chars(name, 100))));
    }
    let args = Args::parse(tool.as_str(), arguments)?;
    match tool {
        ToolName::ReadFile => files::ReadArgs::parse(&args).map(drop),
        ToolName::WriteFile => files::WriteArgs::parse(&args).map(drop),
        ToolName::EditFile => files::EditArgs::parse(&args).map(drop),
        ToolName::ListDir => listing::ListArgs::parse(&args).map(drop),
        ToolName::Search => search::SearchArgs::parse(&args).map(drop),
        _ => command::CommandArgs::parse(&args).map(drop),
    }
}

/// The filesystem tools run on the blocking pool.
async fn blocking(ctx: &ToolContext, tool: &ToolName, arguments: &str) -> Result<ToolOutcome, ToolError> {
    let ctx = ctx.clone();
    let name = tool.clone();
    let arguments = arguments.to_string();
    let job = tokio::task::spawn_blocking(move || {
        let args = Args::parse(name.as_str(), &arguments)?;
        match name {
            ToolName::ReadFile => files::read_file(&ctx, &args),
            ToolName::WriteFile => files::write_file(&ctx, &args),
            ToolName::EditFile => files::edit_file(&ctx, &args),
            ToolName::ListDir => listing::list_dir(&ctx.workspace, &args),
            ToolName::Search => search::search(&ctx, &args),
            other => Err(ToolError::Failed(format!("unknown tool {other}"))),
        }
    });
    job.await.unwrap_or_else(|e| Err(ToolError::Failed(format!("{tool} failed: {e}"))))
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod sandbox_tests;
