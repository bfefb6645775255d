//! Config seals: a change to the files troupe takes its rules from, made while a session could
//! write them, takes effect only after a person says yes.
//!
//! Confinement keeps commands out of troupe's home, but `troupe.yaml` usually sits in the very
//! folder a session works in, and so do the scripts its hooks run. A session that rewrote them
//! (`approvals: {unattended: approve}`, a new `on_session_start` hook) would set the rules of the
//! next session. So every runtime watches those files ([`ConfigWatch`]): it notes their content
//! when it starts, looks again after every tool call, once a second, and when it closes, and
//! records each change it sees in `$TROUPE_HOME/config-seals.json` (out of every confined
//! command's reach). A runtime that died without closing is caught up at the next start: a
//! watched file whose content is not what it last saw counts as changed by a session.
//!
//! A later start that finds a file still as a session left it refuses it until a person accepts
//! it: `troupe chat` on a terminal asks, every other entry point stops with a message naming
//! `troupe config trust FILE`. A change made while no troupe ran (the person's own edit) is taken
//! as it is, and so is a file whose content changed again after the session's change was seen.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use troupe_actors::call::CallStatus;
use troupe_actors::hooks::{Hook, ToolCallInfo};
use troupe_tools::ToolResult;
use troupe_tools::sync::lock;

use crate::settings::{DEFAULT_CONFIG_FILE, Settings};

/// The file under troupe's home that holds the record.
pub const SEALS_FILE: &str = "config-seals.json";

/// How often a runtime looks at its files between tool calls (a background process may write).
const LOOK_INTERVAL: Duration = Duration::from_secs(1);

/// The hash recorded for a file that does not exist.
const ABSENT: &str = "absent";

/// A file changed by a session and not yet accepted by a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingChange {
    /// The file.
    pub path: PathBuf,
    /// When troupe saw the change (ms since the epoch).
    pub seen_at_ms: u64,
    /// The process that saw it.
    pub seen_by_pid: u32,
}

impl std::fmt::Display for PendingChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} was changed while a troupe session could write it (seen by process {}, {}); \
             troupe does not use a change it did not see a person make. Read the file, then \
             accept it with `troupe config trust {}` (or put back what you had)",
            self.path.display(),
            self.seen_by_pid,
            when(self.seen_at_ms),
            self.path.display(),
        )
    }
}

/// What `config-seals.json` holds.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Record {
    /// Files changed by a session: path → the content it left.
    #[serde(default)]
    changed: BTreeMap<String, Changed>,
    /// Runtimes watching now: pid → what they watch and when they last looked.
    #[serde(default)]
    watchers: BTreeMap<u32, Watcher>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Changed {
    sha256: String,
    seen_at_ms: u64,
    pid: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Watcher {
    /// Each watched file and the content the watcher last saw.
    files: BTreeMap<String, String>,
}

/// The files a runtime started from `config` takes rules from: the config file (or the
/// `troupe.yaml` a later start would read, when there is none yet) and the script files its
/// `hooks:` commands name.
pub fn watched_files(config: &Settings) -> Vec<PathBuf> {
    let main = match &config.path {
        Some(path) => absolute(path),
        None => absolute(Path::new(DEFAULT_CONFIG_FILE)),
    };
    let mut files = vec![main];
    for spec in config.hooks.values().flatten() {
        {
            if let Some(script) = script_of(&spec.command) {
                let candidate = spec.dir.join(script);
                if candidate.is_file() {
                    let candidate = absolute(&candidate);
                    if !files.contains(&candidate) {
                        files.push(candidate);
                    }
                }
            }
        }
    }
    files
}

/// Programs that run the script file named after their options.
const INTERPRETERS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "python", "python3", "node", "perl", "ruby", "php", "deno",
];

/// The file a hook command runs: its program when that is a path (`./deny.sh`), or the script
/// an interpreter is given (`python3 log.py`). Files it only reads or writes are not rules.
fn script_of(command: &str) -> Option<&str> {
    let mut words = command
        .split_whitespace()
        .map(|w| w.trim_matches(|c| c == '"' || c == '\''));
    let program = words.next()?;
    let name = program.rsplit('/').next().unwrap_or(program);
    if INTERPRETERS.contains(&name) {
        return words.find(|w| !w.is_empty() && !w.starts_with('-'));
    }
    program.contains('/').then_some(program)
}

