//! System prompts, one per role. Deterministic: the same inputs give the same text, byte for byte, so
//! the provider's cached prompt prefix survives restarts.

use agentd_protocol::Role;
use std::path::Path;

/// The system prompt for `role` working in `workspace`.
///
/// `custom` is the configured prompt: for a specialist it is the role description; for the lead and
/// the coder it is appended as additional instructions. `delegates` are the roles the lead may hand
/// work to (the coder is assumed when empty); other roles ignore it.
pub fn system_prompt(role: &Role, custom: Option<&str>, workspace: &Path, delegates: &[Role]) -> String {
    let custom = custom.map(str::trim).filter(|c| !c.is_empty());
    // An instance (`coder#2`) is prompted as its role is.
    let role = role.base();
    let mut out = match role {
        Role::Lead => lead(delegates),
        Role::Coder => CODER.to_string(),
        Role::Specialist(name) => specialist(name, custom),
        Role::Instance(_) => specialist(role.name(), custom),
    };
    out.push_str(&common(workspace));
    if let (Role::Lead | Role::Coder, Some(custom)) = (role, custom) {
        out.push_str("\n\nAdditional instructions:\n");
        out.push_str(custom);
    }
    out
}

fn lead(delegates: &[Role]) -> String {
    let team = if delegates.is_empty() {
        Role::Coder.to_string()
    } else {
        delegates.iter().map(Role::name).collect::<Vec<_>>().join(", ")
    };
    format!(
        "You are the lead of a small team of software agents. You plan the work, inspect the code, and \
         delegate; you do not edit files yourself.\n\
         \n\
         How to work:\n\
         1. Understand the objective. Inspect the workspace with read_file, list_dir and search.\n\
         2. Make a short plan.\n\
         3. Hand every change to a teammate with delegate: `to` is the teammate, `objective` says \
         precisely what to do, which files are involved and how to check the result. The teammate \
         answers with a summary of what it did.\n\
         4. Check the result by reading the changed files; delegate again if something is missing.\n\
         5. End with finish, giving a summary of what was done and anything left open.\n\
         \n\
         Teammates you can delegate to: {team}."
    )
}

const CODER: &str =
    "You are the coder of a small team of software agents. You receive an objective and make \
     the change yourself.\n\
     \n\
     How to work:\n\
     1. Inspect the relevant code with read_file, list_dir and search before changing it.\n\
     2. Make the change with edit_file (old_text must occur exactly once in the file) or write_file \
     (creates or replaces a whole file).\n\
     3. Run the project's checks (build, tests, linters) with run_command and fix what fails.\n\
     4. End with finish, summarising what changed: the files touched, the checks you ran and their \
     results, and anything left undone.";

fn specialist(name: &str, custom: Option<&str>) -> String {
    let mut out = match custom {
        Some(custom) => custom.to_string(),
        None => format!("You are the {name} specialist of a small team of software agents."),
    };
    out.push_str(
        "\n\nYou receive an objective from the lead. Use your tools to carry it out. End with finish, \
         giving a summary of what you found or did, precise enough for the lead to act on.",
    );
    out
}

fn common(workspace: &Path) -> String {
    format!(
        "\n\nThe workspace is {}. Tool paths are relative to the workspace (use \".\" for its root); \
         absolute paths and paths leading outside it are refused. When a note names an evidence id, \
         read it with read_evidence. Be concise, and call finish exactly once, when the work is done.",
        workspace.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> usize {
        s.split_whitespace().count()
    }

    #[test]
    fn prompts_are_concise_and_deterministic() {
        let ws = Path::new("/srv/project");
        let roles = [Role::Lead, Role::Coder, Role::specialist("reviewer")];
        for role in roles {
            let a = system_prompt(
                &role,
                Some("You review diffs."),
                ws,
                &[Role::Coder, Role::specialist("reviewer")],
            );
            let b = system_prompt(
                &role,
                Some("You review diffs."),
                ws,
                &[Role::Coder, Role::specialist("reviewer")],
            );
            assert_eq!(a, b);
            assert!(words(&a) < 250, "{} prompt has {} words", role, words(&a));
            assert!(a.contains("/srv/project"));
            assert!(a.contains("relative to the workspace"));
            assert!(a.contains("finish"));
        }
    }

    #[test]
    fn lead_names_its_delegates() {
        let p =
            system_prompt(&Role::Lead, None, Path::new("/w"), &[Role::Coder, Role::specialist("reviewer")]);
        assert!(p.contains("delegate"));
        assert!(p.contains("coder, reviewer"));
        let p = system_prompt(&Role::Lead, None, Path::new("/w"), &[]);
        assert!(p.contains("delegate to: coder."));
    }

    #[test]
    fn coder_mentions_checks() {
        let p = system_prompt(&Role::Coder, None, Path::new("/w"), &[]);
        assert!(p.contains("run_command"));
        assert!(!p.contains("Additional instructions"));
        let p = system_prompt(&Role::Coder, Some("Use tabs."), Path::new("/w"), &[]);
        assert!(p.ends_with("Additional instructions:\nUse tabs."));
    }

    #[test]
    fn specialist_uses_custom_prompt() {
        let role = Role::specialist("reviewer");
        let p = system_prompt(&role, Some("You review diffs for correctness."), Path::new("/w"), &[]);
        assert!(p.starts_with("You review diffs for correctness."));
        assert!(p.contains("summary"));
        let p = system_prompt(&role, None, Path::new("/w"), &[]);
        assert!(p.starts_with("You are the reviewer specialist"));
    }
}
