//! `session_search`: full-text search over stored sessions, as a tool a model can call
//! (toolset `session_search`, deferred behind the tool-search bridge by default).
//!
//! What a caller may see: its own session tree, always; for a tree started by `troupe chat`,
//! the other chat sessions of the store too (the local user's own history). Sessions opened
//! over HTTP, by board workers or by programs see only their own tree: a model working for one
//! client or one task never reads another's conversation.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use troupe_tools::{CallContext, ToolDef, ToolHints};

use super::SessionStore;

/// The tool's name and toolset.
pub const SESSION_SEARCH: &str = "session_search";

/// Matches returned when the model asks for no number.
const DEFAULT_LIMIT: usize = 10;
/// The most matches one call returns.
const MAX_LIMIT: usize = 50;

/// The arguments of `session_search`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Arguments {
    /// Words to find (all of them, in any order, stemmed: "deploying" finds "deployed").
    query: String,
    /// How many matches at most (default 10, at most 50).
    #[serde(default)]
    limit: Option<usize>,
}

/// The `session_search` tool over `store`.
pub fn session_search_tool(store: SessionStore) -> ToolDef {
    crate::tool_fn::tool_fn_with_context(
        SESSION_SEARCH,
        "Search earlier conversations (messages, tool calls and their results) for words. Returns matching messages with their session id, position, role and the text around the match. Searches only conversations this session may see.",
        move |args: Arguments, ctx: CallContext| {
            let store = store.clone();
            async move {
                if !args.query.chars().any(char::is_alphanumeric) {
                    return Err(
                        "`query` has no words to search for; send one or more words, such as {\"query\": \"deploy staging\"}".to_string(),
                    );
                }
                let limit = args.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT);
                let scope = store
                    .scope_of(&ctx.session_id)
                    .await
                    .map_err(|e| format!("the session store could not be read: {e}"))?;
                let matches = store
                    .search(&args.query, Some(scope), limit)
                    .await
                    .map_err(|e| format!("the session store could not be read: {e}"))?;
                Ok(json!({
                    "query": args.query,
                    "count": matches.len(),
                    "matches": matches,
                }))
            }
        },
    )
    .with_toolset(SESSION_SEARCH)
    .with_hints(ToolHints {
        read_only: true,
        ..ToolHints::default()
    })
}
