//! `troupe config`: what a person says about troupe's own config files. `trust` accepts a file
//! that a session changed (see [`crate::config_seal`]), after the person has read it.

use std::path::PathBuf;

use clap::Subcommand;

use super::error::{CliError, EXIT_DONE, report};
use crate::settings::DEFAULT_CONFIG_FILE;

/// The `troupe config` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum ConfigCommand {
    /// Accept a config file (or a hook's script) that was changed while a session could write
    /// it; troupe refuses to use it until then. Read the file first.
    Trust {
        /// The file (default: ./troupe.yaml).
        #[arg(value_name = "FILE")]
        file: Option<PathBuf>,
    },
    /// Check a config file and list every problem: wrong values (errors, with the values
    /// allowed), keys troupe does not read (with the closest known key), an `api_key_env` that
    /// is not set. Exit code 0 when there is none, 2 when there are.
    Check {
        /// The file (default: ./troupe.yaml).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Print one JSON object: {file, ok, errors, warnings}.
        #[arg(long)]
        json: bool,
    },
    /// Print the reference of every troupe.yaml key (type, default, meaning) as markdown
    /// tables, generated from the settings layer; `--update FILE` rewrites the generated
    /// tables inside FILE (docs/config.md) and keeps the prose around them.
    Reference {
        /// Rewrite the generated blocks of this page instead of printing.
        #[arg(long, value_name = "FILE")]
        update: Option<PathBuf>,
    },
}

/// Runs `troupe config`; returns the exit code.
pub(crate) fn run(command: ConfigCommand) -> i32 {
    report("config", run_inner(command))
}

fn run_inner(command: ConfigCommand) -> Result<i32, CliError> {
    match command {
        ConfigCommand::Check { config, json } => super::config_check::run(config, json),
        ConfigCommand::Reference { update } => reference(update),
        ConfigCommand::Trust { file } => {
            let file = file.unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG_FILE));
            if !file.exists() {
                return Err(CliError::usage(format!(
                    "{} does not exist; name the config file to accept: troupe config trust FILE",
                    file.display()
                )));
            }
            let home = crate::settings::TroupeHome::from_env().path().to_path_buf();
            let removed = crate::config_seal::trust(&home, &file).map_err(|e| {
                CliError::usage(format!(
                    "cannot update troupe's record of config changes under {}: {e}",
                    home.display()
                ))
            })?;
            if removed {
                eprintln!(
                    "troupe config: {} accepted as it is now; troupe uses it from the next start",
                    file.display()
                );
            } else {
                eprintln!(
                    "troupe config: {} had no change waiting for a yes; nothing to do",
                    file.display()
                );
            }
            Ok(EXIT_DONE)
        }
    }
}

/// `troupe config reference [--update FILE]`.
fn reference(update: Option<PathBuf>) -> Result<i32, CliError> {
    use crate::settings::reference;
    let Some(file) = update else {
        // Written, not print!ed: a closed pipe (`| head`) ends the output, not the process.
        let text = reference::markdown();
        return match std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes()) {
            Ok(()) => Ok(EXIT_DONE),
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(EXIT_DONE),
            Err(e) => Err(CliError::failed(format!("cannot write the reference: {e}"))),
        };
    };
    let doc = std::fs::read_to_string(&file).map_err(|e| {
        CliError::usage(format!(
            "cannot read {}: {e}; name the page holding the generated tables (docs/config.md)",
            file.display()
        ))
    })?;
    let updated =
        reference::update(&doc).map_err(|e| CliError::usage(format!("{}: {e}", file.display())))?;
    if updated == doc {
        eprintln!("troupe config: {} is up to date", file.display());
        return Ok(EXIT_DONE);
    }
    std::fs::write(&file, updated)
        .map_err(|e| CliError::failed(format!("cannot write {}: {e}", file.display())))?;
    eprintln!(
        "troupe config: rewrote the generated tables of {}",
        file.display()
    );
    Ok(EXIT_DONE)
}
