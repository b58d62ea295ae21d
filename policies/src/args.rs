//! The one reader of a tool call's arguments — the JSON text a model produced — for every room that
//! reads them: the workspace tools (`agentd-agents`), the engine's own tools (`finish`, `delegate`,
//! `read_evidence`), the key of a failing command's observation ([`crate::observations::command_of`]),
//! the detail of a result stored as evidence, a delegation resumed after a restart, and the
//! arguments an MCP server's tool is called with. One reader, so a call is read the same way
//! wherever it is looked at: a call that ran is never misread afterwards.
//!
//! It is lenient where models are sloppy, and says exactly what is wrong otherwise:
//! - empty text is an empty object; an object encoded once more as a JSON string is unwrapped;
//! - unknown fields are ignored, and a `null` field is an absent one;
//! - a boolean may be the string `"true"` or `"false"`; a count may be an integral float or a
//!   numeric string; a number of seconds may be a numeric string; a list of strings may be one
//!   string.
//!
//! Every error names the tool and the field ([`ArgsError`]), so the model can correct its call.

use agentd_protocol::ToolName;
use serde_json::{Map, Value};
use std::time::Duration;
use thiserror::Error;

/// Arguments a tool cannot take: bad JSON, not an object, a missing or mistyped field. The message
/// (`Display`) is what the model reads as the call's error result.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid arguments for {tool}: {message}")]
pub struct ArgsError {
    /// The tool called, as the model named it.
    pub tool: String,
    /// What is wrong, naming the field.
    pub message: String,
}

/// A tool call's arguments, read as an object whose fields are then taken one by one.
#[derive(Debug, Clone, PartialEq)]
pub struct Args {
    tool: String,
    fields: Map<String, Value>,
}

impl Args {
    /// Reads `text`, the arguments of a call of `tool`, as a JSON object (see [`arguments_object`]).
    pub fn parse(tool: &str, text: &str) -> Result<Args, ArgsError> {
        Ok(Args { tool: tool.to_string(), fields: arguments_object(tool, text)? })
    }

    /// The tool these arguments were given to.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// An error about these arguments, naming their tool; `message` names the field.
    pub fn invalid(&self, message: impl Into<String>) -> ArgsError {
        invalid(&self.tool, message.into())
    }

    fn present(&self, field: &str) -> Option<&Value> {
        self.fields.get(field).filter(|v| !v.is_null())
    }

    /// A string field that must be there.
    pub fn str(&self, field: &str) -> Result<&str, ArgsError> {
        self.opt_str(field)?.ok_or_else(|| self.invalid(format!("missing field `{field}`")))
    }

    /// A string field that may be absent.
    pub fn opt_str(&self, field: &str) -> Result<Option<&str>, ArgsError> {
        match self.present(field) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => {
                Err(self.invalid(format!("field `{field}` must be a string, got {}", kind(other))))
            }
        }
    }

    /// A boolean; the strings `"true"` and `"false"` are accepted too.
    pub fn opt_bool(&self, field: &str) -> Result<Option<bool>, ArgsError> {
        match self.present(field) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(Value::String(s)) if s.trim() == "true" => Ok(Some(true)),
            Some(Value::String(s)) if s.trim() == "false" => Ok(Some(false)),
            Some(other) => {
                Err(self.invalid(format!("field `{field}` must be true or false, got {}", kind(other))))
            }
        }
    }

    /// A list of strings; one string is a list of one.
    pub fn opt_strs(&self, field: &str) -> Result<Vec<&str>, ArgsError> {
        let not_strings = |got: &Value| {
            self.invalid(format!("field `{field}` must be a string or a list of strings, got {}", kind(got)))
        };
        match self.present(field) {
            None => Ok(Vec::new()),
            Some(Value::String(s)) => Ok(vec![s.as_str()]),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| match item {
                    Value::String(s) => Ok(s.as_str()),
                    other => Err(not_strings(other)),
                })
                .collect(),
            Some(other) => Err(not_strings(other)),
        }
    }

    /// A non-negative integer; an integral float or a numeric string is accepted too.
    pub fn opt_u64(&self, field: &str) -> Result<Option<u64>, ArgsError> {
        let Some(value) = self.present(field) else {
            return Ok(None);
        };
        let parsed = match value {
            Value::Number(n) => n.as_u64().or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= u64::MAX as f64)
                    .map(|f| f as u64)
            }),
            Value::String(s) => s.trim().parse::<u64>().ok(),
            _ => None,
        };
        parsed.map(Some).ok_or_else(|| {
            self.invalid(format!("field `{field}` must be a non-negative integer, got {}", kind(value)))
        })
    }

    /// A positive number of seconds (fractions allowed; a numeric string is accepted too).
    pub fn opt_seconds(&self, field: &str) -> Result<Option<Duration>, ArgsError> {
        let Some(value) = self.present(field) else {
            return Ok(None);
        };
        let secs = match value {
            Value::Number(n) => n.as_f64(),
            Value::String(s) => s.trim().parse::<f64>().ok(),
            _ => None,
        };
        match secs {
            Some(s) if s > 0.0 => Duration::try_from_secs_f64(s)
                .map(Some)
                .map_err(|_| self.invalid(format!("field `{field}` is out of range"))),
            Some(_) => Err(self.invalid(format!("field `{field}` must be positive"))),
            None => {
                Err(self.invalid(format!("field `{field}` must be a number of seconds, got {}", kind(value))))
            }
        }
    }
}

