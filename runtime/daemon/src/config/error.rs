//! Why `agentd.toml` was not accepted. Every error names the file; a bad value names its key too,
//! dotted as the user would find it in the file (`team.lead.compact_at`, `scheduler.jobs[0].name`),
//! so the message alone says where to look.

use std::path::{Path, PathBuf};

/// Why `agentd.toml` was not accepted. Each variant names the file; a bad value names its key too
/// (`team.lead.compact_at`).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The configuration file.
        path: PathBuf,
        /// Why it could not be read.
        source: std::io::Error,
    },
    /// The file is not TOML of the expected shape (a syntax error, an unknown key, a wrong type).
    #[error("{path}:\n{message}")]
    Parse {
        /// The configuration file.
        path: PathBuf,
        /// The TOML parser's message as it renders it — the line and a caret under the place, on
        /// lines of their own — with a suggestion for a near-miss key ([`toml_message`]).
        message: String,
    },
    /// A key has a value agentd does not accept.
    #[error("{path}: key `{key}`: {message}")]
    Invalid {
        /// The configuration file.
        path: PathBuf,
        /// The key, dotted (`providers.local.base_url`).
        key: String,
        /// What is wrong with its value.
        message: String,
    },
    /// A provider's `api_key_env` names a variable the daemon's environment does not set (or sets
    /// empty): every request would fail authentication, so `serve` refuses to start.
    #[error(
        "{path}: key `providers.{provider}.api_key_env`: provider {provider:?} takes its API key from \
         the environment variable {var}, which is not set (or empty) for agentd serve; export {var} \
         before starting the daemon, or remove api_key_env if the server needs no key"
    )]
    UnsetKey {
        /// The config file.
        path: PathBuf,
        /// The provider's name (`[providers.NAME]`).
        provider: String,
        /// The variable it names.
        var: String,
    },
}

/// Builds a [`ConfigError::Invalid`] for the file being validated from a key and a message: each
/// section's validation takes one, so it names keys without knowing the file.
pub(super) type Invalid<'a> = &'a dyn Fn(String, String) -> ConfigError;

/// The [`Invalid`] builder for the file at `path`.
pub(super) fn invalid_in(path: &Path) -> impl Fn(String, String) -> ConfigError + '_ {
    move |key: String, message: String| ConfigError::Invalid { path: path.to_path_buf(), key, message }
}

/// A TOML error as the `toml` crate renders it (`TOML parse error at line 3, column 1`, the line,
/// a caret under the place, the reason), its types said in words (`expected i64` is `expected a
/// whole number`), and for an unknown key the known one it is nearest to: ``did you mean
/// `compact_at`?``.
pub fn toml_message(e: &toml::de::Error) -> String {
    let mut text = e.to_string().trim_end().to_string();
    for (rust, words) in [
        ("expected i64", "expected a whole number"),
        ("expected u64", "expected a whole number"),
        ("expected i32", "expected a whole number"),
        ("expected u32", "expected a whole number"),
        ("expected u8", "expected a whole number"),
        ("expected f64", "expected a number"),
        ("expected usize", "expected a whole number"),
    ] {
        text = text.replace(rust, words);
    }
    if let Some(hint) = did_you_mean(e.message()) {
        text.push_str(&format!("\n{hint}"));
    }
    text
}

/// ``did you mean `KEY`?`` for serde's ``unknown field `X`, expected one of `A`, `B` `` (or
/// ``expected `A` ``), when one of the keys is near the unknown one.
fn did_you_mean(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    let (unknown, rest) = rest.split_once('`')?;
    let known: Vec<&str> = rest.split('`').skip(1).step_by(2).collect();
    let (best, score) =
        known.iter().map(|k| (*k, strsim::jaro_winkler(unknown, k))).max_by(|a, b| a.1.total_cmp(&b.1))?;
    (score >= 0.8).then(|| format!("did you mean `{best}`?"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_near_miss_key_gets_a_suggestion_and_a_far_one_none() {
        let m = "unknown field `compact_atx`, expected one of `provider`, `model`, `compact_at`, `tools`";
        assert_eq!(did_you_mean(m).as_deref(), Some("did you mean `compact_at`?"));
        assert_eq!(
            did_you_mean("unknown field `wndow`, expected `window`").as_deref(),
            Some("did you mean `window`?")
        );
        assert_eq!(did_you_mean("unknown field `zzz`, expected one of `provider`, `model`"), None);
        assert_eq!(did_you_mean("invalid type: string \"80%\", expected i64"), None);
    }

    #[test]
    fn the_parser_renders_the_line_and_a_caret_and_types_in_words() {
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Role {
            compact_at: Option<i64>,
            model: Option<String>,
        }
        let e = toml::from_str::<Role>("model = \"m\"\ncompact_atx = 70\n").unwrap_err();
        let text = toml_message(&e);
        assert!(text.starts_with("TOML parse error at line 2, column 1\n"), "{text}");
        assert!(text.contains("2 | compact_atx = 70\n  | ^"), "{text}");
        assert!(text.ends_with("did you mean `compact_at`?"), "{text}");
        let e = toml::from_str::<Role>("compact_at = \"80%\"\n").unwrap_err();
        assert!(toml_message(&e).contains("expected a whole number"), "{}", toml_message(&e));
    }
}
