//! One scenario, run and measured: its own scripted server and daemon; what the server counted and
//! its cache served, agentd's counts against the server's request by request, what the coder read
//! and paged, the compactions, and what the coder's requests kept of the objective and the failure.

use crate::common::{group, team_config, Daemon, Result};
use crate::notes::workspace;
use crate::scenarios::{Cache, Scenario};
use crate::team::{kind_of, responder, Coder, Kind};
use crate::{CACHE_PRICE, FAILING_LINE, MODEL, OBJECTIVE, QUIET, SKIP_RESPONSES, TASK};
use agentd_test_support::daemon::with_prompt_cache;
use agentd_test_support::*;
use serde_json::Value;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Row {
    pub name: String,
    /// The documents' own tokens, by the server's count.
    pub docs: u64,
    pub ended: String,
    pub requests: usize,
    pub refused: usize,
    pub prompt: u64,
    pub weighted: f64,
    pub cached: u64,
    pub compactions: usize,
    pub summaries: usize,
    pub paged: usize,
    pub objective_pct: f64,
    pub failing_pct: f64,
    pub err_mean: f64,
    pub err_worst: f64,
    pub err_pairs: usize,
    pub wall: Duration,
    pub notes: Vec<String>,
}

fn of_kind<'a>(events: &'a [Value], kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    events.iter().filter(move |e| e["kind"] == kind)
}

/// The share of `bodies` from the first that contains `needle` on, that still contain it.
fn kept_pct(bodies: &[&Value], needle: &str) -> f64 {
    let texts: Vec<String> = bodies.iter().map(|b| b["messages"].to_string()).collect();
    let Some(first) = texts.iter().position(|t| t.contains(needle)) else { return 0.0 };
    let after = &texts[first..];
    100.0 * after.iter().filter(|t| t.contains(needle)).count() as f64 / after.len() as f64
}

