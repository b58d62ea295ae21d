//! Reading a tool's arguments from the JSON text a model produced. Every failure names the tool and
//! the field, so the model can correct its call. Unknown fields are ignored.

use crate::error::ToolError;
use serde_json::{Map, Value};
use std::time::Duration;

#[derive(Debug)]
pub(crate) struct Args {
    tool: String,
    fields: Map<String, Value>,
}

impl Args {
    /// Parses `text` as a JSON object (see [`arguments_object`]).
    pub(crate) fn parse(tool: &str, text: &str) -> Result<Args, ToolError> {
        Ok(Args { tool: tool.to_string(), fields: arguments_object(tool, text)? })
    }

    fn invalid(&self, message: String) -> ToolError {
        invalid(&self.tool, message)
    }

    fn present(&self, field: &str) -> Option<&Value> {
        self.fields.get(field).filter(|v| !v.is_null())
    }

    pub(crate) fn str(&self, field: &str) -> Result<&str, ToolError> {
        self.opt_str(field)?.ok_or_else(|| self.invalid(format!("missing field `{field}`")))
    }

    pub(crate) fn opt_str(&self, field: &str) -> Result<Option<&str>, ToolError> {
        match self.present(field) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => {
                Err(self.invalid(format!("field `{field}` must be a string, got {}", kind(other))))
            }
        }
    }

    /// A boolean; the strings `"true"` and `"false"` are accepted too.
    pub(crate) fn opt_bool(&self, field: &str) -> Result<Option<bool>, ToolError> {
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
    pub(crate) fn opt_strs(&self, field: &str) -> Result<Vec<&str>, ToolError> {
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
    pub(crate) fn opt_u64(&self, field: &str) -> Result<Option<u64>, ToolError> {
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
    pub(crate) fn opt_seconds(&self, field: &str) -> Result<Option<Duration>, ToolError> {
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

/// A tool call's arguments — the JSON text a model produced — as the object every tool takes, built-in
/// or an MCP server's. Empty text is an empty object; an object encoded once more as a JSON string
/// (some models do that) is unwrapped. Anything else is `InvalidArguments` naming `tool`.
pub fn arguments_object(tool: &str, text: &str) -> Result<Map<String, Value>, ToolError> {
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

fn invalid(tool: &str, message: String) -> ToolError {
    ToolError::InvalidArguments { tool: tool.to_string(), message }
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

    #[test]
    fn fields() {
        let a = Args::parse("read_file", r#"{"path":"a","offset":"3","limit":2.0,"x":null}"#).unwrap();
        assert_eq!(a.str("path").unwrap(), "a");
        assert_eq!(a.opt_u64("offset").unwrap(), Some(3));
        assert_eq!(a.opt_u64("limit").unwrap(), Some(2));
        assert_eq!(a.opt_u64("x").unwrap(), None);
        assert_eq!(a.opt_str("missing").unwrap(), None);
    }

    #[test]
    fn errors_name_the_field() {
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
        let a = Args::parse("run_command", r#"{"timeout_s":1.5}"#).unwrap();
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
    fn malformed_json() {
        let e = Args::parse("read_file", r#"{"path": "a""#).unwrap_err().to_string();
        assert!(e.starts_with("invalid arguments for read_file: malformed JSON"), "{e}");
        let e = Args::parse("read_file", "[1,2]").unwrap_err().to_string();
        assert!(e.contains("expected a JSON object, got an array"), "{e}");
        assert!(Args::parse("read_file", "").is_ok());
        let a = Args::parse("read_file", r#""{\"path\":\"x\"}""#).unwrap();
        assert_eq!(a.str("path").unwrap(), "x");
    }
}
