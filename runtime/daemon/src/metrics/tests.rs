use super::*;
use agentd_protocol::budget::{Amount, Budget, BudgetScope};
use agentd_protocol::{Role, ToolName, WindowSource};
use std::collections::HashMap;

fn event(role: &str, kind: EventKind) -> Event {
    Event {
        seq: 1,
        task_id: "t".into(),
        role: Role::parse(role),
        at: "2026-12-05T00:00:00.000Z".into(),
        kind,
    }
}

/// The scrape read back by a parser of the text format that is not ours: value by name and labels.
fn scraped(text: &str) -> HashMap<String, f64> {
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).unwrap();
    scrape
        .samples
        .into_iter()
        .map(|s| {
            let mut labels: Vec<String> = s.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            labels.sort();
            let value = match s.value {
                prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Gauge(v) => v,
                prometheus_parse::Value::Untyped(v) => v,
                _ => f64::NAN,
            };
            (format!("{}{{{}}}", s.metric, labels.join(",")), value)
        })
        .collect()
}

#[test]
fn events_are_counted_by_their_labels_and_tasks_by_state() {
    let m = Metrics::new();
    let usage =
        Usage { prompt_tokens: 1000, completion_tokens: 50, cache_read_tokens: 600, cache_write_tokens: 0 };
    let answered = EventKind::ResponseReceived {
        finish_reason: "stop".into(),
        usage: Some(usage),
        model: Some("gpt-4o".into()),
        cost_usd: Some(0.25),
    };
    m.observe(&event("lead", answered.clone()));
    m.observe(&event("lead", answered));
    m.observe(&event(
        "coder",
        EventKind::WindowLearned {
            old_window: agentd_protocol::Tokens(32768),
            new_window: agentd_protocol::Tokens(16384),
            source: WindowSource::Error,
        },
    ));
    m.observe(&event("coder", EventKind::CompactionFailed { reason: "r".into() }));
    m.observe(&event(
        "coder",
        EventKind::ToolFinished {
            tool: ToolName::ReadFile,
            call_id: "c".into(),
            ok: false,
            evidence_id: None,
            result_tokens: None,
            whole_limit: None,
            measured_by: None,
            interrupted: false,
        },
    ));
    m.observe(&event(
        "lead",
        EventKind::BudgetReached {
            scope: BudgetScope::Day,
            budget: Budget::default(),
            spent: Amount::default(),
            in_flight: Amount::default(),
            request: Amount::default(),
            resume_at: None,
        },
    ));
    let meta = |state| TaskMeta {
        task_id: "t".into(),
        objective: "o".into(),
        workspace: "/w".into(),
        team: None,
        state,
        created_at: String::new(),
        updated_at: String::new(),
        result: None,
        error: None,
        node: None,
        budget: None,
        resume_at: None,
        ask: Vec::new(),
    };
    let text = m.render(&[meta(TaskState::Finished), meta(TaskState::Finished), meta(TaskState::Running)]);
    assert!(text.ends_with("# EOF\n"), "{text}");
    let got = scraped(&text);
    let at = |key: &str| *got.get(key).unwrap_or_else(|| panic!("{key} in {got:#?}"));
    assert_eq!(at("agentd_responses_total{model=gpt-4o,role=lead}"), 2.0);
    assert_eq!(at("agentd_tokens_total{kind=prompt,model=gpt-4o,role=lead}"), 2000.0);
    assert_eq!(at("agentd_tokens_total{kind=cached,model=gpt-4o,role=lead}"), 1200.0);
    assert_eq!(at("agentd_tokens_total{kind=completion,model=gpt-4o,role=lead}"), 100.0);
    assert_eq!(at("agentd_cost_usd_total{model=gpt-4o,role=lead}"), 0.5);
    assert_eq!(at("agentd_windows_learned_total{source=error}"), 1.0);
    assert_eq!(at("agentd_compactions_total{outcome=failed,role=coder}"), 1.0);
    assert_eq!(at("agentd_tool_calls_total{ok=false,tool=read_file}"), 1.0);
    assert_eq!(at("agentd_budget_pauses_total{scope=day}"), 1.0);
    assert_eq!(at("agentd_tasks{state=finished}"), 2.0);
    assert_eq!(at("agentd_tasks{state=running}"), 1.0);
    assert_eq!(at("agentd_tasks{state=paused}"), 0.0, "every state is written");
    assert_eq!(at("agentd_permission_refusals_total{}"), 0.0);
}

/// 2,000 prompt tokens and then 2^64 − 1 (a log written before reports were judged) leave the
/// counter at its most, never wrapped to 1,999 (a scraper would read that as a reset); a refused
/// report is counted by role.
#[test]
fn token_counters_saturate_and_refused_reports_are_counted() {
    let m = Metrics::new();
    let answered = |prompt| EventKind::ResponseReceived {
        finish_reason: "stop".into(),
        usage: Some(Usage::new(prompt, 1)),
        model: Some("m".into()),
        cost_usd: None,
    };
    m.observe(&event("coder", answered(2_000)));
    m.observe(&event("coder", answered(u64::MAX)));
    m.observe(&event(
        "coder",
        EventKind::UsageRefused {
            reported: agentd_protocol::RawUsage::default(),
            reasons: vec!["r".into()],
            sent_tokens: agentd_protocol::Tokens(1_712),
            counted: Usage::new(1_712, 1),
            summary: false,
        },
    ));
    let got = scraped(&m.render(&[]));
    assert_eq!(got["agentd_tokens_total{kind=prompt,model=m,role=coder}"], u64::MAX as f64);
    assert_eq!(got["agentd_usage_reports_refused_total{role=coder}"], 1.0);
}
