//! The roles of a team and the tools each may use by default.

use agentd_protocol::Role;
use agentd_protocol::ToolName;

/// The lead's tools: it reads the workspace and its evidence, delegates, and finishes; it does not write or
/// run commands.
pub const LEAD_TOOLS: &[ToolName] = &[
    ToolName::ReadFile,
    ToolName::ListDir,
    ToolName::Search,
    ToolName::ReadEvidence,
    ToolName::Remember,
    ToolName::Delegate,
    ToolName::Finish,
];

/// The coder's tools: it reads, writes and edits files, runs commands, and finishes.
pub const CODER_TOOLS: &[ToolName] = &[
    ToolName::ReadFile,
    ToolName::ListDir,
    ToolName::Search,
    ToolName::ReadEvidence,
    ToolName::WriteFile,
    ToolName::EditFile,
    ToolName::RunCommand,
    ToolName::Remember,
    ToolName::Finish,
];

/// A specialist's tools when its configuration names none: read-only, plus `finish`.
pub const SPECIALIST_TOOLS: &[ToolName] =
    &[ToolName::ReadFile, ToolName::ListDir, ToolName::Search, ToolName::ReadEvidence, ToolName::Finish];

/// Every tool a model can be given.
pub const ALL_TOOLS: &[ToolName] = &ToolName::BUILTIN;

/// The tools a role gets when its configuration names none: [`LEAD_TOOLS`], [`CODER_TOOLS`] or
/// [`SPECIALIST_TOOLS`].
pub fn default_tools(role: &Role) -> Vec<ToolName> {
    let names = match role.base() {
        Role::Lead => LEAD_TOOLS,
        Role::Coder => CODER_TOOLS,
        Role::Specialist(_) | Role::Instance(_) => SPECIALIST_TOOLS,
    };
    names.to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_tools_are_known_and_end_with_finish() {
        for role in [Role::Lead, Role::Coder, Role::specialist("x")] {
            let tools = default_tools(&role);
            assert!(tools.iter().all(|t| ALL_TOOLS.contains(t)));
            assert_eq!(tools.last(), Some(&ToolName::Finish));
        }
        assert!(default_tools(&Role::Lead).contains(&ToolName::Delegate));
        assert!(!default_tools(&Role::Lead).contains(&ToolName::WriteFile));
        assert!(default_tools(&Role::Coder).contains(&ToolName::RunCommand));
        assert!(!default_tools(&Role::specialist("r")).contains(&ToolName::WriteFile));
    }
}
