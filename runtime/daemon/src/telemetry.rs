//! Traces over OpenTelemetry (OTLP/HTTP, protobuf), when asked for: `[telemetry] otlp_endpoint`, or
//! the standard `OTEL_EXPORTER_OTLP_ENDPOINT` (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` taken as the
//! whole URL); off when neither is set. The service is `OTEL_SERVICE_NAME`, else `agentd`.
//!
//! The spans are the engine's (`agentd_engine::spans`: `turn`, `request`, `tool`, `compaction`) in
//! a `task` span opened here when a task's run starts. A task's trace id *is* its id (a UUID is 128
//! bits, as a trace id): every run of a task — a resume, a follow-up, a fleet node taking it over —
//! lands in the same trace, and a delegation's turn nests in the lead's `delegate` call. Spans carry
//! sizes, names, ids and outcomes; a prompt, a tool's arguments or its result only with `[telemetry]
//! include_content = true`, redacted (`agentd_engine::spans::content`).

use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, TracerProvider,
};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::registry::LookupSpan;

/// The OTLP/HTTP path of traces under a collector's base URL.
const TRACES_PATH: &str = "/v1/traces";

/// Why traces could not be exported.
#[derive(Debug, thiserror::Error)]
#[error("OpenTelemetry: cannot export traces to {endpoint}: {reason}")]
pub struct TelemetryError {
    /// Where they were to go.
    pub endpoint: String,
    /// What the exporter said.
    pub reason: String,
}

/// The exporter's side of the daemon: flushed and stopped by [`Telemetry::shutdown`].
pub struct Telemetry {
    provider: SdkTracerProvider,
    /// Where the traces go.
    pub endpoint: String,
}

/// Where traces go: the configured base URL, else the environment's; `None`: none are exported.
pub fn endpoint(configured: Option<&str>, env: impl Fn(&str) -> Option<String>) -> Option<String> {
    if let Some(url) = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").filter(|u| !u.trim().is_empty()) {
        return Some(url.trim().to_string());
    }
    let base = configured.map(str::to_string).or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT"))?;
    let base = base.trim().trim_end_matches('/');
    (!base.is_empty()).then(|| format!("{base}{TRACES_PATH}"))
}

impl Telemetry {
    /// An exporter of traces to `endpoint` (the whole URL), and the `tracing` layer that feeds it.
    pub fn start<S>(
        endpoint: &str,
        service: String,
    ) -> Result<
        (Telemetry, tracing_opentelemetry::OpenTelemetryLayer<S, opentelemetry_sdk::trace::Tracer>),
        TelemetryError,
    >
    where
        S: tracing::Subscriber + for<'span> LookupSpan<'span>,
    {
        // The exporter's HTTP client is reqwest's, which takes the process's TLS provider.
        agentd_providers::install_tls_provider();
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(endpoint)
            .build()
            .map_err(|e| TelemetryError { endpoint: endpoint.to_string(), reason: e.to_string() })?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(Resource::builder().with_service_name(service).build())
            .build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("agentd"));
        Ok((Telemetry { provider, endpoint: endpoint.to_string() }, layer))
    }

    /// Sends what is buffered and stops the exporter.
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!(error = %e, endpoint = %self.endpoint, "the last traces could not be sent");
        }
    }
}

/// The span a task's run goes on in: in the trace whose id is the task's.
pub fn task_span(task_id: &str) -> tracing::Span {
    let span = tracing::info_span!("task", agentd.task_id = %task_id);
    if let Ok(id) = uuid::Uuid::parse_str(task_id) {
        let bytes = *id.as_bytes();
        let mut tail = [0u8; 8];
        tail.copy_from_slice(&bytes[8..]);
        // The trace's root is no span of a run: each run of the task is a child of the same one.
        let parent = SpanContext::new(
            TraceId::from_bytes(bytes),
            SpanId::from_bytes(tail),
            TraceFlags::SAMPLED,
            true,
            TraceState::default(),
        );
        let cx = opentelemetry::Context::new().with_remote_span_context(parent);
        // Without the layer (no export) there is no context to set.
        let _ = span.set_parent(cx);
    }
    span
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_is_the_configs_then_the_environments_and_none_is_off() {
        let none = |_: &str| None;
        assert_eq!(endpoint(None, none), None);
        assert_eq!(endpoint(Some("http://c:4318/"), none).as_deref(), Some("http://c:4318/v1/traces"));
        let env = |name: &str| (name == "OTEL_EXPORTER_OTLP_ENDPOINT").then(|| "http://e:4318".to_string());
        assert_eq!(endpoint(None, env).as_deref(), Some("http://e:4318/v1/traces"));
        assert_eq!(
            endpoint(Some("http://c:4318"), env).as_deref(),
            Some("http://c:4318/v1/traces"),
            "the config wins"
        );
        let whole =
            |name: &str| (name == "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").then(|| "http://t/x".to_string());
        assert_eq!(endpoint(Some("http://c:4318"), whole).as_deref(), Some("http://t/x"), "taken whole");
    }

    #[test]
    fn a_task_span_without_an_exporter_is_an_ordinary_span() {
        let span = task_span("not-a-uuid");
        let _ = span.enter();
        let span = task_span("0190aaaa-0000-7000-8000-000000000001");
        assert!(span.is_disabled() || span.metadata().is_some_and(|m| m.name() == "task"));
    }
}
