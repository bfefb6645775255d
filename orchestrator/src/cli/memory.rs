//! `troupe memory show|edit|clear [--profile P]`: what the `memory` tool saved for a profile
//! (the default stores without `--profile`), read and changed by a person. `edit` opens the
//! store's file in `$VISUAL`/`$EDITOR` on a copy and saves it back only when every entry
//! passes the tool's own checks and the store stays within its budget.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use serde_json::json;
use troupe_tools::memory::{MemoryStore, Target};

use super::error::{CliError, EXIT_DONE, report};
use crate::settings::Settings;

/// `troupe memory`.
#[derive(Debug, Args)]
pub(crate) struct MemoryArgs {
    /// The config file (it names the profiles and troupe's home).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// The profile whose stores to use (the default ones when left out).
    #[arg(long, global = true)]
    profile: Option<String>,
    /// Print JSON.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: MemoryCommand,
}

/// Which store a command works on.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum Which {
    /// The agent's notes on the environment and conventions.
    Memory,
    /// The person's preferences.
    User,
}

impl From<Which> for Target {
    fn from(w: Which) -> Target {
        match w {
            Which::Memory => Target::Memory,
            Which::User => Target::User,
        }
    }
}

#[derive(Debug, Subcommand)]
enum MemoryCommand {
    /// Both stores (or one), their entries and how full each is.
    Show {
        /// Only this store.
        #[arg(long, value_enum)]
        target: Option<Which>,
    },
    /// Opens a store in $VISUAL or $EDITOR (entries end at a line holding only §).
    Edit {
        /// The store to edit.
        #[arg(long, value_enum, default_value = "memory")]
        target: Which,
    },
    /// Empties both stores (or one).
    Clear {
        /// Only this store.
        #[arg(long, value_enum)]
        target: Option<Which>,
    },
}

/// Runs `troupe memory`; returns the exit code.
pub(crate) async fn run(args: MemoryArgs) -> i32 {
    report("memory", run_inner(args).await)
}

async fn run_inner(args: MemoryArgs) -> Result<i32, CliError> {
    let config = Settings::load_or_default(args.config.as_deref())?;
    if let Some(profile) = &args.profile
        && !config.kanban.profiles.contains_key(profile)
    {
        let mut known: Vec<&str> = config.kanban.profiles.keys().map(String::as_str).collect();
        known.sort_unstable();
        return Err(CliError::usage(format!(
            "there is no profile {profile:?} under profiles: in troupe.yaml (known: {}); leave out --profile for the default stores",
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        )));
    }
    let store = MemoryStore::in_home(&config.home, args.profile.as_deref());
    let failed = |e: std::io::Error| {
        CliError::failed(format!(
            "could not use the memory stores in {}: {e}",
            store.dir().display()
        ))
    };
    match args.command {
        MemoryCommand::Show { target } => {
            let targets: Vec<Target> = match target {
                Some(t) => vec![t.into()],
                None => Target::ALL.to_vec(),
            };
            let mut shown = Vec::new();
            for t in targets {
                let entries = store.entries(t).map_err(failed)?;
                shown.push((t, entries));
            }
            if args.json {
                let value: Vec<_> = shown
                    .iter()
                    .map(|(t, entries)| {
                        json!({
                            "target": t.as_str(),
                            "file": store.file(*t),
                            "entries": entries,
                            "budget_chars": store.budget(*t),
                        })
                    })
                    .collect();
                println!("{}", json!(value));
            } else {
                for (t, entries) in &shown {
                    let used: usize = entries.iter().map(|e| e.chars().count()).sum::<usize>()
                        + 3 * entries.len().saturating_sub(1);
                    println!(
                        "{} ({} entries, {used} of {} characters) {}",
                        t.as_str(),
                        entries.len(),
                        store.budget(*t),
                        store.file(*t).display()
                    );
                    for entry in entries {
                        let mut lines = entry.lines();
                        if let Some(first) = lines.next() {
                            println!("  - {first}");
                        }
                        for line in lines {
                            println!("    {line}");
                        }
                    }
                }
            }
            Ok(EXIT_DONE)
        }
        MemoryCommand::Clear { target } => {
            store.clear(target.map(Target::from)).map_err(failed)?;
            match target {
                Some(t) => eprintln!(
                    "troupe memory: the {} store is empty",
                    Target::from(t).as_str()
                ),
                None => eprintln!("troupe memory: both stores are empty"),
            }
            Ok(EXIT_DONE)
        }
        MemoryCommand::Edit { target } => {
            let target = Target::from(target);
            let editor = std::env::var("VISUAL")
                .ok()
                .filter(|v| !v.trim().is_empty())
                .or_else(|| std::env::var("EDITOR").ok().filter(|v| !v.trim().is_empty()))
                .ok_or_else(|| {
                    CliError::usage(
                        "set $VISUAL or $EDITOR to the editor to use (EDITOR=nano troupe memory edit)",
                    )
                })?;
            let current = store.entries(target).map_err(failed)?.join("\n§\n");
            // The copy sits beside the store (the home is private to its owner), removed after.
            std::fs::create_dir_all(store.dir()).map_err(failed)?;
            let scratch = Scratch(store.dir().join(format!(
                ".edit-{}-{}.md",
                target.as_str(),
                std::process::id()
            )));
            std::fs::write(scratch.path(), &current)
                .map_err(|e| CliError::failed(format!("could not write the scratch file: {e}")))?;
            // The editor is a shell word list, as git reads $EDITOR ("code --wait").
            let status = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("{editor} \"$1\""))
                .arg("sh")
                .arg(scratch.path())
                .status()
                .map_err(|e| CliError::failed(format!("could not start the editor: {e}")))?;
            if !status.success() {
                return Err(CliError::failed(format!(
                    "the editor exited with {status}; the store was left as it was"
                )));
            }
            let edited = std::fs::read_to_string(scratch.path())
                .map_err(|e| CliError::failed(format!("could not read the edit back: {e}")))?;
            let applied = store
                .replace_all(target, &edited)
                .map_err(|e| CliError::usage(format!("{e} The store was left as it was.")))?;
            eprintln!(
                "troupe memory: saved the {} store ({} entries, {} of {} characters)",
                target.as_str(),
                applied.entries,
                applied.used,
                applied.budget
            );
            Ok(EXIT_DONE)
        }
    }
}

/// The copy a person edits, removed when the command ends whatever happened.
struct Scratch(PathBuf);

impl Scratch {
    fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
