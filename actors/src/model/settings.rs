//! Provider settings that differ between a cloud model and a local one ([`ProviderSettings`]:
//! how tool calls travel, the per-turn retry budget, extra request fields), read from
//! troupe.yaml's `model:` section or a profile; and [`SessionModelState`], what a provider
//! remembers about one session between its requests (its retry budget for the running turn,
//! and whether it has switched to text tool calls).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// How tool calls travel between troupe and the model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolCallMode {
    /// The server's own `tools` field and `tool_calls` answers.
    Native,
    /// No `tools` field: the tools are described in the system prompt and calls are read from
    /// the reply's text (see `text_calls`).
    Text,
    /// Native first; one session switches to text after repeated unreadable native answers, or
    /// at once when the server refuses the `tools` field.
    #[default]
    Auto,
}

impl ToolCallMode {
    /// The word used in troupe.yaml and events.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolCallMode::Native => "native",
            ToolCallMode::Text => "text",
            ToolCallMode::Auto => "auto",
        }
    }
}

/// The default number of retries one turn may spend on failed model requests.
pub const DEFAULT_RETRY_BUDGET: u32 = 6;

/// Settings of one model provider, the same in `model:` and in a profile:
///
/// ```yaml
/// model:
///   base_url: http://127.0.0.1:8080/v1
///   tool_calls: auto          # native | text | auto (default)
///   retry_budget: 6           # retries per turn, over all its requests
///   request_timeout: 600      # seconds one attempt may take
///   request_fields:           # added to every request body
///     stop: ["<tool_response>"]
///     cache_prompt: true
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProviderSettings {
    /// How tool calls travel.
    pub tool_calls: ToolCallMode,
    /// Retries one turn may spend over all its model requests (transient failures and
    /// unreadable answers alike).
    pub retry_budget: u32,
    /// Fields added to every request body (`stop`, `cache_prompt`, `temperature`, ...); they
    /// replace troupe's own fields of the same name.
    pub request_fields: Map<String, Value>,
    /// Seconds one attempt may take, from connecting to the last streamed byte; unset keeps
    /// the provider's own (600 s). A small model on a busy CPU can need longer to read a
    /// fresh prompt.
    pub request_timeout: Option<u64>,
}

// `Value` holds no NaN (serde_json numbers are finite), so equality is reflexive.
impl Eq for ProviderSettings {}

impl Default for ProviderSettings {
    fn default() -> Self {
        ProviderSettings {
            tool_calls: ToolCallMode::Auto,
            retry_budget: DEFAULT_RETRY_BUDGET,
            request_fields: Map::new(),
            request_timeout: None,
        }
    }
}

/// The keys [`ProviderSettings::overlay`] reads.
pub const SETTINGS_KEYS: &[&str] = &[
    "tool_calls",
    "retry_budget",
    "request_fields",
    "request_timeout",
];

impl ProviderSettings {
    /// These settings with the ones written in `fields` (a `model:` section or a profile's
    /// mapping) on top; keys other than [`SETTINGS_KEYS`] are left to their owners. `prefix`
    /// names the section in errors (`model`, `profiles.coder`). `request_fields` of both are
    /// merged, the written ones winning.
    pub fn overlay(&self, fields: &Map<String, Value>, prefix: &str) -> Result<Self, String> {
        let mut out = self.clone();
        match fields.get("tool_calls") {
            None | Some(Value::Null) => {}
            Some(Value::String(mode)) => {
                out.tool_calls = match mode.trim().to_ascii_lowercase().as_str() {
                    "native" => ToolCallMode::Native,
                    "text" => ToolCallMode::Text,
                    "auto" => ToolCallMode::Auto,
                    other => {
                        return Err(format!(
                            "{prefix}.tool_calls: `{other}` is not a mode; write native (the \
                             server's tool calls), text (calls read from the reply) or auto"
                        ));
                    }
                }
            }
            Some(other) => {
                return Err(format!(
                    "{prefix}.tool_calls: expected native, text or auto, found {other}"
                ));
            }
        }
        match fields.get("retry_budget") {
            None | Some(Value::Null) => {}
            Some(Value::Number(n)) if n.as_u64().is_some() => {
                out.retry_budget = n
                    .as_u64()
                    .map_or(u32::MAX, |n| u32::try_from(n).unwrap_or(u32::MAX));
            }
            Some(other) => {
                return Err(format!(
                    "{prefix}.retry_budget: expected a whole number of retries such as 6, found \
                     {other}"
                ));
            }
        }
        match fields.get("request_timeout") {
            None | Some(Value::Null) => {}
            Some(Value::Number(n)) if n.as_u64().is_some_and(|n| n > 0) => {
                out.request_timeout = n.as_u64();
            }
            Some(other) => {
                return Err(format!(
                    "{prefix}.request_timeout: expected a whole number of seconds above 0 such \
                     as 1800, found {other}"
                ));
            }
        }
        match fields.get("request_fields") {
            None | Some(Value::Null) => {}
            Some(Value::Object(extra)) => {
                for (key, value) in extra {
                    if matches!(key.as_str(), "messages" | "tools" | "model" | "stream") {
                        return Err(format!(
                            "{prefix}.request_fields.{key}: troupe writes this field itself; \
                             set it elsewhere (model name: {prefix}.model)"
                        ));
                    }
                    out.request_fields.insert(key.clone(), value.clone());
                }
            }
            Some(other) => {
                return Err(format!(
                    "{prefix}.request_fields: expected a mapping of request fields such as \
                     {{stop: [\"<tool_response>\"], cache_prompt: true}}, found {other}"
                ));
            }
        }
        Ok(out)
    }

