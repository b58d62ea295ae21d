//! The JSON schemas of the tools, as the models see them. Provider clients wrap these in their own
//! wire shapes; this module knows nothing of those.

use crate::tools::search::{DEFAULT_MAX_RESULTS, MAX_CONTEXT, MAX_MAX_RESULTS};
use agentd_protocol::{ToolName, ToolSchema};
use serde_json::{json, Value};
use thiserror::Error;

/// A tool name that is no built-in tool, so it has no schema. Holds the name.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unknown tool: {0}")]
pub struct UnknownTool(pub String);

/// The schema of one tool, or `None` for a name that is not a built-in tool.
pub fn schema(tool: &ToolName) -> Option<ToolSchema> {
    let (description, properties, required): (&str, Value, &[&str]) = match tool {
        ToolName::ReadFile => (
            "Read a text file in the workspace. Without offset/limit the whole file is returned.",
            json!({
                "path": path_prop("File path, relative to the workspace."),
                "offset": {"type": "integer", "minimum": 1, "description": "First line to return (1-based)."},
                "limit": {"type": "integer", "minimum": 1, "description": "Number of lines to return."}
            }),
            &["path"],
        ),
        ToolName::ListDir => (
            "List a directory of the workspace (not recursive). Directories end with '/'.",
            json!({"path": path_prop("Directory path, relative to the workspace; \".\" is the root.")}),
            &["path"],
        ),
        ToolName::Search => (
            "Search file contents with a regular expression, recursively, as ripgrep does: .gitignore, \
             .ignore and .rgignore are respected, hidden and binary files skipped, files sorted by path. \
             Prints path:line:text for each matching line (path-line-text for context lines, -- between \
             groups). At most max_results matching lines and 32 KiB are shown; the rest is counted, and \
             the complete output is kept as evidence you can read on with read_evidence.",
            json!({
                "pattern": {"type": "string", "description": "A regular expression (Rust/ripgrep syntax: \\b, \\w, (a|b), .*?), matched against each line. With fixed_strings, the exact text."},
                "path": path_prop("File or directory to search, relative to the workspace; default \".\". A path named here is searched even if ignored."),
                "glob": {"type": "array", "items": {"type": "string"}, "description": "Only files matching these globs (\"*.rs\", \"src/**/*.ts\"); a glob starting with ! excludes (\"!*.md\"). Like rg -g."},
                "fixed_strings": {"type": "boolean", "description": "Search for the pattern as literal text, not a regex (rg -F)."},
                "case_insensitive": {"type": "boolean", "description": "Ignore case (rg -i)."},
                "context": {"type": "integer", "minimum": 0, "maximum": MAX_CONTEXT, "description": "Lines of context before and after each match (rg -C)."},
                "max_results": {"type": "integer", "minimum": 1, "maximum": MAX_MAX_RESULTS, "description": format!("Matching lines to show (default {DEFAULT_MAX_RESULTS}).")},
                "hidden": {"type": "boolean", "description": "Also search hidden files and directories (rg --hidden); .git never."},
                "no_ignore": {"type": "boolean", "description": "Also search files that .gitignore/.ignore exclude (rg --no-ignore)."}
            }),
            &["pattern"],
        ),
        ToolName::WriteFile => (
            "Create or replace a file with the given content. Missing parent directories are created.",
            json!({
                "path": path_prop("File path, relative to the workspace."),
                "content": {"type": "string", "description": "The complete new content of the file."}
            }),
            &["path", "content"],
        ),
        ToolName::EditFile => (
            "Replace one occurrence of old_text with new_text in a file. old_text must occur exactly once.",
            json!({
                "path": path_prop("File path, relative to the workspace."),
                "old_text": {"type": "string", "description": "The exact text to replace, unique in the file."},
                "new_text": {"type": "string", "description": "The replacement text."}
            }),
            &["path", "old_text", "new_text"],
        ),
        ToolName::RunCommand => (
            "Run a shell command (sh -c) in the workspace root. Returns the exit code and the output.",
            json!({
                "command": {"type": "string", "description": "The shell command line."},
                "timeout_s": {"type": "integer", "minimum": 1, "description": "Seconds before the command is killed."}
            }),
            &["command"],
        ),
        ToolName::ReadEvidence => (
            "Read archived evidence (earlier tool output or conversation) by its id, a page at a time.",
            json!({
                "id": {"type": "string", "description": "The evidence id."},
                "offset": {"type": "integer", "minimum": 0, "description": "Where to start reading; 0 is the beginning."},
                "limit": {"type": "integer", "minimum": 1, "description": "How much to return in this page."}
            }),
            &["id"],
        ),
        ToolName::Remember => (
            "Save a durable note for later tasks — only what the user asked to be remembered or stated as a \
             lasting preference or project convention, resting on the user's own words, quoted verbatim from a \
             message of this task. The user sees every note and can undo it.",
            json!({
                "note": {"type": "string", "description": "What to remember, short and self-contained."},
                "quote": {"type": "string", "description": "The user's own words this rests on, copied verbatim from one of their messages in this task."},
                "scope": {"type": "string", "enum": ["workspace", "user"], "description": "workspace (default): this project's later tasks; user: every later task of this user."}
            }),
            &["note", "quote"],
        ),
        ToolName::Delegate => (
            "Hand a piece of work to a teammate and wait for its summary.",
            json!({
                "to": {"type": "string", "description": "The teammate: \"coder\" or a specialist's name."},
                "objective": {"type": "string", "description": "What to do, which files, and how to check it."},
                "budget_tokens": {"type": "integer", "minimum": 1, "description": "Optional: the most tokens the teammate's requests may use; past it, it stops and you get what it did so far."},
                "deadline": {"type": "number", "exclusiveMinimum": 0, "description": "Optional: the most seconds the teammate may work; past it, it stops and you get what it did so far."}
            }),
            &["to", "objective"],
        ),
        ToolName::Finish => (
            "End your work and report the result.",
            json!({"summary": {"type": "string", "description": "What was done, and anything left open."}}),
            &["summary"],
        ),
        // An MCP tool's schema is its server's (listed at run time); an unknown name has none.
        ToolName::Mcp(_) | ToolName::Other(_) => return None,
    };
    Some(ToolSchema {
        name: tool.as_str().to_string(),
        description: description.to_string(),
        parameters: json!({
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": false,
        }),
    })
}

