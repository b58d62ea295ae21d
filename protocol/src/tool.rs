//! The names of the tools a model can be given.
//!
//! A model names a tool by a word (`"read_file"`); everywhere past (de)serialisation it is a
//! [`ToolName`]. A name no built-in tool answers to (a model's invention, a tool of a newer build in
//! an old log) is kept whole as [`ToolName::Other`], so nothing read from the wire is lost.
//!
//! A tool of a configured MCP server is [`ToolName::Mcp`]: on the wire `mcp__SERVER__TOOL`
//! ([`McpTool`]), so a model sees which server a tool comes from and two servers' tools of the same
//! name never collide.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A tool's name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(from = "String", into = "String")]
#[schemars(with = "String")]
pub enum ToolName {
    /// Read a file, or a range of its lines.
    ReadFile,
    /// List a directory.
    ListDir,
    /// Search file contents.
    Search,
    /// Write a whole file.
    WriteFile,
    /// Replace one exact text in a file.
    EditFile,
    /// Run a shell command in the sandbox.
    RunCommand,
    /// Read a page of an evidence item.
    ReadEvidence,
    /// Save a durable memory note, quoting the user.
    Remember,
    /// Hand a sub-task to a teammate.
    Delegate,
    /// End the role's turn with a summary.
    Finish,
    /// A tool of a configured MCP server (`mcp__SERVER__TOOL`), run by that server.
    Mcp(McpTool),
    /// A name no built-in tool answers to.
    Other(String),
}

impl ToolName {
    /// Every built-in tool, in the order tool lists show them.
    pub const BUILTIN: [ToolName; 10] = [
        ToolName::ReadFile,
        ToolName::ListDir,
        ToolName::Search,
        ToolName::WriteFile,
        ToolName::EditFile,
        ToolName::RunCommand,
        ToolName::ReadEvidence,
        ToolName::Remember,
        ToolName::Delegate,
        ToolName::Finish,
    ];

    /// The word a model calls this tool by.
    pub fn as_str(&self) -> &str {
        match self {
            ToolName::ReadFile => "read_file",
            ToolName::ListDir => "list_dir",
            ToolName::Search => "search",
            ToolName::WriteFile => "write_file",
            ToolName::EditFile => "edit_file",
            ToolName::RunCommand => "run_command",
            ToolName::ReadEvidence => "read_evidence",
            ToolName::Remember => "remember",
            ToolName::Delegate => "delegate",
            ToolName::Finish => "finish",
            ToolName::Mcp(tool) => tool.as_str(),
            ToolName::Other(name) => name,
        }
    }

    /// The tool a model's word names: a built-in, an MCP server's tool (`mcp__SERVER__TOOL`), or
    /// [`ToolName::Other`].
    pub fn parse(name: &str) -> ToolName {
        if let Some(builtin) = ToolName::BUILTIN.iter().find(|t| t.as_str() == name) {
            return builtin.clone();
        }
        match McpTool::parse(name) {
            Some(tool) => ToolName::Mcp(tool),
            None => ToolName::Other(name.to_string()),
        }
    }

    /// Whether agentd itself implements this tool (an MCP server's tool is not agentd's).
    pub fn is_builtin(&self) -> bool {
        !matches!(self, ToolName::Mcp(_) | ToolName::Other(_))
    }

    /// The MCP server's tool this name means, if it is one.
    pub fn mcp(&self) -> Option<&McpTool> {
        match self {
            ToolName::Mcp(tool) => Some(tool),
            _ => None,
        }
    }

    /// Whether the tool changes the workspace.
    pub fn writes(&self) -> bool {
        matches!(self, ToolName::WriteFile | ToolName::EditFile | ToolName::RunCommand)
    }
}

/// The name of a tool an MCP server offers, as a model sees it: `mcp__SERVER__TOOL`.
///
/// `SERVER` is the name of its `[mcp.servers.SERVER]` table and `TOOL` the name the server gave the
/// tool. The name is split at the first `__` after the prefix, so a server name never contains `__`
/// and never ends with `_` ([`McpTool::valid_server`]); a tool name may contain anything the
/// providers accept. The whole name must be what every provider takes as a function name: ASCII
/// letters, digits, `_` and `-`, at most [`McpTool::MAX_LEN`] bytes. A server tool whose name cannot
/// be written that way is not offered to the models.
///
/// ```
/// use agentd_protocol::tool::McpTool;
/// let tool = McpTool::new("git", "log_oneline").unwrap();
/// assert_eq!(tool.as_str(), "mcp__git__log_oneline");
/// assert_eq!((tool.server(), tool.tool()), ("git", "log_oneline"));
/// assert_eq!(McpTool::parse("mcp__git__log_oneline"), Some(tool));
/// assert_eq!(McpTool::parse("mcp__git"), None);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct McpTool {
    /// The whole name, `mcp__SERVER__TOOL`.
    name: String,
    /// Where `SERVER` ends in `name` (the start of the `__` before `TOOL`).
    server_end: usize,
}

impl McpTool {
    /// What every MCP tool's name starts with.
    pub const PREFIX: &'static str = "mcp__";
    /// What stands between the server's name and the tool's.
    pub const SEPARATOR: &'static str = "__";
    /// The longest function name the providers accept (OpenAI's limit; Anthropic's is larger).
    pub const MAX_LEN: usize = 64;

