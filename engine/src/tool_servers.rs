//! The seam to a task's tool servers (MCP): the tools they offer a role, and a call to one.
//!
//! The engine neither starts nor speaks to a server; the daemon does (`agentd_daemon::mcp`), and
//! hands a task's runner its [`ToolServers`]. A turn's `start` asks [`ToolServers::tools_for`] for
//! the role's tools (they join the settings snapshot and the request's tool schemas, after the
//! built-in ones), a call of one of them goes to [`ToolServers::call`], and the runner calls
//! [`ToolServers::shutdown`] when the task's run ends. Whatever goes wrong on the server's side is a
//! [`ToolFailure::Failed`] the model reads as an error result; only a cancel ends the turn.

use agentd_protocol::{McpTool, Role, ToolName, ToolSchema};
use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;

/// One server tool as a role gets it: its name and the schema the provider is sent.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// `mcp__SERVER__TOOL`.
    pub name: ToolName,
    /// The server's description and input schema, under that name.
    pub schema: ToolSchema,
}

/// An image a server tool answered, checked by the daemon: a type the providers take and base64
/// that decodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// Its MIME type (`image/png`, `image/jpeg`, `image/gif`, `image/webp`).
    pub media_type: String,
    /// Its bytes, base64 (as the providers take them).
    pub data: String,
    /// Its bytes, decoded: what is stored when it does not fit the request.
    pub bytes: Vec<u8>,
}

/// A server tool's result, ready for the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolReply {
    /// False when the server said the call failed.
    pub ok: bool,
    /// The text blocks and descriptions of the rest, one per line.
    pub text: String,
    /// The images, in order.
    pub images: Vec<Image>,
}

/// Why a server tool's call gave no result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolFailure {
    /// The task was cancelled while the call ran: the turn ends.
    #[error("cancelled")]
    Cancelled,
    /// Anything else (the server down, a timeout, an invalid answer), in words for the model, which
    /// reads it as the call's error result.
    #[error("{0}")]
    Failed(String),
}

/// A task's tool servers.
pub trait ToolServers: Send + Sync {
    /// The server tools `role` gets this turn, starting servers not started yet; a server that
    /// cannot start is left out (and the daemon says so). Returns early when `cancel` fires.
    fn tools_for<'a>(&'a self, role: &'a Role, cancel: &'a CancellationToken)
        -> BoxFuture<'a, Vec<ToolSpec>>;
    /// Calls `tool` with the model's `arguments`.
    fn call<'a>(
        &'a self,
        tool: &'a McpTool,
        arguments: &'a str,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ToolReply, ToolFailure>>;
    /// Closes every server of the task.
    fn shutdown(&self) -> BoxFuture<'_, ()>;
}

/// A task with no tool servers: no tools, and a call names the missing server.
pub struct NoToolServers;

impl ToolServers for NoToolServers {
    fn tools_for<'a>(&'a self, _: &'a Role, _: &'a CancellationToken) -> BoxFuture<'a, Vec<ToolSpec>> {
        Box::pin(async { Vec::new() })
    }

    fn call<'a>(
        &'a self,
        tool: &'a McpTool,
        _: &'a str,
        _: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ToolReply, ToolFailure>> {
        Box::pin(async move {
            Err(ToolFailure::Failed(format!("{tool}: no MCP server {} is configured", tool.server())))
        })
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}
