//! The `serve:` section: where `troupe serve` listens, its token, the browser origins and host
//! names it answers, and the limits that keep clients without the token from starving it.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use serde_json::Value;
use troupe_tools::text::yaml_kind;

use super::keys::{ConfigError, invalid};

/// Sessions open at once over HTTP when `serve.max_sessions` does not say.
pub const DEFAULT_MAX_SESSIONS: usize = 1_000;

/// A session nobody used for this long is closed when `serve.session_idle_timeout_ms` does not
/// say otherwise.
pub const DEFAULT_SESSION_IDLE: Duration = Duration::from_secs(3_600);

/// How often the feed looks for new events on a store that cannot wake it.
pub const DEFAULT_FEED_POLL: Duration = Duration::from_millis(50);

/// The port `troupe serve` listens on when none is given.
pub const DEFAULT_PORT: u16 = 8642;

/// The `serve:` section of troupe.yaml, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeConfig {
    /// Address to listen on; loopback by default.
    pub bind: IpAddr,
    /// Port to listen on; 0 picks a free one.
    pub port: u16,
    /// The bearer token, when the config sets one.
    pub token: Option<String>,
    /// The dashboard token (every stored session), when the config sets one.
    pub dashboard_token: Option<String>,
    /// Browser origins allowed to call the API (`*` for any); none by default.
    pub cors_origins: Vec<String>,
    /// Host names the server answers to besides its listen address (and `localhost` when it
    /// listens on loopback); none by default.
    pub allowed_hosts: Vec<String>,
    /// How often the feed polls a store that cannot wake it.
    pub feed_poll: Duration,
    /// Timeouts and caps that keep clients without the token from starving the server.
    pub limits: ServerLimits,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: DEFAULT_PORT,
            token: None,
            dashboard_token: None,
            cors_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            feed_poll: DEFAULT_FEED_POLL,
            limits: ServerLimits::default(),
        }
    }
}

/// Every key of `serve:` (the limits of [`LIMIT_KEYS`] among them); others are warned of.
pub(super) const KEYS: &[&str] = &[
    "bind",
    "port",
    "token",
    "dashboard_token",
    "cors_origins",
    "allowed_hosts",
    "feed_poll_ms",
    "header_read_timeout_ms",
    "idle_timeout_ms",
    "max_connections",
    "max_connections_per_client",
    "max_requests_per_client",
    "max_sessions",
    "session_idle_timeout_ms",
];

/// The `serve:` keys of the server's limits: name, smallest and largest value, and where the
/// value goes (milliseconds for the timeouts, counts for the caps).
const LIMIT_KEYS: &[(&str, u64, u64)] = &[
    ("header_read_timeout_ms", 100, 600_000),
    ("idle_timeout_ms", 100, 86_400_000),
    ("max_connections", 1, 1_000_000),
    ("max_connections_per_client", 1, 1_000_000),
    ("max_requests_per_client", 1, 1_000_000),
    ("max_sessions", 1, 1_000_000),
    ("session_idle_timeout_ms", 1_000, 604_800_000),
];

