//! `[providers.NAME]`: the servers the roles' requests go to. Each names the wire format it speaks
//! (`kind`), where it is (`base_url`) and, if it needs a key, the environment variable holding it
//! (`api_key_env`) — never the key itself. Those variables are the secrets other sections must not
//! hand on: the sandbox's and MCP servers' `env` are checked against them ([`key_owner`]).

use super::error::Invalid;
use super::raw::RawProvider;
use super::ConfigError;
use std::collections::BTreeMap;

/// Defined with the wire formats, where the kind names are parsed.
use agentd_providers::ProviderKind;

/// One `[providers.NAME]` table: a server the roles' requests go to.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderConfig {
    /// The provider's name, the `NAME` in `[providers.NAME]`, which roles name as their `provider`.
    pub name: String,
    /// Which wire format the server speaks (`kind`: `openai`, `ollama` or `anthropic`).
    pub kind: ProviderKind,
    /// The server's base URL (`http://` or `https://`, a trailing `/` removed), such as
    /// `http://127.0.0.1:8000/v1`. Windows, calibrations and `compact_at` are remembered per base URL and
    /// model.
    pub base_url: String,
    /// The name of the environment variable that holds the API key, if the server needs one. The key itself
    /// never goes in the file, and its value is redacted from every tool result.
    pub api_key_env: Option<String>,
}

/// Checks every `[providers.NAME]`, in name order; errors name `providers.NAME.kind` or
/// `providers.NAME.base_url`.
pub(super) fn providers(
    raw: BTreeMap<String, RawProvider>,
    invalid: Invalid,
) -> Result<BTreeMap<String, ProviderConfig>, ConfigError> {
    let mut providers = BTreeMap::new();
    for (name, p) in raw {
        let Some(kind) = ProviderKind::parse(&p.kind) else {
            return Err(invalid(
                format!("providers.{name}.kind"),
                format!("unknown provider kind {:?}; expected {}", p.kind, ProviderKind::expected()),
            ));
        };
        if !(p.base_url.starts_with("http://") || p.base_url.starts_with("https://")) {
            return Err(invalid(
                format!("providers.{name}.base_url"),
                format!("must be an http:// or https:// URL, got {:?}", p.base_url),
            ));
        }
        providers.insert(
            name.clone(),
            ProviderConfig {
                name,
                kind,
                base_url: p.base_url.trim_end_matches('/').to_string(),
                api_key_env: p.api_key_env,
            },
        );
    }
    Ok(providers)
}

/// The provider whose `api_key_env` is `var`, if any: a variable that must not be passed on.
pub(super) fn key_owner<'a>(
    providers: &'a BTreeMap<String, ProviderConfig>,
    var: &str,
) -> Option<&'a ProviderConfig> {
    providers.values().find(|p| p.api_key_env.as_deref() == Some(var))
}

#[cfg(test)]
mod tests {
    use super::super::tests::parse;
    use super::super::DEFAULT_CONFIG;
    use super::ProviderKind;

    #[test]
    fn anthropic_kind_parses_and_unknown_kinds_are_named() {
        let text = format!(
            "{DEFAULT_CONFIG}\n[providers.claude]\nkind = \"anthropic\"\nbase_url = \"https://api.anthropic.com/v1/\"\napi_key_env = \"ANTHROPIC_API_KEY\"\n"
        );
        let c = parse(&text).unwrap();
        let p = &c.providers["claude"];
        assert_eq!(p.kind, ProviderKind::Anthropic);
        assert_eq!(p.base_url, "https://api.anthropic.com/v1");
        assert_eq!(p.api_key_env.as_deref(), Some("ANTHROPIC_API_KEY"));
        let bad = DEFAULT_CONFIG.replace("kind = \"openai\"", "kind = \"gemini\"");
        let e = parse(&bad).unwrap_err().to_string();
        assert!(e.contains("providers.local.kind") && e.contains("gemini"), "{e}");
    }
}
