//! The `model:` section, and the one place a model provider is built from settings: for the
//! sessions that name no profile ([`ModelSection::provider`]) and for each profile
//! ([`super::ProfileSettings::provider`]), so both follow the same order of fallbacks.

use std::sync::Arc;

use serde_json::{Map, Value};
use troupe_actors::model::{
    ModelProvider, OpenAiConfig, OpenAiProvider, ProviderSettings, ScriptedProvider,
};
use troupe_tools::home::TroupeHome;
use troupe_tools::lean::{LEAN_CONTEXT_MAX, PromptStyle};
use troupe_tools::text::yaml_kind;

use super::ProfileSettings;
use super::keys::{ConfigError, keyed_error, mapping};

/// Where `tool_calls: auto` remembers, under troupe's home, the servers and models that
/// needed text tool calls.
pub const MODE_MEMORY_FILE: &str = "state/tool_calls.json";

/// The `model` section: which OpenAI-compatible endpoint to talk to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelSection {
    /// Base URL of the chat-completions API (`https://host/v1`).
    pub base_url: Option<String>,
    /// The API key itself (prefer `api_key_env`).
    pub api_key: Option<String>,
    /// Name of the environment variable that holds the API key.
    pub api_key_env: Option<String>,
    /// Model name.
    pub model: Option<String>,
    /// Context window in tokens, when known; sizes the tool listing and, with `prompt_style:
    /// auto`, picks the lean prompt when small.
    pub context_length: Option<i64>,
    /// `prompt_style`: the full prompt, the lean one, or `auto` (lean for a small context).
    pub prompt_style: PromptStyle,
    /// `tool_calls`, `retry_budget`, `request_fields`, `request_timeout` (see `ProviderSettings`).
    pub provider: ProviderSettings,
}

impl ModelSection {
    /// The model of sessions that name none: this section's server, else
    /// `TROUPE_BASE_URL`/`OPENAI_BASE_URL`; `None` when nothing names one.
    pub fn provider(
        &self,
        home: &TroupeHome,
    ) -> Result<Option<Arc<dyn ModelProvider>>, ConfigError> {
        let Some(endpoint) = Endpoint::resolve(self, None) else {
            return Ok(None);
        };
        endpoint
            .open(self.provider.clone(), home)
            .map(Some)
            .map_err(|problem| ConfigError::Invalid {
                key: "model.base_url".into(),
                problem,
            })
    }
}

impl ProfileSettings {
    /// The model this profile talks to: its script, else its server, else the `model`
    /// section's, else the environment's. An error names the profile's keys to set.
    pub fn provider(
        &self,
        model: &ModelSection,
        home: &TroupeHome,
    ) -> Result<Arc<dyn ModelProvider>, String> {
        if let Some(script) = &self.script {
            return ScriptedProvider::from_file(script)
                .map(|s| Arc::new(s) as Arc<dyn ModelProvider>)
                .map_err(|e| format!("profiles.{}.script: {e}", self.name));
        }
        let name = &self.name;
        let endpoint = Endpoint::resolve(model, Some(self)).ok_or_else(|| {
            format!(
                "profile {name:?} has no model to talk to: set profiles.{name}.base_url (an OpenAI-compatible API such as http://127.0.0.1:8080/v1) or profiles.{name}.script, model.base_url, or TROUPE_BASE_URL"
            )
        })?;
        endpoint
            .open(self.provider.apply(&model.provider), home)
            .map_err(|e| format!("profiles.{name}: {e}"))
    }
}

/// A server, model name and key, each taken from the profile, else the `model` section, else
/// the environment.
struct Endpoint {
    base_url: String,
    model: String,
    api_key: Option<String>,
}

impl Endpoint {
    fn resolve(model: &ModelSection, profile: Option<&ProfileSettings>) -> Option<Endpoint> {
        let env = |name: &str| {
            std::env::var(name)
                .ok()
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let base_url = profile
            .and_then(|p| p.base_url.clone())
            .or_else(|| model.base_url.clone())
            .or_else(|| env("TROUPE_BASE_URL"))
            .or_else(|| env("OPENAI_BASE_URL"))?;
        let name = profile
            .and_then(|p| p.model.clone())
            .or_else(|| model.model.clone())
            .or_else(|| env("TROUPE_MODEL"))
            // None named: the provider asks the server's `/models` for the one it serves, and
            // says what to set when it cannot tell (no silent default name).
            .unwrap_or_default();
        let api_key = profile
            .and_then(|p| {
                p.api_key
                    .clone()
                    .or_else(|| p.api_key_env.as_deref().and_then(env))
            })
            .or_else(|| model.api_key.clone())
            .or_else(|| model.api_key_env.as_deref().and_then(env))
            .or_else(|| env("TROUPE_API_KEY"))
            .or_else(|| env("OPENAI_API_KEY"));
        Some(Endpoint {
            base_url,
            model: name,
            api_key,
        })
    }

    fn open(
        self,
        settings: ProviderSettings,
        home: &TroupeHome,
    ) -> Result<Arc<dyn ModelProvider>, String> {
        let mut config = OpenAiConfig::new(self.base_url, self.model);
        config.api_key = self.api_key;
        config.settings = settings;
        config.mode_memory = Some(home.path().join(MODE_MEMORY_FILE));
        OpenAiProvider::new(config)
            .map(|p| Arc::new(p) as Arc<dyn ModelProvider>)
            .map_err(|e| e.to_string())
    }
}

pub(super) fn model_section(root: &Map<String, Value>) -> Result<ModelSection, ConfigError> {
    let map = mapping(root.get("model").unwrap_or(&Value::Null), "model")?;
    let string = |key: &str| -> Result<Option<String>, ConfigError> {
        match map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.trim().to_string())),
            Some(Value::String(_)) => Ok(None),
            Some(other) => Err(ConfigError::Invalid {
                key: format!("model.{key}"),
                problem: format!("expected a string, found {}", yaml_kind(other)),
            }),
        }
    };
    let context_length = match map.get("context_length") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) if n.as_i64().is_some_and(|v| v > 0) => n.as_i64(),
        Some(other) => {
            return Err(ConfigError::Invalid {
                key: "model.context_length".into(),
                problem: format!(
                    "expected a positive number of tokens such as 128000, found {other}"
                ),
            });
        }
    };
    let raw_style = map.get("prompt_style").unwrap_or(&Value::Null);
    let prompt_style = match raw_style {
        Value::Null => Some(PromptStyle::default()),
        Value::String(text) => PromptStyle::parse(text),
        _ => None,
    }
    .ok_or_else(|| ConfigError::Invalid {
        key: "model.prompt_style".into(),
        problem: format!(
            "expected one of {} (auto: lean when context_length is at most {LEAN_CONTEXT_MAX}), found {raw_style}",
            PromptStyle::ALLOWED.join(", ")
        ),
    })?;
    Ok(ModelSection {
        base_url: string("base_url")?,
        api_key: string("api_key")?,
        api_key_env: string("api_key_env")?,
        model: string("model")?.or(string("default")?),
        context_length,
        prompt_style,
        provider: ProviderSettings::default()
            .overlay(&map, "model")
            .map_err(|problem| keyed_error("model", problem))?,
    })
}
