//! The roles of a team: the lead, the coder and the specialists a configuration names.
//!
//! A role is a word on the wire (`"lead"`, `"coder"`, a specialist's name) and a [`Role`] everywhere
//! else: code matches on the variant, never compares the word.
//!
//! A teammate's role can run more than once in a task (`[team.coder] max_instances`): the first agent
//! of a role is the role itself (`coder`, also written `coder#1`), the second `coder#2`, and so on —
//! each an agent of its own, with its own history, named by that word everywhere a role is. What an
//! instance runs with (its provider, model, tools, prompt) is its role's: [`Role::base`].

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
    /// The second (third …) agent of a teammate's role in one task: `coder#2`. Boxed: a role is in
    /// every event, and the common ones stay a word's size.
    Instance(Box<Instance>),
}

/// The `n`th agent (`n` ≥ 2) of a teammate's role in one task, written `ROLE#n`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Instance {
    of: Box<Role>,
    n: u16,
    /// `ROLE#n`, kept so that [`Role::name`] can lend it.
    name: String,
}

/// The separator between a role and its instance number: `coder#2`.
pub const INSTANCE_MARK: char = '#';

impl Role {
    /// The word for this role on the wire and in settings keys.
    pub fn name(&self) -> &str {
        match self {
            Role::Lead => "lead",
            Role::Coder => "coder",
            Role::Specialist(name) => name,
            Role::Instance(i) => &i.name,
        }
    }

    /// `"lead"` and `"coder"` are the fixed roles; `ROLE#n` is an instance of a teammate's role
    /// (`ROLE#1` is the role itself); any other name is a specialist.
    pub fn parse(name: &str) -> Role {
        if let Some((base, digits)) = name.rsplit_once(INSTANCE_MARK) {
            let numbered = !base.is_empty() && !base.contains(INSTANCE_MARK) && base != "lead";
            if let (true, Ok(n)) = (numbered, digits.parse::<u16>()) {
                // One spelling for each agent: `coder#2`, never `coder#02` or `coder#+2`.
                if n >= 1 && n.to_string() == digits {
                    return Role::parse(base).instance(n);
                }
            }
        }
        match name {
            "lead" => Role::Lead,
            "coder" => Role::Coder,
            other => Role::Specialist(other.to_string()),
        }
    }

    /// The `n`th agent of this role in a task: the role itself for `n` = 1 (or 0), `ROLE#n` after.
    /// The lead is one: it has no instances.
    pub fn instance(&self, n: u16) -> Role {
        let base = self.base().clone();
        if n <= 1 || base == Role::Lead {
            return base;
        }
        let name = format!("{}{INSTANCE_MARK}{n}", base.name());
        Role::Instance(Box::new(Instance { of: Box::new(base), n, name }))
    }

    /// The role whose settings this agent runs with: itself, or the role of an instance.
    pub fn base(&self) -> &Role {
        match self {
            Role::Instance(i) => &i.of,
            other => other,
        }
    }

    /// Which agent of its role this is: 1 for the role itself, `n` for `ROLE#n`.
    pub fn number(&self) -> u16 {
        match self {
            Role::Instance(i) => i.n,
            _ => 1,
        }
    }

    /// A specialist of that name.
    pub fn specialist(name: impl Into<String>) -> Role {
        Role::parse(&name.into())
    }

    /// Whether this is one of the fixed roles every team has.
    pub fn is_fixed(&self) -> bool {
        matches!(self, Role::Lead | Role::Coder)
    }
}

impl From<String> for Role {
    fn from(name: String) -> Role {
        Role::parse(&name)
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
            other => other.name().to_string(),
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

    #[test]
    fn instances_are_named_by_their_role_and_number() {
        let second = Role::parse("coder#2");
        assert_eq!((second.name(), second.base(), second.number()), ("coder#2", &Role::Coder, 2));
        assert_eq!(Role::Coder.instance(2), second);
        assert_eq!(serde_json::to_string(&second).unwrap(), "\"coder#2\"");
        assert_eq!(serde_json::from_str::<Role>("\"coder#2\"").unwrap(), second);
        // The first agent of a role is the role itself.
        assert_eq!(Role::parse("coder#1"), Role::Coder);
        assert_eq!(Role::Coder.instance(1), Role::Coder);
        let reviewer = Role::parse("reviewer#3");
        assert_eq!((reviewer.base(), reviewer.number()), (&Role::specialist("reviewer"), 3));
        assert_eq!(reviewer.instance(5).name(), "reviewer#5", "an instance's instance is its role's");
        // The lead is one; a word that is no instance is a specialist's name.
        assert_eq!(Role::Lead.instance(2), Role::Lead);
        for word in
            ["lead#2", "#2", "a#b", "coder#x", "coder#", "a#b#2", "coder#99999999", "coder#02", "coder#0"]
        {
            assert!(matches!(Role::parse(word), Role::Specialist(_)), "{word}");
            assert_eq!(Role::parse(word).name(), word);
        }
        assert!(!second.is_fixed());
    }
}
