//! Plugins: found in bundled → user → project folders ([`discovery`]), described by a
//! `plugin.yaml` ([`manifest`]), off until listed in `plugins.enabled` ([`enabled`]). An
//! enabled plugin adds hooks (commands over JSON, [`command_hook`]), a toolset (an MCP server
//! named in its manifest, under the plugin's name) and slash commands ([`slash`]). troupe.yaml's
//! `hooks:` section adds the same hook commands without a plugin folder. The bundled
//! [`disk_cleanup`] plugin and the Langfuse exporter ([`crate::observability::langfuse`]) are
//! compiled in ([`bundled`]).
//!
//! Every program a plugin or a hook runs gets only the basic variables (`PATH`, `HOME`,
//! `USER`, `LOGNAME`, `LANG`, `LC_*`, `TERM`, `TZ`, `TMPDIR`, `SHELL`), the names a plugin's
//! `requires_env` lists, the names a hook or command entry's own `env_passthrough` lists, and
//! the `TROUPE_*` variables describing the call; never troupe's keys
//! ([`crate::settings::secrets`]).
//!
//! [`PluginCatalog`] is what was found and what is switched on (for `troupe plugins`);
//! [`Plugins`] is the running part: it hands the runtime ([`crate::runtime`]) its hooks, board
//! hooks and toolsets for every session and worker ([`Plugins::contribution`]), and the chat
//! and HTTP doors ask it for slash commands.

pub mod achievements;
pub mod bundled;
pub mod command_hook;
pub mod dashboard;
pub mod discovery;
pub mod disk_cleanup;
pub mod enabled;
pub mod manifest;
pub mod slash;
pub mod toolset;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use troupe_actors::hooks::Hook;
use troupe_kanban::hooks::KanbanHook;
use troupe_tools::builtin::sandbox_env::ChildSecrets;
use troupe_tools::mcp::{McpServerConfig, McpTransport};

use crate::settings::{ConfigError, Settings};
use crate::tool_source::ToolSource;
use bundled::Builtin;
use command_hook::{CommandHooks, Observers};
use discovery::{Discovered, Roots};
use disk_cleanup::DiskCleanup;
use enabled::Enablement;
use slash::{Handler, SlashCommand, SlashCommands};

/// The owner name of hooks written in troupe.yaml's `hooks:` section.
pub const CONFIG_HOOKS_OWNER: &str = "troupe.yaml";

/// One plugin as found, with whether it is switched on and what stops it.
#[derive(Debug, Clone)]
pub struct PluginInfo {
    /// Where and how it was found.
    pub found: Discovered,
    /// Listed in `plugins.enabled` (and not in `plugins.disabled`).
    pub enabled: bool,
    /// What keeps it from loading (a broken manifest, a missing variable).
    pub problems: Vec<String>,
    /// Listed in `plugins.disabled`: its dashboard tab is off too.
    pub disabled: bool,
}

impl PluginInfo {
    /// Its name.
    pub fn name(&self) -> &str {
        &self.found.name
    }

    /// Enabled and without problems: it loads.
    pub fn active(&self) -> bool {
        self.enabled && self.problems.is_empty()
    }

    /// What it provides, in words.
    pub fn provides(&self) -> Vec<String> {
        let mut out = match (&self.found.builtin, &self.found.manifest) {
            (Some(builtin), _) => builtin.provides(),
            (None, Ok(manifest)) => manifest.provides(),
            (None, Err(_)) => Vec::new(),
        };
        match &self.found.dashboard {
            Some(Ok(part)) if self.disabled => {
                out.push(format!("{} (off: in plugins.disabled)", part.describe()));
            }
            Some(Ok(part)) => out.push(part.describe()),
            Some(Err(problem)) => out.push(format!("dashboard tab: disabled: {problem}")),
            None => {}
        }
        out
    }

    /// Its dashboard tab when it is shown: the plugin has a sound dashboard part and is not in
    /// `plugins.disabled`. Tabs need no `plugins.enabled` entry (they run nothing until asked,
    /// and only behind the server's credential).
    pub fn tab(&self) -> Option<&dashboard::DashboardPart> {
        match &self.found.dashboard {
            Some(Ok(part)) if !self.disabled => Some(part),
            _ => None,
        }
    }
}

