//! What `tool_calls: auto` learned about a server and model: that it needed text tool calls.
//! Without a memory every new session (every `troupe chat`, every board worker's task) starts
//! native again, pays two refused answers before it switches, and stays native where the first
//! answer happens to parse, with a model that does better in text. Once one session of a
//! process switched, the others start in text; with a file (troupe keeps it at
//! `$TROUPE_HOME/state/tool_calls.json`), later processes do too.
//!
//! The file is a JSON object keyed by `"<endpoint> <model>"`, each value saying when and why.
//! Deleting it, or an entry of it, forgets; `tool_calls: native` ignores it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};

/// One remembered switch.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Remembered {
    /// When it was learned, seconds since the Unix epoch.
    pub(crate) since: u64,
    /// Why the session switched.
    pub(crate) reason: String,
}

/// One provider's memory (one endpoint and model).
#[derive(Debug)]
pub(crate) struct ModeMemory {
    /// The file shared by every provider, when there is one.
    path: Option<PathBuf>,
    /// `"<endpoint> <model>"`.
    key: String,
    /// Whether text tool calls are known to be needed.
    text: AtomicBool,
}

impl ModeMemory {
    /// The memory of `endpoint` and `model`, read from `path` when given. A file that cannot be
    /// read or parsed is treated as empty (and logged): it only saves time.
    pub(crate) fn load(path: Option<PathBuf>, endpoint: &str, model: &str) -> Self {
        let key = format!("{endpoint} {model}");
        let text = path
            .as_deref()
            .is_some_and(|p| read_entries(p).contains_key(&key));
        ModeMemory {
            path,
            key,
            text: AtomicBool::new(text),
        }
    }

    /// Whether sessions should start with text tool calls.
    pub(crate) fn prefers_text(&self) -> bool {
        self.text.load(Ordering::SeqCst)
    }

    /// Remembers that a session had to switch to text tool calls, in this process and in the
    /// file. The file is written whole to a temporary name and renamed, so a reader never sees
    /// half of it.
    pub(crate) fn remember_text(&self, reason: &str) {
        if self.text.swap(true, Ordering::SeqCst) {
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
            self.key.clone(),
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
        let first = ModeMemory::load(Some(path.clone()), "http://h/v1", "small");
        assert!(!first.prefers_text());
        first.remember_text("the server could not parse the model's calls");
        assert!(first.prefers_text());
        assert!(ModeMemory::load(Some(path.clone()), "http://h/v1", "small").prefers_text());
        assert!(!ModeMemory::load(Some(path.clone()), "http://h/v1", "big").prefers_text());
        assert!(!ModeMemory::load(Some(path), "http://other/v1", "small").prefers_text());
    }

    #[test]
    fn a_broken_file_is_an_empty_memory() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("tool_calls.json");
        std::fs::write(&path, "{not json").unwrap_or_else(|e| panic!("{e}"));
        let memory = ModeMemory::load(Some(path.clone()), "http://h/v1", "m");
        assert!(!memory.prefers_text());
        memory.remember_text("why");
        assert!(ModeMemory::load(Some(path), "http://h/v1", "m").prefers_text());
    }

    #[test]
    fn without_a_file_it_lasts_for_the_process() {
        let memory = ModeMemory::load(None, "http://h/v1", "m");
        memory.remember_text("why");
        assert!(memory.prefers_text());
    }
}
