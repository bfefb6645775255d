//! Finding plugins: bundled (compiled into troupe, plus folders under
//! `$TROUPE_BUNDLED_PLUGINS` for packagers), user (`$TROUPE_HOME/plugins/<name>/`), project
//! (`./.troupe/plugins/<name>/`, only with `TROUPE_ENABLE_PROJECT_PLUGINS=1`). A folder is a
//! plugin when it holds a `plugin.yaml` or a dashboard part (`dashboard/manifest.json`). A later source
//! wins a name clash, and the winner records what it hides. A broken manifest is kept as that
//! plugin's problem; it never stops the others.

use std::path::{Path, PathBuf};

use super::bundled::{self, Builtin};
use super::dashboard::{self, DashboardPart};
use super::manifest::{self, Manifest, ManifestError};

/// The environment switch that lets project plugins load.
pub const PROJECT_SWITCH: &str = "TROUPE_ENABLE_PROJECT_PLUGINS";

/// An extra folder of bundled plugins (for packagers and tests).
pub const BUNDLED_DIR_VAR: &str = "TROUPE_BUNDLED_PLUGINS";

/// Where a plugin was found, in precedence order (later wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    /// Shipped with troupe.
    Bundled,
    /// `$TROUPE_HOME/plugins/`.
    User,
    /// `./.troupe/plugins/` (opt-in).
    Project,
}

impl Source {
    /// The name shown in listings.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Bundled => "bundled",
            Source::User => "user",
            Source::Project => "project",
        }
    }
}

/// A plugin that lost a name clash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hidden {
    /// Where it was.
    pub source: Source,
    /// Its folder (`None` for one compiled in).
    pub dir: Option<PathBuf>,
}

/// One plugin as found, before enablement.
#[derive(Debug, Clone)]
pub struct Discovered {
    /// Its name (the folder's name).
    pub name: String,
    /// Where it was found.
    pub source: Source,
    /// Its folder; `None` for a plugin compiled into troupe.
    pub dir: Option<PathBuf>,
    /// The checked manifest, or why it could not be used.
    pub manifest: Result<Manifest, ManifestError>,
    /// For a compiled-in plugin, which one.
    pub builtin: Option<Builtin>,
    /// Plugins of the same name it overrides.
    pub hides: Vec<Hidden>,
    /// Its dashboard tab (`dashboard/manifest.json`), or why the tab cannot be shown.
    pub dashboard: Option<Result<DashboardPart, String>>,
}

/// The folders discovery looks in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roots {
    /// Extra bundled folders (`$TROUPE_BUNDLED_PLUGINS`).
    pub bundled: Option<PathBuf>,
    /// The user's plugins.
    pub user: PathBuf,
    /// The project's plugins, when the switch is on.
    pub project: Option<PathBuf>,
    /// Project plugins exist but the switch is off (for a hint in listings).
    pub project_skipped: Option<PathBuf>,
}

impl Roots {
    /// The folders for this process: `home` is the troupe home, `cwd` the working directory;
    /// the project folder counts only when `TROUPE_ENABLE_PROJECT_PLUGINS` is truthy.
    pub fn from_env(home: &Path, cwd: &Path) -> Roots {
        let project = cwd.join(".troupe").join("plugins");
        let switched_on = std::env::var(PROJECT_SWITCH).is_ok_and(|v| truthy(&v));
        Roots {
            bundled: std::env::var_os(BUNDLED_DIR_VAR)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            user: home.join("plugins"),
            project_skipped: (!switched_on && project.is_dir()).then(|| project.clone()),
            project: switched_on.then_some(project),
        }
    }
}

/// `1`, `true`, `yes`, `on` (any case).
pub fn truthy(value: &str) -> bool {
    matches!(
        value.trim().to_ascii_lowercase().as_str(),
        "1" | "true" | "yes" | "on"
    )
}

