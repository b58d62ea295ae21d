//! The scheduler: the maintenance jobs of `[[scheduler.jobs]]`, each on its cron schedule. Every
//! wait reads the daemon's clock, so tests drive time instead of sleeping. (A turn's retry waits are
//! the engine's own, `agentd_engine::retry::wait`, on the same clock.)

use crate::config::{JobAction, JobConfig};
use actix::prelude::*;
use agentd_engine::clock::{clock, now_rfc3339};
use agentd_evidence::Store;
use agentd_policies::settings::SettingKey;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio_util::sync::CancellationToken;

/// What `daemon.status` shows of a job.
pub use agentd_protocol::rpc::JobStatus;

/// The actor that runs the cron jobs of `[[scheduler.jobs]]` on the daemon's clock. Each job's runs are recorded in the store, so `daemon.status` shows them across restarts.
pub struct Scheduler {
    jobs: Vec<JobConfig>,
    store: Store,
    home: PathBuf,
    status: Arc<Mutex<BTreeMap<String, JobStatus>>>,
    stop: CancellationToken,
}

impl Scheduler {
    /// A scheduler for `jobs`, recording their runs in `store`; `home` is where `logs.export` writes
    /// (`<home>/exports/`). The jobs start when the actor does.
    pub fn new(jobs: Vec<JobConfig>, store: Store, home: PathBuf) -> Scheduler {
        let status = jobs
            .iter()
            .map(|j| {
                let last = store
                    .setting(&SettingKey::Job { name: &j.name }.to_string())
                    .ok()
                    .flatten()
                    .and_then(|v| serde_json::from_value::<JobStatus>(v).ok());
                let mut s = last.unwrap_or_default();
                s.name = j.name.clone();
                s.cron = j.cron.clone();
                s.action = j.action;
                (j.name.clone(), s)
            })
            .collect();
        Scheduler { jobs, store, home, status: Arc::new(Mutex::new(status)), stop: CancellationToken::new() }
    }
}

impl Actor for Scheduler {
    type Context = Context<Self>;

    fn started(&mut self, _: &mut Context<Self>) {
        for job in self.jobs.clone() {
            let (store, home, status, stop) =
                (self.store.clone(), self.home.clone(), self.status.clone(), self.stop.clone());
            tokio::spawn(async move { run_job(job, store, home, status, stop).await });
        }
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        self.stop.cancel();
    }
}

/// The next time after `now` the schedule fires (in its zone; an instant all the same).
fn next_after(job: &JobConfig, now: SystemTime) -> Option<SystemTime> {
    job.schedule.next_after(now)
}

async fn run_job(
    job: JobConfig,
    store: Store,
    home: PathBuf,
    status: Arc<Mutex<BTreeMap<String, JobStatus>>>,
    stop: CancellationToken,
) {
    let clock = clock();
    loop {
        let Some(next) = next_after(&job, clock.now()) else {
            tracing::warn!(job = %job.name, "the schedule never fires again");
            return;
        };
        if let Some(s) = status.lock().get_mut(&job.name) {
            s.next_run_at = Some(humantime::format_rfc3339_millis(next).to_string());
        }
        let wait = next.duration_since(clock.now()).unwrap_or(Duration::ZERO);
        tokio::select! {
            _ = clock.sleep(wait) => {}
            _ = stop.cancelled() => return,
        }
        let at = now_rfc3339();
        let (store2, home2, action) = (store.clone(), home.clone(), job.action);
        let outcome = tokio::task::spawn_blocking(move || run_action(action, &store2, &home2))
            .await
            .unwrap_or_else(|e| Err(format!("the job stopped unexpectedly: {e}")));
        let (ok, text) = match outcome {
            Ok(t) => (true, t),
            Err(t) => (false, t),
        };
        if ok {
            tracing::info!(job = %job.name, outcome = %text, "scheduled job ran");
        } else {
            tracing::error!(job = %job.name, outcome = %text, "scheduled job failed");
        }
        let snapshot = {
            let mut all = status.lock();
            let s = all.entry(job.name.clone()).or_default();
            s.runs += 1;
            s.last_run_at = Some(at);
            s.last_ok = Some(ok);
            s.last_outcome = Some(text);
            // The next run is known now: a reader never sees this run with the previous next time.
            s.next_run_at =
                next_after(&job, clock.now()).map(|t| humantime::format_rfc3339_millis(t).to_string());
            s.clone()
        };
        if let Err(e) = store.set_setting(
            &SettingKey::Job { name: &job.name }.to_string(),
            &serde_json::to_value(&snapshot).unwrap_or_default(),
        ) {
            tracing::error!(job = %job.name, error = %e, "could not record the job's run");
        }
    }
}

/// Runs a job's action: `Ok` with a summary, or `Err` naming what was wrong.
fn run_action(action: JobAction, store: &Store, home: &std::path::Path) -> Result<String, String> {
    match action {
        JobAction::VerifyEvidence => {
            let problems = store.verify_evidence().map_err(|e| e.to_string())?;
            let checked = store.evidence_list(None).map_err(|e| e.to_string())?.len();
            if problems.is_empty() {
                Ok(format!("{checked} evidence blobs verified, no problems"))
            } else {
                let list: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
                Err(format!("{checked} checked, {} problems: {}", problems.len(), list.join("; ")))
            }
        }
        JobAction::ExportLogs => {
            let dir = home.join("exports");
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let tasks = store.tasks().map_err(|e| e.to_string())?;
            let mut records = 0usize;
            for t in &tasks {
                let mut out = String::new();
                let mut after = 0;
                loop {
                    let page = store.records(&t.task_id, after, 10_000).map_err(|e| e.to_string())?;
                    let Some((last, _)) = page.last() else { break };
                    after = *last;
                    for (seq, record) in page {
                        let entry = agentd_protocol::rpc::LogEntry { seq, record };
                        out.push_str(&serde_json::to_string(&entry).map_err(|e| e.to_string())?);
                        out.push('\n');
                        records += 1;
                    }
                }
                let path = dir.join(format!("{}.jsonl", t.task_id));
                let tmp = dir.join(format!(".{}.jsonl.tmp", t.task_id));
                std::fs::write(&tmp, out).map_err(|e| format!("{}: {e}", tmp.display()))?;
                std::fs::rename(&tmp, &path).map_err(|e| format!("{}: {e}", path.display()))?;
            }
            Ok(format!("exported {} tasks ({records} records) to {}", tasks.len(), dir.display()))
        }
    }
}

/// The jobs and their last and next runs.
#[derive(Message)]
#[rtype(result = "Vec<JobStatus>")]
pub struct Jobs;

impl Handler<Jobs> for Scheduler {
    type Result = MessageResult<Jobs>;

    fn handle(&mut self, _: Jobs, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.status.lock().values().cloned().collect())
    }
}
