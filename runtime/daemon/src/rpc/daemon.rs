//! `daemon.status` and `clock.advance`: the daemon's own state (a health check of the store too),
//! and the manual clock tests drive.

use super::{Answer, Methods};
use crate::scheduler::Jobs;
use crate::supervisor::RunningCount;
use agentd_protocol::rpc::{
    method, ClockParams, ClockResult, DaemonStatus, DaySpending, Handle, HttpServing, NoParams, ReloadResult,
    StorageStatus,
};
use agentd_protocol::{ErrorCode, RpcError};

impl Handle<method::DaemonStatus> for Methods {
    async fn handle(&self, _: NoParams) -> Answer<DaemonStatus> {
        let running = self.supervisor.send(RunningCount).await?;
        let jobs = self.shared.scheduler.send(Jobs).await?;
        // A status is a health check too: heal the store and record what it refused.
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || {
            crate::storage::check_storage(shared.storage.as_ref(), &shared.ends)
        })
        .await
        .map_err(RpcError::internal)?;
        let health = self.shared.storage.health();
        let config = self.shared.config();
        Ok(DaemonStatus {
            version: env!("CARGO_PKG_VERSION").to_string(),
            uptime_s: self.started.elapsed().as_secs(),
            tasks_running: running as u64,
            jobs,
            clock: agentd_engine::clock::now_rfc3339(),
            tz: config.tz.describe(agentd_engine::clock::clock().now()),
            storage: StorageStatus {
                ok: health.ok,
                error: health.error,
                since: health.since.map(agentd_engine::clock::rfc3339),
                unrecorded_ends: self.shared.ends.len() as u64,
            },
            http: self.http.map(|addr| HttpServing { listen: addr.to_string() }),
            cluster: match &self.shared.fleet {
                Some(fleet) => Some(crate::fleet::status(fleet).await),
                None => None,
            },
            mcp: self.shared.mcp.servers(&config),
            today: self.today()?,
            config: self.shared.config_status(),
            providers: self.shared.providers.of(&config),
            telemetry: self.shared.exports.status(),
        })
    }
}

impl Handle<method::DaemonReload> for Methods {
    async fn handle(&self, _: NoParams) -> Answer<ReloadResult> {
        let reloaded = self.shared.reload_and_check();
        Ok(reloaded.map_err(|e| RpcError::new(ErrorCode::InvalidConfig, e.to_string()))?)
    }
}

impl Handle<method::ClockAdvance> for Methods {
    async fn handle(&self, p: ClockParams) -> Answer<ClockResult> {
        let ms = p.ms;
        let clock = agentd_engine::clock::clock();
        if !clock.advance(std::time::Duration::from_millis(ms)) {
            return Err(RpcError::new(
                ErrorCode::NotAllowed,
                "the clock can only be advanced when the daemon runs with AGENTD_CLOCK=manual",
            )
            .into());
        }
        Ok(ClockResult { now: agentd_engine::clock::now_rfc3339() })
    }
}

impl Methods {
    /// What every task spent today, and the day's budget.
    fn today(&self) -> Answer<DaySpending> {
        let engine = &self.shared.engine;
        let (day, spent) = engine.ledger().today(engine.storage().as_ref())?;
        let budget = engine.team().budgets.day;
        Ok(DaySpending {
            day: day.key,
            spent,
            budget: budget.any(),
            next_day_at: agentd_engine::clock::rfc3339_seconds(day.next),
        })
    }
}
