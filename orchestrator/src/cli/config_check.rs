//! `troupe config check`: every problem of a config file at once, not only the first. The file
//! is read as every command reads it; then each group of sections that are read together is
//! checked on its own, so an error in one section does not hide the errors of the others.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use super::error::{CliError, EXIT_BAD_INPUT, EXIT_DONE};
use crate::settings::known_keys::{TOP, unknown_keys};
use crate::settings::{DEFAULT_CONFIG_FILE, Settings, parse_document};

/// Sections one reader reads together: checked as one document.
const TOGETHER: &[&[&str]] = &[
    &["kanban", "profiles", "sessions"],
    &["terminal", "code_execution", "execute_code"],
];

/// What the check found.
#[derive(Debug, Default)]
struct Found {
    errors: Vec<String>,
    warnings: Vec<String>,
}

impl Found {
    fn error(&mut self, text: String) {
        if !self.errors.contains(&text) {
            self.errors.push(text);
        }
    }

    fn warning(&mut self, text: String) {
        if !self.warnings.contains(&text) {
            self.warnings.push(text);
        }
    }
}

/// Runs the check; the exit code.
pub(crate) fn run(config: Option<PathBuf>, json_out: bool) -> Result<i32, CliError> {
    let path = config.unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG_FILE));
    if !path.is_file() {
        return Err(CliError::usage(format!(
            "{} does not exist; name the file to check: troupe config check --config FILE",
            path.display()
        )));
    }
    let found = check_file(&path);
    let ok = found.errors.is_empty() && found.warnings.is_empty();
    if json_out {
        println!(
            "{}",
            json!({"file": path.display().to_string(), "ok": ok, "errors": found.errors, "warnings": found.warnings})
        );
    } else if ok {
        println!("{}: no problems found", path.display());
    } else {
        let count = found.errors.len() + found.warnings.len();
        println!(
            "{}: {count} problem{}",
            path.display(),
            if count == 1 { "" } else { "s" }
        );
        for error in &found.errors {
            println!("  error: {error}");
        }
        for warning in &found.warnings {
            println!("  warning: {warning}");
        }
    }
    Ok(if ok { EXIT_DONE } else { EXIT_BAD_INPUT })
}

fn check_file(path: &Path) -> Found {
    let mut found = Found::default();
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) => {
            found.error(format!("cannot read {}: {error}", path.display()));
            return found;
        }
    };
    let raw = match parse_document(&text) {
        Ok(raw) => raw,
        Err(error) => {
            found.error(format!(
                "{} is not valid YAML or JSON: {}",
                path.display(),
                error
                    .to_string()
                    .trim_start_matches("config file  is not valid YAML or JSON: ")
            ));
            return found;
        }
    };
    for unknown in unknown_keys(&raw, &TOP) {
        found.warning(unknown.to_string());
    }
    let Value::Object(root) = &raw else {
        if let Err(error) = Settings::check(raw.clone(), Some(path)) {
            found.error(error.to_string());
        }
        return found;
    };
    // One document per group of sections, so each group's first error is seen.
    let mut groups: Vec<Vec<&str>> = Vec::new();
    for key in root.keys() {
        let group = TOGETHER
            .iter()
            .find(|g| g.contains(&key.as_str()))
            .map_or_else(|| vec![key.as_str()], |g| g.to_vec());
        if !groups.contains(&group) {
            groups.push(group);
        }
    }
    for group in groups {
        let part: Map<String, Value> = group
            .iter()
            .filter_map(|name| root.get(*name).map(|v| (name.to_string(), v.clone())))
            .collect();
        match Settings::check(Value::Object(part), Some(path)) {
            Ok(settings) => {
                for warning in settings.warnings {
                    found.warning(warning);
                }
            }
            Err(error) => found.error(error.to_string()),
        }
    }
    found
}
