//! `tool_search`: keyword search over the deferred tools of a view. Each query gets its own
//! group of matching names; one shared map describes every matched tool once. The index is the
//! view's cached [`Catalog`], so a call only ranks. Called by the session
//! when the model uses `tool_search`; with hosted connectors in scope, [`tool_search_with_connectors`]
//! also asks the tool gateway.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::args::{limit, string_list};
use super::tool_error;
use crate::config::{Ranking, ToolSearchConfig};
use crate::connectors::Failure;
use crate::connectors::names::is_connector_name;
use crate::connectors::remote::{failure_field, remote_groups};
use crate::search::Catalog;
use crate::search::explain::{explain_hybrid, explain_reference};
use crate::search::hybrid::COVERAGE_FLOOR;
use crate::search::merged::MergedDoc;
use crate::search::semantic::SemanticReady;
use crate::tool::ToolDef;
use crate::view::ToolsetView;

/// Most queries one `tool_search` call may carry.
pub const MAX_QUERIES_PER_CALL: usize = 7;

const EXAMPLE_QUERIES: &str = "[\"github create issue\", \"slack send message\"]";

const NO_MATCH_HINT: &str = "Nothing matched these words, yet the sources listed above are connected and their tools \
can be called. Search again with a source's name plus a concrete action or object before deciding the capability \
does not exist.";

/// Answers a `tool_search` call from the local catalog alone: `{"queries", "total_available",
/// "results", "tools"}`.
///
/// `results` holds `{"query", "matches"}` per query, in order; a query with no match on a
/// non-empty catalog also gets `available_sources` (tool counts per source) and a `hint`.
/// `tools` maps each matched name, in first-seen order, to its source, description and
/// required arguments. Bad arguments give `{"error": ...}` saying what to send instead.
pub fn tool_search(view: &ToolsetView, config: &ToolSearchConfig, args: &Value) -> Value {
    match LocalPass::new(view, config, args) {
        Ok(pass) => pass.answer(view, None),
        Err(error) => error,
    }
}

/// [`tool_search`] with hosted connectors: when the view grants them and some query has fewer
/// local matches than the limit, the gateway is asked once for every query (bounded by its
/// time-out), and each query with connector hits is ranked again over its local and connector
/// tools together. A gateway that fails leaves the local results, with a `connectors` field
/// saying why.
pub async fn tool_search_with_connectors(
    view: &ToolsetView,
    config: &ToolSearchConfig,
    args: &Value,
) -> Value {
    let pass = match LocalPass::new(view, config, args) {
        Ok(pass) => pass,
        Err(error) => return error,
    };
    let remote = match view.connectors() {
        Some(gateway) if pass.strong.iter().any(|&n| n < pass.limit) => Some(
            gateway
                .search(&pass.queries)
                .await
                .and_then(|payload| remote_groups(&payload, &pass.queries)),
        ),
        _ => None,
    };
    pass.answer(view, remote)
}

/// The local half of a search: the parsed arguments, the catalog and each query's local hits.
struct LocalPass {
    queries: Vec<String>,
    limit: usize,
    ranking: Ranking,
    catalog: Arc<Catalog>,
    hits: Vec<Vec<usize>>,
    /// Per query, the local matches that answer it well: every match under the reference
    /// ranking; under the hybrid one, those holding most of the query's weight (the hybrid
    /// ranking fills its groups with near misses, which must not keep the gateway from being
    /// asked).
    strong: Vec<usize>,
}

impl LocalPass {
    fn new(view: &ToolsetView, config: &ToolSearchConfig, args: &Value) -> Result<Self, Value> {
        let (queries, limit) = search_args(config, args)?;
        let catalog = view.catalog(&config.defer);
        // Never waits: until the tool embeddings are ready, the lexical legs answer alone.
        let semantic = match config.ranking {
            Ranking::Hybrid => catalog.semantic(config),
            Ranking::Reference => None,
        };
        let mut hits = Vec::with_capacity(queries.len());
        let mut strong = Vec::with_capacity(queries.len());
        for query in &queries {
            match config.ranking {
                Ranking::Reference => {
                    let found = catalog.search(query, limit);
                    strong.push(found.len());
                    hits.push(found);
                }
                Ranking::Hybrid => {
                    let answer = catalog.hybrid_search(query, limit, semantic.as_deref());
                    let matches = answer.matches();
                    strong.push(
                        matches
                            .iter()
                            .filter(|m| m.exact || m.coverage >= COVERAGE_FLOOR)
                            .count(),
                    );
                    hits.push(matches.iter().map(|m| m.doc).collect());
                }
            }
        }
        Ok(LocalPass {
            queries,
            limit,
            ranking: config.ranking,
            catalog,
            hits,
            strong,
        })
    }

