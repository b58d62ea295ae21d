//! Entry points for the fuzz targets (`fuzz/`) and the property tests (`tests/fuzz_props.rs`): the
//! argument parsing every tool call goes through, without executing anything. Not an API; hidden
//! from the docs.

use crate::ToolError;

/// Parses and checks `arguments` (the model's JSON text) for tool `tool` as [`crate::execute`] does
/// before acting, with no filesystem or process effect. `Ok`: the call would run.
pub fn parse_tool_arguments(tool: &str, arguments: &str) -> Result<(), ToolError> {
    crate::tools::check_arguments(tool, arguments)
}

/// The workspace path a call would change, as the runtime records it ([`crate::tools::changed_path`]).
pub fn changed_path(tool: &str, arguments: &str) -> Option<String> {
    crate::tools::changed_path(tool, arguments)
}
