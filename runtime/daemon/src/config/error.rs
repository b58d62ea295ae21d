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
    #[error("{path}: {message}")]
    Parse {
        /// The configuration file.
        path: PathBuf,
        /// The TOML parser's message, on one line.
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