    /// Reads a whole section (`null` gives the defaults).
    pub fn from_section(section: &Value, prefix: &str) -> Result<Self, String> {
        match section {
            Value::Null => Ok(Self::default()),
            Value::Object(fields) => Self::default().overlay(fields, prefix),
            other => Err(format!("{prefix}: expected a mapping, found {other}")),
        }
    }
}

/// The provider settings one profile writes, kept apart so they go on top of the `model:`
/// section's whatever that holds ([`ProviderOverrides::apply`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProviderOverrides(Map<String, Value>);

// As for `ProviderSettings`: no NaN in JSON values.
impl Eq for ProviderOverrides {}

impl ProviderOverrides {
    /// The [`SETTINGS_KEYS`] among `fields`, checked (errors name `prefix`).
    pub fn from_fields(fields: &Map<String, Value>, prefix: &str) -> Result<Self, String> {
        let written: Map<String, Value> = fields
            .iter()
            .filter(|(key, _)| SETTINGS_KEYS.contains(&key.as_str()))
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect();
        ProviderSettings::default().overlay(&written, prefix)?;
        Ok(ProviderOverrides(written))
    }

    /// `base` with these settings on top.
    pub fn apply(&self, base: &ProviderSettings) -> ProviderSettings {
        // Checked in `from_fields`, so this cannot fail; keep `base` if it somehow did.
        base.overlay(&self.0, "profile")
            .unwrap_or_else(|_| base.clone())
    }
}

/// What a provider remembers about one session between requests. The session owns one, resets
/// the retry budget at each turn, and passes it with every request
/// ([`ModelRequest::state`](super::ModelRequest::state)); the provider spends the budget and
/// flips the session to text tool calls. Subagents get their own.
#[derive(Debug, Default)]
pub struct SessionModelState {
    /// Whether this session now sends tools as text.
    text_tools: AtomicBool,
    /// Unreadable native answers so far (over the whole session).
    native_failures: AtomicU32,
    /// Retries spent in the running turn.
    retries_spent: AtomicU32,
    /// Answer tokens received so far (all requests of the session), for a person's status
    /// line; see [`SessionModelState::streamed`].
    streamed_tokens: AtomicU64,
    /// Whether some of `streamed_tokens` were estimated from characters rather than counted.
    streamed_estimated: AtomicBool,
}

impl SessionModelState {
    /// A fresh state: native (as configured), no failures, nothing spent.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts a turn: its retry budget is whole again.
    pub fn begin_turn(&self) {
        self.retries_spent.store(0, Ordering::SeqCst);
    }

    /// Whether this session switched to text tool calls.
    pub fn uses_text_tools(&self) -> bool {
        self.text_tools.load(Ordering::SeqCst)
    }

    /// Switches this session to text tool calls; true when it was not already.
    pub fn switch_to_text_tools(&self) -> bool {
        !self.text_tools.swap(true, Ordering::SeqCst)
    }

