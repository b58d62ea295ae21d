//! The JSON-RPC 2.0 methods of the socket protocol (`../shared/interface.md`): parameter checking with
//! errors that name the parameter, and dispatch to the supervisor, the fitter and the store.

use crate::fitter::{GaugeOf, WindowOf};
use crate::scheduler::Jobs;
use crate::supervisor::{Cancel, Followup, Resume, RunningCount, Submit, Supervisor};
use crate::task::{compact_at_key, effective_compact_at, Shared};
use actix::prelude::*;
use agentd_evidence::{EvidenceError, Unit};
use agentd_policies::{Event, Record};
use serde::Serialize;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Instant;

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
pub const UNKNOWN_TASK: i64 = -32001;
pub const UNKNOWN_EVIDENCE: i64 = -32002;
pub const NOT_ALLOWED: i64 = -32003;
pub const BAD_WORKSPACE: i64 = -32004;

#[derive(Debug, Clone, PartialEq, Serialize, thiserror::Error)]
#[error("{message} ({code})")]
pub struct RpcError {
    pub code: i64,
    pub message: String,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError { code, message: message.into() }
    }
    pub fn invalid_params(message: impl Into<String>) -> RpcError {
        RpcError::new(INVALID_PARAMS, message)
    }
    pub fn internal(e: impl std::fmt::Display) -> RpcError {
        RpcError::new(INTERNAL_ERROR, e.to_string())
    }
    pub fn unknown_task(task_id: &str) -> RpcError {
        RpcError::new(UNKNOWN_TASK, format!("unknown task {task_id}"))
    }
    pub fn state(message: impl Into<String>) -> RpcError {
        RpcError::new(NOT_ALLOWED, message)
    }
    pub fn bad_workspace(message: impl Into<String>) -> RpcError {
        RpcError::new(BAD_WORKSPACE, message)
    }
}

/// Typed access to a request's `params`, with errors that name the parameter.
pub struct Params<'a>(pub &'a Value);

impl<'a> Params<'a> {
    /// A request's `params`: an object, or absent (`null`).
    pub fn of(params: &'a Value) -> Result<Params<'a>, RpcError> {
        if !(params.is_object() || params.is_null()) {
            return Err(RpcError::invalid_params("params must be an object"));
        }
        Ok(Params(params))
    }

    fn get(&self, name: &str) -> Option<&Value> {
        self.0.get(name).filter(|v| !v.is_null())
    }

    pub fn str(&self, name: &str) -> Result<String, RpcError> {
        match self.get(name) {
            None => Err(RpcError::invalid_params(format!("missing param `{name}`"))),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(RpcError::invalid_params(format!("param `{name}` must be a string"))),
        }
    }

    pub fn opt_str(&self, name: &str) -> Result<Option<String>, RpcError> {
        match self.get(name) {
            None => Ok(None),
            Some(_) => self.str(name).map(Some),
        }
    }

    pub fn opt_u64(&self, name: &str) -> Result<Option<u64>, RpcError> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| {
                RpcError::invalid_params(format!("param `{name}` must be a non-negative integer"))
            }),
        }
    }
}

/// Everything a method needs.
pub struct Methods {
    pub shared: Arc<Shared>,
    pub supervisor: Addr<Supervisor>,
    pub started: Instant,
}