/// The first of `files` that a session changed and no person accepted yet, if any. Also settles
/// what a runtime that died without closing left unrecorded.
pub fn pending_change(home: &Path, files: &[PathBuf]) -> std::io::Result<Option<PendingChange>> {
    update(home, |record| {
        settle_dead_watchers(record);
        for file in files {
            let key = key_of(file);
            let Some(changed) = record.changed.get(&key) else {
                continue;
            };
            if content_hash(file) == changed.sha256 {
                return Some(PendingChange {
                    path: file.clone(),
                    seen_at_ms: changed.seen_at_ms,
                    seen_by_pid: changed.pid,
                });
            }
            // Changed again since: someone edited it while no session could; that edit stands.
            record.changed.remove(&key);
        }
        None
    })
}

/// A person accepts `file` as it is now.
pub fn trust(home: &Path, file: &Path) -> std::io::Result<bool> {
    let key = key_of(&absolute(file));
    update(home, |record| record.changed.remove(&key).is_some())
}

/// A runtime's watch over its files; see the module doc.
pub struct ConfigWatch {
    home: PathBuf,
    files: Vec<(PathBuf, Mutex<Seen>)>,
    stop: tokio_util::sync::CancellationToken,
}

impl std::fmt::Debug for ConfigWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigWatch")
            .field(
                "files",
                &self.files.iter().map(|(p, _)| p).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// What a watch last saw of a file: its identity cheaply (stat), and its content.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    stat: Option<(u64, u64, i64, i64, i64)>,
    sha256: String,
}

impl Seen {
    fn now(path: &Path) -> Seen {
        Seen {
            stat: stat_of(path),
            sha256: content_hash(path),
        }
    }
}

impl ConfigWatch {
    /// Starts watching `files`, as they are now; registers this process in the record and looks
    /// again once a second until [`ConfigWatch::close`]. Call it inside a tokio runtime.
    pub fn start(home: &Path, files: Vec<PathBuf>) -> std::io::Result<Arc<ConfigWatch>> {
        let watch = Arc::new(ConfigWatch {
            home: home.to_path_buf(),
            files: files
                .into_iter()
                .map(|p| {
                    let seen = Seen::now(&p);
                    (p, Mutex::new(seen))
                })
                .collect(),
            stop: tokio_util::sync::CancellationToken::new(),
        });
        watch.register()?;
        // The ticker holds the watch weakly: a runtime that failed to start drops it, and the
        // ticker ends with it.
        let ticking = Arc::downgrade(&watch);
        let stop = watch.stop.clone();
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(LOOK_INTERVAL);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = interval.tick() => {
                        let Some(watch) = ticking.upgrade() else { break };
                        // Hashing and the record's lock are file I/O: off the async threads.
                        let _ = tokio::task::spawn_blocking(move || watch.look()).await;
                    }
                }
            }
        });
        Ok(watch)
    }

    /// Looks at every file now; records what changed. Returns the files that changed.
    pub fn look(&self) -> Vec<PathBuf> {
        let mut changed = vec![];
        for (path, seen) in &self.files {
            let mut seen = lock(seen);
            let stat = stat_of(path);
            if stat == seen.stat {
                continue;
            }
            let now = Seen::now(path);
            if now.sha256 != seen.sha256 {
                changed.push((path.clone(), now.sha256.clone()));
            }
            *seen = now;
        }
        let result: Vec<PathBuf> = changed.iter().map(|(p, _)| p.clone()).collect();
        // Nothing changed: nothing to record (the common case, after every call).
        if changed.is_empty() {
            return result;
        }
        let pid = std::process::id();
        let outcome = update(&self.home, |record| {
            for (path, sha256) in &changed {
                tracing::warn!(
                    file = %path.display(),
                    "a troupe config file changed while a session could write it; it needs a person's yes (`troupe config trust`) before troupe uses it"
                );
                record.changed.insert(
                    key_of(path),
                    Changed {
                        sha256: sha256.clone(),
                        seen_at_ms: now_ms(),
                        pid,
                    },
                );
            }
            if let Some(me) = record.watchers.get_mut(&pid) {
                for (path, sha256) in &changed {
                    me.files.insert(key_of(path), sha256.clone());
                }
            }
        });
        if let Err(err) = outcome {
            tracing::error!(%err, "could not record a change to troupe's config files");
        }
        result
    }

    /// A last look, then leaves the record: called when the runtime closes, after its
    /// processes were stopped.
    pub fn close(&self) {
        self.stop.cancel();
        self.look();
        let pid = std::process::id();
        if let Err(err) = update(&self.home, |record| record.watchers.remove(&pid)) {
            tracing::warn!(%err, "could not leave the config-seal record");
        }
    }

    fn register(&self) -> std::io::Result<()> {
        let files = self
            .files
            .iter()
            .map(|(p, seen)| (key_of(p), lock(seen).sha256.clone()))
            .collect();
        update(&self.home, |record| {
            record
                .watchers
                .insert(std::process::id(), Watcher { files });
        })
    }
}

