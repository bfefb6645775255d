//! Receipts: what is left of a background process once it finished (exit status, duration, the
//! end of its output), kept on disk so the session that started it can still read them later,
//! after the process was dropped from memory or troupe restarted. Written atomically, 0600 files
//! in a 0700 directory, secrets masked; at most the newest 64 and none older than 7 days.
//! The process registry writes and reads them; nothing else does.

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::atomic_write::write_atomic;
use super::capture::last_chars;
use super::redact::redact;

/// Characters of output a receipt keeps (the end of the output).
pub const RECEIPT_OUTPUT_CHARS: usize = 200_000;
/// Receipts kept at most.
pub const MAX_RECEIPTS: usize = 64;
/// How long a receipt is kept after the process finished.
pub const RECEIPT_MAX_AGE: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// One finished background process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Receipt {
    /// `proc_<12 hex>`.
    pub id: String,
    /// The command, secrets masked.
    pub command: String,
    /// Where it ran.
    pub cwd: String,
    /// The session that owns it.
    pub session_id: String,
    /// Start, in seconds since the Unix epoch.
    pub started_at: u64,
    /// How long it ran.
    pub duration_seconds: f64,
    /// Its exit code (minus the signal number when a signal ended it).
    pub exit_code: i32,
    /// `exited` or `killed`.
    pub completion_reason: String,
    /// Who stopped it, when something did (`process.kill`, `session_end`, `shutdown`).
    pub termination_source: Option<String>,
    /// The end of its output, secrets masked.
    pub output: String,
}

/// The directory of receipts.
#[derive(Debug, Clone)]
pub struct ReceiptStore {
    dir: PathBuf,
    max_count: usize,
    max_age: Duration,
}

/// Whether `id` has the shape of a process id (it doubles as a file name).
fn valid_id(id: &str) -> bool {
    id.strip_prefix("proc_")
        .is_some_and(|hex| !hex.is_empty() && hex.chars().all(|c| c.is_ascii_hexdigit()))
}

impl ReceiptStore {
    /// Receipts in `dir` with the standard limits.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        ReceiptStore {
            dir: dir.into(),
            max_count: MAX_RECEIPTS,
            max_age: RECEIPT_MAX_AGE,
        }
    }

    /// Overrides the count and age limits.
    pub fn with_limits(mut self, max_count: usize, max_age: Duration) -> Self {
        self.max_count = max_count;
        self.max_age = max_age;
        self
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes `receipt` (masking secrets and keeping only the end of the output), then prunes.
    pub fn save(&self, receipt: &Receipt) -> io::Result<()> {
        if !valid_id(&receipt.id) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("'{}' is not a process id", receipt.id),
            ));
        }
        fs::create_dir_all(&self.dir)?;
        fs::set_permissions(&self.dir, fs::Permissions::from_mode(0o700))?;
        let mut stored = receipt.clone();
        stored.command = redact(&stored.command);
        stored.output = redact(last_chars(&stored.output, RECEIPT_OUTPUT_CHARS));
        let bytes = serde_json::to_vec(&stored).map_err(io::Error::other)?;
        write_atomic(
            &self.dir.join(format!("{}.json", stored.id)),
            &bytes,
            Some(0o600),
        )?;
        self.prune()?;
        Ok(())
    }

    /// The receipt `id`, if it exists, is intact and `may_read` accepts its owner session.
    pub fn load(&self, id: &str, may_read: &dyn Fn(&str) -> bool) -> Option<Receipt> {
        if !valid_id(id) {
            return None;
        }
        let receipt = self.read(&self.dir.join(format!("{id}.json")))?;
        (!receipt.session_id.is_empty() && may_read(&receipt.session_id)).then_some(receipt)
    }

    /// Every intact, young enough receipt `may_read` accepts, newest first.
    pub fn list(&self, may_read: &dyn Fn(&str) -> bool) -> Vec<Receipt> {
        let _ = self.prune();
        self.files()
            .into_iter()
            .filter_map(|(path, _)| self.read(&path))
            .filter(|r| !r.session_id.is_empty() && may_read(&r.session_id))
            .collect()
    }

    /// Deletes receipts beyond the newest `max_count` and those older than `max_age`; returns how
    /// many went. Files vanishing meanwhile (another process pruning) are fine.
    pub fn prune(&self) -> io::Result<usize> {
        let now = SystemTime::now();
        let mut removed = 0;
        for (n, (path, mtime)) in self.files().into_iter().enumerate() {
            let too_old = now
                .duration_since(mtime)
                .is_ok_and(|age| age > self.max_age);
            if n >= self.max_count || too_old {
                match fs::remove_file(&path) {
                    Ok(()) => removed += 1,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(removed)
    }

    /// Receipt files with their modification times, newest first (then by name).
    fn files(&self) -> Vec<(PathBuf, SystemTime)> {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return vec![];
        };
        let mut files: Vec<(PathBuf, SystemTime)> = entries
            .flatten()
            .filter_map(|e| {
                let path = e.path();
                let stem = path.file_stem()?.to_str()?;
                if path.extension()? != "json" || !valid_id(stem) {
                    return None;
                }
                Some((path.clone(), e.metadata().ok()?.modified().ok()?))
            })
            .collect();
        files.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| b.0.cmp(&a.0)));
        files
    }

    /// Reads one file; a receipt whose id does not match its file name is ignored.
    fn read(&self, path: &Path) -> Option<Receipt> {
        let mtime = fs::metadata(path).ok()?.modified().ok()?;
        if SystemTime::now()
            .duration_since(mtime)
            .is_ok_and(|age| age > self.max_age)
        {
            return None;
        }
        let receipt: Receipt = serde_json::from_slice(&fs::read(path).ok()?).ok()?;
        let stem = path.file_stem()?.to_str()?;
        (receipt.id == stem).then_some(receipt)
    }
}
