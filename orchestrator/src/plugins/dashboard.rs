//! A plugin's dashboard part: `<plugin>/dashboard/manifest.json` names a tab of the web
//! dashboard, the page assets that draw it (a JavaScript module and style sheets in the same
//! folder, served by troupe under `/dashboard/plugins/<name>/`) and, optionally, API routes
//! under `/api/plugins/<name>/` answered by a program of the plugin. A broken manifest
//! disables that tab alone and says why; the plugin's other parts are not affected.
//!
//! ```json
//! {
//!   "label": "Hello",
//!   "entry": "main.js",
//!   "styles": ["style.css"],
//!   "routes": [
//!     {"method": "GET", "path": "greeting/{who}", "command": "./greet.sh", "timeout": "5s"}
//!   ]
//! }
//! ```
//!
//! A route's program runs in the plugin's folder with one JSON object on stdin
//! (`{"method", "path", "params", "query", "body"}`) and prints the JSON answer on stdout.

use std::path::{Component, Path, PathBuf};

use serde_json::{Map, Value};
use troupe_tools::text::yaml_kind;

use super::manifest::CommandSpec;
use crate::settings::hooks::command_spec;

/// The folder of a plugin that holds its dashboard part.
pub const DASHBOARD_DIR: &str = "dashboard";
/// The dashboard manifest's file name in [`DASHBOARD_DIR`].
pub const MANIFEST_FILE: &str = "manifest.json";
/// The longest tab label.
const MAX_LABEL: usize = 40;
/// The most routes one tab may declare.
const MAX_ROUTES: usize = 64;
/// HTTP methods a route may answer.
pub const METHODS: &[&str] = &["GET", "POST", "PUT", "PATCH", "DELETE"];

/// Where a tab's page assets come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Assets {
    /// Files in the plugin's `dashboard/` folder.
    Folder(PathBuf),
    /// Compiled into troupe (a bundled plugin).
    BuiltIn,
}

/// One API route of a tab.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// `GET`, `POST`, `PUT`, `PATCH` or `DELETE`.
    pub method: String,
    /// The path below `/api/plugins/<name>/`, with `{param}` segments.
    pub path: String,
    /// The program that answers it; `None` when troupe itself answers (a bundled plugin).
    pub command: Option<CommandSpec>,
}

impl Route {
    /// The route's parameters when `path` (below the plugin's prefix) matches it.
    pub fn matches(&self, method: &str, path: &str) -> Option<Map<String, Value>> {
        if !self.method.eq_ignore_ascii_case(method) {
            return None;
        }
        let want: Vec<&str> = self.path.split('/').collect();
        let got: Vec<&str> = path.trim_matches('/').split('/').collect();
        if want.len() != got.len() {
            return None;
        }
        let mut params = Map::new();
        for (w, g) in want.iter().zip(&got) {
            match w.strip_prefix('{').and_then(|w| w.strip_suffix('}')) {
                Some(name) if !g.is_empty() => {
                    params.insert(name.to_string(), Value::String((*g).to_string()));
                }
                Some(_) => return None,
                None if w == g => {}
                None => return None,
            }
        }
        Some(params)
    }
}

/// A checked dashboard part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DashboardPart {
    /// The tab's label.
    pub label: String,
    /// The JavaScript module that draws the tab (it exports `mount(root, context)`).
    pub entry: String,
    /// Style sheets the page loads with it.
    pub styles: Vec<String>,
    /// Where the files are.
    pub assets: Assets,
    /// Its API routes.
    pub routes: Vec<Route>,
}

impl DashboardPart {
    /// The part in words, for `troupe plugins list`.
    pub fn describe(&self) -> String {
        let mut out = format!("dashboard tab: {}", self.label);
        if !self.routes.is_empty() {
            let routes: Vec<String> = self
                .routes
                .iter()
                .map(|r| format!("{} {}", r.method, r.path))
                .collect();
            out.push_str(&format!(" (routes: {})", routes.join(", ")));
        }
        out
    }
}

/// Whether `plugin_dir` has a dashboard manifest.
pub fn has_part(plugin_dir: &Path) -> bool {
    plugin_dir.join(DASHBOARD_DIR).join(MANIFEST_FILE).is_file()
}

/// Reads `<plugin_dir>/dashboard/manifest.json`: `None` when there is none, else the checked
/// part or why it cannot be used (naming the file and the field).
pub fn load(plugin_dir: &Path) -> Option<Result<DashboardPart, String>> {
    let dir = plugin_dir.join(DASHBOARD_DIR);
    let file = dir.join(MANIFEST_FILE);
    if !file.is_file() {
        return None;
    }
    let shown = file.display().to_string();
    let result = std::fs::read_to_string(&file)
        .map_err(|e| format!("cannot be read: {e}"))
        .and_then(|text| parse(&text, &dir, plugin_dir))
        .map_err(|problem| format!("{shown}: {problem}"));
    Some(result)
}

