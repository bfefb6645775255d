//! What the accept loop ([`super::listener`]) decides about a request before the router sees
//! it: whether its `Host` names this server (a page on another site that rebinds its DNS name
//! to 127.0.0.1 still sends its own name, so it is refused with 421), and whether it carries
//! the token (its requests then count against the token's own budget, and its connection is the
//! last one closed to make room, so clients without the token cannot starve it).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, Response, StatusCode, Uri, header};

use super::auth::{constant_time_eq, presented_token_in};
use super::errors::ApiError;

/// The listener's view of who may talk to it.
#[derive(Debug, Clone)]
pub(crate) struct Gate {
    /// The token that makes a request authenticated.
    token: Arc<str>,
    /// The dashboard token, which does too.
    dashboard_token: Option<Arc<str>>,
    /// The address the server listens on.
    listen: SocketAddr,
    /// Extra names from `serve.allowed_hosts`, lower-case, without a port.
    allowed_hosts: Arc<[String]>,
}

impl Gate {
    /// A gate for a server on `listen` whose token is `token`, accepting `allowed_hosts` too.
    pub(crate) fn new(token: Arc<str>, listen: SocketAddr, allowed_hosts: &[String]) -> Gate {
        Gate {
            token,
            dashboard_token: None,
            listen,
            allowed_hosts: allowed_hosts
                .iter()
                .map(|h| h.trim().to_ascii_lowercase())
                .collect(),
        }
    }

    /// Counts the dashboard token as authenticated too.
    pub(crate) fn with_dashboard_token(mut self, token: Option<Arc<str>>) -> Gate {
        self.dashboard_token = token;
        self
    }

    /// Whether the request carries the server's token or the dashboard token.
    pub(crate) fn authenticated(&self, headers: &HeaderMap, uri: &Uri) -> bool {
        presented_token_in(headers, uri).is_some_and(|token| {
            constant_time_eq(token.as_bytes(), self.token.as_bytes())
                || self
                    .dashboard_token
                    .as_deref()
                    .is_some_and(|d| constant_time_eq(token.as_bytes(), d.as_bytes()))
        })
    }

    /// Whether `host` (a `Host` header's value) names this server: the listen address itself,
    /// `localhost` and the loopback addresses when it listens on loopback, any address of this
    /// machine when it listens on all of them (a literal address cannot be rebound), and the
    /// names of `serve.allowed_hosts` on any port (a proxy in front may use its own). A request
    /// without `Host` (HTTP/1.0) passes: every browser sends one.
    pub(crate) fn host_allowed(&self, host: Option<&str>) -> bool {
        let Some(host) = host else {
            return true;
        };
        let Some((name, port)) = split_host(host.trim()) else {
            return false;
        };
        let name = name.to_ascii_lowercase();
        if self.allowed_hosts.contains(&name) {
            return true;
        }
        if port.unwrap_or(80) != self.listen.port() {
            return false;
        }
        let listen_ip = self.listen.ip();
        match name.parse::<IpAddr>() {
            Ok(ip) if ip == listen_ip => true,
            Ok(ip) if listen_ip.is_unspecified() => !ip.is_unspecified(),
            Ok(ip) => listen_ip.is_loopback() && ip.is_loopback(),
            Err(_) => {
                (listen_ip.is_loopback() || listen_ip.is_unspecified()) && name == "localhost"
            }
        }
    }

    /// The 421 answer for a request whose `Host` is not this server's.
    pub(crate) fn misdirected(&self, host: &str) -> Response<Body> {
        let port = self.listen.port();
        let mut accepted = vec![format!("{}", self.listen)];
        if self.listen.ip().is_loopback() || self.listen.ip().is_unspecified() {
            accepted.push(format!("localhost:{port}"));
        }
        accepted.extend(self.allowed_hosts.iter().cloned());
        let shown: String = host
            .chars()
            .take(200)
            .flat_map(char::escape_default)
            .collect();
        let error = ApiError::new(
            StatusCode::MISDIRECTED_REQUEST,
            "misdirected_request",
            format!(
                "this server does not answer to the host \"{shown}\"; it accepts {}. To reach it under another name, add that name to serve.allowed_hosts in troupe.yaml",
                accepted.join(", ")
            ),
        );
        let mut response = Response::new(Body::from(error.body().to_string()));
        *response.status_mut() = error.status;
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            axum::http::HeaderValue::from_static("application/json"),
        );
        response
    }
}

/// A `Host` value's name and port: `name`, `name:port`, `1.2.3.4:port`, `[::1]:port`. `None`
/// when it is malformed.
fn split_host(host: &str) -> Option<(&str, Option<u16>)> {
    if host.is_empty() {
        return None;
    }
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        match after {
            "" => (inside, None),
            _ => (inside, Some(after.strip_prefix(':')?)),
        }
    } else {
        match host.rsplit_once(':') {
            // A bare IPv6 address has colons but no brackets: not a valid Host.
            Some((name, _)) if name.contains(':') => return None,
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        }
    };
    if name.is_empty() {
        return None;
    }
    let port = match port {
        Some(text) => Some(text.parse::<u16>().ok()?),
        None => None,
    };
    Some((name, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(listen: &str, allowed: &[&str]) -> Gate {
        let allowed: Vec<String> = allowed.iter().map(|s| s.to_string()).collect();
        Gate::new(Arc::from("t"), listen.parse().unwrap(), &allowed)
    }

    #[test]
    fn loopback_servers_answer_their_own_names_only() {
        let g = gate("127.0.0.1:8642", &[]);
        for ok in [
            "127.0.0.1:8642",
            "localhost:8642",
            "LOCALHOST:8642",
            "[::1]:8642",
        ] {
            assert!(g.host_allowed(Some(ok)), "{ok}");
        }
        for bad in [
            "evil.example:8642",
            "localhost:9999",
            "127.0.0.1",
            "10.0.0.1:8642",
            "",
            "[::1",
            "::1:8642",
            "localhost:x",
        ] {
            assert!(!g.host_allowed(Some(bad)), "{bad}");
        }
        assert!(g.host_allowed(None));
    }

    #[test]
    fn configured_names_and_wildcard_binds() {
        let g = gate("0.0.0.0:80", &["Troupe.example"]);
        assert!(g.host_allowed(Some("troupe.example")));
        assert!(g.host_allowed(Some("troupe.example:443")));
        assert!(g.host_allowed(Some("192.168.1.5")));
        assert!(g.host_allowed(Some("localhost")));
        assert!(!g.host_allowed(Some("rebound.example")));
        let g = gate("192.168.1.5:8642", &[]);
        assert!(!g.host_allowed(Some("localhost:8642")));
        assert!(g.host_allowed(Some("192.168.1.5:8642")));
    }

    #[test]
    fn the_refusal_names_what_is_accepted() {
        let g = gate("127.0.0.1:8642", &["dash.example"]);
        let response = g.misdirected("evil\u{1b}]0;x\u{7}");
        assert_eq!(response.status(), StatusCode::MISDIRECTED_REQUEST);
    }
}
