//! The badges: each reads one figure of the [`Totals`] and has five tiers (bronze, silver,
//! gold, diamond, olympian) at rising thresholds. A badge is `unlocked` once its figure reaches
//! bronze, `discovered` before that, and `secret` (its card hidden) until a secret badge is
//! unlocked.

use serde::Serialize;
use serde_json::{Value, json};

use super::stats::Totals;

/// The tiers, lowest first.
pub const TIERS: [&str; 5] = ["bronze", "silver", "gold", "diamond", "olympian"];

/// One badge of the catalog.
pub struct Badge {
    /// Its id (stable: the unlock history is keyed by it).
    pub id: &'static str,
    /// Its name on the card.
    pub name: &'static str,
    /// Its family: tools, subagents, board, approvals, models, time, streaks, doors.
    pub category: &'static str,
    /// How its figure is computed, in words for the card.
    pub how: &'static str,
    /// The figure needed for each tier, rising.
    pub tiers: [u64; 5],
    /// Hidden until unlocked.
    pub secret: bool,
    /// The figure it reads.
    pub metric: fn(&Totals) -> u64,
}

/// A badge as evaluated against some totals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Standing {
    /// The badge's id.
    pub id: &'static str,
    /// The figure now.
    pub value: u64,
    /// The highest tier reached (index into [`TIERS`]), if any.
    pub tier: Option<usize>,
}

impl Badge {
    /// Where `totals` leave this badge.
    pub fn standing(&self, totals: &Totals) -> Standing {
        let value = (self.metric)(totals);
        let tier = self.tiers.iter().rposition(|need| value >= *need);
        Standing {
            id: self.id,
            value,
            tier,
        }
    }

    /// The card as JSON: what is shown of a secret badge depends on whether it is unlocked.
    pub fn card(&self, standing: &Standing) -> Value {
        let state = match (standing.tier, self.secret) {
            (Some(_), _) => "unlocked",
            (None, true) => "secret",
            (None, false) => "discovered",
        };
        let next = standing
            .tier
            .map_or(Some(0), |t| (t + 1 < TIERS.len()).then_some(t + 1))
            .map(|i| json!({"tier": TIERS[i], "needs": self.tiers[i]}));
        if state == "secret" {
            return json!({
                "id": self.id,
                "state": state,
                "category": self.category,
                "name": "Secret badge",
                "how": "A secret: its card shows what it counts once you earn it.",
                "tier": null,
            });
        }
        json!({
            "id": self.id,
            "state": state,
            "name": self.name,
            "category": self.category,
            "how": self.how,
            "value": standing.value,
            "tier": standing.tier.map(|t| TIERS[t]),
            "thresholds": TIERS.iter().zip(self.tiers).map(|(tier, need)| json!({"tier": tier, "needs": need})).collect::<Vec<_>>(),
            "next": next,
        })
    }
}

const TERMINAL: &[&str] = &["terminal", "process", "execute_code"];
const READING: &[&str] = &["read_file", "search_files"];
const WRITING: &[&str] = &["write_file", "patch"];

/// Every badge, in the order the tab shows them.
pub fn catalog() -> &'static [Badge] {
    CATALOG
}

macro_rules! badge {
    ($id:literal, $name:literal, $category:literal, $how:literal, $tiers:expr, $metric:expr) => {
        Badge {
            id: $id,
            name: $name,
            category: $category,
            how: $how,
            tiers: $tiers,
            secret: false,
            metric: $metric,
        }
    };
    (secret $id:literal, $name:literal, $category:literal, $how:literal, $tiers:expr, $metric:expr) => {
        Badge {
            id: $id,
            name: $name,
            category: $category,
            how: $how,
            tiers: $tiers,
            secret: true,
            metric: $metric,
        }
    };
}

