//! The seam to a task's tool servers (MCP): the tools they offer a role, and a call to one.
//!
//! The engine neither starts nor speaks to a server; the daemon does (`agentd_daemon::mcp`), and
//! hands a task's runner its [`ToolServers`]. A turn's `start` asks [`ToolServers::tools_for`] for
//! the role's tools (they join the settings snapshot and the request's tool schemas, after the
//! built-in ones), a call of one of them goes to [`ToolServers::call`], and the runner calls
//! [`ToolServers::shutdown`] when the task's run ends. Whatever goes wrong on the server's side is a
//! [`ToolFailure::Failed`] the model reads as an error result; only a cancel ends the turn.
//!
//! Nothing a server does is silent: a server of the role that offers no tools this turn is named in
//! [`RoleTools::unavailable`] with why (the engine tells the model in the turn's system prompt), and
//! every start and failure is [`ServerNews`] the engine takes after each use and records as an
//! event (`mcp_server_started`, `mcp_server_failed`).

use agentd_protocol::{McpTool, Role, ToolName, ToolSchema};
use futures_util::future::BoxFuture;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// One server tool as a role gets it: its name and the schema the provider is sent.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// `mcp__SERVER__TOOL`.
    pub name: ToolName,
    /// The server's description and input schema, under that name.
    pub schema: ToolSchema,
}

/// What a role gets from the task's tool servers at the start of a turn.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RoleTools {
    /// The tools offered, by server then in each server's order.
    pub tools: Vec<ToolSpec>,
    /// The role's servers that offer nothing this turn, each with why.
    pub unavailable: Vec<Unavailable>,
}

/// A server whose tools a role does not get this turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable {
    /// The server's name (`[mcp.servers.NAME]`).
    pub server: String,
    /// Why, in one line (the start's error, with when it is tried again).
    pub reason: String,
}

/// A server's start or failure, for the task's history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerNews {
    /// It started and listed its tools.
    Started {
        /// The server's name.
        server: String,
        /// How many tools it offers.
        tools: u32,
    },
    /// It failed to start, did not complete the handshake in time, or stopped.
    Failed {
        /// The server's name.
        server: String,
        /// What happened, in words.
        error: String,
        /// When it is started again at the earliest; `None` when that waits for its next use only.
        retry_in: Option<Duration>,
    },
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
    /// cannot start is left out and named in [`RoleTools::unavailable`]. Returns early when
    /// `cancel` fires.
    fn tools_for<'a>(&'a self, role: &'a Role, cancel: &'a CancellationToken) -> BoxFuture<'a, RoleTools>;
    /// Calls `tool` with the model's `arguments`.
    fn call<'a>(
        &'a self,
        tool: &'a McpTool,
        arguments: &'a str,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ToolReply, ToolFailure>>;
    /// Closes every server of the task.
    fn shutdown(&self) -> BoxFuture<'_, ()>;
    /// The starts and failures since the last call, oldest first (each reported once).
    fn news(&self) -> Vec<ServerNews>;
    /// Whether a call of `tool` can change files (its server is marked `writes`): a checkpoint of the
    /// workspace is taken around it, as around `run_command`.
    fn writes(&self, tool: &McpTool) -> bool {
        let _ = tool;
        false
    }
}

/// A task with no tool servers: no tools, and a call names the missing server.
pub struct NoToolServers;

impl ToolServers for NoToolServers {
    fn tools_for<'a>(&'a self, _: &'a Role, _: &'a CancellationToken) -> BoxFuture<'a, RoleTools> {
        Box::pin(async { RoleTools::default() })
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

    fn news(&self) -> Vec<ServerNews> {
        Vec::new()
    }
}
