//! The bundled disk-cleanup plugin: it tracks the scratch files tools create (`test_*`,
//! `tmp_*`, `*.test.*`, cron output) inside the troupe home or `/tmp/troupe-*`, removes them
//! by the rules in [`rules`] (a quick, safe clean-up at the end of a session that tracked
//! something), and answers `/disk-cleanup status | dry-run | quick | deep [--yes] | track |
//! forget`. Everything it does is written to `cleanup.log` ([`state`]).

pub mod rules;
pub mod state;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::{Map, Value};
use troupe_actors::call::CallStatus;
use troupe_actors::hooks::{Hook, PreToolDecision, ToolCallInfo};
use troupe_tools::ToolResult;
use troupe_tools::sync::lock;

use rules::{Refusal, Scope};
use state::{Entry, Store, iso, now_secs};

/// The plugin's name.
pub const NAME: &str = "disk-cleanup";

/// The tools whose new files are tracked.
const WATCHED_TOOLS: &[&str] = &["write_file", "patch", "terminal"];

/// The usage text of `/disk-cleanup`.
pub const HELP: &str = "/disk-cleanup status                   what is tracked, by category, and the 10 largest
/disk-cleanup dry-run                  what quick and deep would remove, without removing
/disk-cleanup quick                    remove what the safe rules allow now
/disk-cleanup deep [--yes]             quick, then list what needs confirmation; --yes removes it
/disk-cleanup track <path> <category>  track a path (test, temp, cron-output, research, chrome-profile, download, other)
/disk-cleanup forget <path>            stop tracking a path (the file stays)";

/// What one clean-up did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Paths removed.
    pub deleted: Vec<PathBuf>,
    /// Empty folders removed.
    pub empty_dirs: usize,
    /// Bytes freed.
    pub freed: u64,
    /// Paths left in place because removing them failed or was refused.
    pub errors: Vec<String>,
}

impl Summary {
    /// The one-line summary.
    pub fn line(&self) -> String {
        format!(
            "[disk-cleanup] Cleaned {} files + {} empty dirs, freed {}.",
            self.deleted.len(),
            self.empty_dirs,
            human(self.freed)
        )
    }
}

/// A plan: what may go now, and what needs a person's yes (deep mode).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Removed by quick, without asking.
    pub auto: Vec<Entry>,
    /// Removed only in deep mode after confirmation.
    pub confirm: Vec<Entry>,
    /// Entries whose path is gone or no longer safe: dropped from the list.
    pub stale: Vec<(Entry, String)>,
}

/// The plugin: state on disk plus, per call in flight, which candidate paths existed before.
#[derive(Debug)]
pub struct DiskCleanup {
    scope: Scope,
    store: Store,
    /// Serialises every read-modify-write of `tracked.json` in this process.
    lock: Mutex<()>,
    /// call id -> (candidate, existed before the call).
    before: Mutex<HashMap<String, Vec<(PathBuf, bool)>>>,
    /// Root sessions that tracked something (their end runs a quick clean-up).
    sessions: Mutex<HashSet<String>>,
}

impl DiskCleanup {
    /// The plugin for troupe home `home` (scratch folders `/tmp/troupe-*`).
    pub fn new(home: &Path) -> DiskCleanup {
        DiskCleanup::with_scope(Scope::new(home))
    }

    /// The plugin for an explicit scope (tests).
    pub fn with_scope(scope: Scope) -> DiskCleanup {
        DiskCleanup {
            store: Store::new(scope.home()),
            scope,
            lock: Mutex::new(()),
            before: Mutex::new(HashMap::new()),
            sessions: Mutex::new(HashSet::new()),
        }
    }

