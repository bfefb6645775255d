//! `tools.connectors`: the tool gateway that serves hosted connector tools (docs/connectors.md).
//!
//! ```yaml
//! tools:
//!   connectors:
//!     enabled: true            # false, or no section: troupe runs as if connectors did not exist
//!     url: https://gateway.example/v1
//!     token_env: TROUPE_CONNECTORS_TOKEN
//!     timeout_s: 30
//! ```
//!
//! The token is read from the environment variable `token_env` names, never written in the
//! file; the variable is one of troupe's secrets (kept out of every program troupe starts and
//! masked in tool output).

use std::time::Duration;

use serde_json::Value;

use super::keys::{ConfigError, flag, invalid, mapping, string};

/// The variable the token is read from when `token_env` is not given.
pub const DEFAULT_TOKEN_ENV: &str = "TROUPE_CONNECTORS_TOKEN";
/// How long one gateway request may take when `timeout_s` is not given.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

pub(super) const KEYS: &[&str] = &["enabled", "url", "token_env", "timeout_s"];

/// `tools.connectors`, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectorsSettings {
    /// The gateway's base URL.
    pub url: String,
    /// The environment variable holding the bearer token.
    pub token_env: String,
    /// Longest wait for one gateway request.
    pub timeout: Duration,
}

impl ConnectorsSettings {
    /// Reads `tools.connectors`: `None` when absent or `enabled: false`.
    pub fn from_section(value: &Value) -> Result<Option<ConnectorsSettings>, ConfigError> {
        const SECTION: &str = "tools.connectors";
        if value.is_null() {
            return Ok(None);
        }
        let map = mapping(value, SECTION)?;
        if !flag(&map, SECTION, "enabled")?.unwrap_or(true) {
            return Ok(None);
        }
        let Some(url) = string(&map, SECTION, "url")? else {
            return Err(invalid(
                "tools.connectors.url",
                "the gateway's base URL is required when connectors are enabled, for example https://gateway.example/v1 (or set enabled: false)".into(),
            ));
        };
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(invalid(
                "tools.connectors.url",
                format!("expected an http:// or https:// URL, found {url:?}"),
            ));
        }
        let token_env =
            string(&map, SECTION, "token_env")?.unwrap_or_else(|| DEFAULT_TOKEN_ENV.into());
        if token_env.is_empty()
            || !token_env
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(invalid(
                "tools.connectors.token_env",
                format!(
                    "expected the name of an environment variable (letters, digits, _), such as {DEFAULT_TOKEN_ENV}, found {token_env:?}"
                ),
            ));
        }
        let timeout = match map.get("timeout_s") {
            None | Some(Value::Null) => DEFAULT_TIMEOUT,
            Some(Value::Number(n)) => match n.as_f64() {
                Some(secs) if secs > 0.0 && secs <= 3600.0 => Duration::from_secs_f64(secs),
                _ => {
                    return Err(invalid(
                        "tools.connectors.timeout_s",
                        format!("expected seconds above 0 and at most 3600, such as 30, found {n}"),
                    ));
                }
            },
            Some(other) => {
                return Err(invalid(
                    "tools.connectors.timeout_s",
                    format!("expected a number of seconds, such as 30, found {other}"),
                ));
            }
        };
        Ok(Some(ConnectorsSettings {
            url,
            token_env,
            timeout,
        }))
    }

    /// The gateway client's settings, with the token read through `env`.
    pub fn gateway(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> troupe_tools::connectors::GatewaySettings {
        troupe_tools::connectors::GatewaySettings {
            url: self.url.clone(),
            token: env(&self.token_env).filter(|t| !t.is_empty()),
            timeout: self.timeout,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn absent_or_disabled_is_none() {
        assert_eq!(
            ConnectorsSettings::from_section(&Value::Null).unwrap(),
            None
        );
        assert_eq!(
            ConnectorsSettings::from_section(&json!({"enabled": false, "url": 3})).unwrap(),
            None
        );
    }

    #[test]
    fn defaults_and_values() {
        let s = ConnectorsSettings::from_section(&json!({"url": "http://127.0.0.1:9/v1"}))
            .unwrap()
            .unwrap();
        assert_eq!(s.token_env, DEFAULT_TOKEN_ENV);
        assert_eq!(s.timeout, DEFAULT_TIMEOUT);
        let s = ConnectorsSettings::from_section(
            &json!({"enabled": true, "url": "https://g/v1", "token_env": "MY_TOKEN", "timeout_s": 2.5}),
        )
        .unwrap()
        .unwrap();
        assert_eq!(s.timeout, Duration::from_millis(2500));
        let g = s.gateway(&|name| (name == "MY_TOKEN").then(|| "t0k".to_string()));
        assert_eq!(g.token.as_deref(), Some("t0k"));
        assert!(!format!("{g:?}").contains("t0k"));
    }

    #[test]
    fn bad_values_name_the_key() {
        for (section, key) in [
            (
                json!({"enabled": "yes", "url": "http://x"}),
                "tools.connectors.enabled",
            ),
            (json!({"enabled": true}), "tools.connectors.url"),
            (json!({"url": "ftp://x"}), "tools.connectors.url"),
            (
                json!({"url": "http://x", "token_env": "A B"}),
                "tools.connectors.token_env",
            ),
            (
                json!({"url": "http://x", "timeout_s": 0}),
                "tools.connectors.timeout_s",
            ),
            (
                json!({"url": "http://x", "timeout_s": "30"}),
                "tools.connectors.timeout_s",
            ),
            (json!([1]), "tools.connectors"),
        ] {
            let err = ConnectorsSettings::from_section(&section).unwrap_err();
            assert!(err.to_string().contains(key), "{section}: {err}");
        }
    }
}
