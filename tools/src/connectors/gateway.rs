//! The client of a tool gateway: the HTTP service that searches, describes and runs hosted
//! connector tools and manages the apps a person connected (docs/connectors.md has the protocol
//! with its JSON shapes). Every request carries `Authorization: Bearer <token>`; the token lives
//! only here, never in a tool's arguments, a result, a trace or a log line.
//!
//! Failures are classified once: a 401 is [`Failure::SignInExpired`], a 412
//! [`Failure::NotSetUp`], and a time-out, a refused connection, another status, a body over
//! [`MAX_BODY_BYTES`] or a payload that is not a JSON object [`Failure::Unreachable`].

use std::fmt;
use std::time::Duration;

use serde_json::{Map, Value, json};

/// Largest answer body read from the gateway; a longer one is abandoned as unreachable, so a
/// broken or hostile gateway cannot fill memory.
pub const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

/// Why the gateway could not answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// It refused the token (401): the person must sign in again.
    SignInExpired,
    /// Connectors are not set up for this person yet (412).
    NotSetUp,
    /// No usable answer: time-out, refused connection, 5xx or another status, a body too large
    /// or not the expected JSON.
    Unreachable,
}

impl Failure {
    /// The code the bridge reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Failure::SignInExpired => "sign_in_expired",
            Failure::NotSetUp => "not_set_up",
            Failure::Unreachable => "unreachable",
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What `execute` gave back for one tool.
#[derive(Debug, Clone, PartialEq)]
pub enum Execution {
    /// `{"ok": true, "data": …}`.
    Ok(Value),
    /// `{"ok": false, "error": {"code", "message"}}`.
    Refused {
        /// The gateway's code (`CONNECTION_REQUIRED`, `TOOL_NOT_FOUND`, …).
        code: String,
        /// Its message.
        message: String,
    },
}

/// Where the gateway is and how long a request may take.
#[derive(Clone)]
pub struct GatewaySettings {
    /// Base URL; the paths (`/search`, …) are appended.
    pub url: String,
    /// The bearer token, if the environment holds one.
    pub token: Option<String>,
    /// Longest wait for one request, answer body included.
    pub timeout: Duration,
}

impl fmt::Debug for GatewaySettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GatewaySettings")
            .field("url", &self.url)
            .field("token", &self.token.as_ref().map(|_| "[set]"))
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// A connected tool gateway. Cheap to share behind an `Arc`.
pub struct Gateway {
    settings: GatewaySettings,
    client: reqwest::Client,
}

impl fmt::Debug for Gateway {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gateway")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Gateway {
    /// A client for the gateway `settings` describe.
    pub fn new(settings: GatewaySettings) -> Gateway {
        let client = reqwest::Client::builder()
            .connect_timeout(settings.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        Gateway { settings, client }
    }

    /// The longest wait for one request.
    pub fn timeout(&self) -> Duration {
        self.settings.timeout
    }

    /// `POST /search {"queries": [...]}`: the raw payload, still to be read by
    /// [`super::remote::remote_groups`].
    pub async fn search(&self, queries: &[String]) -> Result<Value, Failure> {
        self.request(
            reqwest::Method::POST,
            "search",
            Some(json!({ "queries": queries })),
        )
        .await
    }

    /// `POST /describe {"slugs": [...]}`: the `schemas` map.
    pub async fn describe(&self, slugs: &[String]) -> Result<Map<String, Value>, Failure> {
        let payload = self
            .request(
                reqwest::Method::POST,
                "describe",
                Some(json!({ "slugs": slugs })),
            )
            .await?;
        match payload.get("schemas") {
            None | Some(Value::Null) => Ok(Map::new()),
            Some(Value::Object(schemas)) => Ok(schemas.clone()),
            Some(_) => Err(Failure::Unreachable),
        }
    }

    /// `POST /execute` for one tool under one slug.
    pub async fn execute_slug(
        &self,
        connector: &str,
        slug: &str,
        arguments: &Map<String, Value>,
    ) -> Result<Execution, Failure> {
        let payload = self
            .request(
                reqwest::Method::POST,
                "execute",
                Some(json!({"connector": connector, "tool": slug, "arguments": arguments})),
            )
            .await?;
        match payload.get("ok") {
            Some(Value::Bool(true)) => Ok(Execution::Ok(
                payload.get("data").cloned().unwrap_or(Value::Null),
            )),
            Some(Value::Bool(false)) => {
                let error = payload.get("error");
                let text = |key: &str| {
                    error
                        .and_then(|e| e.get(key))
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string()
                };
                let code = text("code");
                Ok(Execution::Refused {
                    code: if code.is_empty() {
                        "ERROR".to_string()
                    } else {
                        code
                    },
                    message: text("message"),
                })
            }
            _ => Err(Failure::Unreachable),
        }
    }

    /// Runs `connectors__<connector>__<tool>`: under the conventional slug
    /// (`<CONNECTOR>_<tool>`) first, and once more under the literal `<tool>` when the gateway
    /// does not know the first.
    pub async fn execute(
        &self,
        connector: &str,
        tool: &str,
        arguments: &Map<String, Value>,
    ) -> Result<Execution, Failure> {
        let (conventional, literal) = super::names::vendor_slug_candidates(connector, tool);
        let first = self
            .execute_slug(connector, &conventional, arguments)
            .await?;
        match &first {
            Execution::Refused { code, .. }
                if code == "TOOL_NOT_FOUND" && literal != conventional =>
            {
                self.execute_slug(connector, &literal, arguments).await
            }
            _ => Ok(first),
        }
    }

    /// `GET /connections`: the `connectors` list as the gateway gives it.
    pub async fn connections(&self) -> Result<Vec<Value>, Failure> {
        let payload = self
            .request(reqwest::Method::GET, "connections", None)
            .await?;
        match payload.get("connectors") {
            Some(Value::Array(list)) => Ok(list.clone()),
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(_) => Err(Failure::Unreachable),
        }
    }

    /// `POST /connections/{connector}`: the link where the person authorizes the app.
    pub async fn authorize(&self, connector: &str) -> Result<String, Failure> {
        let encoded: String = connector
            .bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.') {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect();
        let payload = self
            .request(
                reqwest::Method::POST,
                &format!("connections/{encoded}"),
                Some(json!({})),
            )
            .await?;
        payload
            .get("connect_url")
            .and_then(Value::as_str)
            .filter(|url| !url.is_empty())
            .map(str::to_string)
            .ok_or(Failure::Unreachable)
    }

    /// One request, bounded as a whole (answer body included) by the time-out.
    async fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, Failure> {
        let url = format!("{}/{path}", self.settings.url.trim_end_matches('/'));
        let mut request = self.client.request(method, &url);
        if let Some(token) = &self.settings.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let exchange = async {
            let mut response = request.send().await.map_err(|error| {
                tracing::warn!(url = %url, error = %without_url(&error), "connector gateway not reachable");
                Failure::Unreachable
            })?;
            match response.status().as_u16() {
                200..=299 => {}
                401 => return Err(Failure::SignInExpired),
                412 => return Err(Failure::NotSetUp),
                status => {
                    tracing::warn!(url = %url, status, "connector gateway answered with an error status");
                    return Err(Failure::Unreachable);
                }
            }
            if response
                .content_length()
                .is_some_and(|n| n > MAX_BODY_BYTES as u64)
            {
                tracing::warn!(url = %url, "connector gateway answer too large; abandoned");
                return Err(Failure::Unreachable);
            }
            let mut body = Vec::new();
            while let Some(chunk) = response.chunk().await.map_err(|_| Failure::Unreachable)? {
                if body.len() + chunk.len() > MAX_BODY_BYTES {
                    tracing::warn!(url = %url, "connector gateway answer too large; abandoned");
                    return Err(Failure::Unreachable);
                }
                body.extend_from_slice(&chunk);
            }
            match serde_json::from_slice::<Value>(&body) {
                Ok(value @ Value::Object(_)) => Ok(value),
                _ => {
                    tracing::warn!(url = %url, "connector gateway answer is not a JSON object");
                    Err(Failure::Unreachable)
                }
            }
        };
        match tokio::time::timeout(self.settings.timeout, exchange).await {
            Ok(answer) => answer,
            Err(_) => {
                tracing::warn!(url = %url, timeout_s = self.settings.timeout.as_secs_f64(), "connector gateway timed out");
                Err(Failure::Unreachable)
            }
        }
    }
}

/// A reqwest error's text without the URL it may carry (the URL is logged on its own).
fn without_url(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    if let Some(url) = error.url() {
        text = text.replace(url.as_str(), "the gateway");
    }
    text
}