/// The watch as a hook: a look after every tool call, when the change is fresh.
#[derive(Debug)]
pub struct ConfigWatchHook(pub Arc<ConfigWatch>);

impl Hook for ConfigWatchHook {
    fn name(&self) -> &str {
        "config-seal"
    }

    fn post_tool_call(&self, _call: &ToolCallInfo<'_>, _status: CallStatus, _result: &ToolResult) {
        self.0.look();
    }
}

/// Records changes that runtimes gone without closing did not see: a watched file whose content
/// is not what such a runtime last saw counts as changed by its session.
fn settle_dead_watchers(record: &mut Record) {
    let dead: Vec<u32> = record
        .watchers
        .keys()
        .copied()
        .filter(|pid| !alive(*pid))
        .collect();
    for pid in dead {
        let Some(watcher) = record.watchers.remove(&pid) else {
            continue;
        };
        for (key, seen) in watcher.files {
            let now = content_hash(Path::new(&key));
            if now != seen && now != ABSENT && !record.changed.contains_key(&key) {
                record.changed.insert(
                    key,
                    Changed {
                        sha256: now,
                        seen_at_ms: now_ms(),
                        pid,
                    },
                );
            }
        }
    }
}

/// Whether a process with this pid exists.
fn alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    // SAFETY: kill with signal 0 only checks that the process exists.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Reads, changes and writes the record under an exclusive lock (several troupe processes share
/// a home); the write replaces the file whole.
fn update<T>(home: &Path, change: impl FnOnce(&mut Record) -> T) -> std::io::Result<T> {
    std::fs::create_dir_all(home)?;
    let lock_path = home.join("config-seals.lock");
    let lock_file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)?;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&lock_file);
    // SAFETY: flock on a file descriptor we own; released when the file closes.
    if unsafe { libc::flock(fd, libc::LOCK_EX) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let path = home.join(SEALS_FILE);
    let mut record: Record = match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|err| {
            // A record troupe cannot read protects nothing: start again, but say so.
            tracing::warn!(%err, file = %path.display(), "config-seal record unreadable; starting a new one");
            Record::default()
        }),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Record::default(),
        Err(err) => return Err(err),
    };
    let out = change(&mut record);
    let text = serde_json::to_vec_pretty(&record).map_err(std::io::Error::other)?;
    let tmp = home.join(format!(".{SEALS_FILE}.{}.tmp", std::process::id()));
    let written = (|| {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(&text)?;
        file.sync_all()?;
        std::fs::rename(&tmp, &path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    Ok(out)
}

fn content_hash(path: &Path) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let digest = Sha256::digest(&bytes);
            digest.iter().map(|b| format!("{b:02x}")).collect()
        }
        Err(_) => ABSENT.to_string(),
    }
}

fn stat_of(path: &Path) -> Option<(u64, u64, i64, i64, i64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.ino(), m.size(), m.mtime(), m.mtime_nsec(), m.ctime_nsec()))
}

