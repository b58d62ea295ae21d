//! Tool-argument parsing: the tool's name, a newline, the model's arguments text. Parses only.
#![no_main]
use agentd_agents::fuzzing::{check_tool_arguments, split_input};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &str| {
    let (tool, arguments) = split_input(input);
    if let Err(e) = check_tool_arguments(tool, arguments) {
        panic!("{e}");
    }
});