    /// Counts one unreadable native answer; returns the count so far.
    pub fn note_native_failure(&self) -> u32 {
        self.native_failures.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Spends one retry of the turn's `budget`; false when it is used up.
    pub fn spend_retry(&self, budget: u32) -> bool {
        self.retries_spent
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |spent| {
                (spent < budget).then_some(spent + 1)
            })
            .is_ok()
    }

    /// Retries spent in the running turn.
    pub fn retries_spent(&self) -> u32 {
        self.retries_spent.load(Ordering::SeqCst)
    }

    /// Notes answer tokens as they arrive: counted one per streamed chunk (llama.cpp, vLLM and
    /// OpenAI send about one token per chunk), or `estimated` from characters / 4 when the
    /// server answered in one piece.
    pub fn note_streamed(&self, tokens: u64, estimated: bool) {
        self.streamed_tokens.fetch_add(tokens, Ordering::Relaxed);
        if estimated {
            self.streamed_estimated.store(true, Ordering::Relaxed);
        }
    }

    /// Answer tokens received so far over the session's requests, and whether any were
    /// estimated. Callers take differences to count one request's.
    pub fn streamed(&self) -> (u64, bool) {
        (
            self.streamed_tokens.load(Ordering::Relaxed),
            self.streamed_estimated.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    #[test]
    fn sections_and_profiles_overlay_the_defaults() {
        let model = ProviderSettings::from_section(
            &json!({"base_url": "http://h/v1", "tool_calls": "Text", "retry_budget": 2,
                    "request_fields": {"stop": ["<tool_response>"], "cache_prompt": false}}),
            "model",
        )
        .unwrap();
        assert_eq!(model.tool_calls, ToolCallMode::Text);
        assert_eq!(model.retry_budget, 2);
        assert_eq!(model.request_timeout, None);
        let profile = model
            .overlay(
                &fields(json!({"tool_calls": "native", "request_timeout": 1800,
                    "request_fields": {"cache_prompt": true}})),
                "profiles.coder",
            )
            .unwrap();
        assert_eq!(profile.tool_calls, ToolCallMode::Native);
        assert_eq!(profile.request_timeout, Some(1800));
        assert_eq!(profile.retry_budget, 2);
        assert_eq!(profile.request_fields["cache_prompt"], true);
        assert_eq!(profile.request_fields["stop"], json!(["<tool_response>"]));
        assert_eq!(
            ProviderSettings::from_section(&Value::Null, "model").unwrap(),
            ProviderSettings::default()
        );
        let overrides = ProviderOverrides::from_fields(
            &fields(json!({"base_url": "x", "retry_budget": 9})),
            "profiles.local",
        )
        .unwrap();
        let applied = overrides.apply(&model);
        assert_eq!(applied.retry_budget, 9);
        assert_eq!(applied.tool_calls, ToolCallMode::Text);
        let err =
            ProviderOverrides::from_fields(&fields(json!({"tool_calls": "x"})), "profiles.local")
                .unwrap_err();
        assert!(err.starts_with("profiles.local.tool_calls"), "{err}");
    }

    #[test]
    fn bad_settings_say_what_to_write() {
        for (section, wanted) in [
            (json!({"tool_calls": "json"}), "model.tool_calls: `json`"),
            (json!({"tool_calls": 3}), "expected native, text or auto"),
            (json!({"retry_budget": -1}), "model.retry_budget"),
            (json!({"request_fields": [1]}), "model.request_fields"),
            (json!({"request_timeout": 0}), "model.request_timeout"),
            (json!({"request_timeout": "10m"}), "whole number of seconds"),
            (
                json!({"request_fields": {"messages": []}}),
                "writes this field",
            ),
        ] {
            let err = ProviderSettings::from_section(&section, "model").unwrap_err();
            assert!(err.contains(wanted), "{err}");
        }
    }

    #[test]
    fn the_budget_is_per_turn_and_the_switch_happens_once() {
        let state = SessionModelState::new();
        assert!(state.spend_retry(2));
        assert!(state.spend_retry(2));
        assert!(!state.spend_retry(2));
        state.begin_turn();
        assert!(state.spend_retry(2));
        assert!(!state.uses_text_tools());
        assert!(state.switch_to_text_tools());
        assert!(!state.switch_to_text_tools());
        assert!(state.uses_text_tools());
        assert_eq!(state.note_native_failure(), 1);
        assert_eq!(state.note_native_failure(), 2);
    }
}
