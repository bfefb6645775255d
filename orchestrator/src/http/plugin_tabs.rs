//! Dashboard tabs from plugins ([`crate::plugins::dashboard`]): the list the page reads
//! (`GET /api/dashboard/tabs`), each tab's API under `/api/plugins/<name>/…` (behind the token,
//! like every API route), and its page assets under `/dashboard/plugins/<name>/…` (served like
//! the dashboard's own files, with the same Content-Security-Policy). A route of a plugin
//! folder runs the plugin's program with the request as JSON on stdin; the bundled
//! `achievements` tab is answered here ([`crate::plugins::achievements`]).

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use troupe_tools::builtin::sandbox_env::ChildSecrets;

use super::HttpState;
use super::errors::ApiError;
use crate::plugins::PluginCatalog;
use crate::plugins::achievements::{self, Achievements};
use crate::plugins::command_hook::run_raw;
use crate::plugins::dashboard::{Assets, DashboardPart, media_type};
use crate::sessions::{SessionStore, SessionStoreError};

/// Path prefix of plugin tabs' assets.
pub const ASSET_PREFIX: &str = "/dashboard/plugins/";

/// The largest asset file served from a plugin folder.
const MAX_ASSET_BYTES: u64 = 4 * 1024 * 1024;

/// One tab as the server knows it.
#[derive(Debug, Clone)]
pub struct Tab {
    /// The plugin's name.
    pub name: String,
    /// `bundled`, `user` or `project`.
    pub source: &'static str,
    /// The checked part, or why the tab is disabled.
    pub part: Result<DashboardPart, String>,
}

/// Every plugin tab, and the running achievements plugin when its tab is the bundled one and
/// sessions are stored. Cheap to share.
#[derive(Debug, Default)]
pub struct PluginTabs {
    tabs: Vec<Tab>,
    achievements: Option<Arc<Achievements>>,
}

impl PluginTabs {
    /// The tabs of `catalog` (plugins in `plugins.disabled` left out); route programs are kept
    /// from `secrets` and get their plugin's `requires_env`. `sessions` feeds the bundled
    /// achievements tab; `home` is where it keeps its files.
    pub fn from_catalog(
        catalog: &PluginCatalog,
        secrets: &ChildSecrets,
        sessions: Option<SessionStore>,
    ) -> PluginTabs {
        let mut tabs = Vec::new();
        let mut achievements = None;
        for plugin in &catalog.plugins {
            let Some(found) = &plugin.found.dashboard else {
                continue;
            };
            if plugin.disabled {
                continue;
            }
            let passthrough = plugin
                .found
                .manifest
                .as_ref()
                .map(|m| m.requires_env.clone())
                .unwrap_or_default();
            let part = found.clone().map(|mut part| {
                for route in &mut part.routes {
                    if let Some(spec) = route.command.take() {
                        route.command = Some(crate::plugins::spec_withholding(
                            spec,
                            &passthrough,
                            secrets,
                        ));
                    }
                }
                part
            });
            if plugin.found.builtin == Some(crate::plugins::bundled::Builtin::Achievements)
                && let Some(store) = &sessions
            {
                achievements = Some(Achievements::new(store.clone(), &catalog.home));
            }
            tabs.push(Tab {
                name: plugin.name().to_string(),
                source: plugin.found.source.as_str(),
                part,
            });
        }
        PluginTabs { tabs, achievements }
    }

    /// Starts what runs in the background: the achievements plugin's first scan.
    pub fn start(&self) {
        if let Some(achievements) = &self.achievements {
            achievements.rescan();
        }
    }

    /// The tabs.
    pub fn tabs(&self) -> &[Tab] {
        &self.tabs
    }

    fn get(&self, name: &str) -> Option<&Tab> {
        self.tabs.iter().find(|t| t.name == name)
    }
}