/// A tool call's arguments as the object every tool takes, built-in or an MCP server's. Empty text
/// is an empty object; an object encoded once more as a JSON string (some models do that) is
/// unwrapped. Anything else is an [`ArgsError`] naming `tool`.
pub fn arguments_object(tool: &str, text: &str) -> Result<Map<String, Value>, ArgsError> {
    let text = text.trim();
    let value = if text.is_empty() {
        Value::Object(Map::new())
    } else {
        serde_json::from_str(text).map_err(|e| invalid(tool, format!("malformed JSON: {e}")))?
    };
    let value = match value {
        Value::String(inner) => serde_json::from_str(&inner).unwrap_or(Value::String(inner)),
        other => other,
    };
    match value {
        Value::Object(fields) => Ok(fields),
        other => Err(invalid(tool, format!("expected a JSON object, got {}", kind(&other)))),
    }
}

/// The command a `run_command` call's arguments name (its `command` field), read as `run_command`
/// reads it before running it.
pub fn run_command(text: &str) -> Result<String, ArgsError> {
    Ok(Args::parse(ToolName::RunCommand.as_str(), text)?.str("command")?.to_string())
}

/// What a call of `tool` acted on, in a word: the `path` it named, else the `command` it ran; `None`
/// when its arguments name neither.
pub fn detail(tool: &str, text: &str) -> Option<String> {
    let args = Args::parse(tool, text).ok()?;
    let named = |field: &str| args.opt_str(field).ok().flatten().map(str::to_string);
    named("path").or_else(|| named("command"))
}