pub fn run_scenario(bin: &Path, rt: &tokio::runtime::Runtime, s: &Scenario) -> Result<Row> {
    let coder = Arc::new(Mutex::new(Coder::default()));
    let server = rt.block_on(
        ScriptedServer::builder()
            .model(MODEL)
            .window(s.window)
            .max_model_len(Some(s.window))
            .tokenize_endpoint(s.endpoint)
            .report_usage(true)
            .responder(responder(s.files, coder.clone()))
            .start(),
    );
    let ws = tempfile::Builder::new()
        .prefix("agentd-longread-ws")
        .tempdir()
        .map_err(|e| format!("cannot create a temporary workspace: {e}"))?;
    let sizes = workspace(ws.path(), s)?;
    let config = team_config(&server.base_url(), MODEL, "");
    // Declared as the scripted server runs it; learned from its usage reports; or turned off.
    let config = match s.cache {
        Cache::Declared => with_prompt_cache(&config, CACHE_PRICE, MIN_CACHED_PREFIX),
        Cache::Learned => config,
        Cache::None => config.replacen("kind = \"openai\"\n", "kind = \"openai\"\ncache = false\n", 1),
    };
    let daemon = Daemon::start(bin, &config)?;
    let started = Instant::now();
    let task = daemon.submit(TASK, ws.path())?;
    let events = daemon.events_until_end(&task, QUIET)?;
    let wall = started.elapsed();
    let last = events.last().cloned().unwrap_or_default();
    let ended = match last["kind"].as_str() {
        Some("task_finished") => "finished".to_string(),
        Some(k) => format!("{k}: {}", last["error"].as_str().unwrap_or("")),
        None => "no events".to_string(),
    };

    let bodies = server.chat_requests();
    let counted = server.counted();
    let cached = server.cached();
    if counted.len() != bodies.len() || cached.len() != bodies.len() {
        return Err(format!(
            "{}: the server recorded {} chat requests but {} counts and {} cache figures",
            s.name,
            bodies.len(),
            counted.len(),
            cached.len()
        ));
    }
    let kinds: Vec<Kind> = bodies.iter().map(kind_of).collect();
    let prompt: u64 = counted.iter().sum();
    let cached_sum: u64 = cached.iter().sum();
    let weighted: f64 =
        counted.iter().zip(&cached).map(|(&n, &k)| (n - k) as f64 + CACHE_PRICE * k as f64).sum();
    if let Ok(dir) = std::env::var("BENCH_DUMP") {
        let mut out = String::new();
        for (i, ((n, k), kind)) in counted.iter().zip(&cached).zip(&kinds).enumerate() {
            let msgs = bodies[i]["messages"].as_array().map(|m| m.len()).unwrap_or(0);
            out.push_str(&format!(
                "{i}\t{kind:?}\t{n}\t{k}\t{:.0}\t{msgs}\n",
                (n - k) as f64 + CACHE_PRICE * *k as f64
            ));
        }
        let name: String = s.name.chars().map(|c| if c.is_alphanumeric() { c } else { '_' }).collect();
        std::fs::write(format!("{dir}/{name}.tsv"), out).unwrap();
    }
    let coder_bodies: Vec<&Value> =
        bodies.iter().zip(&kinds).filter(|(_, k)| **k == Kind::Coder).map(|(b, _)| b).collect();

    // agentd's count (request_sent) against the server's, paired per role in order. A refused request
    // has its own request_sent and its own server count, so it stays in both sequences, paired as is.
    let third_response = of_kind(&events, "response_received")
        .nth(SKIP_RESPONSES - 1)
        .and_then(|e| e["seq"].as_u64())
        .unwrap_or(u64::MAX);
    let mut errors: Vec<f64> = Vec::new();
    let mut per_role = Vec::new();
    let mut outliers = Vec::new();
    let compacted_at: Vec<(String, u64)> = of_kind(&events, "compaction_finished")
        .map(|e| (e["role"].as_str().unwrap_or("").to_string(), e["seq"].as_u64().unwrap_or(0)))
        .collect();
    for (role, kind) in [("lead", Kind::Lead), ("coder", Kind::Coder)] {
        let theirs: Vec<u64> =
            counted.iter().zip(&kinds).filter(|(_, k)| **k == kind).map(|(n, _)| *n).collect();
        let ours: Vec<(u64, u64)> = of_kind(&events, "request_sent")
            .filter(|e| e["role"] == role)
            .map(|e| (e["seq"].as_u64().unwrap_or(0), e["tokens"].as_u64().unwrap_or(0)))
            .collect();
        if theirs.len() != ours.len() {
            per_role.push(format!(
                "{role}: {} request_sent events but {} requests at the server (paired the first {})",
                ours.len(),
                theirs.len(),
                ours.len().min(theirs.len())
            ));
        }
        let role_errors: Vec<f64> = ours
            .iter()
            .zip(&theirs)
            .enumerate()
            .filter(|(_, ((seq, _), _))| *seq > third_response)
            .map(|(i, ((seq, ours), &theirs))| {
                let e = (*ours as f64 - theirs as f64) / theirs as f64;
                if e.abs() > 0.02 {
                    // Was it the first request after a compaction (a rebuilt one, counted whole)?
                    let previous = if i == 0 { 0 } else { ours_seq(&events, role, i - 1) };
                    let rebuilt = compacted_at.iter().any(|(r, c)| r == role && *c > previous && *c < *seq);
                    outliers.push(format!(
                        "{role}#{i} {:+.1}%{}",
                        e * 100.0,
                        if rebuilt { " (rebuilt)" } else { "" }
                    ));
                }
                e
            })
            .collect();
        if !role_errors.is_empty() {
            let mean = role_errors.iter().sum::<f64>() / role_errors.len() as f64;
            per_role.push(format!("{role} mean {:+.1}% over {}", mean * 100.0, role_errors.len()));
        }
        errors.extend(role_errors);
    }
    let err_mean = if errors.is_empty() {
        0.0
    } else {
        errors.iter().map(|e| e.abs()).sum::<f64>() / errors.len() as f64
    };
    let err_worst = errors.iter().copied().fold(0.0f64, |w, e| if e.abs() > w.abs() { e } else { w });

    let coder_events = |kind: &'static str, tool: &'static str| {
        of_kind(&events, kind).filter(move |e| e["role"] == "coder" && e["tool"] == tool)
    };
    let paged = coder_events("tool_called", "read_evidence").count();
    let stored = coder_events("tool_finished", "read_file").filter(|e| e["evidence_id"].is_string()).count();
    let read_files = coder_events("tool_called", "read_file").count();
    let tokens: Vec<u64> = sizes.iter().map(|s| s.0).collect();
    let bytes: usize = sizes.iter().map(|s| s.1).sum();
    let largest = counted.iter().max().copied().unwrap_or(0);
    let tokenize_calls = server.requests().iter().filter(|r| r.path_only() == TOKENIZE_PATH).count();
    let estimated = of_kind(&events, "request_sent").filter(|e| e["estimated"] == true).count();
    let sent = of_kind(&events, "request_sent").count();
    let trigger =
        of_kind(&events, "request_sent").last().map_or(0, |e| e["trigger_tokens"].as_u64().unwrap_or(0));
    let after: Vec<String> = of_kind(&events, "compaction_finished")
        .map(|e| group(e["tokens_after"].as_u64().unwrap_or(0)))
        .collect();
    let failed = of_kind(&events, "compaction_failed").count();
    let in_place = bodies.iter().filter(|b| b["tool_choice"] == "none").count();
    let (blind, last_pages) = coder.lock().map(|c| (c.blind, c.last_pages)).unwrap_or((0, 0));
    let mut notes = vec![
        format!(
            "notes: {} × {}–{} tokens (server's count), {:.2} bytes/token; smallest whole-result limit {} tokens (tool_finished.whole_limit)",
            s.files,
            group(*tokens.iter().min().unwrap_or(&0)),
            group(*tokens.iter().max().unwrap_or(&0)),
            bytes as f64 / tokens.iter().sum::<u64>().max(1) as f64,
            group(
                of_kind(&events, "tool_finished")
                    .filter_map(|e| e["whole_limit"].as_u64())
                    .min()
                    .unwrap_or(s.window / 8)
            )
        ),
        format!(
            "coder: {read_files} read_file calls, {stored} of them stored as evidence and paged; {paged} read_evidence \
             calls; {last_pages} last pages (\"This is the end.\") reached; {blind} steps decided with no tool result last"
        ),
        format!(
            "requests by kind: lead {}, coder {}, summary {} ({in_place} in place, with tool_choice none; the others \
             folding batches); largest {} ({:.0}% of the window); trigger {}",
            kinds.iter().filter(|k| **k == Kind::Lead).count(),
            coder_bodies.len(),
            kinds.iter().filter(|k| **k == Kind::Summary).count(),
            group(largest),
            100.0 * largest as f64 / s.window as f64,
            group(trigger)
        ),
        format!(
            "agentd counted {estimated} of {sent} requests as estimated; {tokenize_calls} /tokenize calls; \
             count error by role (ours − server's): {}",
            per_role.join("; ")
        ),
        format!(
            "compactions landed at [{}] tokens (agentd's count); {failed} compaction_failed",
            after.join(", ")
        ),
    ];
    let learned: Vec<String> = of_kind(&events, "window_learned")
        .map(|e| {
            format!(
                "{} → {} ({}) at seq {}",
                e["old_window"],
                e["new_window"],
                e["source"].as_str().unwrap_or(""),
                e["seq"]
            )
        })
        .collect();
    if !learned.is_empty() {
        notes.push(format!("windows learned: {}", learned.join(", ")));
    }
    if !outliers.is_empty() {
        notes.push(format!("requests counted more than 2% off the server: {}", outliers.join(", ")));
    }
    drop(daemon);
    Ok(Row {
        name: s.name.clone(),
        docs: tokens.iter().sum(),
        ended,
        requests: bodies.len(),
        refused: server.refused(),
        prompt,
        weighted,
        cached: cached_sum,
        compactions: of_kind(&events, "compaction_finished").count(),
        summaries: kinds.iter().filter(|k| **k == Kind::Summary).count(),
        paged,
        objective_pct: kept_pct(&coder_bodies, OBJECTIVE),
        failing_pct: kept_pct(&coder_bodies, FAILING_LINE),
        err_mean,
        err_worst,
        err_pairs: errors.len(),
        wall,
        notes,
    })
}

/// The seq of a role's `n`-th request_sent event.
fn ours_seq(events: &[Value], role: &str, n: usize) -> u64 {
    events
        .iter()
        .filter(|e| e["kind"] == "request_sent" && e["role"] == role)
        .nth(n)
        .and_then(|e| e["seq"].as_u64())
        .unwrap_or(0)
}