    /// The state files.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Tracks `path` as `category`; refuses paths out of scope and unknown categories.
    pub fn track(
        &self,
        path: &Path,
        category: &str,
        session: Option<&str>,
    ) -> Result<Entry, String> {
        if !rules::CATEGORIES.contains(&category) {
            return Err(format!(
                "'{category}' is not a category; use one of {}",
                rules::CATEGORIES.join(", ")
            ));
        }
        let real = match self.scope.check(path) {
            Ok(real) => real,
            Err(Refusal(why)) => {
                self.store
                    .log(&format!("REFUSED track {}: {why}", path.display()));
                return Err(why);
            }
        };
        let Ok(meta) = std::fs::symlink_metadata(&real) else {
            return Err(format!("{} does not exist", real.display()));
        };
        let _guard = lock(&self.lock);
        let mut entries = self.store.load();
        entries.retain(|e| e.path != real);
        let entry = Entry {
            path: real.clone(),
            timestamp: iso(now_secs()),
            category: category.to_string(),
            size: size_of(&real, &meta),
            session: session.map(str::to_string),
        };
        entries.push(entry.clone());
        self.save(&entries);
        self.store.log(&format!(
            "TRACKED {category} {} {}",
            entry.size,
            real.display()
        ));
        Ok(entry)
    }

    /// Stops tracking `path`; the file stays. Returns whether it was tracked.
    pub fn forget(&self, path: &Path) -> bool {
        let wanted = self
            .scope
            .check(path)
            .unwrap_or_else(|_| path.to_path_buf());
        let _guard = lock(&self.lock);
        let mut entries = self.store.load();
        let before = entries.len();
        entries.retain(|e| e.path != wanted && e.path != path);
        let forgot = entries.len() != before;
        if forgot {
            self.save(&entries);
            self.store.log(&format!("FORGOT {}", wanted.display()));
        }
        forgot
    }

    /// What quick and deep would do now, from the tracked list.
    pub fn plan(&self, entries: &[Entry], now: u64) -> Plan {
        let mut plan = Plan::default();
        let mut research: Vec<&Entry> = Vec::new();
        for entry in entries {
            let meta = match std::fs::symlink_metadata(&entry.path) {
                Ok(meta) => meta,
                Err(_) => {
                    plan.stale
                        .push((entry.clone(), "it no longer exists".into()));
                    continue;
                }
            };
            // Re-check: the tree may have changed since it was tracked (a folder swapped for a
            // symlink, a protected path).
            match self.scope.check(&entry.path) {
                Ok(real) if real == entry.path => {}
                Ok(real) => {
                    plan.stale.push((
                        entry.clone(),
                        format!("it now resolves to {}", real.display()),
                    ));
                    continue;
                }
                Err(Refusal(why)) => {
                    plan.stale.push((entry.clone(), why));
                    continue;
                }
            }
            let automatic = matches!(entry.category.as_str(), "test" | "temp" | "cron-output");
            if automatic
                && self.is_protected_content(&entry.path)
                && self.scope.guess_category(&entry.path) != Some("cron-output")
            {
                plan.stale
                    .push((entry.clone(), "it is inside a protected folder".into()));
                continue;
            }
            let age = entry.age_secs(now);
            // Large files are never removed without a person's yes, whatever their category.
            if size_of(&entry.path, &meta) > rules::LARGE_BYTES {
                plan.confirm.push(entry.clone());
                continue;
            }
            match entry.category.as_str() {
                "test" => plan.auto.push(entry.clone()),
                "temp" if age > rules::TEMP_AFTER => plan.auto.push(entry.clone()),
                "cron-output" if age > rules::CRON_OUTPUT_AFTER => plan.auto.push(entry.clone()),
                "chrome-profile" if age > rules::CHROME_PROFILE_AFTER => {
                    plan.confirm.push(entry.clone());
                }
                "research" => research.push(entry),
                _ => {}
            }
        }
        research
            .sort_by_key(|e| std::cmp::Reverse(state::parse_iso(&e.timestamp).unwrap_or(u64::MAX)));
        for entry in research.into_iter().skip(rules::RESEARCH_KEEP_NEWEST) {
            if entry.age_secs(now) > rules::RESEARCH_AFTER {
                plan.confirm.push(entry.clone());
            }
        }
        plan
    }

    fn is_protected_content(&self, path: &Path) -> bool {
        path.strip_prefix(self.scope.home_real())
            .ok()
            .and_then(|rest| rest.components().next())
            .is_some_and(|top| {
                rules::PROTECTED_TOP_LEVEL.contains(&top.as_os_str().to_string_lossy().as_ref())
            })
    }

