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
use troupe_tools::builtin::redact::{OwnSecrets, redact_with};

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
    shown_with(text, tool, &OwnSecrets::current())
}

/// [`shown`] with troupe's own secrets as read once for a batch of spans.
fn shown_with(text: &str, tool: &str, own: &OwnSecrets) -> String {
    let text = if tool == "read_file" {
        summarised(text)
    } else {
        Cow::Borrowed(text)
    };
    capped(redact_with(&text, own), MAX_CHARS.load(Ordering::Relaxed))
}

/// Whether every installed exporter masks and caps call texts itself ([`prepare_for_export`]).
static EXPORTER_MASKS: AtomicBool = AtomicBool::new(false);

/// Says whether every exporter of the installed provider passes its spans through
/// [`prepare_for_export`] before encoding them. When it does, a call's span carries its raw
/// arguments and result and the exporter's thread masks them, so the call pays nothing for
/// that (and a span dropped by a full queue is never masked at all). Only an exporter that
/// masks may say so: spans would otherwise leave with raw text.
pub fn set_exporter_masks(masks: bool) {
    EXPORTER_MASKS.store(masks, Ordering::Relaxed);
}

/// Which text of a tool call an attribute carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallText {
    /// The call's arguments (as JSON).
    Arguments,
    /// The call's result as the model reads it.
    Result,
}

impl CallText {
    const ALL: [CallText; 2] = [CallText::Arguments, CallText::Result];

    /// The attribute's key as exported, the text masked.
    pub fn key(self) -> &'static str {
        match self {
            CallText::Arguments => "troupe.call.arguments",
            CallText::Result => "troupe.call.result",
        }
    }

    /// The key while the text is raw, before the exporter masks it.
    fn raw_key(self) -> &'static str {
        match self {
            CallText::Arguments => "troupe.raw.call.arguments",
            CallText::Result => "troupe.raw.call.result",
        }
    }
}

/// Start of the keys of attributes whose text is not masked yet.
const RAW_PREFIX: &str = "troupe.raw.";

/// Texts longer than this many bytes per `max_chars` are masked where they are made: a queue
/// of spans holding whole large results would take too much memory.
const DEFER_BYTES_PER_CHAR: usize = 4;

/// A tool call's arguments or result as a span attribute: raw (moved, not copied) for the
/// exporter to mask when it does ([`set_exporter_masks`]), otherwise masked and capped here.
pub fn call_text(which: CallText, text: String, tool: &str) -> KeyValue {
    let max = MAX_CHARS.load(Ordering::Relaxed);
    if EXPORTER_MASKS.load(Ordering::Relaxed)
        && text.len() <= max.saturating_mul(DEFER_BYTES_PER_CHAR)
    {
        KeyValue::new(which.raw_key(), text)
    } else {
        KeyValue::new(which.key(), shown(&text, tool))
    }
}

/// Masks and caps, in place, the raw texts [`call_text`] left among a finished span's
/// attributes, under their exported keys, with `own` (one reading of troupe's own secrets for
/// a whole batch). Exporters call it on every span before encoding it; other attributes are
/// left as they are.
pub fn prepare_for_export(attributes: &mut [KeyValue], own: &OwnSecrets) {
    if !attributes
        .iter()
        .any(|a| a.key.as_str().starts_with(RAW_PREFIX))
    {
        return;
    }
    let tool = attributes
        .iter()
        .find(|a| a.key.as_str() == "gen_ai.tool.name")
        .map(|a| a.value.as_str().into_owned())
        .unwrap_or_default();
    for attribute in attributes.iter_mut() {
        let key = attribute.key.as_str();
        if !key.starts_with(RAW_PREFIX) {
            continue;
        }
        // A raw key this module does not know keeps its name but is masked all the same.
        let shown_key = CallText::ALL
            .into_iter()
            .find(|which| which.raw_key() == key)
            .map_or_else(|| attribute.key.clone(), |which| which.key().into());
        let text = shown_with(&attribute.value.as_str(), &tool, own);
        *attribute = KeyValue::new(shown_key, text);
    }
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
fn capped(mut text: String, max: usize) -> String {
    if let Some((cut, _)) = text.char_indices().nth(max) {
        let more = text[cut..].chars().count();
        text.truncate(cut);
        text.push_str(&format!("[... {more} more characters]"));
    }
    text
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
            // One lock of the span for all of them.
            cx.span().set_attributes(attributes());
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
        assert_eq!(
            capped("héllo wörld".to_string(), 4),
            "héll[... 7 more characters]"
        );
        let file: String = (1..=100).map(|n| format!("line {n}\n")).collect();
        let summary = shown(&file, "read_file");
        assert!(summary.starts_with("line 1\n"), "{summary}");
        assert!(summary.contains("[... 70 lines left out ...]"), "{summary}");
        assert!(summary.ends_with("line 100"), "{summary}");
    }

    #[test]
    fn raw_call_texts_are_masked_capped_and_renamed_for_export() {
        let key = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD";
        let file: String = (1..=100).map(|n| format!("line {n} {key}\n")).collect();
        let mut attributes = vec![
            KeyValue::new("gen_ai.tool.name", "read_file"),
            KeyValue::new(
                CallText::Arguments.raw_key(),
                format!("{{\"path\": \"{key}\"}}"),
            ),
            KeyValue::new(CallText::Result.raw_key(), file),
            KeyValue::new("troupe.raw.something.new", format!("token={key}")),
        ];
        prepare_for_export(&mut attributes, &OwnSecrets::current());
        assert_eq!(attributes.len(), 4);
        for attribute in &attributes[1..] {
            let text = attribute.value.as_str();
            assert!(!text.contains(key), "{}: {text}", attribute.key);
        }
        assert_eq!(attributes[1].key.as_str(), "troupe.call.arguments");
        assert_eq!(attributes[2].key.as_str(), "troupe.call.result");
        let result = attributes[2].value.as_str();
        assert!(result.contains("[... 70 lines left out ...]"), "{result}");
        assert!(result.contains("sk-pro...ABCD"), "{result}");
    }
}