/// Checks a manifest's text; `dir` is the dashboard folder (assets), `plugin_dir` where route
/// programs run.
pub fn parse(text: &str, dir: &Path, plugin_dir: &Path) -> Result<DashboardPart, String> {
    troupe_tools::input_limits::check_config_text(text, MANIFEST_FILE)
        .map_err(|e| e.to_string())?;
    let raw: Value = serde_json::from_str(text).map_err(|e| {
        format!("is not valid JSON ({e}); write an object like {{\"label\": \"Hello\", \"entry\": \"main.js\"}}")
    })?;
    let Value::Object(root) = raw else {
        return Err(format!(
            "must be a JSON object with `label` and `entry`, found {}",
            yaml_kind(&raw)
        ));
    };
    let label = match root.get("label") {
        Some(Value::String(l)) if !l.trim().is_empty() && l.trim().chars().count() <= MAX_LABEL => {
            l.trim().to_string()
        }
        Some(Value::String(_)) => {
            return Err(format!(
                "field `label` must be 1 to {MAX_LABEL} characters; it is the tab's name"
            ));
        }
        Some(other) => {
            return Err(format!(
                "field `label` must be text, found {}",
                yaml_kind(other)
            ));
        }
        None => {
            return Err("field `label` is missing; name the tab, like \"label\": \"Hello\"".into());
        }
    };
    let entry = match root.get("entry") {
        Some(Value::String(e)) => {
            asset_name(e, &["js", "mjs"]).map_err(|p| format!("field `entry`: {p}"))?
        }
        Some(other) => {
            return Err(format!(
                "field `entry` must be the file name of a JavaScript module, found {}",
                yaml_kind(other)
            ));
        }
        None => {
            return Err(
                "field `entry` is missing; name the JavaScript module that draws the tab, like \"entry\": \"main.js\""
                    .into(),
            );
        }
    };
    if !dir.join(&entry).is_file() {
        return Err(format!(
            "field `entry`: {entry} is not a file in {}",
            dir.display()
        ));
    }
    let styles = match root.get("styles") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => {
            let mut out = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let Value::String(name) = item else {
                    return Err(format!(
                        "field `styles[{i}]` must be a style sheet's file name, found {}",
                        yaml_kind(item)
                    ));
                };
                let name =
                    asset_name(name, &["css"]).map_err(|p| format!("field `styles[{i}]`: {p}"))?;
                if !dir.join(&name).is_file() {
                    return Err(format!(
                        "field `styles[{i}]`: {name} is not a file in {}",
                        dir.display()
                    ));
                }
                out.push(name);
            }
            out
        }
        Some(other) => {
            return Err(format!(
                "field `styles` must be a list of file names, found {}",
                yaml_kind(other)
            ));
        }
    };
    let routes = match root.get("routes") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) if items.len() <= MAX_ROUTES => {
            let mut out: Vec<Route> = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let route =
                    route(item, plugin_dir).map_err(|p| format!("field `routes[{i}]`{p}"))?;
                if out
                    .iter()
                    .any(|r| r.method == route.method && r.path == route.path)
                {
                    return Err(format!(
                        "field `routes[{i}]`: {} {} is declared twice",
                        route.method, route.path
                    ));
                }
                out.push(route);
            }
            out
        }
        Some(Value::Array(_)) => {
            return Err(format!(
                "field `routes` lists more than {MAX_ROUTES} routes"
            ));
        }
        Some(other) => {
            return Err(format!(
                "field `routes` must be a list of routes, found {}",
                yaml_kind(other)
            ));
        }
    };
    Ok(DashboardPart {
        label,
        entry,
        styles,
        assets: Assets::Folder(dir.to_path_buf()),
        routes,
    })
}

fn route(item: &Value, plugin_dir: &Path) -> Result<Route, String> {
    let Value::Object(map) = item else {
        return Err(format!(
            " must be an object like {{\"method\": \"GET\", \"path\": \"items\", \"command\": \"./items.sh\"}}, found {}",
            yaml_kind(item)
        ));
    };
    let method = match map.get("method") {
        None => "GET".to_string(),
        Some(Value::String(m)) if METHODS.contains(&m.to_ascii_uppercase().as_str()) => {
            m.to_ascii_uppercase()
        }
        Some(other) => {
            return Err(format!(
                ".method must be one of {}, found {other}",
                METHODS.join(", ")
            ));
        }
    };
    let path = match map.get("path") {
        Some(Value::String(p)) => route_path(p).map_err(|e| format!(".path: {e}"))?,
        _ => {
            return Err(
                ".path is missing or not text; give the path below /api/plugins/<name>/, like \"items/{id}\""
                    .into(),
            );
        }
    };
    let mut spec = map.clone();
    spec.remove("method");
    spec.remove("path");
    let command = command_spec(&Value::Object(spec), "", plugin_dir)
        .map_err(|(field, problem)| format!("{field}: {problem}"))?;
    Ok(Route {
        method,
        path,
        command: Some(command),
    })
}