const CATALOG: &[Badge] = &[
    // Tools.
    badge!(
        "first-steps",
        "First Steps",
        "tools",
        "Top-level sessions started, any door.",
        [1, 10, 100, 1_000, 10_000],
        |t| t.top_level
    ),
    badge!(
        "tool-time",
        "Tool Time",
        "tools",
        "Tool results received across all sessions and subagents.",
        [10, 100, 1_000, 10_000, 100_000],
        |t| t.tool_calls
    ),
    badge!(
        "toolbox",
        "Full Toolbox",
        "tools",
        "Distinct tools that returned a result at least once.",
        [3, 6, 10, 15, 25],
        |t| t.tools.len() as u64
    ),
    badge!(
        "shell-hand",
        "Shell Hand",
        "tools",
        "Calls of terminal, process and execute_code.",
        [5, 50, 500, 5_000, 50_000],
        |t| t.tool_count(TERMINAL, &[])
    ),
    badge!(
        "reader",
        "Close Reader",
        "tools",
        "Calls of read_file and search_files.",
        [10, 100, 1_000, 10_000, 100_000],
        |t| t.tool_count(READING, &[])
    ),
    badge!(
        "author",
        "Author",
        "tools",
        "Calls of write_file and patch.",
        [5, 50, 500, 5_000, 50_000],
        |t| t.tool_count(WRITING, &[])
    ),
    badge!(
        "web-walker",
        "Web Walker",
        "tools",
        "Calls of web_* and browser_* tools.",
        [5, 50, 500, 5_000, 50_000],
        |t| t.tool_count(&[], &["web_", "browser_"])
    ),
    badge!(
        "memory-keeper",
        "Memory Keeper",
        "tools",
        "Calls of the memory tool.",
        [3, 30, 300, 3_000, 30_000],
        |t| t.tool_count(&["memory"], &[])
    ),
    badge!(
        "planner",
        "Planner",
        "tools",
        "Calls of the todo tool.",
        [3, 30, 300, 3_000, 30_000],
        |t| t.tool_count(&["todo"], &[])
    ),
    badge!(
        "historian",
        "Historian",
        "tools",
        "Calls of session_search, looking back through stored sessions.",
        [1, 10, 100, 1_000, 10_000],
        |t| t.tool_count(&["session_search"], &[])
    ),
    badge!(
        "tool-chain",
        "Tool Chain",
        "tools",
        "Most tool results in one session.",
        [5, 20, 50, 100, 250],
        |t| t.busiest_session_tools
    ),
    badge!(
        "plugged-in",
        "Plugged In",
        "tools",
        "Calls of MCP tools (names with a `__` toolset prefix).",
        [5, 50, 500, 5_000, 50_000],
        |t| t
            .tools
            .iter()
            .filter(|(n, _)| n.contains("__"))
            .map(|(_, c)| c)
            .sum()
    ),
    badge!(
        "chatterbox",
        "Chatterbox",
        "tools",
        "Messages stored across all sessions.",
        [50, 500, 5_000, 50_000, 500_000],
        |t| t.messages
    ),
    badge!(
        "deep-dive",
        "Deep Dive",
        "tools",
        "Most messages in one session.",
        [20, 50, 100, 250, 500],
        |t| t.longest_session
    ),
    // Subagent trees.
    badge!(
        "team-lead",
        "Team Lead",
        "subagents",
        "Subagent sessions started by delegation.",
        [1, 10, 100, 1_000, 10_000],
        |t| t.subagents
    ),
    badge!(
        "delegator",
        "Delegator",
        "subagents",
        "Calls of delegate_task.",
        [1, 10, 100, 1_000, 10_000],
        |t| t.tool_count(&["delegate_task"], &[])
    ),
    badge!(
        "chain-of-command",
        "Chain of Command",
        "subagents",
        "Deepest subagent level reached (1 = a subagent of a top-level session).",
        [1, 2, 3, 4, 5],
        |t| t.max_depth
    ),
    badge!(
        "full-house",
        "Full House",
        "subagents",
        "Most sessions in one tree, its top session included.",
        [2, 4, 8, 16, 32],
        |t| t.largest_tree
    ),
    badge!(
        "orchestra",
        "Orchestra",
        "subagents",
        "Trees with at least one subagent.",
        [1, 10, 50, 200, 1_000],
        |t| t.trees_with_subagents
    ),
    // Board work.
    badge!(
        "worker-bee",
        "Worker Bee",
        "board",
        "Sessions run by board workers (origin `worker`).",
        [1, 10, 100, 1_000, 5_000],
        |t| t.origin("worker")
    ),
    badge!(
        "board-regular",
        "Board Regular",
        "board",
        "Calls of kanban_* tools.",
        [5, 50, 500, 5_000, 50_000],
        |t| t.tool_count(&[], &["kanban_"])
    ),
    badge!(
        "closer",
        "Closer",
        "board",
        "Calls of kanban_complete: tasks finished.",
        [1, 10, 100, 1_000, 10_000],
        |t| t.tool_count(&["kanban_complete"], &[])
    ),
    badge!(
        "task-maker",
        "Task Maker",
        "board",
        "Calls of kanban_create.",
        [1, 10, 100, 1_000, 10_000],
        |t| t.tool_count(&["kanban_create"], &[])
    ),
    badge!(
        "honest-blocker",
        "Honest Blocker",
        "board",
        "Calls of kanban_block: tasks stopped with a reason.",
        [1, 5, 25, 100, 500],
        |t| t.tool_count(&["kanban_block"], &[])
    ),
    // Approvals.
    badge!(
        "gatekeeper",
        "Gatekeeper",
        "approvals",
        "Approvals a person was asked for (from the stored event logs).",
        [1, 10, 100, 1_000, 5_000],
        |t| t.approvals
    ),
    badge!(
        "checks-and-balances",
        "Checks and Balances",
        "approvals",
        "Sessions that asked for at least one approval.",
        [1, 5, 25, 100, 500],
        |t| t.sessions_with_approvals
    ),
    // Models and providers.
    badge!(
        "polyglot",
        "Polyglot",
        "models",
        "Distinct models sessions talked to.",
        [2, 3, 5, 8, 12],
        |t| t.models.len() as u64
    ),
    badge!(
        "provider-hopper",
        "Provider Hopper",
        "models",
        "Distinct providers, read from the model names (`openai/…`, `ollama:…`, `claude-…`).",
        [2, 3, 4, 6, 8],
        |t| t.providers.len() as u64
    ),
    badge!(
        "loyal",
        "Loyal",
        "models",
        "Most sessions with one model.",
        [10, 100, 1_000, 5_000, 20_000],
        |t| t.models.values().copied().max().unwrap_or(0)
    ),
    badge!(
        "token-spender",
        "Big Spender",
        "models",
        "Prompt and generated tokens, all sessions.",
        [10_000, 100_000, 1_000_000, 10_000_000, 100_000_000],
        |t| t.tokens
    ),
    // Time of day.
    badge!(
        "night-owl",
        "Night Owl",
        "time",
        "Sessions started between 00:00 and 04:59 UTC.",
        [1, 10, 50, 200, 1_000],
        |t| t.night_sessions
    ),
    badge!(
        "early-bird",
        "Early Bird",
        "time",
        "Sessions started between 05:00 and 07:59 UTC.",
        [1, 10, 50, 200, 1_000],
        |t| t.early_sessions
    ),
    badge!(
        "weekend-warrior",
        "Weekend Warrior",
        "time",
        "Sessions started on a Saturday or Sunday (UTC).",
        [1, 10, 50, 200, 1_000],
        |t| t.weekend_sessions
    ),
    badge!(
        "round-the-clock",
        "Round the Clock",
        "time",
        "Distinct hours of the day (UTC) a session started in.",
        [4, 8, 12, 18, 24],
        |t| t.hours
    ),
    badge!(
        "marathon",
        "Marathon",
        "time",
        "Longest session from its start to its last write, in minutes.",
        [10, 30, 60, 180, 480],
        |t| t.longest_minutes
    ),
    // Streaks.
    badge!(
        "streak",
        "On a Roll",
        "streaks",
        "Longest run of consecutive days (UTC) with a session.",
        [2, 3, 7, 14, 30],
        |t| t.longest_streak
    ),
    badge!(
        "regular",
        "Regular",
        "streaks",
        "Days (UTC) with at least one session.",
        [2, 7, 30, 100, 365],
        |t| t.active_days
    ),
    badge!(
        "busy-day",
        "Busy Day",
        "streaks",
        "Most sessions started on one day (UTC), subagents included.",
        [5, 20, 50, 100, 250],
        |t| t.busiest_day
    ),
    // Doors.
    badge!(
        "many-doors",
        "Many Doors",
        "doors",
        "Distinct ways sessions came in: chat, http, worker, subagent, api.",
        [1, 2, 3, 4, 5],
        |t| t.origins.len() as u64
    ),
    badge!(
        "web-door",
        "Front Desk",
        "doors",
        "Sessions opened over the HTTP API (origin `http`).",
        [1, 10, 100, 1_000, 10_000],
        |t| t.origin("http")
    ),
    badge!(
        "terminal-door",
        "Terminal Regular",
        "doors",
        "Sessions opened with `troupe chat` (origin `chat`).",
        [1, 10, 100, 1_000, 10_000],
        |t| t.origin("chat")
    ),
    // Secrets.
    badge!(secret "midnight-oil", "Midnight Oil", "time", "Sessions started between 03:00 and 03:59 UTC.", [1, 3, 10, 30, 100], |t| t.three_am_sessions),
    badge!(secret "quiet-one", "The Quiet One", "tools", "Sessions that called no tool at all.", [1, 10, 100, 1_000, 10_000], |t| t.toolless_sessions),
    badge!(secret "hydra", "Hydra", "subagents", "Trees two or more subagent levels deep.", [1, 5, 20, 50, 200], |t| t.deep_trees),
];

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn the_catalog_is_large_distinct_and_rising() {
        assert!(catalog().len() >= 40, "{} badges", catalog().len());
        let mut ids = HashSet::new();
        for badge in catalog() {
            assert!(ids.insert(badge.id), "{} twice", badge.id);
            assert!(
                badge.tiers.windows(2).all(|w| w[0] < w[1]),
                "{}: tiers must rise",
                badge.id
            );
            assert!(!badge.how.is_empty());
        }
        assert!(catalog().iter().any(|b| b.secret));
    }

    #[test]
    fn states_follow_the_figure() {
        let badge = catalog().iter().find(|b| b.id == "team-lead").unwrap();
        let mut totals = Totals::default();
        let s = badge.standing(&totals);
        assert_eq!(s.tier, None);
        assert_eq!(badge.card(&s)["state"], "discovered");
        totals.subagents = 150;
        let s = badge.standing(&totals);
        assert_eq!(s.tier, Some(2));
        let card = badge.card(&s);
        assert_eq!(card["tier"], "gold");
        assert_eq!(card["next"]["needs"], 1_000);
        let secret = catalog().iter().find(|b| b.id == "hydra").unwrap();
        let card = secret.card(&secret.standing(&Totals::default()));
        assert_eq!(card["state"], "secret");
        assert_eq!(card["name"], "Secret badge");
    }
}