    /// The answer, with each query's connector tools (when the gateway answered) ranked in the
    /// same pass as the local ones.
    fn answer(
        self,
        view: &ToolsetView,
        remote: Option<Result<Vec<Vec<Arc<ToolDef>>>, Failure>>,
    ) -> Value {
        let catalog = &self.catalog;
        let (groups, failure) = match remote {
            Some(Ok(groups)) => (groups, None),
            Some(Err(failure)) => (Vec::new(), Some(failure)),
            None => (Vec::new(), None),
        };
        let mut results = Vec::with_capacity(self.queries.len());
        let mut tools = Map::new();
        let mut remote_listed = 0usize;
        for (i, query) in self.queries.iter().enumerate() {
            let extra = groups.get(i).filter(|g| !g.is_empty());
            // With connector hits, the query is ranked over local and connector tools together
            // (statistics over both), so local matches may change. The semantic leg covers only
            // the local tools, so that ranking is the lexical one.
            let hits: Vec<(&Catalog, usize)>;
            let extra_catalog;
            let merged;
            match (extra, self.ranking) {
                (None, _) => hits = self.hits[i].iter().map(|&doc| (&**catalog, doc)).collect(),
                // The reference ranking sums the statistics of the local index and a small one
                // of the connector tools: the catalog is not indexed again.
                (Some(extra), Ranking::Reference) => {
                    extra_catalog = Catalog::build(extra.clone());
                    hits = catalog
                        .search_with(&extra_catalog, query, self.limit)
                        .into_iter()
                        .map(|doc| match doc {
                            MergedDoc::Local(doc) => (&**catalog, doc),
                            MergedDoc::Extra(doc) => (&extra_catalog, doc),
                        })
                        .collect();
                }
                (Some(extra), Ranking::Hybrid) => {
                    let mut defs = catalog.defs().to_vec();
                    defs.extend(extra.iter().cloned());
                    merged = Catalog::build(defs);
                    hits = rank(&merged, self.ranking, query, self.limit, None)
                        .into_iter()
                        .map(|doc| (&merged, doc))
                        .collect();
                }
            }
            let mut matches = Vec::with_capacity(hits.len());
            for (ranked, doc) in hits {
                let name = &ranked.defs()[doc].name;
                if !tools.contains_key(name) {
                    if is_connector_name(name) {
                        remote_listed += 1;
                    }
                    tools.insert(name.clone(), ranked.record(doc));
                }
                matches.push(Value::String(name.clone()));
            }
            let mut group = Map::new();
            group.insert("query".into(), Value::String(query.clone()));
            let empty = matches.is_empty();
            group.insert("matches".into(), Value::Array(matches));
            if empty && !catalog.is_empty() {
                let sources: Vec<Value> = catalog
                    .source_counts()
                    .iter()
                    .map(|(name, count)| json!({"name": name, "tool_count": count}))
                    .collect();
                group.insert("available_sources".into(), Value::Array(sources));
                group.insert("hint".into(), Value::String(NO_MATCH_HINT.into()));
            }
            results.push(Value::Object(group));
        }

        let mut out = Map::new();
        out.insert("queries".into(), json!(self.queries));
        out.insert(
            "total_available".into(),
            json!(catalog.len() + remote_listed),
        );
        out.insert("results".into(), Value::Array(results));
        out.insert("tools".into(), Value::Object(tools));
        let starting = view.sources_starting();
        if !starting.is_empty() {
            out.insert(
                "note".into(),
                Value::String(format!(
                    "Still starting, so not searched yet: {}. Their tools become available as soon as they are ready; search again in a moment if nothing here fits.",
                    starting.join(", ")
                )),
            );
            out.insert("sources_starting".into(), json!(starting));
        }
        if let Some(failure) = failure {
            out.insert("connectors".into(), failure_field(failure, "searched", &[]));
        }
        Value::Object(out)
    }
}

