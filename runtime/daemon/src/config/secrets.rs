//! `[secrets]`: environment variables whose values are secrets, redacted from every tool result like
//! the providers' keys. Only names go in the file; an MCP server's `bearer_env` joins them (see
//! [`super::mcp`]).

use super::error::ConfigError;
use super::error::Invalid;
use super::raw::RawSecrets;

/// Whether `name` can name an environment variable: ASCII letters, digits and `_`, not empty.
pub(super) fn is_env_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `secrets.env`, in file order; a bad name is `secrets.env[i]`.
pub(super) fn secret_env(raw: RawSecrets, invalid: Invalid) -> Result<Vec<String>, ConfigError> {
    let mut secret_env = Vec::new();
    for (i, name) in raw.env.into_iter().enumerate() {
        if !is_env_name(&name) {
            return Err(invalid(
                format!("secrets.env[{i}]"),
                format!("{name:?} is not an environment variable name"),
            ));
        }
        secret_env.push(name);
    }
    Ok(secret_env)
}
