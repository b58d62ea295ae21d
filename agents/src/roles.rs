//! The roles of a team and the tools each may use by default.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RoleKind {
    Lead,
    Coder,
    Specialist(String),
}

impl RoleKind {
    /// `"lead"`, `"coder"`, or the specialist's name.
    pub fn name(&self) -> &str {
        match self {
            RoleKind::Lead => "lead",
            RoleKind::Coder => "coder",
            RoleKind::Specialist(name) => name,
        }
    }

    /// `"lead"` and `"coder"` are the fixed roles; any other name is a specialist.
    pub fn parse(s: &str) -> RoleKind {
        match s {
            "lead" => RoleKind::Lead,
            "coder" => RoleKind::Coder,
            other => RoleKind::Specialist(other.to_string()),
        }
    }
}

impl fmt::Display for RoleKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

pub const LEAD_TOOLS: &[&str] = &["read_file", "list_dir", "search", "read_evidence", "delegate", "finish"];

pub const CODER_TOOLS: &[&str] =
    &["read_file", "list_dir", "search", "read_evidence", "write_file", "edit_file", "run_command", "finish"];

/// A specialist's tools when its configuration names none: read-only, plus `finish`.
pub const SPECIALIST_TOOLS: &[&str] = &["read_file", "list_dir", "search", "read_evidence", "finish"];

/// Every tool a model can be given.
pub const ALL_TOOLS: &[&str] = &[
    "read_file",
    "list_dir",
    "search",
    "write_file",
    "edit_file",
    "run_command",
    "read_evidence",
    "delegate",
    "finish",
];

pub fn default_tools(role: &RoleKind) -> Vec<String> {
    let names = match role {
        RoleKind::Lead => LEAD_TOOLS,
        RoleKind::Coder => CODER_TOOLS,
        RoleKind::Specialist(_) => SPECIALIST_TOOLS,
    };
    names.iter().map(|s| s.to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for name in ["lead", "coder", "reviewer"] {
            assert_eq!(RoleKind::parse(name).name(), name);
        }
        assert_eq!(RoleKind::parse("lead"), RoleKind::Lead);
        assert_eq!(RoleKind::parse("coder"), RoleKind::Coder);
        assert_eq!(RoleKind::parse("reviewer"), RoleKind::Specialist("reviewer".into()));
        assert_eq!(RoleKind::Coder.to_string(), "coder");
    }

    #[test]
    fn default_tools_are_known_and_end_with_finish() {
        for role in [RoleKind::Lead, RoleKind::Coder, RoleKind::Specialist("x".into())] {
            let tools = default_tools(&role);
            assert!(tools.iter().all(|t| ALL_TOOLS.contains(&t.as_str())));
            assert_eq!(tools.last().map(String::as_str), Some("finish"));
        }
        assert!(default_tools(&RoleKind::Lead).contains(&"delegate".to_string()));
        assert!(!default_tools(&RoleKind::Lead).contains(&"write_file".to_string()));
        assert!(default_tools(&RoleKind::Coder).contains(&"run_command".to_string()));
        assert!(!default_tools(&RoleKind::Specialist("r".into())).contains(&"write_file".to_string()));
    }
}
