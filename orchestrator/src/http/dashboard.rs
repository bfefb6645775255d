//! The web dashboard `troupe serve` serves at `/`: one page of plain HTML, CSS and JavaScript
//! modules kept under `http/dashboard/` and built into the binary, so it works offline with no
//! toolchain. These routes need no token (the page asks for it and sends it on every API call);
//! they are merged outside the auth layer by [`super::router`]. Every answer carries a strict
//! Content-Security-Policy: the page may load and call only its own server.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::HttpState;

/// Path prefix of the page's assets.
pub const ASSET_PREFIX: &str = "/dashboard/";

/// The policy of every dashboard answer: nothing from other hosts, no inline script or style,
/// no plugins, no framing; the page may connect to its own server only. `{ws}` becomes the
/// server's WebSocket origins, since older browsers do not count a WebSocket to the same host
/// as `'self'`.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
     connect-src 'self'{ws}; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The Content-Security-Policy for a page asked for with `host` (the request's `Host`
/// header): its WebSocket feed may go to `ws://<host>` and `wss://<host>` and nowhere else. A
/// host that is not a plain name or address with a port gets `'self'` alone.
pub fn content_security_policy(host: Option<&str>) -> String {
    let plain = |h: &&str| {
        !h.is_empty()
            && h.len() <= 255
            && h.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'))
    };
    let ws = match host.filter(plain) {
        Some(host) => format!(" ws://{host} wss://{host}"),
        None => String::new(),
    };
    POLICY.replace("{ws}", &ws)
}

/// One file of the page: its name under [`ASSET_PREFIX`], its media type and its bytes.
struct Asset {
    name: &'static str,
    media_type: &'static str,
    body: &'static str,
}

const INDEX: &str = include_str!("dashboard/index.html");

/// The page's files, built in.
const ASSETS: &[Asset] = &[
    Asset {
        name: "style.css",
        media_type: "text/css; charset=utf-8",
        body: include_str!("dashboard/style.css"),
    },
    Asset {
        name: "app.js",
        media_type: "text/javascript; charset=utf-8",
        body: include_str!("dashboard/app.js"),
    },
    Asset {
        name: "api.js",
        media_type: "text/javascript; charset=utf-8",
        body: include_str!("dashboard/api.js"),
    },
    Asset {
        name: "board.js",
        media_type: "text/javascript; charset=utf-8",
        body: include_str!("dashboard/board.js"),
    },
    Asset {
        name: "task.js",
        media_type: "text/javascript; charset=utf-8",
        body: include_str!("dashboard/task.js"),
    },
    Asset {
        name: "sessions.js",
        media_type: "text/javascript; charset=utf-8",
        body: include_str!("dashboard/sessions.js"),
    },
    Asset {
        name: "plugins.js",
        media_type: "text/javascript; charset=utf-8",
        body: include_str!("dashboard/plugins.js"),
    },
    Asset {
        name: "plugins.css",
        media_type: "text/css; charset=utf-8",
        body: include_str!("dashboard/plugins.css"),
    },
    Asset {
        name: "transcript.js",
        media_type: "text/javascript; charset=utf-8",
        body: include_str!("dashboard/transcript.js"),
    },
    Asset {
        name: "schedules.js",
        media_type: "text/javascript; charset=utf-8",
        body: include_str!("dashboard/schedules.js"),
    },
    Asset {
        name: "icon.svg",
        media_type: "image/svg+xml",
        body: include_str!("dashboard/icon.svg"),
    },
];

/// The dashboard's routes: the page at `/`, its assets under [`ASSET_PREFIX`] and the plugin
/// tabs' assets under [`super::plugin_tabs::ASSET_PREFIX`].
pub fn router() -> Router<HttpState> {
    Router::new()
        .route("/", get(page))
        .route("/dashboard/{file}", get(asset))
        .route(
            "/dashboard/plugins/{plugin}/{*file}",
            get(super::plugin_tabs::asset),
        )
}

/// The names of the built-in assets, for tests and docs.
pub fn asset_names() -> impl Iterator<Item = &'static str> {
    ASSETS.iter().map(|a| a.name)
}

async fn page(headers: HeaderMap) -> Response {
    respond("text/html; charset=utf-8", INDEX, &headers)
}

async fn asset(Path(file): Path<String>, headers: HeaderMap) -> Response {
    match ASSETS.iter().find(|a| a.name == file) {
        Some(asset) => respond(asset.media_type, asset.body, &headers),
        None => (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("the dashboard has no file {file:?}"),
        )
            .into_response(),
    }
}

fn respond(media_type: &'static str, body: &'static str, request: &HeaderMap) -> Response {
    respond_bytes(
        media_type,
        axum::body::Bytes::from_static(body.as_bytes()),
        request,
    )
}

/// A dashboard file (the page's own or a plugin tab's) with the dashboard's headers: its
/// media type, the Content-Security-Policy, no sniffing, no referrer, no caching.
pub(crate) fn respond_bytes(
    media_type: &'static str,
    body: axum::body::Bytes,
    request: &HeaderMap,
) -> Response {
    let host = request.get(header::HOST).and_then(|h| h.to_str().ok());
    let policy = HeaderValue::from_str(&content_security_policy(host))
        .unwrap_or_else(|_| HeaderValue::from_static("default-src 'none'"));
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(media_type));
    headers.insert(header::CONTENT_SECURITY_POLICY, policy);
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // The files change with the binary; asking again each load costs little on loopback.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_lets_the_page_reach_its_own_server_only() {
        let policy = content_security_policy(Some("127.0.0.1:8642"));
        assert!(
            policy.contains("connect-src 'self' ws://127.0.0.1:8642 wss://127.0.0.1:8642;"),
            "{policy}"
        );
        assert!(policy.starts_with("default-src 'none';"), "{policy}");
        // A Host header trying to add a directive or another source gets 'self' alone.
        for host in ["evil.test; script-src *", "a b", ""] {
            let policy = content_security_policy(Some(host));
            assert!(policy.contains("connect-src 'self';"), "{host:?}: {policy}");
        }
        assert!(content_security_policy(None).contains("connect-src 'self';"));
    }

    #[test]
    fn every_script_the_page_imports_is_built_in() {
        let names: Vec<&str> = asset_names().collect();
        for source in ASSETS.iter().map(|a| a.body).chain([INDEX]) {
            for piece in source.split(['"', '\'']) {
                let file = piece
                    .strip_prefix("./")
                    .or_else(|| piece.strip_prefix(ASSET_PREFIX));
                if let Some(file) = file
                    && [".js", ".css", ".svg"]
                        .iter()
                        .any(|ext| file.ends_with(ext))
                {
                    assert!(
                        names.contains(&file),
                        "{file} is referenced but not built in"
                    );
                }
            }
        }
    }
}
