//! The bundled `achievements` plugin: a dashboard tab of tiered badges ([`badges`]) computed
//! from troupe's own session store ([`stats`]). A scan reads each session's activity summed up
//! in the store ([`crate::sessions::SessionStore::activity`]), never whole transcripts, and
//! only for sessions whose (started, last active) fingerprint changed since the stats kept from
//! the last scan ([`history`]). The first scan runs in the background and publishes what it has
//! every [`PUBLISH_EVERY`] sessions, so the page shows partial results at once and never waits.
//! Reached at `/api/plugins/achievements/…` ([`crate::http::plugin_tabs`]).

pub mod badges;
pub mod history;
pub mod stats;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Value, json};
use troupe_tools::sync::lock;

use super::dashboard::{Assets, DashboardPart, Route};
use crate::sessions::{SessionStore, SessionStoreError};
use badges::{Standing, TIERS, catalog};
use history::{StateDir, Unlock};
use stats::{SessionStats, Totals};

/// The plugin's name.
pub const NAME: &str = "achievements";

/// Sessions read between two publications of partial results.
pub const PUBLISH_EVERY: usize = 250;

/// Milliseconds a scan rests between two batches (default 0), so a scan of a large store on a
/// busy server can be made gentler on the database.
pub const PAUSE_VAR: &str = "TROUPE_ACHIEVEMENTS_SCAN_PAUSE_MS";

const PAGE_JS: &str = include_str!("page.js");
const PAGE_CSS: &str = include_str!("page.css");

/// The tab as a dashboard part: its assets are compiled in and troupe answers its routes.
pub fn dashboard_part() -> DashboardPart {
    let route = |method: &str, path: &str| Route {
        method: method.into(),
        path: path.into(),
        command: None,
    };
    DashboardPart {
        label: "Achievements".into(),
        entry: "page.js".into(),
        styles: vec!["page.css".into()],
        assets: Assets::BuiltIn,
        routes: vec![
            route("GET", "achievements"),
            route("GET", "scan-status"),
            route("GET", "recent-unlocks"),
            route("GET", "sessions/{id}/badges"),
            route("POST", "rescan"),
            route("POST", "reset-state"),
        ],
    }
}

