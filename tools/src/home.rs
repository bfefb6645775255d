//! troupe's home directory, resolved once (placeholder until the tools helper's version lands).

use std::path::{Path, PathBuf};

/// troupe's home: `TROUPE_HOME`, else `~/.troupe`, else `troupe` under the temporary directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TroupeHome(PathBuf);

impl TroupeHome {
    /// Resolves it from the environment.
    pub fn from_env() -> TroupeHome {
        TroupeHome(
            std::env::var_os("TROUPE_HOME")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".troupe")))
                .unwrap_or_else(|| std::env::temp_dir().join("troupe")),
        )
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.0
    }
}
