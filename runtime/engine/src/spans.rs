//! The spans a task's work runs in, as `tracing` spans: the daemon exports them as OpenTelemetry
//! traces when it is asked to (its `telemetry` module); the engine only names them and their
//! attributes, here, once. A task's run is the `task` span the daemon opens; inside it each role's
//! `turn`, each model `request`, each `tool` call and each `compaction` (a delegated teammate's turn
//! inside the lead's `delegate` call, so a delegation nests where it was made).
//!
//! No span carries a prompt, a tool's arguments or its result — sizes, names, ids and outcomes only —
//! unless the user asked for them (`[telemetry] include_content`, `TeamConfig::trace_content`): then
//! [`content`] records them, redacted as every tool result is, and cut to [`CONTENT_BYTES`].

use tracing::field::Empty;
use tracing::Span;

/// A role's turn.
pub fn turn(task_id: &str, role: &str) -> Span {
    tracing::info_span!("turn", agentd.task_id = %task_id, agentd.role = %role)
}

/// One model request, retries included; its usage and outcome recorded when it is answered.
pub fn request(model: &str, server: &str, window: u64, tokens: u64, source: &str) -> Span {
    tracing::info_span!(
        "request",
        gen_ai.request.model = %model,
        server.address = %server,
        agentd.window = window,
        agentd.tokens_sent = tokens,
        agentd.count_source = %source,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        agentd.cached_tokens = Empty,
        agentd.retries = Empty,
        agentd.refused = Empty,
        gen_ai.prompt = Empty,
        gen_ai.completion = Empty,
    )
}

/// The most of one text a span carries when content is traced, in bytes.
pub const CONTENT_BYTES: usize = 4096;

/// Records `text` as `field` of `span`, secrets redacted and cut to [`CONTENT_BYTES`] at a
/// character's edge: only called when the user asked for content in traces.
pub fn content(span: &Span, field: &'static str, text: &str, redactor: &agentd_policies::redact::Redactor) {
    let text = redactor.redact(text);
    span.record(field, &text[..agentd_protocol::text::floor_boundary(&text, CONTENT_BYTES)]);
}

/// Records a request's usage on its span.
pub fn answered(span: &Span, prompt: u64, completion: u64, cached: u64) {
    span.record("gen_ai.usage.input_tokens", prompt);
    span.record("gen_ai.usage.output_tokens", completion);
    span.record("agentd.cached_tokens", cached);
}

/// One tool call; whether it succeeded, and the evidence holding its result, recorded at its end.
pub fn tool(name: &str, call_id: &str) -> Span {
    tracing::info_span!(
        "tool",
        agentd.tool = %name,
        agentd.call_id = %call_id,
        agentd.ok = Empty,
        agentd.evidence_id = Empty,
        agentd.arguments = Empty,
        agentd.result = Empty,
    )
}

/// One compaction; its outcome recorded at its end.
pub fn compaction(tokens_before: u64) -> Span {
    tracing::info_span!(
        "compaction",
        agentd.tokens_before = tokens_before,
        agentd.tokens_after = Empty,
        agentd.batches = Empty,
        agentd.archive_id = Empty,
    )
}
