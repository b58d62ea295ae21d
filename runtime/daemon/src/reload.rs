//! Config changes that take effect: `agentd reload` (`daemon.reload`) and SIGHUP read
//! `agentd.toml` again, validate it whole (its keys' variables included), and put it in place for
//! every later turn — a turn running keeps the settings snapshot it started with — saying what
//! changed, key by key ([`crate::config::changes`]). A file that does not load changes nothing
//! and says why. What is made once at the start (`[http]`, `[cluster]`, `[scheduler]`,
//! `[telemetry]`) is said to wait for the next start.
//!
//! Also here: each provider asked, at the start and after each reload, whether it answers as its
//! kind's API ([`check_providers`], kept in `crate::provider_health` for `daemon.status`): a
//! provider whose `base_url` does not is a loud warning in the log, never a refusal to start.

use crate::config::{Config, ConfigError};
use crate::shared::{models_of, redactor_of, Loaded, Shared};
use agentd_engine::context::Configured;
use agentd_protocol::rpc::{ConfigStatus, ProviderStatus, ReloadResult};
use std::sync::Arc;

impl Shared {
    /// Reads `agentd.toml` again and puts it in place (see the module's docs); `env` reads the
    /// daemon's environment (the keys' variables, the secrets to redact).
    pub fn reload(&self, env: impl Fn(&str) -> Option<String>) -> Result<ReloadResult, ConfigError> {
        let before = self.loaded();
        let path = before.config.path.clone();
        let (config, text) = Config::read(&path)?;
        config.check_keys(|name| env(name).map(std::ffi::OsString::from))?;
        let changes = crate::config::changes(&before.text, &text);
        let configured = self.engine.configured();
        let models = models_of(&config, &env, Some((&before.config, &configured)));
        let redactor = redactor_of(&config, &env);
        self.engine.reconfigure(Configured { team: config.team.clone(), models, redactor });
        self.set_loaded(Loaded {
            config: Arc::new(config),
            text,
            read_at: agentd_engine::clock::now_rfc3339(),
        });
        for change in &changes {
            tracing::info!(key = %change.key, before = change.before.as_deref().unwrap_or("(unset)"),
                after = change.after.as_deref().unwrap_or("(unset)"), applies = change.applies.as_str(), "config changed");
        }
        tracing::info!(path = %path.display(), changed = changes.len(), "agentd.toml read again");
        Ok(ReloadResult { path: path.display().to_string(), changes })
    }

    /// [`Shared::reload`] with the daemon's own environment, then each provider asked again (as at
    /// the start): what `daemon.reload` and SIGHUP both do.
    pub fn reload_and_check(self: &Arc<Self>) -> Result<ReloadResult, ConfigError> {
        let reloaded = self.reload(|var| std::env::var(var).ok())?;
        tokio::spawn(check_providers(self.clone()));
        Ok(reloaded)
    }

    /// The configuration the daemon runs, and whether the file still says so.
    pub fn config_status(&self) -> ConfigStatus {
        let loaded = self.loaded();
        let on_disk = std::fs::read_to_string(&loaded.config.path);
        ConfigStatus {
            path: loaded.config.path.display().to_string(),
            read_at: loaded.read_at.clone(),
            differs: on_disk.is_ok_and(|text| text != loaded.text),
        }
    }
}

/// Asks each provider of the configuration the daemon runs whether it answers as its kind's API
/// (as `agentd doctor` does), keeping the answers for `daemon.status`; one that does not is a
/// warning in the log naming the key and pointing to `agentd doctor`.
pub async fn check_providers(shared: Arc<Shared>) {
    let config = shared.config();
    for p in config.providers.values() {
        let client = p.connect(p.api_key(|var| std::env::var(var).ok()), config.deadlines);
        let check = crate::provider_health::reach(p, &client).await;
        let ok = check.ok;
        if !ok {
            tracing::warn!(
                provider = %p.name,
                key = %format!("providers.{}.base_url", p.name),
                base_url = %p.base_url,
                error = %check.detail,
                "the provider does not answer as its API: tasks that use it will fail (`agentd doctor` checks the setup)"
            );
        }
        let status = ProviderStatus {
            name: p.name.clone(),
            kind: p.kind.name().to_string(),
            base_url: p.base_url.clone(),
            ok: Some(ok),
            detail: check.detail,
        };
        shared.providers.found(status);
    }
}