fn invalid(tool: &str, message: String) -> ArgsError {
    ArgsError { tool: tool.to_string(), message }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn fields() {
        let a = Args::parse("read_file", r#"{"path":"a","offset":"3","limit":2.0,"x":null}"#).unwrap();
        assert_eq!(a.tool(), "read_file");
        assert_eq!(a.str("path").unwrap(), "a");
        assert_eq!(a.opt_u64("offset").unwrap(), Some(3));
        assert_eq!(a.opt_u64("limit").unwrap(), Some(2));
        assert_eq!(a.opt_u64("x").unwrap(), None);
        assert_eq!(a.opt_str("missing").unwrap(), None);
    }

    #[test]
    fn errors_name_the_tool_and_the_field() {
        let a = Args::parse("edit_file", r#"{"path":"a","new_text":5}"#).unwrap();
        assert_eq!(
            a.str("old_text").unwrap_err().to_string(),
            "invalid arguments for edit_file: missing field `old_text`"
        );
        assert_eq!(
            a.str("new_text").unwrap_err().to_string(),
            "invalid arguments for edit_file: field `new_text` must be a string, got a number"
        );
        assert!(a.opt_u64("path").unwrap_err().to_string().contains("`path`"));
        let a = Args::parse("run_command", r#"{"timeout_s":-1}"#).unwrap();
        assert!(a.opt_seconds("timeout_s").unwrap_err().to_string().contains("must be positive"));
        let a = Args::parse("run_command", r#"{"timeout_s":1e300}"#).unwrap();
        assert!(a.opt_seconds("timeout_s").unwrap_err().to_string().contains("out of range"));
        let a = Args::parse("run_command", r#"{"timeout_s":"1.5"}"#).unwrap();
        assert_eq!(a.opt_seconds("timeout_s").unwrap(), Some(Duration::from_millis(1500)));
    }

    #[test]
    fn booleans_and_lists() {
        let a = Args::parse("search", r#"{"a":true,"b":"false","c":1,"g":"*.rs","h":["*.rs","!x"],"i":[1]}"#)
            .unwrap();
        assert_eq!(a.opt_bool("a").unwrap(), Some(true));
        assert_eq!(a.opt_bool("b").unwrap(), Some(false));
        assert_eq!(a.opt_bool("zz").unwrap(), None);
        assert!(a.opt_bool("c").unwrap_err().to_string().contains("field `c` must be true or false"));
        assert_eq!(a.opt_strs("g").unwrap(), ["*.rs"]);
        assert_eq!(a.opt_strs("h").unwrap(), ["*.rs", "!x"]);
        assert!(a.opt_strs("zz").unwrap().is_empty());
        assert!(a
            .opt_strs("i")
            .unwrap_err()
            .to_string()
            .contains("a string or a list of strings, got a number"));
    }

    #[test]
    fn malformed_json_and_other_values() {
        let e = Args::parse("read_file", r#"{"path": "a""#).unwrap_err().to_string();
        assert!(e.starts_with("invalid arguments for read_file: malformed JSON"), "{e}");
        let e = Args::parse("read_file", "[1,2]").unwrap_err().to_string();
        assert_eq!(e, "invalid arguments for read_file: expected a JSON object, got an array");
        let e = Args::parse("read_file", r#""not an object""#).unwrap_err().to_string();
        assert!(e.ends_with("expected a JSON object, got a string"), "{e}");
        assert_eq!(arguments_object("t", "  ").unwrap(), Map::new());
    }

    #[test]
    fn a_double_encoded_object_is_read_as_the_object() {
        let once = r#"{"command":"cargo test","timeout_s":5}"#;
        let twice = Value::String(once.into()).to_string();
        assert_eq!(
            arguments_object("run_command", &twice).unwrap(),
            arguments_object("run_command", once).unwrap()
        );
        assert_eq!(run_command(&twice).unwrap(), "cargo test");
        assert_eq!(
            detail("write_file", r#""{\"path\":\"a.rs\",\"content\":\"\"}""#).as_deref(),
            Some("a.rs")
        );
        // Encoded twice more is not unwrapped again: once is what models do.
        let thrice = Value::String(twice).to_string();
        assert!(run_command(&thrice).is_err());
    }

    #[test]
    fn the_named_fields() {
        assert_eq!(
            run_command(r#"{"cmd":"x"}"#).unwrap_err().to_string(),
            "invalid arguments for run_command: missing field `command`"
        );
        assert_eq!(detail("run_command", r#"{"command":"make","path":7}"#).as_deref(), Some("make"));
        assert_eq!(detail("read_file", r#"{"path":"a","command":"b"}"#).as_deref(), Some("a"));
        assert_eq!(detail("list_dir", "{oops"), None);
    }

    proptest! {
        /// Whatever the text, reading it never panics, and an object is read the same whether it
        /// comes once or encoded once more as a JSON string.
        #[test]
        fn any_text_is_read_or_refused_naming_the_tool(text in ".{0,64}") {
            match arguments_object("t", &text) {
                Ok(fields) if text.trim_start().starts_with('{') => {
                    let twice = Value::String(text.trim().to_string()).to_string();
                    prop_assert_eq!(arguments_object("t", &twice).unwrap(), fields);
                }
                Ok(_) => {}
                Err(e) => prop_assert!(e.tool == "t" && !e.message.is_empty()),
            }
        }

        /// A string field reads back what was written, once or twice encoded.
        #[test]
        fn a_written_command_is_read_back(command in ".{0,40}", encode_twice in any::<bool>()) {
            let mut text = serde_json::json!({ "command": command }).to_string();
            if encode_twice {
                text = Value::String(text).to_string();
            }
            prop_assert_eq!(run_command(&text).unwrap(), command);
        }
    }
}
