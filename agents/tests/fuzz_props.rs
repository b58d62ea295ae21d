//! The `tool_args` fuzz target's oracle (`agentd_agents::fuzzing`) as property tests, so CI runs it
//! on every build: arbitrary text, JSON objects of arbitrary fields, and random mutations of the
//! committed seed corpus (`fuzz/corpus/tool_args/`: the tool's name, a newline, the arguments).

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use agentd_agents::fuzzing::{check_tool_arguments, parse_tool_arguments, split_input};
use agentd_agents::ToolError;
use proptest::prelude::*;
use std::path::PathBuf;

const TOOLS: &[&str] = &[
    "read_file",
    "write_file",
    "edit_file",
    "list_dir",
    "search",
    "run_command",
    "finish",
    "delegate",
    "read_evidence",
    "teleport",
    "",
];

fn corpus() -> Vec<(String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/tool_args");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&path).unwrap())
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no seed corpus in {}", dir.display());
    files
}

/// `seed` after `edits` (position modulo the length, operation, byte): replace, insert, delete,
/// truncate, or splice in a JSON token. Edits work on chars, so the text stays UTF-8.
fn mutate(seed: &str, edits: &[(usize, u8, u8)]) -> String {
    const SPECIAL: &[&str] = &[
        "\"",
        "{",
        "}",
        "[",
        "]",
        ":",
        ",",
        "\\",
        "null",
        "-1",
        "0",
        "1.5",
        "1e999",
        "\"\"",
        "18446744073709551616",
        "\\u0000",
        "é",
        "\n",
    ];
    let mut out: Vec<char> = seed.chars().collect();
    for &(at, op, byte) in edits {
        let at = if out.is_empty() { 0 } else { at % (out.len() + 1) };
        match op % 5 {
            0 if at < out.len() => out[at] = char::from(byte),
            1 => out.insert(at, char::from(byte)),
            2 if at < out.len() => {
                let end = (at + 1 + byte as usize % 8).min(out.len());
                out.drain(at..end);
            }
            3 => out.truncate(at),
            _ => {
                let s = SPECIAL[byte as usize % SPECIAL.len()];
                out.splice(at..at, s.chars());
            }
        }
    }
    out.into_iter().collect()
}

fn ok(r: Result<(), String>) {
    if let Err(e) = r {
        panic!("{e}");
    }
}

#[test]
fn every_seed_passes_its_oracle_and_parses_as_expected() {
    for (name, input) in corpus() {
        let (tool, arguments) = split_input(&input);
        check_tool_arguments(tool, arguments).unwrap_or_else(|e| panic!("tool_args/{name}: {e}"));
        let accepted = parse_tool_arguments(tool, arguments).is_ok();
        let should = !name.contains("bad")
            && !name.contains("empty")
            && !name.contains("neg")
            && !matches!(tool, "finish" | "delegate" | "teleport");
        assert_eq!(accepted, should, "tool_args/{name}: {:?}", parse_tool_arguments(tool, arguments));
    }
    assert!(matches!(
        parse_tool_arguments("read_file", r#"{"path": 5}"#),
        Err(ToolError::InvalidArguments { tool, message }) if tool == "read_file" && message.contains("`path`")
    ));
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::{json, Value};
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::String),
        Just(json!("src/main.rs")),
        Just(json!("../../etc/passwd")),
    ];
    leaf.prop_recursive(2, 8, 4, |inner| prop::collection::vec(inner, 0..3).prop_map(Value::Array))
}

fn arguments_object() -> impl Strategy<Value = String> {
    let field = prop_oneof![
        Just("path".to_string()),
        Just("content".to_string()),
        Just("old_text".to_string()),
        Just("new_text".to_string()),
        Just("pattern".to_string()),
        Just("command".to_string()),
        Just("timeout_s".to_string()),
        Just("offset".to_string()),
        Just("limit".to_string()),
        Just("glob".to_string()),
        Just("context".to_string()),
        Just("max_results".to_string()),
        Just("fixed_strings".to_string()),
        "[a-z_]{1,8}",
    ];
    prop::collection::btree_map(field, json_value(), 0..6)
        .prop_map(|m| serde_json::Value::Object(m.into_iter().collect()).to_string())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_text_for_any_tool(tool in prop::sample::select(TOOLS), arguments in "\\PC{0,200}") {
        ok(check_tool_arguments(tool, &arguments));
    }

    #[test]
    fn any_object_for_any_tool(tool in prop::sample::select(TOOLS), arguments in arguments_object()) {
        ok(check_tool_arguments(tool, &arguments));
    }

    #[test]
    fn mutated_seeds(i in 0..64usize, edits in prop::collection::vec((any::<usize>(), any::<u8>(), any::<u8>()), 0..8)) {
        let seeds = corpus();
        let input = mutate(&seeds[i % seeds.len()].1, &edits);
        let (tool, arguments) = split_input(&input);
        ok(check_tool_arguments(tool, arguments));
    }
}
