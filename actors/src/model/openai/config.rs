//! [`OpenAiConfig`]: where an OpenAI-compatible server is and how to talk to it.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::model::settings::ProviderSettings;

/// The model asked for when the environment names none.
pub const DEFAULT_MODEL: &str = "gpt-4o-mini";

/// How to reach an OpenAI-compatible server. Build it with [`OpenAiConfig::new`] and the
/// `with_*` methods, or [`OpenAiConfig::from_env`].
#[derive(Clone)]
pub struct OpenAiConfig {
    /// The API root, usually ending in `/v1` (`http://127.0.0.1:8080/v1`); a URL that already
    /// ends in `/chat/completions` is used as it is.
    pub base_url: String,
    /// The API key, sent as a bearer token. Local servers usually need none.
    pub api_key: Option<String>,
    /// The environment variable to read the key from when `api_key` is unset.
    pub api_key_env: Option<String>,
    /// The model name sent with each request (a request may override it).
    pub model: String,
    /// The longest one attempt may take, from connecting to the last streamed byte.
    pub request_timeout: Duration,
    /// The longest connecting may take.
    pub connect_timeout: Duration,
    /// How many times a failed attempt is retried (rate limits, 5xx, broken connections).
    pub max_retries: u32,
    /// The first backoff wait; it doubles with each retry.
    pub retry_base_delay: Duration,
    /// The longest wait between attempts. A server asking (`Retry-After`) for longer than this
    /// gets no retry: the error is returned instead.
    pub retry_max_delay: Duration,
    /// Stream the answer over SSE (text reaches `ModelRequest::stream` as it is generated).
    pub stream: bool,
    /// The `max_tokens` sent when a request sets none.
    pub max_tokens: Option<u32>,
    /// More headers for every request (OpenRouter's `HTTP-Referer`, a proxy's tenant, ...).
    pub extra_headers: Vec<(String, String)>,
    /// More body fields for every request (`temperature`, provider routing, ...); they replace
    /// troupe's own fields of the same name.
    pub extra_body: Map<String, Value>,
    /// Tool-call mode, per-turn retry budget and request fields (troupe.yaml `model:` or a
    /// profile).
    pub settings: ProviderSettings,
    /// Where `tool_calls: auto` remembers that this server and model needed text tool calls
    /// (troupe uses `$TROUPE_HOME/state/tool_calls.json`), so later sessions and processes
    /// start in text; `None` remembers for this process only.
    pub mode_memory: Option<PathBuf>,
}

impl std::fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key itself.
        f.debug_struct("OpenAiConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "(set)"))
            .field("api_key_env", &self.api_key_env)
            .field("model", &self.model)
            .field("request_timeout", &self.request_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("max_retries", &self.max_retries)
            .field("retry_base_delay", &self.retry_base_delay)
            .field("retry_max_delay", &self.retry_max_delay)
            .field("stream", &self.stream)
            .field("max_tokens", &self.max_tokens)
            .field(
                "extra_headers",
                &self
                    .extra_headers
                    .iter()
                    .map(|(k, _)| k)
                    .collect::<Vec<_>>(),
            )
            .field("extra_body", &self.extra_body)
            .field("settings", &self.settings)
            .finish()
    }
}

impl OpenAiConfig {
    /// A config for `base_url` and `model` with the defaults: no key, streaming, 600 s per
    /// attempt, 10 s to connect, 3 retries waiting 1 s doubling up to 60 s.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            api_key: None,
            api_key_env: None,
            model: model.into(),
            request_timeout: Duration::from_secs(600),
            connect_timeout: Duration::from_secs(10),
            max_retries: 3,
            retry_base_delay: Duration::from_secs(1),
            retry_max_delay: Duration::from_secs(60),
            stream: true,
            max_tokens: None,
            extra_headers: Vec::new(),
            extra_body: Map::new(),
            settings: ProviderSettings::default(),
            mode_memory: None,
        }
    }

    /// The config the environment describes: `TROUPE_BASE_URL` (or `OPENAI_BASE_URL`), the key
    /// from `TROUPE_API_KEY` (or `OPENAI_API_KEY`), the model from `TROUPE_MODEL` (or
    /// [`DEFAULT_MODEL`]). `None` when no base URL is set: a key alone does not pick a server.
    pub fn from_env() -> Option<Self> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// [`OpenAiConfig::from_env`] over any source of variables.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Option<Self> {
        let get = |names: &[&str]| {
            names
                .iter()
                .filter_map(|name| lookup(name))
                .map(|value| value.trim().to_string())
                .find(|value| !value.is_empty())
        };
        let base_url = get(&["TROUPE_BASE_URL", "OPENAI_BASE_URL"])?;
        let model = get(&["TROUPE_MODEL"]).unwrap_or_else(|| DEFAULT_MODEL.to_string());
        let mut config = Self::new(base_url, model);
        config.api_key = get(&["TROUPE_API_KEY", "OPENAI_API_KEY"]);
        Some(config)
    }

    /// Sets the API key.
    pub fn with_api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// Reads the API key from this environment variable (when `api_key` is unset).
    pub fn with_api_key_env(mut self, variable: impl Into<String>) -> Self {
        self.api_key_env = Some(variable.into());
        self
    }

    /// Streams (SSE) or asks for one JSON answer.
    pub fn with_stream(mut self, stream: bool) -> Self {
        self.stream = stream;
        self
    }

    /// Sets the per-attempt timeout.
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Sets how many times a failed attempt is retried.
    pub fn with_max_retries(mut self, retries: u32) -> Self {
        self.max_retries = retries;
        self
    }

    /// Sets the first backoff wait and the longest wait between attempts.
    pub fn with_retry_delays(mut self, base: Duration, max: Duration) -> Self {
        self.retry_base_delay = base;
        self.retry_max_delay = max;
        self
    }

    /// Sets the default `max_tokens`.
    pub fn with_max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = Some(max_tokens);
        self
    }

    /// Adds a header to every request.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.extra_headers.push((name.into(), value.into()));
        self
    }

    /// Adds a body field to every request.
    pub fn with_body_field(mut self, name: impl Into<String>, value: Value) -> Self {
        self.extra_body.insert(name.into(), value);
        self
    }

    /// Sets the tool-call mode, retry budget and request fields.
    pub fn with_settings(mut self, settings: ProviderSettings) -> Self {
        self.settings = settings;
        self
    }

    /// The chat-completions URL derived from `base_url`.
    pub fn endpoint(&self) -> String {
        let base = self.base_url.trim().trim_end_matches('/');
        if base.ends_with("/chat/completions") {
            base.to_string()
        } else {
            format!("{base}/chat/completions")
        }
    }
}