/// The schemas of `names`, in the given order; the first unknown name is an error.
pub fn schemas(tools: &[ToolName]) -> Result<Vec<ToolSchema>, UnknownTool> {
    tools.iter().map(|t| schema(t).ok_or_else(|| UnknownTool(t.to_string()))).collect()
}

fn path_prop(description: &str) -> Value {
    json!({"type": "string", "description": description})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roles::ALL_TOOLS;

    #[test]
    fn every_tool_has_a_closed_object_schema() {
        for name in ALL_TOOLS {
            let s = schema(name).unwrap();
            assert_eq!(s.name, name.as_str());
            let p = &s.parameters;
            assert_eq!(p["type"], "object");
            assert_eq!(p["additionalProperties"], false);
            for req in p["required"].as_array().unwrap() {
                assert!(p["properties"].get(req.as_str().unwrap()).is_some(), "{name}: {req}");
            }
        }
    }

    #[test]
    fn required_fields() {
        let req = |n: &str| schema(&ToolName::parse(n)).unwrap().parameters["required"].clone();
        assert_eq!(req("edit_file"), json!(["path", "old_text", "new_text"]));
        assert_eq!(req("read_file"), json!(["path"]));
        assert_eq!(req("search"), json!(["pattern"]));
        assert_eq!(req("run_command"), json!(["command"]));
        assert_eq!(req("delegate"), json!(["to", "objective"]));
        assert!(schema(&ToolName::ReadFile).unwrap().parameters["properties"].get("offset").is_some());
    }

    #[test]
    fn schemas_keep_order_and_refuse_unknown() {
        let names = vec![ToolName::Finish, ToolName::ReadFile];
        let got: Vec<_> = schemas(&names).unwrap().into_iter().map(|s| s.name).collect();
        assert_eq!(got, ["finish", "read_file"]);
        let bad = vec![ToolName::ReadFile, ToolName::parse("rm_rf")];
        assert_eq!(schemas(&bad), Err(UnknownTool("rm_rf".into())));
        assert!(schema(&ToolName::parse("nope")).is_none());
    }

    #[test]
    fn serialises_flat() {
        let v = serde_json::to_value(schema(&ToolName::Finish).unwrap()).unwrap();
        assert_eq!(v["name"], "finish");
        assert!(v["description"].is_string());
        assert_eq!(v["parameters"]["properties"]["summary"]["type"], "string");
    }
}
