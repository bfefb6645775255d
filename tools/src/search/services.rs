//! Services a query names: the products and platforms software tools are built around (GitHub,
//! Slack, Stripe, Jira, …). A query that names one is about that service, which is evidence the
//! two ranking legs cannot weigh on their own:
//! - a named service that no tool of the catalog serves means nothing fits ("gmail send email" in
//!   a catalog without Gmail), however close the nearest tools are, unless the query names a
//!   served service too: then the absent one is the topic ("post on Slack about the Discord
//!   outage");
//! - a named service that some tools serve means the query's other words must be answered by
//!   those tools ("slack delete message" is not answered by Slack's post-message tool just
//!   because it holds "slack" and "message").
//!
//! A tool serves a service when the service's name is in the tool's name or in its source's label
//! (`mcp-github`, `create_jira_issue`), never from its description, which mentions other services
//! freely. The list is written once for the domain, from the services people connect agents to
//! (code hosting, chat and mail, trackers, documents, clouds, databases, observability, CRM,
//! payments, media); it is not tuned to particular queries. A name that is also an everyday word
//! ("zoom", "linear", "signal") counts only beside one of the service's own objects ("zoom
//! meeting", "linear issue"), so "zoom in on the chart" names no service. Sites people search
//! rather than operate (Wikipedia, YouTube, Reddit) and package registries are left out: "find it
//! on Wikipedia" is a web search, not a request for a Wikipedia tool.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use super::split::for_each_split_word;
use super::tokenize::{for_each_word, stem};
use crate::tool::ToolDef;

/// The services, one string each: names separated by `|` (a name of several words is a phrase),
/// then, for a name that is also an everyday word, `~` and the words of which one must be in the
/// query too.
pub const SERVICES: &[&str] = &[
    // Code hosting, CI and delivery.
    "github|gh",
    "gitlab",
    "bitbucket",
    "gitea",
    "circleci|circle ci",
    "jenkins",
    "travis ci|travisci",
    "buildkite",
    "argo cd|argocd",
    "vercel",
    "netlify",
    "heroku",
    "render ~ deploy|service|web service|blueprint",
    "fly io|flyio",
    "railway ~ deploy|service|project",
    "docker|dockerfile",
    "kubernetes|k8s|kubectl",
    "helm ~ chart|release|install|upgrade|repo",
    "terraform",
    "pulumi",
    "ansible",
    // Clouds.
    "aws|amazon web services",
    "s3 ~ bucket|object|file|upload",
    "ec2",
    "lambda ~ function|invoke|deploy",
    "cloudwatch",
    "dynamodb",
    "azure",
    "gcp|google cloud",
    "bigquery",
    "cloud run",
    "cloudflare",
    "digitalocean|digital ocean",
    "firebase",
    "supabase",
    // Databases and queues.
    "postgres|postgresql|psql",
    "mysql|mariadb",
    "sqlite",
    "mongodb|mongo",
    "redis",
    "elasticsearch|elastic search|opensearch",
    "snowflake",
    "redshift",
    "databricks",
    "cassandra",
    "clickhouse",
    "neo4j",
    "pinecone",
    "kafka",
    "rabbitmq",
    // Observability and incidents.
    "datadog",
    "sentry",
    "grafana",
    "prometheus",
    "new relic|newrelic",
    "splunk",
    "pagerduty|pager duty",
    "opsgenie",
    "honeycomb",
    "launchdarkly|launch darkly",
    // Chat, mail, calls, calendars.
    "slack",
    "discord",
    "microsoft teams|ms teams",
    "telegram",
    "whatsapp",
    "signal ~ message|chat|group",
    "mattermost",
    "zulip",
    "twilio",
    "gmail|google mail",
    "outlook",
    "sendgrid",
    "mailchimp",
    "zoom ~ meeting|call|webinar",
    "google meet",
    "webex",
    "google calendar|gcal",
    "calendly",
    // Trackers and project work.
    "jira",
    "linear ~ issue|ticket|project|cycle|team|board",
    "asana",
    "trello",
    "clickup",
    "monday com|monday ~ board|item|workspace",
    "basecamp",
    "shortcut ~ story|stories|epic|iteration|workflow|objective",
    "youtrack",
    "todoist",
    // Documents and files.
    "notion",
    "confluence",
    "google docs|gdocs",
    "google sheets|gsheets",
    "google drive|gdrive",
    "dropbox",
    "onedrive",
    "sharepoint",
    "airtable",
    "coda ~ doc|table|page",
    "evernote",
    "obsidian ~ note|vault",
    "figma",
    "miro",
    "canva",
    // CRM, support, commerce, payments.
    "hubspot",
    "salesforce",
    "zendesk",
    "intercom",
    "freshdesk",
    "pipedrive",
    "shopify",
    "woocommerce",
    "stripe",
    "paypal",
    "square ~ payment|invoice|order|catalog",
    "quickbooks",
    "xero",
    // Social, media, search.
    "twitter|tweet",
    "facebook",
    "instagram",
    "linkedin",
    "tiktok",
    "mastodon",
    "bluesky",
    "spotify",
    "apple music",
    "soundcloud",
    "google maps",
    "brave search|brave ~ search|web",
    "openai|chatgpt",
    "hugging face|huggingface",
];

