//! OpenTelemetry spans of troupe's work: a session, its turns, each model request (after the
//! GenAI semantic conventions) and each tool call, named after the underlying tool (also through
//! `tool_call` or from an `execute_code` script), with a subagent's session under the
//! `delegate_task` call that started it.
//!
//! This crate only makes spans, through the global tracer; whoever installs a tracer provider
//! (the `troupe` orchestrator, from `observability:` or `OTEL_EXPORTER_OTLP_*`) calls
//! [`enable`]. Until then every function here returns at once, so tracing that is off costs a
//! relaxed atomic load per span.
//!
//! A span crosses processes as a W3C `traceparent` ([`TraceSpan::traceparent`],
//! [`TraceSpan::from_traceparent`]): a board task carries its creator's, so a worker on another
//! host continues the same trace.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use opentelemetry::trace::{
    SpanContext, SpanKind, Status, TraceContextExt, TraceFlags, TraceState, Tracer as _,
};
use opentelemetry::{Context, KeyValue, SpanId, TraceId, global};

/// The instrumentation scope of troupe's spans.
pub const TRACER_NAME: &str = "troupe";

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Default longest text (in characters) of an argument or result put on a span.
pub const DEFAULT_MAX_CHARS: usize = 12_000;

static MAX_CHARS: AtomicUsize = AtomicUsize::new(DEFAULT_MAX_CHARS);

/// Sets the longest text put on a span (`observability.max_chars`).
pub fn set_max_chars(max: usize) {
    MAX_CHARS.store(max, Ordering::Relaxed);
}

/// A tool call's arguments or result as a span shows it: secrets masked by the receipts'
/// rules, then cut to the configured length. A `read_file` result is summarised first (its
/// head and tail, with how many lines were left out).
pub fn shown(text: &str, tool: &str) -> String {
    let text = if tool == "read_file" {
        summarised(text)
    } else {
        Cow::Borrowed(text)
    };
    capped(
        &troupe_tools::builtin::redact::redact(&text),
        MAX_CHARS.load(Ordering::Relaxed),
    )
}

/// Lines kept from the start and the end of a file's text on a span.
const HEAD_LINES: usize = 20;
const TAIL_LINES: usize = 10;

fn summarised(text: &str) -> Cow<'_, str> {
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() <= HEAD_LINES + TAIL_LINES {
        return Cow::Borrowed(text);
    }
    let left_out = lines.len() - HEAD_LINES - TAIL_LINES;
    Cow::Owned(format!(
        "{}\n[... {left_out} lines left out ...]\n{}",
        lines[..HEAD_LINES].join("\n"),
        lines[lines.len() - TAIL_LINES..].join("\n")
    ))
}

/// `text` cut to at most `max` characters (on a character boundary), saying how much is gone.
fn capped(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!(
            "{}[... {} more characters]",
            &text[..cut],
            text[cut..].chars().count()
        ),
        None => text.to_string(),
    }
}

/// Spans are made from now on (a tracer provider is installed).
pub fn enable() {
    // Looked up once: the global lookup takes a lock and boxes a tracer each time.
    TRACER.get_or_init(|| global::tracer(TRACER_NAME));
    ENABLED.store(true, Ordering::Relaxed);
}

/// The tracer of the provider installed before [`enable`].
static TRACER: std::sync::OnceLock<global::BoxedTracer> = std::sync::OnceLock::new();

/// No spans are made from now on (spans already started still end and are exported).
pub fn disable() {
    ENABLED.store(false, Ordering::Relaxed);
}

/// Whether spans are made.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// A span in progress (or the parent of spans to come); empty while tracing is off. Cloning
/// shares the span; it ends at [`TraceSpan::end`] (or when its last clone is dropped).
#[derive(Debug, Clone, Default)]
pub struct TraceSpan {
    cx: Option<Context>,
}

impl TraceSpan {
    /// Starts a span named `name` under `parent` (a new trace when `parent` is empty), with
    /// the attributes `attributes` gives (called only when tracing is on).
    pub fn start(
        name: impl Into<Cow<'static, str>>,
        parent: &TraceSpan,
        kind: SpanKind,
        attributes: impl FnOnce() -> Vec<KeyValue>,
    ) -> TraceSpan {
        if !enabled() {
            return TraceSpan::default();
        }
        let Some(tracer) = TRACER.get() else {
            return TraceSpan::default();
        };
        let parent_cx = parent.cx.clone().unwrap_or_default();
        let span = tracer
            .span_builder(name)
            .with_kind(kind)
            .with_attributes(attributes())
            .start_with_context(tracer, &parent_cx);
        TraceSpan {
            cx: Some(parent_cx.with_span(span)),
        }
    }