/// A route path: segments of letters, digits, `-`, `_` and `.`, or `{param}`.
pub fn route_path(raw: &str) -> Result<String, String> {
    let path = raw.trim().trim_matches('/');
    if path.is_empty() || path.len() > 200 {
        return Err(format!(
            "{raw:?} is not a route path; write one or more segments like \"items/{{id}}\""
        ));
    }
    for segment in path.split('/') {
        let name = segment
            .strip_prefix('{')
            .and_then(|s| s.strip_suffix('}'))
            .unwrap_or(segment);
        let plain = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && name != "."
            && name != "..";
        if !plain {
            return Err(format!(
                "segment {segment:?} of {raw:?} may hold only letters, digits, `-`, `_` and `.`, or be a {{param}}"
            ));
        }
    }
    Ok(path.to_string())
}

/// A file name inside the dashboard folder: relative, no `..`, no hidden parts, one of
/// `extensions`.
pub fn asset_name(raw: &str, extensions: &[&str]) -> Result<String, String> {
    let name = raw.trim().trim_start_matches("./");
    let path = Path::new(name);
    let inside = !name.is_empty()
        && path.components().all(|c| match c {
            Component::Normal(part) => part.to_str().is_some_and(|p| !p.starts_with('.')),
            _ => false,
        });
    if !inside {
        return Err(format!(
            "{raw:?} must be a file inside the plugin's dashboard folder (no `..`, no absolute path, no hidden files)"
        ));
    }
    let extension = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    if !extensions.contains(&extension) {
        return Err(format!("{raw:?} must end in .{}", extensions.join(" or .")));
    }
    Ok(name.to_string())
}

/// The media type troupe serves a dashboard asset with, by extension; `None` for a kind it
/// does not serve.
pub fn media_type(name: &str) -> Option<&'static str> {
    let extension = Path::new(name).extension()?.to_str()?;
    Some(match extension {
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "json" => "application/json",
        "woff2" => "font/woff2",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("main.js"), "export function mount() {}").unwrap();
        std::fs::write(dir.path().join("tab.css"), "p {}").unwrap();
        dir
    }

    #[test]
    fn a_full_manifest_is_read_and_routes_match() {
        let dir = folder();
        let part = parse(
            r#"{"label": "Hello", "entry": "./main.js", "styles": ["tab.css"],
                "routes": [{"path": "greeting/{who}", "command": "./greet.sh", "timeout": "2s"},
                           {"method": "post", "path": "/reset/", "command": "./reset.sh"}]}"#,
            dir.path(),
            dir.path(),
        )
        .unwrap();
        assert_eq!(part.entry, "main.js");
        assert_eq!(part.routes[1].method, "POST");
        assert_eq!(part.routes[1].path, "reset");
        let params = part.routes[0].matches("GET", "greeting/ada").unwrap();
        assert_eq!(params["who"], "ada");
        assert!(part.routes[0].matches("POST", "greeting/ada").is_none());
        assert!(part.routes[0].matches("GET", "greeting").is_none());
        assert!(part.describe().contains("GET greeting/{who}"));
    }

    #[test]
    fn problems_name_the_field_and_what_to_write() {
        let dir = folder();
        let check = |text: &str| parse(text, dir.path(), dir.path()).unwrap_err();
        assert!(check("{").contains("not valid JSON"));
        assert!(check(r#"{"entry": "main.js"}"#).contains("`label` is missing"));
        assert!(check(r#"{"label": "x", "entry": "../x.js"}"#).contains("inside"));
        assert!(check(r#"{"label": "x", "entry": "gone.js"}"#).contains("not a file"));
        assert!(check(r#"{"label": "x", "entry": "tab.css"}"#).contains(".js"));
        assert!(
            check(r#"{"label": "x", "entry": "main.js", "routes": [{"path": "a/../b", "command": "x"}]}"#)
                .contains("routes[0]")
        );
        assert!(
            check(r#"{"label": "x", "entry": "main.js", "routes": [{"path": "a", "method": "TRACE", "command": "x"}]}"#)
                .contains("method")
        );
        assert!(
            check(r#"{"label": "x", "entry": "main.js", "routes": [{"path": "a"}]}"#)
                .contains("command")
        );
    }
}
