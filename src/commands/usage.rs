//! `agentd usage`: what the tasks spent, summed from their events over the socket — the same fold
//! (`agentd_protocol::rpc::spent`) that `status` shows for one task — grouped by task, model or day.

use super::connect::connect;
use crate::cli::UsageBy;
use crate::exit::{self, fail, Failure};
use crate::print::pretty;
use crate::print::{raw, say};
use agentd_client::render::usd;
use agentd_daemon::daemon::Home;
use agentd_protocol::rpc::method;
use agentd_protocol::rpc::{EventsParams, EventsResult, NoParams, Spent, TaskSummary};
use agentd_protocol::{Event, EventKind};
use std::collections::BTreeMap;

/// Sums every task's requests from `since` on, by `by`.
pub fn usage(home: &Home, since: Option<String>, by: UsageBy, json: bool) -> Result<u8, Failure> {
    let from = match &since {
        Some(s) => Some(since_instant(s)?),
        None => None,
    };
    let mut client = connect(home)?;
    let tasks: Vec<TaskSummary> = client.call::<method::TaskList>(NoParams {})?;
    let mut groups: BTreeMap<String, Vec<Event>> = BTreeMap::new();
    for task in &tasks {
        let mut after = 0;
        loop {
            let params =
                EventsParams { task_id: task.task_id.clone(), after_seq: Some(after), limit: Some(1_000) };
            let page: EventsResult = client.call::<method::TaskEvents>(params)?;
            let Some(last) = page.events.last() else { break };
            after = last.seq;
            for e in page.events {
                if from.as_deref().is_some_and(|from| e.at.as_str() < from) {
                    continue;
                }
                let key = match (by, &e.kind) {
                    (UsageBy::Task, _) => e.task_id.clone(),
                    (UsageBy::Day, _) => e.at.get(..10).unwrap_or(&e.at).to_string(),
                    (UsageBy::Model, EventKind::ResponseReceived { model, .. }) => {
                        model.clone().unwrap_or_default()
                    }
                    (UsageBy::Model, EventKind::CompactionFinished { summary_model, .. }) => {
                        summary_model.clone().unwrap_or_default()
                    }
                    (UsageBy::Model, _) => continue,
                };
                groups.entry(key).or_default().push(e);
            }
        }
    }
    let rows: Vec<(String, Spent)> = groups
        .into_iter()
        .map(|(key, events)| (key, agentd_protocol::rpc::spent(&events).0))
        .filter(|(_, spent)| spent.requests > 0 || spent.compaction.compactions > 0)
        .collect();
    let all: Vec<&Spent> = rows.iter().map(|(_, s)| s).collect();
    let total = sum(&all);
    if json {
        let rows: Vec<serde_json::Value> =
            rows.iter().map(|(key, spent)| serde_json::json!({"key": key, "spent": spent})).collect();
        raw!("{}", pretty(&serde_json::json!({"by": by, "since": since, "rows": rows, "total": total})));
        return Ok(exit::OK);
    }
    let head = match by {
        UsageBy::Task => "task",
        UsageBy::Model => "model",
        UsageBy::Day => "day",
    };
    say!(
        "{head:<38} {:>8} {:>12} {:>12} {:>12} {:>11} {:>12}",
        "requests",
        "prompt",
        "cached",
        "completion",
        "cost",
        "compactions"
    );
    for (key, s) in rows.iter().map(|(k, s)| (k.as_str(), s)).chain([("total", &total)]) {
        let key = if key.is_empty() { "(unnamed)" } else { key };
        say!(
            "{key:<38} {:>8} {:>12} {:>12} {:>12} {:>11} {:>12}",
            s.requests,
            s.prompt_tokens,
            s.cache_read_tokens,
            s.completion_tokens,
            s.cost_usd.map(usd).unwrap_or_else(|| "-".into()),
            s.compaction.compactions
        );
    }
    Ok(exit::OK)
}

/// `--since` as the RFC 3339 text events are stamped with, which compares in time order.
fn since_instant(since: &str) -> Result<String, Failure> {
    let bad = || {
        fail(exit::USAGE, format!("--since {since:?}: expected a day (2026-12-01) or an RFC 3339 instant"))
    };
    if since.len() == 10 {
        let day = format!("{since}T00:00:00Z");
        humantime::parse_rfc3339(&day).map_err(|_| bad())?;
        return Ok(day.replace('Z', ".000Z"));
    }
    let at = humantime::parse_rfc3339_weak(since).map_err(|_| bad())?;
    Ok(humantime::format_rfc3339_millis(at).to_string())
}

/// The sum of several rows, saturating.
fn sum(rows: &[&Spent]) -> Spent {
    let mut total = Spent::default();
    for s in rows {
        total.add(s);
    }
    total
}