/// A compiled-in asset of the tab: (media type, body).
pub fn asset(name: &str) -> Option<(&'static str, &'static [u8])> {
    match name {
        "page.js" => Some(("text/javascript; charset=utf-8", PAGE_JS.as_bytes())),
        "page.css" => Some(("text/css; charset=utf-8", PAGE_CSS.as_bytes())),
        _ => None,
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A scan under way.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Progress {
    /// When it started (ms since the epoch).
    pub started_at: i64,
    /// Sessions in the store.
    pub sessions_total: u64,
    /// Sessions whose stats must be read (new or changed).
    pub to_read: u64,
    /// Of those, read so far.
    pub sessions_read: u64,
    /// Sessions whose kept stats were reused.
    pub sessions_reused: u64,
    /// Partial results published so far.
    pub publications: u64,
}

/// A finished scan.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// Its figures when it ended.
    #[serde(flatten)]
    pub progress: Progress,
    /// Kept stats dropped because their session is gone.
    pub sessions_removed: u64,
    /// When it ended.
    pub finished_at: i64,
    /// How long it took.
    pub took_ms: u64,
    /// Of that, waiting on the session store (fingerprints and activity).
    pub store_ms: u64,
    /// Of that, writing the kept stats.
    pub save_ms: u64,
}

#[derive(Debug, Default)]
struct Inner {
    stats: HashMap<String, SessionStats>,
    unlocks: Vec<Unlock>,
    standings: Vec<Standing>,
    /// More sessions are still to be read.
    partial: bool,
    published_at: Option<i64>,
    current: Option<Progress>,
    last: Option<Report>,
    scans: u64,
    last_error: Option<String>,
}

/// The plugin's running part: the kept stats, the published badges and the scan. Shared.
#[derive(Debug)]
pub struct Achievements {
    store: SessionStore,
    state: StateDir,
    inner: Mutex<Inner>,
    scanning: AtomicBool,
    /// Bumped by a reset: a scan that started before it stops publishing.
    generation: AtomicU64,
    pause: Duration,
}

impl Achievements {
    /// The plugin over `store`, keeping its files under `home`; reads what an earlier run kept.
    /// Nothing is scanned until [`Achievements::rescan`].
    pub fn new(store: SessionStore, home: &std::path::Path) -> Arc<Achievements> {
        let state = StateDir::new(home);
        let pause = std::env::var(PAUSE_VAR)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or(Duration::ZERO, |ms| Duration::from_millis(ms.min(60_000)));
        let inner = Inner {
            stats: state.load_stats(),
            unlocks: state.load_unlocks(),
            ..Inner::default()
        };
        let achievements = Arc::new(Achievements {
            store,
            state,
            inner: Mutex::new(inner),
            scanning: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            pause,
        });
        // What the kept stats already show, before any scan.
        {
            let mut inner = lock(&achievements.inner);
            inner.partial = true;
            inner.standings = standings(&inner.stats);
        }
        achievements
    }

    /// Starts a scan in the background; `false` when one is already running.
    pub fn rescan(self: &Arc<Self>) -> bool {
        if self.scanning.swap(true, Ordering::SeqCst) {
            return false;
        }
        let this = Arc::clone(self);
        tokio::spawn(async move {
            let generation = this.generation.load(Ordering::SeqCst);
            let result = this.scan(generation).await;
            let mut inner = lock(&this.inner);
            inner.current = None;
            match result {
                Ok(Some(report)) => {
                    tracing::info!(
                        read = report.progress.sessions_read,
                        reused = report.progress.sessions_reused,
                        took_ms = report.took_ms,
                        "achievements: scan done"
                    );
                    inner.last = Some(report);
                    inner.scans += 1;
                    inner.last_error = None;
                }
                Ok(None) => {}
                Err(error) => {
                    tracing::warn!(%error, "achievements: scan failed");
                    inner.last_error = Some(error.to_string());
                }
            }
            drop(inner);
            this.scanning.store(false, Ordering::SeqCst);
        });
        true
    }

    /// Whether a scan is running.
    pub fn is_scanning(&self) -> bool {
        self.scanning.load(Ordering::SeqCst)
    }

    /// One scan; `None` when a reset cut it short.
    async fn scan(&self, generation: u64) -> Result<Option<Report>, SessionStoreError> {
        let clock = Instant::now();
        let mut in_store = Duration::ZERO;
        let fingerprints = self.store.fingerprints().await?;
        in_store += clock.elapsed();
        let (to_read, removed) = {
            let mut inner = lock(&self.inner);
            let present: std::collections::HashSet<&str> =
                fingerprints.iter().map(|(id, _)| id.as_str()).collect();
            let before = inner.stats.len();
            inner.stats.retain(|id, _| present.contains(id.as_str()));
            let removed = (before - inner.stats.len()) as u64;
            let to_read: Vec<String> = fingerprints
                .iter()
                .filter(|(id, fp)| inner.stats.get(id).is_none_or(|s| s.fingerprint != *fp))
                .map(|(id, _)| id.clone())
                .collect();
            inner.current = Some(Progress {
                started_at: now_ms(),
                sessions_total: fingerprints.len() as u64,
                to_read: to_read.len() as u64,
                sessions_read: 0,
                sessions_reused: (fingerprints.len() - to_read.len()) as u64,
                publications: 0,
            });
            inner.partial = !to_read.is_empty();
            (to_read, removed)
        };
        let batches = to_read.len().div_ceil(PUBLISH_EVERY);
        for (n, batch) in to_read.chunks(PUBLISH_EVERY).enumerate() {
            let asked = Instant::now();
            let read = self.store.activity(batch).await?;
            in_store += asked.elapsed();
            {
                let mut inner = lock(&self.inner);
                if self.generation.load(Ordering::SeqCst) != generation {
                    return Ok(None);
                }
                for activity in &read {
                    inner
                        .stats
                        .insert(activity.summary.id.clone(), SessionStats::of(activity));
                }
                if let Some(progress) = &mut inner.current {
                    progress.sessions_read += batch.len() as u64;
                    progress.publications += 1;
                }
                inner.partial = n + 1 < batches;
                self.publish(&mut inner);
            }
            if !self.pause.is_zero() && n + 1 < batches {
                tokio::time::sleep(self.pause).await;
            }
        }
        let mut inner = lock(&self.inner);
        if self.generation.load(Ordering::SeqCst) != generation {
            return Ok(None);
        }
        inner.partial = false;
        if to_read.is_empty() {
            self.publish(&mut inner);
        }
        let saving = Instant::now();
        if (!to_read.is_empty() || removed > 0)
            && let Err(error) = self.state.save_stats(&inner.stats)
        {
            tracing::warn!(%error, dir = %self.state.path().display(), "achievements: cannot keep the per-session stats");
        }
        let saved = saving.elapsed();
        let progress = inner.current.clone().unwrap_or_default();
        Ok(Some(Report {
            progress,
            sessions_removed: removed,
            finished_at: now_ms(),
            took_ms: millis(clock.elapsed()),
            store_ms: millis(in_store),
            save_ms: millis(saved),
        }))
    }

    /// Recomputes the badges from the kept stats and records tiers reached for the first time.
    fn publish(&self, inner: &mut Inner) {
        inner.standings = standings(&inner.stats);
        inner.published_at = Some(now_ms());
        let at = now_ms();
        let mut changed = false;
        for standing in &inner.standings {
            let Some(top) = standing.tier else { continue };
            for tier in &TIERS[..=top] {
                let known = inner
                    .unlocks
                    .iter()
                    .any(|u| u.badge == standing.id && u.tier == *tier);
                if !known {
                    inner.unlocks.push(Unlock {
                        badge: standing.id.to_string(),
                        tier: (*tier).to_string(),
                        at,
                        value: standing.value,
                    });
                    changed = true;
                }
            }
        }
        if changed && let Err(error) = self.state.save_unlocks(&inner.unlocks) {
            tracing::warn!(%error, dir = %self.state.path().display(), "achievements: cannot keep the unlock history");
        }
    }

    /// `GET achievements`: every card as published now, with the scan's state.
    pub fn achievements(&self) -> Value {
        let inner = lock(&self.inner);
        let mut counts: HashMap<String, u64> = HashMap::new();
        let cards: Vec<Value> = catalog()
            .iter()
            .zip(&inner.standings)
            .map(|(badge, standing)| {
                let mut card = badge.card(standing);
                if let (Some(tier), Value::Object(map)) = (standing.tier, &mut card) {
                    let at = inner
                        .unlocks
                        .iter()
                        .find(|u| u.badge == badge.id && u.tier == TIERS[tier])
                        .map(|u| u.at);
                    map.insert("unlocked_at".into(), json!(at));
                }
                let state = card["state"].as_str().unwrap_or("discovered").to_string();
                *counts.entry(state).or_default() += 1;
                card
            })
            .collect();
        json!({
            "badges": cards,
            "counts": {
                "total": catalog().len(),
                "unlocked": counts.get("unlocked").copied().unwrap_or(0),
                "discovered": counts.get("discovered").copied().unwrap_or(0),
                "secret": counts.get("secret").copied().unwrap_or(0),
            },
            "tiers": TIERS,
            "scan": self.scan_summary(&inner),
        })
    }

    fn scan_summary(&self, inner: &Inner) -> Value {
        json!({
            "state": if self.is_scanning() { "scanning" } else { "idle" },
            "partial": inner.partial,
            "sessions_counted": inner.stats.len(),
            "sessions_total": inner.current.as_ref().map(|p| p.sessions_total),
            "published_at": inner.published_at,
        })
    }

    /// `GET scan-status`: the scan under way, the last one finished, the last failure.
    pub fn scan_status(&self) -> Value {
        let inner = lock(&self.inner);
        let mut out = self.scan_summary(&inner);
        if let Value::Object(map) = &mut out {
            map.insert("current".into(), json!(inner.current));
            map.insert("last_scan".into(), json!(inner.last));
            map.insert("scans_completed".into(), json!(inner.scans));
            map.insert("last_error".into(), json!(inner.last_error));
            map.insert("publish_every".into(), json!(PUBLISH_EVERY));
        }
        out
    }

    /// `GET recent-unlocks`: the latest `limit` tiers reached, newest first.
    pub fn recent_unlocks(&self, limit: usize) -> Value {
        let inner = lock(&self.inner);
        let recent: Vec<Value> = inner
            .unlocks
            .iter()
            .rev()
            .take(limit)
            .map(|u| {
                let name = catalog()
                    .iter()
                    .find(|b| b.id == u.badge)
                    .map_or(u.badge.as_str(), |b| b.name);
                json!({"badge": u.badge, "name": name, "tier": u.tier, "at": u.at, "value": u.value})
            })
            .collect();
        json!({"unlocks": recent, "total": inner.unlocks.len()})
    }

    /// `GET sessions/{id}/badges`: what one session adds to each badge (read fresh from the
    /// store). Secret badges not yet unlocked stay hidden.
    pub async fn session_badges(&self, id: &str) -> Result<Value, SessionStoreError> {
        let read = self.store.activity(&[id.to_string()]).await?;
        let Some(activity) = read.first() else {
            return Err(SessionStoreError::NotFound(id.to_string()));
        };
        let own = SessionStats::of(activity);
        let totals = Totals::of([&own]);
        let inner = lock(&self.inner);
        let badges: Vec<Value> = catalog()
            .iter()
            .zip(&inner.standings)
            .filter_map(|(badge, overall)| {
                let mine = badge.standing(&totals);
                if mine.value == 0 || (badge.secret && overall.tier.is_none()) {
                    return None;
                }
                Some(json!({
                    "id": badge.id,
                    "name": badge.name,
                    "how": badge.how,
                    "value": mine.value,
                    "tier_alone": mine.tier.map(|t| TIERS[t]),
                }))
            })
            .collect();
        Ok(json!({"session_id": activity.summary.id, "badges": badges}))
    }

    /// `POST reset-state`: forgets the unlock history and the kept stats (in memory and on
    /// disk); a scan under way stops publishing. The badges count again from the next scan.
    pub fn reset(&self) -> std::io::Result<()> {
        self.generation.fetch_add(1, Ordering::SeqCst);
        let mut inner = lock(&self.inner);
        inner.stats.clear();
        inner.unlocks.clear();
        inner.standings = standings(&inner.stats);
        inner.partial = false;
        inner.published_at = None;
        inner.current = None;
        inner.last = None;
        self.state.clear()
    }
}

fn standings(stats: &HashMap<String, SessionStats>) -> Vec<Standing> {
    let totals = Totals::of(stats.values());
    catalog().iter().map(|b| b.standing(&totals)).collect()
}
