//! `tools.tool_search`: the tools crate reads the settings it owns ([`ToolSearchConfig::from_raw`]);
//! this file adds what needs the config file's folder, the phrasings file.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use troupe_tools::home::TroupeHome;
use troupe_tools::search::phrasings::Phrasings;
use troupe_tools::text::yaml_kind;
use troupe_tools::{Ranking, ToolSearchConfig};

use super::keys::{ConfigError, invalid};

const PHRASINGS_KEY: &str = "tools.tool_search.phrasings";

/// The tool-search settings of `section` (`tools.tool_search`, null when absent), with the
/// phrasings file read. A file that does not exist yet is a warning (its writer,
/// `troupe tools phrasings`, reads this same config); one that cannot be read is an error.
pub(super) fn tool_search_section(
    section: &Value,
    base: &Path,
    home: &TroupeHome,
    warnings: &mut Vec<String>,
) -> Result<ToolSearchConfig, ConfigError> {
    let config = ToolSearchConfig::from_raw(section).with_home(home.clone());
    let Some(path) = phrasings_path(section, base)? else {
        return Ok(config);
    };
    // Only the hybrid ranking reads them.
    if config.ranking != Ranking::Hybrid {
        return Ok(config);
    }
    if !path.exists() {
        warnings.push(format!(
            "`{PHRASINGS_KEY}` names {}, which does not exist yet: tool search runs without \
             phrasings. Write it with `troupe tools phrasings --config <this file>`",
            path.display()
        ));
        return Ok(config);
    }
    let phrasings = Phrasings::read(&path).map_err(|e| {
        invalid(
            PHRASINGS_KEY,
            format!("{e}. Fix or delete the file; `troupe tools phrasings` writes a valid one"),
        )
    })?;
    Ok(config.with_phrasings(Some(Arc::new(phrasings))))
}

/// Where `tools.tool_search.phrasings` points, resolved against the config file's folder;
/// `None` when the key is absent or null.
pub(crate) fn phrasings_path(section: &Value, base: &Path) -> Result<Option<PathBuf>, ConfigError> {
    match section.get("phrasings") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(p)) if !p.trim().is_empty() => Ok(Some(base.join(p.trim()))),
        Some(other) => Err(invalid(
            PHRASINGS_KEY,
            format!(
                "expected the path of a phrasings file (\"phrasings.json\"), found {}",
                yaml_kind(other)
            ),
        )),
    }
}
