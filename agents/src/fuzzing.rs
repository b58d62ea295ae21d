//! Entry points for the fuzz targets (`fuzz/`) and the property tests (`tests/fuzz_props.rs`): the
//! argument parsing every tool call goes through, without executing anything. Not an API: hidden
//! from the docs, and compiled only with the crate's `fuzzing` feature.

use crate::ToolError;
use agentd_protocol::ToolName;

/// Parses and checks `arguments` (the model's JSON text) for tool `tool` as [`crate::execute`] does
/// before acting, with no filesystem or process effect. `Ok`: the call would run.
pub fn parse_tool_arguments(tool: &str, arguments: &str) -> Result<(), ToolError> {
    crate::tools::check_arguments(&agentd_protocol::ToolName::parse(tool), arguments)
}

/// The workspace path a call would change, as the runtime records it ([`crate::tools::changed_path`]).
pub fn changed_path(tool: &str, arguments: &str) -> Option<String> {
    crate::tools::changed_path(&agentd_protocol::ToolName::parse(tool), arguments)
}

/// The fuzz input format of the `tool_args` target and corpus: the tool's name, a newline, then the
/// arguments text.
pub fn split_input(input: &str) -> (&str, &str) {
    input.split_once('\n').unwrap_or((input, ""))
}

/// `arguments` for `tool`: accepted, or refused with an error that names the tool (bad arguments) or
/// says why the tool cannot run here; accepted arguments stay accepted when encoded once more as a
/// JSON string (as some models send them); and a file tool's accepted call names the path it changes.
pub fn check_tool_arguments(tool: &str, arguments: &str) -> Result<(), String> {
    let result = parse_tool_arguments(tool, arguments);
    match &result {
        Err(ToolError::InvalidArguments { tool: named, message }) => {
            if named != tool || message.is_empty() {
                return Err(format!("bad arguments reported as {named:?}: {message:?}"));
            }
        }
        Err(ToolError::Failed(message)) if !message.is_empty() => {}
        Err(other) => return Err(format!("an unexpected error before any effect: {other:?}")),
        Ok(()) => {
            let encoded = serde_json::Value::String(arguments.trim().to_string()).to_string();
            if arguments.trim_start().starts_with('{') && parse_tool_arguments(tool, &encoded).is_err() {
                return Err(format!("accepted as an object, refused as a string: {encoded}"));
            }
            let changes_a_file = matches!(ToolName::parse(tool), ToolName::WriteFile | ToolName::EditFile);
            if changes_a_file && changed_path(tool, arguments).is_none() {
                return Err("an accepted file change that names no path".into());
            }
        }
    }
    Ok(())
}
