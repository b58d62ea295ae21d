//! The roles of a team: the lead, the coder and the specialists a configuration names.
//!
//! A role is a word on the wire (`"lead"`, `"coder"`, a specialist's name) and a [`Role`] everywhere
//! else: code matches on the variant, never compares the word.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;

/// One member of a team.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(from = "String", into = "String")]
#[schemars(with = "String")]
pub enum Role {
    /// Plans, delegates and finishes the task; the only role a user message reaches.
    Lead,
    /// Changes the workspace: the role with write and command tools.
    Coder,
    /// A configured teammate (`[team.specialists.NAME]`), named by its configuration.
    Specialist(String),
}

impl Role {
    /// The word for this role on the wire and in settings keys.
    pub fn name(&self) -> &str {
        match self {
            Role::Lead => "lead",
            Role::Coder => "coder",
            Role::Specialist(name) => name,
        }
    }

    /// `"lead"` and `"coder"` are the fixed roles; any other name is a specialist.
    pub fn parse(name: &str) -> Role {
        match name {
            "lead" => Role::Lead,
            "coder" => Role::Coder,
            other => Role::Specialist(other.to_string()),
        }
    }

    /// A specialist of that name.
    pub fn specialist(name: impl Into<String>) -> Role {
        Role::parse(&name.into())
    }

    /// Whether this is one of the fixed roles every team has.
    pub fn is_fixed(&self) -> bool {
        !matches!(self, Role::Specialist(_))
    }
}

impl From<String> for Role {
    fn from(name: String) -> Role {
        match name.as_str() {
            "lead" => Role::Lead,
            "coder" => Role::Coder,
            _ => Role::Specialist(name),
        }
    }
}

impl From<&str> for Role {
    fn from(name: &str) -> Role {
        Role::parse(name)
    }
}

impl From<Role> for String {
    fn from(role: Role) -> String {
        match role {
            Role::Specialist(name) => name,
            fixed => fixed.name().to_string(),
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for name in ["lead", "coder", "reviewer"] {
            assert_eq!(Role::parse(name).name(), name);
            let json = serde_json::to_string(&Role::parse(name)).unwrap();
            assert_eq!(json, format!("\"{name}\""));
            assert_eq!(serde_json::from_str::<Role>(&json).unwrap(), Role::parse(name));
        }
        assert_eq!(Role::parse("lead"), Role::Lead);
        assert_eq!(Role::parse("coder"), Role::Coder);
        assert_eq!(Role::parse("reviewer"), Role::Specialist("reviewer".into()));
        assert!(Role::Coder.is_fixed() && !Role::specialist("r").is_fixed());
    }
}
