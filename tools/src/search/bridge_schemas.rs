//! The three bridge tools as the model sees them: `tool_search`, `tool_describe` and `tool_call`
//! in OpenAI function form, with troupe's own descriptions. The `tool_search` description carries
//! the deferred-tool count and the catalog listing. Used by [`assemble`](mod@super::assemble).

use serde_json::{Value, json};

use super::listing::{Listing, ListingForm};
use crate::config::ToolSearchConfig;

/// The opening of `tool_search` when deferred tools exist.
fn search_opening(deferred_count: usize) -> String {
    format!("Finds tools among {deferred_count} more that load only when needed.")
}

/// The opening of `tool_search` when only hosted connectors are behind it.
const CONNECTOR_OPENING: &str = "Finds hosted connector tools (mail, calendars, issue trackers and similar apps) that load only when needed.";

const SEARCH_GUIDE: &str = "Send several queries at once, one per capability you need; they all run against the same catalog. \
Write each query as keywords, not as a question: the app or service, then the action, then the object \
(`github create issue`, `slack post message`, not `how do I open a ticket?`). \
Every word counts: a word that no tool contains makes its query come back empty. \
Matches come back grouped by query, with one shared map describing each matched tool. \
Next, load the schemas you need with `tool_describe`, then run the tool with `tool_call`. \
Tools you were already given directly need no search.";

const CONNECTOR_NOTE: &str = "Hosted connector tools are named `connectors__<app>__<tool>` and appear in results like any other; \
an app that is not connected yet must first be connected with `manage_connections`.";

const LISTED_PREFACE: &str = "Every deferred tool is named below. If the name you need is there, the tool exists: \
do not tell the user it is unavailable, load it with `tool_describe` \
(no `tool_search` is needed when you already see the exact name).";

const MIXED_PREFACE: &str = "Sources marked 'names left out' still offer every one of their tools; \
find them with `tool_search` before deciding that something is missing.";

const GROUPS_PREFACE: &str = "Search these sources FIRST with `tool_search`: each one below is connected and its tools \
can be called, only their names are not listed here.";

/// The `tool_search` description: what it does, how to query, then the listing with a preface
/// suited to its form. `deferred_count` 0 with `connections` gives the connectors-only variant.
pub fn tool_search_description(
    deferred_count: usize,
    connections: bool,
    listing: &Listing,
) -> String {
    let mut text = if deferred_count == 0 && connections {
        CONNECTOR_OPENING.to_string()
    } else {
        search_opening(deferred_count)
    };
    text.push(' ');
    text.push_str(SEARCH_GUIDE);
    if connections {
        text.push(' ');
        text.push_str(CONNECTOR_NOTE);
    }
    if let Some(listing_text) = &listing.text {
        let preface = match listing.form {
            ListingForm::Groups => GROUPS_PREFACE.to_string(),
            ListingForm::Mixed => format!("{LISTED_PREFACE} {MIXED_PREFACE}"),
            ListingForm::Full | ListingForm::Names => LISTED_PREFACE.to_string(),
            ListingForm::None => String::new(),
        };
        if !preface.is_empty() {
            text.push_str("\n\n");
            text.push_str(&preface);
        }
        text.push_str("\n\n");
        text.push_str(listing_text);
    }
    text
}

/// The `tool_search` schema.
pub fn tool_search_schema(description: String, config: &ToolSearchConfig) -> Value {
    json!({
        "type": "function",
        "function": {
            "name": "tool_search",
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {
                    "queries": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "Keyword queries, one per capability: app or service, action, object \
    (for example ['github create issue', 'gmail fetch emails']). Not sentences: each word must occur in some tool's \
    text or the query finds nothing. A single string counts as one query."
                    },
                    "limit": {
                        "type": "integer",
                        "description": format!(
                            "Most matches per query: {} when left out, at most {}.",
                            config.search_default_limit, config.max_search_limit
                        )
                    }
                },
                "required": ["queries"]
            }
        }
    })
}