/// One service after stemming: its names as stem sequences, and the context stems an everyday
/// name needs.
struct Service {
    /// The first name, as written (for explanations).
    label: String,
    names: Vec<Vec<String>>,
    /// Empty unless the names are everyday words; then one of these must be in the query.
    context: Vec<String>,
}

/// The stemmed service list, with an index from each name's first stem to (service, name).
pub struct Services {
    services: Vec<Service>,
    by_first: HashMap<String, Vec<(usize, usize)>>,
    /// The names' words lowercased but not stemmed, as tool names and labels write them, by
    /// first word: `(service, words)`.
    by_first_word: HashMap<String, Vec<(usize, Vec<String>)>>,
}

/// The shared list, stemmed on first use.
pub fn services() -> &'static Services {
    static SERVICES_LIST: OnceLock<Services> = OnceLock::new();
    SERVICES_LIST.get_or_init(|| Services::new(SERVICES))
}

/// The stems of `text`'s words, camelCase kept whole ("GitHub" is one word): how service names
/// are written and matched in queries.
pub fn stems_of(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for_each_word(text, |w| out.push(stem(w)));
    out
}

/// A service named in a query.
#[derive(Debug, Clone, PartialEq)]
pub struct Mention {
    /// Index of the service in the list.
    pub service: usize,
    /// The service's first name, as written in the list.
    pub label: String,
    /// The query word positions of the name.
    pub positions: Range<usize>,
}

impl Services {
    /// Stems and indexes `entries` (written as in [`SERVICES`]).
    pub fn new(entries: &[&str]) -> Services {
        let mut services = Vec::with_capacity(entries.len());
        let mut by_first: HashMap<String, Vec<(usize, usize)>> = HashMap::new();
        let mut by_first_word: HashMap<String, Vec<(usize, Vec<String>)>> = HashMap::new();
        for entry in entries {
            let (names_part, context_part) = match entry.split_once('~') {
                Some((n, c)) => (n, Some(c)),
                None => (*entry, None),
            };
            let names: Vec<Vec<String>> = names_part
                .split('|')
                .map(stems_of)
                .filter(|s| !s.is_empty())
                .collect();
            if names.is_empty() {
                continue;
            }
            let context: Vec<String> = context_part
                .map(|c| c.split('|').flat_map(stems_of).collect())
                .unwrap_or_default();
            let s = services.len();
            for raw in names_part.split('|') {
                let mut words = Vec::new();
                for_each_word(raw, |w| words.push(w.to_string()));
                if let Some(first) = words.first() {
                    by_first_word
                        .entry(first.clone())
                        .or_default()
                        .push((s, words));
                }
            }
            for (n, name) in names.iter().enumerate() {
                by_first.entry(name[0].clone()).or_default().push((s, n));
            }
            services.push(Service {
                label: names_part
                    .split('|')
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_string(),
                names,
                context,
            });
        }
        Services {
            services,
            by_first,
            by_first_word,
        }
    }