impl Methods {
    /// Runs one method. `task.subscribe` is answered here and followed by the connection.
    pub async fn call(&self, method: &str, params: &Value) -> Result<Value, RpcError> {
        let p = Params::of(params)?;
        match method {
            "task.submit" => {
                let objective = p.str("objective")?;
                let workspace = p.str("workspace")?;
                let team = p.opt_str("team")?;
                let task_id = self.ask(Submit { objective, workspace, team }).await??;
                Ok(json!({ "task_id": task_id }))
            }
            "task.list" => {
                let tasks = self.shared.store.tasks().map_err(RpcError::internal)?;
                Ok(Value::Array(
                    tasks
                        .into_iter()
                        .map(|t| {
                            let mut v = json!({"task_id": t.task_id, "state": t.state, "objective": t.objective,
                                               "created_at": t.created_at, "recorded": true});
                            if let Some(end) = self.shared.ends.get(&t.task_id) {
                                v["state"] = json!(end.state);
                                v["recorded"] = json!(false);
                                v["error"] = json!(end.shown_error());
                            }
                            v
                        })
                        .collect(),
                ))
            }
            "task.status" => {
                let task_id = p.str("task_id")?;
                self.status(&task_id).await
            }
            "task.cancel" => {
                let task_id = p.str("task_id")?;
                let state = self.ask(Cancel { task_id }).await??;
                Ok(json!({ "state": state }))
            }
            "task.resume" => {
                let task_id = p.str("task_id")?;
                let state = self.ask(Resume { task_id }).await??;
                Ok(json!({ "state": state }))
            }
            "task.message" => {
                let task_id = p.str("task_id")?;
                let text = p.str("text")?;
                let state = self.ask(Followup { task_id, text }).await??;
                Ok(json!({ "state": state }))
            }
            "task.subscribe" => {
                let task_id = p.str("task_id")?;
                p.opt_u64("after_seq")?;
                self.task(&task_id)?;
                Ok(json!({ "subscribed": true }))
            }
            "context.get" => {
                let task_id = p.str("task_id")?;
                let role = p.opt_str("role")?.unwrap_or_else(|| "lead".into());
                self.task(&task_id)?;
                self.context(&task_id, &role).await
            }
            "log.get" => {
                let task_id = p.str("task_id")?;
                let role = p.opt_str("role")?;
                let after = p.opt_u64("after_seq")?.unwrap_or(0);
                let limit = p.opt_u64("limit")?.unwrap_or(10_000).min(100_000) as usize;
                self.task(&task_id)?;
                // Scan page by page so a role filter still returns up to `limit` records.
                let mut out: Vec<Value> = Vec::new();
                let mut cursor = after;
                while out.len() < limit {
                    let page =
                        self.shared.store.records(&task_id, cursor, 1000).map_err(RpcError::internal)?;
                    let Some((last, _)) = page.last() else { break };
                    cursor = *last;
                    for (seq, r) in &page {
                        if out.len() < limit && role.as_deref().is_none_or(|want| r.role() == want) {
                            out.push(record_json(*seq, r));
                        }
                    }
                }
                Ok(json!({ "records": out }))
            }
            "evidence.list" => {
                let task_id = p.opt_str("task_id")?;
                let list = self.shared.store.evidence_list(task_id.as_deref()).map_err(evidence_error)?;
                serde_json::to_value(list).map_err(RpcError::internal)
            }
            "evidence.get" => {
                let id = p.str("id")?;
                let meta = self.shared.store.evidence(&id).map_err(evidence_error)?;
                serde_json::to_value(meta).map_err(RpcError::internal)
            }
            "evidence.read" => {
                let id = p.str("id")?;
                let offset = p.opt_u64("offset")?.unwrap_or(0);
                let limit = p.opt_u64("limit")?.unwrap_or(64 << 10).min(4 << 20);
                let unit = match p.opt_str("unit")?.as_deref() {
                    None | Some("bytes") => Unit::Bytes,
                    Some("lines") => Unit::Lines,
                    Some(other) => {
                        return Err(RpcError::invalid_params(format!(
                            "param `unit` must be \"bytes\" or \"lines\", got {other:?}"
                        )))
                    }
                };
                let page =
                    self.shared.store.read_evidence(&id, offset, limit, unit).map_err(evidence_error)?;
                serde_json::to_value(page).map_err(RpcError::internal)
            }
            "evidence.verify" => {
                let problems = self.shared.store.verify_evidence().map_err(evidence_error)?;
                let checked = self.shared.store.evidence_list(None).map_err(evidence_error)?.len();
                Ok(json!({"checked": checked, "problems": problems.iter().map(|p| json!({
                    "id": p.id, "sha256": p.sha256, "path": p.path, "problem": p.to_string()})).collect::<Vec<_>>()}))
            }
            "settings.get" | "settings.set" => self.settings(method == "settings.set", &p),
            "models.probe" => {
                let role = p.str("role")?;
                let rc = self
                    .shared
                    .config
                    .role(&role)
                    .ok_or_else(|| RpcError::invalid_params(format!("no role {role:?} in the team")))?;
                let client = self
                    .shared
                    .client(&rc.provider)
                    .ok_or_else(|| RpcError::internal(format!("no client for provider {}", rc.provider)))?;
                let window = self
                    .shared
                    .fitter
                    .send(WindowOf { client: client.clone(), model: rc.model.clone(), fresh: true })
                    .await
                    .map_err(RpcError::internal)?
                    .map_err(RpcError::internal)?;
                Ok(json!({"role": role, "server": client.base_url(), "model": rc.model,
                          "window": window.tokens, "window_source": window.source}))
            }
            "daemon.status" => {
                let running = self.supervisor.send(RunningCount).await.map_err(RpcError::internal)?;
                let jobs = self.shared.scheduler.send(Jobs).await.map_err(RpcError::internal)?;
                // A status is a health check too: heal the store and record what it refused.
                let shared = self.shared.clone();
                tokio::task::spawn_blocking(move || {
                    crate::ends::check_storage(&shared.store, &shared.bus, &shared.ends)
                })
                .await
                .map_err(RpcError::internal)?;
                let health = self.shared.store.health();
                let mut storage = json!({"ok": health.ok, "unrecorded_ends": self.shared.ends.len()});
                if let Some(e) = health.error {
                    storage["error"] = json!(e);
                }
                if let Some(since) = health.since {
                    storage["since"] = json!(humantime::format_rfc3339_millis(since).to_string());
                }
                Ok(json!({"version": env!("CARGO_PKG_VERSION"), "uptime_s": self.started.elapsed().as_secs(),
                          "tasks_running": running, "jobs": jobs, "clock": crate::clock::now_rfc3339(),
                          "storage": storage}))
            }
            "clock.advance" => {
                let ms = p.opt_u64("ms")?.ok_or_else(|| RpcError::invalid_params("missing param `ms`"))?;
                let clock = crate::clock::clock();
                if !clock.advance(std::time::Duration::from_millis(ms)) {
                    return Err(RpcError::state(
                        "the clock can only be advanced when the daemon runs with AGENTD_CLOCK=manual",
                    ));
                }
                Ok(json!({"now": crate::clock::now_rfc3339()}))
            }
            other => Err(RpcError::new(METHOD_NOT_FOUND, format!("unknown method {other:?}"))),
        }
    }

