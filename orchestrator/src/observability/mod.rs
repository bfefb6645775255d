//! Trace export: when `observability:` in troupe.yaml or the standard `OTEL_EXPORTER_OTLP_*`
//! variables name a collector, troupe's spans (see [`troupe_actors::trace`]) are batched and sent
//! over OTLP (HTTP/protobuf). Off by default.
//!
//! Export never slows or fails work: spans queue in a bounded buffer that a background thread
//! drains; a collector that refuses or hangs costs that thread its timeout, and spans that find
//! the buffer full are dropped. Failed exports are counted and logged once. The process installs
//! one exporter, the first time a runtime starts with tracing asked for; [`shutdown`] sends what
//! is left (waiting at most [`SHUTDOWN_WAIT`]). The bundled `observability/langfuse` plugin
//! ([`langfuse`]) adds Langfuse as a second destination of the same spans.

pub mod langfuse;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};

use crate::settings::ConfigError;
pub use crate::settings::observability::ObservabilitySettings;
use crate::settings::observability::header_names;

/// Longest a process waits at exit for its last spans to go out.
pub const SHUTDOWN_WAIT: Duration = Duration::from_secs(2);

/// How long one export may take before it counts as failed.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// One destination of spans: an OTLP/HTTP traces URL and the headers it needs.
#[derive(Clone, PartialEq)]
pub struct ExportTarget {
    /// The full traces URL (`.../v1/traces`).
    pub url: String,
    /// Request headers (credentials).
    pub headers: Vec<(String, String)>,
    /// Resource attributes this destination asks for (environment, release).
    pub resource: Vec<(String, String)>,
    /// Share of traces kept, 0 to 1.
    pub sample_rate: Option<f64>,
    /// Longest argument or result text on a span.
    pub max_chars: Option<usize>,
}

impl std::fmt::Debug for ExportTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExportTarget")
            .field("url", &self.url)
            .field("headers", &header_names(&self.headers))
            .field("resource", &self.resource)
            .field("sample_rate", &self.sample_rate)
            .field("max_chars", &self.max_chars)
            .finish()
    }
}

/// The process's exporter, once installed.
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// Exports that failed (a collector down, slow or refusing).
static FAILED_EXPORTS: AtomicU64 = AtomicU64::new(0);

/// How many exports have failed in this process.
pub fn failed_exports() -> u64 {
    FAILED_EXPORTS.load(Ordering::Relaxed)
}

/// Installs the exporter the settings (and a plugin's `extra` destination) ask for, once per
/// process; does nothing when no destination is named or one is already installed. A
/// collector URL that cannot be used is a config error.
pub fn install(
    settings: &ObservabilitySettings,
    extra: Option<&ExportTarget>,
) -> Result<(), ConfigError> {
    if !(settings.wanted() || extra.is_some()) || PROVIDER.get().is_some() {
        return Ok(());
    }
    let settings_max_chars = settings
        .max_chars
        .or(extra.and_then(|target| target.max_chars));
    let settings = settings.clone();
    let extra = extra.cloned();
    // The HTTP client blocks on its own runtime, which must not be made inside tokio's.
    let built = std::thread::spawn(move || build_provider(&settings, extra))
        .join()
        .map_err(|_| ConfigError::Invalid {
            key: "observability".into(),
            problem: "the trace exporter could not be built".into(),
        })??;
    if let Some(max) = settings_max_chars {
        troupe_actors::trace::set_max_chars(max);
    }
    if PROVIDER.set(built.clone()).is_ok() {
        opentelemetry::global::set_tracer_provider(built);
        // Every exporter built here is a `Counted`, which masks before encoding.
        troupe_actors::trace::set_exporter_masks(true);
        troupe_actors::trace::enable();
        tracing::info!("traces are exported over OTLP");
    }
    Ok(())
}

/// Sends the spans still queued and stops the exporter, waiting at most [`SHUTDOWN_WAIT`].
pub fn shutdown() {
    if let Some(provider) = PROVIDER.get() {
        if let Err(error) = provider.shutdown_with_timeout(SHUTDOWN_WAIT) {
            tracing::debug!(%error, "the last spans were not all sent");
        }
        let failed = failed_exports();
        if failed > 0 {
            tracing::warn!(
                failed,
                "some trace exports failed; their spans were dropped"
            );
        }
    }
}

/// An OTLP/HTTP span exporter for `url` (`None`: the `OTEL_EXPORTER_OTLP_*` variables).
fn exporter(
    url: Option<String>,
    headers: &[(String, String)],
    key: &str,
) -> Result<Counted, ConfigError> {
    let mut builder = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_timeout(EXPORT_TIMEOUT);
    if let Some(url) = url {
        builder = builder.with_endpoint(url);
    }
    if !headers.is_empty() {
        builder = builder.with_headers(headers.iter().cloned().collect());
    }
    let inner = builder.build().map_err(|error| ConfigError::Invalid {
        key: key.into(),
        problem: format!("the OTLP exporter could not be set up: {error}"),
    })?;
    Ok(Counted {
        inner,
        warned: Arc::new(std::sync::Once::new()),
    })
}

