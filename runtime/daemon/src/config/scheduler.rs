//! `[scheduler]`: what the daemon does on its own time. Two settings of the idle thinking cleanup
//! (after how long idle a new request clears old thinking, and the fewest tokens worth clearing),
//! the zone cron expressions are read in (`tz`), and the maintenance jobs of `[[scheduler.jobs]]`,
//! each a unique name, a cron expression and an action.

use super::error::ConfigError;
use super::error::Invalid;
use super::raw::RawScheduler;
use agentd_protocol::Tokens;
use std::time::Duration;

use crate::schedule::{Schedule, Zone};
use agentd_protocol::rpc::JobAction;

/// A maintenance job the scheduler runs on a cron schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct JobConfig {
    /// The job's name (`name`), unique, which `daemon.status` shows.
    pub name: String,
    /// The expression as written (5 fields: min hour day month weekday, or 6 with seconds first).
    pub cron: String,
    /// The expression, read in `[scheduler] tz` (see [`crate::schedule`]).
    pub schedule: Schedule,
    /// What the job runs (`action`: `evidence.verify` or `logs.export`).
    pub action: JobAction,
}

/// `[scheduler]` validated: the defaults where the table or a key is absent.
pub(super) struct SchedulerSettings {
    /// `idle_thinking_cleanup_after`.
    pub(super) idle_thinking_cleanup_after: Duration,
    /// `idle_thinking_clear_at_least`.
    pub(super) idle_thinking_clear_at_least: Tokens,
    /// The jobs, in file order.
    pub(super) jobs: Vec<JobConfig>,
    /// `tz` (UTC unless set).
    pub(super) tz: Zone,
}

/// Checks `[scheduler]`: the zone first, since every job's cron expression is read in it; then the
/// cleanup settings, then the jobs in file order (a job's errors name it by index and name,
/// `scheduler.jobs[0] ("verify").cron`).
pub(super) fn scheduler(
    raw: Option<RawScheduler>,
    invalid: Invalid,
) -> Result<SchedulerSettings, ConfigError> {
    let mut idle_thinking_cleanup_after = agentd_policies::thinking::DEFAULT_IDLE_THRESHOLD;
    let mut idle_thinking_clear_at_least = agentd_policies::thinking::DEFAULT_CLEAR_AT_LEAST;
    let mut jobs = Vec::new();
    let mut tz = Zone::Utc;
    if let Some(s) = raw {
        if let Some(v) = &s.tz {
            tz = Zone::parse(v).map_err(|e| invalid("scheduler.tz".into(), e))?;
        }
        if let Some(v) = s.idle_thinking_clear_at_least {
            idle_thinking_clear_at_least = Tokens(v);
        }
        if let Some(v) = &s.idle_thinking_cleanup_after {
            idle_thinking_cleanup_after = humantime::parse_duration(v).map_err(|e| {
                invalid("scheduler.idle_thinking_cleanup_after".into(), format!("{e}: {v:?}"))
            })?;
        }
        for (i, job) in s.jobs.into_iter().enumerate() {
            let key = format!("scheduler.jobs[{i}] ({:?})", job.name);
            if job.name.trim().is_empty() {
                return Err(invalid(format!("scheduler.jobs[{i}].name"), "must not be empty".into()));
            }
            if jobs.iter().any(|j: &JobConfig| j.name == job.name) {
                return Err(invalid(format!("{key}.name"), "two jobs share this name".into()));
            }
            let schedule = Schedule::parse(&job.cron, tz).map_err(|e| {
                invalid(format!("{key}.cron"), format!("bad cron expression {:?}: {e}", job.cron))
            })?;
            let action = match JobAction::parse(&job.action) {
                Some(action) => action,
                None => {
                    let other = &job.action;
                    return Err(invalid(
                        format!("{key}.action"),
                        format!("unknown action {other:?}; expected \"evidence.verify\" or \"logs.export\""),
                    ));
                }
            };
            jobs.push(JobConfig { name: job.name, cron: job.cron, schedule, action });
        }
    }
    Ok(SchedulerSettings { idle_thinking_cleanup_after, idle_thinking_clear_at_least, jobs, tz })
}

#[cfg(test)]
mod tests {
    use super::super::tests::parse;
    use super::super::DEFAULT_CONFIG;
    use super::Zone;
    use std::time::Duration;

    #[test]
    fn jobs_parse_and_bad_ones_are_named() {
        let ok = format!(
            "{DEFAULT_CONFIG}\n[scheduler]\nidle_thinking_cleanup_after = \"30m\"\n[[scheduler.jobs]]\nname = \"v\"\ncron = \"0 0 3 * * *\"\naction = \"evidence.verify\"\n"
        );
        let c = parse(&ok).unwrap();
        assert_eq!(c.jobs.len(), 1);
        assert_eq!(c.team.idle_thinking_cleanup_after, Duration::from_secs(1800));
        let bad_cron = ok.replace("0 0 3 * * *", "every night");
        let e = parse(&bad_cron).unwrap_err().to_string();
        assert!(e.contains("scheduler.jobs[0]") && e.contains("\"v\"") && e.contains("cron"), "{e}");
        let bad_action = ok.replace("evidence.verify", "coffee.make");
        let e = parse(&bad_action).unwrap_err().to_string();
        assert!(e.contains("action") && e.contains("coffee.make"), "{e}");
    }

    #[test]
    fn cron_takes_five_fields_and_the_zone_is_checked() {
        let c = parse(DEFAULT_CONFIG).unwrap();
        assert_eq!(c.tz, Zone::Utc);
        let ok = format!(
            "{DEFAULT_CONFIG}\n[scheduler]\ntz = \"+02:00\"\n[[scheduler.jobs]]\nname = \"v\"\ncron = \"30 3 * * MON-FRI\"\naction = \"logs.export\"\n"
        );
        let c = parse(&ok).unwrap();
        assert_eq!(c.tz, Zone::parse("+02:00").unwrap());
        assert_eq!(c.jobs[0].schedule.zone(), c.tz);
        assert_eq!(c.jobs[0].cron, "30 3 * * MON-FRI");
        let e = parse(&ok.replace("+02:00", "Mars/Olympus")).unwrap_err().to_string();
        assert!(
            e.contains("scheduler.tz") && e.contains("Mars/Olympus") && e.contains("/h/agentd.toml"),
            "{e}"
        );
        let e = parse(&ok.replace("30 3 * * MON-FRI", "30 3 * * 9")).unwrap_err().to_string();
        assert!(e.contains("scheduler.jobs[0]") && e.contains("\"9\""), "{e}");
    }
}
