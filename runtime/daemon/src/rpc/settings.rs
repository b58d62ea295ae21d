//! `settings.get`, `settings.set` and `models.probe`: a role's settings, and its server's window
//! asked for again.

use super::{Answer, Methods};
use agentd_engine::context::effective_compact_at;
use agentd_engine::fitter::WindowOf;
use agentd_engine::storage::Settings;
use agentd_policies::settings::{CompactAt, CompactAtOn};
use agentd_protocol::rpc::{method, Handle, ProbeResult, RoleParams, Setting, SettingParams, SettingResult};
use agentd_protocol::RpcError;

impl Handle<method::SettingsGet> for Methods {
    async fn handle(&self, p: SettingParams) -> Answer<SettingResult> {
        self.settings(false, p)
    }
}

impl Handle<method::SettingsSet> for Methods {
    async fn handle(&self, p: SettingParams) -> Answer<SettingResult> {
        self.settings(true, p)
    }
}

impl Handle<method::ModelsProbe> for Methods {
    async fn handle(&self, p: RoleParams) -> Answer<ProbeResult> {
        let role = p.role;
        let rc = self.known_role(&role)?;
        let client = self
            .shared
            .engine
            .model(&rc.provider)
            .ok_or_else(|| RpcError::internal(format!("no client for provider {}", rc.provider)))?;
        let window = self
            .shared
            .engine
            .fitter()
            .window_of(WindowOf { client: client.clone(), model: rc.model.clone(), fresh: true })
            .await
            .map_err(RpcError::internal)?;
        Ok(ProbeResult {
            role,
            server: client.server().to_string(),
            model: rc.model.clone(),
            window: window.tokens,
            window_source: window.source,
        })
    }
}

impl Methods {
    fn settings(&self, set: bool, p: SettingParams) -> Answer<SettingResult> {
        let rc = self.known_role(&p.role)?;
        let config = self.shared.config();
        let server = config.provider_of(&rc).base_url.as_str();
        let role = &p.role;
        match p.key {
            Setting::CompactAt => {
                if set {
                    let value = match &p.value {
                        Some(v) => v.as_u64().filter(|v| (1..=100).contains(v)).ok_or_else(|| {
                            RpcError::invalid_params(
                                "param `value` must be an integer percentage from 1 to 100",
                            )
                        })?,
                        None => return Err(RpcError::invalid_params("missing param `value`").into()),
                    };
                    let model = rc.model.as_str();
                    self.shared.storage.put(&CompactAt { role }, &value)?;
                    self.shared.storage.put(&CompactAtOn { role, server, model }, &value)?;
                }
                let value = effective_compact_at(&self.shared.engine, role, server, &rc.model)?;
                Ok(SettingResult {
                    role: role.clone(),
                    key: p.key,
                    value,
                    server: server.to_string(),
                    model: rc.model.clone(),
                })
            }
        }
    }
}