/// What the plugins contribute to a runtime ([`Plugins::contribution`]).
pub struct Contribution {
    /// Hooks every session and worker runs.
    pub hooks: Vec<Arc<dyn Hook>>,
    /// Hooks on board events.
    pub kanban_hooks: Vec<Arc<dyn KanbanHook>>,
    /// Toolsets started with the runtime (the plugins' MCP servers).
    pub tool_sources: Vec<Arc<dyn ToolSource>>,
}

/// Every plugin found, and which are on.
#[derive(Debug, Clone)]
pub struct PluginCatalog {
    /// The plugins, by name.
    pub plugins: Vec<PluginInfo>,
    /// Names in `plugins.enabled` that no plugin carries.
    pub unknown_enabled: Vec<String>,
    /// The folders searched.
    pub roots: Roots,
    /// The troupe home (plugin state lives under it).
    pub home: PathBuf,
}

impl PluginCatalog {
    /// Discovers plugins for this process (troupe home from `TROUPE_HOME`, project folder
    /// from the working directory) and applies `config`'s `plugins` section.
    pub fn load(config: &Settings) -> Result<PluginCatalog, ConfigError> {
        let home = config.home.path().to_path_buf();
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
        let roots = Roots::from_env(&home, &cwd);
        Ok(PluginCatalog::with(roots, &config.plugins, home))
    }

    /// Discovers plugins in `roots` and applies `enablement`.
    pub fn with(roots: Roots, enablement: &Enablement, home: PathBuf) -> PluginCatalog {
        let plugins: Vec<PluginInfo> = discovery::discover(&roots)
            .into_iter()
            .map(|found| {
                let mut problems = found.builtin.map(Builtin::problems).unwrap_or_default();
                match &found.manifest {
                    Ok(manifest) => {
                        let missing = manifest.missing_env();
                        if !missing.is_empty() {
                            problems.push(format!(
                                "needs the environment variable(s) {} to be set",
                                missing.join(", ")
                            ));
                        }
                    }
                    Err(error) => problems.push(error.to_string()),
                }
                PluginInfo {
                    enabled: enablement.is_enabled(&found.name),
                    disabled: enablement.disabled.iter().any(|n| n == &found.name),
                    found,
                    problems,
                }
            })
            .collect();
        let unknown_enabled = enablement
            .enabled
            .iter()
            .filter(|name| !plugins.iter().any(|p| p.name() == name.as_str()))
            .cloned()
            .collect();
        PluginCatalog {
            plugins,
            unknown_enabled,
            roots,
            home,
        }
    }

    /// The plugin called `name`.
    pub fn get(&self, name: &str) -> Option<&PluginInfo> {
        self.plugins.iter().find(|p| p.name() == name)
    }

    /// Lines to warn about at start-up: enabled plugins that cannot load, unknown names.
    pub fn warnings(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .plugins
            .iter()
            .filter(|p| p.enabled && !p.problems.is_empty())
            .map(|p| {
                format!(
                    "plugin '{}' is enabled but not loaded: {}",
                    p.name(),
                    p.problems.join("; ")
                )
            })
            .collect();
        for name in &self.unknown_enabled {
            out.push(format!(
                "plugins.enabled names '{name}', but no such plugin was found (see `troupe plugins list`)"
            ));
        }
        out
    }
}

/// The running plugins: hooks for sessions and boards, MCP servers for the registry, slash
/// commands for the chat and HTTP doors. Cheap to clone.
#[derive(Clone)]
pub struct Plugins {
    catalog: Arc<PluginCatalog>,
    hooks: Vec<Arc<dyn Hook>>,
    kanban: Vec<Arc<dyn KanbanHook>>,
    commands: SlashCommands,
    observers: Observers,
    servers: Vec<McpServerConfig>,
    /// Where the Langfuse plugin sends traces, when it is active.
    traces: Option<crate::observability::ExportTarget>,
    /// troupe's keys, withheld from the plugins' MCP servers.
    secrets: ChildSecrets,
}

