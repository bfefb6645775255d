//! What `tool_calls: auto` learned about a server and model: that it needed text tool calls.
//! Without a memory every new session (every `troupe chat`, every board worker's task) starts
//! native again, pays two refused answers before it switches, and stays native where the first
//! answer happens to parse, with a model that does better in text. Once one session of a
//! process switched, the others start in text; with a file (troupe keeps it at
//! `$TROUPE_HOME/state/tool_calls.json`), later processes do too.
//!
//! The file is a JSON object keyed by `"<endpoint> <model>"`, each value saying when and why.
//! The model is the one the server says it serves (the only model its `/models` lists), else the
//! name sessions ask for: a server that serves one model whatever name is sent keeps its entry
//! when the configured name changes.
//! Deleting it, or an entry of it, forgets; `tool_calls: native` ignores it.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// One remembered switch.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Remembered {
    /// When it was learned, seconds since the Unix epoch.
    pub(crate) since: u64,
    /// Why the session switched.
    pub(crate) reason: String,
}

/// One provider's memory (one endpoint, any model it serves).
#[derive(Debug)]
pub(crate) struct ModeMemory {
    /// The file shared by every provider, when there is one.
    path: Option<PathBuf>,
    /// The endpoint, the first half of every key.
    endpoint: String,
    /// The models of this endpoint known to need text tool calls (read from the file at
    /// start, added to as sessions switch).
    text: Mutex<BTreeSet<String>>,
}

impl ModeMemory {
    /// The memory of `endpoint`, read from `path` when given. A file that cannot be read or
    /// parsed is treated as empty (and logged): it only saves time.
    pub(crate) fn load(path: Option<PathBuf>, endpoint: &str) -> Self {
        let prefix = format!("{endpoint} ");
        let text = path
            .as_deref()
            .map(read_entries)
            .unwrap_or_default()
            .into_keys()
            .filter_map(|key| key.strip_prefix(&prefix).map(str::to_string))
            .collect();
        ModeMemory {
            path,
            endpoint: endpoint.to_string(),
            text: Mutex::new(text),
        }
    }

    /// Whether sessions with `model` (the name the server reports for it) should start with
    /// text tool calls.
    pub(crate) fn prefers_text(&self, model: &str) -> bool {
        troupe_tools::sync::lock(&self.text).contains(model)
    }

    /// Remembers that a session with `model` had to switch to text tool calls, in this
    /// process and in the file. The file is written whole to a temporary name and renamed, so
    /// a reader never sees half of it.
    pub(crate) fn remember_text(&self, model: &str, reason: &str) {
        if !troupe_tools::sync::lock(&self.text).insert(model.to_string()) {
            return;
        }
        let Some(path) = &self.path else {
            return;
        };
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut entries = read_entries(path);
        entries.insert(
            format!("{} {model}", self.endpoint),
            Remembered {
                since,
                reason: reason.to_string(),
            },
        );
        if let Err(error) = write_entries(path, &entries) {
            tracing::warn!(path = %path.display(), %error, "could not remember the switch to text tool calls");
        }
    }
}

fn read_entries(path: &Path) -> BTreeMap<String, Remembered> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text).unwrap_or_else(|error| {
            tracing::warn!(path = %path.display(), %error, "ignoring an unreadable tool-call mode memory");
            BTreeMap::new()
        }),
        Err(_) => BTreeMap::new(),
    }
}

fn write_entries(path: &Path, entries: &BTreeMap<String, Remembered>) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let text = serde_json::to_string_pretty(entries).map_err(std::io::Error::other)?;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_switch_is_remembered_for_that_endpoint_and_model_only() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("state/tool_calls.json");
        let first = ModeMemory::load(Some(path.clone()), "http://h/v1");
        assert!(!first.prefers_text("small"));
        first.remember_text("small", "the server could not parse the model's calls");
        assert!(first.prefers_text("small"));
        assert!(!first.prefers_text("big"));
        let again = ModeMemory::load(Some(path.clone()), "http://h/v1");
        assert!(again.prefers_text("small"));
        assert!(!again.prefers_text("big"));
        assert!(!ModeMemory::load(Some(path), "http://other/v1").prefers_text("small"));
    }

    #[test]
    fn a_broken_file_is_an_empty_memory() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("tool_calls.json");
        std::fs::write(&path, "{not json").unwrap_or_else(|e| panic!("{e}"));
        let memory = ModeMemory::load(Some(path.clone()), "http://h/v1");
        assert!(!memory.prefers_text("m"));
        memory.remember_text("m", "why");
        assert!(ModeMemory::load(Some(path), "http://h/v1").prefers_text("m"));
    }

    #[test]
    fn without_a_file_it_lasts_for_the_process() {
        let memory = ModeMemory::load(None, "http://h/v1");
        memory.remember_text("m", "why");
        assert!(memory.prefers_text("m"));
    }
}