    /// The services named by `stems`, a query's words as [`stems_of`] gives them (stop words
    /// included); where two names overlap, the longest.
    pub fn mentions(&self, stems: &[String]) -> Vec<Mention> {
        let mut out: Vec<Mention> = Vec::new();
        for start in 0..stems.len() {
            let Some(candidates) = self.by_first.get(&stems[start]) else {
                continue;
            };
            let mut best: Option<(usize, usize)> = None;
            for &(s, n) in candidates {
                let name = &self.services[s].names[n];
                let end = start + name.len();
                if end > stems.len() || stems[start..end] != name[..] {
                    continue;
                }
                let context = &self.services[s].context;
                let in_context = context.is_empty()
                    || stems
                        .iter()
                        .enumerate()
                        .any(|(i, w)| !(start..end).contains(&i) && context.contains(w));
                if in_context && best.is_none_or(|(_, e)| end > e) {
                    best = Some((s, end));
                }
            }
            let Some((s, end)) = best else { continue };
            let covered = out.iter().any(|m| m.positions.contains(&start));
            if !covered && !out.iter().any(|m| m.service == s) {
                out.push(Mention {
                    service: s,
                    label: self.services[s].label.clone(),
                    positions: start..end,
                });
            }
        }
        out
    }

    /// Pushes onto `out` every service one of whose names is a run of `words` (lowercased, not
    /// stemmed), context or not: a tool's name or label says what it serves without a sentence
    /// around it.
    fn names_in(&self, words: &[&str], out: &mut Vec<usize>) {
        for start in 0..words.len() {
            for (s, name) in self.by_first_word.get(words[start]).into_iter().flatten() {
                let run = words.get(start..start + name.len());
                if run.is_some_and(|run| run.iter().zip(name).all(|(a, b)| *a == b)) {
                    out.push(*s);
                }
            }
        }
    }

    /// Pushes onto `out` the services named in an identifier (a tool's name or label): its words
    /// as written, and split at camelCase when it has capitals ("createJiraIssue").
    fn names_of(&self, identifier: &str, out: &mut Vec<usize>) {
        let lower = identifier.to_ascii_lowercase();
        let words: Vec<&str> = lower
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|w| !w.is_empty())
            .collect();
        self.names_in(&words, out);
        if identifier.bytes().any(|b| b.is_ascii_uppercase()) {
            let mut split = Vec::new();
            for_each_split_word(identifier, |w| split.push(w.to_string()));
            let split: Vec<&str> = split.iter().map(String::as_str).collect();
            self.names_in(&split, out);
        }
    }

    /// The number of services.
    pub fn len(&self) -> usize {
        self.services.len()
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.services.is_empty()
    }
}

/// Which tools of a catalog serve each listed service: built once per catalog from the tools'
/// names and source labels.
#[derive(Debug, Default)]
pub struct ServedBy {
    /// Service index -> the tools serving it, ascending; a service no tool serves is absent.
    tools: HashMap<usize, Vec<u32>>,
}

impl ServedBy {
    /// Finds, for every service of `list`, the tools of `defs` whose name or label (`labels[i]`)
    /// holds one of its names.
    pub fn build(list: &Services, defs: &[Arc<ToolDef>], labels: &[Option<&str>]) -> ServedBy {
        let mut tools: HashMap<usize, Vec<u32>> = HashMap::new();
        let mut by_label: HashMap<&str, Vec<usize>> = HashMap::new();
        let mut found: Vec<usize> = Vec::new();
        for (doc, def) in defs.iter().enumerate() {
            found.clear();
            list.names_of(&def.name, &mut found);
            if let Some(label) = labels.get(doc).copied().flatten() {
                let of_label = by_label.entry(label).or_insert_with(|| {
                    let mut v = Vec::new();
                    list.names_of(label, &mut v);
                    v
                });
                found.extend_from_slice(of_label);
            }
            found.sort_unstable();
            found.dedup();
            for &s in &found {
                tools.entry(s).or_default().push(doc as u32);
            }
        }
        ServedBy { tools }
    }

