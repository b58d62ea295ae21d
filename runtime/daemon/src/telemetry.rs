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
//!
//! A collector that cannot be reached, or that refuses what it is sent (an HTTP 500), is not silent:
//! the exporter is wrapped ([`Counted`]) so that each batch's outcome is counted ([`Exports`]) — in
//! `GET /metrics` (`agentd_otlp_exports_total`, `agentd_otlp_export_failures_total`) and in
//! `daemon.status` (`telemetry`: the endpoint, the batches exported and failed, the last error) —
//! and the first failure is logged once, at WARN, with the endpoint and the exporter's words.

use agentd_protocol::rpc::TelemetryStatus;
use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, TracerProvider,
};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use opentelemetry_sdk::Resource;
use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
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
    /// How the exports fare, for `/metrics` and `daemon.status`.
    pub exports: Exports,
}

/// How the exports to the collector fare since the daemon started; `Default`: no traces exported.
/// Clones share the counts.
#[derive(Debug, Clone, Default)]
pub struct Exports(Arc<Tally>);

#[derive(Debug, Default)]
struct Tally {
    /// Where the traces go; `None`: nowhere.
    endpoint: Option<String>,
    /// Batches the collector took.
    ok: Counter,
    /// Batches that could not be exported (the collector unreachable, or refusing them).
    failed: Counter,
    /// The last failure: when (RFC 3339), and what the exporter said.
    last_error: Mutex<Option<(String, String)>>,
    /// Whether the first failure has been logged.
    warned: AtomicBool,
}

impl Exports {
    /// Exports to `endpoint`, none made yet.
    pub fn to(endpoint: &str) -> Exports {
        Exports(Arc::new(Tally { endpoint: Some(endpoint.to_string()), ..Tally::default() }))
    }

    /// The counters of batches exported and failed, for `GET /metrics` to register.
    pub fn counters(&self) -> (Counter, Counter) {
        (self.0.ok.clone(), self.0.failed.clone())
    }

    /// Counts one batch's outcome; the first failure is logged, once.
    pub fn record(&self, outcome: &OTelSdkResult) {
        let Err(e) = outcome else {
            self.0.ok.inc();
            return;
        };
        self.0.failed.inc();
        let error = e.to_string();
        *self.0.last_error.lock() = Some((agentd_engine::clock::now_rfc3339(), error.clone()));
        if !self.0.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                endpoint = self.0.endpoint.as_deref().unwrap_or(""),
                %error,
                "traces could not be exported to the OTLP collector; each failed batch is counted \
                 (agentd_otlp_export_failures_total in /metrics, `agentd daemon`), and not logged again"
            );
        }
    }

    /// What `daemon.status` says of the exports; `None` when no traces are exported.
    pub fn status(&self) -> Option<TelemetryStatus> {
        let endpoint = self.0.endpoint.clone()?;
        let last = self.0.last_error.lock().clone();
        Some(TelemetryStatus {
            endpoint,
            exports_ok: self.0.ok.get(),
            exports_failed: self.0.failed.get(),
            last_error_at: last.as_ref().map(|(at, _)| at.clone()),
            last_error: last.map(|(_, error)| error),
        })
    }
}

/// An exporter whose every batch's outcome is counted in [`Exports`]: the SDK's batch processor
/// drops a failed batch without a word (its own log is compiled out), so the count is kept here.
#[derive(Debug)]
pub struct Counted<E> {
    inner: E,
    exports: Exports,
}

impl<E> Counted<E> {
    /// `inner`, counted in `exports`.
    pub fn new(inner: E, exports: Exports) -> Counted<E> {
        Counted { inner, exports }
    }
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    fn export(&self, batch: Vec<SpanData>) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        let sent = self.inner.export(batch);
        async move {
            let outcome = sent.await;
            self.exports.record(&outcome);
            outcome
        }
    }

    fn shutdown_with_timeout(&self, timeout: std::time::Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn shutdown(&self) -> OTelSdkResult {
        self.inner.shutdown()
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
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
        let exports = Exports::to(endpoint);
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(Counted::new(exporter, exports.clone()))
            .with_resource(Resource::builder().with_service_name(service).build())
            .build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("agentd"));
        Ok((Telemetry { provider, endpoint: endpoint.to_string(), exports }, layer))
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

    /// An exporter that takes every batch, or fails every one as a collector answering 500 does.
    #[derive(Debug)]
    struct Collector {
        takes: bool,
    }

    impl SpanExporter for Collector {
        async fn export(&self, _: Vec<SpanData>) -> OTelSdkResult {
            match self.takes {
                true => Ok(()),
                false => Err(opentelemetry_sdk::error::OTelSdkError::InternalFailure(
                    "HTTP export failed with status code: 500".into(),
                )),
            }
        }
    }

    #[tokio::test]
    async fn each_batch_is_counted_and_the_status_and_metrics_say_the_failures() {
        assert_eq!(Exports::default().status(), None, "no traces exported: nothing to say");
        let exports = Exports::to("http://127.0.0.1:9/v1/traces");
        let metrics = crate::metrics::Metrics::with_exports(&exports);
        let (good, bad) = (
            Counted::new(Collector { takes: true }, exports.clone()),
            Counted::new(Collector { takes: false }, exports.clone()),
        );
        good.export(Vec::new()).await.unwrap();
        for _ in 0..3 {
            assert!(bad.export(Vec::new()).await.is_err(), "the outcome is the exporter's");
        }
        let status = exports.status().unwrap();
        assert_eq!((status.exports_ok, status.exports_failed), (1, 3));
        assert_eq!(status.endpoint, "http://127.0.0.1:9/v1/traces");
        assert!(status.last_error.unwrap().contains("status code: 500"));
        assert!(status.last_error_at.is_some());
        let text = metrics.render(&[]);
        assert!(text.contains("agentd_otlp_exports_total 1\n"), "{text}");
        assert!(text.contains("agentd_otlp_export_failures_total 3\n"), "{text}");
        let off = crate::metrics::Metrics::new().render(&[]);
        assert!(off.contains("agentd_otlp_export_failures_total 0\n"), "{off}");
    }

    #[test]
    fn a_task_span_without_an_exporter_is_an_ordinary_span() {
        let span = task_span("not-a-uuid");
        let _ = span.enter();
        let span = task_span("0190aaaa-0000-7000-8000-000000000001");
        assert!(span.is_disabled() || span.metadata().is_some_and(|m| m.name() == "task"));
    }
}
