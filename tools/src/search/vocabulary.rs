//! The domain vocabulary of the hybrid ranking: the actions and objects of software tools, in
//! groups of words and phrases that a person uses for the same thing ("remove" for delete, "pr"
//! for pull request). A query word found in a group brings the group's other entries into the
//! query as *expansions*, which score below the words typed (see [`EXPANSION_WEIGHT`]).
//!
//! The list is written once for the domain, from how tool APIs and their users name things
//! (CRUD verbs, version control, issue trackers, chat, browsers, databases, infrastructure,
//! observability); it is not tuned to particular queries. Each group is a set of interchangeable
//! entries; a word may sit in two groups when it has two senses ("open" an issue, "open" a page).
//! Entries are stemmed the way queries are, so "removing" finds the delete group too.

use std::collections::HashMap;
use std::sync::OnceLock;

use super::split::for_each_split_word;
use super::tokenize::stem;

/// Weight of an expansion relative to a typed word (1.0).
pub const EXPANSION_WEIGHT: f64 = 0.45;

/// How many of [`GROUPS`] come first and are actions (verbs of what a tool does); the rest are
/// objects. [`super::actions`] reads what a query asks a service to do from them.
pub const ACTION_GROUPS: usize = 54;

/// The groups, one string each, entries separated by `|`; an entry of several words is a phrase.
pub const GROUPS: &[&str] = &[
    // Actions: the CRUD verbs and their everyday variants.
    "create|add|new|make|insert|generate|provision|open|register|set up|initialize",
    "delete|remove|rm|erase|destroy|drop|purge|wipe|discard|uninstall|unset|clear",
    "get|fetch|read|retrieve|show|obtain|view|load|grab|display|return|see|look up|lookup|describe|inspect",
    "list|enumerate|ls|show all|browse|all",
    "update|edit|modify|patch|change|alter|replace|amend|rewrite|adjust|revise|set",
    "search|find|query|look for|locate|grep|filter|lookup|look up|discover",
    "send|post|publish|notify|deliver|announce|broadcast|dispatch|message|share",
    "reply|respond|answer",
    "run|execute|exec|invoke|call|trigger|perform|evaluate|eval",
    "start|launch|begin|boot|spin up|kick off|open",
    "stop|kill|terminate|halt|end|shut down|shutdown|abort|cancel",
    "restart|reboot|rerun|retry|relaunch|reload|refresh",
    "close|exit|quit|dismiss",
    "upload|attach|put",
    "download|export|pull|save as",
    "write|save|store|persist|put|record|dump",
    "copy|duplicate|clone|fork|replicate",
    "move|rename|relocate|transfer|migrate",
    "merge|combine|join|squash",
    "navigate|go to|goto|visit|browse|open|load",
    "click|press|tap",
    "type|fill|fill in|enter|input|key in",
    "hover|mouse over|mouseover",
    "scroll|page down|page up",
    "select|choose|pick",
    "drag|drag and drop",
    "wait|sleep|pause",
    "mute|silence|snooze|suppress|quiet",
    "enable|activate|turn on|switch on|unmute",
    "disable|deactivate|turn off|switch off",
    "toggle|flip|switch",
    "assign|allocate|delegate",
    "approve|accept|confirm|sign off",
    "reject|decline|deny|refuse",
    "resolve|fix|close|complete|finish|done",
    "comment|note|annotate|remark|feedback",
    "watch|monitor|observe|track|follow|subscribe",
    "schedule|plan|book|reserve",
    "check|verify|validate|test|inspect|audit",
    "compare|diff|difference",
    "count|stats|statistics|metrics|measure|size|usage",
    "summarize|summary|overview|digest",
    "translate|convert|transform",
    "analyze|analyse|profile|diagnose|debug|investigate|troubleshoot",
    "authenticate|login|log in|sign in|authorize",
    "emulate|simulate|mock",
    "react|reaction|emoji",
    "install|deploy|add",
    "sync|synchronize|refresh",
    "archive|backup|snapshot",
    "restore|recover|rollback|roll back|revert|undo",
    "scale|resize",
    "star|bookmark|favorite",
    "invite|add member",
    // Objects of software tools.
    "repository|repo|repos|project|codebase|code base",
    "pull request|pr|merge request|mr|change request|patch",
    "issue|ticket|bug|bug report|defect|problem",
    "branch|ref",
    "commit|changeset|revision",
    "tag|label|release",
    "file|files|document|attachment",
    "directory|folder|dir|path",
    "document|doc|docs|page|note|article",
    "documentation|docs|guide|manual|reference|tutorial|help",
    "message|chat|dm|direct message|text|post",
    "channel|room|chat|conversation|group",
    "thread|conversation|replies|discussion",
    "user|member|person|people|account|profile|contact",
    "team|group|org|organization|organisation|workspace",
    "database|db|datastore|data store|schema",
    "table|collection|relation",
    "record|row|entry|item|document|object",
    "query|sql|select",
    "page|tab|website|site|webpage|web page|url|link",
    "element|selector|component|node|widget",
    "screenshot|screen capture|screen shot|capture|image|picture",
    "email|mail|e mail|inbox",
    "calendar|event|meeting|appointment",
    "host|server|machine|instance|vm|node",
    "container|pod|docker",
    "cluster|kubernetes|k8s",
    "deployment|deploy|release|rollout",
    "pipeline|workflow|build|job|ci|ci cd|action",
    "test|tests|spec|check",
    "alert|alarm|monitor|incident|notification|page",
    "metric|metrics|measurement|stat|timeseries|time series",
    "log|logs|history|audit",
    "trace|traces|span|spans|apm",
    "dashboard|board|chart|graph",
    "feature flag|flag|feature toggle|toggle|feature switch",
    "secret|credential|credentials|token|password|api key",
    "config|configuration|settings|setting|preference|preferences|option|options",
    "error|errors|exception|crash|failure|fail|failing|failed",
    "time|clock|date|now|timezone|time zone",
    "directions|route|routing|navigation|itinerary",
    "location|place|address|venue|spot|business",
    "distance|travel time|eta",
    "elevation|altitude|height",
    "weather|forecast",
    "reaction|emoji",
    "package|library|dependency|module|crate",
    "script|code|snippet|function|program",
    "javascript|js|script",
    "html|markup|source|dom",
    "style|styles|css|stylesheet",
    "web|internet|online|www",
    "news|headlines|articles",
    "form|field|input|textbox|text box",
    "dropdown|drop down|select|menu|combobox|option",
    "key|keyboard|keystroke|shortcut",
    "console|terminal|shell|command line",
    "network|request|requests|traffic|http",
    "performance|speed|latency|perf",
    "memory|heap|ram",
    "storage|disk|space|volume",
    "cookie|cookies|local storage|localstorage|session storage",
    "entity|entities|node|nodes|knowledge",
    "relation|relations|relationship|edge|link",
    "helm|chart|release",
    "namespace|ns",
    "port forward|port forwarding|tunnel",
    "story|stories|ticket|card|task",
    "epic|milestone",
    "comment|comments|note|notes|review",
    "status|state|health|result",
    "snapshot|dump|backup",
    "cost|price|billing|spend|invoice",
    "payment|charge|transaction",
    "customer|client|buyer",
    "contact|lead|person",
    "deal|opportunity",
    "company|organization|account",
];