    /// The span of the running task's OpenTelemetry context, if it has one (a tool call's, for
    /// work started inside it).
    pub fn current() -> TraceSpan {
        if !enabled() {
            return TraceSpan::default();
        }
        let cx = Context::current();
        if cx.span().span_context().is_valid() {
            TraceSpan { cx: Some(cx) }
        } else {
            TraceSpan::default()
        }
    }

    /// The parent a W3C `traceparent` header names (`00-<trace id>-<span id>-<flags>`); empty
    /// when tracing is off or the value is not one (a bad header starts a new trace, never
    /// fails a request).
    pub fn from_traceparent(header: &str) -> TraceSpan {
        if !enabled() {
            return TraceSpan::default();
        }
        match parse_traceparent(header) {
            Some(context) => TraceSpan {
                cx: Some(Context::new().with_remote_span_context(context)),
            },
            None => TraceSpan::default(),
        }
    }

    /// This span as a W3C `traceparent`, for work that continues elsewhere.
    pub fn traceparent(&self) -> Option<String> {
        let cx = self.cx.as_ref()?;
        let span = cx.span();
        let sc = span.span_context();
        sc.is_valid().then(|| {
            format!(
                "00-{}-{}-{:02x}",
                sc.trace_id(),
                sc.span_id(),
                sc.trace_flags().to_u8()
            )
        })
    }

    /// The span's OpenTelemetry context, to run work under it.
    pub fn context(&self) -> Option<&Context> {
        self.cx.as_ref()
    }

    /// Adds attributes.
    pub fn set(&self, attributes: impl FnOnce() -> Vec<KeyValue>) {
        if let Some(cx) = &self.cx {
            let span = cx.span();
            for attribute in attributes() {
                span.set_attribute(attribute);
            }
        }
    }

    /// Marks the span failed with `message`.
    pub fn fail(&self, message: impl Into<Cow<'static, str>>) {
        if let Some(cx) = &self.cx {
            cx.span().set_status(Status::error(message));
        }
    }

    /// Ends the span (later calls do nothing).
    pub fn end(&self) {
        if let Some(cx) = &self.cx {
            cx.span().end();
        }
    }
}

/// The span context a W3C `traceparent` names, if it is a well-formed, valid one.
fn parse_traceparent(header: &str) -> Option<SpanContext> {
    let mut parts = header.trim().split('-');
    let (Some(version), Some(trace), Some(span), Some(flags), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return None;
    };
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    if version != "00" || !hex(trace, 32) || !hex(span, 16) || !hex(flags, 2) {
        return None;
    }
    let (Ok(trace_id), Ok(span_id), Ok(flags)) = (
        TraceId::from_hex(trace),
        SpanId::from_hex(span),
        u8::from_str_radix(flags, 16),
    ) else {
        return None;
    };
    let context = SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags),
        true,
        TraceState::default(),
    );
    context.is_valid().then_some(context)
}

/// Whether `header` is a well-formed W3C `traceparent` (worth keeping with a task).
pub fn is_traceparent(header: &str) -> bool {
    parse_traceparent(header).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparents_are_read_strictly() {
        enable();
        let good = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let span = TraceSpan::from_traceparent(good);
        assert_eq!(span.traceparent().as_deref(), Some(good));
        for bad in [
            "",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
            "00-0af7651916cd43dd8448eb211c8031zz-b7ad6b7169203331-01",
            "00-+af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        ] {
            assert!(
                TraceSpan::from_traceparent(bad).traceparent().is_none(),
                "{bad}"
            );
        }
    }

    #[test]
    fn span_text_is_redacted_then_capped_and_files_are_summarised() {
        let key = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD";
        let shown_args = shown(&format!("{{\"key\": \"{key}\"}}"), "terminal");
        assert!(!shown_args.contains(key), "{shown_args}");
        assert_eq!(capped("héllo wörld", 4), "héll[... 7 more characters]");
        let file: String = (1..=100).map(|n| format!("line {n}\n")).collect();
        let summary = shown(&file, "read_file");
        assert!(summary.starts_with("line 1\n"), "{summary}");
        assert!(summary.contains("[... 70 lines left out ...]"), "{summary}");
        assert!(summary.ends_with("line 100"), "{summary}");
    }
}