fn absolute(path: &Path) -> PathBuf {
    if let Ok(real) = std::fs::canonicalize(path) {
        return real;
    }
    match std::env::current_dir() {
        Ok(dir) if path.is_relative() => dir.join(path),
        _ => path.to_path_buf(),
    }
}

fn key_of(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

fn now_ms() -> u64 {
    ms_of(SystemTime::now())
}

fn ms_of(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn when(ms: u64) -> String {
    let ago = now_ms().saturating_sub(ms) / 1000;
    match ago {
        0..=119 => format!("{ago} s ago"),
        120..=7199 => format!("{} min ago", ago / 60),
        _ => format!("{} h ago", ago / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(dir: &Path) -> (PathBuf, PathBuf) {
        let home = dir.join("home");
        let config = dir.join("troupe.yaml");
        std::fs::write(&config, "model: {model: a}\n").unwrap();
        (home, config)
    }

    #[tokio::test]
    async fn a_change_seen_during_a_session_waits_for_a_person() {
        let dir = tempfile::tempdir().unwrap();
        let (home, config) = files(dir.path());
        let config = absolute(&config);
        let watch = ConfigWatch::start(&home, vec![config.clone()]).unwrap();
        assert!(watch.look().is_empty());
        std::fs::write(&config, "approvals: {unattended: approve}\n").unwrap();
        assert_eq!(watch.look(), vec![config.clone()]);
        watch.close();
        let pending = pending_change(&home, std::slice::from_ref(&config))
            .unwrap()
            .unwrap();
        assert_eq!(pending.path, config);
        assert!(pending.to_string().contains("troupe config trust"));
        assert!(trust(&home, &config).unwrap());
        assert_eq!(pending_change(&home, &[config]).unwrap(), None);
    }

    #[tokio::test]
    async fn an_edit_made_while_no_session_ran_stands() {
        let dir = tempfile::tempdir().unwrap();
        let (home, config) = files(dir.path());
        let config = absolute(&config);
        let watch = ConfigWatch::start(&home, vec![config.clone()]).unwrap();
        watch.close();
        std::fs::write(&config, "model: {model: b}\n").unwrap();
        assert_eq!(pending_change(&home, &[config]).unwrap(), None);
    }

    #[tokio::test]
    async fn a_file_created_by_a_session_is_a_change() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let config = dir.path().join("troupe.yaml");
        let watch = ConfigWatch::start(&home, vec![config.clone()]).unwrap();
        std::fs::write(&config, "hooks: {}\n").unwrap();
        watch.close();
        assert!(pending_change(&home, &[config]).unwrap().is_some());
    }

    #[test]
    fn the_script_of_a_hook_command_is_its_program_or_its_interpreters_file() {
        assert_eq!(script_of("./deny.sh --strict"), Some("./deny.sh"));
        assert_eq!(script_of("python3 -u log.py out.jsonl"), Some("log.py"));
        assert_eq!(script_of("/usr/bin/bash 'hooks/x.sh'"), Some("hooks/x.sh"));
        assert_eq!(script_of("jq -c . >> log.jsonl"), None);
    }

    #[test]
    fn a_runtime_that_died_is_caught_up_at_the_next_start() {
        let dir = tempfile::tempdir().unwrap();
        let (home, config) = files(dir.path());
        let config = absolute(&config);
        let dead_watcher = |record: &mut Record| {
            record.watchers.insert(
                u32::MAX - 7,
                Watcher {
                    files: BTreeMap::from([(key_of(&config), content_hash(&config))]),
                },
            );
        };
        // A watcher whose process is gone saw the file as it is: no change, however recent.
        update(&home, dead_watcher).unwrap();
        let files = std::slice::from_ref(&config);
        assert!(pending_change(&home, files).unwrap().is_none());
        // It saw it, then the file changed after its last look: a session's change.
        update(&home, dead_watcher).unwrap();
        std::fs::write(&config, "approvals: {unattended: approve}\n").unwrap();
        assert!(pending_change(&home, files).unwrap().is_some());
    }
}
