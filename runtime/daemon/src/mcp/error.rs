//! Why an MCP tool call, or the listing of a server's tools, gave no result ([`McpError`]): each
//! is what the model reads as the call's error result.

use super::reach;
use std::time::Duration;

/// Why an MCP tool call (or the listing of a server's tools) did not give a result. Each is shown to
/// the model as the call's error result; none fails the turn but [`McpError::Cancelled`].
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// The stdio server's program is not there.
    #[error("cannot start MCP server {server}: {source}")]
    NotFound {
        /// The server's name.
        server: String,
        /// Where it was looked for.
        #[source]
        source: reach::ReachError,
    },
    /// The stdio server's program could not be started (sandbox refused, not executable).
    #[error("cannot start MCP server {server}: {source}{hint}")]
    Spawn {
        /// The server's name.
        server: String,
        /// Why the program did not start.
        #[source]
        source: Box<agentd_agents::tools::service::ServiceError>,
        /// What to change, when it is known (a clause, or empty).
        hint: String,
    },
    /// The HTTP server's `bearer_env` names a variable the daemon does not have.
    #[error("MCP server {server}: its bearer_env {var} is not set in the daemon's environment")]
    NoToken {
        /// The server's name.
        server: String,
        /// The variable `bearer_env` names.
        var: String,
    },
    /// The server did not complete the MCP handshake.
    #[error("MCP server {server} did not start: {source}{said}")]
    Initialize {
        /// The server's name.
        server: String,
        /// What the handshake ran into.
        #[source]
        source: Box<rmcp::service::ClientInitializeError>,
        /// A stdio program's last lines on stderr, as a clause (or empty).
        said: String,
    },
    /// The server did not start and list its tools in time.
    #[error("MCP server {server} did not start within {}s", after.as_secs())]
    StartTimeout {
        /// The server's name.
        server: String,
        /// The startup timeout.
        after: Duration,
    },
    /// A request the server answered with an error, or a transport failure that left it running.
    #[error("MCP server {server}: {what} failed: {source}")]
    Request {
        /// The server's name.
        server: String,
        /// The request (`tools/list`, `tools/call`).
        what: &'static str,
        /// What the SDK reported (boxed: it carries a JSON value, and the error travels in every
        /// `Result` of a call).
        #[source]
        source: Box<rmcp::ServiceError>,
    },
    /// The server went away during the call (a crash, an exit, a closed connection). Whether the
    /// call had an effect is unknown.
    #[error(
        "MCP server {server} stopped during the call ({how}); it is started again at its next use, \
         after {}s",
        retry_in.as_secs()
    )]
    Stopped {
        /// The server's name.
        server: String,
        /// How it ended, as far as agentd saw (`exited with code 7`, `its connection closed`).
        how: String,
        /// How long until it may be started again.
        retry_in: Duration,
    },
    /// The server crashed or failed to start recently and its restart delay has not passed.
    #[error(
        "MCP server {server} is down ({failures} failure(s) in a row, the last: {last}); it is started \
         again in {}s",
        retry_in.as_secs().max(1)
    )]
    Down {
        /// The server's name.
        server: String,
        /// Crashes and failed starts in a row.
        failures: u32,
        /// How long until it may be started again.
        retry_in: Duration,
        /// The last failure, in words.
        last: String,
    },
    /// The call took longer than the server's `timeout` and was cancelled.
    #[error("{tool} took longer than its timeout ({}s) and was cancelled", after.as_secs_f64())]
    Timeout {
        /// The tool, `mcp__SERVER__TOOL`.
        tool: String,
        /// The server's `timeout`.
        after: Duration,
    },
    /// The model's arguments are not a JSON object.
    #[error("invalid arguments for {tool}: {reason}")]
    Arguments {
        /// The tool, `mcp__SERVER__TOOL`.
        tool: String,
        /// What is wrong with them.
        reason: String,
    },
    /// The server's answer is not something agentd can give a model.
    #[error("{tool} answered an invalid result: {reason}")]
    Invalid {
        /// The tool, `mcp__SERVER__TOOL`.
        tool: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The tool names a server this daemon has no `[mcp.servers.NAME]` for.
    #[error("no MCP server {server} is configured")]
    Unknown {
        /// The server's name from the tool's name.
        server: String,
    },
    /// The task was cancelled while the call ran.
    #[error("cancelled")]
    Cancelled,
}

impl McpError {
    /// The error as the model reads it: naming the tool once.
    pub fn for_model(&self, tool: &agentd_protocol::McpTool) -> String {
        match self {
            McpError::Timeout { .. } | McpError::Arguments { .. } | McpError::Invalid { .. } => {
                self.to_string()
            }
            _ => format!("{tool}: {self}"),
        }
    }
}
