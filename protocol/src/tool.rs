//! The names of the tools a model can be given.
//!
//! A model names a tool by a word (`"read_file"`); everywhere past (de)serialisation it is a
//! [`ToolName`]. A name no built-in tool answers to (a model's invention, a tool of a newer build in
//! an old log) is kept whole as [`ToolName::Other`], so nothing read from the wire is lost.

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
    /// Hand a sub-task to a teammate.
    Delegate,
    /// End the role's turn with a summary.
    Finish,
    /// A name no built-in tool answers to.
    Other(String),
}

impl ToolName {
    /// Every built-in tool, in the order tool lists show them.
    pub const BUILTIN: [ToolName; 9] = [
        ToolName::ReadFile,
        ToolName::ListDir,
        ToolName::Search,
        ToolName::WriteFile,
        ToolName::EditFile,
        ToolName::RunCommand,
        ToolName::ReadEvidence,
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
            ToolName::Delegate => "delegate",
            ToolName::Finish => "finish",
            ToolName::Other(name) => name,
        }
    }

    /// The tool a model's word names.
    pub fn parse(name: &str) -> ToolName {
        ToolName::BUILTIN
            .iter()
            .find(|t| t.as_str() == name)
            .cloned()
            .unwrap_or_else(|| ToolName::Other(name.to_string()))
    }

    /// Whether agentd itself implements this tool.
    pub fn is_builtin(&self) -> bool {
        !matches!(self, ToolName::Other(_))
    }

    /// Whether the tool changes the workspace.
    pub fn writes(&self) -> bool {
        matches!(self, ToolName::WriteFile | ToolName::EditFile | ToolName::RunCommand)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_names_round_trip_and_others_are_kept() {
        for tool in ToolName::BUILTIN {
            assert_eq!(ToolName::parse(tool.as_str()), tool);
            assert!(tool.is_builtin());
        }
        let other = ToolName::parse("mcp__git__status");
        assert_eq!(other, ToolName::Other("mcp__git__status".into()));
        assert_eq!(serde_json::to_string(&other).unwrap(), "\"mcp__git__status\"");
        assert_eq!(serde_json::from_str::<ToolName>("\"run_command\"").unwrap(), ToolName::RunCommand);
    }
}