fn build_provider(
    settings: &ObservabilitySettings,
    extra: Option<ExportTarget>,
) -> Result<SdkTracerProvider, ConfigError> {
    let mut builder = SdkTracerProvider::builder();
    if settings.wanted() {
        let url = settings.endpoint.as_deref().map(|base| {
            let base = base.trim_end_matches('/');
            if base.ends_with("/v1/traces") {
                base.to_string()
            } else {
                format!("{base}/v1/traces")
            }
        });
        builder = builder.with_batch_exporter(exporter(
            url,
            &settings.headers,
            "observability.otlp_endpoint",
        )?);
    }
    let mut resource = opentelemetry_sdk::Resource::builder().with_service_name(
        settings
            .service_name
            .clone()
            .unwrap_or_else(|| "troupe".into()),
    );
    let mut sample_rate = settings.sample_rate;
    if let Some(target) = extra {
        builder = builder.with_batch_exporter(exporter(
            Some(target.url.clone()),
            &target.headers,
            langfuse::NAME,
        )?);
        for (key, value) in target.resource {
            resource = resource.with_attribute(opentelemetry::KeyValue::new(key, value));
        }
        sample_rate = sample_rate.or(target.sample_rate);
    }
    let sampler = match sample_rate {
        Some(rate) if rate < 1.0 => opentelemetry_sdk::trace::Sampler::ParentBased(Box::new(
            opentelemetry_sdk::trace::Sampler::TraceIdRatioBased(rate),
        )),
        _ => opentelemetry_sdk::trace::Sampler::AlwaysOn,
    };
    let provider = builder
        .with_sampler(sampler)
        .with_resource(resource.build())
        .build();
    Ok(provider)
}

/// The OTLP exporter, masking call texts before they are encoded, counting failures and
/// logging the first.
#[derive(Debug)]
struct Counted<E = opentelemetry_otlp::SpanExporter> {
    inner: E,
    warned: Arc<std::sync::Once>,
}

/// Masks and caps the raw call texts of a batch (see [`troupe_actors::trace::call_text`]),
/// reading troupe's own secrets once for the whole batch.
fn prepare(batch: &mut [SpanData]) {
    let own = troupe_tools::builtin::redact::OwnSecrets::current();
    for span in batch {
        troupe_actors::trace::prepare_for_export(&mut span.attributes, &own);
    }
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, mut batch: Vec<SpanData>) -> OTelSdkResult {
        // Here, on the exporter's thread, and before anything leaves the process.
        prepare(&mut batch);
        let result = self.inner.export(batch).await;
        if let Err(error) = &result {
            FAILED_EXPORTS.fetch_add(1, Ordering::Relaxed);
            self.warned.call_once(|| {
                tracing::warn!(%error, "the trace collector did not take spans; work goes on, and spans that cannot be sent are dropped");
            });
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keeps what it is given, as a collector would receive it.
    #[derive(Debug, Clone, Default)]
    struct Recording(Arc<std::sync::Mutex<Vec<SpanData>>>);

    impl SpanExporter for Recording {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            self.0.lock().unwrap().extend(batch);
            Ok(())
        }
    }

    #[test]
    fn an_exported_calls_texts_are_masked_by_the_exporter() {
        use opentelemetry::trace::{Span as _, Tracer as _, TracerProvider as _};
        use troupe_actors::trace::{CallText, call_text, set_exporter_masks};

        let recording = Recording::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(Counted {
                inner: recording.clone(),
                warned: Arc::new(std::sync::Once::new()),
            })
            .build();
        set_exporter_masks(true);
        let key = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD";
        let arguments = call_text(
            CallText::Arguments,
            format!("{{\"command\": \"curl -H 'Authorization: Bearer {key}'\"}}"),
            "terminal",
        );
        let result = call_text(
            CallText::Result,
            format!("OPENAI_API_KEY={key}"),
            "terminal",
        );
        // The span carries the raw text: the masking is the exporter's.
        assert!(arguments.value.as_str().contains(key));
        let mut span = provider.tracer("test").start("execute_tool terminal");
        span.set_attributes([
            opentelemetry::KeyValue::new("gen_ai.tool.name", "terminal"),
            arguments,
            result,
        ]);
        span.end();
        let exported = recording.0.lock().unwrap().clone();
        assert_eq!(exported.len(), 1);
        let attributes = &exported[0].attributes;
        let text = |key: &str| {
            attributes
                .iter()
                .find(|a| a.key.as_str() == key)
                .map(|a| a.value.as_str().into_owned())
        };
        for attribute in attributes {
            assert!(
                !attribute.key.as_str().starts_with("troupe.raw."),
                "{attribute:?}"
            );
            assert!(!attribute.value.as_str().contains(key), "{attribute:?}");
        }
        let arguments = text("troupe.call.arguments").unwrap();
        assert!(
            arguments.contains("curl -H 'Authorization: Bearer "),
            "{arguments}"
        );
        assert!(
            text("troupe.call.result")
                .unwrap()
                .starts_with("OPENAI_API_KEY=")
        );
    }
}