impl ServeConfig {
    /// Reads the `serve:` section (`bind`, `port`, `token`, `cors_origins`, `feed_poll_ms`);
    /// absent keys keep their defaults, wrong ones are errors naming the key.
    pub fn from_value(raw: &Value) -> Result<ServeConfig, ConfigError> {
        let mut config = ServeConfig::default();
        let map = match raw {
            Value::Null => return Ok(config),
            Value::Object(map) => map,
            other => {
                return Err(invalid(
                    "serve",
                    format!(
                        "expected a mapping with bind, port, token, cors_origins; found {}",
                        yaml_kind(other)
                    ),
                ));
            }
        };
        if let Some(value) = map.get("bind").filter(|v| !v.is_null()) {
            let text = value.as_str().ok_or_else(|| {
                invalid(
                    "serve.bind",
                    format!(
                        "expected an IP address such as 127.0.0.1, found {}",
                        yaml_kind(value)
                    ),
                )
            })?;
            config.bind = text.trim().parse().map_err(|_| {
                invalid(
                    "serve.bind",
                    format!("{text:?} is not an IP address; write one such as 127.0.0.1 or ::1"),
                )
            })?;
        }
        if let Some(value) = map.get("port").filter(|v| !v.is_null()) {
            config.port = value
                .as_u64()
                .and_then(|p| u16::try_from(p).ok())
                .ok_or_else(|| {
                    invalid(
                        "serve.port",
                        format!("expected a port number from 0 to 65535, found {value}"),
                    )
                })?;
        }
        if let Some(value) = map.get("token").filter(|v| !v.is_null()) {
            let text = value.as_str().ok_or_else(|| {
                invalid(
                    "serve.token",
                    format!("expected a string, found {}", yaml_kind(value)),
                )
            })?;
            config.token = Some(text.to_string());
        }
        if let Some(value) = map.get("dashboard_token").filter(|v| !v.is_null()) {
            let text = value.as_str().ok_or_else(|| {
                invalid(
                    "serve.dashboard_token",
                    format!("expected a string, found {}", yaml_kind(value)),
                )
            })?;
            config.dashboard_token = Some(text.to_string());
        }
        match map.get("cors_origins") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => {
                config.cors_origins = s
                    .split(',')
                    .map(|o| o.trim().to_string())
                    .filter(|o| !o.is_empty())
                    .collect();
            }
            Some(Value::Array(items)) => {
                for item in items {
                    let origin = item.as_str().ok_or_else(|| {
                        invalid(
                            "serve.cors_origins",
                            format!(
                                "expected origins such as https://dash.example, found {}",
                                yaml_kind(item)
                            ),
                        )
                    })?;
                    config.cors_origins.push(origin.trim().to_string());
                }
            }
            Some(other) => {
                return Err(invalid(
                    "serve.cors_origins",
                    format!("expected a list of origins, found {}", yaml_kind(other)),
                ));
            }
        }
        match map.get("allowed_hosts") {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) => {
                for item in items {
                    let host = item
                        .as_str()
                        .map(|h| {
                            let h = h.trim();
                            let h = h.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(h);
                            h.to_ascii_lowercase()
                        })
                        // A name (letters, digits, '-', '.') or an IPv6 address; no port.
                        .filter(|h| {
                            (!h.is_empty()
                                && h.chars().all(|c| c.is_ascii_alphanumeric() || "-._".contains(c)))
                                || h.parse::<std::net::Ipv6Addr>().is_ok()
                        })
                        .ok_or_else(|| {
                            invalid(
                                "serve.allowed_hosts",
                                format!(
                                    "expected host names such as troupe.example.com (no scheme, no port), found {item}"
                                ),
                            )
                        })?;
                    config.allowed_hosts.push(host);
                }
            }
            Some(other) => {
                return Err(invalid(
                    "serve.allowed_hosts",
                    format!(
                        "expected a list of host names such as [troupe.example.com], found {}",
                        yaml_kind(other)
                    ),
                ));
            }
        }
        if let Some(value) = map.get("feed_poll_ms").filter(|v| !v.is_null()) {
            let ms = value
                .as_u64()
                .filter(|ms| (1..=10_000).contains(ms))
                .ok_or_else(|| {
                    invalid(
                        "serve.feed_poll_ms",
                        format!("expected milliseconds from 1 to 10000, found {value}"),
                    )
                })?;
            config.feed_poll = Duration::from_millis(ms);
        }
        for &(key, low, high) in LIMIT_KEYS {
            let Some(value) = map.get(key).filter(|v| !v.is_null()) else {
                continue;
            };
            let n = value
                .as_u64()
                .filter(|n| (low..=high).contains(n))
                .ok_or_else(|| {
                    invalid(
                        &format!("serve.{key}"),
                        format!("expected a whole number from {low} to {high}, found {value}"),
                    )
                })?;
            let limits = &mut config.limits;
            let count = usize::try_from(n).unwrap_or(usize::MAX);
            match key {
                "header_read_timeout_ms" => limits.header_read_timeout = Duration::from_millis(n),
                "idle_timeout_ms" => limits.idle_timeout = Duration::from_millis(n),
                "max_connections" => limits.max_connections = count,
                "max_connections_per_client" => limits.max_connections_per_client = count,
                "max_requests_per_client" => limits.max_requests_per_client = count,
                "max_sessions" => limits.max_sessions = count,
                _ => limits.session_idle_timeout = Duration::from_millis(n),
            }
        }
        Ok(config)
    }

    /// The socket address to listen on.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.bind, self.port)
    }
}

/// The limits of the `serve:` section; see [`ServerLimits::default`] for the defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// Time a client has to send a request's headers.
    pub header_read_timeout: Duration,
    /// A connection with no request in progress and no traffic for this long is closed.
    pub idle_timeout: Duration,
    /// Open connections at most.
    pub max_connections: usize,
    /// Open connections from one client address at most.
    pub max_connections_per_client: usize,
    /// Requests in progress at most from one credential (requests with the token) and, in a
    /// budget of their own, from one client address (requests without it); more get 429 at
    /// once.
    pub max_requests_per_client: usize,
    /// Sessions open over HTTP at most (more get 429).
    pub max_sessions: usize,
    /// A session no request named, with no turn running and no event reader, for this long
    /// is closed.
    pub session_idle_timeout: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: 1024,
            max_connections_per_client: 256,
            max_requests_per_client: 64,
            max_sessions: DEFAULT_MAX_SESSIONS,
            session_idle_timeout: DEFAULT_SESSION_IDLE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn serve_section_defaults_and_errors() {
        let config = ServeConfig::from_value(&Value::Null).unwrap();
        assert!(config.bind.is_loopback());
        assert_eq!(config.port, DEFAULT_PORT);
        let config = ServeConfig::from_value(&json!({
            "bind": "0.0.0.0", "port": 9000, "cors_origins": ["http://a.test"], "token": "x"
        }))
        .unwrap();
        assert_eq!(config.port, 9000);
        assert_eq!(config.cors_origins, ["http://a.test"]);
        let error = ServeConfig::from_value(&json!({"port": 70000})).unwrap_err();
        assert!(error.to_string().contains("serve.port"), "{error}");
        let error = ServeConfig::from_value(&json!({"bind": "localhost:80"})).unwrap_err();
        assert!(error.to_string().contains("not an IP address"), "{error}");
        let config = ServeConfig::from_value(&json!({
            "header_read_timeout_ms": 500, "idle_timeout_ms": 2000, "max_connections": 10,
            "max_connections_per_client": 5, "max_requests_per_client": 3
        }))
        .unwrap();
        assert_eq!(
            config.limits.header_read_timeout,
            Duration::from_millis(500)
        );
        assert_eq!(config.limits.idle_timeout, Duration::from_secs(2));
        assert_eq!(
            (
                config.limits.max_connections,
                config.limits.max_connections_per_client,
                config.limits.max_requests_per_client
            ),
            (10, 5, 3)
        );
        let error = ServeConfig::from_value(&json!({"max_connections": 0})).unwrap_err();
        assert!(
            error.to_string().contains("serve.max_connections"),
            "{error}"
        );
    }
}