/// The top `limit` tools of `catalog` for `query` under `ranking`.
fn rank(
    catalog: &Catalog,
    ranking: Ranking,
    query: &str,
    limit: usize,
    semantic: Option<&SemanticReady>,
) -> Vec<usize> {
    match ranking {
        Ranking::Reference => catalog.search(query, limit),
        Ranking::Hybrid => catalog
            .hybrid_search(query, limit, semantic)
            .matches()
            .iter()
            .map(|m| m.doc)
            .collect(),
    }
}

/// The queries and the per-query limit of a `tool_search` call, or the error a model gets.
fn search_args(config: &ToolSearchConfig, args: &Value) -> Result<(Vec<String>, usize), Value> {
    let Some(args) = args.as_object() else {
        return Err(tool_error(format!(
            "tool_search takes an object of arguments, for example {{\"queries\": {EXAMPLE_QUERIES}}}."
        )));
    };
    let queries = string_list(args, "queries", false)
        .map_err(|e| tool_error(e.message("queries", EXAMPLE_QUERIES)))?;
    if queries.len() > MAX_QUERIES_PER_CALL {
        return Err(tool_error(format!(
            "Too many queries: {} sent, at most {MAX_QUERIES_PER_CALL} per call. Retry with fewer, more focused queries, \
or spread them over several tool_search calls.",
            queries.len()
        )));
    }
    Ok((queries, limit(args, config)))
}

