//! `troupe plugins list | info NAME | enable NAME | disable NAME`: what plugins were found
//! (bundled, user, project), which are on, what they provide, what is wrong with them; and
//! switching one on or off by editing `plugins.enabled` in troupe.yaml (nothing else in the
//! file changes).

use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::error::{CliError, EXIT_DONE, report};
use crate::plugins::{PluginCatalog, PluginInfo, enabled};
use crate::settings::Settings;

/// `troupe plugins`: the plugins troupe found and which are enabled.
#[derive(Debug, Args)]
pub(crate) struct PluginsArgs {
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: PluginsCommand,
}

/// The `troupe plugins` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum PluginsCommand {
    /// A table of every plugin found: name, source, enabled, what it provides, problems.
    List(ListArgs),
    /// Everything about one plugin.
    Info(NameArgs),
    /// Add a plugin to `plugins.enabled` in troupe.yaml.
    Enable(NameArgs),
    /// Remove a plugin from `plugins.enabled` in troupe.yaml.
    Disable(NameArgs),
}

/// Arguments of `troupe plugins list`.
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// The config file (default: ./troupe.yaml).
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Arguments naming one plugin.
#[derive(Debug, Args)]
pub(crate) struct NameArgs {
    /// The plugin's name.
    pub(crate) name: String,
    /// The config file (default: ./troupe.yaml).
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
    /// Print JSON (info only).
    #[arg(long)]
    pub(crate) json: bool,
}

/// Runs one `troupe plugins` command; returns the exit code.
pub(crate) async fn run(args: PluginsArgs) -> i32 {
    match args.command {
        PluginsCommand::List(args) => report("plugins list", list(args)),
        PluginsCommand::Info(args) => report("plugins info", info(args)),
        PluginsCommand::Enable(args) => report("plugins enable", switch(args, true)),
        PluginsCommand::Disable(args) => report("plugins disable", switch(args, false)),
    }
}

fn catalog(config: Option<&std::path::Path>) -> Result<PluginCatalog, CliError> {
    let config = Settings::load_or_default(config)?;
    PluginCatalog::load(&config).map_err(|e| CliError::usage(e.to_string()))
}

fn row(plugin: &PluginInfo) -> Value {
    json!({
        "name": plugin.name(),
        "source": plugin.found.source.as_str(),
        "dir": plugin.found.dir.as_ref().map(|d| d.display().to_string()),
        "enabled": plugin.enabled,
        "loaded": plugin.active(),
        "version": plugin.found.manifest.as_ref().ok().and_then(|m| m.version.clone()),
        "description": plugin.found.manifest.as_ref().ok().and_then(|m| m.description.clone()),
        "provides": plugin.provides(),
        "problems": plugin.problems,
        "dashboard": match &plugin.found.dashboard {
            None => Value::Null,
            Some(Ok(part)) => json!({
                "label": part.label,
                "entry": part.entry,
                "styles": part.styles,
                "routes": part.routes.iter().map(|r| format!("{} {}", r.method, r.path)).collect::<Vec<_>>(),
                "shown": plugin.tab().is_some(),
            }),
            Some(Err(problem)) => json!({"shown": false, "problem": problem}),
        },
        "hides": plugin.found.hides.iter().map(|h| json!({
            "source": h.source.as_str(),
            "dir": h.dir.as_ref().map(|d| d.display().to_string()),
        })).collect::<Vec<_>>(),
    })
}

fn list(args: ListArgs) -> Result<i32, CliError> {
    let catalog = catalog(args.config.as_deref())?;
    if args.json {
        let rows: Vec<Value> = catalog.plugins.iter().map(row).collect();
        println!(
            "{}",
            json!({
                "plugins": rows,
                "unknown_enabled": catalog.unknown_enabled,
                "project_plugins_skipped": catalog.roots.project_skipped.as_ref().map(|d| d.display().to_string()),
            })
        );
        return Ok(EXIT_DONE);
    }
    let headers = ["NAME", "SOURCE", "ENABLED", "PROVIDES", "PROBLEMS"];
    let rows: Vec<[String; 5]> = catalog
        .plugins
        .iter()
        .map(|p| {
            let enabled = match (p.enabled, p.active()) {
                (true, true) => "yes",
                (true, false) => "yes (not loaded)",
                (false, _) => "no",
            };
            let mut source = p.found.source.as_str().to_string();
            for hidden in &p.found.hides {
                source.push_str(&format!(" (hides {})", hidden.source.as_str()));
            }
            [
                p.name().to_string(),
                source,
                enabled.to_string(),
                join_or_dash(&p.provides()),
                join_or_dash(&p.problems),
            ]
        })
        .collect();
    let mut widths = headers.map(str::len);
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r.iter()).take(4) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 5]| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i < 4 {
                out.push_str(&format!("{cell:<width$}  ", width = widths[i]));
            } else {
                out.push_str(cell);
            }
        }
        out.trim_end().to_string()
    };
    println!("{}", line(headers));
    for r in &rows {
        println!(
            "{}",
            line([
                r[0].as_str(),
                r[1].as_str(),
                r[2].as_str(),
                r[3].as_str(),
                r[4].as_str()
            ])
        );
    }
    for p in &catalog.plugins {
        for hidden in &p.found.hides {
            println!(
                "note: {} plugin '{}' at {} is in force; it hides the {} one{}",
                p.found.source.as_str(),
                p.name(),
                p.found
                    .dir
                    .as_ref()
                    .map_or_else(|| "(compiled in)".to_string(), |d| d.display().to_string()),
                hidden.source.as_str(),
                hidden.dir.as_ref().map_or_else(
                    || " (compiled in)".to_string(),
                    |d| format!(" at {}", d.display())
                )
            );
        }
    }
    for name in &catalog.unknown_enabled {
        println!("note: plugins.enabled names '{name}', but no such plugin was found");
    }
    if let Some(dir) = &catalog.roots.project_skipped {
        println!(
            "note: project plugins in {} were not loaded; set TROUPE_ENABLE_PROJECT_PLUGINS=1 to use them (only in repositories you trust)",
            dir.display()
        );
    }
    Ok(EXIT_DONE)
}