/// `spec` as it runs: with `passthrough` added to its own list, and `secrets` withheld.
pub(crate) fn spec_withholding(
    mut spec: manifest::CommandSpec,
    passthrough: &[String],
    secrets: &ChildSecrets,
) -> manifest::CommandSpec {
    for name in passthrough {
        if !spec.env_passthrough.contains(name) {
            spec.env_passthrough.push(name.clone());
        }
    }
    spec.secrets = secrets.clone();
    spec
}

/// [`spec_withholding`] for every command of a hook table.
fn withholding(
    table: std::collections::BTreeMap<String, Vec<manifest::CommandSpec>>,
    passthrough: &[String],
    secrets: &ChildSecrets,
) -> std::collections::BTreeMap<String, Vec<manifest::CommandSpec>> {
    table
        .into_iter()
        .map(|(point, specs)| {
            let specs = specs
                .into_iter()
                .map(|spec| spec_withholding(spec, passthrough, secrets))
                .collect();
            (point, specs)
        })
        .collect()
}

impl std::fmt::Debug for Plugins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugins")
            .field("active", &self.active_names())
            .field("hooks", &self.hooks.len())
            .field("commands", &self.commands.names())
            .finish_non_exhaustive()
    }
}

impl Plugins {
    /// No plugins and no hooks.
    pub fn none() -> Plugins {
        Plugins {
            catalog: Arc::new(PluginCatalog {
                plugins: Vec::new(),
                unknown_enabled: Vec::new(),
                roots: Roots {
                    bundled: None,
                    user: PathBuf::new(),
                    project: None,
                    project_skipped: None,
                },
                home: PathBuf::new(),
            }),
            hooks: Vec::new(),
            kanban: Vec::new(),
            commands: SlashCommands::default(),
            observers: Observers::new(),
            servers: Vec::new(),
            traces: None,
            secrets: ChildSecrets::default(),
        }
    }

    /// Loads the plugins and the `hooks:` section of `config`. A broken plugin only disables
    /// itself (see [`PluginCatalog::warnings`]); a broken `hooks:` section is an error, since a
    /// safety hook silently left out would fail open. Every program the plugins run is kept
    /// from `secrets`, troupe's keys.
    pub fn from_config(config: &Settings, secrets: &ChildSecrets) -> Result<Plugins, ConfigError> {
        let catalog = PluginCatalog::load(config)?;
        Ok(Plugins::build(catalog, config.hooks.clone(), secrets))
    }