    async fn ask<M>(&self, msg: M) -> Result<M::Result, RpcError>
    where
        M: Message + Send + 'static,
        M::Result: Send,
        Supervisor: Handler<M>,
    {
        self.supervisor.send(msg).await.map_err(RpcError::internal)
    }

    fn task(&self, task_id: &str) -> Result<agentd_evidence::TaskMeta, RpcError> {
        self.shared
            .store
            .task(task_id)
            .map_err(RpcError::internal)?
            .ok_or_else(|| RpcError::unknown_task(task_id))
    }

    async fn status(&self, task_id: &str) -> Result<Value, RpcError> {
        let meta = self.task(task_id)?;
        let mut roles = serde_json::Map::new();
        let mut names = vec!["lead".to_string(), "coder".to_string()];
        names.extend(self.shared.config.specialists.keys().cloned());
        for role in names {
            let gauge = self
                .shared
                .fitter
                .send(GaugeOf { task_id: task_id.to_string(), role: role.clone() })
                .await
                .map_err(RpcError::internal)?;
            if let Some(g) = gauge {
                roles.insert(
                    role,
                    json!({"tokens": g.tokens, "estimated": g.estimated, "window": g.window,
                           "window_source": g.window_source, "count_source": g.count_source,
                           "calibration": g.calibration, "measured_by": g.measured_by}),
                );
            }
        }
        let mut out = json!({"task_id": meta.task_id, "state": meta.state, "objective": meta.objective,
                             "workspace": meta.workspace, "created_at": meta.created_at,
                             "updated_at": meta.updated_at, "roles": roles});
        if let Some(r) = meta.result {
            out["result"] = json!(r);
        }
        if let Some(e) = meta.error {
            out["error"] = json!(e);
        }
        // An end the store could not record yet is the truth; the store still shows the old state.
        out["recorded"] = json!(true);
        if let Some(end) = self.shared.ends.get(task_id) {
            out["state"] = json!(end.state);
            out["recorded"] = json!(false);
            out["error"] = json!(end.shown_error());
            out["record_error"] = json!(end.record_error);
            if let Some(r) = end.result {
                out["result"] = json!(r);
            }
        }
        Ok(out)
    }