/// Every plugin in `roots`, by name; on a clash the later source wins and lists the loser.
pub fn discover(roots: &Roots) -> Vec<Discovered> {
    let mut found: Vec<Discovered> = bundled::all()
        .into_iter()
        .map(|b| Discovered {
            name: b.name().to_string(),
            source: Source::Bundled,
            dir: None,
            manifest: Ok(b.manifest()),
            builtin: Some(b),
            hides: Vec::new(),
            dashboard: b.dashboard().map(Ok),
        })
        .collect();
    let folders = [
        (Source::Bundled, roots.bundled.as_deref()),
        (Source::User, Some(roots.user.as_path())),
        (Source::Project, roots.project.as_deref()),
    ];
    for (source, root) in folders {
        let Some(root) = root else { continue };
        for (name, dir) in plugin_folders(root) {
            // A folder with only a dashboard part is a plugin too, with nothing else to read.
            let manifest = if manifest::manifest_file(&dir).is_some() {
                manifest::load(&dir, &name)
            } else {
                Ok(Manifest {
                    name: name.clone(),
                    ..Manifest::default()
                })
            };
            let plugin = Discovered {
                name: name.clone(),
                source,
                dashboard: dashboard::load(&dir),
                dir: Some(dir),
                manifest,
                builtin: None,
                hides: Vec::new(),
            };
            match found.iter().position(|p| p.name == name) {
                Some(at) => {
                    let loser = std::mem::replace(&mut found[at], plugin);
                    let winner = &mut found[at];
                    winner.hides = loser.hides;
                    winner.hides.push(Hidden {
                        source: loser.source,
                        dir: loser.dir,
                    });
                }
                None => found.push(plugin),
            }
        }
    }
    found.sort_by(|a, b| a.name.cmp(&b.name));
    found
}

/// The plugin folders directly under `root` that hold a manifest (`plugin.yaml` or
/// `dashboard/manifest.json`), by name. Hidden folders,
/// `__x__` folders and unreadable ones are skipped.
fn plugin_folders(root: &Path) -> Vec<(String, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let Ok(name) = entry.file_name().into_string() else {
            tracing::warn!(path = %entry.path().display(), "skipping a plugin folder whose name is not UTF-8");
            continue;
        };
        if name.starts_with('.') || (name.starts_with("__") && name.ends_with("__")) {
            continue;
        }
        let dir = entry.path();
        if !dir.is_dir() {
            continue;
        }
        if manifest::manifest_file(&dir).is_none() && !dashboard::has_part(&dir) {
            tracing::debug!(dir = %dir.display(), "no plugin.yaml nor dashboard/manifest.json; not a plugin");
            continue;
        }
        out.push((name, dir));
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn a_dashboard_part_alone_makes_a_plugin_and_a_project_one_overrides() {
        let user = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        // Only a dashboard part, no plugin.yaml.
        write(
            &user.path().join("tab/dashboard/manifest.json"),
            r#"{"label": "Tab", "entry": "a.js"}"#,
        );
        write(
            &user.path().join("tab/dashboard/a.js"),
            "export function mount() {}",
        );
        // A project plugin of the same name, its manifest broken.
        write(&project.path().join("tab/dashboard/manifest.json"), "[1]");
        // Neither: not a plugin.
        std::fs::create_dir_all(user.path().join("empty")).unwrap();
        let roots = Roots {
            bundled: None,
            user: user.path().to_path_buf(),
            project: None,
            project_skipped: None,
        };
        let found = discover(&roots);
        let tab = found.iter().find(|p| p.name == "tab").unwrap();
        assert_eq!(tab.source, Source::User);
        assert!(tab.manifest.is_ok());
        assert_eq!(
            tab.dashboard.as_ref().unwrap().as_ref().unwrap().label,
            "Tab"
        );
        assert!(found.iter().all(|p| p.name != "empty"));
        let bundled = found.iter().find(|p| p.name == "achievements").unwrap();
        assert!(matches!(bundled.dashboard, Some(Ok(_))));

        let roots = Roots {
            project: Some(project.path().to_path_buf()),
            ..roots
        };
        let found = discover(&roots);
        let tab = found.iter().find(|p| p.name == "tab").unwrap();
        assert_eq!(tab.source, Source::Project);
        assert_eq!(tab.hides[0].source, Source::User);
        let problem = tab.dashboard.as_ref().unwrap().as_ref().unwrap_err();
        assert!(problem.contains("must be a JSON object"), "{problem}");
    }
}
