//! `context.get` and `log.get`: what a role's next request measures, and what a task's log holds.

use super::{Answer, Methods};
use agentd_engine::fitter::GaugeOf;
use agentd_protocol::rpc::{
    method, ContextParams, ContextResult, Handle, LogEntry, LogParams, LogResult, Unmeasured,
};
use agentd_protocol::Role;

/// The lead's gauge unless a role is named.
impl Handle<method::ContextGet> for Methods {
    async fn handle(&self, p: ContextParams) -> Answer<ContextResult> {
        let (task_id, role) = (p.task_id.as_str(), &p.role.unwrap_or(Role::Lead));
        self.task(task_id)?;
        self.known_role(role)?;
        let gauge = self
            .shared
            .engine
            .fitter()
            .gauge_of(GaugeOf { task_id: task_id.to_string(), role: role.clone() });
        Ok(match gauge {
            Some(g) => ContextResult::Measured(Box::new(g)),
            None => ContextResult::Unmeasured(Unmeasured {
                role: role.clone(),
                measured: false,
                note: "this role has not made a request since the daemon started".into(),
            }),
        })
    }
}

impl Handle<method::LogGet> for Methods {
    async fn handle(&self, p: LogParams) -> Answer<LogResult> {
        let limit = p.limit.unwrap_or(10_000).min(100_000) as usize;
        self.task(&p.task_id)?;
        // Scan page by page so a role filter still returns up to `limit` records.
        let mut records = Vec::new();
        let mut cursor = p.after_seq.unwrap_or(0);
        while records.len() < limit {
            let page = self.shared.storage.records(&p.task_id, cursor, 1000)?;
            let Some((last, _)) = page.last() else { break };
            cursor = *last;
            for (seq, record) in page {
                if records.len() < limit && p.role.as_ref().is_none_or(|want| record.role() == want) {
                    records.push(LogEntry { seq, record });
                }
            }
        }
        Ok(LogResult { records })
    }
}
