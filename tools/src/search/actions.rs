//! What a query asks a named service to do, against what that service's tools do: the evidence
//! that tells a near miss ("pin the message in the Discord channel" where no Discord tool pins)
//! from a request a tool answers.
//!
//! Actions are the verb groups at the head of the domain vocabulary
//! ([`super::vocabulary::ACTION_GROUPS`]: create, delete, list, send, …). A tool offers the
//! actions its name says (`delete_records`, `list_indices`) and the ones its description says
//! ("Update an issue: resolve, ignore or assign it"); its parameters are left out, as they name
//! options of the one thing the tool does. A query asks the actions its typed words name, apart
//! from the words of the services it names.
//!
//! Reading only a description's opening words was tried: it marked more answerable queries as
//! asking for what their service does not offer ("mark the Sentry error as resolved", where the
//! resolving tool opens with "Update"), and separated fewer absent ones (docs/benchmarks.md).

use std::sync::Arc;

use super::lexical::is_stop_word;
use super::split::for_each_split_word;
use super::tokenize::stem;
use super::vocabulary::{ACTION_GROUPS, vocabulary};
use crate::tool::ToolDef;

/// A set of action groups, bit `g` for group `g` of the vocabulary.
pub type ActionSet = u64;

const _: () = assert!(ACTION_GROUPS <= ActionSet::BITS as usize);

/// The actions a query's stems ask for. A word that also names an object ("post", "message",
/// "record", "check") counts only when no other word asks an action: in "delete the message"
/// the message is what is acted on, in "post it" the post is the action.
pub fn asked_actions(stems: &[String]) -> ActionSet {
    let entries = vocabulary().entries_in(stems);
    let object_at = |at: &std::ops::Range<usize>| {
        entries
            .iter()
            .any(|(o, other)| *o >= ACTION_GROUPS && other == at)
    };
    let actions = entries.iter().filter(|(g, _)| *g < ACTION_GROUPS);
    let plain = actions
        .clone()
        .filter(|(_, at)| !object_at(at))
        .fold(0, |set, (g, _)| set | (1 << g));
    if plain != 0 {
        plain
    } else {
        actions.fold(0, |set, (g, _)| set | (1 << g))
    }
}

/// Every action named in `stems`, objects' words included: what a tool's text offers.
pub fn actions_in(stems: &[String]) -> ActionSet {
    vocabulary()
        .entries_in(stems)
        .into_iter()
        .filter(|(g, _)| *g < ACTION_GROUPS)
        .fold(0, |set, (g, _)| set | (1 << g))
}

/// The actions each tool of a catalog offers, in catalog order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolActions {
    offered: Vec<ActionSet>,
}

impl ToolActions {
    /// Reads each tool's actions from its name and its description.
    pub fn build(defs: &[Arc<ToolDef>]) -> ToolActions {
        let offered = defs
            .iter()
            .map(|def| {
                let mut stems = Vec::new();
                for_each_split_word(&def.name, |w| stems.push(stem(w)));
                // Stop words out, as from a query, so "look it up" reads as "look up".
                let mut described = Vec::new();
                if let Some(description) = &def.description {
                    for_each_split_word(description, |w| {
                        if !is_stop_word(w) {
                            described.push(stem(w));
                        }
                    });
                }
                // Name and description apart: a phrase does not run from one into the other.
                actions_in(&stems) | actions_in(&described)
            })
            .collect();
        ToolActions { offered }
    }

    /// The actions tool `doc` offers (none for an index out of range).
    pub fn of(&self, doc: usize) -> ActionSet {
        self.offered.get(doc).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn stems(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        for_each_split_word(text, |w| out.push(stem(w)));
        out
    }

    #[test]
    fn a_tool_offers_what_its_name_and_description_say() {
        let defs = [
            ("es_list_indices", "List all indices of the cluster."),
            ("get_user", "Retrieve the profile of a user."),
            ("frobnicate", "Use this to delete old rows."),
        ]
        .map(|(n, d)| Arc::new(ToolDef::new(n, d, json!({}))));
        let actions = ToolActions::build(&defs);
        let list = actions_in(&stems("list"));
        let get = actions_in(&stems("get"));
        let delete = actions_in(&stems("delete"));
        assert_ne!(actions.of(0) & list, 0);
        assert_eq!(actions.of(0) & delete, 0);
        assert_ne!(actions.of(1) & get, 0);
        assert_eq!(actions.of(1) & delete, 0);
        assert_ne!(actions.of(2) & delete, 0, "the description says it");
        assert_eq!(actions.of(9), 0);
    }

    #[test]
    fn a_query_asks_the_actions_its_words_name() {
        let asked = asked_actions(&stems("please remove the index"));
        assert_eq!(asked, actions_in(&stems("delete")));
        assert_eq!(actions_in(&stems("the index of the cluster")), 0);
        // A word of two senses asks both.
        let open = actions_in(&stems("open"));
        assert!(open.count_ones() >= 2, "{open:b}");
        // A word that names an object too is an action only when no other word is.
        let delete = actions_in(&stems("delete"));
        assert_eq!(asked_actions(&stems("delete the message")), delete);
        assert_ne!(actions_in(&stems("delete the message")), delete);
        assert_eq!(asked_actions(&stems("post it")), actions_in(&stems("post")));
        assert_ne!(asked_actions(&stems("post it")), 0);
    }
}