    /// The safe clean-up: removes what the rules allow without asking, drops stale entries,
    /// and removes empty folders under the home. Logged line by line and as a summary.
    pub fn quick(&self, reason: &str) -> Summary {
        let _guard = lock(&self.lock);
        let entries = self.store.load();
        let plan = self.plan(&entries, now_secs());
        let mut summary = Summary::default();
        let mut keep: Vec<Entry> = entries;
        for (entry, why) in &plan.stale {
            self.store.log(&format!(
                "STALE {} {}: {why}; dropped",
                entry.category,
                entry.path.display()
            ));
            keep.retain(|e| e != entry);
        }
        for entry in &plan.auto {
            if self.remove(entry, &mut summary) {
                keep.retain(|e| e != entry);
            }
        }
        for entry in &plan.confirm {
            self.store.log(&format!(
                "SKIP needs confirmation ({}) {}",
                entry.category,
                entry.path.display()
            ));
        }
        summary.empty_dirs = self.sweep_empty_dirs();
        self.save(&keep);
        self.store.log(&format!(
            "QUICK_SUMMARY ({reason}) deleted={} empty_dirs={} freed={} errors={}",
            summary.deleted.len(),
            summary.empty_dirs,
            summary.freed,
            summary.errors.len()
        ));
        summary
    }

    /// Deep mode: quick, then the entries that need confirmation; removed only when
    /// `confirmed`.
    pub fn deep(&self, confirmed: bool) -> (Summary, Vec<Entry>) {
        let mut summary = self.quick("deep");
        let _guard = lock(&self.lock);
        let entries = self.store.load();
        let plan = self.plan(&entries, now_secs());
        if !confirmed {
            return (summary, plan.confirm);
        }
        let mut keep = entries;
        for entry in &plan.confirm {
            if self.remove(entry, &mut summary) {
                keep.retain(|e| e != entry);
            }
        }
        self.save(&keep);
        self.store.log(&format!(
            "DEEP_SUMMARY (confirmed) deleted={} freed={}",
            summary.deleted.len(),
            summary.freed
        ));
        (summary, Vec::new())
    }

    /// Removes one entry after checking it once more; a symlink is removed as a link.
    fn remove(&self, entry: &Entry, summary: &mut Summary) -> bool {
        let real = match self.scope.check(&entry.path) {
            Ok(real) if real == entry.path => real,
            Ok(other) => {
                let why = format!("now resolves to {}", other.display());
                self.store
                    .log(&format!("REFUSED {}: {why}", entry.path.display()));
                summary
                    .errors
                    .push(format!("{}: {why}", entry.path.display()));
                return false;
            }
            Err(Refusal(why)) => {
                self.store
                    .log(&format!("REFUSED {}: {why}", entry.path.display()));
                summary
                    .errors
                    .push(format!("{}: {why}", entry.path.display()));
                return false;
            }
        };
        let Ok(meta) = std::fs::symlink_metadata(&real) else {
            return true;
        };
        let size = size_of(&real, &meta);
        let removed = if meta.is_dir() {
            // remove_dir_all does not follow symlinks inside the tree.
            std::fs::remove_dir_all(&real)
        } else {
            std::fs::remove_file(&real)
        };
        match removed {
            Ok(()) => {
                self.store.log(&format!(
                    "DELETED {} {size} {}",
                    entry.category,
                    real.display()
                ));
                summary.deleted.push(real);
                summary.freed += size;
                true
            }
            Err(error) => {
                self.store
                    .log(&format!("ERROR removing {}: {error}", real.display()));
                summary.errors.push(format!("{}: {error}", real.display()));
                false
            }
        }
    }

    /// Removes empty folders under the home, deepest first; never a protected tree, never
    /// inside `.git`, `node_modules` and the like, never through a symlink.
    fn sweep_empty_dirs(&self) -> usize {
        let mut removed = 0;
        let Ok(top) = std::fs::read_dir(self.scope.home_real()) else {
            return 0;
        };
        for entry in top.flatten() {
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() && !self.scope.is_protected_tree(&path) {
                removed += self.sweep(&path, 0);
            }
        }
        removed
    }

