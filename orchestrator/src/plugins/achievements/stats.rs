//! What the badges are computed from: one [`SessionStats`] per stored session (kept between
//! scans, keyed by the session's fingerprint) and the [`Totals`] summed over any set of them
//! (all sessions for the tab, one session for its own badges).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use crate::sessions::{Fingerprint, SessionActivity};

const DAY_MS: i64 = 86_400_000;
const HOUR_MS: i64 = 3_600_000;

/// One session, reduced to what the badges read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionStats {
    /// When it started and was last written: the stats are read again when this changes.
    pub fingerprint: Fingerprint,
    /// Its tree's top session.
    pub root_id: String,
    /// 0 for a top-level session.
    pub depth: u32,
    /// `chat`, `http`, `worker`, `subagent` or `api`.
    pub origin: String,
    /// Its model as stored.
    pub model: String,
    /// Messages stored.
    pub messages: u64,
    /// Prompt and generated tokens.
    pub tokens: u64,
    /// Tool name -> results received.
    pub tools: BTreeMap<String, u64>,
    /// Approvals asked of a person.
    pub approvals: u64,
}

impl SessionStats {
    /// The stats of one session as the store sums it up.
    pub fn of(activity: &SessionActivity) -> SessionStats {
        let s = &activity.summary;
        SessionStats {
            fingerprint: Fingerprint {
                started: s.created_at,
                last_active: s.updated_at,
            },
            root_id: s.root_id.clone(),
            depth: s.depth,
            origin: s.origin.clone(),
            model: s.model.clone(),
            messages: s.messages,
            tokens: s.usage.tokens(),
            tools: activity.tools.clone(),
            approvals: activity.approvals,
        }
    }

    /// Tool results received, all tools together.
    pub fn tool_calls(&self) -> u64 {
        self.tools.values().sum()
    }
}

/// The provider a model name points at: the part before `/` or `:` (`openai/gpt-4o`,
/// `ollama:llama3`), else the family its name starts with.
pub fn provider_of(model: &str) -> String {
    let model = model.trim().to_ascii_lowercase();
    if let Some((provider, _)) = model.split_once(['/', ':']) {
        return provider.to_string();
    }
    for (prefix, provider) in [
        ("gpt", "openai"),
        ("o1", "openai"),
        ("o3", "openai"),
        ("o4", "openai"),
        ("claude", "anthropic"),
        ("gemini", "google"),
        ("llama", "meta"),
        ("mistral", "mistral"),
        ("qwen", "qwen"),
        ("deepseek", "deepseek"),
    ] {
        if model.starts_with(prefix) {
            return provider.to_string();
        }
    }
    model
        .split(['-', '.', '_'])
        .next()
        .unwrap_or("")
        .to_string()
}

/// Figures summed over a set of sessions: what every badge's metric reads.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Totals {
    /// Sessions counted (subagents included).
    pub sessions: u64,
    /// Top-level sessions.
    pub top_level: u64,
    /// Subagent sessions.
    pub subagents: u64,
    /// Deepest subagent level.
    pub max_depth: u64,
    /// Most sessions in one tree.
    pub largest_tree: u64,
    /// Trees with at least one subagent.
    pub trees_with_subagents: u64,
    /// Trees two or more levels deep.
    pub deep_trees: u64,
    /// Messages stored.
    pub messages: u64,
    /// Most messages in one session.
    pub longest_session: u64,
    /// Tool results, all tools.
    pub tool_calls: u64,
    /// Most tool results in one session.
    pub busiest_session_tools: u64,
    /// Sessions that called no tool.
    pub toolless_sessions: u64,
    /// Tool name -> results.
    pub tools: BTreeMap<String, u64>,
    /// Approvals asked.
    pub approvals: u64,
    /// Sessions that asked at least one approval.
    pub sessions_with_approvals: u64,
    /// Origin -> sessions.
    pub origins: BTreeMap<String, u64>,
    /// Model -> sessions.
    pub models: BTreeMap<String, u64>,
    /// Providers seen.
    pub providers: BTreeSet<String>,
    /// Prompt and generated tokens.
    pub tokens: u64,
    /// Sessions started 00:00–04:59 UTC.
    pub night_sessions: u64,
    /// Sessions started 05:00–07:59 UTC.
    pub early_sessions: u64,
    /// Sessions started 03:00–03:59 UTC.
    pub three_am_sessions: u64,
    /// Sessions started on a Saturday or Sunday (UTC).
    pub weekend_sessions: u64,
    /// Distinct hours of the day (UTC) a session started in.
    pub hours: u64,
    /// Longest session from start to last write, in minutes.
    pub longest_minutes: u64,
    /// Days (UTC) with a session.
    pub active_days: u64,
    /// Longest run of consecutive active days.
    pub longest_streak: u64,
    /// Most sessions started on one day.
    pub busiest_day: u64,
}

