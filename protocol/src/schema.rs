//! The protocol's JSON Schema, generated from its types: what a client author reads.
//!
//! `docs/protocol.schema.json` is this schema, committed; `tests/schema.rs` fails when the file is
//! stale, and `cargo run -p agentd-protocol --example write_schema` rewrites it.

use crate::event::Event;
use crate::evidence::{EvidenceMeta, Page};
use crate::gauge::Gauge;
use crate::memory::Note;
use crate::rpc::{
    ClockResult, CompactResult, ContextResult, DaemonStatus, ErrorCode, EventsResult, LogResult, NoteChanged,
    NoteDetail, Notification, ProbeResult, Request, RpcError, SettingResult, StateResult, Submitted,
    Subscribed, TaskStatus, TaskSummary, VerifyResult,
};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::Serialize;

/// Every type a client sends or receives, under one root: `request`, `notification`, `error`, and a
/// result type per method.
#[derive(Serialize, JsonSchema)]
#[allow(dead_code)]
struct Protocol {
    request: Request,
    notification: Notification,
    error: RpcError,
    error_code: ErrorCode,
    event: Event,
    results: Results,
    /// The HTTP API's error answer (`docs/openapi.json` has the routes).
    http_error: crate::http::ErrorBody,
}

/// The result of each method, by method name.
#[derive(Serialize, JsonSchema)]
#[allow(dead_code)]
struct Results {
    #[serde(rename = "task.submit")]
    task_submit: Submitted,
    #[serde(rename = "task.list")]
    task_list: Vec<TaskSummary>,
    #[serde(rename = "task.status")]
    task_status: TaskStatus,
    #[serde(rename = "task.cancel")]
    task_cancel: StateResult,
    #[serde(rename = "task.resume")]
    task_resume: StateResult,
    #[serde(rename = "task.message")]
    task_message: StateResult,
    #[serde(rename = "task.compact")]
    task_compact: CompactResult,
    #[serde(rename = "task.subscribe")]
    task_subscribe: Subscribed,
    #[serde(rename = "task.events")]
    task_events: EventsResult,
    #[serde(rename = "context.get")]
    context_get: ContextResult,
    #[serde(rename = "log.get")]
    log_get: LogResult,
    #[serde(rename = "evidence.list")]
    evidence_list: Vec<EvidenceMeta>,
    #[serde(rename = "evidence.get")]
    evidence_get: EvidenceMeta,
    #[serde(rename = "evidence.read")]
    evidence_read: Page,
    #[serde(rename = "evidence.verify")]
    evidence_verify: VerifyResult,
    #[serde(rename = "memory.list")]
    memory_list: Vec<Note>,
    #[serde(rename = "memory.get")]
    memory_get: NoteDetail,
    #[serde(rename = "memory.edit")]
    memory_edit: NoteChanged,
    #[serde(rename = "memory.delete")]
    memory_delete: NoteChanged,
    #[serde(rename = "memory.undo")]
    memory_undo: NoteChanged,
    #[serde(rename = "settings.get")]
    settings_get: SettingResult,
    #[serde(rename = "settings.set")]
    settings_set: SettingResult,
    #[serde(rename = "models.probe")]
    models_probe: ProbeResult,
    #[serde(rename = "daemon.status")]
    daemon_status: DaemonStatus,
    #[serde(rename = "clock.advance")]
    clock_advance: ClockResult,
    /// `context.get`'s gauge, named on its own for clients that only want it.
    gauge: Gauge,
}

/// The protocol's schema (JSON Schema 2020-12).
pub fn protocol_schema() -> Schema {
    SchemaGenerator::default().into_root_schema_for::<Protocol>()
}

/// The schema as the committed file holds it: pretty JSON with a final newline.
pub fn protocol_schema_text() -> String {
    let mut text = serde_json::to_string_pretty(&protocol_schema()).unwrap_or_default();
    text.push('\n');
    text
}