/// Explains, for a person, how the configured ranking answers a `tool_search` call: per query,
/// what the query became, the "nothing fits" decision and, per tool, which legs found it and
/// why. Bad arguments give the error a model would get. Uses the tool embeddings only if they
/// are ready (see [`crate::search::Catalog::semantic_wait`]).
pub fn tool_search_explain(
    view: &ToolsetView,
    config: &ToolSearchConfig,
    args: &Value,
) -> Result<String, Value> {
    let (queries, limit) = search_args(config, args)?;
    let catalog = view.catalog(&config.defer);
    let semantic = match config.ranking {
        Ranking::Hybrid => catalog.semantic(config),
        Ranking::Reference => None,
    };
    let mut out = format!("{} tools searched\n", catalog.len());
    for query in &queries {
        out.push('\n');
        out.push_str(&match config.ranking {
            Ranking::Reference => explain_reference(&catalog, query, limit),
            Ranking::Hybrid => explain_hybrid(&catalog, query, limit, semantic.as_deref()),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::{Registry, ToolDef};

    fn view() -> ToolsetView {
        Registry::with_tools([
            ToolDef::new("terminal", "Run a shell command.", json!({})).with_toolset("core"),
            ToolDef::new(
                "gh_create_issue",
                "Open a GitHub issue.",
                json!({"properties": {"repo": {}}, "required": ["repo", 3]}),
            )
            .with_toolset("mcp-github"),
            ToolDef::new("gh_list_issues", "List GitHub issues.", json!({}))
                .with_toolset("mcp-github"),
            ToolDef::new("board_add", "Add a card.", json!({})).with_toolset("kanban"),
        ])
        .view_all()
    }

    #[test]
    fn groups_and_shared_records() {
        let out = tool_search(
            &view(),
            &ToolSearchConfig::default(),
            &json!({"queries": ["github issue", "issues"]}),
        );
        let keys: Vec<&String> = out.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["queries", "total_available", "results", "tools"]);
        assert_eq!(out["total_available"], 3);
        assert_eq!(out["results"][0]["query"], "github issue");
        assert_eq!(out["results"][1]["matches"].as_array().unwrap().len(), 2);
        let tools = out["tools"].as_object().unwrap();
        assert_eq!(tools.len(), 2);
        assert_eq!(
            tools["gh_create_issue"],
            json!({"source": "mcp", "source_name": "mcp-github", "description": "Open a GitHub issue.", "required": ["repo"]})
        );
    }

    #[test]
    fn no_match_lists_sources() {
        let out = tool_search(
            &view(),
            &ToolSearchConfig::default(),
            &json!({"queries": "terminal"}),
        );
        let group = &out["results"][0];
        assert_eq!(group["matches"], json!([]));
        assert_eq!(
            group["available_sources"],
            json!([{"name": "github", "tool_count": 2}, {"name": "kanban", "tool_count": 1}])
        );
        assert!(group["hint"].is_string());
    }

    #[test]
    fn empty_catalog_has_no_sources() {
        let view =
            Registry::with_tools(
                [ToolDef::new("terminal", "Run.", json!({})).with_toolset("core")],
            )
            .view_all();
        let out = tool_search(
            &view,
            &ToolSearchConfig::default(),
            &json!({"queries": ["x"]}),
        );
        assert_eq!(out["results"][0], json!({"query": "x", "matches": []}));
        assert_eq!(out["total_available"], 0);
    }

    #[test]
    fn bad_arguments_are_errors() {
        let c = ToolSearchConfig::default();
        for args in [
            json!("github"),
            json!({}),
            json!({"queries": 5}),
            json!({"queries": [""]}),
        ] {
            let out = tool_search(&view(), &c, &args);
            assert!(
                out["error"].as_str().is_some_and(|e| e.contains("queries")),
                "{args}: {out}"
            );
        }
        let eight: Vec<String> = (0..8).map(|i| format!("q{i}")).collect();
        let out = tool_search(&view(), &c, &json!({ "queries": eight }));
        assert!(out["error"].as_str().unwrap().contains('7'));
        let seven: Vec<String> = (0..7).map(|i| format!("q{i}")).collect();
        assert!(tool_search(&view(), &c, &json!({ "queries": seven }))["error"].is_null());
    }

    #[test]
    fn limit_applies_per_query() {
        let out = tool_search(
            &view(),
            &ToolSearchConfig::default(),
            &json!({"queries": ["github"], "limit": "1"}),
        );
        // Both hold `github` twice; the shorter text ranks first.
        assert_eq!(out["results"][0]["matches"], json!(["gh_list_issues"]));
    }

    #[test]
    fn cached_catalog_answers_like_a_fresh_build() {
        let registry = Registry::with_tools([
            ToolDef::new("gh_create_issue", "Open a GitHub issue.", json!({}))
                .with_toolset("mcp-github"),
            ToolDef::new("gh_list_issues", "List GitHub issues.", json!({}))
                .with_toolset("mcp-github"),
        ]);
        // The reference ranking, compared with the reference search of a fresh build.
        let c = ToolSearchConfig {
            ranking: Ranking::Reference,
            ..ToolSearchConfig::default()
        };
        let args = json!({"queries": ["github issue", "list issues", "linear"]});
        let fresh = |view: &ToolsetView| {
            let catalog = crate::search::Catalog::build(view.tools().to_vec());
            let names: Vec<Vec<String>> = ["github issue", "list issues", "linear"]
                .iter()
                .map(|q| {
                    catalog
                        .search(q, 5)
                        .into_iter()
                        .map(|d| catalog.defs()[d].name.clone())
                        .collect()
                })
                .collect();
            json!(names)
        };
        let matches = |out: &Value| {
            json!(
                out["results"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|g| g["matches"].clone())
                    .collect::<Vec<_>>()
            )
        };
        let view = registry.view_all();
        assert_eq!(matches(&tool_search(&view, &c, &args)), fresh(&view));
        assert_eq!(matches(&tool_search(&view, &c, &args)), fresh(&view));
        // A new tool means a new catalog version: the cached index must not be reused.
        registry.register(
            ToolDef::new("linear_issue", "Create a Linear issue.", json!({}))
                .with_toolset("mcp-linear"),
        );
        let view = view.refreshed().unwrap();
        let out = tool_search(&view, &c, &args);
        assert_eq!(matches(&out), fresh(&view));
        assert_eq!(out["total_available"], 3);
        assert_eq!(out["results"][2]["matches"], json!(["linear_issue"]));
    }
}