    /// The tools serving service `s`, ascending; empty when the catalog lacks it.
    pub fn tools(&self, s: usize) -> &[u32] {
        self.tools.get(&s).map(Vec::as_slice).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn labels_of(m: &[Mention]) -> Vec<&str> {
        m.iter().map(|m| m.label.as_str()).collect()
    }

    fn mentions(query: &str) -> Vec<Mention> {
        services().mentions(&stems_of(query))
    }

    #[test]
    fn names_and_phrases_are_found_in_any_form() {
        assert_eq!(labels_of(&mentions("Send a Gmail message")), ["gmail"]);
        assert_eq!(labels_of(&mentions("open a PR on GitHub")), ["github"]);
        assert_eq!(
            labels_of(&mentions("add a row to google sheets")),
            ["google sheets"]
        );
        assert_eq!(
            labels_of(&mentions("copy the jira tickets to github issues")),
            ["jira", "github"]
        );
        // Stemmed like queries: "kubernetes" and "Mongo" are found through their stems.
        assert_eq!(
            labels_of(&mentions("wipe the mongo database on kubernetes")),
            ["mongodb", "kubernetes"]
        );
        assert!(mentions("list the open pull requests").is_empty());
    }

    #[test]
    fn everyday_names_need_one_of_the_services_objects() {
        assert!(mentions("zoom in on the chart").is_empty());
        assert_eq!(labels_of(&mentions("create a zoom meeting")), ["zoom"]);
        assert!(mentions("fit a linear model").is_empty());
        assert_eq!(labels_of(&mentions("linear create issue")), ["linear"]);
        assert!(mentions("the process got signal 9").is_empty());
        assert!(mentions("keyboard shortcut for search").is_empty());
        assert_eq!(labels_of(&mentions("shortcut create story")), ["shortcut"]);
    }

    #[test]
    fn the_longest_name_wins_where_two_overlap() {
        let m = mentions("search with brave search");
        assert_eq!(labels_of(&m), ["brave search"]);
        assert_eq!(m[0].positions, 2..4);
        let m = mentions("post in microsoft teams");
        assert_eq!(labels_of(&m), ["microsoft teams"]);
    }

    #[test]
    fn tools_serve_a_service_by_name_or_label_not_by_description() {
        let defs: Vec<Arc<ToolDef>> = vec![
            Arc::new(ToolDef::new(
                "create_issue",
                "Create an issue (like a Jira ticket).",
                json!({}),
            )),
            Arc::new(ToolDef::new(
                "createJiraIssue",
                "Create an issue.",
                json!({}),
            )),
            Arc::new(ToolDef::new("post_message", "Post a message.", json!({}))),
        ];
        let labels = [Some("github"), None, Some("slack")];
        let list = services();
        let served = ServedBy::build(list, &defs, &labels);
        let id = |q: &str| mentions(q)[0].service;
        assert_eq!(served.tools(id("github")), [0]);
        assert_eq!(served.tools(id("jira")), [1]);
        assert_eq!(served.tools(id("slack")), [2]);
        assert!(served.tools(id("gmail")).is_empty());
    }

    #[test]
    fn every_entry_is_well_formed() {
        let list = services();
        assert_eq!(list.len(), SERVICES.len(), "no entry is dropped");
        for entry in SERVICES {
            let names = entry.split('~').next().unwrap_or_default();
            for name in names.split('|') {
                assert!(!stems_of(name).is_empty(), "{entry}: an empty name");
            }
        }
    }
}
