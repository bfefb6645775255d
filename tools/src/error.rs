//! Errors of the tool layer that Rust callers match on. What the model sees is never one of
//! these: the bridge turns bad model input into `{"error": ...}` result values.

/// An error building views or loading catalogs.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ToolsError {
    /// Composite toolsets include each other in a loop.
    #[error("toolset definitions form a cycle: {path}; remove one of these includes")]
    ToolsetCycle {
        /// The loop, as `a -> b -> a`.
        path: String,
    },
    /// A catalog file could not be used.
    #[error("catalog entry {index}: {reason}")]
    BadCatalogEntry {
        /// The entry's position in the file.
        index: usize,
        /// What was wrong and what to send instead.
        reason: String,
    },
}