/// `GET /api/dashboard/tabs`: the plugin tabs the page adds, broken ones with their reason.
pub async fn list(State(state): State<HttpState>) -> Response {
    let tabs: Vec<Value> = state
        .plugin_tabs
        .tabs()
        .iter()
        .map(|tab| match &tab.part {
            Ok(part) => json!({
                "name": tab.name,
                "source": tab.source,
                "label": part.label,
                "entry": format!("{ASSET_PREFIX}{}/{}", tab.name, part.entry),
                "styles": part.styles.iter().map(|s| format!("{ASSET_PREFIX}{}/{s}", tab.name)).collect::<Vec<_>>(),
                "api": format!("/api/plugins/{}/", tab.name),
                "routes": part.routes.iter().map(|r| json!({"method": r.method, "path": r.path})).collect::<Vec<_>>(),
                "problem": null,
            }),
            Err(problem) => json!({
                "name": tab.name,
                "source": tab.source,
                "label": tab.name,
                "problem": problem,
            }),
        })
        .collect();
    Json(json!({ "tabs": tabs })).into_response()
}

/// Any method on `/api/plugins/{plugin}/{*path}`: the plugin tab's route.
pub async fn call(
    State(state): State<HttpState>,
    method: Method,
    Path((plugin, path)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Response {
    match answer(&state, &method, &plugin, &path, query.as_deref(), &body).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    }
}

async fn answer(
    state: &HttpState,
    method: &Method,
    plugin: &str,
    path: &str,
    query: Option<&str>,
    body: &[u8],
) -> Result<Response, ApiError> {
    let tabs = &state.plugin_tabs;
    let Some(tab) = tabs.get(plugin) else {
        return Err(ApiError::not_found(
            "plugin_not_found",
            format!(
                "no dashboard plugin named '{plugin}' is loaded here; GET /api/dashboard/tabs lists them"
            ),
        ));
    };
    let part = tab.part.as_ref().map_err(|problem| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "plugin_tab_disabled",
            format!("the '{plugin}' tab is disabled: {problem}"),
        )
    })?;
    let Some((route, params)) = part
        .routes
        .iter()
        .find_map(|r| r.matches(method.as_str(), path).map(|p| (r, p)))
    else {
        let known: Vec<String> = part
            .routes
            .iter()
            .map(|r| format!("{} {}", r.method, r.path))
            .collect();
        return Err(ApiError::not_found(
            "plugin_route_not_found",
            format!(
                "the '{plugin}' plugin has no route {method} {path}; it serves: {}",
                if known.is_empty() {
                    "nothing".to_string()
                } else {
                    known.join(", ")
                }
            ),
        ));
    };
    let query = parse_query(query);
    match &route.command {
        Some(spec) => {
            let body = match body {
                b if b.iter().all(u8::is_ascii_whitespace) => Value::Null,
                b => serde_json::from_slice(b).map_err(|e| {
                    ApiError::bad_request(
                        "invalid_json",
                        format!("the body is not JSON ({e}); send a JSON value or nothing"),
                    )
                })?,
            };
            let payload = json!({
                "method": method.as_str(),
                "path": route.path,
                "params": params,
                "query": query,
                "body": body,
            });
            run_route(plugin, spec.clone(), payload).await
        }
        None if plugin == achievements::NAME => {
            let Some(service) = &tabs.achievements else {
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "sessions_not_stored",
                    "sessions are not stored by this server (sessions.persist is off), so there is nothing to count",
                ));
            };
            achievements_route(service, &route.path, &params, &query).await
        }
        None => Err(ApiError::internal(format!(
            "the '{plugin}' route {} has no handler",
            route.path
        ))),
    }
}