    async fn context(&self, task_id: &str, role: &str) -> Result<Value, RpcError> {
        if self.shared.config.role(role).is_none() {
            return Err(RpcError::invalid_params(format!("no role {role:?} in the team")));
        }
        let gauge = self
            .shared
            .fitter
            .send(GaugeOf { task_id: task_id.to_string(), role: role.to_string() })
            .await
            .map_err(RpcError::internal)?;
        match gauge {
            Some(g) => serde_json::to_value(g).map_err(RpcError::internal),
            None => Ok(json!({"role": role, "measured": false,
                              "note": "this role has not made a request since the daemon started"})),
        }
    }

    fn settings(&self, set: bool, p: &Params<'_>) -> Result<Value, RpcError> {
        let role = p.str("role")?;
        let key = p.str("key")?;
        let rc = self
            .shared
            .config
            .role(&role)
            .ok_or_else(|| RpcError::invalid_params(format!("no role {role:?} in the team")))?;
        if key != "compact_at" {
            return Err(RpcError::invalid_params(format!("unknown setting {key:?}; settable: compact_at")));
        }
        let server = &self.shared.config.provider_of(rc).base_url;
        if set {
            let value = match p.0.get("value") {
                Some(v) => v.as_u64().filter(|v| (1..=100).contains(v)).ok_or_else(|| {
                    RpcError::invalid_params("param `value` must be an integer percentage from 1 to 100")
                })?,
                None => return Err(RpcError::invalid_params("missing param `value`")),
            };
            let store = &self.shared.store;
            for k in [compact_at_key(&role, None), compact_at_key(&role, Some((server, &rc.model)))] {
                store.set_setting(&k, &json!(value)).map_err(RpcError::internal)?;
            }
        }
        let value =
            effective_compact_at(&self.shared, &role, server, &rc.model).map_err(RpcError::internal)?;
        Ok(json!({"role": role, "key": key, "value": value, "server": server, "model": rc.model}))
    }
}

/// A log record as `log.get` and `log --jsonl` show it; checkpoints in the design's shape.
pub fn record_json(seq: u64, record: &Record) -> Value {
    let mut v = match record {
        Record::Checkpoint { role, subtype, history, archive_id } => {
            json!({"type": "system", "subtype": subtype, "role": role, "history": history, "archive_id": archive_id})
        }
        other => serde_json::to_value(other).unwrap_or(Value::Null),
    };
    v["seq"] = json!(seq);
    v
}

/// A `task.event` notification.
pub fn event_notification(event: &Event) -> Value {
    json!({"jsonrpc": "2.0", "method": "task.event", "params": event})
}

/// Sent after the terminal event that ends a subscription (one nothing follows): a client that
/// replays a history with earlier ends in it (resumed, followed up) knows this is the real one.
pub fn end_notification(event: &Event) -> Value {
    json!({"jsonrpc": "2.0", "method": "task.end", "params": {"task_id": event.task_id, "seq": event.seq, "kind": event.kind.name()}})
}

/// The `task.end` of a task whose end the store could not record (no terminal event in the log
/// yet): `seq` is the last event the subscriber was sent.
pub fn unrecorded_end_notification(task_id: &str, seq: u64, end: &crate::ends::End) -> Value {
    json!({"jsonrpc": "2.0", "method": "task.end", "params": {"task_id": task_id, "seq": seq,
           "kind": end.kind.name(), "state": end.state, "recorded": false, "error": end.shown_error()}})
}

/// Evidence errors as socket errors: an unknown id is -32002; integrity and IO failures name the blob.
fn evidence_error(e: EvidenceError) -> RpcError {
    match e {
        EvidenceError::UnknownEvidence(id) => {
            RpcError::new(UNKNOWN_EVIDENCE, format!("unknown evidence {id}"))
        }
        other => RpcError::internal(other),
    }
}
