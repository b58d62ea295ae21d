//! MCP, both ways: the configured servers' tools for the team ([`client`]), and agentd itself as an
//! MCP server that other agents hand work to ([`server`], `agentd mcp`).
//!
//! **As a client.** Each task has its own [`TaskServers`]: for every `[mcp.servers.NAME]`, a
//! connection started the first time a role that gets the server's tools starts a turn (a stdio
//! server runs in the task's workspace, so it cannot be shared between tasks), kept for the task,
//! and closed when the task ends. Its tools join the role's tools as `mcp__NAME__TOOL` with the
//! server's own schemas, so the fitter counts them with the other tool schemas; a call goes to the
//! server with the configured timeout and its result — text, and images by the provider's rule — is
//! sized like any tool result (whole when it fits, else evidence with a first page) and redacted.
//! A server that is down, a tool that errors, a timeout or an invalid result is an error result the
//! model reads ([`McpError`]), never a failed turn. A server that crashed or could not start is
//! started again at its next use, no sooner than `policies::retry::restart_delay_ms` after its
//! failure (1 s, 2 s, 4 s … 60 s; from 0 again once a call succeeds).
//!
//! **As a server.** [`server::serve_stdio`] answers MCP on stdin and stdout with the tools
//! `submit_task`, `task_status`, `task_events`, `task_message`, `cancel_task` and `read_evidence`,
//! each one request to the running daemon over its socket.

pub mod client;
pub mod content;
mod error;
pub mod health;
pub mod reach;
pub mod server;

pub use client::TaskServers;
pub use error::McpError;
pub use health::McpHealth;
