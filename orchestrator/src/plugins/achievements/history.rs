//! What the achievements plugin keeps under the troupe home (`achievements/`): the unlock
//! history (`unlocks.json`: which tier of which badge was first reached when) and the
//! per-session stats of the last scan (`stats.json`, so a restart rescans only what changed).
//! Each file is written whole to a temporary file, synced, then renamed over the old one, so a
//! crash leaves the old or the new file, never half of one.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::stats::SessionStats;

/// One tier of one badge, first reached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unlock {
    /// The badge's id.
    pub badge: String,
    /// The tier's name (`bronze` … `olympian`).
    pub tier: String,
    /// When it was first seen reached, in milliseconds since the Unix epoch.
    pub at: i64,
    /// The figure then.
    pub value: u64,
}

/// The plugin's folder under the troupe home and its files.
#[derive(Debug, Clone)]
pub struct StateDir {
    dir: PathBuf,
}

impl StateDir {
    /// `<home>/achievements`.
    pub fn new(home: &Path) -> StateDir {
        StateDir {
            dir: home.join("achievements"),
        }
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    fn unlocks_file(&self) -> PathBuf {
        self.dir.join("unlocks.json")
    }

    fn stats_file(&self) -> PathBuf {
        self.dir.join("stats.json")
    }

    /// The unlock history, oldest first; empty when there is none. A damaged file is logged
    /// and read as empty (it is rewritten at the next unlock).
    pub fn load_unlocks(&self) -> Vec<Unlock> {
        read_json(&self.unlocks_file()).unwrap_or_default()
    }

    /// Writes the unlock history.
    pub fn save_unlocks(&self, unlocks: &[Unlock]) -> std::io::Result<()> {
        write_atomic(&self.unlocks_file(), unlocks)
    }

    /// The per-session stats of the last scan, by session id.
    pub fn load_stats(&self) -> HashMap<String, SessionStats> {
        read_json(&self.stats_file()).unwrap_or_default()
    }

    /// Writes the per-session stats.
    pub fn save_stats(&self, stats: &HashMap<String, SessionStats>) -> std::io::Result<()> {
        write_atomic(&self.stats_file(), stats)
    }

    /// Removes both files (`POST reset-state`).
    pub fn clear(&self) -> std::io::Result<()> {
        for file in [self.unlocks_file(), self.stats_file()] {
            match std::fs::remove_file(&file) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

fn read_json<T: for<'de> Deserialize<'de>>(file: &Path) -> Option<T> {
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(error) => {
            tracing::warn!(file = %file.display(), %error, "achievements: cannot read; starting empty");
            return None;
        }
    };
    match serde_json::from_str(&text) {
        Ok(value) => Some(value),
        Err(error) => {
            tracing::warn!(file = %file.display(), %error, "achievements: damaged file; starting empty");
            None
        }
    }
}

/// Writes `value` as JSON to `file` atomically: a temporary file beside it, synced, renamed.
fn write_atomic<T: Serialize + ?Sized>(file: &Path, value: &T) -> std::io::Result<()> {
    let dir = file.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let text = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        file.file_name().and_then(|n| n.to_str()).unwrap_or("state"),
        std::process::id()
    ));
    {
        let mut out = std::fs::File::create(&tmp)?;
        out.write_all(&text)?;
        out.sync_all()?;
    }
    std::fs::rename(&tmp, file)?;
    // The rename itself is durable once the folder is synced.
    if let Ok(folder) = std::fs::File::open(dir) {
        let _ = folder.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unlocks_round_trip_and_clear() {
        let home = tempfile::tempdir().unwrap();
        let state = StateDir::new(home.path());
        assert!(state.load_unlocks().is_empty());
        let unlock = Unlock {
            badge: "team-lead".into(),
            tier: "bronze".into(),
            at: 1,
            value: 1,
        };
        state.save_unlocks(std::slice::from_ref(&unlock)).unwrap();
        assert_eq!(state.load_unlocks(), vec![unlock]);
        std::fs::write(home.path().join("achievements/unlocks.json"), "{not json").unwrap();
        assert!(state.load_unlocks().is_empty());
        state.clear().unwrap();
        state.clear().unwrap();
        assert!(!home.path().join("achievements/unlocks.json").exists());
    }
}