    /// The running part of `catalog`, plus `config_hooks` (troupe.yaml's `hooks:`). Every
    /// program they run gets the minimal environment without `secrets`; a plugin's programs
    /// also get the variables its `requires_env` names.
    pub fn build(
        catalog: PluginCatalog,
        config_hooks: std::collections::BTreeMap<String, Vec<manifest::CommandSpec>>,
        secrets: &ChildSecrets,
    ) -> Plugins {
        let config_hooks = withholding(config_hooks, &[], secrets);
        let observers = Observers::new();
        let mut hooks: Vec<Arc<dyn Hook>> = Vec::new();
        let mut kanban: Vec<Arc<dyn KanbanHook>> = Vec::new();
        let mut commands: Vec<(String, SlashCommand)> = Vec::new();
        let mut servers = Vec::new();
        let mut traces = None;
        if !config_hooks.is_empty() {
            let config = Arc::new(CommandHooks::new(
                CONFIG_HOOKS_OWNER,
                config_hooks,
                observers.clone(),
            ));
            hooks.push(config.clone());
            kanban.push(config);
        }
        for plugin in catalog.plugins.iter().filter(|p| p.active()) {
            let name = plugin.name().to_string();
            if let Some(builtin) = plugin.found.builtin {
                match builtin {
                    Builtin::DiskCleanup => {
                        let cleanup = Arc::new(DiskCleanup::new(&catalog.home));
                        hooks.push(cleanup.clone());
                        commands.push((
                            "disk-cleanup".into(),
                            SlashCommand {
                                owner: name.clone(),
                                description: "status | dry-run | quick | deep [--yes] | track <path> <category> | forget <path>".into(),
                                handler: Handler::DiskCleanup(cleanup),
                            },
                        ));
                    }
                    Builtin::Langfuse => traces = crate::observability::langfuse::target().ok(),
                    // Its tab is served by the HTTP server ([`crate::http::plugin_tabs`]).
                    Builtin::Achievements => {}
                }
                continue;
            }
            let Ok(manifest) = &plugin.found.manifest else {
                continue;
            };
            if !manifest.hooks.is_empty() {
                let owned = Arc::new(CommandHooks::new(
                    name.clone(),
                    withholding(manifest.hooks.clone(), &manifest.requires_env, secrets),
                    observers.clone(),
                ));
                hooks.push(owned.clone());
                kanban.push(owned);
            }
            for (command, spec) in &manifest.commands {
                commands.push((
                    command.clone(),
                    SlashCommand {
                        owner: name.clone(),
                        description: spec
                            .description
                            .clone()
                            .unwrap_or_else(|| format!("from the {name} plugin")),
                        handler: Handler::Program(spec_withholding(
                            spec.clone(),
                            &manifest.requires_env,
                            secrets,
                        )),
                    },
                ));
            }
            if let Some(server) = &manifest.mcp_server {
                let mut config =
                    McpServerConfig::stdio(&name, &server.command, server.args.clone())
                        .with_toolset_name(&name)
                        .with_env_passthrough(manifest.requires_env.clone());
                for (key, value) in &server.env {
                    config = config.with_env(key, value);
                }
                if let McpTransport::Stdio { cwd, .. } = &mut config.transport {
                    *cwd = Some(server.dir.clone());
                }
                servers.push(config);
            }
        }
        Plugins {
            catalog: Arc::new(catalog),
            hooks,
            kanban,
            commands: SlashCommands::new(commands),
            observers,
            servers,
            traces,
            secrets: secrets.clone(),
        }
    }

    /// troupe's keys, which no plugin program gets.
    pub fn secrets(&self) -> &ChildSecrets {
        &self.secrets
    }

    /// What was found and what is on.
    pub fn catalog(&self) -> &PluginCatalog {
        &self.catalog
    }

    /// The names of the plugins that loaded.
    pub fn active_names(&self) -> Vec<String> {
        self.catalog
            .plugins
            .iter()
            .filter(|p| p.active())
            .map(|p| p.name().to_string())
            .collect()
    }

    /// The board observers (`on_task_claimed`, `on_task_completed`, `on_task_blocked`).
    pub fn kanban_hooks(&self) -> Vec<Arc<dyn KanbanHook>> {
        self.kanban.clone()
    }

    /// The slash commands.
    pub fn commands(&self) -> &SlashCommands {
        &self.commands
    }

    /// The observer hooks still running; wait on it before the process exits.
    pub fn observers(&self) -> &Observers {
        &self.observers
    }

    /// Waits (at most `limit`) for observer hooks still running, so their work is not cut off
    /// when the program exits.
    pub async fn drain(&self, limit: Duration) -> bool {
        self.observers.drain(limit).await
    }

    /// What the plugins add to every entry point: their session hooks, board hooks and
    /// toolsets. The runtime merges it into what the program asked for.
    pub fn contribution(&self) -> Contribution {
        Contribution {
            hooks: self.hooks.clone(),
            kanban_hooks: self.kanban.clone(),
            tool_sources: self
                .servers
                .iter()
                .map(|server| {
                    Arc::new(toolset::PluginToolset::new(
                        server.clone(),
                        self.secrets.clone(),
                    )) as Arc<dyn ToolSource>
                })
                .collect(),
        }
    }

    /// The plugins' MCP servers.
    pub fn mcp_servers(&self) -> &[McpServerConfig] {
        &self.servers
    }

    /// Where an active plugin sends traces (the bundled Langfuse plugin).
    pub fn trace_target(&self) -> Option<&crate::observability::ExportTarget> {
        self.traces.as_ref()
    }
}
