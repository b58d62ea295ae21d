//! `agentd mcp`: this process becomes an MCP server on stdin and stdout, whose tools submit and
//! follow tasks of the running daemon — how another agent drives agentd.
//!
//! stdout is the MCP channel, so nothing else may print there: the log goes to stderr (warnings
//! only, unless `RUST_LOG` says otherwise).

use crate::exit::{self, fail, Failure};
use agentd_daemon::daemon::Home;
use agentd_daemon::mcp::server::{run_stdio, AgentdMcp};

/// Serves MCP until stdin closes; a task submitted without a workspace runs in the directory this
/// was started in.
pub fn mcp(home: &Home) -> Result<u8, Failure> {
    log_to_stderr();
    let cwd = std::env::current_dir().map_err(|e| fail(exit::USAGE, format!("current directory: {e}")))?;
    let server = AgentdMcp::new(home.socket(), cwd);
    run_stdio(server).map_err(|e| fail(exit::FAILED, e.to_string()))?;
    Ok(exit::OK)
}

/// The log of a command whose stdout is a protocol's channel: on stderr, warnings only unless
/// `RUST_LOG` says otherwise.
pub fn log_to_stderr() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
}
