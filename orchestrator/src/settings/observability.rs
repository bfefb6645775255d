//! The `observability:` section: the collector troupe's spans go to, its headers, the service
//! name, the share of traces kept and the longest text on a span.

use serde_json::Value;

use super::keys::ConfigError;

/// The checked `observability:` section.
#[derive(Clone, Default, PartialEq)]
pub struct ObservabilitySettings {
    /// The collector's base URL (`/v1/traces` is added) from `observability.otlp_endpoint`.
    pub endpoint: Option<String>,
    /// Extra request headers (an API key, a tenant).
    pub headers: Vec<(String, String)>,
    /// The `service.name` of the spans; `troupe` by default.
    pub service_name: Option<String>,
    /// Share of traces kept, 0 to 1 (1 by default).
    pub sample_rate: Option<f64>,
    /// Whether tracing is off even though the environment names a collector.
    pub disabled: bool,
    /// Longest argument or result text on a span (12,000 characters by default).
    pub max_chars: Option<usize>,
}

impl std::fmt::Debug for ObservabilitySettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObservabilitySettings")
            .field("endpoint", &self.endpoint)
            .field("headers", &header_names(&self.headers))
            .field("service_name", &self.service_name)
            .field("sample_rate", &self.sample_rate)
            .field("disabled", &self.disabled)
            .field("max_chars", &self.max_chars)
            .finish()
    }
}

impl ObservabilitySettings {
    /// Reads `observability:` as written; errors name the key and what to write.
    pub fn from_section(section: &Value) -> Result<Self, ConfigError> {
        let invalid = |key: &str, problem: String| ConfigError::Invalid {
            key: format!("observability.{key}"),
            problem,
        };
        let map = match section {
            Value::Null => return Ok(Self::default()),
            Value::Object(map) => map,
            other => {
                return Err(ConfigError::Invalid {
                    key: "observability".into(),
                    problem: format!(
                        "expected a mapping such as {{otlp_endpoint: http://127.0.0.1:4318}}, found {other}"
                    ),
                });
            }
        };
        const KEYS: &[&str] = &[
            "otlp_endpoint",
            "headers",
            "service_name",
            "sample_rate",
            "enabled",
            "max_chars",
        ];
        if let Some(unknown) = map.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(invalid(
                unknown,
                format!("not a setting here; the settings are {}", KEYS.join(", ")),
            ));
        }
        let text = |key: &str| -> Result<Option<String>, ConfigError> {
            match map.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.trim().to_string())),
                Some(other) => Err(invalid(key, format!("expected text, found {other}"))),
            }
        };
        let endpoint = text("otlp_endpoint")?;
        if let Some(url) = &endpoint
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(invalid(
                "otlp_endpoint",
                format!(
                    "expected the collector's http(s) URL, such as http://127.0.0.1:4318, found {url}"
                ),
            ));
        }
        let headers = match map.get("headers") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Object(headers)) => {
                let mut out = Vec::new();
                for (name, value) in headers {
                    let Some(value) = value.as_str() else {
                        return Err(invalid(
                            &format!("headers.{name}"),
                            format!("expected text, found {value}"),
                        ));
                    };
                    out.push((name.clone(), value.to_string()));
                }
                out
            }
            Some(other) => {
                return Err(invalid(
                    "headers",
                    format!("expected a mapping of header name to value, found {other}"),
                ));
            }
        };
        let sample_rate = match map.get("sample_rate") {
            None | Some(Value::Null) => None,
            Some(value) => Some(
                value
                    .as_f64()
                    .filter(|r| (0.0..=1.0).contains(r))
                    .ok_or_else(|| {
                        invalid(
                            "sample_rate",
                            format!("expected a share from 0 to 1, such as 0.25, found {value}"),
                        )
                    })?,
            ),
        };
        let disabled = match map.get("enabled") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(on)) => !on,
            Some(other) => {
                return Err(invalid(
                    "enabled",
                    format!("expected true or false, found {other}"),
                ));
            }
        };
        let max_chars = match map.get("max_chars") {
            None | Some(Value::Null) => None,
            Some(value) => Some(
                value
                    .as_u64()
                    .filter(|n| *n > 0)
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or_else(|| {
                        invalid(
                            "max_chars",
                            format!("expected a number of characters above 0, such as 12000, found {value}"),
                        )
                    })?,
            ),
        };
        Ok(ObservabilitySettings {
            max_chars,
            endpoint,
            headers,
            service_name: text("service_name")?,
            sample_rate,
            disabled,
        })
    }

    /// Whether spans are to be exported: a collector is named here or in the environment.
    pub(crate) fn wanted(&self) -> bool {
        let env_named = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
        let sdk_off = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.trim() == "true");
        !self.disabled
            && !sdk_off
            && (self.endpoint.is_some()
                || env_named("OTEL_EXPORTER_OTLP_ENDPOINT")
                || env_named("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
    }
}

/// Headers as debug output shows them: names only, since values carry credentials.
pub(crate) fn header_names(headers: &[(String, String)]) -> Vec<&str> {
    headers.iter().map(|(name, _)| name.as_str()).collect()
}

#[cfg(test)]
mod tests {
    use crate::settings::Settings;

    #[test]
    fn settings_are_checked_with_clear_errors() {
        let settings = Settings::parse(
            "observability: {otlp_endpoint: 'http://127.0.0.1:4318', sample_rate: 0.5, headers: {x-key: abc}}",
        )
        .unwrap()
        .observability;
        assert_eq!(settings.endpoint.as_deref(), Some("http://127.0.0.1:4318"));
        assert_eq!(settings.sample_rate, Some(0.5));
        assert_eq!(
            settings.headers,
            vec![("x-key".to_string(), "abc".to_string())]
        );
        for (yaml, says) in [
            (
                "observability: {otlp_endpoint: collector:4318}",
                "http(s) URL",
            ),
            ("observability: {sample_rate: 2}", "share from 0 to 1"),
            ("observability: {endpoint: x}", "observability.endpoint"),
            ("observability: 5", "expected a mapping"),
        ] {
            let error = Settings::parse(yaml).unwrap_err().to_string();
            assert!(error.contains(says), "{yaml}: {error}");
        }
    }
}