/// One vocabulary entry after stemming: the stems of its words.
type Entry = Vec<String>;

/// The stemmed groups and an index from every entry's first stem to the (group, entry) pairs
/// that start with it.
pub struct Vocabulary {
    groups: Vec<Vec<Entry>>,
    by_first: HashMap<String, Vec<(usize, usize)>>,
}

/// The shared vocabulary, stemmed on first use.
pub fn vocabulary() -> &'static Vocabulary {
    static VOCABULARY: OnceLock<Vocabulary> = OnceLock::new();
    VOCABULARY.get_or_init(|| Vocabulary::new(GROUPS))
}

/// An expansion found for a query: the stems it adds and the query positions it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Expansion {
    /// The stems of the entry the query matched, as typed (for explanations).
    pub matched: Vec<String>,
    /// Query positions of the matched entry (consecutive).
    pub positions: std::ops::Range<usize>,
    /// The stems of one other entry of the same group.
    pub stems: Vec<String>,
}

impl Vocabulary {
    /// Stems and indexes `groups` (each `|`-separated, as in [`GROUPS`]).
    pub fn new(groups: &[&str]) -> Vocabulary {
        let mut stemmed = Vec::with_capacity(groups.len());
        let mut by_first: HashMap<String, Vec<(usize, usize)>> = HashMap::new();
        for (g, group) in groups.iter().enumerate() {
            let mut entries: Vec<Entry> = Vec::new();
            for entry in group.split('|') {
                let mut stems = Vec::new();
                for_each_split_word(entry, |w| stems.push(stem(w)));
                if stems.is_empty() || entries.contains(&stems) {
                    continue;
                }
                by_first
                    .entry(stems[0].clone())
                    .or_default()
                    .push((g, entries.len()));
                entries.push(stems);
            }
            stemmed.push(entries);
        }
        Vocabulary {
            groups: stemmed,
            by_first,
        }
    }

    /// Every expansion of the stemmed query `stems`: for each entry found in the query (longest
    /// phrases included), each other entry of its group. An entry already in the query adds
    /// nothing new but may still be listed; the caller keeps typed words at full weight.
    pub fn expand(&self, stems: &[String]) -> Vec<Expansion> {
        let mut out: Vec<Expansion> = Vec::new();
        for start in 0..stems.len() {
            let Some(candidates) = self.by_first.get(&stems[start]) else {
                continue;
            };
            for &(g, e) in candidates {
                let entry = &self.groups[g][e];
                let end = start + entry.len();
                if end > stems.len() || stems[start..end] != entry[..] {
                    continue;
                }
                for (other_index, other) in self.groups[g].iter().enumerate() {
                    if other_index == e {
                        continue;
                    }
                    let duplicate = out
                        .iter()
                        .any(|x| x.positions == (start..end) && x.stems == *other);
                    if !duplicate {
                        out.push(Expansion {
                            matched: entry.clone(),
                            positions: start..end,
                            stems: other.clone(),
                        });
                    }
                }
            }
        }
        out
    }

