//! `[providers.NAME]`: the servers the roles' requests go to. Each names the wire format it speaks
//! (`kind`), where it is (`base_url`) and, if it needs a key, the environment variable holding it
//! (`api_key_env`) — never the key itself — and how its prompt cache bills a prefix it has seen
//! (`cache`, which prices where a compaction lands). Those variables are the secrets other sections must not
//! hand on: the sandbox's and MCP servers' `env` are checked against them ([`key_owner`]).

use super::error::ConfigError;
use super::error::Invalid;
use super::raw::{RawCache, RawCacheSetting, RawProvider};
use agentd_protocol::{PromptCache, Tokens};
use agentd_providers::{Client, Deadlines};
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
    /// How the server's prompt cache bills a prefix it has seen (`cache = { read_factor, min_tokens }`);
    /// `None`: the kind's own (Anthropic's for `anthropic`), else learned from its usage reports.
    pub cache: Option<PromptCache>,
    /// `cache = false`: no prompt cache at all, neither the kind's own nor one learned.
    pub cache_off: bool,
    /// How many model requests may be in flight to this provider at once (`max_concurrent`, default
    /// [`DEFAULT_MAX_CONCURRENT`]): a team's parallel branches beyond it wait their turn, never fail.
    pub max_concurrent: usize,
}

/// The requests in flight to one provider when `max_concurrent` is not set: enough for a lead and
/// three teammates, few enough not to trip a small account's rate limit.
pub const DEFAULT_MAX_CONCURRENT: usize = 4;

/// The most `max_concurrent` may say.
pub const MAX_CONCURRENT: i64 = 1024;

impl ProviderConfig {
    /// A client of this provider's server, with `api_key` and the requests' `deadlines`, its prompt
    /// cache as declared.
    pub fn connect(&self, api_key: Option<String>, deadlines: Deadlines) -> Client {
        let client = self.kind.connect(&self.base_url, api_key, deadlines).with_cache(self.cache);
        let client = if self.cache_off { client.without_cache() } else { client };
        client.with_max_concurrent(self.max_concurrent)
    }

    /// The API key `api_key_env` names, as `env` reads it (`std::env::var` for the daemon and the
    /// doctor); none when unset or empty.
    pub fn api_key(&self, env: impl Fn(&str) -> Option<String>) -> Option<String> {
        self.api_key_env.as_deref().and_then(env).filter(|k| !k.is_empty())
    }
}

/// The shortest prefix a prompt cache keeps when `min_tokens` is not given: Anthropic's and OpenAI's.
const DEFAULT_CACHE_MIN_TOKENS: u64 = 1024;

/// `cache = { read_factor, min_tokens }`: a factor in `[0, 1]`; errors name `providers.NAME.cache.KEY`.
fn cache(name: &str, raw: RawCache, invalid: Invalid) -> Result<PromptCache, ConfigError> {
    if !(raw.read_factor.is_finite() && (0.0..=1.0).contains(&raw.read_factor)) {
        return Err(invalid(
            format!("providers.{name}.cache.read_factor"),
            format!(
                "must be a number from 0 to 1 (what a cached prompt token costs relative to an uncached one, e.g. 0.1), got {}",
                raw.read_factor
            ),
        ));
    }
    Ok(PromptCache {
        read_factor: raw.read_factor,
        min_tokens: Tokens(raw.min_tokens.unwrap_or(DEFAULT_CACHE_MIN_TOKENS)),
    })
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
        let (cache, cache_off) = match p.cache {
            None => (None, false),
            Some(RawCacheSetting::Declared(c)) => (Some(cache(&name, c, invalid)?), false),
            Some(RawCacheSetting::Off(false)) => (None, true),
            Some(RawCacheSetting::Off(true)) => {
                return Err(invalid(
                    format!("providers.{name}.cache"),
                    "`true` is what no `cache` key means (a cache learned from the usage reports); declare                      `{ read_factor, min_tokens }`, or `false` for none"
                        .into(),
                ))
            }
        };
        let max_concurrent = match p.max_concurrent {
            None => DEFAULT_MAX_CONCURRENT,
            Some(n) if (1..=MAX_CONCURRENT).contains(&n) => n as usize,
            Some(n) => {
                return Err(invalid(
                    format!("providers.{name}.max_concurrent"),
                    format!("must be a count of requests from 1 to {MAX_CONCURRENT}, got {n}"),
                ))
            }
        };
        providers.insert(
            name.clone(),
            ProviderConfig {
                name,
                kind,
                base_url: p.base_url.trim_end_matches('/').to_string(),
                api_key_env: p.api_key_env,
                cache,
                cache_off,
                max_concurrent,
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

    #[test]
    fn max_concurrent_is_read_and_a_bad_one_is_named() {
        let c = parse(DEFAULT_CONFIG).unwrap();
        assert_eq!(c.providers["local"].max_concurrent, super::DEFAULT_MAX_CONCURRENT);
        let with = |n: &str| {
            DEFAULT_CONFIG.replace("kind = \"openai\"", &format!("kind = \"openai\"\nmax_concurrent = {n}"))
        };
        assert_eq!(parse(&with("12")).unwrap().providers["local"].max_concurrent, 12);
        for bad in ["0", "-1", "5000"] {
            let e = parse(&with(bad)).unwrap_err().to_string();
            assert!(e.contains("providers.local.max_concurrent") && e.contains(bad), "{e}");
        }
    }

    #[test]
    fn a_declared_cache_is_read_and_a_bad_factor_is_named() {
        let with = |cache: &str| {
            DEFAULT_CONFIG.replace("kind = \"openai\"", &format!("kind = \"openai\"\ncache = {cache}"))
        };
        let c = parse(&with("{ read_factor = 0.25, min_tokens = 2048 }")).unwrap();
        let cache = c.providers["local"].cache.unwrap();
        assert_eq!((cache.read_factor, cache.min_tokens.0), (0.25, 2048));
        let c = parse(&with("{ read_factor = 0.1 }")).unwrap();
        assert_eq!(c.providers["local"].cache.map(|c| c.min_tokens.0), Some(1024));
        assert_eq!(parse(DEFAULT_CONFIG).unwrap().providers["local"].cache, None);
        let off = parse(&with("false")).unwrap();
        assert!(
            off.providers["local"].cache_off && off.providers["local"].cache.is_none(),
            "false: none at all"
        );
        assert!(!parse(DEFAULT_CONFIG).unwrap().providers["local"].cache_off, "no key: learned");
        let e = parse(&with("true")).unwrap_err().to_string();
        assert!(e.contains("providers.local.cache") && e.contains("learned"), "{e}");
        for bad in ["{ read_factor = 1.5 }", "{ read_factor = -0.1 }", "{ read_factor = nan }"] {
            let e = parse(&with(bad)).unwrap_err().to_string();
            assert!(e.contains("providers.local.cache.read_factor"), "{bad}: {e}");
        }
        let e = parse(&with("{ read_factor = 0.1, min = 5 }")).unwrap_err().to_string();
        assert!(e.contains("min"), "{e}");
    }
}
