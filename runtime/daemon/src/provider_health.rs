//! Each provider as the daemon last found it — at its start and after each reload
//! (`crate::reload::check_providers`): whether its `base_url` answers as its kind's API, shown in
//! `daemon.status`.

use crate::config::{Config, ProviderConfig};
use agentd_protocol::rpc::ProviderStatus;
use agentd_protocol::ProviderError;
use agentd_providers::api_check::NotTheApi;
use agentd_providers::Client;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::time::Duration;

/// How long a provider may take to answer one question (the doctor's and `serve`'s).
pub const PROVIDER_TIMEOUT: Duration = Duration::from_secs(15);

/// `answer`, or `None` past [`PROVIDER_TIMEOUT`] on the daemon's clock.
pub async fn within<T>(answer: impl std::future::Future<Output = T>) -> Option<T> {
    let clock = agentd_engine::clock::clock();
    tokio::select! {
        answer = answer => Some(answer),
        _ = clock.sleep(PROVIDER_TIMEOUT) => None,
    }
}

/// What asking a provider found.
#[derive(Debug, Clone, PartialEq)]
pub struct Reach {
    /// Whether it answered as its kind's API.
    pub ok: bool,
    /// What answered, in words: the models it lists, or what was wrong.
    pub detail: String,
    /// When it did not: the key of `agentd.toml` to change.
    pub fix: Option<String>,
    /// The models it lists, when it answered.
    pub listed: Option<Vec<String>>,
}

/// Whether a provider's server answers as its kind's API: `GET {base_url}/models` lists models
/// ([`agentd_providers::api_check`]); a failure names `providers.NAME.base_url` (or `api_key_env`
/// for a refused key) and what answered. `agentd doctor`'s line and `serve`'s check alike.
pub async fn reach(p: &ProviderConfig, client: &Client) -> Reach {
    let failed = |detail: String, fix: String| Reach { ok: false, detail, fix: Some(fix), listed: None };
    match within(client.list_models()).await {
        None => failed(
            format!("{}: no answer within {} s", p.base_url, PROVIDER_TIMEOUT.as_secs()),
            format!("providers.{}.base_url, or start the server", p.name),
        ),
        Some(Err(NotTheApi::Provider(e @ ProviderError::Rejected { status: 401 | 403, .. }))) => failed(
            format!("{}: {e}", p.base_url),
            format!("providers.{}.api_key_env: the key is refused", p.name),
        ),
        Some(Err(NotTheApi::Provider(ProviderError::ConnectionRefused { url }))) => failed(
            format!("GET {url}: connection refused, nothing listens there"),
            format!("start the server, or fix providers.{}.base_url = {:?}", p.name, p.base_url),
        ),
        Some(Err(e)) => failed(
            e.to_string(),
            format!(
                "providers.{}.base_url = {:?}: not the {} API there, or its server is not running",
                p.name,
                p.base_url,
                p.kind.name()
            ),
        ),
        Some(Ok(listed)) => {
            let shown: Vec<&str> = listed.models.iter().take(5).map(String::as_str).collect();
            let list = match (shown.is_empty(), listed.models.len().saturating_sub(shown.len())) {
                (true, _) => "none".to_string(),
                (false, 0) => shown.join(", "),
                (false, n) => format!("{} and {n} more", shown.join(", ")),
            };
            let n = listed.models.len();
            Reach {
                ok: true,
                detail: format!(
                    "GET {} answers as the {} API: {n} model{} ({list})",
                    listed.url,
                    p.kind.name(),
                    if n == 1 { "" } else { "s" }
                ),
                fix: None,
                listed: Some(listed.models),
            }
        }
    }
}

/// How each configured provider answered `GET {base_url}/models`, by name.
#[derive(Default)]
pub struct ProviderHealth {
    found: Mutex<BTreeMap<String, ProviderStatus>>,
}

impl ProviderHealth {
    /// Keeps what a provider was found to be.
    pub fn found(&self, status: ProviderStatus) {
        self.found.lock().insert(status.name.clone(), status);
    }

    /// Each provider of `config`, in name order, as last found (absent `ok`: not asked yet).
    pub fn of(&self, config: &Config) -> Vec<ProviderStatus> {
        let found = self.found.lock();
        config
            .providers
            .values()
            .map(|p| {
                match found.get(&p.name).filter(|s| s.base_url == p.base_url && s.kind == p.kind.name()) {
                    Some(status) => status.clone(),
                    None => ProviderStatus {
                        name: p.name.clone(),
                        kind: p.kind.name().to_string(),
                        base_url: p.base_url.clone(),
                        ok: None,
                        detail: "not asked yet".to_string(),
                    },
                }
            })
            .collect()
    }
}