/// The `tool_describe` schema.
pub fn tool_describe_schema() -> Value {
    json!({
        "type": "function",
        "function": {
            "name": "tool_describe",
            "description": "Loads the full JSON schemas of tools found with `tool_search`. Call it before `tool_call` \
    whenever you do not know a tool's parameters, and ask for every schema you need in one call.",
            "parameters": {
                "type": "object",
                "properties": {
                    "names": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "Exact tool names as `tool_search` returned them. A single string counts as one name."
                    }
                },
                "required": ["names"]
            }
        }
    })
}

/// The `tool_call` schema.
pub fn tool_call_schema() -> Value {
    json!({
        "type": "function",
        "function": {
            "name": "tool_call",
            "description": "Runs deferred tools. `calls` is an array of {name, arguments}; one call is an array of one. \
    A local tool takes exactly one entry per tool_call. Only connectors__ tools can share a batch: batches that mix \
    local and connector tools, or hold several local ones, are refused. Connector entries run one by one and their \
    results come back in the order sent. Arguments follow each tool's schema (see `tool_describe`); approvals, hooks \
    and policies apply as they do to tools called directly.",
            "parameters": {
                "type": "object",
                "properties": {
                    "calls": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "name": {"type": "string", "description": "The exact name of the tool to run."},
                                "arguments": {"type": "object", "description": "Arguments that match the tool's schema."}
                            },
                            "required": ["name", "arguments"]
                        },
                        "description": "One local tool call, or one or more connector tool calls; never both kinds together."
                    }
                },
                "required": ["calls"]
            }
        }
    })
}

/// The bridge offered while tool sources are still starting and none of their tools has
/// arrived yet: the model can search at once, and the search waits for the servers.
pub fn bridge_schemas_while_starting(starting: &[String], config: &ToolSearchConfig) -> [Value; 3] {
    let description = format!(
        "Finds tools from the MCP servers that are still starting ({}): a search waits for them, \
         then returns the best matches with their parameters. {SEARCH_GUIDE}",
        starting.join(", ")
    );
    [
        tool_search_schema(description, config),
        tool_describe_schema(),
        tool_call_schema(),
    ]
}

/// The three bridge schemas in the order the model sees them.
pub fn bridge_schemas(
    deferred_count: usize,
    connections: bool,
    listing: &Listing,
    config: &ToolSearchConfig,
) -> [Value; 3] {
    [
        tool_search_schema(
            tool_search_description(deferred_count, connections, listing),
            config,
        ),
        tool_describe_schema(),
        tool_call_schema(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn description_carries_count_preface_and_listing() {
        let listing = Listing {
            form: ListingForm::Mixed,
            text: Some("LISTING".into()),
        };
        let d = tool_search_description(42, false, &listing);
        assert!(d.starts_with("Finds tools among 42 more"));
        assert!(d.contains(LISTED_PREFACE) && d.contains(MIXED_PREFACE));
        assert!(d.ends_with("\n\nLISTING"));
        assert!(!d.contains("connectors__"));
    }

    #[test]
    fn connector_variants() {
        let only = tool_search_description(0, true, &Listing::none());
        assert!(only.starts_with(CONNECTOR_OPENING) && only.contains("manage_connections"));
        let both = tool_search_description(3, true, &Listing::none());
        assert!(both.starts_with("Finds tools among 3") && both.contains("connectors__"));
    }

    #[test]
    fn groups_preface_and_shapes() {
        let listing = Listing {
            form: ListingForm::Groups,
            text: Some("L".into()),
        };
        assert!(tool_search_description(1, false, &listing).contains("FIRST"));
        let [search, describe, call] =
            bridge_schemas(1, false, &listing, &ToolSearchConfig::default());
        assert_eq!(
            search["function"]["parameters"]["required"],
            json!(["queries"])
        );
        assert_eq!(describe["function"]["name"], "tool_describe");
        assert_eq!(
            call["function"]["parameters"]["properties"]["calls"]["items"]["required"],
            json!(["name", "arguments"])
        );
    }
}