    /// Every entry found in the stemmed `stems`: its group (an index into [`GROUPS`]) and the
    /// positions it covers, phrases matched on consecutive stems, in order of position.
    pub fn entries_in(&self, stems: &[String]) -> Vec<(usize, std::ops::Range<usize>)> {
        let mut out = Vec::new();
        for start in 0..stems.len() {
            for &(g, e) in self.by_first.get(&stems[start]).into_iter().flatten() {
                let entry = &self.groups[g][e];
                let end = start + entry.len();
                if end <= stems.len() && stems[start..end] == entry[..] {
                    out.push((g, start..end));
                }
            }
        }
        out
    }

    /// The number of groups.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    /// Whether there are no groups.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::search::tokenize::stem;

    fn stems(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        for_each_split_word(text, |w| out.push(stem(w)));
        out
    }

    fn expansions_of(v: &Vocabulary, query: &str) -> Vec<String> {
        v.expand(&stems(query))
            .into_iter()
            .map(|e| e.stems.join(" "))
            .collect()
    }

    #[test]
    fn a_word_brings_its_group() {
        let v = Vocabulary::new(&["delete|remove|erase", "repository|repo"]);
        let got = expansions_of(&v, "removing a repo");
        assert!(got.contains(&stem("delete")), "{got:?}");
        assert!(got.contains(&stem("erase")), "{got:?}");
        assert!(got.contains(&stem("repository")), "{got:?}");
        assert!(
            !got.contains(&stem("remove")),
            "typed words are not expansions: {got:?}"
        );
    }

    #[test]
    fn phrases_match_consecutive_words_both_ways() {
        let v = Vocabulary::new(&["pull request|pr|merge request"]);
        let from_pr = v.expand(&stems("list pr files"));
        assert!(from_pr.iter().any(|e| e.stems == stems("pull request")));
        assert!(from_pr.iter().all(|e| e.positions == (1..2)));
        let from_phrase = v.expand(&stems("open pull requests"));
        assert!(from_phrase.iter().any(|e| e.stems == ["pr"]));
        assert!(from_phrase.iter().all(|e| e.positions == (1..3)));
        // The words of a phrase apart from each other are not the phrase.
        assert!(v.expand(&stems("pull the request")).is_empty());
    }

    #[test]
    fn a_word_in_two_groups_expands_to_both() {
        let v = Vocabulary::new(&["create|open", "navigate|open"]);
        let got = expansions_of(&v, "open");
        assert_eq!(got, [stem("create"), stem("navigate")]);
    }

    #[test]
    fn unknown_words_expand_to_nothing() {
        assert!(vocabulary().expand(&stems("zebra quokka")).is_empty());
    }

    /// The shipped vocabulary covers the CRUD verbs' everyday synonyms and the common objects
    /// (repo, ticket, pull request).
    #[test]
    fn shipped_groups_cover_the_core_actions_and_objects() {
        let v = vocabulary();
        assert!(v.len() > 100);
        let pairs = [
            ("remove", "delete"),
            ("rm", "delete"),
            ("destroy", "delete"),
            ("fetch", "get"),
            ("retrieve", "get"),
            ("enumerate", "list"),
            ("modify", "update"),
            ("patch", "update"),
            ("make", "create"),
            ("new", "create"),
            ("repo", "repository"),
            ("ticket", "issue"),
        ];
        for (typed, wanted) in pairs {
            let got = expansions_of(v, typed);
            assert!(
                got.contains(&stem(wanted)),
                "{typed} should bring {wanted}: {got:?}"
            );
        }
        let pr = v.expand(&stems("pr"));
        assert!(pr.iter().any(|e| e.stems == stems("pull request")));
    }

    #[test]
    fn the_action_groups_come_before_the_objects() {
        assert!(GROUPS[0].starts_with("create|"));
        assert!(GROUPS[ACTION_GROUPS - 1].starts_with("invite|"));
        assert!(GROUPS[ACTION_GROUPS].starts_with("repository|"));
        let v = Vocabulary::new(&["create|add|set up", "delete|remove", "repository|repo"]);
        assert_eq!(
            v.entries_in(&stems("remove the repo")),
            [(1, 0..1), (2, 2..3)]
        );
        assert_eq!(v.entries_in(&stems("set up, add")), [(0, 0..2), (0, 2..3)]);
        assert_eq!(v.entries_in(&stems("set the repo up")), [(2, 2..3)]);
    }

    #[test]
    fn every_entry_has_words() {
        for group in GROUPS {
            assert!(
                group.split('|').count() >= 2,
                "a group needs two entries: {group}"
            );
            for entry in group.split('|') {
                assert!(!stems(entry).is_empty(), "empty entry in {group}");
            }
        }
    }
}