impl Totals {
    /// Sums `sessions` up.
    pub fn of<'a>(sessions: impl IntoIterator<Item = &'a SessionStats>) -> Totals {
        let mut t = Totals::default();
        let mut trees: HashMap<&str, (u64, u64)> = HashMap::new();
        let mut hours = [false; 24];
        let mut days: BTreeMap<i64, u64> = BTreeMap::new();
        // Counted under borrowed names first: a scan sums thousands of sessions many times.
        let mut tools: HashMap<&str, u64> = HashMap::new();
        let mut origins: HashMap<&str, u64> = HashMap::new();
        let mut models: HashMap<&str, u64> = HashMap::new();
        for s in sessions {
            t.sessions += 1;
            if s.depth == 0 {
                t.top_level += 1;
            } else {
                t.subagents += 1;
            }
            t.max_depth = t.max_depth.max(u64::from(s.depth));
            let tree = trees.entry(s.root_id.as_str()).or_default();
            tree.0 += 1;
            tree.1 = tree.1.max(u64::from(s.depth));
            t.messages += s.messages;
            t.longest_session = t.longest_session.max(s.messages);
            let calls = s.tool_calls();
            t.tool_calls += calls;
            t.busiest_session_tools = t.busiest_session_tools.max(calls);
            if calls == 0 {
                t.toolless_sessions += 1;
            }
            for (tool, n) in &s.tools {
                *tools.entry(tool.as_str()).or_default() += n;
            }
            t.approvals += s.approvals;
            if s.approvals > 0 {
                t.sessions_with_approvals += 1;
            }
            *origins.entry(s.origin.as_str()).or_default() += 1;
            if !s.model.trim().is_empty() {
                *models.entry(s.model.as_str()).or_default() += 1;
            }
            t.tokens += s.tokens;
            let started = s.fingerprint.started;
            let hour = started.rem_euclid(DAY_MS) / HOUR_MS;
            if let Some(seen) = usize::try_from(hour).ok().and_then(|h| hours.get_mut(h)) {
                *seen = true;
            }
            if hour < 5 {
                t.night_sessions += 1;
            } else if hour < 8 {
                t.early_sessions += 1;
            }
            if hour == 3 {
                t.three_am_sessions += 1;
            }
            let day = started.div_euclid(DAY_MS);
            // 1970-01-01 was a Thursday: day 2 is Saturday, 3 Sunday.
            if matches!(day.rem_euclid(7), 2 | 3) {
                t.weekend_sessions += 1;
            }
            *days.entry(day).or_default() += 1;
            let minutes = (s.fingerprint.last_active - started).max(0) / 60_000;
            t.longest_minutes = t.longest_minutes.max(u64::try_from(minutes).unwrap_or(0));
        }
        t.tools = tools.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        t.origins = origins
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        t.providers = models
            .keys()
            .map(|m| provider_of(m))
            .filter(|p| !p.is_empty())
            .collect();
        t.models = models
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        for (size, depth) in trees.values() {
            t.largest_tree = t.largest_tree.max(*size);
            if *size > 1 {
                t.trees_with_subagents += 1;
            }
            if *depth >= 2 {
                t.deep_trees += 1;
            }
        }
        t.hours = hours.iter().filter(|h| **h).count() as u64;
        t.active_days = days.len() as u64;
        t.busiest_day = days.values().copied().max().unwrap_or(0);
        let (mut run, mut previous) = (0u64, None::<i64>);
        for day in days.keys() {
            run = match previous {
                Some(p) if p + 1 == *day => run + 1,
                _ => 1,
            };
            t.longest_streak = t.longest_streak.max(run);
            previous = Some(*day);
        }
        t
    }

    /// Results from tools whose name is one of `names` or starts with one of `prefixes`.
    pub fn tool_count(&self, names: &[&str], prefixes: &[&str]) -> u64 {
        self.tools
            .iter()
            .filter(|(tool, _)| {
                names.contains(&tool.as_str()) || prefixes.iter().any(|p| tool.starts_with(p))
            })
            .map(|(_, n)| n)
            .sum()
    }

    /// Sessions of `origin`.
    pub fn origin(&self, origin: &str) -> u64 {
        self.origins.get(origin).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(root: &str, depth: u32, started: i64, tools: &[(&str, u64)]) -> SessionStats {
        SessionStats {
            fingerprint: Fingerprint {
                started,
                last_active: started + 30 * 60_000,
            },
            root_id: root.into(),
            depth,
            origin: if depth == 0 { "chat" } else { "subagent" }.into(),
            model: "openai/gpt-4o".into(),
            messages: 4,
            tokens: 100,
            tools: tools.iter().map(|(t, n)| (t.to_string(), *n)).collect(),
            approvals: 0,
        }
    }

    #[test]
    fn totals_count_trees_hours_and_streaks() {
        // Day 20_000 (a Friday) 03:10, the next day, then a gap and one more day.
        let d = 20_000 * DAY_MS;
        let all = [
            session("a", 0, d + 3 * HOUR_MS + 600_000, &[("terminal", 3)]),
            session("a", 1, d + 3 * HOUR_MS + 700_000, &[("read_file", 1)]),
            session("a", 2, d + 3 * HOUR_MS + 800_000, &[]),
            session("b", 0, d + DAY_MS + 12 * HOUR_MS, &[("kanban_complete", 1)]),
            session("c", 0, d + 5 * DAY_MS + 6 * HOUR_MS, &[]),
        ];
        let t = Totals::of(&all);
        assert_eq!((t.sessions, t.top_level, t.subagents), (5, 3, 2));
        assert_eq!((t.max_depth, t.largest_tree, t.deep_trees), (2, 3, 1));
        assert_eq!(t.tool_calls, 5);
        assert_eq!(t.toolless_sessions, 2);
        assert_eq!(
            (t.night_sessions, t.early_sessions, t.three_am_sessions),
            (3, 1, 3)
        );
        assert_eq!((t.active_days, t.longest_streak, t.busiest_day), (3, 2, 3));
        assert_eq!(t.hours, 3);
        assert_eq!(t.longest_minutes, 30);
        assert_eq!(t.tool_count(&["terminal"], &["kanban_"]), 4);
        assert_eq!(t.providers.len(), 1);
    }

    #[test]
    fn providers_come_from_the_model_name() {
        assert_eq!(provider_of("openrouter/anthropic/claude"), "openrouter");
        assert_eq!(provider_of("ollama:llama3"), "ollama");
        assert_eq!(provider_of("claude-sonnet-4"), "anthropic");
        assert_eq!(provider_of("mock-model"), "mock");
    }
}