    fn sweep(&self, dir: &Path, depth: usize) -> usize {
        if depth > 64 {
            return 0;
        }
        if dir
            .file_name()
            .is_some_and(|n| rules::SWEEP_SKIPS.contains(&n.to_string_lossy().as_ref()))
        {
            return 0;
        }
        let mut removed = 0;
        if let Ok(children) = std::fs::read_dir(dir) {
            for child in children.flatten() {
                if child.file_type().is_ok_and(|t| t.is_dir()) {
                    removed += self.sweep(&child.path(), depth + 1);
                }
            }
        }
        let empty = std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_none());
        if empty && self.scope.check(dir).is_ok() && std::fs::remove_dir(dir).is_ok() {
            self.store
                .log(&format!("DELETED empty-dir {}", dir.display()));
            removed += 1;
        }
        removed
    }

    fn save(&self, entries: &[Entry]) {
        if let Err(error) = self.store.save(entries) {
            tracing::warn!(%error, "disk-cleanup could not write tracked.json");
            self.store
                .log(&format!("ERROR writing tracked.json: {error}"));
        }
    }

    /// Answers `/disk-cleanup <args>`.
    pub fn command(&self, args: &str) -> String {
        let words: Vec<&str> = args.split_whitespace().collect();
        match words.as_slice() {
            [] | ["help"] => HELP.to_string(),
            ["status"] => self.status(),
            ["dry-run"] => {
                let entries = {
                    let _guard = lock(&self.lock);
                    self.store.load()
                };
                let plan = self.plan(&entries, now_secs());
                let mut out = format!(
                    "[disk-cleanup] dry run: quick would remove {} path(s); {} need confirmation (deep --yes).",
                    plan.auto.len(),
                    plan.confirm.len()
                );
                for e in &plan.auto {
                    out.push_str(&format!(
                        "\n  remove  {:<14} {}",
                        e.category,
                        e.path.display()
                    ));
                }
                for e in &plan.confirm {
                    out.push_str(&format!(
                        "\n  confirm {:<14} {}",
                        e.category,
                        e.path.display()
                    ));
                }
                out
            }
            ["quick"] => self.quick("command").line(),
            ["deep"] => {
                let (summary, confirm) = self.deep(false);
                let mut out = summary.line();
                if confirm.is_empty() {
                    out.push_str("\nNothing needs confirmation.");
                } else {
                    out.push_str(&format!(
                        "\n{} path(s) need your confirmation; run `/disk-cleanup deep --yes` to remove them:",
                        confirm.len()
                    ));
                    for e in &confirm {
                        out.push_str(&format!(
                            "\n  {:<14} {:>10} {}",
                            e.category,
                            human(e.size),
                            e.path.display()
                        ));
                    }
                }
                out
            }
            ["deep", "--yes"] => self.deep(true).0.line(),
            ["track", path, category] => match self.track(Path::new(path), category, None) {
                Ok(entry) => format!(
                    "[disk-cleanup] Tracking {} as {}.",
                    entry.path.display(),
                    entry.category
                ),
                Err(why) => format!("[disk-cleanup] Not tracked: {why}"),
            },
            ["forget", path] => {
                if self.forget(Path::new(path)) {
                    format!("[disk-cleanup] Stopped tracking {path}; the file was left in place.")
                } else {
                    format!("[disk-cleanup] {path} was not tracked.")
                }
            }
            [other, ..] => format!("Unknown subcommand: {other}\n{HELP}"),
        }
    }

    fn status(&self) -> String {
        let entries = {
            let _guard = lock(&self.lock);
            self.store.load()
        };
        if entries.is_empty() {
            return "[disk-cleanup] Nothing is tracked.".into();
        }
        let mut by_category: std::collections::BTreeMap<&str, (usize, u64)> = Default::default();
        for e in &entries {
            let slot = by_category.entry(e.category.as_str()).or_default();
            slot.0 += 1;
            slot.1 += e.size;
        }
        let mut out = format!("[disk-cleanup] {} tracked path(s):", entries.len());
        for (category, (count, bytes)) in &by_category {
            out.push_str(&format!(
                "\n  {category:<14} {count:>5} {:>10}",
                human(*bytes)
            ));
        }
        let mut largest: Vec<&Entry> = entries.iter().collect();
        largest.sort_by_key(|e| std::cmp::Reverse(e.size));
        out.push_str("\nLargest:");
        for e in largest.into_iter().take(10) {
            out.push_str(&format!("\n  {:>10} {}", human(e.size), e.path.display()));
        }
        out
    }

    /// The paths a call may create: `path` of write_file and patch (and files a patch adds),
    /// absolute or `~` words of a terminal command.
    fn candidates(call: &ToolCallInfo<'_>) -> Vec<PathBuf> {
        let args: &Map<String, Value> = call.arguments;
        let mut out = Vec::new();
        match call.underlying_tool {
            "write_file" | "patch" => {
                if let Some(Value::String(p)) = args.get("path") {
                    out.push(PathBuf::from(p));
                }
                if let Some(Value::String(text)) = args.get("patch") {
                    for line in text.lines() {
                        if let Some(p) = line.strip_prefix("*** Add File:") {
                            out.push(PathBuf::from(p.trim()));
                        }
                    }
                }
            }
            "terminal" => {
                if let Some(Value::String(command)) = args.get("command") {
                    for word in command.split(|c: char| c.is_whitespace() || ";|&()<>".contains(c))
                    {
                        let word = word.trim_matches(|c| c == '"' || c == '\'' || c == '`');
                        if word.starts_with('/') || word.starts_with("~/") {
                            out.push(PathBuf::from(word));
                        }
                    }
                }
            }
            _ => {}
        }
        out
    }
}

