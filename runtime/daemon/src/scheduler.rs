//! The scheduler: the maintenance jobs of `[[scheduler.jobs]]`, each on its cron schedule. Every
//! wait reads the daemon's clock, so tests drive time instead of sleeping. (A turn's retry waits are
//! the engine's own, `agentd_engine::retry::wait`, on the same clock.)

use crate::config::JobConfig;
use crate::storage::DaemonStorage;
use actix::prelude::*;
use agentd_engine::clock::{clock, now_rfc3339};
use agentd_engine::storage::Settings;
use agentd_policies::settings::JobRuns;
use agentd_protocol::rpc::JobAction;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio_util::sync::CancellationToken;

use agentd_protocol::rpc::JobStatus;

/// The actor that runs the cron jobs of `[[scheduler.jobs]]` on the daemon's clock. Each job's runs are recorded in the store, so `daemon.status` shows them across restarts.
pub struct Scheduler {
    jobs: Vec<JobConfig>,
    storage: Arc<dyn DaemonStorage>,
    home: PathBuf,
    status: Arc<Mutex<BTreeMap<String, JobStatus>>>,
    stop: CancellationToken,
}

impl Scheduler {
    /// A scheduler for `jobs` over `storage` (what they verify and export, and where their runs are
    /// recorded); `home` is where `logs.export` writes (`<home>/exports/`). The jobs start when the
    /// actor does.
    pub fn new(jobs: Vec<JobConfig>, storage: Arc<dyn DaemonStorage>, home: PathBuf) -> Scheduler {
        let status = jobs
            .iter()
            .map(|j| {
                let last = storage.get(&JobRuns { name: &j.name }).ok().flatten();
                let mut s = last.unwrap_or_default();
                s.name = j.name.clone();
                s.cron = j.cron.clone();
                s.action = j.action;
                (j.name.clone(), s)
            })
            .collect();
        Scheduler {
            jobs,
            storage,
            home,
            status: Arc::new(Mutex::new(status)),
            stop: CancellationToken::new(),
        }
    }
}

impl Actor for Scheduler {
    type Context = Context<Self>;

    fn started(&mut self, _: &mut Context<Self>) {
        for job in self.jobs.clone() {
            let (storage, home, status, stop) =
                (self.storage.clone(), self.home.clone(), self.status.clone(), self.stop.clone());
            tokio::spawn(async move { run_job(job, storage, home, status, stop).await });
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
    storage: Arc<dyn DaemonStorage>,
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
            s.next_run_at = Some(agentd_engine::clock::rfc3339(next));
        }
        let wait = next.duration_since(clock.now()).unwrap_or(Duration::ZERO);
        tokio::select! {
            _ = clock.sleep(wait) => {}
            _ = stop.cancelled() => return,
        }
        let at = now_rfc3339();
        let (storage2, home2, action) = (storage.clone(), home.clone(), job.action);
        let outcome = tokio::task::spawn_blocking(move || run_action(action, storage2.as_ref(), &home2))
            .await
            .unwrap_or_else(|e| Err(JobError::Stopped(e)));
        let (ok, text) = match outcome {
            Ok(t) => (true, t),
            Err(e) => (false, e.to_string()),
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
            s.next_run_at = next_after(&job, clock.now()).map(agentd_engine::clock::rfc3339);
            s.clone()
        };
        if let Err(e) = storage.put(&JobRuns { name: &job.name }, &snapshot) {
            tracing::error!(job = %job.name, error = %e, "could not record the job's run");
        }
    }
}

/// Why a job's run failed; its text is the run's outcome in `daemon.status`.
#[derive(Debug, thiserror::Error)]
enum JobError {
    /// The store could not be read (the tasks, their logs, the evidence).
    #[error("{0}")]
    Storage(#[from] agentd_engine::storage::StorageError),
    /// The verification found problems.
    #[error("{checked} checked, {} problems: {}", .problems.len(), .problems.join("; "))]
    Problems {
        /// How many evidence blobs were checked.
        checked: usize,
        /// Each problem, in words.
        problems: Vec<String>,
    },
    /// A file of the export could not be written.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A record could not be written as JSON.
    #[error("{0}")]
    Encode(#[from] serde_json::Error),
    /// The run's own thread panicked.
    #[error("the job stopped unexpectedly: {0}")]
    Stopped(tokio::task::JoinError),
}

/// Runs a job's action: `Ok` with a summary, or the error saying what was wrong.
fn run_action(
    action: JobAction,
    store: &dyn DaemonStorage,
    home: &std::path::Path,
) -> Result<String, JobError> {
    let io = |path: &std::path::Path| {
        let path = path.to_path_buf();
        move |source| JobError::Io { path, source }
    };
    match action {
        JobAction::VerifyEvidence => {
            let problems = store.verify_evidence()?;
            let checked = store.evidence_list(None)?.len();
            if problems.is_empty() {
                Ok(format!("{checked} evidence blobs verified, no problems"))
            } else {
                Err(JobError::Problems {
                    checked,
                    problems: problems.into_iter().map(|p| format!("{}: {}", p.id, p.problem)).collect(),
                })
            }
        }
        JobAction::ExportLogs => {
            let dir = home.join("exports");
            std::fs::create_dir_all(&dir).map_err(io(&dir))?;
            let tasks = store.tasks()?;
            let mut records = 0usize;
            for t in &tasks {
                let mut out = String::new();
                let mut after = 0;
                loop {
                    let page = store.records(&t.task_id, after, 10_000)?;
                    let Some((last, _)) = page.last() else { break };
                    after = *last;
                    for (seq, record) in page {
                        let entry = agentd_protocol::rpc::LogEntry { seq, record };
                        out.push_str(&serde_json::to_string(&entry)?);
                        out.push('\n');
                        records += 1;
                    }
                }
                let path = dir.join(format!("{}.jsonl", t.task_id));
                let tmp = dir.join(format!(".{}.jsonl.tmp", t.task_id));
                std::fs::write(&tmp, out).map_err(io(&tmp))?;
                std::fs::rename(&tmp, &path).map_err(io(&path))?;
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
