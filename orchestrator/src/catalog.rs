//! Catalogs of tool definitions for the command line: the bundled 3,309-tool demo catalog (3,300
//! Cloudflare-like tools on one MCP server and 9 on three small ones) and catalog files.

use std::path::Path;
use std::sync::Arc;

use troupe_tools::Registry;
use troupe_tools::catalog_file::parse_catalog;

/// The bundled demo catalog, as JSON text.
pub(crate) const BUNDLED_CATALOG_JSON: &str = include_str!("../data/catalog_3309.json");

/// Why a catalog could not be loaded.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CatalogError {
    /// The file could not be read.
    #[error("cannot read catalog {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is larger or nested deeper than troupe reads (checked before parsing).
    #[error("catalog {0}")]
    TooLarge(troupe_tools::input_limits::InputTooLarge),
    /// The file is not JSON.
    #[error("catalog {path} is not valid JSON: {source}")]
    Json {
        /// The file.
        path: String,
        /// The parser error.
        source: serde_json::Error,
    },
    /// An entry is not a usable tool definition.
    #[error("catalog {path}: {source}")]
    Entry {
        /// The file.
        path: String,
        /// What is wrong with which entry.
        source: troupe_tools::ToolsError,
    },
}

/// A registry holding the tools of a catalog file, in file order.
pub(crate) fn load_catalog_file(path: &Path) -> Result<Arc<Registry>, CatalogError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| CatalogError::Read {
        path: shown.clone(),
        source,
    })?;
    registry_from_json(&text, &shown)
}

/// A registry holding the bundled demo catalog.
pub(crate) fn bundled_catalog() -> Result<Arc<Registry>, CatalogError> {
    registry_from_json(BUNDLED_CATALOG_JSON, "(bundled)")
}

fn registry_from_json(text: &str, shown: &str) -> Result<Arc<Registry>, CatalogError> {
    troupe_tools::input_limits::check_config_text(text, shown).map_err(CatalogError::TooLarge)?;
    let json: serde_json::Value =
        serde_json::from_str(text).map_err(|source| CatalogError::Json {
            path: shown.to_string(),
            source,
        })?;
    let defs = parse_catalog(&json).map_err(|source| CatalogError::Entry {
        path: shown.to_string(),
        source,
    })?;
    Ok(Registry::with_tools(defs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_catalog_loads() {
        let registry = bundled_catalog().unwrap();
        assert_eq!(registry.len(), 3309);
    }
}