impl Hook for DiskCleanup {
    fn name(&self) -> &str {
        NAME
    }

    fn pre_tool_call(&self, call: &ToolCallInfo<'_>) -> PreToolDecision {
        if WATCHED_TOOLS.contains(&call.underlying_tool) {
            let seen: Vec<(PathBuf, bool)> = Self::candidates(call)
                .into_iter()
                .map(|p| {
                    let existed = std::fs::symlink_metadata(&p).is_ok();
                    (p, existed)
                })
                .collect();
            if !seen.is_empty() {
                lock(&self.before).insert(call.call_id.to_string(), seen);
            }
        }
        PreToolDecision::Continue
    }

    fn post_tool_call(&self, call: &ToolCallInfo<'_>, status: CallStatus, _result: &ToolResult) {
        let Some(seen) = lock(&self.before).remove(call.call_id) else {
            return;
        };
        if status != CallStatus::Ok {
            return;
        }
        let root = call
            .agent_path
            .first()
            .map_or(call.session_id, String::as_str);
        for (path, existed) in seen {
            if existed || std::fs::symlink_metadata(&path).is_err() {
                continue;
            }
            // Out-of-scope files are simply not ours: no log line for every path a shell names.
            let Ok(real) = self.scope.check(&path) else {
                continue;
            };
            let Some(category) = self.scope.guess_category(&real) else {
                continue;
            };
            if self.track(&real, category, Some(root)).is_ok() {
                lock(&self.sessions).insert(root.to_string());
            }
        }
    }

    fn on_session_end(&self, session_id: &str, agent_path: &[String], _reason: &str) {
        if agent_path.len() > 1 {
            return;
        }
        if !lock(&self.sessions).remove(session_id) {
            return;
        }
        let summary = self.quick("session_end");
        self.store
            .log(&format!("AUTO_QUICK (session_end) {}", summary.line()));
        tracing::info!(session = session_id, "{}", summary.line());
    }
}

/// The size of a path without following symlinks (a folder: its files, walked without links).
fn size_of(path: &Path, meta: &std::fs::Metadata) -> u64 {
    if !meta.is_dir() {
        return meta.len();
    }
    let mut total = 0;
    let mut stack = vec![path.to_path_buf()];
    let mut budget = 100_000usize;
    while let Some(dir) = stack.pop() {
        let Ok(children) = std::fs::read_dir(&dir) else {
            continue;
        };
        for child in children.flatten() {
            budget = budget.saturating_sub(1);
            if budget == 0 {
                return total;
            }
            match child.file_type() {
                Ok(t) if t.is_dir() => stack.push(child.path()),
                Ok(t) if t.is_file() => total += child.metadata().map_or(0, |m| m.len()),
                _ => {}
            }
        }
    }
    total
}

/// Bytes in words (`1.5 MB`).
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}
