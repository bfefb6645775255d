//! disk-cleanup's state under `$TROUPE_HOME/disk-cleanup/`: `tracked.json` (the tracked paths,
//! written to a temporary file, the old copy kept as `tracked.json.bak`, then renamed into
//! place) and `cleanup.log` (append-only: every track, skip, refusal and deletion).

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// One tracked path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The path, absolute.
    pub path: PathBuf,
    /// When it was tracked, UTC ISO 8601 (`2026-12-01T16:42:25Z`).
    pub timestamp: String,
    /// Its category (`test`, `temp`, `cron-output`, `research`, `chrome-profile`, ...).
    pub category: String,
    /// Its size in bytes when tracked.
    pub size: u64,
    /// The root session that created it, when a tool call did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
}

impl Entry {
    /// Seconds since it was tracked at `now`; an unreadable timestamp counts as just tracked,
    /// so a damaged entry is never deleted early.
    pub fn age_secs(&self, now: u64) -> u64 {
        parse_iso(&self.timestamp).map_or(0, |t| now.saturating_sub(t))
    }
}

/// The state folder and its two files.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
}

impl Store {
    /// The state of a troupe home: `<home>/disk-cleanup/`.
    pub fn new(home: &Path) -> Store {
        Store {
            dir: home.join("disk-cleanup"),
        }
    }

    /// `tracked.json`.
    pub fn tracked_file(&self) -> PathBuf {
        self.dir.join("tracked.json")
    }

    /// `cleanup.log`.
    pub fn log_file(&self) -> PathBuf {
        self.dir.join("cleanup.log")
    }

    /// The tracked entries: from `tracked.json`, else from its `.bak` when it is damaged, else
    /// none (both damaged or absent).
    pub fn load(&self) -> Vec<Entry> {
        let main = self.tracked_file();
        match read_entries(&main) {
            Ok(Some(entries)) => entries,
            Ok(None) => Vec::new(),
            Err(reason) => {
                let bak = self.dir.join("tracked.json.bak");
                match read_entries(&bak) {
                    Ok(Some(entries)) => {
                        self.log(&format!(
                            "RESTORED from tracked.json.bak ({} damaged: {reason})",
                            main.display()
                        ));
                        entries
                    }
                    _ => {
                        self.log(&format!(
                            "RESET tracked.json was damaged ({reason}) and has no usable backup"
                        ));
                        Vec::new()
                    }
                }
            }
        }
    }

    /// Writes the entries atomically: a temporary file, the old file copied to `.bak`, then a
    /// rename, so a crash leaves the old or the new list, never half of one.
    pub fn save(&self, entries: &[Entry]) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let main = self.tracked_file();
        let tmp = self.dir.join("tracked.json.tmp");
        let text = serde_json::to_string_pretty(entries).map_err(std::io::Error::other)?;
        {
            let mut file = std::fs::File::create(&tmp)?;
            file.write_all(text.as_bytes())?;
            file.write_all(b"\n")?;
            file.sync_all()?;
        }
        if main.is_file() {
            std::fs::copy(&main, self.dir.join("tracked.json.bak"))?;
        }
        std::fs::rename(&tmp, &main)
    }

    /// Appends one line to `cleanup.log`, stamped with the UTC time. Never fails the caller.
    pub fn log(&self, line: &str) {
        let stamped = format!("[{}] {line}\n", log_stamp(now_secs()));
        let written = std::fs::create_dir_all(&self.dir).and_then(|()| {
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.log_file())
                .and_then(|mut f| f.write_all(stamped.as_bytes()))
        });
        if let Err(error) = written {
            tracing::warn!(%error, "disk-cleanup could not write cleanup.log");
        }
    }
}

fn read_entries(path: &Path) -> Result<Option<Vec<Entry>>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    serde_json::from_str::<Vec<Entry>>(&text)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// Seconds since the Unix epoch now.
pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `secs` as UTC ISO 8601 (`2026-12-01T16:42:25Z`).
pub fn iso(secs: u64) -> String {
    let (y, mo, d, h, mi, s) = civil(secs);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}

fn log_stamp(secs: u64) -> String {
    let (y, mo, d, h, mi, s) = civil(secs);
    format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}")
}

/// Reads `YYYY-MM-DDTHH:MM:SS` with an optional fraction and `Z` or `+00:00`.
pub fn parse_iso(text: &str) -> Option<u64> {
    let text = text.trim();
    let text = text
        .strip_suffix('Z')
        .or_else(|| text.strip_suffix("+00:00"))
        .unwrap_or(text);
    let (date, time) = text.split_once('T').or_else(|| text.split_once(' '))?;
    let time = time.split('.').next()?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, mo, day) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.split(':').map(|p| p.parse::<i64>().ok());
    let (h, mi, s) = (t.next()??, t.next()??, t.next()??);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&day) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let days = days_from_civil(y, mo, day);
    u64::try_from(days * 86_400 + h * 3600 + mi * 60 + s).ok()
}

// Howard Hinnant's civil-date algorithms (public domain arithmetic).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil(secs: u64) -> (i64, i64, i64, i64, i64, i64) {
    let secs = i64::try_from(secs).unwrap_or(i64::MAX / 2);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d, rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_round_trips() {
        for secs in [0, 951_782_400, 1_796_139_745, 4_102_444_799] {
            assert_eq!(parse_iso(&iso(secs)), Some(secs), "{}", iso(secs));
        }
        assert_eq!(iso(1_796_139_745), "2026-12-01T15:42:25Z");
        assert_eq!(
            parse_iso("2026-12-01T15:42:25.123+00:00"),
            Some(1_796_139_745)
        );
        assert_eq!(parse_iso("yesterday"), None);
    }

    #[test]
    fn a_damaged_list_is_restored_from_the_backup() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let one = Entry {
            path: "/x/test_a".into(),
            timestamp: iso(1),
            category: "test".into(),
            size: 1,
            session: None,
        };
        store.save(std::slice::from_ref(&one)).unwrap();
        store.save(&[one.clone(), one.clone()]).unwrap();
        std::fs::write(store.tracked_file(), "{ half written").unwrap();
        assert_eq!(store.load(), vec![one]);
        let log = std::fs::read_to_string(store.log_file()).unwrap();
        assert!(log.contains("RESTORED"));
    }
}