fn join_or_dash(items: &[String]) -> String {
    if items.is_empty() {
        "-".into()
    } else {
        items.join("; ")
    }
}

fn info(args: NameArgs) -> Result<i32, CliError> {
    let catalog = catalog(args.config.as_deref())?;
    let Some(plugin) = catalog.get(&args.name) else {
        return Err(CliError::usage(format!(
            "no plugin named '{}'; `troupe plugins list` shows the ones found",
            args.name
        )));
    };
    let value = row(plugin);
    if args.json {
        println!("{value}");
        return Ok(EXIT_DONE);
    }
    println!("name:        {}", plugin.name());
    println!("source:      {}", plugin.found.source.as_str());
    if let Some(dir) = &plugin.found.dir {
        println!("folder:      {}", dir.display());
    }
    if let Some(version) = value["version"].as_str() {
        println!("version:     {version}");
    }
    if let Some(description) = value["description"].as_str() {
        println!("description: {description}");
    }
    println!("enabled:     {}", if plugin.enabled { "yes" } else { "no" });
    println!(
        "loaded:      {}",
        if plugin.active() { "yes" } else { "no" }
    );
    if let Ok(manifest) = &plugin.found.manifest {
        for (point, specs) in &manifest.hooks {
            for spec in specs {
                let only = if spec.tools.is_empty() {
                    String::new()
                } else {
                    format!(" (tools: {})", spec.tools.join(", "))
                };
                println!(
                    "hook:        {point}: {} (timeout {:.1} s){only}",
                    spec.command,
                    spec.timeout.as_secs_f64()
                );
            }
        }
        if let Some(server) = &manifest.mcp_server {
            println!(
                "toolset:     {} (MCP server: {} {})",
                manifest.name,
                server.command,
                server.args.join(" ")
            );
        }
        for (name, spec) in &manifest.commands {
            println!("command:     /{name}: {}", spec.command);
        }
        if !manifest.requires_env.is_empty() {
            println!("needs env:   {}", manifest.requires_env.join(", "));
        }
    }
    if plugin.found.builtin.is_none() {
        match &plugin.found.dashboard {
            Some(Ok(part)) => println!("dashboard:   {}", part.describe()),
            Some(Err(problem)) => println!("dashboard:   disabled: {problem}"),
            None => {}
        }
    }
    if plugin.found.builtin.is_some() {
        for line in plugin.provides() {
            println!("provides:    {line}");
        }
    }
    for hidden in &plugin.found.hides {
        println!(
            "hides:       the {} plugin{}",
            hidden.source.as_str(),
            hidden
                .dir
                .as_ref()
                .map_or_else(String::new, |d| format!(" at {}", d.display()))
        );
    }
    for problem in &plugin.problems {
        println!("problem:     {problem}");
    }
    Ok(EXIT_DONE)
}

fn switch(args: NameArgs, on: bool) -> Result<i32, CliError> {
    let path = args
        .config
        .clone()
        .unwrap_or_else(|| PathBuf::from(crate::settings::DEFAULT_CONFIG_FILE));
    if on {
        let catalog = catalog(path.is_file().then_some(path.as_path()))?;
        if catalog.get(&args.name).is_none() {
            return Err(CliError::usage(format!(
                "no plugin named '{}' was found (bundled, user or project); `troupe plugins list` shows the ones found",
                args.name
            )));
        }
    }
    match enabled::edit_file(&path, &args.name, on) {
        Ok(true) => {
            println!(
                "{} '{}' in {} (plugins.enabled).",
                if on { "Enabled" } else { "Disabled" },
                args.name,
                path.display()
            );
            Ok(EXIT_DONE)
        }
        Ok(false) => {
            println!(
                "'{}' was already {} in {}.",
                args.name,
                if on { "enabled" } else { "not enabled" },
                path.display()
            );
            Ok(EXIT_DONE)
        }
        Err(error) => Err(CliError::usage(error.to_string())),
    }
}