    /// The name of `server`'s tool `tool`; `None` when the server's name is not valid
    /// ([`McpTool::valid_server`]), the tool's is empty, or the whole is not a name a provider takes.
    pub fn new(server: &str, tool: &str) -> Option<McpTool> {
        if !McpTool::valid_server(server) || tool.is_empty() {
            return None;
        }
        let name = format!("{}{server}{}{tool}", McpTool::PREFIX, McpTool::SEPARATOR);
        let wire_safe = name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !wire_safe || name.len() > McpTool::MAX_LEN {
            return None;
        }
        Some(McpTool { server_end: McpTool::PREFIX.len() + server.len(), name })
    }

    /// The tool a model's word names, when it is an MCP tool's name.
    pub fn parse(name: &str) -> Option<McpTool> {
        let rest = name.strip_prefix(McpTool::PREFIX)?;
        let (server, tool) = rest.split_once(McpTool::SEPARATOR)?;
        McpTool::new(server, tool).filter(|t| t.name == name)
    }

    /// Whether `name` may name an MCP server: not empty, ASCII letters, digits, `-` and `_`, no `__`,
    /// not ending with `_` (so `mcp__SERVER__TOOL` splits back into the same two names).
    pub fn valid_server(name: &str) -> bool {
        !name.is_empty()
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            && !name.contains(McpTool::SEPARATOR)
            && !name.ends_with('_')
    }

    /// The whole name, `mcp__SERVER__TOOL`: what the model calls.
    pub fn as_str(&self) -> &str {
        &self.name
    }

    /// The server's name (its `[mcp.servers.NAME]` table).
    pub fn server(&self) -> &str {
        &self.name[McpTool::PREFIX.len()..self.server_end]
    }

    /// The tool's name on its server: what `tools/call` names.
    pub fn tool(&self) -> &str {
        &self.name[self.server_end + McpTool::SEPARATOR.len()..]
    }
}

impl fmt::Display for McpTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl From<String> for ToolName {
    fn from(name: String) -> ToolName {
        match ToolName::parse(&name) {
            ToolName::Other(_) => ToolName::Other(name),
            builtin => builtin,
        }
    }
}

impl From<&str> for ToolName {
    fn from(name: &str) -> ToolName {
        ToolName::parse(name)
    }
}

impl From<ToolName> for String {
    fn from(tool: ToolName) -> String {
        match tool {
            ToolName::Mcp(tool) => tool.name,
            ToolName::Other(name) => name,
            builtin => builtin.as_str().to_string(),
        }
    }
}

impl fmt::Display for ToolName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One tool as the model is told about it: its name, what it does, and the JSON Schema of its arguments.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolSchema {
    /// The tool's name, as the model calls it (`read_file`).
    pub name: String,
    /// What the tool does, in words for the model.
    pub description: String,
    /// A JSON Schema object describing the arguments.
    pub parameters: serde_json::Value,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_names_round_trip_and_others_are_kept() {
        for tool in ToolName::BUILTIN {
            assert_eq!(ToolName::parse(tool.as_str()), tool);
            assert!(tool.is_builtin());
        }
        let other = ToolName::parse("teleport");
        assert_eq!(other, ToolName::Other("teleport".into()));
        assert!(!other.is_builtin());
        assert_eq!(serde_json::to_string(&other).unwrap(), "\"teleport\"");
        assert_eq!(serde_json::from_str::<ToolName>("\"run_command\"").unwrap(), ToolName::RunCommand);
    }

    #[test]
    fn mcp_tools_are_named_by_server_and_tool_and_round_trip() {
        let status = ToolName::parse("mcp__git__status");
        let tool = status.mcp().unwrap();
        assert_eq!((tool.server(), tool.tool()), ("git", "status"));
        assert!(!status.is_builtin());
        assert_eq!(serde_json::to_string(&status).unwrap(), "\"mcp__git__status\"");
        assert_eq!(serde_json::from_str::<ToolName>("\"mcp__git__status\"").unwrap(), status);
        assert_eq!(String::from(status.clone()), "mcp__git__status");
        // The split is at the first separator: a tool name may hold one, a server name may not.
        let nested = McpTool::parse("mcp__fs__read__file").unwrap();
        assert_eq!((nested.server(), nested.tool()), ("fs", "read__file"));
        assert_eq!(McpTool::new("fs", "read__file").unwrap(), nested);
        for bad_server in ["", "a__b", "git_", "g it", "ü"] {
            assert_eq!(McpTool::new(bad_server, "status"), None, "{bad_server:?}");
        }
        // What a provider would refuse as a function name is no MCP tool name.
        assert_eq!(McpTool::new("git", "log.oneline"), None);
        assert_eq!(McpTool::new("git", ""), None);
        assert_eq!(McpTool::new("git", &"x".repeat(60)), None);
        // Names that do not split back are kept as they came.
        for kept in ["mcp__", "mcp__git", "mcp__git__", "mcp____x"] {
            assert!(matches!(ToolName::parse(kept), ToolName::Other(_)), "{kept}");
        }
    }
}