fn parse_query(query: Option<&str>) -> Map<String, Value> {
    let mut out = Map::new();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let decode = |s: &str| percent_decode(&s.replace('+', " "));
        out.insert(decode(key), Value::String(decode(value)));
    }
    out
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = text.get(i + 1..i + 3)
            && let Ok(byte) = u8::from_str_radix(hex, 16)
        {
            out.push(byte);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn run_route(
    plugin: &str,
    spec: crate::plugins::manifest::CommandSpec,
    payload: Value,
) -> Result<Response, ApiError> {
    let owner = plugin.to_string();
    let dir = spec.dir.display().to_string();
    let output = tokio::task::spawn_blocking(move || {
        run_raw(
            &spec,
            &format!("{payload}\n"),
            &[
                ("TROUPE_PLUGIN", owner.as_str()),
                ("TROUPE_PLUGIN_DIR", dir.as_str()),
            ],
        )
    })
    .await
    .map_err(|e| ApiError::internal(format!("the route's runner failed: {e}")))?;
    let failed =
        |message: String| ApiError::new(StatusCode::BAD_GATEWAY, "plugin_route_failed", message);
    let stdout = output.map_err(|e| failed(format!("the '{plugin}' route's program {e}")))?;
    let text = stdout.trim();
    if text.is_empty() {
        return Ok(Json(json!({})).into_response());
    }
    let value: Value = serde_json::from_str(text).map_err(|e| {
        failed(format!(
            "the '{plugin}' route's program printed something that is not JSON ({e}); it must print one JSON value"
        ))
    })?;
    Ok(Json(value).into_response())
}

async fn achievements_route(
    service: &Arc<Achievements>,
    route: &str,
    params: &Map<String, Value>,
    query: &Map<String, Value>,
) -> Result<Response, ApiError> {
    let value = match route {
        "achievements" => service.achievements(),
        "scan-status" => service.scan_status(),
        "recent-unlocks" => {
            let limit = match query.get("limit").and_then(Value::as_str) {
                None => 20,
                Some(text) => text
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=500).contains(n))
                    .ok_or_else(|| {
                        ApiError::bad_request(
                            "invalid_limit",
                            format!("limit must be a whole number from 1 to 500, got {text:?}"),
                        )
                    })?,
            };
            service.recent_unlocks(limit)
        }
        "sessions/{id}/badges" => {
            let id = params.get("id").and_then(Value::as_str).unwrap_or_default();
            match service.session_badges(id).await {
                Ok(value) => value,
                Err(SessionStoreError::NotFound(_)) => {
                    return Err(ApiError::not_found(
                        "session_not_found",
                        format!(
                            "no stored session has the id {id:?}; GET /api/sessions lists them"
                        ),
                    ));
                }
                Err(error) => return Err(ApiError::internal(error.to_string())),
            }
        }
        "rescan" => {
            let started = service.rescan();
            return Ok((
                StatusCode::ACCEPTED,
                Json(json!({"started": started, "scan": service.scan_status()})),
            )
                .into_response());
        }
        "reset-state" => {
            service.reset().map_err(|e| {
                ApiError::internal(format!("could not remove the achievements files: {e}"))
            })?;
            json!({"reset": true, "note": "the unlock history and kept stats are gone; POST rescan counts again"})
        }
        other => {
            return Err(ApiError::internal(format!(
                "the achievements route {other} has no handler"
            )));
        }
    };
    Ok(Json(value).into_response())
}

/// `GET /dashboard/plugins/{plugin}/{*file}`: a tab's page asset, with the dashboard's
/// Content-Security-Policy. Served without the token, like the dashboard's own files.
pub async fn asset(
    State(state): State<HttpState>,
    Path((plugin, file)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let missing = || {
        (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("the '{plugin}' tab has no file {file:?}"),
        )
            .into_response()
    };
    let Some(Tab { part: Ok(part), .. }) = state.plugin_tabs.get(&plugin) else {
        return missing();
    };
    match &part.assets {
        Assets::BuiltIn => match achievements::asset(&file) {
            Some((media, body)) if plugin == achievements::NAME => {
                super::dashboard::respond_bytes(media, Bytes::from_static(body), &headers)
            }
            _ => missing(),
        },
        Assets::Folder(dir) => {
            let Ok(name) = crate::plugins::dashboard::asset_name(
                &file,
                &["js", "mjs", "css", "svg", "png", "json", "woff2"],
            ) else {
                return missing();
            };
            let Some(media) = media_type(&name) else {
                return missing();
            };
            let (Ok(root), Ok(path)) = (dir.canonicalize(), dir.join(&name).canonicalize()) else {
                return missing();
            };
            // A link inside the folder must not lead out of it.
            if !path.starts_with(&root) {
                return missing();
            }
            match tokio::fs::metadata(&path).await {
                Ok(meta) if meta.is_file() && meta.len() <= MAX_ASSET_BYTES => {}
                _ => return missing(),
            }
            match tokio::fs::read(&path).await {
                Ok(bytes) => super::dashboard::respond_bytes(media, Bytes::from(bytes), &headers),
                Err(_) => missing(),
            }
        }
    }
}
